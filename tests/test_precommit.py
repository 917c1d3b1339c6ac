"""The pre-commit hooks in .pre-commit-hooks.yaml, run by the real pre-commit framework.

Each test makes a throwaway git project whose .pre-commit-config.yaml points at a copy of this
checkout (its working tree, committed in a temporary repository, so hooks not committed here yet
are tested too), installs the git hook and commits. pre-commit builds the hooks' virtualenv by
pip-installing this package from PyPI dependencies (libcst, click, rich, pathspec, PyYAML,
markdown-it-py: never torch) once per module: PRE_COMMIT_HOME is shared by the module's tests.
That first build needs network access to the package index and takes most of this module's time.

Global git configuration is neither read nor changed: git runs with GIT_CONFIG_GLOBAL=/dev/null
and every repository sets its own user.name and user.email.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple

import pytest

from migrator import files

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / ".pre-commit-hooks.yaml"
README = ROOT / "README.md"

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("pre_commit") is None,
        reason="pre-commit is not installed (it is in the test extra: pip install -e '.[test]')",
    ),
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not on PATH"),
]

PYTHON_HOOKS = ("ddp-migrate-check", "ddp-migrate")
LAUNCHER_HOOKS = ("ddp-migrate-launchers", "ddp-migrate-launchers-fix")
ALL_HOOKS = PYTHON_HOOKS + LAUNCHER_HOOKS

LAUNCH_SCRIPT = """\
#!/bin/bash
set -euo pipefail
python -m torch.distributed.launch --nproc_per_node=2 --use_env train.py --epochs 3
"""

SBATCH_SCRIPT = """\
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --gres=gpu:4
python -m torch.distributed.launch --nproc_per_node=4 --use_env train.py
"""

SINGLE_GPU_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(10, 2).to(device)
    model = nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
"""

PLAIN_MODULE = """\
def mean(values):
    values = list(values)
    return sum(values) / max(len(values), 1)
"""

CLEAN_LAUNCH_SCRIPT = """\
#!/bin/bash
torchrun --standalone --nproc_per_node=2 train.py
"""


# --------------------------------------------------------------------------- helpers


def _env(home: Path) -> Dict[str, str]:
    """The environment for git and pre-commit: no global or system git config, no colours."""
    drop = ("GIT_", "PRE_COMMIT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for name in ("SKIP", "FORCE_COLOR", "CLICOLOR_FORCE", "PY_COLORS"):
        env.pop(name, None)
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        PRE_COMMIT_HOME=str(home),
        PRE_COMMIT_COLOR="never",
        NO_COLOR="1",
        TERM="dumb",
    )
    return env


def _run(argv: List[str], cwd: Path, env: Dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )


def _git(repo: Path, env: Dict[str, str], *args: str) -> str:
    proc = _run(["git", *args], repo, env)
    assert proc.returncode == 0, f"git {' '.join(args)} failed:\n{proc.stdout}"
    return proc.stdout.strip()


def _init_repo(path: Path, env: Dict[str, str]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, env, "init", "-q")
    for key, value in (
        ("user.name", "ddp-migrate tests"),
        ("user.email", "tests@ddp-migrate.invalid"),
        ("commit.gpgsign", "false"),
        ("core.autocrlf", "false"),
    ):
        _git(path, env, "config", "--local", key, value)


def _working_tree_files() -> Iterable[str]:
    """This checkout's files as they are now: tracked and untracked, minus what git ignores or deleted."""
    if (ROOT / ".git").exists():
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            stdout=subprocess.PIPE,
            check=True,
        ).stdout.decode()
        return sorted({rel for rel in out.split("\0") if rel and (ROOT / rel).is_file()})
    skip = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", "build", "dist", ".tox"}
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in skip and not d.endswith(".egg-info")]
        found += [os.path.relpath(os.path.join(dirpath, name), ROOT) for name in filenames]
    return sorted(found)


