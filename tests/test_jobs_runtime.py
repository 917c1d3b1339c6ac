"""The job files `ddp-migrate launch` writes really train, on two "nodes" of one machine.

Slurm: the generated batch script runs under bash on a fake allocation (tests/fake_slurm.py) of
two nodes whose first is 127.0.0.1: the fake `srun` starts the script's torchrun line twice at
once, each agent with one process, and real torchrun carries out the rendezvous the line asks for
(c10d on the first node, the port from --port, the job id).
Kubernetes: each pod's container command from the generated PyTorchJob runs with the environment
the Training Operator gives that pod (tests/fake_kubeflow.py), the Master's service at 127.0.0.1.
Both processes train the migrated MNIST-shaped fixture; the probe (tests/runtime_probe) records
each of them by global rank, and the checks are those of every runtime test, for a world of two.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import socket
from pathlib import Path
from typing import List

import yaml

import pytest
from click.testing import CliRunner

import fake_kubeflow
import fake_slurm
import fixture_cases
from migrator.jobs.command import launch
from runtime_probe.checks import (
    assert_all_ranks_recorded,
    assert_clean_exit,
    assert_disjoint_shards,
    assert_identical_params,
    assert_world,
)
from runtime_probe.harness import RunReport, run_command

pytestmark = pytest.mark.runtime

if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
    pytest.skip("torch is not installed (pip install -e '.[test]')", allow_module_level=True)

CASE = next(case for case in fixture_cases.discover() if case.name == "mnist_main_argparse")
JOB_ID = "7311"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_job(workdir: Path, *flags: str) -> Path:
    """`ddp-migrate launch train.py --nodes 2 --gpus 1 FLAGS -o job -- ARGS`, run in `workdir`
    (the script's path in the job is relative to where it is submitted from)."""
    job = workdir / "job"
    args = ["train.py", "--nodes", "2", "--gpus", "1", *flags, "-o", str(job), "--", *CASE.args]
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        result = CliRunner().invoke(launch, args, prog_name="ddp-migrate launch")
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return job


def workdir_with_script(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "train.py").write_bytes(CASE.migrated_script.read_bytes())
    return workdir


def assert_trained_on_two_nodes(report: RunReport) -> str:
    """World of two, one process per node (an agent each), same parameters, disjoint shards."""
    assert_clean_exit(report)
    assert_all_ranks_recorded(report, nproc=2)
    assert_world(report, nproc=2)  # one process group of 2, ranks 0 and 1
    envs = {rank: report.record(rank)["env"] for rank in report.ranks}
    assert {env["WORLD_SIZE"] for env in envs.values()} == {"2"}
    assert sorted(env["GROUP_RANK"] for env in envs.values()) == ["0", "1"], "each agent is its own node"
    assert {env["LOCAL_RANK"] for env in envs.values()} == {"0"}, "one process per node"
    checksums = {rank: report.ddp_modules(rank)[0]["param_checksum"] for rank in report.ranks}
    assert checksums[0] == checksums[1], checksums
    assert_identical_params(report)
    return assert_disjoint_shards(report, nproc=2)


def test_generated_sbatch_script_trains_on_two_nodes(tmp_path: Path) -> None:
    workdir = workdir_with_script(tmp_path)
    port = free_port()
    job = write_job(workdir, "--slurm", "--port", str(port))
    bin_dir = fake_slurm.install(tmp_path / "bin", torchrun=fake_slurm.real_torchrun())
    env = fake_slurm.environment(bin_dir, nodes=["127.0.0.1", "fake-node-2"], job_id=JOB_ID)

    report = run_command(["bash", job], workdir, nproc=2, timeout=150, env=env,
                         label="the generated sbatch script on a fake two-node allocation")

    shards = assert_trained_on_two_nodes(report)
    envs = [report.record(rank)["env"] for rank in report.ranks]
    assert {env["TORCHELASTIC_RUN_ID"] for env in envs} == {JOB_ID}, "--rdzv_id is the Slurm job id"
    assert fake_slurm.srun_options(bin_dir) == ["--kill-on-bad-exit=1"]
    print(f"Slurm: two-node run {report.duration_s:.1f}s (c10d at 127.0.0.1:{port}); shards: {shards}")  # -rP


def test_generated_pytorchjob_trains_on_two_pods(tmp_path: Path) -> None:
    workdir = workdir_with_script(tmp_path)
    manifest = yaml.safe_load(write_job(workdir, "--kubernetes", "--image", "registry.example/train:1").read_text())
    pods = fake_kubeflow.pods(manifest, master_addr="127.0.0.1", master_port=free_port())
    assert [(pod.replica, pod.index) for pod in pods] == [("Master", 0), ("Worker", 0)]
    (tmp_path / "operator.sh").write_text(operator_script(pods))
    bin_dir = fake_slurm.install(tmp_path / "bin", torchrun=fake_slurm.real_torchrun())

    report = run_command(["bash", tmp_path / "operator.sh"], workdir, nproc=2, timeout=150,
                         env={"PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])},
                         label="the generated PyTorchJob's pods, with the operator's environment")

    shards = assert_trained_on_two_nodes(report)
    print(f"Kubernetes: two-pod run {report.duration_s:.1f}s; shards: {shards}")  # shown with -rP


def operator_script(pods: List[fake_kubeflow.Pod]) -> str:
    """Start every pod's container command at once, each with its own environment; wait for all."""
    lines = ["#!/bin/bash", "pids=()"]
    for pod in pods:
        env = " ".join(f"{name}={shlex.quote(value)}" for name, value in pod.env.items())
        lines += [f"env {env} {shlex.join(pod.command)} &", 'pids+=("$!")']
    lines += ["status=0", 'for pid in "${pids[@]}"; do wait "$pid" || status=$?; done', 'exit "$status"']
    return "\n".join(lines) + "\n"
