"""`ddp-migrate launch`'s job files: the Slurm batch script.

The Slurm script is checked by bash -n and shellcheck, then run under bash on a fake allocation
(tests/fake_slurm.py) whose torchrun records its argv, so an argument with spaces, quotes, `$`
or a glob is shown to reach the script unchanged.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, List

import pytest

import fake_slurm
from migrator.jobs import slurm
from migrator.jobs.spec import JobError, Launch, missing_arguments

#: Arguments a shell would mangle unquoted: spaces, both quotes, $ and command substitution,
#: globs, a separator, a backslash, a line break, an empty one, a dash, a second `--`, non-ASCII.
ODD_ARGS = ("--name", "two words", "it's", 'say "hi"', "$HOME", "${PATH}", "`id`", "$(id)", "*.py",
            "[ab]?", "a;b|c&", "back\\slash", "new\nline", "", "-", "--", "ünï ☃", "~")


def sbatch(launch_: Launch, **options: Any) -> str:
    return slurm.sbatch_script(launch_, slurm.SlurmOptions(**options))


# --------------------------------------------------------------------------- Slurm: text


def test_sbatch_directives_one_task_per_node_and_gpus():
    text = sbatch(Launch("train.py", nodes=3, gpus=8))
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=train", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
    ]
    assert text.startswith("#!/bin/bash\n")
    assert "\nset -euo pipefail\n" in text
    assert '\nhead_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)\n' in text
    assert "\nport=29500\n" in text
    assert "--nproc_per_node=8" in text and '--nnodes="$SLURM_NNODES"' in text


@pytest.mark.parametrize(
    "options, line",
    [
        ({"partition": "gpu"}, "#SBATCH --partition=gpu"),
        ({"time": "1-00:00:00"}, "#SBATCH --time=1-00:00:00"),
        ({"account": "proj42"}, "#SBATCH --account=proj42"),
        ({"cpus_per_task": 32}, "#SBATCH --cpus-per-task=32"),
    ],
    ids=["partition", "time", "account", "cpus-per-task"],
)
def test_sbatch_optional_directives_only_when_given(options, line):
    key = line.split("=")[0]
    assert line in sbatch(Launch("train.py"), **options).splitlines()
    assert key not in sbatch(Launch("train.py"))


def test_sbatch_directives_precede_every_command():
    """sbatch reads #SBATCH lines only up to the first command."""
    lines = sbatch(Launch("train.py", nodes=2), partition="gpu", setup=("module load cuda",)).splitlines()
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    assert all(not line or line.startswith("#") for line in lines[:last_directive])


@pytest.mark.parametrize(
    "launch_, expected",
    [
        (Launch("train.py"), "train"),
        (Launch("src/my train+v2.py"), "my-train-v2"),
        (Launch("train.py", name="bert-large.ft"), "bert-large.ft"),
    ],
    ids=["stem", "odd-characters", "given"],
)
def test_sbatch_job_name(launch_, expected):
    assert f"#SBATCH --job-name={expected}\n" in sbatch(launch_)


@pytest.mark.parametrize(
    "launch_, options, option",
    [
        (Launch("train.py", name="my job"), {}, "--job-name"),
        (Launch("train.py"), {"partition": "gpu #1"}, "--partition"),
        (Launch("train.py"), {"account": "a'b"}, "--account"),
        (Launch("train.py"), {"time": "1:00\n#SBATCH --nodes=99"}, "--time"),
        (Launch("train.py"), {"setup": ("module load a\nmodule load b",)}, "--setup"),
        (Launch("train.py"), {"port": 70000}, "--port"),
        (Launch("train.py"), {"cpus_per_task": 0}, "--cpus-per-task"),
    ],
    ids=["job-name-space", "partition-comment", "account-quote", "time-injects-a-line", "setup-two-lines",
         "port-range", "cpus"],
)
def test_sbatch_refuses_values_that_would_break_the_file(launch_, options, option):
    with pytest.raises(JobError, match=option):
        sbatch(launch_, **options)


def test_launch_refuses_no_nodes_or_gpus():
    with pytest.raises(JobError, match="--nodes"):
        Launch("train.py", nodes=0)
    with pytest.raises(JobError, match="--gpus"):
        Launch("train.py", gpus=0)


# --------------------------------------------------------------------------- Slurm: bash and shellcheck

SBATCH_CASES = {
    "plain": (Launch("train.py", nodes=2, gpus=4), {}),
    "one-node": (Launch("train.py", nodes=1, gpus=1), {}),
    "odd-arguments": (Launch("my dir/it's train.py", ODD_ARGS, nodes=2, gpus=2), {}),
    "every-option": (
        Launch("train.py", ("--epochs", "3"), nodes=4, gpus=8, name="big"),
        {"partition": "gpu", "time": "02:00:00", "account": "ml", "cpus_per_task": 64, "port": 29400,
         "setup": ("module load cuda/12.1", "export OMP_NUM_THREADS=8")},
    ),
}


def shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed: .ci/run installs it (Debian package shellcheck)")
        pytest.skip("shellcheck is not installed (apt-get install shellcheck); CI runs this check")
    return found


