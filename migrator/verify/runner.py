"""Start a script under torchrun (or as one plain process) with the probe armed; collect what
its processes recorded.

Never imports torch (ddp-migrate does not depend on it): the script runs in the interpreter the
user names, the probe (probe/sitecustomize.py) is put first on that interpreter's PYTHONPATH,
and what it saw comes back as JSON files in a temporary folder. However a run ends, every process
of it goes with it (torchrun, its workers, which torchrun starts in sessions of their own, their
DataLoader workers): they are found by descent and by the run's probe folder in their
environment (_RunProcesses), asked for their stacks when the run hung, then ended.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from migrator.verify.probe import PROBE_DIR

#: Variables of an enclosing launcher (verify run inside a job) that must not reach the run.
LAUNCHER_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE", "_DDP_PROBE_OWNER_PID", "_DDP_PROBE_DL_PARENT", "DDP_PROBE_DIR",
    "DDP_PROBE_SINGLE", "DDP_PROBE_MAX_BATCHES", "DDP_PROBE_EPOCHS", "DDP_PROBE_WATCH",
    "DDP_PROBE_COUNT_SYNCS",
)

#: A DataLoader worker that called init_process_group blocks in the rendezvous: the run is
#: given this long to end by itself before it is judged hung and ended.
WORKER_INIT_GRACE_S = 3.0
#: How long processes get to write their stacks after SIGUSR1, and to end after SIGTERM.
STACK_WAIT_S = 1.0
TERM_WAIT_S = 3.0
#: What is kept of a run's stdout and stderr (their ends).
OUTPUT_KEPT_CHARS = 200_000
_POLL_S = 0.2


@dataclass(frozen=True)
class Plan:
    """What to run and how: the script as the user would start it, in the user's folder."""

    script: str
    args: Tuple[str, ...] = ()
    python: str = sys.executable
    nproc: int = 2
    device: str = "cpu"
    steps_per_epoch: int = 3
    epochs: int = 2
    timeout: float = 300.0
    cwd: Path = field(default_factory=Path.cwd)


@dataclass
class Run:
    """What one run came to."""

    label: str  # "migration" or "original"
    command: List[str]
    returncode: Optional[int]  # None: it was ended (see `ended`)
    ended: str  # "exited", "timeout" or "worker-hang" (a DataLoader worker joined the group)
    duration_s: float
    timeout: float
    stdout: str = ""
    stderr: str = ""
    records: Dict[int, dict] = field(default_factory=dict)  # rank -> the probe's record
    unreadable: Dict[str, str] = field(default_factory=dict)  # record file -> why
    alive: List[dict] = field(default_factory=list)  # the probed processes (alive-<pid>.json)
    stacks: Dict[int, str] = field(default_factory=dict)  # pid -> faulthandler's dump
    worker_inits: List[dict] = field(default_factory=list)  # worker-init-<pid>.json
    survivors: List[int] = field(default_factory=list)  # pids of the group still there after the end

    @property
    def exited(self) -> bool:
        return self.ended == "exited"


# --------------------------------------------------------------------------- the interpreter


class NoTorch(Exception):
    """The interpreter cannot run the script's training: a one-line reason."""


