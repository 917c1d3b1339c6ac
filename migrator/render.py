"""Everything the user sees. The only module that imports rich; the CLI passes the Consoles in.

stdout carries code (the migrated source, diffs); stderr carries findings, errors and the summary.
When a console is not a styled terminal, code is written as the file's own bytes, untouched, so
`ddp-migrate a.py > b.py` and `ddp-migrate --diff . | git apply` reproduce the migration exactly.
"""
from __future__ import annotations

import sys
from typing import Optional, Union

from rich.console import Console
from rich.text import Text

from migrator.report import Report
from migrator.types import Change, Diagnostic

COLOR_CHOICES = ("auto", "always", "never")

_PATH = "bold"
_CODE = "bold red"
_FIXABLE = "cyan"
_ERROR = "bold red"
_MUTED = "dim"


def make_console(color: str = "auto", *, stderr: bool = False) -> Console:
    """A console on stdout or stderr. 'auto' lets rich decide (a tty, FORCE_COLOR, NO_COLOR, TERM)."""
    if color not in COLOR_CHOICES:
        raise ValueError(f"color must be one of {', '.join(COLOR_CHOICES)}, not {color!r}")
    force = {"auto": None, "always": True, "never": False}[color]
    return Console(
        stderr=stderr,
        force_terminal=force,
        no_color=True if color == "never" else None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )


def is_styled(console: Console) -> bool:
    """Whether to decorate output: a terminal that takes colour. Otherwise output is plain text."""
    return console.is_terminal and not console.no_color and console.color_system is not None


# --------------------------------------------------------------------------- stdout: code


def print_source(console: Console, data: bytes) -> None:
    """The migrated file, as the exact bytes it would have on disk."""
    _write_bytes(console, data)


def print_diff(console: Console, patch: str, encoding: str = "utf-8") -> None:
    """A unified diff: highlighted on a styled terminal, else the raw patch in the file's encoding."""
    if not patch:
        return
    if is_styled(console):
        from rich.syntax import Syntax  # pulls in pygments: only when a terminal shows a diff

        shown = patch.replace("\r\n", "\n").replace("\ufeff", "").rstrip("\n")
        console.print(
            Syntax(shown, "diff", theme="ansi_dark", background_color="default", word_wrap=True),
            soft_wrap=False,
        )
    else:
        _write_bytes(console, patch.encode(encoding, "replace"))


def _write_bytes(console: Console, data: bytes) -> None:
    stream = console.file
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:  # a text-only stream (e.g. io.StringIO in a test): best effort
        stream.write(data.decode("utf-8", "replace"))
        stream.flush()


# --------------------------------------------------------------------------- stderr: findings


def print_change(console: Console, path: str, change: Change) -> None:
    """`path:line:col CODE message`"""
    console.print(_finding(path, change.line, change.col, change.code, change.message, fixable=False))


def print_diagnostic(console: Console, path: str, diagnostic: Diagnostic) -> None:
    """`path:line:col CODE [*] message`, `[*]` when the engine could fix it."""
    console.print(
        _finding(
            path, diagnostic.line, diagnostic.col, diagnostic.code, diagnostic.message, fixable=diagnostic.fixable
        )
    )


def format_finding(path: str, line: int, col: int, code: str, message: str, fixable: bool = False) -> str:
    """The plain text of one finding line (what tests and non-terminals see)."""
    return _finding(path, line, col, code, message, fixable).plain


def _finding(path: str, line: int, col: int, code: str, message: str, fixable: bool) -> Text:
    text = Text()
    text.append(f"{path}:{line}:{col}", style=_PATH)
    text.append(" ")
    text.append(code, style=_CODE)
    if fixable:
        text.append(" ")
        text.append("[*]", style=_FIXABLE)
    text.append(" ")
    text.append(message)
    return text


def print_error(console: Console, message: str) -> None:
    """One line, no traceback: `path:line:col: cannot parse: ...`, `path: internal error: ...`."""
    console.print(Text(message, style=_ERROR))


def print_status(console: Console, message: str) -> None:
    """A per-file status such as `would migrate path`."""
    console.print(Text(message, style=_MUTED))


def print_summary(console: Console, report: Union[Report, str]) -> None:
    console.print(Text(str(report), style="bold"))


def print_traceback(console: Console, exc: Optional[BaseException] = None) -> None:
    """The current exception's traceback (only asked for with --verbose)."""
    import traceback

    if exc is None:
        exc = sys.exc_info()[1]
    if exc is None:
        return
    console.print(Text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip("\n")))
