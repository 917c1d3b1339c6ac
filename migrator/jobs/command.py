"""`ddp-migrate launch`: write the Slurm or Kubernetes job file that runs a script on several machines.

migrator.cli dispatches here when its first argument is `launch`. This module reads the flags,
asks the engine what it knows about the script (whether it is migrated yet, which arguments its
own parser requires: api.check's Result.launch_args, the same the summary's torchrun lines use),
builds the file with slurm.py or kubernetes.py and prints it or writes it atomically.

Every problem is one line on stderr: `Error: ...` and exit status 2 for what the user must change
(a flag, a missing argument, a file in the way), `warning: ...` for what only deserves a look.
"""
from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional, Sequence, Tuple

import click

from migrator.jobs import kubernetes, slurm
from migrator.jobs.spec import JobError, Launch, missing_arguments

if TYPE_CHECKING:  # pragma: no cover
    from migrator.options import Options
    from migrator.types import Result

EXIT_ERROR = 2
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: The options of one scheduler only, by the parameter's name: given with the other, they would be
#: silently left out of the file, so that is an error that names them.
SLURM_ONLY = ("partition", "time", "account", "cpus_per_task", "port", "setup")
KUBERNETES_ONLY = ("image", "namespace")


class LaunchError(click.ClickException):
    """One line, `Error: ...`, exit status 2: the user's to fix, never a traceback."""

    exit_code = EXIT_ERROR

    def show(self, file: Optional[IO[Any]] = None) -> None:
        click.echo(f"Error: {self.format_message()}", file=file, err=file is None)


class _OneLineErrors(click.Command):
    """click's own usage errors (a missing --nodes, `--nodes 0`) as one line too, not click's
    usage block: the same shape as every other error of this command."""

    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None, **extra: Any) -> Any:
        try:
            code = super().main(args=args, prog_name=prog_name, standalone_mode=False, **extra)
        except click.ClickException as exc:
            LaunchError(exc.format_message()).show()
            sys.exit(EXIT_ERROR)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


@click.command(cls=_OneLineErrors, context_settings=CONTEXT_SETTINGS)
@click.argument("script", metavar="SCRIPT")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SCRIPT_ARGS...]")
@click.option("--nodes", type=click.IntRange(min=1), required=True, metavar="N", help="Machines to run on.")
@click.option("--gpus", type=click.IntRange(min=1), required=True, metavar="G",
              help="GPUs per machine: torchrun starts one process for each.")
@click.option("--slurm", "use_slurm", is_flag=True, help="Write a Slurm batch script (for sbatch).")
@click.option("--kubernetes", "use_kubernetes", is_flag=True,
              help="Write a Kubeflow PyTorchJob manifest (Training Operator v1.7 or later; for kubectl create -f).")
@click.option("-o", "--output", type=click.Path(path_type=Path), metavar="FILE",
              help="Write the job file here (atomically; a Slurm script is made executable) instead of stdout.")
@click.option("--force", is_flag=True, help="With --output: overwrite FILE if it exists.")
@click.option("--job-name", metavar="NAME", help="The job's name (default: the script's file name).")
@click.option("--image", metavar="IMAGE", help="Kubernetes, required: the container image with the script and torch.")
@click.option("--namespace", metavar="NAMESPACE", help="Kubernetes: the namespace of the job (default: kubectl's).")
@click.option("--partition", metavar="NAME", help="Slurm: the partition (#SBATCH --partition).")
@click.option("--time", metavar="LIMIT", help="Slurm: the time limit, e.g. 1-00:00:00 (#SBATCH --time).")
@click.option("--account", metavar="NAME", help="Slurm: the account charged (#SBATCH --account).")
@click.option("--cpus-per-task", type=click.IntRange(min=1), metavar="N",
              help="Slurm: CPUs per node for torchrun and its processes (#SBATCH --cpus-per-task).")
@click.option("--port", type=click.IntRange(1, 65535), default=slurm.DEFAULT_PORT, metavar="PORT",
              help=f"Slurm: the rendezvous port on the first node (default: {slurm.DEFAULT_PORT}).")
@click.option("--setup", multiple=True, metavar="LINE",
              help="Slurm: a shell line to run before torchrun, e.g. 'module load cuda'; repeat for more.")
@click.pass_context
def launch(
    ctx: click.Context, script: str, script_args: Tuple[str, ...], nodes: int, gpus: int, use_slurm: bool,
    use_kubernetes: bool, output: Optional[Path], force: bool, job_name: Optional[str], image: Optional[str],
    namespace: Optional[str], partition: Optional[str], time: Optional[str], account: Optional[str],
    cpus_per_task: Optional[int], port: int, setup: Tuple[str, ...],
) -> None:
    """Write a job file that runs SCRIPT with torchrun on N machines with G GPUs each.

    --slurm writes an sbatch script: one torchrun per node, meeting at a c10d rendezvous on the
    allocation's first node. --kubernetes writes a PyTorchJob (a Master and N-1 Workers; the
    operator tells each torchrun its node rank and the Master's address). Arguments after `--`
    go to SCRIPT unchanged; those its own argparse parser requires must be there. The job file
    is printed to stdout unless --output is given.
    """
    kind = _scheduler(use_slurm, use_kubernetes)
    _reject_foreign_options(ctx, kind)
    if kind == "kubernetes" and image is None:
        raise LaunchError("--kubernetes needs --image IMAGE: the container image that holds the script and torch")
    _check_output(output, force)
    _check_text(script, *script_args, *setup, *(v for v in (job_name, image, namespace, partition, time, account) if v))
    job = _or_launch_error(Launch, script=script, args=script_args, nodes=nodes, gpus=gpus, name=job_name)
    _check_script(job)
    if kind == "slurm":
        options = slurm.SlurmOptions(partition=partition, time=time, account=account, cpus_per_task=cpus_per_task,
                                     port=port, setup=setup)
        text = _or_launch_error(slurm.sbatch_script, launch=job, options=options)
    else:
        options = kubernetes.KubernetesOptions(image=image or "", namespace=namespace)
        text = _or_launch_error(kubernetes.manifest_text, launch=job, options=options)
    if output is None:
        click.echo(text, nl=False)
        return
    _write(output, text, executable=kind == "slurm")
    click.echo(f"wrote {output}: {_next_step(kind, output)}", err=True)


