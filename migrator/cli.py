"""The command line: flags and config -> Options and one WriteBack mode; for each file read ->
migrate -> show/write -> tally.

Thin on purpose: decoding and writing live in files.py, patches in diff.py, counting in report.py,
configuration in config.py, text in render.py, the json/github/sarif reports in output.py, and the
migration itself in api.migrate (Python scripts) or launcher.migrate_launcher (shell, Make,
Docker, YAML, Markdown, reST and notebook files).

Start-up is part of the job (a pre-commit hook runs on every commit): this module imports click
and the standard library's light parts only. A file is read and looked at as text first; the
engine (LibCST and the rules, most of a second to import) is loaded only for a file that may need
it, and rich only to style a terminal's diff or table.
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

import click

from migrator import __version__, files, render
from migrator.context import FileContext
from migrator.config import Config, RuleSelection, SelectorError, discover_config, resolve_rules, split_selectors
from migrator.errors import ConfigError, IntroducedSyntaxError, MigrateError, SourceParseError
from migrator.options import Options, dropped_note
from migrator.output import FORMATS, Failure, FileOutcome
from migrator.report import EXIT_FAILED, Report, WriteBack

if TYPE_CHECKING:  # pragma: no cover
    from migrator.project.plan import Update
    from migrator.types import Result

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: A Python file with none of these has nothing to migrate (api.RELEVANT; a test keeps them equal).
from migrator.fastpath import PYTHON_RELEVANT  # noqa: E402  (one list, shared with the start-up fast path)
#: A launcher file that does not mention this has no launch command to rewrite.
LAUNCHER_RELEVANT = ("torch.distributed", "torch/distributed/launch")  # the module, or its file by path

#: The process-group setup rule: a file it changed is a training script's entry point, which
#: project mode (migrator.project) plans with the modules it imports.
_SETUP_CODE = "DDP001"

#: A module's declines that a distributed caller answers (migrator.project.hints.LIBRARY_DECLINES, and its hint).
_LIBRARY_DECLINES = frozenset({"DDP101", "DDP104", "DDP114", "DDP140"})
# "trains, with models of its own, but no entry point here", "trains through something built elsewhere":
# project mode may migrate such a module with its script (migrator.project.trainers)
_TRAINS_ELSEWHERE = frozenset({"DDP101", "DDP114"})

#: Fewest files that need the engine for --jobs to start a process pool: with fewer, starting
#: workers costs more than it saves (much more where workers are spawned and import LibCST anew).
POOL_MIN_FILES = 4 if sys.platform.startswith("linux") else 12


class UsageError(click.ClickException):
    """A bad flag value or a bad config file: one line on stderr, exit status 2 (as click's usage errors)."""

    exit_code = 2

    def __init__(self, message: str, *, prefix: str = "Error: ") -> None:
        super().__init__(message)
        self.prefix = prefix

    def show(self, file: Optional[IO[Any]] = None) -> None:
        click.echo(f"{self.prefix}{self.format_message()}", file=file, err=file is None)


# --------------------------------------------------------------------------- the engines, loaded on use


def migrate(source: str, options: Optional[Options] = None, context: Optional[FileContext] = None,
            first_look: bool = True) -> "Result":
    """api.migrate, imported on first use."""
    from migrator.api import migrate as engine

    return engine(source, options, context, first_look)


def _may_need_a_look(source: str, name: str) -> bool:
    from migrator.triage import may_need_a_look

    return may_need_a_look(source, FileContext(path=name).tests(source))


def _verdict(source: str, context: Optional[FileContext], spawn: bool = False) -> str:
    """migrator.triage's first look, imported on first use (it loads no LibCST)."""
    from migrator.triage import verdict

    return verdict(source, context, spawn)


def check(source: str, options: Optional[Options] = None, context: Optional[FileContext] = None,
          first_look: bool = True) -> "Result":
    """api.check (migrate()'s verdict without the new code), imported on first use."""
    from migrator.api import check as engine

    return engine(source, options, context, first_look)


def migrate_launcher(text: str, kind: str, options: Optional[Options] = None) -> "Result":
    """launcher.migrate_launcher, plus `# ddp-migrate: ignore[...]` comments (migrator.suppress)."""
    from migrator import suppress
    from migrator.launcher import migrate_launcher as engine

    options = options or Options()
    result = engine(text, kind, options)

    def rerun(source: str, opts: Options) -> "Result":
        return engine(source, kind, opts)

    return suppress.apply(result, text, options, rerun, suppress.text_suppressions(text))


# --------------------------------------------------------------------------- the command


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path), metavar="PATH...")
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
    help="Write nothing; report every finding; exit 1 if any file would change. With --diff, also print the diffs.",
)
@click.option(
    "--select",
    multiple=True,
    metavar="RULES",
    help="Only these rules: codes (DDP003), prefixes (DDP0) or names (wrap-model); repeat or comma-separate.",
)
@click.option("--ignore", multiple=True, metavar="RULES", help="Not these rules (same forms as --select).")
@click.option("--extend-select", multiple=True, metavar="RULES", help="Rules added to the selection.")
@click.option("--extend-ignore", multiple=True, metavar="RULES", help="Rules added to the ignored ones.")
@click.option(
    "--exclude",
    multiple=True,
    metavar="PATTERNS",
    help="Gitignore-style patterns not walked into (relative to cwd); replaces the config's and the default.",
)
@click.option("--extend-exclude", multiple=True, metavar="PATTERNS", help="Patterns excluded as well.")
@click.option(
    "--force-exclude",
    is_flag=True,
    help="Apply the exclude patterns to files named on the command line too (for pre-commit).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Read settings from FILE (a pyproject.toml, or TOML with the keys at the top level).",
)
@click.option(
    "--batch",
    type=click.Choice(["global", "per-process"]),
    default=None,
    help="global: each training loader's batch_size is divided by the number of processes (the global batch "
    "stays); per-process: kept (the global batch grows N times). Default: global for a DataParallel script, "
    "per-process for a single-GPU one.",
)
@click.option(
    "--eval",
    "evaluation",
    type=click.Choice(["replicated", "sharded"]),
    default=None,
    help="replicated (default): evaluation loaders stay whole on every rank; sharded: each rank evaluates its "
    "part and the sums the metric is computed from are all-reduced.",
)
@click.option(
    "--spawn",
    is_flag=True,
    default=None,
    help="Turn scripts that start their own workers with torch.multiprocessing.spawn into torchrun scripts "
    "(without it they are left as they are); what cannot be turned is reported (DDP117).",
)
@click.option(
    "--max-file-size",
    metavar="SIZE",
    default=None,
    help="Skip Python files larger than SIZE (bytes, or with K/M/G: 512K, 2M; 0: no limit). Default: 512K.",
)
@click.option("--isolated", is_flag=True, help="Ignore every configuration file.")
@click.option(
    "--output-format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text: code on stdout, findings on stderr. json, sarif: one report on stdout. "
    "github: GitHub Actions annotations on stdout.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Migrate files in this many processes (default: the number of CPUs). Output order does not change.",
)
@click.option(
    "--color",
    type=click.Choice(render.COLOR_CHOICES),
    default="auto",
    show_default=True,
    help="Colour the output. 'auto' colours a terminal only; piped diffs are always plain.",
)
@click.option(
    "--stdin-filename",
    metavar="NAME",
    help="With PATH '-': the name of the file read from stdin (for messages, its kind and the config).",
)
@click.option(
    "--exit-zero",
    is_flag=True,
    default=None,
    help="With --check, exit 0 even when a file would change or needs a human (failures still exit 2).",
)
@click.option("--statistics", is_flag=True, help="Show the number of findings per code instead of each finding.")
@click.option(
    "--show-files",
    is_flag=True,
    help="List the files a run would take (and as what) and those it leaves out, and why; then exit.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr: no findings, no summary, no progress.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Per file: the changes by rule, what needs a human (with hints), how to run it; why files were "
    "skipped; tracebacks for internal errors.",
)
@click.option("--list-rules", is_flag=True, help="List every rule (code, name, fixable, summary) and exit.")
@click.option("--explain", metavar="RULE", help="Explain a rule (a code or a name) and exit.")
@click.version_option(__version__, "--version", prog_name="ddp-migrate", message="%(prog)s %(version)s")
@click.pass_context
def cli(
    ctx: click.Context,
    paths: Tuple[Path, ...],
    show_diff: bool,
    in_place: bool,
    check: bool,
    select: Tuple[str, ...],
    ignore: Tuple[str, ...],
    extend_select: Tuple[str, ...],
    extend_ignore: Tuple[str, ...],
    exclude: Tuple[str, ...],
    extend_exclude: Tuple[str, ...],
    force_exclude: bool,
    config_path: Optional[Path],
    batch: Optional[str],
    evaluation: Optional[str],
    spawn: Optional[bool],
    max_file_size: Optional[str],
    isolated: bool,
    output_format: str,
    jobs: Optional[int],
    color: str,
    stdin_filename: Optional[str],
    exit_zero: Optional[bool],
    statistics: bool,
    show_files: bool,
    quiet: bool,
    verbose: bool,
    list_rules: bool,
    explain: Optional[str],
) -> None:
    """Migrate PyTorch training scripts to DistributedDataParallel under torchrun.

    Launcher files (shell and Slurm scripts, Makefiles, Dockerfiles, YAML, Markdown, reST,
    notebooks) get their `python -m torch.distributed.launch` commands rewritten to torchrun.
    With one file and no flag, print the migrated source to stdout. Settings come from
    [tool.ddp-migrate] in the nearest pyproject.toml; flags win.

    \b
    Exit status (bits, as ruff's):
      0  nothing to act on
      1  with --check: a file would change, or has a finding that needs a human
         (purely informational advisories do not count; --exit-zero clears this bit)
      2  a file could not be read, parsed, migrated or written (the others are still done),
         or a usage error
      3  both 1 and 2

    \b
    Subcommands (each has its own --help):
      ddp-migrate verify SCRIPT   run a migrated script briefly under torchrun and check it
      ddp-migrate launch SCRIPT   write a Slurm or Kubernetes job file for several machines
    """
    out = render.make_console(color)
    err = render.make_console(color, stderr=True)
    if list_rules or explain is not None:
        if paths or (list_rules and explain is not None):
            raise click.UsageError("--list-rules and --explain take no PATH and go alone")
        ctx.exit(_list_rules(out) if list_rules else _explain(out, explain or ""))
    if not paths:
        raise click.UsageError("Missing argument 'PATH...'.")
    use_stdin = any(str(path) == "-" for path in paths)
    if use_stdin and len(paths) > 1:
        raise click.UsageError("'-' (stdin) cannot be combined with other paths")
    if use_stdin and in_place:
        raise click.UsageError("--in-place cannot be used with '-' (stdin): the result goes to stdout")
    if stdin_filename is not None and not use_stdin:
        raise click.UsageError("--stdin-filename needs the path '-'")

    single_file = use_stdin or (len(paths) == 1 and not paths[0].is_dir())
    try:
        mode = WriteBack.from_flags(diff=show_diff, in_place=in_place, check=check, single_file=single_file)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if output_format != "text" and show_diff:
        raise click.UsageError(f"--diff cannot be combined with --output-format {output_format}: both use stdout")
    if output_format != "text" and statistics:
        raise click.UsageError(f"--statistics cannot be combined with --output-format {output_format}")
    if isolated and config_path is not None:
        raise click.UsageError("--isolated cannot be combined with --config")

    cli_rules = _rule_flags(select=select, ignore=ignore, extend_select=extend_select, extend_ignore=extend_ignore)
    config_paths = (Path(stdin_filename or "."),) if use_stdin else paths
    try:
        config = discover_config(config_paths, config_path, isolated)
    except ConfigError as exc:
        raise UsageError(str(exc), prefix="") from None
    options = replace(resolve_rules(config.rules, cli_rules), batch=batch or config.batch, eval=evaluation or config.eval,
                      spawn=bool(spawn or config.spawn))
    size_limit = _size_limit(max_file_size, config)

    report = Report(mode, exit_zero=exit_zero if exit_zero is not None else config.exit_zero)
    show = _Show(mode, output_format, out=out, err=err, quiet=quiet, verbose=verbose, statistics=statistics)
    show.notes(dropped_note(options.dropped_fixes))
    if use_stdin:
        data = sys.stdin.buffer.read()
        for done in run_jobs([_read_stdin(data, stdin_filename, size_limit)], mode, options):
            show.file(done, report)
        show.finish(report)
        ctx.exit(report.return_code)

    missing = [path for path in paths if not path.exists()]
    for path in missing:
        render.print_error(err, f"{path}: no such file or directory")
    if missing:
        ctx.exit(EXIT_FAILED)
    skipped: List[Tuple[Path, str]] = []
    try:
        sources = files.discover(
            paths, _excludes(config, exclude, extend_exclude), force_exclude=force_exclude, skipped=skipped
        )
    except MigrateError as exc:
        render.print_error(err, str(exc))
        ctx.exit(EXIT_FAILED)
    if show_files:
        _show_files(out, sources, skipped, size_limit)
        ctx.exit(0)
    if verbose and not quiet and output_format == "text":
        for path, why in skipped:
            render.print_status(err, f"{files.display_path(path)}: skipped: {why}")

    named = {os.path.realpath(path) for path in paths if not path.is_dir()}
    walked = {i for i, path in enumerate(sources) if os.path.realpath(path) not in named}
    progress = render.progress(err, len(sources)) if output_format == "text" and not quiet else None
    outcomes: List[Migrated] = []
    try:
        for done in migrate_files(sources, mode, options, jobs=jobs or cpu_count(), walked=walked, write=False,
                                  max_size=size_limit):
            if progress is not None:
                progress.advance()
            outcomes.append(done)
    finally:
        if progress is not None:
            progress.stop()
    # Written and shown once the project is planned: a trainer module may change because of its script.
    for done in with_project(outcomes, mode, options):
        show.file(_write_back(done) if mode.writes else done, report)
    show.finish(report)
    ctx.exit(report.return_code)


