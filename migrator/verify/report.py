"""A verification's outcome as data: the rows, what each rank did, the timings, the exit status;
and its JSON document (--output-format json). The text form is render.py's.

Exit status: 0 every check passed (SKIPs allowed), 1 a check failed, 2 the script failed before
training started (or the command was misused: click's and command.py's errors).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from migrator.verify import checks, stacks
from migrator.verify.checks import FAIL, PASS, SKIP, Observed, Row
from migrator.verify.probe import PROBE_DIR
from migrator.verify.runner import Run

JSON_VERSION = 1
EXIT_PASSED, EXIT_FAILED, EXIT_ERROR = 0, 1, 2
#: Lines of a failed rank's traceback shown (its end: where it raised).
TRACEBACK_LINES = 16


@dataclass(frozen=True)
class Detail:
    """A block shown under the table: a rank's stack, a traceback's end."""

    heading: str
    text: str


@dataclass
class Report:
    script: str
    command: List[str]
    nproc: int
    device: str
    steps_per_epoch: int
    epochs: int
    rows: List[Row] = field(default_factory=list)
    ranks: Dict[int, dict] = field(default_factory=dict)
    timings: Dict[str, float] = field(default_factory=dict)
    details: List[Detail] = field(default_factory=list)
    error: Optional[str] = None  # the script failed before training: what it raised

    @property
    def failed(self) -> List[Row]:
        return [row for row in self.rows if row.verdict == FAIL]

    @property
    def exit_status(self) -> int:
        if self.error is not None:
            return EXIT_ERROR
        return EXIT_FAILED if self.failed else EXIT_PASSED

    def last_line(self) -> str:
        """The verdict in one line, naming the failing checks."""
        if self.error is not None:
            return f"verify: {self.script} failed before training started: {self.error}"
        counts = {verdict: sum(row.verdict == verdict for row in self.rows) for verdict in (PASS, FAIL, SKIP)}
        skipped = f", {counts[SKIP]} skipped" if counts[SKIP] else ""
        if self.failed:
            names = ", ".join(f"{row.name} ({row.title})" for row in self.failed)
            return f"verify: FAIL {names}"
        return (f"verify: PASS, {counts[PASS]} checks passed{skipped} ({self.nproc} processes, {self.epochs} epochs "
                f"of at most {self.steps_per_epoch} batches, {self.timings.get('total_s', 0):.1f}s)")

    def to_json(self) -> str:
        return json.dumps({
            "version": JSON_VERSION,
            "script": self.script,
            "command": self.command,
            "nproc": self.nproc,
            "device": self.device,
            "steps_per_epoch": self.steps_per_epoch,
            "epochs": self.epochs,
            "exit_status": self.exit_status,
            "passed": self.exit_status == EXIT_PASSED,
            "failed": [row.name for row in self.failed],
            "error": self.error,
            "checks": [{"name": r.name, "title": r.title, "verdict": r.verdict, "evidence": r.evidence}
                       for r in self.rows],
            "ranks": {str(rank): summary for rank, summary in sorted(self.ranks.items())},
            "timings": {key: round(value, 3) for key, value in self.timings.items()},
            "details": [{"heading": d.heading, "text": d.text} for d in self.details],
        }, indent=2) + "\n"


def build(observed: Observed, timings: Dict[str, float], command: List[str]) -> Report:
    plan = observed.plan
    report = Report(plan.script, command, plan.nproc, plan.device, plan.steps_per_epoch, plan.epochs,
                    ranks=rank_summaries(observed), timings=dict(timings))
    # DataLoader workers that joined the process group make the ranks die before training, too
    # (the worker's end raises in its rank): that is the checks' finding, not a bare error.
    if checks.failed_before_training(observed.run, plan.nproc) and not observed.run.worker_inits:
        report.error = _error_line(observed.run)
        report.details = traceback_details(observed.run)
        return report
    report.rows = checks.judge(observed)
    report.details = stack_details(observed) + traceback_details(observed.run)
    if observed.original is not None and observed.original.returncode != 0:
        report.details += traceback_details(observed.original, "the original")
    return report


def _error_line(run: Run) -> str:
    raised = checks.failed_ranks(run)
    if raised:
        rank, exc = raised[0]
        others = [r for r, e in raised[1:] if e.get("type") == exc.get("type")]
        who = f"ranks {', '.join(map(str, [rank, *others]))}" if others else f"rank {rank}"
        message = str(exc.get("message") or "").strip().splitlines()
        return f"{who} raised {exc.get('type')}: {message[0][:300] if message else ''}".rstrip(": ")
    return f"exit status {run.returncode} before any optimizer step (its output's end is below)"


def traceback_details(run: Run, whose: str = "") -> List[Detail]:
    """The end of each failed rank's traceback (once per distinct traceback); without a record
    of one, the end of the run's stderr."""
    if run.returncode == 0 or not run.exited:
        return []
    prefix = f"{whose}: " if whose else ""
    seen: Dict[str, List[int]] = {}
    for rank, exc in checks.failed_ranks(run):
        text = exc.get("traceback") or f"{exc.get('type')}: {exc.get('message')}"
        seen.setdefault(traceback_tail(text), []).append(rank)
    if seen:
        return [Detail(f"{prefix}traceback of {'ranks' if len(ranks) > 1 else 'rank'} {', '.join(map(str, ranks))} "
                       f"(last lines)", text) for text, ranks in seen.items()]
    stderr = _without_launcher_traceback(run.stderr)
    return [Detail(f"{prefix}stderr (last lines)", _last_lines(stderr, TRACEBACK_LINES + 3))] if stderr.strip() else []