def _manifest() -> List[dict]:
    import yaml  # a dependency of pre-commit

    return yaml.safe_load(MANIFEST.read_text())


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    """One PRE_COMMIT_HOME for the module: the hooks' virtualenv is built once."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture(scope="module")
def hooks_repo(tmp_path_factory, pre_commit_home) -> Tuple[Path, str]:
    """A git repository holding this checkout's working tree in one commit: (path, sha)."""
    dest = tmp_path_factory.mktemp("ddp-migrate-hooks-repo")
    env = _env(pre_commit_home)
    for rel in _working_tree_files():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    assert (dest / ".pre-commit-hooks.yaml").is_file()
    _init_repo(dest, env)
    _git(dest, env, "add", "-A")
    _git(dest, env, "commit", "-q", "--no-verify", "-m", "ddp-migrate working tree")
    return dest, _git(dest, env, "rev-parse", "HEAD")


class Project:
    """A git project using some of the hooks, with the pre-commit git hook installed."""

    def __init__(self, path: Path, env: Dict[str, str]) -> None:
        self.path = path
        self.env = env

    def write(self, rel: str, text: str, executable: bool = False) -> Path:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if executable:
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return target

    def head(self) -> str:
        return _git(self.path, self.env, "rev-parse", "HEAD")

    def commit(self, message: str = "change") -> Tuple[int, str]:
        """`git add -A && git commit`: (exit status of the commit, everything it printed)."""
        _git(self.path, self.env, "add", "-A")
        proc = _run(["git", "commit", "-m", message], self.path, self.env)
        return proc.returncode, proc.stdout


@pytest.fixture
def make_project(tmp_path, hooks_repo, pre_commit_home):
    def make(*hook_ids: str, extra: str = "", config: Optional[str] = None) -> Project:
        """A project using `hook_ids`, plus `extra`: more hook entries, as YAML at the hooks' indentation.
        `config` is a whole .pre-commit-config.yaml to use instead (the README's, say)."""
        repo_path, sha = hooks_repo
        env = _env(pre_commit_home)
        project = Project(tmp_path / "project", env)
        _init_repo(project.path, env)
        if config is None:
            hooks = "".join(f"      - id: {hook_id}\n" for hook_id in hook_ids) + extra
            config = f"repos:\n  - repo: {json.dumps(str(repo_path))}\n    rev: {sha}\n    hooks:\n{hooks}"
        project.write(".pre-commit-config.yaml", config)
        proc = _run([sys.executable, "-m", "pre_commit", "install"], project.path, env)
        assert proc.returncode == 0, proc.stdout
        _git(project.path, env, "add", "-A")
        _git(project.path, env, "commit", "-q", "--no-verify", "-m", "pre-commit config")
        return project

    return make


def _readme_config(marker: str) -> str:
    """The README's ```yaml block that contains `marker`, verbatim: a .pre-commit-config.yaml."""
    blocks = re.findall(r"(?ms)^```yaml\n(.*?)^```$", README.read_text(encoding="utf-8"))
    (block,) = [block for block in blocks if marker in block]
    return block


def _scripts_dir() -> Path:
    """The folder of this environment's console scripts: where `pip install` put `ddp-migrate`."""
    for folder in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent):
        if (folder / ("ddp-migrate.exe" if os.name == "nt" else "ddp-migrate")).is_file():
            return folder
    pytest.skip("the ddp-migrate console script is not installed in this environment (pip install -e .)")


def _hook_line(name: str, verdict: str) -> str:
    """pre-commit's status line for a hook, e.g. `ddp-migrate (check)....Failed`."""
    return rf"(?m)^{re.escape(name)}\.+{verdict}$"


# --------------------------------------------------------------------------- the manifest


def test_manifest_is_valid():
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-manifest", str(MANIFEST)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout
    ids = [hook["id"] for hook in _manifest()]
    assert set(ALL_HOOKS) <= set(ids)
    for hook in _manifest():
        assert hook["language"] == "python"
        assert hook["entry"].split()[0] == "ddp-migrate"
        assert ("--check" in hook["entry"]) != ("--in-place" in hook["entry"]), hook["id"]
        assert hook.get("minimum_pre_commit_version") and hook.get("description")