def _size_limit(flag: Optional[str], config: Config) -> int:
    """--max-file-size, else the config's, else the default (bytes; 0: no limit)."""
    from migrator.config import DEFAULT_MAX_FILE_SIZE, parse_size

    if flag is None:
        return config.max_file_size if config.max_file_size is not None else DEFAULT_MAX_FILE_SIZE
    try:
        return parse_size(flag)
    except ValueError as exc:
        raise UsageError(f"--max-file-size {exc}") from None


def _rule_flags(**values: Tuple[str, ...]) -> RuleSelection:
    """The command line's layer of rule selection; a one-line usage error for an unknown rule."""
    parsed: Dict[str, Tuple[str, ...]] = {}
    for key, given in values.items():
        try:
            parsed[key] = split_selectors(given)
        except SelectorError as exc:
            raise UsageError(f"--{key.replace('_', '-')}: {exc}") from None
    return RuleSelection(
        select=parsed["select"] if values["select"] else None,
        ignore=parsed["ignore"],
        extend_select=parsed["extend_select"],
        extend_ignore=parsed["extend_ignore"],
    )


def _excludes(config: Config, exclude: Sequence[str], extend_exclude: Sequence[str]) -> List[files.Exclude]:
    """`exclude` from the command line (relative to cwd), else the config's, else the default; plus every extension."""
    cwd = Path.cwd()
    out: List[files.Exclude] = []
    if exclude:
        out.append(files.Exclude(_patterns(exclude), cwd))
    elif config.exclude is not None and config.root is not None:
        out.append(files.Exclude(config.exclude, config.root))
    else:
        out.append(files.Exclude(files.DEFAULT_EXCLUDE, cwd))
    if config.extend_exclude and config.root is not None:
        out.append(files.Exclude(config.extend_exclude, config.root))
    if extend_exclude:
        out.append(files.Exclude(_patterns(extend_exclude), cwd))
    return out


