"""The engine's output can be trusted: nothing it writes reads an unbound name, and it checks clean.

1. migrator.soundness resolves reads with Python's scoping rules (table of small cases, both ways).
2. Every fixture's and rule example's output reads no name its input did not already leave
   unbound, and no fixture or example is declined as unsound (DDP125).
3. A fix that relies on something that did not happen is never written: with the device-placement
   mechanism turned off, the flat script that defines `device` at its end is left unchanged with
   DDP125 (the wrong rewrite fresh repositories showed: NameError on every rank).
4. Composed scripts (hypothesis): no DDP125, no new unbound read.
5. The tool's own output checks clean: for every fixture, `check(expected)` has nothing to change and
   reports nothing that needs a human which the input did not already report; the same for every
   project fixture through the CLI (`--in-place`, then `--check`).
"""
from __future__ import annotations

import ast
import json
import shutil

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

import fixture_cases
import script_blocks
from migrator import migrate
from migrator.api import check
from migrator.cli import cli
from migrator.codes import INFORMATIONAL
from migrator.rules import RULES
from migrator.soundness import new_unbound_reads, original_line, unbound_reads
from test_rule_examples import _run as run_example

FIXTURES = [case for case in fixture_cases.discover() if case.input_parses and case.expected_path_or_none is not None]
PROJECTS = fixture_cases.discover_projects()


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:  # `async=` (DDP017): only the engine's own renaming makes it parse
        return False
    return True


EXAMPLES = [pytest.param(rule, example, id=f"{rule.code}-{example.id}") for rule in RULES for example in rule.examples
            if example.after is not None and rule.code[3] in "01" and _parses(example.before)]


# --------------------------------------------------------------------------- 1. the resolution
def _names(source: str):
    return sorted((read.scope, read.name) for read in unbound_reads(source))


UNBOUND = [
    pytest.param("x = 1\nprint(x)\n", [], id="bound-before"),
    pytest.param("print(x)\nx = 1\n", [("<module>", "x")], id="module-read-before-binding"),
    pytest.param("def f():\n    return y\ny = 2\nf()\n", [], id="function-reads-module-name-bound-later"),
    pytest.param("y = 1\ndef f():\n    print(y)\n    y = 2\n", [("f", "y")], id="unbound-local-shadows-global"),
    pytest.param("for i in range(3):\n    if i:\n        print(z)\n    z = i\n", [("<module>", "z")], id="unbound-on-the-first-pass"),
    pytest.param("z = 0\nfor i in range(3):\n    print(z)\n    z = i\n", [], id="bound-before-the-loop"),
    pytest.param("d = {k: v for k, v in {}.items()}\n", [], id="comprehension-targets"),
    pytest.param("class A:\n    n = 1\n    def f(self):\n        return n\n", [("A.f", "n")], id="class-body-is-no-enclosing-scope"),
    pytest.param("def f():\n    x = 1\n    def g():\n        return x\n    return g\n", [], id="closure"),
    pytest.param("def f():\n    global G\n    G = 1\nf()\nprint(G)\n", [], id="global-declared"),
    pytest.param("from os import *\nprint(path)\n", [], id="star-import"),
    pytest.param("try:\n    import a\nexcept ImportError as e:\n    print(e)\n", [], id="except-name"),
    pytest.param("with open('f') as fh:\n    fh.read()\n", [], id="with-name"),
    pytest.param("if (n := 3) > 2:\n    print(n)\n", [], id="walrus"),
    pytest.param("def f(a, *args, b=1, **kw):\n    return a, args, b, kw\n", [], id="parameters"),
    pytest.param("print(__file__, len([]))\n", [], id="builtins-and-module-dunders"),
    pytest.param("sampler.set_epoch(0)\n", [("<module>", "sampler")], id="never-bound"),
]


@pytest.mark.parametrize("source, expected", UNBOUND)
def test_unbound_reads(source, expected):
    assert _names(source) == expected


