"""Plain data returned by the engine. No behaviour beyond small derived properties."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple


@dataclass(frozen=True)
class Change:
    """One rewrite the engine made, located in the *original* source (1-based line and column)."""

    code: str
    line: int
    col: int
    message: str


@dataclass(frozen=True)
class Diagnostic:
    """Something the engine noticed and did not (or could not) rewrite (1-based line and column)."""

    code: str
    line: int
    col: int
    message: str
    fixable: bool = False


@dataclass(frozen=True)
class Result:
    """What `migrate()` returns: the new source plus what was done and what was declined."""

    code: str
    changes: Tuple[Change, ...] = ()
    diagnostics: Tuple[Diagnostic, ...] = ()
    original: str = field(default="", repr=False, compare=False)
    # For a training script: the arguments its own parser requires (positionals as `DATA`,
    # required options as `--config CONFIG`), to print the torchrun command that runs it.
    # None when the file is not something torchrun runs.
    launch_args: Optional[Tuple[str, ...]] = None
    # api.check() plans the changes without carrying them out: `code` stays the original and
    # `pending` says that migrate() would change it.
    pending: bool = False
    # Set up for several processes already (its own process group, DDP, a framework): a script
    # that runs under torchrun as it is, and the caller of the project modules it imports.
    distributed: bool = False
    # The models a training script wraps: (how it spells each, the scope it is wrapped in: `main`,
    # `Trainer` for `self.model`, `<module>`); project mode follows them into its modules.
    models: Tuple[Tuple[str, str], ...] = ()
    # Sentences about the run on this file that are no finding (a suppressed fix that others need).
    notes: Tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Does the migration change the file (or, from api.check(), would it)?"""
        return self.pending or self.code != self.original

    def torchrun_commands(self, script: str) -> Tuple[str, ...]:
        """How to run the migrated script: on one machine, and on several (rendezvous flags)."""
        if self.launch_args is None:
            return ()
        args = " ".join((script, *self.launch_args))
        return (
            f"torchrun --standalone --nproc_per_node=<gpus> {args}",
            f"torchrun --nnodes=<nodes> --nproc_per_node=<gpus> --rdzv_backend=c10d "
            f"--rdzv_endpoint=<first-node-host>:29500 --rdzv_id=<job-id> {args}",
        )
