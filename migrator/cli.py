"""The command line: flags -> one WriteBack mode; for each file read -> migrate -> show/write -> tally.

Thin on purpose: decoding and writing live in files.py, patches in diff.py, counting in report.py,
every byte the user sees in render.py, and the migration itself in api.migrate (Python scripts)
or launcher.migrate_launcher (shell, Make, Docker, YAML, Markdown, reST and notebook files).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Tuple

import click

from migrator import __version__, files, render
from migrator.api import migrate
from migrator.diff import unified_diff
from migrator.errors import IntroducedSyntaxError, MigrateError, SourceParseError
from migrator.launcher import migrate_launcher
from migrator.options import Options
from migrator.report import EXIT_FAILED, Report, WriteBack

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="PATH...")
@click.option(
    "--diff",
    "show_diff",
    is_flag=True,
    help="Print a unified diff (git apply / patch -p1 ready) instead of the migrated source. "
    "The default for several paths or a directory.",
)
@click.option("--in-place", "in_place", is_flag=True, help="Rewrite the files.")
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 if any file would change. With --diff, also print the diffs.",
)
@click.option(
    "--color",
    type=click.Choice(render.COLOR_CHOICES),
    default="auto",
    show_default=True,
    help="Colour the output. 'auto' colours a terminal only; piped diffs are always plain.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr: no findings, no summary.")
@click.option("-v", "--verbose", is_flag=True, help="Show a traceback for internal errors.")
@click.version_option(__version__, "--version", prog_name="ddp-migrate", message="%(prog)s %(version)s")
@click.pass_context
def cli(
    ctx: click.Context,
    paths: Tuple[Path, ...],
    show_diff: bool,
    in_place: bool,
    check: bool,
    color: str,
    quiet: bool,
    verbose: bool,
) -> None:
    """Migrate PyTorch training scripts to DistributedDataParallel under torchrun.

    Launcher files (shell and Slurm scripts, Makefiles, Dockerfiles, YAML, Markdown, reST,
    notebooks) get their `python -m torch.distributed.launch` commands rewritten to torchrun.
    With one file and no flag, print the migrated source to stdout. Exit status: 0 done,
    1 a file would change (--check), 2 a file could not be read, parsed or migrated; 3 both.
    """
    single_file = len(paths) == 1 and not paths[0].is_dir()
    try:
        mode = WriteBack.from_flags(diff=show_diff, in_place=in_place, check=check, single_file=single_file)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    out = render.make_console(color)
    err = render.make_console(color, stderr=True)

    missing = [path for path in paths if not path.exists()]
    for path in missing:
        render.print_error(err, f"{path}: no such file or directory")
    if missing:
        ctx.exit(EXIT_FAILED)
    try:
        sources = files.discover(paths)
    except MigrateError as exc:
        render.print_error(err, str(exc))
        ctx.exit(EXIT_FAILED)

    options = Options()
    report = Report(mode)
    for path in sources:
        migrate_file(path, mode, options, out=out, err=err, report=report, quiet=quiet, verbose=verbose)
    if not quiet:
        render.print_summary(err, report)
    ctx.exit(report.return_code)


def migrate_file(
    path: Path,
    mode: WriteBack,
    options: Options,
    *,
    out: "render.Console",
    err: "render.Console",
    report: Report,
    quiet: bool = False,
    verbose: bool = False,
) -> None:
    """Migrate one file and record the outcome. Never raises for a problem with this one file."""
    name = files.display_path(path)
    try:
        changed = _migrate_file(path, name, mode, options, out, err, quiet)
    except SourceParseError as exc:
        message = str(SourceParseError(exc.message, exc.line, exc.col, exc.path or name))
    except IntroducedSyntaxError as exc:
        message = f"{name}: internal error: ddp-migrate produced code that does not parse, file left unchanged: {exc}"
    except MigrateError as exc:  # FileError already names the path; others (ConfigError) do not
        message = str(exc) if isinstance(exc, files.FileError) else f"{name}: {exc}"
    except Exception as exc:  # a bug in ddp-migrate: one line, carry on with the other files
        message = f"{name}: internal error: {type(exc).__name__}: {exc}"
        render.print_error(err, _one_line(message))
        if verbose:
            render.print_traceback(err, exc)
        report.failed()
        return
    else:
        report.done(changed)
        if changed and not quiet and mode is not WriteBack.PRINT:
            render.print_status(err, f"{report.status(changed)} {name}")
        return
    render.print_error(err, _one_line(message))
    report.failed()


def _migrate_file(
    path: Path, name: str, mode: WriteBack, options: Options, out: "render.Console", err: "render.Console", quiet: bool
) -> bool:
    kind = files.source_kind(path)
    if kind is None:
        raise files.FileError(
            name, "not a Python script or a launcher file (shell, Makefile, Dockerfile, YAML, Markdown, reST, notebook)"
        )
    if kind == files.PYTHON:
        source = files.read_source(path)
        result = migrate(source.text, options)
    else:
        source = files.read_text(path)
        result = migrate_launcher(source.text, kind, options)
    changed = result.code != source.text
    new_bytes = source.encode(result.code)  # fails here, in every mode, if the new code has no bytes

    if mode.writes and changed:
        files.write_back(source, result.code)
    if not quiet:
        for change in result.changes:
            render.print_change(err, name, change)
        for diagnostic in result.diagnostics:
            render.print_diagnostic(err, name, diagnostic)
    if mode is WriteBack.PRINT:
        render.print_source(out, new_bytes)
    elif mode.shows_diff and changed:
        patch = unified_diff(source.as_on_disk(source.text), source.as_on_disk(result.code), name)
        render.print_diff(out, patch, source.encoding)
    return changed


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console-script entry point (`ddp-migrate`)."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="ddp-migrate")
