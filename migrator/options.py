"""Options for one migration. Frozen: the engine never mutates them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Options:
    """What to migrate.

    select / ignore take rule codes, code prefixes ("DDP0") or rule names; an empty
    `select` means every rule.
    """

    select: Tuple[str, ...] = ()
    ignore: Tuple[str, ...] = ()
