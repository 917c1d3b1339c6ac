"""A suppressed fix is dropped from what was planned, not planned again.

Each fix plans into a plan of its own (edits.Plan.for_fix), so its edits and Changes are its own:
`# ddp-migrate: ignore[CODE]` on one of its Changes drops that fix (and the fixes that require it)
from the file's plans, and the file is finished again from the same parse and analysis
(api._Planned.without). That is only right if dropping a fix's plan gives what planning the file
without that fix gives. These tests hold it to that, for every fix that plans anything in every rule
example and (slow) every fixture, and check the one case where it cannot hold: a fix that stays
read what the dropped one planned (a print left alone because the checkpoint fix already guards the
helper it is in), where the file is migrated again instead.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

import fixture_cases
from migrator import api
from migrator.api import migrate
from migrator.context import FileContext
from migrator.launcher import LAUNCHER_RULES
from migrator.options import Options
from migrator.rules.modules import RULES as PROJECT_RULES
from migrator.rules import RULES, RULES_BY_CODE

# Launcher files and project mode's modules have engines of their own.
_OTHER_ENGINES = {rule.code for rule in (*LAUNCHER_RULES, *PROJECT_RULES)}
EXAMPLES = [
    pytest.param(example.before, Options(**dict(example.options)), FileContext(path=example.path) if example.path else None,
                 id=f"{rule.code}-{example.id}")
    for rule in RULES if rule.code not in _OTHER_ENGINES for example in rule.examples
]
FIXTURES = [
    pytest.param(case.input_path.read_text(), Options(**case.options), case.context, id=case.name)
    for case in fixture_cases.discover() if case.input_parses
]


def _dropped_and_planned_again(source: str, options: Options, context):
    """For each fix that plans something in `source`: (its code, the result with it dropped or None,
    the result of migrating the file with it ignored)."""
    planned = api._plan(source, options, context=context)
    if isinstance(planned, api.Result):
        return []
    found = []
    for part in planned.parts:
        if not any(p.changes or p.diagnostics or p.replacements or p.before or p.after or p.guards for p in (part, *part.sites)):
            continue
        without = replace(options, ignore=(*options.ignore, part.owner))
        found.append((part.owner, planned.without(without), api._migrate(source, without, context=context)))
    return found


def _assert_the_same(source: str, options: Options, context) -> None:
    for code, dropped, again in _dropped_and_planned_again(source, options, context):
        if dropped is not None:
            assert dropped == again, f"dropping {code} is not the same as migrating without it"


@pytest.mark.parametrize("source, options, context", EXAMPLES)
def test_dropping_a_fix_from_a_rule_example_is_migrating_without_it(source, options, context):
    _assert_the_same(source, options, context)


@pytest.mark.slow
@pytest.mark.parametrize("source, options, context", FIXTURES)
def test_dropping_a_fix_from_a_fixture_is_migrating_without_it(source, options, context):
    _assert_the_same(source, options, context)


def _checkpoint_helper_with_a_print() -> str:
    example = next(e for e in RULES_BY_CODE["DDP012"].examples if e.id == "checkpoint-helper")
    return example.before.replace("    torch.save(state, filename)\n",
                                  "    print(f\"saving {filename}\")\n    torch.save(state, filename)\n")


def test_a_fix_that_read_what_a_dropped_one_planned_is_planned_again():
    source = _checkpoint_helper_with_a_print()
    found = dict((code, (dropped, again)) for code, dropped, again in _dropped_and_planned_again(source, Options(), None))
    dropped, again = found["DDP012"]
    assert dropped is None  # the print is left alone because the helper's call is guarded by DDP012
    assert "if dist.get_rank() == 0:\n        print(" in again.code  # without DDP012, the print is guarded itself


def _count_plans(monkeypatch) -> list:
    calls = []
    real = api._plan

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "_plan", counting)
    return calls


def _suppress_on_the_line_of(source: str, code: str) -> str:
    line = next(change.line for change in migrate(source).changes if change.code == code)
    lines = source.split("\n")
    lines[line - 1] += f"  # ddp-migrate: ignore[{code}]"
    return "\n".join(lines)


def test_a_suppressed_fix_is_dropped_without_planning_the_file_again(monkeypatch):
    """The sampler goes whole (its set_epoch needs it): both are dropped from what was planned."""
    mnist = next(case for case in fixture_cases.discover() if case.name == "mnist_main_argparse")
    source = _suppress_on_the_line_of(mnist.input_path.read_text(), "DDP010")
    calls = _count_plans(monkeypatch)
    result = migrate(source)
    assert len(calls) == 1
    assert not {"DDP010", "DDP011"} & {change.code for change in result.changes}
    assert result.code == migrate(source, Options(ignore=("DDP010",))).code
    assert {"DDP001", "DDP003", "DDP012"} <= {change.code for change in result.changes}  # the other fixes stay
    assert result.notes and "DDP011" in result.notes[0]


def test_a_suppressed_fix_that_another_read_plans_the_file_again(monkeypatch):
    source = _suppress_on_the_line_of(_checkpoint_helper_with_a_print(), "DDP012")
    calls = _count_plans(monkeypatch)
    result = migrate(source)
    assert len(calls) == 2
    assert result.code == migrate(source, Options(ignore=("DDP012",))).code
    assert "if dist.get_rank() == 0:\n        print(" in result.code


# --------------------------------------------------------------------------- project mode's modules

def _project_examples():
    from test_rule_examples import example_role

    for rule in PROJECT_RULES:
        for example in rule.examples:
            yield pytest.param(example.before, example_role(example.handed), id=f"{rule.code}-{example.id}")


@pytest.mark.parametrize("source, role", list(_project_examples()))
def test_dropping_a_fix_from_a_module_is_planning_it_without_that_fix(source, role):
    from migrator.project import rewrite

    planned = rewrite._plan_module(source, Options(), role, True)
    if isinstance(planned, api.Result):
        return
    for part in planned.parts:
        if not part.owner or not (part.changes or part.replacements or part.before or part.guards):
            continue
        without = Options(ignore=(part.owner,))
        dropped = planned.without(without)
        again = rewrite._plan_module(source, without, role, True)
        again = again if isinstance(again, api.Result) else again.result(without)
        if dropped is not None:
            assert dropped == again, f"dropping {part.owner} is not the same as planning without it"


def test_a_network_factory_suppressed_leaves_its_dataparallel_reported():
    from migrator.project import ModuleRole, migrate_module

    example = next(e for e in RULES_BY_CODE["DDP037"].examples if e.after is not None)
    line = next(change.line for change in migrate_module(example.before, ModuleRole(entries=("train.py",))).changes
                if change.code == "DDP037")
    lines = example.before.split("\n")
    lines[line - 1] += "  # ddp-migrate: ignore[DDP037]"
    result = migrate_module("\n".join(lines), ModuleRole(entries=("train.py",)))
    assert result.code == "\n".join(lines)
    assert "DDP140" in {d.code for d in result.diagnostics}  # planned again: the DataParallel blocks


# --------------------------------------------------------------------------- fixes whose sites stand alone

PRINTS = '''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    for epoch in range(2):
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        print(f"epoch {epoch} done")
    print("finished")


if __name__ == "__main__":
    main()
'''


def _suppressed_print(source: str) -> str:
    return source.replace('print(f"epoch {epoch} done")', 'print(f"epoch {epoch} done")  # ddp-migrate: ignore[DDP013]')


def test_a_suppressed_print_is_left_alone_and_the_others_stay_on_rank_zero(monkeypatch):
    source = _suppressed_print(PRINTS)
    calls = _count_plans(monkeypatch)
    result = migrate(source)
    assert len(calls) == 1  # the site is dropped from what was planned
    assert '\n        print(f"epoch {epoch} done")  # ddp-migrate: ignore[DDP013]\n' in result.code  # not guarded
    assert 'if is_main:\n                print(f"epoch {epoch} step' in result.code
    assert 'if is_main:\n        print("finished")' in result.code
    assert [c.line for c in result.changes if c.code == "DDP013"] == [16, 18]
    assert not result.notes  # no fix is turned off
    assert {"DDP001", "DDP003", "DDP010", "DDP011"} <= {c.code for c in result.changes}
    assert migrate(result.code).code == result.code


def test_a_suppressed_folder_is_left_alone_and_the_others_tolerate_each_other():
    source = PRINTS.replace('    torch.manual_seed(0)\n', '    torch.manual_seed(0)\n    os.makedirs("runs")\n'
                            '    os.makedirs("logs")  # ddp-migrate: ignore[DDP016]\n').replace("import torch\n", "import os\n\nimport torch\n", 1)
    result = migrate(source)
    assert 'os.makedirs("runs", exist_ok=True)' in result.code
    assert 'os.makedirs("logs")  # ddp-migrate: ignore[DDP016]' in result.code
    assert [c.code for c in result.changes].count("DDP016") == 1 and not result.notes


def _suppressed_save(source: str) -> str:
    return source.replace('    print("finished")\n', '    print("finished")\n    torch.save(model.state_dict(), "model.pt")\n'
                          '    torch.save(torch.get_rng_state(), "rng.pt")  # ddp-migrate: ignore[DDP012]\n')


def test_a_suppressed_save_is_left_alone_and_the_others_stay_on_rank_zero(monkeypatch):
    """A file each rank writes for itself (its own RNG state) is suppressed; the model's checkpoint
    is still written by rank 0 alone (the whole fix turned off would have every rank write it)."""
    source = _suppressed_save(PRINTS)
    calls = _count_plans(monkeypatch)
    result = migrate(source)
    assert len(calls) == 1
    assert 'if is_main:\n        print("finished")\n        torch.save(model.module.state_dict(), "model.pt")\n' in result.code
    assert '\n    torch.save(torch.get_rng_state(), "rng.pt")  # ddp-migrate: ignore[DDP012]\n' in result.code
    assert [c.code for c in result.changes].count("DDP012") == 1 and not result.notes
    assert migrate(result.code).code == result.code


@pytest.mark.parametrize("group", ["examples", pytest.param("fixtures", marks=pytest.mark.slow)])
def test_each_site_dropped_alone_takes_only_its_own_change(group):
    """Every site of a per-site fix in every rule example (and fixture), dropped alone: its Change
    goes, every other Change stays, and the code parses (the engine checks it)."""
    cases = [(p.values[0], p.values[1], p.values[2]) for p in (EXAMPLES if group == "examples" else FIXTURES)]
    dropped_sites = 0
    for source, options, context in cases:
        planned = api._plan(source, options, context=context)
        if isinstance(planned, api.Result):
            continue
        full = set(planned.result(options).changes)
        for site in (site for part in planned.parts for site in part.sites if site.changes):
            alone = planned.without(options, frozenset(site.changes))
            if alone is None:
                continue
            dropped_sites += 1
            assert set(alone.changes) == full - set(site.changes)
    assert dropped_sites >= (3 if group == "examples" else 100)


@pytest.mark.runtime
def test_a_suppressed_print_and_save_run_on_every_rank_under_torchrun(tmp_path):
    from runtime_probe.checks import assert_clean_exit
    from runtime_probe.harness import run_torchrun

    script = tmp_path / "train.py"
    script.write_text(migrate(_suppressed_save(_suppressed_print(PRINTS))).code)
    (tmp_path / "run").mkdir()
    report = run_torchrun(script, tmp_path / "run", label="a suppressed print and save")
    assert_clean_exit(report)
    assert sorted(report.saved_paths(0)) == ["model.pt", "rng.pt"], report.explain()
    assert report.saved_paths(1) == ["rng.pt"], report.explain()  # the suppressed save runs on every rank
    # What each rank printed, by the probe (the two ranks' lines may interleave on torchrun's stdout).
    printed = {rank: report.record(rank).get("output", {}).get("print", {}) for rank in (0, 1)}
    assert printed[1].get("lines") == 2, report.explain()  # the suppressed print, once per epoch
    assert all(sample["text"].startswith("epoch") and sample["text"].endswith("done")
               for sample in printed[1].get("samples", ())), printed[1]
    assert printed[0].get("lines") == 7, report.explain()  # 4 steps, 2 epochs done, finished
    assert report.stdout.count("epoch 1 done") == 2 and report.stdout.count("finished") == 1, report.explain()
