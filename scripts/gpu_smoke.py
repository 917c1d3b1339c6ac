"""GPU smoke test: the migrated training fixtures train on real GPUs with nccl.

    scripts/gpu_smoke.sh                     # every GPU of the machine, then one GPU
    scripts/gpu_smoke.sh --only mnist_main_argparse,trainer_class
    scripts/gpu_smoke.sh --allow-cpu --only mnist_main_argparse   # the plumbing, on a CPU machine

For each training fixture with an expected.py: ddp-migrate migrates input.py (and must produce
expected.py), the result runs under `torchrun --standalone --nproc_per_node=<GPUs>` and again with
`--nproc_per_node=1`, with the runtime probe armed (tests/runtime_probe/harness.py). Each run must exit 0, and the
probe's records must show: one process per GPU, the "cpu:gloo,cuda:nccl" backend, each rank's DDP
module on its own GPU (`device_ids == [local_rank]`), identical parameters on every rank after
training, disjoint DistributedSampler shards, checkpoints written by rank 0 only. Where CUDA is
present, `ddp-migrate verify --device cuda --nproc <GPUs>` must also pass on one migrated fixture
(checkpoint_rotation, or the first of --only). Exit status 0: all passed; 1: a fixture failed;
2: no GPU (without --allow-cpu).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import fixture_cases  # noqa: E402
from runtime_probe.checks import assert_trains_correctly_under_ddp  # noqa: E402
from runtime_probe.harness import RunReport, run_torchrun  # noqa: E402

from migrator import Options, migrate  # noqa: E402

RUN_TIMEOUT_S = 180


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated fixture names (default: every training fixture)")
    parser.add_argument("--allow-cpu", action="store_true", help="without a GPU, run on the CPU with gloo (tests the script itself)")
    parser.add_argument("--jobs", type=int, default=4, help="fixtures run at once (each a torchrun of its own; default 4)")
    args = parser.parse_args(argv)

    import torch

    gpus = torch.cuda.device_count()
    if gpus == 0 and not args.allow_cpu:
        print("gpu_smoke: no CUDA device here (torch.cuda.device_count() == 0); nothing was run", file=sys.stderr)
        return 2
    wanted = {name for name in args.only.split(",") if name}
    cases = [c for c in fixture_cases.discover() if c.runs_under_torchrun and c.expected_path_or_none is not None]
    if wanted:
        cases = [c for c in cases if c.name in wanted]
        missing = wanted - {c.name for c in cases}
        if missing:
            print(f"gpu_smoke: no training fixture named {', '.join(sorted(missing))}", file=sys.stderr)
            return 2
    print(f"gpu_smoke: {len(cases)} fixtures, {gpus or 'no'} GPU(s), torch {torch.__version__}")
    runs = [(case, nproc) for case in cases for nproc in sorted({max(gpus, 2 if gpus == 0 else 1), 1}, reverse=True)]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:  # each run is a subprocess tree
        failures = sum(not ok for ok in pool.map(lambda run: _smoke(run[0], run[1], gpus), runs))
    if gpus and cases:
        failures += not _verify_on_gpus(next((c for c in cases if c.name == VERIFY_FIXTURE), cases[0]), gpus)
    print(f"gpu_smoke: {'all passed' if not failures else f'{failures} run(s) failed'}")
    return 1 if failures else 0


def _smoke(case: "fixture_cases.FixtureCase", nproc: int, gpus: int) -> bool:
    label = f"{case.name} x{nproc}"
    source = case.input_path.read_text(encoding="utf-8")
    migrated = migrate(source, Options(**case.options), context=case.context).code  # fixture.toml's options (--spawn)
    if migrated != case.expected_path.read_text(encoding="utf-8"):
        print(f"FAIL {label}: ddp-migrate's output differs from expected.py (run the golden tests)")
        return False
    env: Dict[str, str] = {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(gpus))} if gpus else {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"gpu-smoke-{case.name}-") as tmp:
        script = Path(tmp) / "migrated.py"
        script.write_text(migrated, encoding="utf-8")
        report = run_torchrun(script, Path(tmp) / "run", args=case.args, nproc=nproc, timeout=RUN_TIMEOUT_S,
                              env=env, script_name="train.py", support=case.support_dir, label=label)
        skip = set(case.runtime_skip) - {"same_saved_keys"}
        if gpus:
            skip.add("gloo_cpu")
        try:
            assert_trains_correctly_under_ddp(report, nproc=nproc, skip=skip)
            if gpus:
                _assert_on_own_gpu(report)
        except AssertionError as exc:
            print(f"FAIL {label} ({time.monotonic() - started:.0f}s): {str(exc).splitlines()[0]}")
            return False
    print(f"ok   {label} ({time.monotonic() - started:.0f}s)")
    return True


VERIFY_FIXTURE = "checkpoint_rotation"


def _verify_on_gpus(case: "fixture_cases.FixtureCase", gpus: int) -> bool:
    """`ddp-migrate verify --device cuda` on the fixture's migration: every check must pass on the GPUs."""
    label = f"verify --device cuda {case.name} x{gpus}"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"gpu-smoke-verify-{case.name}-") as tmp:
        if case.support_dir is not None:
            shutil.copytree(case.support_dir, tmp, dirs_exist_ok=True)
        (Path(tmp) / "train.py").write_text(migrate(case.input_path.read_text(encoding="utf-8"), Options(**case.options),
                                                    context=case.context).code, encoding="utf-8")
        command = [sys.executable, "-m", "migrator", "verify", "train.py", "--device", "cuda", "--nproc", str(gpus),
                   "--timeout", str(RUN_TIMEOUT_S), "--output-format", "json", "--", *case.args]
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # this checkout's migrator
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=path))
    try:
        failed = json.loads(done.stdout).get("failed") or ([] if done.returncode == 0 else [f"exit {done.returncode}"])
    except ValueError:
        failed = [f"exit {done.returncode}: {(done.stderr.strip().splitlines() or ['no output'])[-1]}"]
    if done.returncode != 0 or failed:
        print(f"FAIL {label} ({time.monotonic() - started:.0f}s): {', '.join(failed)}")
        return False
    print(f"ok   {label} ({time.monotonic() - started:.0f}s)")
    return True


def _assert_on_own_gpu(report: RunReport) -> None:
    """nccl for CUDA tensors, and each rank's DDP module on cuda:<its local rank>."""
    for rank in report.ranks:
        for call in report.init_calls(rank):
            if "nccl" not in str(call.get("backend")):
                raise AssertionError(f"rank {rank}: backend {call.get('backend')!r}, expected nccl for CUDA")
        for module in report.ddp_modules(rank):
            devices = set(module.get("param_devices") or [])
            if module.get("device_ids") != [rank] or devices != {f"cuda:{rank}"}:
                raise AssertionError(
                    f"rank {rank}: DDP({module.get('module_class')}) device_ids={module.get('device_ids')}, "
                    f"parameters on {sorted(devices)}; expected [{rank}] and cuda:{rank}"
                )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