def _patterns(values: Sequence[str]) -> Tuple[str, ...]:
    return tuple(part.strip() for value in values for part in value.split(",") if part.strip())


def cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:  # pragma: no cover
            pass
    return os.cpu_count() or 1


# --------------------------------------------------------------------------- rules: --list-rules, --explain


def _list_rules(out: render.Console) -> int:
    from migrator.rules import RULES

    render.print_rule_table(out, [(rule.code, rule.name, rule.fixable, rule.summary) for rule in RULES])
    return 0


def _explain(out: render.Console, wanted: str) -> int:
    from migrator.rules import RULES

    key = wanted.strip()
    for rule in RULES:
        if key.upper() == rule.code or key == rule.name:
            render.print_text(out, rule.explain())
            return 0
    try:
        from migrator.config import canonical_selector

        canonical_selector(key)
        problem = f"{wanted!r} is a prefix of several rules; give one code or name"
    except SelectorError as exc:
        problem = str(exc)
    raise UsageError(f"--explain: {problem}")


# --------------------------------------------------------------------------- one file


class Migrated(NamedTuple):
    """A file's outcome, with what it takes to show and write it: the source as read, the new code."""

    outcome: FileOutcome
    source: Optional[files.SourceFile] = None
    code: Optional[str] = None
    skipped: Optional[str] = None  # why a walked file was passed over (not text); shown with -v
    python: bool = False  # a Python source (project mode plans those), as _read judged it
    notice: bool = False  # the skip is shown without -v too (a file above the size limit)
    distributed: bool = False  # a script set up for several processes already (Result.distributed)
    models: Tuple[Tuple[str, str], ...] = ()  # the models it wraps, and where (Result.models)


