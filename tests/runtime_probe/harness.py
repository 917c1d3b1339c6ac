"""Run a training script under torchrun (or plainly) with the probe armed, and read what it saw.

    report = run_torchrun(script, workdir)          # python -m torch.distributed.run --standalone
    assert report.returncode == 0, report.explain()
    report.records[0]["ddp"][0]["param_checksum"]

The script is copied into `workdir` and run there, so the checkpoints it writes land in
`workdir`. `support=<folder>` also copies every file under that folder into `workdir`, next to
the script (sibling modules the script imports, e.g. a fixture's support/function.py), as is.
The probe's records are read into the report; the probe folder is temporary.
The probe is ddp-migrate verify's (migrator/verify/probe/sitecustomize.py), run with its watch of
what each process prints and writes, and none of its limits: no batch limit, no stop. Its record
format is documented in sitecustomize.RECORD_FORMAT.
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

from migrator.verify.probe import PROBE_DIR  # holds sitecustomize.py: the one probe, ddp-migrate verify's

# Variables of an enclosing torchrun/launcher that must not leak into the run under test.
_LAUNCHER_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE", "_DDP_PROBE_OWNER_PID", "DDP_PROBE_DIR", "DDP_PROBE_SINGLE",
    # ddp-migrate verify's settings of the probe: never on in these tests (the watch is set below)
    "DDP_PROBE_MAX_BATCHES", "DDP_PROBE_EPOCHS", "DDP_PROBE_WATCH", "_DDP_PROBE_DL_PARENT",
)


@dataclass
class RunReport:
    """What one run did: exit status, output, and the probe's record of each rank."""

    command: List[str]
    workdir: Path
    returncode: Optional[int]  # None: killed after `timeout` seconds
    stdout: str
    stderr: str
    duration_s: float
    timeout: float
    records: Dict[int, dict] = field(default_factory=dict)  # rank -> parsed rank<N>.json
    unreadable_records: Dict[str, str] = field(default_factory=dict)  # file name -> error
    label: str = ""  # what ran (e.g. "fixture mnist_main_argparse, expected.py"), for messages
    exit_aborts: List[str] = field(default_factory=list)  # earlier attempts lost to gloo's exit race

    # -- status ------------------------------------------------------------------
    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def ranks(self) -> List[int]:
        return sorted(self.records)

    def record(self, rank: int) -> dict:
        return self.records[rank]

    # -- views over all ranks -----------------------------------------------------
    def ddp_modules(self, rank: int) -> List[dict]:
        return list(self.records[rank].get("ddp", []))

    def init_calls(self, rank: int) -> List[dict]:
        return list(self.records[rank].get("init_process_group", []))

    def saves(self, rank: Optional[int] = None) -> List[dict]:
        """torch.save calls (of one rank, or of all ranks, each entry tagged with "probe_rank")."""
        ranks = self.ranks if rank is None else [rank]
        return [dict(s, probe_rank=r) for r in ranks for s in self.records[r].get("saves", [])]

    def saved_paths(self, rank: Optional[int] = None) -> List[str]:
        """Paths written by torch.save, relative to the workdir where possible."""
        return [self.relative_path(s) for s in self.saves(rank)]

    def relative_path(self, save: dict) -> str:
        """A save's path relative to the workdir (absolute outside it; repr of the file object
        when torch.save got a nameless buffer)."""
        path = save.get("path")
        if path is None:
            return save.get("file", "?")
        try:
            return str(Path(path).resolve().relative_to(self.workdir.resolve()))
        except ValueError:
            return path

    def saves_by_path(self, rank: Optional[int] = None) -> Dict[str, List[dict]]:
        """torch.save calls grouped by relative path (files only: nameless buffers are left out),
        each entry tagged with "probe_rank", in call order."""
        out: Dict[str, List[dict]] = {}
        for s in self.saves(rank):
            if s.get("path") is not None:
                out.setdefault(self.relative_path(s), []).append(s)
        return out

    def loaders(self, rank: int) -> List[dict]:
        """The DataLoaders `rank` iterated, in order of their first pass."""
        return list(self.records[rank].get("loaders", []))

    def sampler(self, rank: int, loader: dict) -> Optional[dict]:
        """The DistributedSampler record of a loader record (None: not a DistributedSampler)."""
        index = loader.get("sampler_index")
        samplers = self.records[rank].get("samplers", [])
        return samplers[index] if index is not None and index < len(samplers) else None

    def loader_iterations(self, rank: int, loader: int = 0) -> List[dict]:
        """The sampler's yield for each pass over DataLoader number `loader` on `rank`."""
        loaders = self.records[rank].get("loaders", [])
        return list(loaders[loader]["iterations"]) if loader < len(loaders) else []

    def set_epoch_calls(self, rank: int) -> List[dict]:
        return list(self.records[rank].get("set_epoch_calls", []))

    # -- messages -----------------------------------------------------------------
    def tail(self, text: str, lines: int = 40) -> str:
        kept = text.rstrip().splitlines()[-lines:]
        return "\n".join("    " + line for line in kept) or "    <empty>"

    def explain(self, lines: int = 40) -> str:
        """A block for assertion messages: the command, its status and the tail of its output."""
        status = f"killed after {self.timeout:.0f}s timeout" if self.timed_out else f"exit code {self.returncode}"
        parts = ([f"run:     {self.label}"] if self.label else []) + [
            f"command: {' '.join(self.command)}",
            f"workdir: {self.workdir}",
            f"status:  {status} after {self.duration_s:.1f}s",
            f"probe records from ranks: {self.ranks or 'none'}",
        ]
        for name, err in self.unreadable_records.items():
            parts.append(f"unreadable probe record {name}: {err}")
        for rank in self.ranks:
            errors = self.records[rank].get("probe_errors") or []
            if errors:
                parts.append(f"probe errors on rank {rank}: {errors}")
            exc = self.records[rank].get("exception")
            if exc:
                parts.append(f"rank {rank} uncaught {exc['type']}: {exc['message']}")
        workers, root_cause = split_launcher_error(self.stderr)
        if root_cause:
            parts.append(f"--- stderr without torchrun's own traceback (last {lines} lines) ---\n"
                         f"{self.tail(workers, lines)}")
            parts.append(f"--- torchrun: {root_cause}")
        else:
            parts.append(f"--- stderr (last {lines} lines) ---\n{self.tail(self.stderr, lines)}")
        parts.append(f"--- stdout (last {min(lines, 15)} lines) ---\n{self.tail(self.stdout, min(lines, 15))}")
        return "\n".join(parts)


