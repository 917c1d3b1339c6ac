"""Parsing a user's source: libcst's tree, or a SourceParseError that says what CPython would."""
from __future__ import annotations

import ast

import libcst as cst

from migrator.errors import SourceParseError


def parse(source: str) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise _syntax_error(source, exc) from None
    except (RecursionError, MemoryError) as exc:  # pathological input; still not a traceback
        raise SourceParseError(f"{type(exc).__name__} while parsing") from None


def _syntax_error(source: str, exc: cst.ParserSyntaxError) -> SourceParseError:
    """CPython says it best ("Missing parentheses in call to 'print'"), and at the exact place."""
    try:
        ast.parse(source)
    except SyntaxError as error:
        return SourceParseError(error.msg, error.lineno or 0, error.offset or 0)
    except (ValueError, RecursionError, MemoryError):
        pass
    return SourceParseError(_first_line(exc.message), exc.raw_line, exc.raw_column + 1)


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "invalid syntax"