class _Job(NamedTuple):
    """A file read and found to need the engine."""

    path: Path
    name: str
    kind: str
    source: files.SourceFile


def _read(path: Path, options: Options, walked: bool = False, max_size: int = 0) -> Union[Migrated, _Job]:
    """Read a file and decide from its text whether the engine is needed at all. Never raises.

    A file found in a directory walk (`walked`) that is not text (NUL bytes, or bytes its encoding
    cannot decode) is skipped, not failed: a binary `.py`/`.sh` is not something to migrate.
    """
    name = files.display_path(path)
    try:
        kind = files.source_kind(path)
        if kind is None:
            raise files.FileError(
                name,
                "not a Python script (a .py file, or one whose first line is a python shebang) or a launcher file "
                "(shell, Makefile, Dockerfile, YAML, Markdown, reST, notebook)",
            )
        if kind == files.PYTHON:
            size = os.stat(path).st_size
            if max_size and size > max_size:
                return Migrated(FileOutcome(name), skipped=_too_large(size, max_size), notice=True)
            source = files.read_source(path)
            # The words first (no import), then the shapes of the text: a worker gets the file only
            # when a rule, or a project module it imports, may matter (migrator.triage).
            relevant = any(word in source.text for word in PYTHON_RELEVANT) and _may_need_a_look(source.text, name)
        else:
            source = files.read_text(path)
            relevant = any(word in source.text for word in LAUNCHER_RELEVANT)
        if walked and "\x00" in source.text:
            return Migrated(FileOutcome(name), skipped="binary file (NUL bytes)")
    except files.UndecodableError as exc:
        if walked:
            return Migrated(FileOutcome(name), skipped=f"not text: {exc.message}")
        return Migrated(FileOutcome(name, error=_failure(exc, name)))
    except Exception as exc:  # noqa: BLE001 - becomes this file's error; the others go on
        return Migrated(FileOutcome(name, error=_failure(exc, name)))
    if not relevant:
        return Migrated(FileOutcome(name), source, source.text, python=kind == files.PYTHON)
    return _Job(path, name, kind, source)


