"""Exceptions with a place. Every message is one sentence a user can act on."""
from __future__ import annotations

from typing import Optional


class MigrateError(Exception):
    """Base class for everything the engine raises on purpose."""


class SourceParseError(MigrateError):
    """The user's file is not valid Python 3 (the file is left untouched)."""

    def __init__(self, message: str, line: int = 0, col: int = 0, path: Optional[str] = None) -> None:
        self.message = message
        self.line = line
        self.col = col
        self.path = path
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = f"{self.path or '<source>'}:{self.line}:{self.col}"
        return f"{where}: cannot parse: {self.message}"


class IntroducedSyntaxError(MigrateError):
    """The engine produced code that does not parse. A bug in ddp-migrate; nothing is written."""


class ConfigError(MigrateError):
    """Bad options or configuration."""