@pytest.mark.parametrize("name", SBATCH_CASES)
def test_sbatch_script_passes_bash_n_and_shellcheck(name, tmp_path):
    job = tmp_path / "job.sbatch"
    job.write_text(sbatch(SBATCH_CASES[name][0], **SBATCH_CASES[name][1]))
    syntax = subprocess.run(["bash", "-n", str(job)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    lint = subprocess.run([shellcheck(), "--shell=bash", "--severity=style", str(job)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_shellcheck_check_can_fail(tmp_path):
    """The check above would see an unquoted argument (the bug shlex.quote prevents)."""
    job = tmp_path / "job.sbatch"
    job.write_text(sbatch(Launch("train.py", ("$HOME",))).replace("'$HOME'", '"$HOME"/$1'))
    lint = subprocess.run([shellcheck(), "--shell=bash", str(job)], capture_output=True, text=True)
    assert lint.returncode != 0 and "SC2086" in lint.stdout


def run_on_fake_allocation(text: str, tmp_path: Path, nodes: List[str], job_id: str = "4242") -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir(parents=True)
    (workdir / "decoy.py").write_text("")  # an unquoted *.py would expand to this
    job = workdir / "job.sbatch"
    job.write_text(text)
    bin_dir = fake_slurm.install(tmp_path / "bin", torchrun=fake_slurm.RECORD_ARGV)
    env = {**os.environ, **fake_slurm.environment(bin_dir, nodes=nodes, job_id=job_id)}
    done = subprocess.run(["bash", str(job)], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr}"
    return bin_dir


def test_sbatch_arguments_reach_the_script_unchanged(tmp_path):
    job = Launch("my dir/it's train.py", ODD_ARGS, nodes=2, gpus=4)
    bin_dir = run_on_fake_allocation(sbatch(job, port=29411), tmp_path, nodes=["gpu-node-17", "gpu-node-18"])
    expected = [
        "--nnodes=2", "--nproc_per_node=4", "--rdzv_backend=c10d", "--rdzv_endpoint=gpu-node-17:29411",
        "--rdzv_id=4242", "my dir/it's train.py", *ODD_ARGS,
    ]
    for node in (0, 1):  # srun ran one torchrun per node, each with the same command
        assert fake_slurm.torchrun_argv(bin_dir, node) == expected
    assert fake_slurm.srun_options(bin_dir) == ["--kill-on-bad-exit=1"]


def test_sbatch_rendezvous_at_the_first_node_of_the_allocation(tmp_path):
    bin_dir = run_on_fake_allocation(sbatch(Launch("train.py", nodes=3)), tmp_path,
                                     nodes=["b-node", "a-node", "c-node"], job_id="99")
    argv = fake_slurm.torchrun_argv(bin_dir, 2)
    assert "--rdzv_endpoint=b-node:29500" in argv and "--rdzv_id=99" in argv and "--nnodes=3" in argv


def test_first_node_survives_a_long_node_list(tmp_path):
    """`scontrol ... | head -n 1` under pipefail fails the job (141, SIGPIPE) when scontrol is
    still writing once head has quit; the fake scontrol writes that way, so the check can fail."""
    text = sbatch(Launch("train.py", nodes=2))
    with pytest.raises(AssertionError, match="141"):
        run_on_fake_allocation(text.replace("| sed -n 1p", "| head -n 1"), tmp_path / "head", nodes=["n1", "n2"])
    bin_dir = run_on_fake_allocation(text, tmp_path / "sed", nodes=["n1", "n2"])
    assert "--rdzv_endpoint=n1:29500" in fake_slurm.torchrun_argv(bin_dir, 1)


def test_sbatch_setup_lines_run_before_torchrun(tmp_path):
    text = sbatch(Launch("train.py"), setup=('echo "setup ran" > setup.log',))
    run_on_fake_allocation(text, tmp_path, nodes=["n1"])
    assert (tmp_path / "work" / "setup.log").read_text() == "setup ran\n"


def test_sbatch_stops_when_a_step_fails(tmp_path):
    """set -euo pipefail: a failed setup line does not go on to start the training."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    job = workdir / "job.sbatch"
    job.write_text(sbatch(Launch("train.py"), setup=("false",)))
    bin_dir = fake_slurm.install(tmp_path / "bin", torchrun=fake_slurm.RECORD_ARGV)
    env = {**os.environ, **fake_slurm.environment(bin_dir, nodes=["n1"], job_id="1")}
    done = subprocess.run(["bash", str(job)], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert not (bin_dir / "torchrun-argv.0").exists()


# --------------------------------------------------------------------------- required arguments


@pytest.mark.parametrize(
    "given, missing",
    [
        ((), ("DATA", "--config CONFIG")),
        (("data/",), ("--config CONFIG",)),
        (("--config", "c.yaml"), ("DATA",)),  # c.yaml is --config's value: not a positional
        (("--config", "c.yaml", "--lr", "0.1"), ()),  # 0.1 may be a positional: no error
        (("data/", "--config=c.yaml"), ()),
        (("data/", "--conf", "c.yaml"), ()),  # argparse takes an unambiguous abbreviation
        (("--config", "c.yaml", "data/"), ()),
        (("data/", "-c", "c.yaml"), ()),  # -c may be --config's short name
    ],
    ids=["nothing", "no-option", "no-positional", "bare-word-after-an-unknown-option", "equals", "abbreviated",
         "any-order", "short-option"],
)
def test_missing_arguments(given, missing):
    assert missing_arguments(("DATA", "--config CONFIG"), given) == missing