def _too_large(size: int, limit: int) -> str:
    from migrator.config import format_size

    return (f"{format_size(size)} is above the {format_size(limit)} limit for Python files "
            "(raise it with --max-file-size, or max-file-size in [tool.ddp-migrate])")


def _read_stdin(data: bytes, filename: Optional[str], max_size: int = 0) -> Union[Migrated, _Job]:
    """stdin as a file named `filename` (its kind from the name; Python when there is none)."""
    name = files.display_path(filename) if filename else "-"
    path = Path(filename or "-")
    try:
        kind = files.source_kind(path) if filename else files.PYTHON
        if kind is None:
            kind = files.PYTHON
        if kind == files.PYTHON and max_size and len(data) > max_size:
            return Migrated(FileOutcome(name), skipped=_too_large(len(data), max_size), notice=True)
        source = files.read_data(data, path, kind)
    except Exception as exc:  # noqa: BLE001
        return Migrated(FileOutcome(name, error=_failure(exc, name)))
    return _Job(path, name, kind, source)


def _migrate(job: _Job, options: Options, mode: WriteBack) -> Migrated:
    """Run the engine on one file (in this process or a worker). Never raises."""
    try:
        if job.kind == files.PYTHON:
            context = _context(job)
            first_look = _verdict(job.source.text, context, options.spawn)
            if first_look != "engine":  # most files: no LibCST, not even its import (migrator.triage)
                return Migrated(FileOutcome(job.name), job.source, job.source.text, python=True,
                                distributed=first_look == "distributed")
            # Plain --check shows no code: the engine stops once it knows what it would change.
            engine = migrate if mode.needs_code else check
            result = engine(job.source.text, options, context)
        else:
            result = migrate_launcher(job.source.text, job.kind, options)
        job.source.encode(result.code)  # fails here, in every mode, if the new code has no bytes
    except Exception as exc:  # noqa: BLE001
        return Migrated(FileOutcome(job.name, error=_failure(exc, job.name)), job.source)
    changed = result.changed
    launch = tuple(result.torchrun_commands(job.name)) if changed and job.kind == files.PYTHON else ()
    outcome = FileOutcome(job.name, changed, tuple(result.changes), tuple(result.diagnostics), launch=launch,
                          notes=result.notes)
    return Migrated(outcome, job.source, result.code, python=job.kind == files.PYTHON, distributed=result.distributed,
                    models=result.models)


def _context(job: _Job) -> Optional[FileContext]:
    """Where the file is: its path (a test module?) and the project's modules beside it."""
    if str(job.path) == "-":
        return None
    if not job.path.exists():  # stdin given a --stdin-filename: the name is all there is
        return FileContext(path=job.name)
    return FileContext.for_file(job.path, job.name)


def _failure(exc: BaseException, name: str) -> Failure:
    if isinstance(exc, SourceParseError):
        return Failure("parse", _one_line(f"cannot parse: {exc.message}"), exc.line, exc.col)
    if isinstance(exc, IntroducedSyntaxError):
        message = (
            "internal error: a bug in ddp-migrate (please report it): "
            f"the migrated code does not parse, file left unchanged: {exc}"
        )
        return Failure("internal", _one_line(message))
    if isinstance(exc, files.FileError):
        return Failure("file", _one_line(exc.message))
    if isinstance(exc, MigrateError):
        return Failure("internal", _one_line(str(exc)))
    import traceback

    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Failure("internal", _one_line(f"internal error: {type(exc).__name__}: {exc}"), traceback=trace)


def _one_line(message: str) -> str:
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


# --------------------------------------------------------------------------- all files, maybe in parallel


