"""`ddp-migrate verify`: the command line. Flags -> runner.Plan; run; checks.judge; render; exit.

Reached through migrator.cli.main when the first argument is `verify` (so the migration command
and its start-up stay as they are). Bad input is one line on stderr and exit status 2, never a
traceback: click's own usage errors are caught and shown that way too.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional, Sequence, Tuple

import click

from migrator import render
from migrator.verify import runner
from migrator.verify.checks import Observed, failed_before_training
from migrator.verify.report import EXIT_ERROR, Report, build

PROG = "ddp-migrate verify"
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT


class VerifyUsageError(click.ClickException):
    exit_code = EXIT_ERROR


@click.command(context_settings=CONTEXT_SETTINGS)
@click.argument("script", metavar="SCRIPT")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED, metavar="[-- SCRIPT_ARGS...]")
@click.option("--nproc", type=int, default=2, show_default=True, help="Processes torchrun starts (--nproc_per_node).")
@click.option("--steps-per-epoch", "steps", type=int, default=3, show_default=True, metavar="K",
              help="Each pass over a DataLoader ends after K batches.")
@click.option("--epochs", type=int, default=2, show_default=True, metavar="E",
              help="The run ends after E epochs of the script's own loop.")
@click.option("--original", metavar="ORIGINAL",
              help="The script before the migration: run as one plain process for the same steps, its "
                   "checkpoint files and keys must match the migration's.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: CUDA hidden, the script takes its CPU path (gloo). cuda: the visible GPUs (nccl).")
@click.option("--timeout", type=float, default=300.0, show_default=True, metavar="S",
              help="A run still going after S seconds is ended, with each rank's stack shown.")
@click.option("--python", "python", metavar="PATH", default=None,
              help="The interpreter that runs the script (the training environment's); default: the one "
                   "ddp-migrate runs in. It must have torch.")
@click.option("--output-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: a table on stdout. json: one JSON object on stdout (for CI).")
@click.option("--color", type=click.Choice(render.COLOR_CHOICES), default="auto", show_default=True,
              help="Colour the table. 'auto' colours a terminal only.")
@click.pass_context
def verify(ctx: click.Context, script: str, script_args: Tuple[str, ...], nproc: int, steps: int, epochs: int,
           original: Optional[str], device: str, timeout: float, python: Optional[str], output_format: str,
           color: str) -> None:
    """Run SCRIPT (a migrated training script) briefly under torchrun and check that it trains right.

    \b
    It runs SCRIPT as it is on disk, with your arguments, data and working directory:
        python -m torch.distributed.run --standalone --nproc_per_node=N SCRIPT SCRIPT_ARGS...
    through a probe that watches every process (nothing in the script is edited). It writes what
    the script writes, where the script writes it.

    \b
    The run is kept short without editing the script:
      * every pass over a DataLoader ends after K batches (--steps-per-epoch);
      * an epoch is a pass over the training loader (the DataLoader whose batches are followed by
        optimizer steps; one with a DistributedSampler first). When pass E+1 would start
        (--epochs), the script is stopped there, on every rank at the same point: a SystemExit
        that `except Exception` does not catch, so its `finally` blocks (destroy_process_group)
        run, and every process exits 0. A script whose own loop ends earlier simply ends; code
        after the loop runs only then.

    \b
    Checks (PASS, FAIL or SKIP, each with its evidence): the run ends cleanly; the process group
    comes up with world N; DDP wraps the model; each rank's training batches are its own and
    change from epoch to epoch; parameters are identical on every rank after equal, non-zero
    optimizer steps; only rank 0 writes files and prints or draws progress bars;
    destroy_process_group runs on every rank; DataLoader workers stay out of the process group;
    with --original, the checkpoints keep the original's files and keys.

    \b
    Exit status: 0 every check passed, 1 a check failed (named on the last line), 2 a usage
    error or a script that failed before training started (with its traceback's end).
    """
    plan = _plan(script, script_args, nproc, steps, epochs, device, timeout, python, original)
    text = output_format == "text"
    err = render.make_console(color, stderr=True)
    out = render.make_console(color)
    started = time.monotonic()
    if text:
        render.print_verify_status(err, f"verify: {runner.command_line(runner.torchrun_command(plan))} "
                                        f"({'CUDA hidden' if device == 'cpu' else 'the visible GPUs'}, "
                                        f"{steps} batches per pass, {epochs} epochs)")
    run = runner.run_migration(plan)
    original_run = None
    if original is not None and not failed_before_training(run, nproc):
        if text:
            plain = runner.command_line(runner.plain_command(plan, original))
            render.print_verify_status(err, f"verify: the original, {plain}")
        original_run = runner.run_original(plan, original)
    timings = {"run_s": run.duration_s, "total_s": time.monotonic() - started}
    if original_run is not None:
        timings["original_s"] = original_run.duration_s
    report = build(Observed(plan, run, original_run, original), timings, runner.torchrun_command(plan))
    _show(report, out, err, output_format)
    ctx.exit(report.exit_status)


def _plan(script: str, script_args: Tuple[str, ...], nproc: int, steps: int, epochs: int, device: str,
          timeout: float, python: Optional[str], original: Optional[str]) -> runner.Plan:
    """The flags as a Plan, each checked: a one-line usage error for the first that is wrong."""
    for flag, value in (("--nproc", nproc), ("--steps-per-epoch", steps), ("--epochs", epochs)):
        if value < 1:
            raise VerifyUsageError(f"{flag} must be 1 or more, not {value}")
    if not timeout > 0:
        raise VerifyUsageError(f"--timeout must be more than 0 seconds, not {timeout:g}")
    for what, path in (("SCRIPT", script), ("--original", original)):
        if path is not None and not Path(path).is_file():
            raise VerifyUsageError(f"{what} {path}: no such file")
    try:
        interpreter = runner.check_interpreter(python or sys.executable)
    except runner.NoTorch as exc:
        raise VerifyUsageError(str(exc)) from None
    return runner.Plan(script=script, args=tuple(script_args), python=interpreter, nproc=nproc, device=device,
                       steps_per_epoch=steps, epochs=epochs, timeout=timeout, cwd=Path.cwd())


def _show(report: Report, out: render.Console, err: render.Console, output_format: str) -> None:
    if output_format == "json":
        render.print_text(out, report.to_json())
    elif report.error is not None:  # nothing to judge: what went wrong, on stderr
        render.print_verify_details(err, report)
        render.print_verify_verdict(err, report)
    else:
        render.print_verify_table(out, report)


def main(argv: Sequence[str]) -> None:
    """`ddp-migrate verify ARGS`: exits with the command's status."""
    try:
        status = verify.main(args=list(argv), prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:  # usage errors included: one line, no usage block
        click.echo(f"{PROG}: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code if isinstance(exc.exit_code, int) else EXIT_ERROR)
    except click.exceptions.Abort:  # Ctrl-C: the run's processes were ended (runner.probed_run)
        click.echo(f"{PROG}: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(status if isinstance(status, int) else 0)
