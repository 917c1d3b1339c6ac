"""`ddp-migrate launch` as a command: flags, one-line errors with exit status 2, stdout or an
atomic --output, the engine's word on the script (not migrated yet, required arguments), and its
dispatch from `ddp-migrate`. The files it writes are tested in tests/test_jobs.py."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import yaml
from click.testing import CliRunner

from migrator import cli as cli_module
from migrator.jobs import kubernetes, slurm
from migrator.jobs.command import KUBERNETES_ONLY, SLURM_ONLY, launch
from migrator.jobs.spec import Launch

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_DOC = (ROOT / "docs" / "launch.md").read_text(encoding="utf-8")
MIGRATED = ROOT / "fixtures" / "mnist_main_argparse" / "expected.py"
UNMIGRATED = ROOT / "fixtures" / "mnist_main_argparse" / "input.py"
REQUIRES = """\
import argparse
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("data")
parser.add_argument("--config", required=True)
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
dist.init_process_group("gloo")
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.zeros(2)).sum().backward()
optimizer.step()
"""


def sbatch(launch_: Launch, **options) -> str:
    return slurm.sbatch_script(launch_, slurm.SlurmOptions(**options))


# --------------------------------------------------------------------------- the command


def invoke(*args: str, cwd: Path):
    runner = CliRunner()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(launch, list(args), prog_name="ddp-migrate launch")
    finally:
        os.chdir(old)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_bytes(MIGRATED.read_bytes())
    (tmp_path / "unmigrated.py").write_bytes(UNMIGRATED.read_bytes())
    (tmp_path / "requires.py").write_text(REQUIRES)
    return tmp_path


def test_slurm_to_stdout_by_default(project):
    result = invoke("train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--", "--epochs", "3", cwd=project)
    assert result.exit_code == 0, result.output
    assert result.stdout == sbatch(Launch("train.py", ("--epochs", "3"), nodes=2, gpus=4))
    assert result.stderr == ""
    assert sorted(p.name for p in project.iterdir()) == ["requires.py", "train.py", "unmigrated.py"]


def test_kubernetes_to_stdout_by_default(project):
    result = invoke("train.py", "--nodes", "3", "--gpus", "2", "--kubernetes", "--image", "img:2", "--namespace", "ml",
                    cwd=project)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == kubernetes.manifest(Launch("train.py", nodes=3, gpus=2),
                                                                kubernetes.KubernetesOptions("img:2", "ml"))


def test_every_option_reaches_the_sbatch_script(project):
    result = invoke("train.py", "--nodes", "2", "--gpus", "8", "--slurm", "--job-name", "bert", "--partition", "gpu",
                    "--time", "04:00:00", "--account", "ml", "--cpus-per-task", "32", "--port", "29411",
                    "--setup", "module load cuda", "--setup", "source .venv/bin/activate", cwd=project)
    assert result.exit_code == 0, result.output
    assert result.stdout == sbatch(Launch("train.py", nodes=2, gpus=8, name="bert"), partition="gpu", time="04:00:00",
                                   account="ml", cpus_per_task=32, port=29411,
                                   setup=("module load cuda", "source .venv/bin/activate"))


def test_output_is_written_executable_and_not_printed(project):
    result = invoke("train.py", "--nodes", "2", "--gpus", "4", "--slurm", "-o", "jobs.sbatch", cwd=project)
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr == "wrote jobs.sbatch: submit it with sbatch jobs.sbatch\n"
    job = project / "jobs.sbatch"
    assert job.read_text() == sbatch(Launch("train.py", nodes=2, gpus=4))
    assert job.stat().st_mode & stat.S_IXUSR
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]


def test_kubernetes_output_is_not_executable(project):
    result = invoke("train.py", "--nodes", "2", "--gpus", "4", "--kubernetes", "--image", "i:1", "-o", "job.yaml",
                    cwd=project)
    assert result.exit_code == 0, result.output
    assert result.stderr == "wrote job.yaml: start it with kubectl create -f job.yaml\n"
    assert not (project / "job.yaml").stat().st_mode & stat.S_IXUSR


def test_output_refuses_to_overwrite_without_force(project):
    job = project / "job.sbatch"
    job.write_text("# mine\n")
    result = invoke("train.py", "--nodes", "2", "--gpus", "4", "--slurm", "-o", "job.sbatch", cwd=project)
    assert result.exit_code == 2
    assert result.stderr == "Error: --output job.sbatch: the file exists; add --force to overwrite it\n"
    assert job.read_text() == "# mine\n"
    forced = invoke("train.py", "--nodes", "2", "--gpus", "4", "--slurm", "-o", "job.sbatch", "--force", cwd=project)
    assert forced.exit_code == 0, forced.output
    assert job.read_text() == sbatch(Launch("train.py", nodes=2, gpus=4))
    assert job.stat().st_mode & stat.S_IXUSR


def test_output_is_atomic(project, monkeypatch):
    """A failed write leaves the old file whole and no temporary file behind."""
    job = project / "job.sbatch"
    job.write_text("# mine\n")

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    result = invoke("train.py", "--nodes", "2", "--gpus", "4", "--slurm", "-o", "job.sbatch", "--force", cwd=project)
    assert result.exit_code == 2
    assert result.stderr == "Error: job.sbatch: cannot write: No space left on device\n"
    assert job.read_text() == "# mine\n"
    assert sorted(p.name for p in project.iterdir()) == ["job.sbatch", "requires.py", "train.py", "unmigrated.py"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["train.py", "--nodes", "2", "--gpus", "4"], "Error: give one of --slurm and --kubernetes"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--kubernetes"], "Error: --slurm and --kubernetes go alone"),
        (["train.py", "--nodes", "0", "--gpus", "4", "--slurm"], "Error: Invalid value for '--nodes'"),
        (["train.py", "--nodes", "2", "--gpus", "0", "--slurm"], "Error: Invalid value for '--gpus'"),
        (["train.py", "--gpus", "4", "--slurm"], "Error: Missing option '--nodes'"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--kubernetes"], "Error: --kubernetes needs --image IMAGE"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--image", "i"], "Error: --image is for --kubernetes"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--kubernetes", "--image", "i", "--partition", "gpu", "--port", "1"],
         "Error: --partition, --port are for --slurm"),
        (["nope.py", "--nodes", "2", "--gpus", "4", "--slurm"], "Error: nope.py: no such file"),
        ([".", "--nodes", "2", "--gpus", "4", "--slurm"], "Error: .: is a directory"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--force"], "Error: --force goes with --output FILE"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--slurm", "-o", "."], "Error: --output .: is a directory"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--job-name", "a b"], "Error: --job-name 'a b'"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--setup", "a\nb"], "Error: --setup takes one line"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--kubernetes", "--image", "i", "--job-name", "A"],
         "Error: --job-name 'A': give at most 54 lowercase"),
        (["requires.py", "--nodes", "2", "--gpus", "4", "--slurm"],
         "Error: requires.py requires DATA, --config CONFIG (its argparse parser says so)"),
        (["requires.py", "--nodes", "2", "--gpus", "4", "--slurm", "--", "data/"], "Error: requires.py requires --config CONFIG"),
        (["train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--bogus"], "Error: No such option '--bogus'"),
        (["--nodes", "2", "--gpus", "4", "--slurm"], "Error: Missing argument 'SCRIPT'"),
    ],
    ids=["no-scheduler", "both-schedulers", "no-nodes", "no-gpus", "missing-nodes", "no-image", "slurm-with-image",
         "kubernetes-with-slurm-options", "no-such-script", "script-is-a-directory", "force-without-output",
         "output-is-a-directory", "bad-slurm-name", "multi-line-setup", "bad-kubernetes-name", "required-arguments",
         "required-option", "unknown-option", "no-script"],
)
def test_usage_errors_are_one_line_exit_2(project, args, message):
    result = invoke(*args, cwd=project)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(message), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert sorted(p.name for p in project.iterdir()) == ["requires.py", "train.py", "unmigrated.py"]


def test_required_arguments_given_after_the_separator(project):
    result = invoke("requires.py", "--nodes", "2", "--gpus", "1", "--slurm", "--", "data/", "--config", "c.yaml",
                    cwd=project)
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith("requires.py data/ --config c.yaml")


def test_unmigrated_script_warns_and_still_writes(project):
    result = invoke("unmigrated.py", "--nodes", "2", "--gpus", "4", "--slurm", "-o", "job.sbatch", cwd=project)
    assert result.exit_code == 0, result.output
    warning, wrote = result.stderr.splitlines()
    assert warning == ("warning: unmigrated.py is not migrated yet (ddp-migrate would change it): run "
                       "ddp-migrate --in-place unmigrated.py first; the job file is written anyway")
    assert wrote.startswith("wrote job.sbatch")
    assert (project / "job.sbatch").exists()


def test_engine_failure_is_a_warning_and_the_file_is_still_written(project, monkeypatch):
    import migrator.api

    def crash(*args, **kwargs):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(migrator.api, "check", crash)
    result = invoke("train.py", "--nodes", "2", "--gpus", "4", "--slurm", cwd=project)
    assert result.exit_code == 0, result.output
    assert result.stderr == ("warning: train.py: could not be analysed (RuntimeError: a bug over two lines); "
                             "its required arguments are not checked\n")
    assert result.stdout == sbatch(Launch("train.py", nodes=2, gpus=4))


def test_bad_project_config_is_a_one_line_error(project):
    (project / "pyproject.toml").write_text("[tool.ddp-migrate]\nselect = 3\n")
    result = invoke("train.py", "--nodes", "2", "--gpus", "4", "--slurm", cwd=project)
    assert result.exit_code == 2
    assert result.stderr == "Error: pyproject.toml: [tool.ddp-migrate] select must be a list of strings, not a number\n"


def test_script_that_does_not_parse_is_an_error(project):
    (project / "broken.py").write_text("import torch\n\nloss.backward(\noptimizer.step()\n")
    result = invoke("broken.py", "--nodes", "2", "--gpus", "4", "--slurm", cwd=project)
    assert result.exit_code == 2
    assert result.stderr.startswith("Error: broken.py:3:") and "cannot parse" in result.stderr
    assert result.stderr.count("\n") == 1


def test_launch_help(project):
    result = invoke("--help", cwd=project)
    assert result.exit_code == 0
    assert result.stdout.startswith("Usage: ddp-migrate launch [OPTIONS] SCRIPT [-- SCRIPT_ARGS...]")
    for flag in ("--nodes", "--gpus", "--slurm", "--kubernetes", "--output", "--force", "--image", "--setup"):
        assert flag in result.stdout


def run_main(argv: List[str], cwd: Path) -> subprocess.CompletedProcess:
    """The console script's entry point, as `ddp-migrate ARGS` runs it."""
    code = "import sys; from migrator.cli import main; main(sys.argv[1:])"
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ddp_migrate_dispatches_launch(project):
    done = run_main(["launch", "train.py", "--nodes", "2", "--gpus", "4", "--slurm", "--", "--epochs", "1"], project)
    assert done.returncode == 0, done.stderr
    assert done.stdout == sbatch(Launch("train.py", ("--epochs", "1"), nodes=2, gpus=4))
    failed = run_main(["launch", "train.py", "--gpus", "4", "--slurm"], project)
    assert (failed.returncode, failed.stderr) == (2, "Error: Missing option '--nodes'.\n")
    usage = run_main(["launch", "--help"], project)
    assert usage.returncode == 0 and usage.stdout.startswith("Usage: ddp-migrate launch ")


