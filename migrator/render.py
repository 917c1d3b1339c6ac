"""Everything the user sees in text. The only module that imports rich, and only when it must.

stdout carries code (the migrated source, diffs); stderr carries findings, errors and the summary.
When a console is not a styled terminal, code is written as the file's own bytes, untouched, so
`ddp-migrate a.py > b.py` and `ddp-migrate --diff . | git apply` reproduce the migration exactly.

Start-up matters (a pre-commit hook runs on every commit): finding lines, errors and the summary
are written with plain ANSI styles, and rich (about 0.1 s to import) is loaded only to highlight a
diff on a terminal, to draw the --list-rules table there, or on Windows consoles.
"""
from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING, Any, Optional, Sequence, Tuple, Union

from migrator.terminal import RESET as _RESET, wants_color

if TYPE_CHECKING:  # pragma: no cover
    from migrator.output import FileSummary
    from migrator.report import Report
    from migrator.types import Change, Diagnostic
    from migrator.verify.report import Report as VerifyReport

COLOR_CHOICES = ("auto", "always", "never")

# SGR codes of the few styles used.
_PATH = "1"  # bold
_CODE = "1;31"  # bold red
_FIXABLE = "36"  # cyan
_ERROR = "1;31"
_MUTED = "2"  # dim
_SUMMARY = "1"

Segments = Sequence[Tuple[str, Optional[str]]]  # (text, SGR code or None)


class Console:
    """A stream, and whether to style what goes to it. Decided once, here, never at import time."""

    def __init__(self, file: Optional[IO[str]] = None, *, stderr: bool = False, color: str = "auto") -> None:
        if color not in COLOR_CHOICES:
            raise ValueError(f"color must be one of {', '.join(COLOR_CHOICES)}, not {color!r}")
        self._file = file
        self.stderr = stderr
        self.color = color
        self.styled = wants_color(self.file, color)
        self._rich: Any = None

    @property
    def file(self) -> IO[str]:
        # Looked up on each use: click's test runner swaps sys.stdout/sys.stderr per invocation.
        if self._file is not None:
            return self._file
        return sys.stderr if self.stderr else sys.stdout

    @property
    def is_terminal(self) -> bool:
        try:
            return self.file.isatty()
        except (AttributeError, ValueError):
            return False

    def rich(self) -> Any:
        """A rich Console on the same stream, styled as this one is (imports rich on first use)."""
        if self._rich is None:
            from rich.console import Console as RichConsole

            self._rich = RichConsole(
                file=self.file,
                force_terminal=self.styled,
                no_color=not self.styled,
                highlight=False,
                markup=False,
                emoji=False,
                soft_wrap=True,
            )
        return self._rich

    def line(self, segments: Segments) -> None:
        """Write one line made of styled segments."""
        if self.styled and sys.platform == "win32":  # pragma: no cover - legacy consoles need rich's help
            from rich.text import Text

            text = Text()
            for part, style in segments:
                text.append(part, style=_RICH_STYLES.get(style or "", ""))
            self.rich().print(text)
            return
        if self.styled:
            out = "".join(f"\x1b[{style}m{part}{_RESET}" if style and part else part for part, style in segments)
        else:
            out = "".join(part for part, _ in segments)
        self.file.write(out + "\n")
        self.file.flush()


_RICH_STYLES = {_PATH: "bold", _CODE: "bold red", _FIXABLE: "cyan", _MUTED: "dim"}


def make_console(color: str = "auto", *, stderr: bool = False, file: Optional[IO[str]] = None) -> Console:
    """A console on stdout or stderr. 'auto' colours a terminal (FORCE_COLOR, NO_COLOR, TERM respected)."""
    return Console(file, stderr=stderr, color=color)


def is_styled(console: Console) -> bool:
    """Whether to decorate output: a terminal that takes colour. Otherwise output is plain text."""
    return console.styled


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
        console.rich().print(
            Syntax(shown, "diff", theme="ansi_dark", background_color="default", word_wrap=True),
            soft_wrap=False,
        )
    else:
        _write_bytes(console, patch.encode(encoding, "replace"))


def print_text(console: Console, text: str) -> None:
    """Text as it is (a JSON or SARIF document, GitHub annotations, --explain)."""
    console.file.write(text)
    console.file.flush()


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


def print_change(console: Console, path: str, change: "Change") -> None:
    """`path:line:col: CODE [*] message`: every change is something the tool fixes."""
    console.line(_finding(path, change.line, change.col, change.code, change.message, fixable=True))


def print_diagnostic(console: Console, path: str, diagnostic: "Diagnostic") -> None:
    """`path:line:col: CODE [*] message`, `[*]` when the engine could fix it."""
    console.line(
        _finding(
            path, diagnostic.line, diagnostic.col, diagnostic.code, diagnostic.message, fixable=diagnostic.fixable
        )
    )


def format_finding(path: str, line: int, col: int, code: str, message: str, fixable: bool = False) -> str:
    """The plain text of one finding line (what tests and non-terminals see)."""
    return "".join(part for part, _ in _finding(path, line, col, code, message, fixable))