def migrate_files(
    paths: Sequence[Path], mode: WriteBack, options: Options, *, jobs: int = 1, walked: Optional[Set[int]] = None,
    write: bool = True, max_size: int = 0,
) -> Iterator[Migrated]:
    """Each file's outcome, in the order of `paths`, written back first when `mode` writes.

    Files are read here; those that need the engine are migrated here, or in `jobs` worker
    processes when there are at least POOL_MIN_FILES of them, each handed to a worker as soon as
    it is read (the workers run while the rest is read). Writing and everything shown happen in
    this process, in order, so the output does not depend on `jobs`. `walked` holds the indexes of
    the paths found in a directory walk (a binary one among them is skipped); Python files above
    `max_size` bytes (0: no limit) are skipped unread.
    """
    walked = walked or set()
    read = (_read(path, options, i in walked, max_size) for i, path in enumerate(paths))
    yield from run_jobs(read, mode, options, jobs=jobs, write=write)


def run_jobs(
    read: Iterable[Union[Migrated, _Job]], mode: WriteBack, options: Options, *, jobs: int = 1, write: bool = True
) -> Iterator[Migrated]:
    """migrate_files for files read (a list, or a generator reading them as it goes)."""
    items: List[Union[Migrated, _Job]] = []
    futures: Dict[int, Any] = {}
    executor = None
    waiting: List[_Job] = []  # read before there were enough to start the pool
    try:
        for item in read:
            items.append(item)
            if not isinstance(item, _Job) or jobs <= 1:
                continue
            waiting.append(item)
            if executor is None and len(waiting) >= POOL_MIN_FILES:
                executor = _pool(jobs, warm=any(_trains(job) for job in waiting))
            if executor is not None:
                for job in waiting:
                    futures[id(job)] = executor.submit(_migrate, job, options, mode)
                waiting.clear()
        for item in items:
            if isinstance(item, _Job):
                done = _result(futures.get(id(item)), item, options, mode)
            else:
                done = item
            yield _write_back(done) if mode.writes and write else done
    finally:
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


def _trains(job: _Job) -> bool:
    """Has the file the text of training (migrator.relevance)? Then LibCST will be needed."""
    from migrator.relevance import python_may_train

    return job.kind == files.PYTHON and python_may_train(job.source.text)


def _pool(workers: int, warm: bool = False) -> Any:
    """The worker processes. `warm`: a file read so far trains, so each worker imports the engine
    (LibCST, a third of a second) as soon as it starts, while this process reads the rest."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = None
    if sys.platform.startswith("linux"):
        # fork: workers start at once and share what this process has already imported (the first
        # look at each file; LibCST and the rules are loaded by a worker only when a file needs
        # them, which in most repositories few do). This process runs no threads: fork is safe.
        context = multiprocessing.get_context("fork")
        import migrator.triage  # noqa: F401 - loaded once, before the fork
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_start_worker, initargs=(warm,))


def _start_worker(warm: bool) -> None:
    """Workers leave Ctrl-C to this process, which cancels what is left (no traceback per worker)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if warm:
        import migrator.api  # noqa: F401


def _result(future: Any, job: _Job, options: Options, mode: WriteBack) -> Migrated:
    if future is None:
        return _migrate(job, options, mode)
    try:
        return future.result()
    except Exception:  # a broken pool (a worker killed): do this file here
        return _migrate(job, options, mode)


def with_project(outcomes: Sequence[Migrated], mode: WriteBack, options: Options) -> List[Migrated]:
    """The outcomes, with project mode's plan applied (migrator.project.plan): modules that a
    migrated script trains through are migrated with it, or named in its findings."""
    python = [
        (done, os.path.realpath(done.source.path))
        for done in outcomes
        if done.python and done.source is not None and done.outcome.error is None and done.code is not None
    ]
    migrated = any(change.code == _SETUP_CODE for done, _ in python for change in done.outcome.changes)
    answered = any(done.distributed for done, _ in python) and any(
        diagnostic.code in _LIBRARY_DECLINES for done, _ in python for diagnostic in done.outcome.diagnostics
    )
    declined = {diagnostic.code for done, _ in python for diagnostic in done.outcome.diagnostics}
    together = bool(_TRAINS_ELSEWHERE & declined)  # a module that builds and trains its models, or its script
    if not migrated and not answered and not together and not _picks_by_name(python):
        return list(outcomes)  # no script to plan with its modules, no module to answer (LibCST stays unloaded)
    from migrator.project.plan import ProjectFile, plan_project

    project = [
        ProjectFile(real, done.outcome.path, done.source.text, done.code if mode.needs_code else None,
                    done.outcome.changes, done.outcome.diagnostics, done.distributed, done.models)
        for done, real in python
    ]
    try:
        updates = plan_project(project, options, rewrite=mode.needs_code, engine=_engine_again(options, mode))
    except Exception as exc:  # noqa: BLE001 - a bug in the planner: each file keeps its own migration, and says so
        updates = _planning_failed(project, exc)
    real_of = {id(done): real for done, real in python}
    return [_updated(done, updates.get(real_of.get(id(done), ""))) for done in outcomes]