def split_launcher_error(stderr: str) -> Tuple[str, str]:
    """Separate torchrun's closing ChildFailedError traceback from the workers' output.

    Returns (stderr without that traceback, one line naming the root-cause rank and exit
    code); ("stderr", "") when torchrun did not fail that way.
    """
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line == "Traceback (most recent call last):"]
    if not starts or "ChildFailedError" not in stderr[stderr.rfind("Traceback (most recent call last):"):]:
        return stderr, ""
    start = starts[-1]
    launcher = lines[start:]
    summary = []
    if any(line.startswith("Root Cause") for line in launcher):
        cause = launcher[next(i for i, line in enumerate(launcher) if line.startswith("Root Cause")):]
        for line in cause:
            key, _, value = line.strip().partition(":")
            if key.strip() in ("rank", "exitcode"):
                summary.append(f"{key.strip()} {value.strip()}")
    return "\n".join(lines[:start]), "root cause " + (", ".join(summary) or "unknown")


def probe_env(probe_dir: Path, single: bool = False, cpu_only: bool = True,
              extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment for a probed run: our sitecustomize first on PYTHONPATH, probe armed."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(PROBE_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["DDP_PROBE_DIR"] = str(probe_dir)
    if single:
        env["DDP_PROBE_SINGLE"] = "1"
    # verify's watch of what each process prints and writes (no batch limit, no stop): the
    # rank0_output check reads it.
    env["DDP_PROBE_WATCH"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("PYTHONHASHSEED", "0")
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CUDA build of torch still trains on CPU with gloo
    if extra:
        env.update(extra)
    return env


def _place_script(script: Path, workdir: Path, name: Optional[str] = None,
                  support: Optional[Path] = None) -> Path:
    script = Path(script).resolve()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if support is not None:  # sibling modules first, so the script itself always wins a name clash
        shutil.copytree(support, workdir, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    target = workdir / (name or script.name)
    if target.resolve() != script:
        shutil.copyfile(script, target)
    return target


def _run(command: List[str], workdir: Path, env: Dict[str, str], timeout: float) -> tuple:
    """Run in a new session so that on timeout the whole tree (launcher and workers) is ended."""
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=str(workdir), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        returncode: Optional[int] = proc.returncode
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                stdout, stderr = proc.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:  # pragma: no cover
            stdout, stderr = "", ""
        returncode = None
    return returncode, stdout or "", stderr or "", time.monotonic() - start


def _read_records(probe_dir: Path) -> tuple:
    records: Dict[int, dict] = {}
    bad: Dict[str, str] = {}
    for path in sorted(probe_dir.glob("rank*.json")):
        try:
            rec = json.loads(path.read_text())
            records[int(rec["rank"])] = rec
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            bad[path.name] = repr(exc)
    return records, bad


def _probed_run(command: List[str], workdir: Path, timeout: float, single: bool,
                env: Optional[Dict[str, str]], label: str = "") -> RunReport:
    with tempfile.TemporaryDirectory(prefix="ddp_probe_") as tmp:
        probe_dir = Path(tmp)
        returncode, stdout, stderr, duration = _run(
            command, workdir, probe_env(probe_dir, single=single, extra=env), timeout)
        records, bad = _read_records(probe_dir)
    return RunReport(command=command, workdir=Path(workdir), returncode=returncode, stdout=stdout,
                     stderr=stderr, duration_s=duration, timeout=timeout, records=records,
                     unreadable_records=bad, label=label)


def run_torchrun(script: Path, workdir: Path, args: Sequence[str] = (), nproc: int = 2,
                 timeout: float = 120, env: Optional[Dict[str, str]] = None,
                 script_name: Optional[str] = None, label: str = "",
                 support: Optional[Path] = None) -> RunReport:
    """`torchrun --standalone --nproc_per_node=<nproc> <script> <args>` in `workdir`, probe armed.

    Uses `sys.executable -m torch.distributed.run` (what the torchrun entry point runs), so the
    interpreter under test is this one whatever PATH says. `script_name`: the name the copy in
    `workdir` gets (default: the script's own), for scripts that derive paths from __file__.
    `support`: a folder whose files are copied into `workdir` next to the script (None: none).
    """
    target = _place_script(script, workdir, script_name, support)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", target.name, *map(str, args)]
    return run_command(command, workdir, nproc, timeout=timeout, env=env, label=label)


def run_command(command: Sequence[str], workdir: Path, nproc: int, timeout: float = 120,
                env: Optional[Dict[str, str]] = None, label: str = "") -> RunReport:
    """Any command that starts `nproc` torchrun workers in all (a job script, several torchrun
    agents), run in `workdir` with the probe armed for each of them: every worker's record lands
    in one probe folder, by its global RANK. `env` is added to the environment (e.g. PATH).
    Repeated, like run_torchrun, when gloo aborts a finished run at exit.
    """
    command = [str(word) for word in command]
    aborts: List[str] = []
    for _ in range(GLOO_EXIT_RETRIES + 1):
        report = _probed_run(command, Path(workdir), timeout, single=False, env=env, label=label)
        if not is_gloo_exit_abort(report, nproc):
            break
        aborts.append(report.stderr[-400:])
    report.exit_aborts = aborts
    return report


# torch's gloo backend can abort a process *after* the script has finished: a gloo worker thread
# frees its last work object (holding tensors) while the interpreter is finalizing, and taking
# the GIL then kills the process with SIGABRT ("terminate called without an active exception").
# Seen in about 1 run in 10 on this 2-core machine, with or without destroy_process_group(); the
# upstream attempt to fix it (pytorch/pytorch#179291) was abandoned. It is not the script's fault,
# so such a run is repeated, at most this many times; any other failure is reported as it is.
GLOO_EXIT_RETRIES = 2


def is_gloo_exit_abort(report: RunReport, nproc: int) -> bool:
    """Every rank finished the script (the probe's exit record is there, no exception) and yet it aborted."""
    if report.returncode in (0, None) or "terminate called without an active exception" not in report.stderr:
        return False
    return len(report.records) == nproc and all(not record.get("exception") for record in report.records.values())


def run_single(script: Path, workdir: Path, args: Sequence[str] = (), timeout: float = 120,
               env: Optional[Dict[str, str]] = None, script_name: Optional[str] = None,
               label: str = "", support: Optional[Path] = None) -> RunReport:
    """`python <script> <args>` in `workdir`, one process, probe armed (its record is rank 0).

    `support`: as for run_torchrun.
    """
    target = _place_script(script, workdir, script_name, support)
    command = [sys.executable, target.name, *map(str, args)]
    return _probed_run(command, Path(workdir), timeout, single=True, env=env, label=label)
