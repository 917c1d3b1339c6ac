"""The start-up fast path (migrator.fastpath) answers exactly as the full CLI, or leaves the run to it.

Each case runs `python -m migrator ARGS` (fast path first) and the full CLI alone on the same
files, and compares stdout, stderr and the exit status; where the fast path must answer, it is
also checked that it did, without importing click.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from migrator import cli, config, fastpath, files, render

CLEAN = "import os\n\n\ndef main():\n    print(os.getcwd())\n"
TRAINING = "import torch\nmodel = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nopt.step()\n"
FULL = "import sys\nfrom migrator.cli import main\nmain(sys.argv[1:])\n"
PLAIN = {"NO_COLOR": None, "FORCE_COLOR": None, "TTY_COMPATIBLE": None, "TERM": "xterm"}


def _env(**extra):
    env = {key: value for key, value in os.environ.items() if key not in PLAIN}
    env.update({key: value for key, value in extra.items() if value is not None})
    return env


def _run(argv, cwd, env):
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True)


def _both(args, cwd, **env):
    environment = _env(**env)
    fast = _run(["-m", "migrator", *args], cwd, environment)
    full = _run(["-c", FULL, *args], cwd, environment)
    return fast, full


@pytest.fixture
def repo(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "a.py").write_text(CLEAN)
    (tmp_path / "b.py").write_text(CLEAN.replace("main", "run"))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "c.py").write_text(CLEAN)
    return tmp_path


CASES = {
    "check one clean file": (["--check", "a.py"], {}),
    "check --diff several": (["--check", "--diff", "a.py", "b.py", "pkg/c.py"], {}),
    "diff": (["--diff", "a.py", "b.py"], {}),
    "in place": (["--in-place", "a.py"], {}),
    "quiet": (["--check", "-q", "a.py"], {}),
    "force-exclude and exit-zero": (["--check", "--force-exclude", "--exit-zero", "a.py"], {}),
    "a file named twice": (["--check", "a.py", "./a.py"], {}),
    "colour forced": (["--check", "a.py"], {"FORCE_COLOR": "1"}),
    "colour off": (["--check", "a.py"], {"NO_COLOR": "1"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_fast_path_answers_as_the_cli_does(repo, name):
    args, env = CASES[name]
    fast, full = _both(args, repo, **env)
    assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr)
    assert _in(repo, args), "the fast path must answer this run itself"


def _in(repo: Path, args) -> bool:
    old = os.getcwd()
    os.chdir(repo)
    try:
        import contextlib
        import io

        with contextlib.redirect_stderr(io.StringIO()):
            return fastpath.run(args) is not None
    finally:
        os.chdir(old)


LEFT_TO_THE_CLI = {
    "a training script": ("t.py", TRAINING.encode(), ["--check", "t.py"]),
    "a BOM": ("t.py", b"\xef\xbb\xbf" + CLEAN.encode(), ["--check", "t.py"]),
    "an encoding cookie": ("t.py", b"# -*- coding: latin-1 -*-\nx = '\xe9'\n", ["--check", "t.py"]),
    "not UTF-8": ("t.py", b"x = '\xff\xfe'\n", ["--check", "t.py"]),
    "printing one file": ("t.py", CLEAN.encode(), ["t.py"]),
    "a folder": ("t.py", CLEAN.encode(), ["--check", "."]),
    "a missing file": ("t.py", CLEAN.encode(), ["--check", "missing.py"]),
    "another flag": ("t.py", CLEAN.encode(), ["--check", "--statistics", "t.py"]),
    "a usage error": ("t.py", CLEAN.encode(), ["--check", "--in-place", "t.py"]),
    "a launcher file": ("run.sh", b"echo hi\n", ["--check", "run.sh"]),
    "a default-excluded folder": ("build/t.py", CLEAN.encode(), ["--check", "--force-exclude", "build/t.py"]),
    "above the size limit": ("t.py", b"# " + b"x" * (fastpath.MAX_FILE_SIZE + 10) + b"\n", ["--check", "t.py"]),
}


@pytest.mark.parametrize("name", list(LEFT_TO_THE_CLI))
def test_what_the_fast_path_cannot_answer_goes_to_the_cli(repo, name):
    path, data, args = LEFT_TO_THE_CLI[name]
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_bytes(data)
    assert not _in(repo, args)
    fast, full = _both(args, repo)
    assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr)


def test_a_configuration_file_sends_the_run_to_the_cli(repo):
    (repo / "pyproject.toml").write_text('[tool.ddp-migrate]\nselect = ["DDP999"]\n')  # a bad one: exit 2
    assert not _in(repo, ["--check", "a.py"])
    fast, full = _both(["--check", "a.py"], repo)
    assert fast.returncode == full.returncode == 2 and fast.stderr == full.stderr


def test_the_fast_path_loads_nothing_heavy(repo):
    """Beyond what the interpreter itself loaded at start-up (an editable install's finder loads
    pathlib there), the fast path adds none of the CLI's dependencies."""
    heavy = "('click', 'pathlib', 'dataclasses', 'typing', 'libcst', 'rich', 'inspect')"
    before = subprocess.run([sys.executable, "-c", f"import sys; print(sorted(m for m in {heavy} if m in sys.modules))"],
                            cwd=repo, capture_output=True, text=True, env=_env()).stdout
    probe = ("import sys\nsys.argv = ['ddp-migrate', '--check', 'a.py']\nfrom migrator.__main__ import main\n"
             f"try:\n    main()\nexcept SystemExit:\n    pass\nprint(sorted(m for m in {heavy} if m in sys.modules))")
    after = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, env=_env())
    assert after.stdout.strip() == before.strip(), after.stdout + after.stderr


def test_the_fast_paths_constants_are_the_clis():
    assert fastpath.MAX_FILE_SIZE == config.DEFAULT_MAX_FILE_SIZE
    assert fastpath.PROGRESS_MIN_FILES == render.PROGRESS_MIN_FILES
    assert fastpath._DEFAULT_EXCLUDED == files.EXCLUDED_DIRS - {".git"}
    assert cli.PYTHON_RELEVANT is fastpath.PYTHON_RELEVANT
    assert fastpath._TABLE == config.TABLE and fastpath._PYPROJECT == config.PYPROJECT


def test_a_script_that_calls_a_model_factory_goes_to_the_cli(repo):
    """It never names torch, but the model it trains comes from a module imported by name at run
    time (`create_model(opt)`): project mode follows the factory, so the CLI must see it."""
    (repo / "models").mkdir()
    (repo / "models" / "__init__.py").write_text(
        "import importlib\n\n\ndef create_model(opt):\n"
        "    return importlib.import_module('models.' + opt.model + '_model').Model(opt)\n")
    (repo / "models" / "gan_model.py").write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n")
    (repo / "t.py").write_text("from models import create_model\n\nif __name__ == '__main__':\n    create_model(None)\n")
    assert not _in(repo, ["--check", "t.py"])
    (repo / "u.py").write_text("import os\n\nif __name__ == '__main__':\n    print(os.getcwd())\n")
    assert _in(repo, ["--check", "u.py"]), "a script with no factory behind it is still answered at once"