def _picks_by_name(python: Sequence[Tuple["Migrated", str]]) -> bool:
    """Does a script that nothing was found in call a factory that imports its model's module by
    a name chosen at run time (`create_model(opt)`: models/<opt.model>_model.py)? Project mode
    follows it; read from the import lines, so no syntax tree is built for the others."""
    from migrator.graph.modules import calls_a_module_factory

    return any(calls_a_module_factory(real, done.source.text)
               for done, real in python
               if not done.outcome.changes and not done.outcome.diagnostics and "__main__" in done.source.text)


def _engine_again(options: Options, mode: WriteBack):
    """The per-file engine, run again on a file with what project mode tells it (FileContext's
    set_up_by, trains_through): migrator.project.trainers."""
    def engine(file: Any, **told: Any) -> "Result":
        context = FileContext.for_file(Path(file.path), file.display)._replace(**told)
        # Parsed whatever its text: a script that only calls `Solver(...)` may never name torch.
        return (migrate if mode.needs_code else check)(file.text, options, context, first_look=False)
    return engine


def _planning_failed(project: Sequence[Any], exc: Exception) -> Dict[str, "Update"]:
    from migrator.project.plan import Update
    from migrator.rules.modules import MODULE_NEEDS_MIGRATION
    from migrator.types import Diagnostic

    # Migrated alone, a script whose modules were to be planned with it may train wrong (a DataParallel
    # left in a trainer, a sampler missing): it stays as it was, and says why.
    message = (f"internal error in project mode (please report it): {type(exc).__name__}: {exc}; this script is "
               "left unchanged: the modules it imports could not be planned with it")
    return {
        file.path: Update(None, diagnostics=(Diagnostic(MODULE_NEEDS_MIGRATION.code, 1, 1, _one_line(message)),), revert=True)
        for file in project if any(change.code == _SETUP_CODE for change in file.changes)
    }


def _updated(done: Migrated, update: Optional["Update"]) -> Migrated:
    if update is None:
        return done
    outcome = done.outcome
    if update.revert and done.source is not None:  # the script stays as it was (project mode says why)
        # Its own findings were about the migration that is not made; the reason replaces them.
        return Migrated(FileOutcome(outcome.path, False, (), update.diagnostics, outcome.error), done.source,
                        done.source.text, done.skipped, done.python, distributed=done.distributed)
    # Migrated again with the module it trains through: the new outcome replaces the per-file one.
    before_changes, before_diagnostics = ((), ()) if update.replaces else (outcome.changes, outcome.diagnostics)
    diagnostics = tuple(d for d in before_diagnostics if d.code not in update.dropped) + update.diagnostics
    changes = tuple(sorted(before_changes + update.changes, key=lambda c: (c.line, c.col)))
    code = update.code if update.code is not None else done.code
    try:
        if done.source is not None and code is not None:
            done.source.encode(code)
    except Exception as exc:  # noqa: BLE001 - the new code has no bytes in the file's encoding
        return Migrated(FileOutcome(outcome.path, error=_failure(exc, outcome.path)), done.source)
    new = FileOutcome(outcome.path, outcome.changed or bool(update.changes), changes,
                      tuple(sorted(diagnostics, key=lambda d: (d.line, d.col))), outcome.error, outcome.launch,
                      outcome.notes)
    return Migrated(new, done.source, code, done.skipped, done.python, distributed=done.distributed)


def _write_back(done: Migrated) -> Migrated:
    if done.outcome.error is not None or not done.outcome.changed or done.source is None or done.code is None:
        return done
    try:
        files.write_back(done.source, done.code)
    except Exception as exc:  # noqa: BLE001 - a FileError, or anything else: this file fails, the run goes on
        return Migrated(FileOutcome(done.outcome.path, error=_failure(exc, done.outcome.path)), done.source)
    return done


# --------------------------------------------------------------------------- showing