def check_interpreter(python: str) -> str:
    """The interpreter's path, after making sure it exists and finds torch (without importing it)."""
    path = shutil.which(python) if os.sep not in python else (python if os.access(python, os.X_OK) else None)
    if path is None:
        raise NoTorch(f"--python {python}: no such interpreter")
    probe = "import importlib.util as u; s = u.find_spec('torch'); print(s.origin if s else '')"
    try:
        found = subprocess.run([path, "-c", probe], capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoTorch(f"{path} did not run: {exc}") from None
    if found.returncode != 0:
        raise NoTorch(f"{path} did not run: {(found.stderr.strip().splitlines() or ['?'])[-1]}")
    if not found.stdout.strip():
        raise NoTorch(f"{path} has no torch: install torch there, or pass --python with the interpreter "
                      "of the training environment")
    return path


# --------------------------------------------------------------------------- commands and environment


def torchrun_command(plan: Plan) -> List[str]:
    """`python -m torch.distributed.run` is what the torchrun entry point runs, in `plan.python`."""
    return [plan.python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={plan.nproc}",
            plan.script, *plan.args]


def plain_command(plan: Plan, script: str) -> List[str]:
    return [plan.python, script, *plan.args]


def probe_env(plan: Plan, out_dir: Path, single: bool = False) -> Dict[str, str]:
    """The user's environment, with the probe first on PYTHONPATH (theirs kept after it) and armed
    with verify's settings; on CPU, CUDA hidden so the script takes its CPU path (gloo)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(PROBE_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(DDP_PROBE_DIR=str(out_dir), DDP_PROBE_MAX_BATCHES=str(plan.steps_per_epoch),
               DDP_PROBE_EPOCHS=str(plan.epochs), DDP_PROBE_WATCH="1",
               PYTHONUNBUFFERED="1")  # output in order, and kept when a hung run is killed
    if single:
        env["DDP_PROBE_SINGLE"] = "1"
    if plan.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


# --------------------------------------------------------------------------- running


def run_migration(plan: Plan) -> Run:
    """The script under torchrun, on plan.nproc processes."""
    return probed_run("migration", torchrun_command(plan), plan, single=False)


def run_original(plan: Plan, original: str) -> Run:
    """The original script as one plain process, with the same batch and epoch limits."""
    return probed_run("original", plain_command(plan, original), plan, single=True)


def probed_run(label: str, command: List[str], plan: Plan, single: bool) -> Run:
    """Run `command` in the user's folder with the probe armed, in a session of its own; collect
    its records, stacks (when it had to be ended) and output from a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="ddp-verify-") as tmp:
        out_dir = Path(tmp) / "probe"
        out_dir.mkdir()
        logs = (Path(tmp) / "stdout.txt", Path(tmp) / "stderr.txt")
        started = time.monotonic()
        with open(logs[0], "w") as stdout, open(logs[1], "w") as stderr:
            proc = subprocess.Popen(command, cwd=str(plan.cwd), env=probe_env(plan, out_dir, single),
                                    stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True)
            ended, stacks, survivors = _supervise(proc, started + plan.timeout, out_dir)
        records, unreadable = _read_records(out_dir)
        return Run(label, command, proc.returncode if ended == "exited" else None, ended,
                   time.monotonic() - started, plan.timeout, _tail(logs[0]), _tail(logs[1]), records, unreadable,
                   _read_json_files(out_dir, "alive-*.json"), stacks,
                   _read_json_files(out_dir, "worker-init-*.json"), survivors)


def _supervise(proc: subprocess.Popen, deadline: float, out_dir: Path) -> Tuple[str, Dict[int, str], List[int]]:
    """Wait for the run; take the stacks of one that has to be ended; end every process of it in
    every case (a worker left behind too). Returns (how it ended, stacks, survivors)."""
    run = _RunProcesses(proc.pid, out_dir)
    try:
        ended = _wait(proc, deadline, out_dir)
    except BaseException:  # Ctrl-C: the run is in sessions of its own and would not see it
        _end_all(proc, run)
        raise
    stacks = _collect_stacks(out_dir, run) if ended != "exited" else {}
    return ended, stacks, _end_all(proc, run)


def _wait(proc: subprocess.Popen, deadline: float, out_dir: Path) -> str:
    """Until the run exits ("exited"), the deadline passes ("timeout"), or a DataLoader worker
    joined the process group and the run did not end within WORKER_INIT_GRACE_S ("worker-hang")."""
    worker_init_seen: Optional[float] = None
    while True:
        try:
            proc.wait(timeout=_POLL_S)
            return "exited"
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now >= deadline:
            return "timeout"
        if worker_init_seen is None and any(out_dir.glob("worker-init-*.json")):
            worker_init_seen = now
        if worker_init_seen is not None and now - worker_init_seen >= WORKER_INIT_GRACE_S:
            return "worker-hang"