def test_new_unbound_reads_are_those_the_input_did_not_have():
    before = "import torch\nmodel = torch.nn.Linear(1, 1)\nprint(late)\nlate = 1\n"
    after = "import torch\nmodel = torch.nn.Linear(1, 1)\nmodel = wrap(model, device)\nprint(late)\nlate = 1\ndevice = 0\n"
    found = [(read.name, read.line) for read in new_unbound_reads(before, after)]
    assert found == [("wrap", 3), ("device", 3)]
    assert original_line(before, after, 3) == 3  # the inserted line stands for the line it was written above


# --------------------------------------------------------------------------- 2. goldens
@pytest.mark.parametrize("case", FIXTURES, ids=[case.name for case in FIXTURES])
def test_fixture_output_reads_only_bound_names(case):
    before = case.input_path.read_text(encoding="utf-8")
    after = case.expected_path.read_text(encoding="utf-8")
    assert new_unbound_reads(before, after) == []


@pytest.mark.parametrize("rule, example", EXAMPLES)
def test_rule_example_output_reads_only_bound_names(rule, example):
    assert new_unbound_reads(example.before, example.after) == []
    result = run_example(rule, example.before, example.path, example.options, example.handed)
    assert "DDP125" not in {d.code for d in result.diagnostics}


# --------------------------------------------------------------------------- 3. the net holds
LATE_DEVICE = fixture_cases.FIXTURES / "flat_device_defined_late" / "input.py"


def test_a_fix_that_reads_an_unbound_name_is_never_written(monkeypatch):
    from migrator.rules import wrap_model

    source = LATE_DEVICE.read_text(encoding="utf-8")
    assert migrate(source).changed  # the engine places the wrap's device test where it can run
    monkeypatch.setattr(wrap_model, "_device_read_too_early", lambda facts, model: False)  # as before that mechanism
    result = migrate(source)
    assert result.code == source and not result.changes
    [finding] = [d for d in result.diagnostics if d.code == "DDP125"]
    assert "`device`" in finding.message and "line 35" in finding.message
    assert finding.line == 22  # the statement the wrap would have been written above
    checked = check(source)
    assert not checked.changed and "DDP125" in {d.code for d in checked.diagnostics}


def test_unsound_file_fails_check_and_is_left_byte_identical(monkeypatch, tmp_path):
    from migrator.rules import wrap_model

    monkeypatch.setattr(wrap_model, "_device_read_too_early", lambda facts, model: False)
    path = tmp_path / "train.py"
    shutil.copy(LATE_DEVICE, path)
    before = path.read_bytes()
    result = CliRunner().invoke(cli, ["--in-place", str(path), "--color", "never"], catch_exceptions=False)
    assert path.read_bytes() == before
    assert "DDP125" in result.output
    result = CliRunner().invoke(cli, ["--check", str(path), "--color", "never"], catch_exceptions=False)
    assert result.exit_code == 1 and "DDP125" in result.output


# --------------------------------------------------------------------------- 4. composed scripts
@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(script=script_blocks.scripts())
def test_composed_scripts_are_never_unsound(script):
    result = migrate(script.source)
    assert "DDP125" not in {d.code for d in result.diagnostics}, script.source
    assert new_unbound_reads(script.source, result.code) == []


# --------------------------------------------------------------------------- 5. the output checks clean
def _needs_human(diagnostics):
    return {d.code for d in diagnostics if d.code not in INFORMATIONAL and not d.fixable}


@pytest.mark.parametrize("case", FIXTURES, ids=[case.name for case in FIXTURES])
def test_fixture_output_checks_clean(case):
    """`--in-place` then `--check`: nothing left to change, and nothing reported that needs a human
    unless the input already needed it (an advisory that still holds is still said)."""
    before = case.input_path.read_text(encoding="utf-8")
    after = case.expected_path.read_text(encoding="utf-8")
    options = case.options
    from migrator.options import Options

    checked = check(after, Options(**options), context=case.context)
    assert not checked.changed, [(c.code, c.line, c.message) for c in checked.changes]
    told = _needs_human(check(before, Options(**options), context=case.context).diagnostics)
    new = {code for code in _needs_human(checked.diagnostics) if code not in told}
    assert not new, [(d.code, d.line, d.message) for d in checked.diagnostics if d.code in new]


