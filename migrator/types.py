"""Plain data returned by the engine. No behaviour beyond small derived properties."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Tuple


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

    @property
    def changed(self) -> bool:
        return self.code != self.original
