"""Project mode on multi-file projects (fixtures/projects/<name>/): golden trees, idempotency,
what a run on the script alone reports, and the pure planner's edge cases.

`pytest --update-fixtures tests/test_projects.py` rewrites expected/ from the engine; review it.
The runtime tests (tests/test_projects_runtime.py) run expected/ under torchrun.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import fixture_cases
from migrator.cli import cli
from migrator.project.graph import ProjectGraph, import_lines
from migrator.project.plan import ProjectFile, plan_project
from migrator.types import Change

CASES = fixture_cases.discover_projects()
IDS = [case.name for case in CASES]


def _copy(case: fixture_cases.ProjectCase, tmp_path: Path) -> Path:
    root = tmp_path / case.name
    shutil.copytree(case.input_dir, root)
    (root / ".git").mkdir()  # the project's top, as in a clone: imports are not looked for above it
    return root


def _run(*args: str):
    return CliRunner().invoke(cli, [*args, "--color", "never"], catch_exceptions=False)


def _sources(root: Path):
    return {name: data for name, data in fixture_cases.tree_files(root).items() if not name.startswith(".git")}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_project_migrates_to_expected_tree(case, tmp_path, update_fixtures):
    root = _copy(case, tmp_path)
    result = _run("--in-place", str(root))
    assert result.exit_code == 0, result.output
    migrated = _sources(root)
    if update_fixtures and not case.unchanged:
        shutil.rmtree(case.expected_dir, ignore_errors=True)
        shutil.copytree(root, case.expected_dir, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    expected = _sources(case.migrated_dir)
    assert sorted(migrated) == sorted(expected)
    for name in expected:
        assert migrated[name].decode() == expected[name].decode(), f"{case.name}: {name} differs from expected"
    if case.unchanged:
        assert migrated == _sources(case.input_dir), "an already-distributed project must stay byte-identical"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_project_second_run_changes_nothing_and_check_passes(case, tmp_path):
    root = _copy(case, tmp_path)
    _run("--in-place", str(root))
    once = _sources(root)
    result = _run("--check", "--output-format", "json", str(root))
    assert result.exit_code == 0, result.output
    assert _run("--in-place", str(root)).exit_code == 0
    assert _sources(root) == once


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_project_findings(case, tmp_path):
    root = _copy(case, tmp_path)
    result = _run("--check", "--output-format", "json", str(root))
    report = json.loads(result.output)
    codes = {f["code"] for item in report["files"] for f in item["findings"] if f["kind"] == "diagnostic"}
    assert codes == set(case.diagnostics), result.output
    assert result.exit_code == (0 if case.unchanged else 1)


@pytest.mark.parametrize("case", [c for c in CASES if not c.unchanged], ids=[c.name for c in CASES if not c.unchanged])
def test_script_alone_names_the_modules_it_needs(case, tmp_path):
    """`ddp-migrate train.py`: the modules are not among the files given, so they stay as they are
    and the script's findings say which module needs what (DDP140)."""
    root = _copy(case, tmp_path)
    result = _run("--in-place", "--output-format", "json", str(root / case.entry))
    report = json.loads(result.output)
    changed_modules = {
        name for name, data in _sources(root).items()
        if name != case.entry and data != (case.input_dir / name).read_bytes()
    }
    assert not changed_modules, "a module not named on the command line was changed"
    needs = [f["message"] for item in report["files"] for f in item["findings"] if f["code"] == "DDP140"]
    expected_modules = {name for name, data in _sources(case.expected_dir).items()
                        if name != case.entry and data != (case.input_dir / name).read_bytes()}
    for module in expected_modules:
        assert any(message.startswith(module + ":") for message in needs), (module, needs)