def test_main_help_mentions_launch_in_one_line():
    result = CliRunner().invoke(cli_module.cli, ["--help"], prog_name="ddp-migrate")
    assert [line.strip() for line in result.stdout.splitlines() if "launch" in line and "torch.distributed" not in line] == [
        "ddp-migrate launch SCRIPT   write a Slurm or Kubernetes job file for several machines"
    ]


def launch_doc() -> str:
    """docs/launch.md, "Running on several machines": the whole page."""
    assert LAUNCH_DOC.startswith("# Running on several machines\n")
    return LAUNCH_DOC


def test_every_launch_flag_is_in_the_launch_doc():
    section = launch_doc()
    missing = [opt for param in launch.params for opt in getattr(param, "opts", [])
               if opt.startswith("--") and opt != "--help" and opt not in section]
    assert not missing, f"docs/launch.md ('Running on several machines') does not mention {missing}"


def test_scheduler_only_options_are_options():
    names = {param.name for param in launch.params}
    assert set(SLURM_ONLY) | set(KUBERNETES_ONLY) <= names


def test_launch_doc_examples_are_what_launch_writes():
    """docs/launch.md's trimmed job files: each line is a line of the file its command writes."""
    section = launch_doc()
    (script,) = re.findall(r"```bash\n(#!/bin/bash\n.*?)```", section, re.S)
    (manifest,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    job = Launch("train.py", ("--epochs", "10"), nodes=2, gpus=4)
    written = sbatch(job).splitlines()
    assert [line for line in script.splitlines() if line not in written] == []
    options = kubernetes.KubernetesOptions("registry.example.com/team/train:1.0")
    written = kubernetes.manifest_text(job, options).splitlines()
    assert [line for line in manifest.splitlines() if line not in written and line.strip() != "# the same template"] == []