# --------------------------------------------------------------------------- the flags


def _scheduler(slurm: bool, kubernetes: bool) -> str:
    if slurm == kubernetes:
        raise LaunchError("give one of --slurm and --kubernetes" if not slurm else "--slurm and --kubernetes go alone: give one")
    return "slurm" if slurm else "kubernetes"


def _reject_foreign_options(ctx: click.Context, kind: str) -> None:
    """A Slurm option with --kubernetes (or the reverse) would not reach the file: say so."""
    foreign = KUBERNETES_ONLY if kind == "slurm" else SLURM_ONLY
    given = [name for name in foreign if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        other = "--kubernetes" if kind == "slurm" else "--slurm"
        raise LaunchError(f"{flags} {'is' if len(given) == 1 else 'are'} for {other}, not --{kind}")


def _check_text(*words: str) -> None:
    """Bytes the command line could not decode (lone surrogates) cannot be written to a UTF-8 file."""
    for word in words:
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:
            raise LaunchError(f"{word.encode('utf-8', 'surrogateescape')!r} is not text in UTF-8") from None


def _or_launch_error(build: Any, **fields: Any) -> Any:
    """`build(**fields)`, a JobError from it (a value the file cannot hold) made a one-line error."""
    try:
        return build(**fields)
    except JobError as exc:
        raise LaunchError(str(exc)) from None


# --------------------------------------------------------------------------- the script


def _check_script(job: Launch) -> None:
    """The script must exist and parse, and get the arguments its parser requires; one that is
    not migrated yet is only worth a warning (the job file is right for it once it is)."""
    path = Path(job.script)
    if not path.is_file():
        raise LaunchError(f"{job.script}: {'is a directory' if path.is_dir() else 'no such file'}")
    result = _engine_verdict(path, job.script)
    if result is None:
        return
    missing = missing_arguments(result.launch_args or (), job.args)
    script = shlex.quote(job.script)
    if missing:
        raise LaunchError(
            f"{job.script} requires {', '.join(missing)} (its argparse parser says so): "
            f"give {'it' if len(missing) == 1 else 'them'} after --, as in "
            f"ddp-migrate launch {script} ... -- {' '.join(missing)}"
        )
    if result.changed:
        _warn(f"{job.script} is not migrated yet (ddp-migrate would change it): run "
              f"ddp-migrate --in-place {script} first; the job file is written anyway")


def _engine_verdict(path: Path, name: str) -> Optional["Result"]:
    """api.check on the script, with the project's [tool.ddp-migrate] settings; None (and a
    warning) when the engine itself fails, which must not keep the user from a job file."""
    from migrator import files
    from migrator.context import FileContext
    from migrator.errors import SourceParseError

    try:
        source = files.read_source(path)
    except SourceParseError as exc:
        raise LaunchError(f"{name}:{exc.line}:{exc.col}: cannot read: {exc.message}") from None
    except files.FileError as exc:
        raise LaunchError(f"{name}: {exc.message}") from None
    options = _options(path)
    try:
        from migrator.api import check

        return check(source.text, options, FileContext.for_file(path, name), first_look=False)
    except SourceParseError as exc:
        raise LaunchError(f"{name}:{exc.line}:{exc.col}: cannot parse: {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - an engine bug is reported, not raised
        problem = " ".join(f"{type(exc).__name__}: {exc}".split())
        _warn(f"{name}: could not be analysed ({problem}); its required arguments are not checked")
        return None


def _options(path: Path) -> "Options":
    """The Options the main command would use for this file (its nearest [tool.ddp-migrate])."""
    from migrator.config import discover_config, resolve_rules
    from migrator.errors import ConfigError

    try:
        config = discover_config((path,), None, False)
    except ConfigError as exc:
        raise LaunchError(str(exc)) from None
    return replace(resolve_rules(config.rules), batch=config.batch, eval=config.eval)


# --------------------------------------------------------------------------- the file


def _check_output(output: Optional[Path], force: bool) -> None:
    """Before any work: a file in the way is the first thing to know."""
    if output is None:
        if force:
            raise LaunchError("--force goes with --output FILE")
        return
    if output.is_dir():
        raise LaunchError(f"--output {output}: is a directory")
    if (output.exists() or output.is_symlink()) and not force:
        raise LaunchError(f"--output {output}: the file exists; add --force to overwrite it")


def _write(output: Path, text: str, *, executable: bool) -> None:
    from migrator import files

    try:
        files.write_atomic(output, text, "utf-8", False, executable=executable)
    except files.FileError as exc:
        raise LaunchError(str(exc)) from None


def _next_step(kind: str, output: Path) -> str:
    if kind == "slurm":
        return f"submit it with sbatch {shlex.quote(str(output))}"
    return f"start it with kubectl create -f {shlex.quote(str(output))}"


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)



def main(argv: Sequence[str]) -> None:
    """`ddp-migrate launch ARGS` (migrator.cli.SUBCOMMANDS)."""
    launch.main(args=list(argv), prog_name="ddp-migrate launch")
