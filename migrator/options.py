"""Options for one migration. Frozen: the engine never mutates them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


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

    def enabled(self, code: str, name: str = "") -> bool:
        """Is the rule with this code (and name) selected and not ignored?"""

        def matches(selector: str) -> bool:
            return code.startswith(selector.upper()) or (bool(name) and selector == name)

        if self.select and not any(matches(s) for s in self.select):
            return False
        return not any(matches(s) for s in self.ignore)


#: The values of Options.batch (`--batch`, `batch = ...` in [tool.ddp-migrate]).
BATCH_MODES = ("global", "per-process")
#: The values of Options.eval (`--eval`, `eval = ...` in [tool.ddp-migrate]).
EVAL_MODES = ("replicated", "sharded")
