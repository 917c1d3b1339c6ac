"""The project's own code passes ruff with the rules pyproject.toml selects (syntax errors,
pyflakes): an unused import or an undefined name fails the suite, in CI too."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    return [found]


def test_the_code_passes_ruff():
    result = subprocess.run([*_ruff(), "check", "--no-cache", "migrator", "scripts", "tests"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_reads_the_project_configuration(tmp_path):
    """The check above can fail: an unused import in a file under the configuration is reported."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "bad.py").write_text("import os\n")
    result = subprocess.run([*_ruff(), "check", "--no-cache", "bad.py"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 1 and "F401" in result.stdout, result.stdout