@pytest.mark.parametrize(
    "hook_id, taken, not_taken",
    [
        (
            "ddp-migrate-check",
            ["train.py", "src/pkg/model.py", "gui.pyw", "bin/train"],
            ["stubs/model.pyi", "app.wsgi", ".pdbrc", "build.gyp", "notes.txt"],
        ),
        (
            "ddp-migrate-launchers",
            [
                "run.sh", "scripts/launch.bash", "x.zsh", "jobs/train.sbatch", "jobs/train.slurm",
                "Makefile", "GNUmakefile", "sub/makefile", "rules.mk", "Dockerfile", "docker/Dockerfile.gpu",
                "Containerfile", "gpu.dockerfile", ".github/workflows/ci.yml", "k8s/job.yaml",
                "README.md", "docs/usage.markdown", "docs/index.rst", "notebooks/train.ipynb",
            ],
            [".clang-format", ".bashrc", "x.ksh", "x.csh", "build.make", "secrets.eyaml", "train.py", "bin/train"],
        ),
    ],
)
def test_files_pattern_is_what_ddp_migrate_takes(hook_id, taken, not_taken, tmp_path):
    """Every name a hook passes must be one ddp-migrate takes: any other is an error (exit status 2).
    An extension-less script reaches the Python hooks only when identify tags it python (a python
    shebang), which is what makes ddp-migrate take it too."""
    hooks = {hook["id"]: hook for hook in _manifest()}
    pattern = re.compile(hooks[hook_id]["files"])
    for name in taken:
        assert pattern.search(name), f"{hook_id} skips {name}"
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/usr/bin/env python3\n" if hook_id == "ddp-migrate-check" else "")
        kind = files.source_kind(path)
        if hook_id.startswith("ddp-migrate-launchers"):
            assert kind not in (None, files.PYTHON), (name, kind)  # a launcher kind
        else:
            assert kind == files.PYTHON, (name, kind)
    for name in not_taken:
        assert not pattern.search(name), f"{hook_id} passes {name}"
    # the fix hooks take exactly the files of their check hooks
    assert hooks["ddp-migrate"]["files"] == hooks["ddp-migrate-check"]["files"]
    assert hooks["ddp-migrate-launchers-fix"]["files"] == hooks["ddp-migrate-launchers"]["files"]


# --------------------------------------------------------------------------- commits


def test_outdated_launch_command_blocks_the_commit(make_project):
    project = make_project("ddp-migrate-launchers")
    before = project.head()
    project.write("run.sh", LAUNCH_SCRIPT, executable=True)
    project.write("jobs/train.sbatch", SBATCH_SCRIPT)

    status, output = project.commit("add launch scripts")

    assert status != 0, output
    assert project.head() == before, "the commit went through"
    assert re.search(_hook_line("ddp-migrate launchers (check)", "Failed"), output), output
    assert "- hook id: ddp-migrate-launchers" in output
    assert re.search(r"(?m)^run\.sh:3:1: DDP201\b", output), output
    assert re.search(r"(?m)^run\.sh:3:\d+: DDP202\b", output), output
    assert re.search(r"(?m)^jobs/train\.sbatch:4:1: DDP201\b", output), output
    assert "+torchrun --nproc_per_node=2 train.py --epochs 3" in output  # the diff
    # a check hook writes nothing
    assert (project.path / "run.sh").read_text() == LAUNCH_SCRIPT
    assert (project.path / "jobs/train.sbatch").read_text() == SBATCH_SCRIPT


def test_single_gpu_script_blocks_the_commit(make_project):
    project = make_project("ddp-migrate-check")
    before = project.head()
    project.write("train.py", SINGLE_GPU_SCRIPT)
    project.write("utils/stats.py", PLAIN_MODULE)

    status, output = project.commit("add training script")

    assert status != 0, output
    assert project.head() == before, "the commit went through"
    assert re.search(_hook_line("ddp-migrate (check)", "Failed"), output), output
    assert "- hook id: ddp-migrate-check" in output
    assert re.search(r"(?m)^train\.py:9:\d+: DDP003\b", output), output  # the DataParallel wrap
    assert re.search(r"(?m)^train\.py:\d+:\d+: DDP001\b", output), output  # the process group
    assert "would migrate train.py" in output
    assert "+    model = DDP(model" in output  # the diff
    assert "utils/stats.py" not in output  # nothing to say about an irrelevant file
    assert (project.path / "train.py").read_text() == SINGLE_GPU_SCRIPT