def _finding(path: str, line: int, col: int, code: str, message: str, fixable: bool) -> Segments:
    # The colon after the column is what editors, CI problem matchers and other linters parse.
    segments = [(f"{path}:{line}:{col}:", _PATH), (" ", None), (code, _CODE)]
    if fixable:
        segments += [(" ", None), ("[*]", _FIXABLE)]
    segments += [(" ", None), (message, None)]
    return segments


def print_error(console: Console, message: str) -> None:
    """One line, no traceback: `path:line:col: cannot parse: ...`, `path: internal error: ...`."""
    console.line([(message, _ERROR)])


def print_status(console: Console, message: str) -> None:
    """A per-file status such as `would migrate path`."""
    console.line([(message, _MUTED)])


def print_file_status(console: Console, path: str, status: str, launch: Sequence[str] = ()) -> None:
    """The one line about a file that changes: `would migrate train.py; check it: ddp-migrate verify
    train.py; run it: torchrun ...` (the verify and torchrun parts for a training script)."""
    text = f"{status} {path}"
    if launch:
        text += f"; check it: {verify_command(path, launch)}; run it: {launch[0]}"
    console.line([(text, _MUTED)])


def print_statistics(console: Console, rows: Sequence[Tuple[int, str, bool, str]]) -> None:
    """--statistics: `count  CODE  [*] name` per code, most frequent first (as ruff prints them)."""
    if not rows:
        return
    width = len(str(max(count for count, _, _, _ in rows)))
    for count, code, fixable, name in rows:
        console.line([(f"{count:>{width}}", None), ("\t", None), (code, _CODE), ("\t", None),
                      ("[*] " if fixable else "    ", _FIXABLE), (name, None)])


def print_summary(console: Console, report: Union["Report", str]) -> None:
    console.line([(str(report), _SUMMARY)])


def print_traceback(console: Console, exc: Union[BaseException, str, None] = None) -> None:
    """A traceback (only asked for with --verbose): an exception's, or one already formatted."""
    if isinstance(exc, str):
        text = exc
    else:
        import traceback

        if exc is None:
            exc = sys.exc_info()[1]
        if exc is None:
            return
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    console.line([(text.rstrip("\n"), None)])


# --------------------------------------------------------------------------- end of run: per-file summary


def print_migration_summary(console: Console, summaries: Sequence["FileSummary"], *, writes: bool) -> None:
    """After the finding lines: per file, the changes by rule, what needs a human (with the rule's
    hint), and the torchrun commands. A rich panel per file on a terminal; indented plain text
    when piped (stable, greppable, what tests read)."""
    if console.styled:
        _rich_summary(console, summaries, writes)
        return
    write = console.file.write
    for summary in summaries:
        write(f"\n{summary.path}: {_verb(summary, writes)}\n")
        if summary.changes:
            write("  changed:\n")
            for code, name, count in summary.changes:
                write(f"    {code} {name} x{count}\n")
        if summary.attention:
            write("  needs a human:\n")
            for item in summary.attention:
                write(f"    line {item.line}: {item.code} {item.message}\n")
                if item.hint:
                    write(f"      hint: {item.hint}\n")
        if summary.launch:
            write("  run it:\n")
            for label, command in zip(_LAUNCH_LABELS, summary.launch):
                write(f"    {label}: {command}\n")
            write(f"    job file: {job_file_hint(summary.path)}\n")
            write(f"  check it first: {verify_command(summary.path, summary.launch)}\n")
    write("\n")
    console.file.flush()


_LAUNCH_LABELS = ("one machine", "several machines")


def job_file_hint(path: str) -> str:
    """The command that writes the several-machines job file (migrator.jobs) for `path`."""
    import shlex

    return f"ddp-migrate launch {shlex.quote(path)} --nodes <nodes> --gpus <gpus> --slurm"


def verify_command(path: str, launch: Sequence[str]) -> str:
    """`ddp-migrate verify SCRIPT [-- ARGS]`: the one-machine torchrun command's script and the
    arguments its parser requires (they follow torchrun's own flags there)."""
    _, _, args = launch[0].partition(f" {path}") if launch else ("", "", "")
    args = args.strip()
    return f"ddp-migrate verify {path}" + (f" -- {args}" if args else "")


def _verb(summary: "FileSummary", writes: bool) -> str:
    if not summary.changed:
        return "unchanged, needs a human"
    return "migrated" if writes else "would be migrated"


