"""Runtime tests of project mode: each migrated multi-file project (fixtures/projects/<name>/
expected/, or input/ when it must stay unchanged) trains under `torchrun --standalone
--nproc_per_node=2` with the properties of tests/test_runtime.py (world size 2, DDP wrap,
identical parameters, disjoint covering shards reshuffled each epoch, evaluation loaders whole,
rank-0 checkpoints, clean shutdown), runs as plain `python <entry>`, and saves what the original
project saves, with the same (nested) state_dict keys.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Dict

import pytest

import fixture_cases
from runtime_probe.checks import assert_clean_exit, assert_same_saved_keys, assert_trains_correctly_under_ddp
from runtime_probe.harness import RunReport, run_single, run_torchrun

pytestmark = pytest.mark.runtime

if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
    pytest.skip("torch is not installed (pip install -e '.[test]')", allow_module_level=True)

CASES = fixture_cases.discover_projects()
IDS = [case.name for case in CASES]
KEYS_CHECK = "same_saved_keys"
_ORIGINALS: Dict[str, RunReport] = {}


def _run(case: fixture_cases.ProjectCase, tree: Path, workdir: Path, *, torchrun: bool, label: str) -> RunReport:
    runner = run_torchrun if torchrun else run_single
    return runner(tree / case.entry, workdir, args=case.args, script_name=case.entry, support=tree,
                  label=f"project {case.name}: {label}")


def _original(case: fixture_cases.ProjectCase, tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    if case.name not in _ORIGINALS:
        original = _run(case, case.input_dir, tmp_path_factory.mktemp(f"{case.name}-original"), torchrun=False,
                        label="the original project as one plain CPU process")
        assert_clean_exit(original)
        _ORIGINALS[case.name] = original
    return _ORIGINALS[case.name]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_migrated_project_trains_under_torchrun(case, tmp_path_factory):
    report = _run(case, case.migrated_dir, tmp_path_factory.mktemp(f"{case.name}-torchrun"), torchrun=True,
                  label=f"{case.migrated_dir.name}/{case.entry} under torchrun")
    skip = {name: why for name, why in case.runtime_skip.items() if name != KEYS_CHECK}
    notes = assert_trains_correctly_under_ddp(report, nproc=2, skip=skip)
    print(f"{case.name}: torchrun run {report.duration_s:.1f}s")  # shown with -rP
    for name, note in notes.items():
        print(f"  {name}: {note}")
    if KEYS_CHECK not in case.runtime_skip:
        print(f"  {KEYS_CHECK}: {assert_same_saved_keys(report, _original(case, tmp_path_factory))}")


@pytest.mark.parametrize("case", [c for c in CASES if not c.unchanged], ids=[c.name for c in CASES if not c.unchanged])
def test_migrated_project_runs_as_plain_python(case, tmp_path_factory):
    plain = _run(case, case.migrated_dir, tmp_path_factory.mktemp(f"{case.name}-plain"), torchrun=False,
                 label=f"expected/{case.entry} as plain python (no torchrun)")
    assert_clean_exit(plain)
    if KEYS_CHECK not in case.runtime_skip:
        print(f"{case.name}: {KEYS_CHECK}: {assert_same_saved_keys(plain, _original(case, tmp_path_factory))}")