def test_fix_hook_migrates_and_the_second_commit_passes(make_project):
    project = make_project("ddp-migrate", "ddp-migrate-launchers-fix")
    before = project.head()
    project.write("train.py", SINGLE_GPU_SCRIPT)
    project.write("run.sh", LAUNCH_SCRIPT, executable=True)

    status, output = project.commit("add training script")

    assert status != 0, output
    assert project.head() == before, "the commit went through"
    assert re.search(_hook_line("ddp-migrate", "Failed"), output), output
    assert re.search(_hook_line("ddp-migrate launchers", "Failed"), output), output
    assert output.count("- files were modified by this hook") == 2, output
    migrated = (project.path / "train.py").read_text()
    assert "dist.init_process_group(" in migrated
    assert "model = DDP(model" in migrated and "nn.DataParallel" not in migrated
    assert "sampler.set_epoch(epoch)" in migrated
    assert "dist.destroy_process_group()" in migrated
    script = (project.path / "run.sh").read_text()
    assert "torchrun --nproc_per_node=2 train.py --epochs 3" in script
    assert "torch.distributed.launch" not in script
    assert os.access(project.path / "run.sh", os.X_OK), "the fix lost the executable bit"

    status, output = project.commit("add training script, migrated")

    assert status == 0, output
    assert project.head() != before
    assert re.search(_hook_line("ddp-migrate", "Passed"), output), output
    assert re.search(_hook_line("ddp-migrate launchers", "Passed"), output), output
    assert _git(project.path, project.env, "status", "--porcelain") == ""
    assert (project.path / "train.py").read_text() == migrated


def test_clean_commit_passes(make_project):
    project = make_project(*ALL_HOOKS)
    before = project.head()
    project.write("utils/stats.py", PLAIN_MODULE)
    project.write("run.sh", CLEAN_LAUNCH_SCRIPT, executable=True)
    project.write("Makefile", "train:\n\ttorchrun --nproc_per_node=2 train.py\n")
    project.write("README.md", "# project\n\n```bash\ntorchrun --nproc_per_node=8 train.py\n```\n")
    # files ddp-migrate does not take are not passed to it (they would be errors)
    project.write("utils/stats.pyi", "def mean(values: list) -> float: ...\n")
    project.write(".clang-format", "BasedOnStyle: Google\n")
    project.write("LICENSE", "MIT\n")

    status, output = project.commit("clean")

    assert status == 0, output
    assert project.head() != before
    for name in ("ddp-migrate (check)", "ddp-migrate", "ddp-migrate launchers (check)", "ddp-migrate launchers"):
        assert re.search(_hook_line(name, "Passed"), output), (name, output)


def test_hook_environment_has_no_torch(make_project, pre_commit_home):
    """The hooks' virtualenv holds ddp-migrate and its dependencies, and not torch."""
    project = make_project(*ALL_HOOKS)
    proc = _run([sys.executable, "-m", "pre_commit", "install-hooks"], project.path, project.env)
    assert proc.returncode == 0, proc.stdout
    envs = sorted(pre_commit_home.glob("repo*/py_env-*"))
    assert envs, f"no python hook environment in {pre_commit_home}"
    probe = (
        "import importlib.util as u, sys; "
        "missing = [m for m in ('migrator', 'libcst', 'click', 'rich', 'pathspec', 'yaml', 'markdown_it')"
        " if u.find_spec(m) is None]; "
        "sys.exit(f'missing {missing}' if missing else 'torch is installed' if u.find_spec('torch') else 0)"
    )
    for env_dir in envs:
        python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        result = _run([str(python), "-c", probe], project.path, project.env)
        assert result.returncode == 0, f"{env_dir}: {result.stdout}"


def test_extension_less_shell_scripts_with_the_readme_override(make_project):
    """The README's second entry checks executable shell scripts without an extension, and nothing else."""
    project = make_project(
        "ddp-migrate-launchers",
        extra=(
            "      - id: ddp-migrate-launchers\n"
            "        name: ddp-migrate launchers, extension-less\n"
            "        files: '(^|/)[^/.]+$'\n"
            "        types: [shell]\n"
            "        exclude_types: [csh, tcsh]\n"
        ),
    )
    before = project.head()
    project.write("scripts/launch", LAUNCH_SCRIPT, executable=True)
    project.write("scripts/serve", "#!/usr/bin/env python3\nprint('serving')\n", executable=True)
    project.write("scripts/legacy", "#!/bin/csh\nsetenv X 1\n", executable=True)
    project.write("LICENSE", "MIT\n")

    status, output = project.commit("add launcher")

    assert status != 0, output
    assert project.head() == before, "the commit went through"
    assert re.search(_hook_line("ddp-migrate launchers (check)", r"\(no files to check\)Skipped"), output), output
    assert re.search(_hook_line("ddp-migrate launchers, extension-less", "Failed"), output), output
    assert re.search(r"(?m)^scripts/launch:3:1: DDP201\b", output), output
    for name in ("scripts/serve", "scripts/legacy", "LICENSE"):
        assert name not in output, (name, output)