def _rich_summary(console: Console, summaries: Sequence["FileSummary"], writes: bool) -> None:
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    rich = console.rich()
    for summary in summaries:
        parts: list = []
        if summary.changes:
            table = Table(box=None, show_header=False, pad_edge=False, title="changed", title_justify="left")
            table.add_column(style="bold red", no_wrap=True)
            table.add_column(no_wrap=True)
            table.add_column(justify="right", style="cyan")
            for code, name, count in summary.changes:
                table.add_row(code, name, f"x{count}")
            parts.append(table)
        if summary.attention:
            table = Table(box=None, show_header=False, pad_edge=False, title="needs a human", title_justify="left")
            table.add_column(style="bold", no_wrap=True)
            table.add_column(style="bold red", no_wrap=True)
            table.add_column()
            for item in summary.attention:
                text = Text(item.message)
                if item.hint:
                    text.append("\nhint: ", style="cyan")
                    text.append(item.hint)
                table.add_row(f"line {item.line}", item.code, text)
            parts.append(table)
        title = Text(f"{summary.path}: {_verb(summary, writes)}", style="bold")
        rich.print(Panel(Group(*parts), title=title, title_align="left", expand=False), soft_wrap=False)
        # Outside the panel and never wrapped, so a terminal copies each command whole.
        for label, command in zip(_LAUNCH_LABELS, summary.launch):
            line = Text(f"  run it on {label}: ", style="dim")
            line.append(command, style="green")
            rich.print(line, soft_wrap=True)
        if summary.launch:
            line = Text("  write its job file: ", style="dim")
            line.append(job_file_hint(summary.path), style="green")
            rich.print(line, soft_wrap=True)
            line = Text("  check it first: ", style="dim")
            line.append(verify_command(summary.path, summary.launch), style="green")
            rich.print(line, soft_wrap=True)


# --------------------------------------------------------------------------- progress


#: A run with more files than this shows a progress bar (on a terminal, without -q).
PROGRESS_MIN_FILES = 20


class _Progress:
    def __init__(self, console: Console, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        # redirect: lines written to sys.stdout/sys.stderr meanwhile are printed above the bar.
        self._bar = Progress(
            TextColumn("migrating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console.rich(),
            transient=True,
        )
        self._task = self._bar.add_task("migrating", total=total)
        self._bar.start()

    def advance(self) -> None:
        self._bar.advance(self._task)

    def stop(self) -> None:
        self._bar.stop()


def wants_progress(console: Console, total: int) -> bool:
    """Only on an interactive, styled terminal, and for more than PROGRESS_MIN_FILES files."""
    return total > PROGRESS_MIN_FILES and console.styled and console.is_terminal


def progress(console: Console, total: int) -> Optional[_Progress]:
    """A transient progress bar on `console` (stderr), or None when one is not wanted."""
    return _Progress(console, total) if wants_progress(console, total) else None


# --------------------------------------------------------------------------- rules


def print_rule_table(console: Console, rows: Sequence[Tuple[str, str, bool, str]]) -> None:
    """--list-rules: code, name, fixable, summary. A rich table on a terminal; aligned plain text when piped."""
    if console.styled:
        from rich.table import Table

        table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
        table.add_column("Code", style="bold red", no_wrap=True)
        table.add_column("Name", no_wrap=True)
        table.add_column("Fixable", justify="center", style="cyan", no_wrap=True)
        table.add_column("Summary")
        for code, name, fixable, summary in rows:
            table.add_row(code, name, "[*]" if fixable else "", summary)
        console.rich().print(table)
        return
    header = ("code", "name", "fixable", "summary")
    cells = [(code, name, "yes" if fixable else "no", summary) for code, name, fixable, summary in rows]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(3)]
    for row in [header, *cells]:
        console.file.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3] + "\n")
    console.file.flush()


# --------------------------------------------------------------------------- ddp-migrate verify

_VERDICT_STYLES = {"PASS": "bold green", "FAIL": "bold red", "SKIP": "yellow"}


def print_verify_table(console: Console, report: "VerifyReport") -> None:
    """verify's checks as a table, one verdict per row with its evidence; then the blocks under it
    (stacks of a hung run, a traceback's end) and the verdict line. Plain text when piped (rich
    draws the same table without colour; ASCII where the stream's encoding needs it)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    rich = console.rich()
    table = Table(box=box.SIMPLE_HEAD, show_header=True, header_style="bold", show_edge=False, pad_edge=False)
    table.add_column("check", no_wrap=True, style="bold")
    table.add_column("verdict", no_wrap=True)
    table.add_column("evidence", overflow="fold")
    for row in report.rows:
        table.add_row(row.name, Text(row.verdict, style=_VERDICT_STYLES.get(row.verdict, "")), row.evidence)
    rich.print(table, soft_wrap=False)
    print_verify_details(console, report)
    print_verify_verdict(console, report)


def print_verify_details(console: Console, report: "VerifyReport") -> None:
    for detail in report.details:
        console.line([(detail.heading + ":", _PATH)])
        for line in detail.text.splitlines():
            console.line([("    " + line, None)])


def print_verify_verdict(console: Console, report: "VerifyReport") -> None:
    style = _SUMMARY if report.exit_status == 0 else _ERROR
    console.line([(report.last_line(), style)])


def print_verify_status(console: Console, message: str) -> None:
    """What verify is doing (a run takes a while): stderr, muted."""
    console.line([(message, _MUTED)])