class _Show:
    """Shows each outcome as it comes, in the chosen format, and tallies it.

    Text: each file once, its finding lines (`path:line:col: CODE [*] message`) and, when it
    changes, one line with how to run it; the end of the run is one summary line. `-v` adds, per
    file, the changes by rule, what needs a human with the rule's hint, and every launch command;
    `--statistics` shows counts per code instead of the finding lines.
    """

    def __init__(
        self, mode: WriteBack, output_format: str, *, out: render.Console, err: render.Console, quiet: bool, verbose: bool,
        statistics: bool = False,
    ) -> None:
        self.mode = mode
        self.format = output_format
        self.out = out
        self.err = err
        self.quiet = quiet
        self.verbose = verbose
        self.statistics = statistics
        self.outcomes: List[FileOutcome] = []
        self.noticed: List[Tuple[str, str]] = []  # (path, why) of files skipped for a reason the user must hear
        self.run_notes: Tuple[str, ...] = ()

    def notes(self, notes: Sequence[str]) -> None:
        """Sentences about the whole run (the rules a selection turned off, and why), said once, first."""
        self.run_notes = tuple(notes)
        if self.format == "text" and not self.quiet:
            for note in notes:
                render.print_status(self.err, note)

    def file(self, done: Migrated, report: Report) -> None:
        outcome = done.outcome
        if done.skipped is not None:
            if done.notice:
                self.noticed.append((outcome.path, done.skipped))
                report.skipped()
            if (self.verbose or done.notice) and not self.quiet and self.format == "text":
                render.print_status(self.err, f"{outcome.path}: skipped: {done.skipped}")
            return
        self.outcomes.append(outcome)
        if outcome.error is None:
            report.done(outcome.changed, needs_human(outcome))
        else:
            report.failed()
        if self.format in ("json", "sarif"):
            pass
        elif self.format == "github":
            from migrator.output import to_github

            render.print_text(self.out, to_github(outcome))
        else:
            self._text(done, report)

    def _text(self, done: Migrated, report: Report) -> None:
        outcome = done.outcome
        if outcome.error is not None:
            render.print_error(self.err, outcome.error.text(outcome.path))
            if self.verbose and outcome.error.traceback:
                render.print_traceback(self.err, outcome.error.traceback)
            return
        if not self.quiet and not self.statistics:
            for kind, finding in outcome.findings():
                if kind == "change":
                    render.print_change(self.err, outcome.path, finding)
                else:
                    render.print_diagnostic(self.err, outcome.path, finding)
            for note in outcome.notes:
                render.print_status(self.err, f"{outcome.path}: {note}")
        source, code = done.source, done.code
        if source is not None and code is not None:
            if self.mode is WriteBack.PRINT:
                render.print_source(self.out, source.encode(code))
            elif self.mode.shows_diff and outcome.changed:
                from migrator.diff import unified_diff

                patch = unified_diff(source.as_on_disk(source.text), source.as_on_disk(code), outcome.path)
                render.print_diff(self.out, patch, source.encoding)
        if outcome.changed and not self.quiet and not self.statistics and not self.verbose and self.mode is not WriteBack.PRINT:
            render.print_file_status(self.err, outcome.path, report.status(True), outcome.launch)

    def finish(self, report: Report) -> None:
        if self.format == "json":
            from migrator.output import to_json

            render.print_text(self.out, to_json(self.outcomes, report, self.noticed, self.run_notes))
        elif self.format == "sarif":
            from migrator.output import to_sarif

            render.print_text(self.out, to_sarif(self.outcomes, __version__))
        elif not self.quiet:
            from migrator.output import statistics, summarize

            if self.statistics:
                render.print_statistics(self.err, statistics(self.outcomes))
            elif self.verbose:
                summaries = summarize(self.outcomes)
                if summaries:
                    render.print_migration_summary(self.err, summaries, writes=self.mode.writes)
            render.print_summary(self.err, report)


def needs_human(outcome: FileOutcome) -> bool:
    """Does the file have a finding to act on: a diagnostic that is not purely informational?"""
    from migrator.codes import INFORMATIONAL

    return any(diagnostic.code not in INFORMATIONAL for diagnostic in outcome.diagnostics)


def _show_files(err: render.Console, sources: Sequence[Path], skipped: Sequence[Tuple[Path, str]], max_size: int) -> None:
    """--show-files: what the walk takes (and as what) and what it leaves out, and why; nothing is read."""
    rows: List[Tuple[str, str]] = []
    for path in sources:
        try:
            kind = files.source_kind(path) or "not taken"
            size = os.stat(path).st_size
        except OSError as exc:
            rows.append((files.display_path(path), f"skipped: cannot read: {exc.strerror or exc}"))
            continue
        if kind == files.PYTHON and max_size and size > max_size:
            rows.append((files.display_path(path), f"skipped: {_too_large(size, max_size)}"))
        else:
            rows.append((files.display_path(path), kind))
    rows += [(files.display_path(path), f"skipped: {why}") for path, why in skipped]
    for name, what in sorted(rows):
        render.print_text(err, f"{name}: {what}\n")


#: `ddp-migrate NAME ARGS...` hands ARGS to the module's main(); loaded only when asked for.
SUBCOMMANDS = {"verify": "migrator.verify.command", "launch": "migrator.jobs.command"}


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Console-script entry point (`ddp-migrate`): a subcommand, else the migration command."""
    args = list(argv) if argv is not None else sys.argv[1:]
    if args and args[0] in SUBCOMMANDS:
        import importlib

        importlib.import_module(SUBCOMMANDS[args[0]]).main(args[1:])
        return
    # argv None: click reads sys.argv itself (and expands globs on Windows, as before).
    cli.main(args=None if argv is None else args, prog_name="ddp-migrate")