class _RunProcesses:
    """The live processes of one run. torchrun starts each worker in a session of its own, so the
    launcher's process group is not enough: a process belongs to the run when it descends from
    the launcher, or when its environment carries this run's probe folder (every process of the
    run inherits it; so an orphan whose launcher was killed is still found). Zombies are dead."""

    def __init__(self, root: int, out_dir: Path) -> None:
        self.root = root
        self.marker = f"DDP_PROBE_DIR={out_dir}".encode()

    def pids(self) -> List[int]:
        proc_root = Path("/proc")
        if not proc_root.is_dir():  # pragma: no cover - not Linux: the launcher's group is what there is
            try:
                os.killpg(self.root, 0)
                return [self.root]
            except OSError:
                return []
        children: Dict[int, List[int]] = {}
        found = set()
        for entry in proc_root.iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            try:
                stat = (entry / "stat").read_text()
                fields = stat[stat.rfind(")") + 2:].split()
                if fields[0] == "Z":
                    continue
                children.setdefault(int(fields[1]), []).append(pid)
                if self.marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(pid)
            except (OSError, IndexError, ValueError):
                continue
        todo = [self.root] if self.root in children.get(os.getpid(), []) else []  # the launcher, while alive
        while todo:
            pid = todo.pop()
            found.add(pid)
            todo.extend(children.get(pid, []))
        return sorted(found)


def _collect_stacks(out_dir: Path, run: _RunProcesses) -> Dict[int, str]:
    """SIGUSR1 to every probed process of the run still there (faulthandler writes its stacks; a
    pid that ended and was reused by another process is not the run's, and is left alone)."""
    members = set(run.pids())
    asked = []
    for alive in _read_json_files(out_dir, "alive-*.json"):
        pid = alive.get("pid")
        if isinstance(pid, int) and pid in members:
            try:
                os.kill(pid, signal.SIGUSR1)
                asked.append(pid)
            except OSError:
                pass
    if asked:
        time.sleep(STACK_WAIT_S)
    stacks = {}
    for pid in asked:
        try:
            text = (out_dir / f"stack-{pid}.txt").read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            stacks[pid] = text
    return stacks


def _end_all(proc: subprocess.Popen, run: _RunProcesses) -> List[int]:
    """End every process of the run: SIGTERM first (torchrun then stops its workers as it would on
    a node's shutdown), then SIGKILL for what is left. Returns the pids still there after that
    (none, unless a process is stuck in the kernel)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        members = run.pids()
        if not members and proc.poll() is not None:
            break
        for pid in members:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + TERM_WAIT_S
        while time.monotonic() < deadline and (proc.poll() is None or run.pids()):
            time.sleep(0.1)
    try:
        proc.wait(timeout=TERM_WAIT_S)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
        pass
    return run.pids()


# --------------------------------------------------------------------------- reading back


def _read_records(out_dir: Path) -> Tuple[Dict[int, dict], Dict[str, str]]:
    records: Dict[int, dict] = {}
    bad: Dict[str, str] = {}
    for path in sorted(out_dir.glob("rank*.json")):
        try:
            record = json.loads(path.read_text())
            records[int(record["rank"])] = record
        except Exception as exc:  # noqa: BLE001 - reported by the checks, not raised
            bad[path.name] = f"{type(exc).__name__}: {exc}"
    return records, bad


def _read_json_files(out_dir: Path, pattern: str) -> List[dict]:
    found = []
    for path in sorted(out_dir.glob(pattern)):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - OUTPUT_KEPT_CHARS))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def command_line(command: Sequence[str]) -> str:
    """A command as one shell line (for messages)."""
    import shlex

    return shlex.join(command)
