"""Options for one migration. Frozen: the engine never mutates them."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Dict, FrozenSet, Optional, Tuple


@dataclass(frozen=True)
class Options:
    """What to migrate.

    select / ignore take rule codes, code prefixes ("DDP0") or rule names; an empty
    `select` means every rule.
    """

    select: Tuple[str, ...] = ()
    ignore: Tuple[str, ...] = ()
    # The global batch (`--batch`): "global" divides each training loader's batch_size by the world
    # size, "per-process" keeps it (the global batch grows N times); None: "global" for a
    # DataParallel script (its batch already was the global one), "per-process" otherwise.
    batch: Optional[str] = None
    # Evaluation loaders (`--eval`): "replicated" (None) leaves them whole; "sharded" splits them over
    # the ranks and all-reduces the sums their metric is computed from (rules.sharded_eval).
    eval: Optional[str] = None
    # Scripts that start their own workers with torch.multiprocessing.spawn (`--spawn`): False leaves
    # them as they are (they are distributed already); True turns them into torchrun scripts, or
    # says why not (rules.spawn).
    spawn: bool = False

    def enabled(self, code: str, name: str = "") -> bool:
        """Is the rule with this code (and name) selected and not ignored?"""
        if self.select and not any(_matches(s, code, name) for s in self.select):
            return False
        return not self.ignored(code, name)

    def ignored(self, code: str, name: str = "") -> bool:
        """Is the rule ignored by name (`--ignore`, a config's ignore, a suppression), not just left out of a selection?"""
        return any(_matches(s, code, name) for s in self.ignore)

    def fix_enabled(self, code: str) -> bool:
        """Does the fix with this code run? As `enabled`, with what fixes rely on each other resolved:
        a selected fix pulls in the fixes it requires (`--select DDP003` sets up the process group
        too), and a fix whose requirement is ignored is off (`--ignore DDP001` leaves no wrap, no
        sampler: they would not run without a process group). What is written always runs."""
        return code in self._fixes[0]

    @property
    def dropped_fixes(self) -> Dict[str, str]:
        """Selected fixes turned off because a fix they require is ignored: code -> the ignored one."""
        return self._fixes[1]

    @cached_property
    def _fixes(self) -> Tuple[FrozenSet[str], Dict[str, str]]:
        from migrator.codes import CODES, REQUIRES

        on = {code for code, name in CODES if self.enabled(code, name)}
        off = {code for code, name in CODES if self.ignored(code, name)}
        pending = sorted(on)
        while pending:  # pull in what the selected fixes rely on, unless it is ignored by name
            for required in REQUIRES.get(pending.pop(), ()):
                if required not in on and required not in off:
                    on.add(required)
                    pending.append(required)
        dropped: Dict[str, str] = {}
        changed = True
        while changed:  # then turn off every fix whose requirement is not on, transitively
            changed = False
            for code in sorted(on):
                missing = next((r for r in REQUIRES.get(code, ()) if r not in on), None)
                if missing is not None:
                    on.discard(code)
                    dropped[code] = dropped.get(missing, missing)  # name the ignored one, not a dropped one
                    changed = True
        return frozenset(on), dropped


def dropped_note(dropped: Dict[str, str], why: str = "is ignored") -> Tuple[str, ...]:
    """One sentence per fix that others need and that is off: `DDP001 (process-group-setup) is
    ignored, so the fixes that need it are off too: DDP002, DDP003 ...`."""
    from migrator.codes import NAMES

    by_cause: Dict[str, list] = {}
    for code, cause in sorted(dropped.items()):
        by_cause.setdefault(cause, []).append(code)
    return tuple(
        f"{cause} ({NAMES.get(cause, '')}) {why}, so the fixes that need it are off too: {', '.join(codes)}"
        " (what ddp-migrate writes must run)"
        for cause, codes in sorted(by_cause.items())
    )


def _matches(selector: str, code: str, name: str) -> bool:
    return code.startswith(selector.upper()) or (bool(name) and selector == name)


#: The values of Options.batch (`--batch`, `batch = ...` in [tool.ddp-migrate]).
BATCH_MODES = ("global", "per-process")
#: The values of Options.eval (`--eval`, `eval = ...` in [tool.ddp-migrate]).
EVAL_MODES = ("replicated", "sharded")