# --------------------------------------------------------------------------- the README's configurations


def test_readme_local_hooks_are_the_manifest_hooks():
    """The README's `repo: local` hooks run what .pre-commit-hooks.yaml runs, on the same files."""
    import yaml

    (repo,) = yaml.safe_load(_readme_config("repo: local"))["repos"]
    assert repo["repo"] == "local"
    manifest = {hook["id"]: hook for hook in _manifest()}
    assert [hook["id"] for hook in repo["hooks"]] == ["ddp-migrate-check", "ddp-migrate-launchers"]
    for hook in repo["hooks"]:
        upstream = manifest[hook["id"]]
        assert hook["language"] == "system"
        assert hook["entry"] == upstream["entry"] == "ddp-migrate --check --diff --force-exclude"
        for key in ("name", "types", "files", "require_serial"):
            assert hook[key] == upstream[key], (hook["id"], key)


def test_readme_remote_hooks_are_in_the_manifest():
    import yaml

    text = _readme_config("rev:")
    (repo,) = yaml.safe_load(text)["repos"]
    assert "OWNER" in repo["repo"] and "replace OWNER" in text, "the repository must be a visible placeholder"
    assert {hook["id"] for hook in repo["hooks"]} <= {hook["id"] for hook in _manifest()}


def test_readme_local_hooks_block_a_single_gpu_script_and_pass_a_clean_commit(make_project):
    """The README's `repo: local` block, verbatim, with the installed `ddp-migrate` on PATH."""
    project = make_project(config=_readme_config("repo: local"))
    project.env["PATH"] = os.pathsep.join([str(_scripts_dir()), project.env.get("PATH", os.defpath)])

    before = project.head()
    project.write("utils/stats.py", PLAIN_MODULE)
    project.write("run.sh", CLEAN_LAUNCH_SCRIPT, executable=True)
    project.write("README.md", "# project\n\n```bash\ntorchrun --nproc_per_node=8 train.py\n```\n")
    status, output = project.commit("clean")
    assert status == 0, output
    assert project.head() != before
    assert re.search(_hook_line("ddp-migrate (check)", "Passed"), output), output
    assert re.search(_hook_line("ddp-migrate launchers (check)", "Passed"), output), output

    before = project.head()
    project.write("train.py", SINGLE_GPU_SCRIPT)
    project.write("jobs/run.sh", LAUNCH_SCRIPT, executable=True)
    status, output = project.commit("add training script")
    assert status != 0, output
    assert project.head() == before, "the commit went through"
    assert re.search(_hook_line("ddp-migrate (check)", "Failed"), output), output
    assert re.search(_hook_line("ddp-migrate launchers (check)", "Failed"), output), output
    assert re.search(r"(?m)^train\.py:9:\d+: DDP003\b", output), output
    assert re.search(r"(?m)^jobs/run\.sh:3:1: DDP201\b", output), output
    assert "+    model = DDP(model" in output  # the diff
    assert (project.path / "train.py").read_text() == SINGLE_GPU_SCRIPT  # a check writes nothing


def test_project_excludes_apply_to_the_files_pre_commit_names(make_project):
    """`[tool.ddp-migrate] extend-exclude` in the project's pyproject.toml holds for the hooks (--force-exclude)."""
    project = make_project("ddp-migrate-check", "ddp-migrate-launchers")
    before = project.head()
    project.write("pyproject.toml", '[tool.ddp-migrate]\nextend-exclude = ["vendor/"]\n')
    project.write("vendor/upstream/train.py", SINGLE_GPU_SCRIPT)
    project.write("vendor/upstream/run.sh", LAUNCH_SCRIPT, executable=True)

    status, output = project.commit("vendor an upstream project")

    assert status == 0, output
    assert project.head() != before
    assert re.search(_hook_line("ddp-migrate (check)", "Passed"), output), output
    assert re.search(_hook_line("ddp-migrate launchers (check)", "Passed"), output), output