def stack_details(observed: Observed) -> List[Detail]:
    roles = {alive.get("pid"): alive for alive in observed.run.alive}
    out = []
    for pid, dump in sorted(observed.run.stacks.items(), key=lambda kv: checks.role_order(roles.get(kv[0]))):
        frames = stacks.main_thread(dump)
        text = "\n".join(f'File "{f.file}", line {f.line} in {f.func}' for f in frames) or dump
        out.append(Detail(f"stack of {checks.role_label(roles.get(pid), pid)} (pid {pid}, most recent call first)",
                          text))
    return out


def traceback_tail(text: str, lines: int = TRACEBACK_LINES) -> str:
    """A traceback's header and its last frames (where it raised), without the probe's own frames
    (its wrappers around torch's functions are not the user's concern)."""
    kept: List[str] = []
    skipping = False
    for line in text.rstrip().splitlines():
        if line.startswith('  File "'):
            skipping = str(PROBE_DIR) in line
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    header = [kept[0]] if kept and kept[0].startswith("Traceback") else []
    body = kept[len(header):]
    return "\n".join(header + (["  ..."] if len(body) > lines else []) + body[-lines:])


def _last_lines(text: str, count: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-count:])


def _without_launcher_traceback(stderr: str) -> str:
    """stderr without torchrun's own closing ChildFailedError traceback (it only repeats that a
    worker failed)."""
    marker = "Traceback (most recent call last):"
    last = stderr.rfind(marker)
    if last >= 0 and "ChildFailedError" in stderr[last:]:
        return stderr[:last]
    return stderr


def rank_summaries(observed: Observed) -> Dict[int, dict]:
    """What each rank did, in numbers (the JSON report's "ranks")."""
    out: Dict[int, dict] = {}
    for rank, record in sorted(observed.records.items()):
        loader = checks.training_loader(record) or {}
        exc = record.get("exception")
        out[rank] = {
            "pid": record.get("pid"),
            "ended": ("stopped by verify" if record.get("stop") else
                      f"raised {exc.get('type')}" if exc else "ended by itself"),
            "optimizer_steps": record.get("optimizer_steps", 0),
            "epochs": len(loader.get("iterations", [])),
            "batches_per_epoch": [it.get("batches", 0) for it in loader.get("iterations", [])],
            "ddp_modules": [m.get("module_class") for m in record.get("ddp", [])],
            "world_size": next((c.get("world_size") for c in record.get("init_process_group", [])), None),
            "probe_errors": record.get("probe_errors", []),
            "probe_seconds": record.get("probe_seconds"),
        }
    for rank in set(range(observed.plan.nproc)) - set(out):
        out[rank] = {"ended": "no record"}
    return out
