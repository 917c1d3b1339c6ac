"""What project mode is given (a file after the per-file engine) and what it gives back."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Tuple

from migrator.context import FileContext
from migrator.types import Change, Diagnostic

# Words of a module that runs several processes itself (or through a framework): never planned.
_DISTRIBUTED_WORDS = (
    "init_process_group", "DistributedDataParallel", "DistributedSampler", "FullyShardedDataParallel",
    "import accelerate", "from accelerate", "lightning", "deepspeed", "horovod", "mp.spawn",
)


@dataclass(frozen=True)
class ProjectFile:
    """A Python file as the CLI has it after the per-file engine."""

    path: str  # real path
    display: str
    text: str  # as read
    code: Optional[str]  # the engine's output; None when only checked (--check without --diff)
    changes: Tuple[Change, ...] = ()
    diagnostics: Tuple[Diagnostic, ...] = ()
    distributed: bool = False  # set up for several processes already (api's Result.distributed)
    models: Tuple[Tuple[str, str], ...] = ()  # the models the engine wrapped, and where (api's Result.models)

    @property
    def codes(self) -> FrozenSet[str]:
        """The codes of what the engine reported on it."""
        return frozenset(d.code for d in self.diagnostics)


@dataclass(frozen=True)
class Update:
    """What project mode adds to a file's outcome."""

    code: Optional[str]  # the file's new code (None: check mode, or unchanged)
    changes: Tuple[Change, ...] = ()
    diagnostics: Tuple[Diagnostic, ...] = ()
    dropped: FrozenSet[str] = field(default_factory=frozenset)  # diagnostic codes the plan answers
    # The per-file migration of this script must not be written: a module it trains through wraps
    # the model in DataParallel itself (a DataParallel around DDP breaks); the file stays as it was.
    revert: bool = False
    # The file was migrated again, with the module it trains through (migrator.project.trainers):
    # these changes and diagnostics are its outcome now, not additions to the per-file one.
    replaces: bool = False

    def then(self, later: Optional["Update"]) -> "Update":
        """This update followed by `later`, planned on the code this one made."""
        if later is None:
            return self
        kept = tuple(d for d in self.diagnostics if d.code not in later.dropped)
        return Update(
            later.code if later.code is not None else self.code,
            tuple(sorted(self.changes + later.changes, key=lambda c: (c.line, c.col))),
            kept + later.diagnostics,
            self.dropped | later.dropped,
            self.revert or later.revert,
            self.replaces or later.replaces,
        )


def relative(path: str, start: str) -> str:
    """`path` as a file beside `start` would name it (`utils/saver.py`, `../solver.py`)."""
    try:
        return os.path.relpath(path, os.path.dirname(start)).replace(os.sep, "/")
    except ValueError:
        return path


def plannable(path: str, text: Optional[str]) -> bool:
    """May project mode change this module? Read, no test module, not distributed already."""
    if text is None or FileContext(path=path).tests(text):
        return False
    return not any(word in text for word in _DISTRIBUTED_WORDS)