def _json(*args):
    result = CliRunner().invoke(cli, [*args, "--output-format", "json", "--color", "never"], catch_exceptions=False)
    return result, json.loads(result.output)


def _human(report):
    return {(item["path"].split("/")[-1], f["code"]) for item in report["files"] for f in item["findings"]
            if f["kind"] == "diagnostic" and f["code"] not in INFORMATIONAL}


@pytest.mark.parametrize("case", PROJECTS, ids=[case.name for case in PROJECTS])
def test_project_output_checks_clean(case, tmp_path):
    root = tmp_path / case.name
    shutil.copytree(case.input_dir, root)
    (root / ".git").mkdir()
    _, before = _json("--check", str(root))
    CliRunner().invoke(cli, ["--in-place", str(root), "--color", "never"], catch_exceptions=False)
    _, after = _json("--check", str(root))
    assert after["summary"]["changed"] == 0
    assert _human(after) <= _human(before), sorted(_human(after) - _human(before))


def test_fixture_cases_cover_the_examples():
    assert FIXTURES and PROJECTS and EXAMPLES
    assert any(case.name == "flat_device_defined_late" for case in FIXTURES)


# --------------------------------------------------------------------------- the real repositories
REALRUN = fixture_cases.ROOT.parent / "shared" / "realrun" / "cases"
REAL_CASES = sorted(p.name for p in REALRUN.iterdir() if (p / "tree").is_dir()) if REALRUN.is_dir() else []


@pytest.mark.skipif(not REAL_CASES, reason="../shared/realrun is not beside the checkout")
@pytest.mark.parametrize("name", REAL_CASES)
def test_real_repository_output_checks_clean(name, tmp_path):
    """`../shared/realrun`'s repositories (their upstream files, never copied into the project):
    `--in-place` on the case's target, then `--check` changes nothing and reports nothing that needs
    a human which the first run did not, and a second `--in-place` changes nothing."""
    tomllib = pytest.importorskip("tomllib")

    case = REALRUN / name
    config = tomllib.loads((case / "case.toml").read_text(encoding="utf-8"))
    root = tmp_path / "tree"
    shutil.copytree(case / "tree", root, copy_function=shutil.copyfile)  # writable copies of read-only files
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    (root / ".git").mkdir()
    target = str(root if config.get("migrate") == "tree" else root / config["script"])
    _, before = _json("--check", target)
    CliRunner().invoke(cli, ["--in-place", target, "--color", "never"], catch_exceptions=False)
    once = fixture_cases.tree_files(root)
    _, after = _json("--check", target)
    assert after["summary"]["changed"] == 0, after
    assert _human(after) <= _human(before), sorted(_human(after) - _human(before))
    CliRunner().invoke(cli, ["--in-place", target, "--color", "never"], catch_exceptions=False)
    assert fixture_cases.tree_files(root) == once


LOADER_BUILT_IN_THE_EPOCH_LOOP = '''import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    sets = {"train": TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), "valid": TensorDataset(torch.randn(8, 4), torch.randn(8, 1))}
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        for split in ["train", "valid"]:
            data_loader = DataLoader(sets[split], batch_size=8, shuffle=split == "train")
            for x, y in data_loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                if split == "train":
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_a_read_before_its_binding_on_the_first_pass_of_a_loop_is_never_written():
    """A loader built inside the epoch loop, per split (a sentence-VAE repository's shape): the
    epoch's `set_epoch` written at the top of the epoch loop would read the loader before the
    first pass binds it (UnboundLocalError on every rank, seen on a real repository). The file is
    left unchanged with DDP125."""
    result = migrate(LOADER_BUILT_IN_THE_EPOCH_LOOP)
    assert result.code == LOADER_BUILT_IN_THE_EPOCH_LOOP
    [finding] = [d for d in result.diagnostics if d.code == "DDP125"]
    assert "`data_loader`" in finding.message
