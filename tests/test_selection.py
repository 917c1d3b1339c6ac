"""Rule selections never write a script that cannot run: fixes that rely on each other travel together.

Every fix runs in the process group DDP001 sets up, the wrap needs the per-rank device, the
sampler's set_epoch needs the sampler, `.module` needs the wrap (Rule.requires). A selection
pulls in what a selected fix needs; an ignored prerequisite turns off the fixes that need it,
with one line saying why; a `# ddp-migrate: ignore[...]` of a prerequisite does the same in its
file. The runtime test runs each selection's output under torchrun.
"""
from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

import fixture_cases
from migrator import cli as cli_module
from migrator.api import migrate
from migrator.codes import CODES, REQUIRES
from migrator.config import RuleSelection, resolve_rules
from migrator.rules import FIXERS, RULES_BY_CODE

MNIST = next(case for case in fixture_cases.discover() if case.name == "mnist_main_argparse")
SOURCE = MNIST.input_path.read_text()
PLAIN_ENV = {"FORCE_COLOR": None, "NO_COLOR": None, "TTY_COMPATIBLE": None, "TERM": "xterm", "COLUMNS": "80"}


def _options(**layer):
    return resolve_rules(RuleSelection(**layer))


def _changed_codes(source: str, options) -> set:
    return {change.code for change in migrate(source, options).changes}


def test_requirements_are_rules_and_have_no_cycles():
    codes = {code for code, _ in CODES}
    for code, required in REQUIRES.items():
        assert set(required) <= codes and code not in required
        assert RULES_BY_CODE[code].requires == required

    def closure(code, seen=()):
        assert code not in seen, f"cycle through {code}"
        for required in REQUIRES.get(code, ()):
            closure(required, (*seen, code))

    for code in REQUIRES:
        closure(code)


@pytest.mark.parametrize("selected, pulled", [
    ("DDP003", {"DDP001", "DDP002"}),
    ("DDP010", {"DDP001"}),
    ("DDP011", {"DDP001", "DDP010"}),
    ("DDP014", {"DDP001", "DDP002", "DDP003"}),
])
def test_a_selected_fix_pulls_in_what_it_needs(selected, pulled):
    options = _options(select=(selected,))
    assert all(options.fix_enabled(code) for code in {selected, *pulled})
    assert not options.fix_enabled("DDP004") and not options.dropped_fixes
    assert _changed_codes(SOURCE, options) <= {selected, *pulled}


def test_an_ignored_prerequisite_turns_off_what_needs_it():
    options = _options(ignore=("DDP001",))
    needing = {code for code in REQUIRES if options.enabled(code)}
    assert needing and all(not options.fix_enabled(code) for code in needing)
    assert set(options.dropped_fixes.values()) == {"DDP001"}
    assert options.fix_enabled("DDP016")  # needs nothing: still on
    assert migrate(SOURCE, options).code == SOURCE


def test_an_explicitly_ignored_requirement_is_not_pulled_in():
    options = _options(select=("DDP003",), ignore=("DDP002",))
    assert not options.fix_enabled("DDP003") and options.dropped_fixes == {"DDP003": "DDP002"}


def test_the_cli_says_once_why_fixes_are_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(SOURCE)
    (tmp_path / "b.py").write_text(SOURCE)
    result = CliRunner().invoke(cli_module.cli, ["--check", "--ignore", "DDP001", "."], env=PLAIN_ENV)
    notes = [line for line in result.stderr.splitlines() if "is ignored" in line]
    assert len(notes) == 1 and notes[0].startswith(
        "DDP001 (process-group-setup) is ignored, so the fixes that need it are off too: DDP002, DDP003, DDP004")
    assert "DDP114" not in result.stderr and "DDP120" not in result.stderr  # no decline, no advice about a sharding not made
    assert result.exit_code == 0


def test_a_suppressed_prerequisite_turns_off_what_needs_it_in_its_file():
    setup_line = next(change.line for change in migrate(SOURCE).changes if change.code == "DDP001")
    lines = SOURCE.split("\n")
    lines[setup_line - 1] += "  # ddp-migrate: ignore[DDP001]"
    source = "\n".join(lines)
    result = migrate(source)
    assert result.code == source
    assert result.notes and result.notes[0].startswith(
        "DDP001 (process-group-setup) is suppressed in this file (# ddp-migrate: ignore), so the fixes that need it are off too")


def test_every_fixer_is_either_independent_or_requires_the_setup():
    """A new fix that edits in the process group must say so (requires), or it would run alone."""
    # DDP024 (--spawn) rewrites an mp.spawn script's own init_process_group: it is its own setup.
    independent = {"DDP001", "DDP016", "DDP020", "DDP005", "DDP021", "DDP017", "DDP024"}
    for rule, _ in FIXERS:
        closure, todo = set(), list(rule.requires)
        while todo:
            code = todo.pop()
            closure.add(code)
            todo += REQUIRES.get(code, ())
        assert rule.code in independent or "DDP001" in closure, rule.code


# --------------------------------------------------------------------------- what is written runs

SELECTIONS = {
    "ignore-setup": {"ignore": ("DDP001",)},
    "select-wrap": {"select": ("DDP003",)},
    "select-sampler": {"select": ("DDP010",)},
    "select-checkpoint-keys": {"select": ("DDP014",)},
}


@pytest.mark.runtime
def test_what_each_selection_writes_runs_under_torchrun(tmp_path):
    if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
        pytest.skip("torch is not installed")
    from runtime_probe.checks import assert_clean_exit
    from runtime_probe.harness import run_torchrun

    # Migrated here, one after the other: CPython 3.11's AST constructor is not safe to use from
    # several threads at once ("AST constructor recursion depth mismatch"); only the torchrun
    # runs, which are subprocesses, overlap.
    for name in SELECTIONS:
        (tmp_path / f"{name}.py").write_text(migrate(SOURCE, _options(**SELECTIONS[name])).code)

    def run(name):
        workdir = tmp_path / name
        workdir.mkdir()
        return name, run_torchrun(tmp_path / f"{name}.py", workdir, args=MNIST.args, script_name="train.py",
                                  label=f"selection {name}")

    with ThreadPoolExecutor(max_workers=2) as pool:
        reports = dict(pool.map(run, SELECTIONS))
    for name, report in reports.items():
        assert_clean_exit(report)
        ddp = [len(record.get("ddp", [])) for record in report.records.values()]
        wraps = "DDP003" in _changed_codes(SOURCE, _options(**SELECTIONS[name]))
        assert all(count == (1 if wraps else 0) for count in ddp), (name, ddp)
