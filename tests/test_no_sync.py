"""DDP022: the micro-batches of a gradient-accumulation loop that do not step run under
model.no_sync(). Shapes it takes and leaves (to DDP122), and, at run time, that the gradients are
all-reduced once per optimizer step and the training is the same as with an all-reduce per pass.
"""
from __future__ import annotations

import importlib.util
import os

import pytest

from migrator import migrate
from migrator.rules.no_sync import RULE

SCRIPT = RULE.examples[0].before


def _codes(result):
    return {c.code for c in result.changes}, {d.code for d in result.diagnostics}


def test_plain_accumulation_runs_under_no_sync():
    result = migrate(SCRIPT)
    assert "DDP022" in _codes(result)[0] and "DDP122" not in _codes(result)[1]
    assert "with model.no_sync() if (i + 1) % ACCUMULATE != 0 else contextlib.nullcontext():" in result.code
    assert "import contextlib" in result.code


def test_a_counter_moved_before_the_test_is_reported_not_rewritten():
    source = SCRIPT.replace("        for i, (x, y) in enumerate(loader):\n", "        i = -1\n        for x, y in loader:\n")
    source = source.replace("            loss.backward()\n", "            loss.backward()\n            i += 1\n")
    result = migrate(source)
    assert "no_sync" not in result.code
    assert "DDP122" in _codes(result)[1]


def test_a_condition_other_than_equality_is_negated_whole():
    source = SCRIPT.replace("if (i + 1) % ACCUMULATE == 0:", "if not (i + 1) % ACCUMULATE:")
    assert "with model.no_sync() if not (not (i + 1) % ACCUMULATE) else contextlib.nullcontext():" in migrate(source).code


def test_a_loop_that_calls_the_model_by_another_name_is_left():
    source = SCRIPT.replace("model(x)", "net(x)").replace("    for epoch in range(2):", "    net = model\n    for epoch in range(2):")
    result = migrate(source)
    assert "no_sync" not in result.code


def test_an_optimizer_stepped_under_another_name_is_still_an_accumulation():
    # The optimizer is the binding its step reads, not its spelling: handed to a helper as `opt`,
    # its conditional step still makes the other micro-batches accumulate (they all-reduce otherwise).
    source = SCRIPT.replace("    for epoch in range(2):\n", "    for epoch in range(2):\n        run_epoch(model, loader, optimizer)\n\n\ndef run_epoch(model, loader, opt):\n    if True:\n")
    source = source.replace("optimizer.step()\n                optimizer.zero_grad()", "opt.step()\n                opt.zero_grad()")
    assert "def run_epoch(model, loader, opt):" in source and "opt.step()" in source
    changes, diagnostics = _codes(migrate(source))
    assert "DDP022" in changes or "DDP122" in diagnostics
    spelled = source.replace("opt.step()", "other.step()")  # a name no optimizer reaches: no accumulation
    changes, diagnostics = _codes(migrate(spelled))
    assert "DDP022" not in changes and "DDP122" not in diagnostics


# --------------------------------------------------------------------------- runtime

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None and not os.environ.get("CI"),
                                 reason="torch is not installed")


@needs_torch
@pytest.mark.runtime
def test_one_all_reduce_per_optimizer_step_and_the_same_training(tmp_path):
    from runtime_probe.checks import assert_clean_exit, assert_identical_params
    from runtime_probe.harness import run_torchrun

    migrated = migrate(SCRIPT).code
    # The same migration with an all-reduce at every backward pass, for comparison.
    every_pass = migrated.replace("model.no_sync() if (i + 1) % ACCUMULATE != 0 else contextlib.nullcontext()",
                                  "contextlib.nullcontext()")
    assert every_pass != migrated
    seeded = "def main():\n    torch.manual_seed(0)\n"
    final = ("                optimizer.zero_grad()\n"
             "    if dist.get_rank() == 0:\n"
             "        torch.save(model.module.state_dict(), 'final.pt')\n")
    runs = {}
    for name, code in (("no_sync", migrated), ("every_pass", every_pass)):
        script = tmp_path / f"{name}.py"
        code = code.replace("def main():\n", seeded, 1).replace("                optimizer.zero_grad()\n", final, 1)
        script.write_text(code)
        report = run_torchrun(script, tmp_path / name, env={"DDP_PROBE_COUNT_SYNCS": "1"}, label=f"accumulation, {name}")
        assert_clean_exit(report)
        assert_identical_params(report)
        runs[name] = report
    for rank in runs["no_sync"].ranks:
        steps = runs["no_sync"].records[rank]["optimizer_steps"]
        micro_batches = sum(it["batches"] for it in runs["no_sync"].loaders(rank)[0]["iterations"])
        assert steps == micro_batches // 4 and steps > 0
        assert runs["no_sync"].ddp_modules(rank)[0]["syncs"] == steps  # one bucket all-reduced per step
        assert runs["every_pass"].ddp_modules(rank)[0]["syncs"] == micro_batches  # ... instead of one per pass
    # The same gradients reach the optimizer: the trained parameters agree (up to summation order).
    import torch

    with_no_sync = torch.load(tmp_path / "no_sync" / "final.pt")
    without = torch.load(tmp_path / "every_pass" / "final.pt")
    assert with_no_sync.keys() == without.keys()
    for key in without:
        assert torch.allclose(with_no_sync[key], without[key], atol=1e-6), key


def test_the_condition_is_written_as_the_other_rules_left_it():
    """YOLOv3: `if batches_done % model.hyperparams['subdivisions'] == 0:`; the model's own attribute
    goes through `.module` (DDP015) in the `with` header as in the `if`."""
    source = SCRIPT.replace("(i + 1) % ACCUMULATE == 0", "(i + 1) % model.accumulate == 0").replace(
        "    model = torch.nn.Linear(4, 1)\n", "    model = torch.nn.Linear(4, 1)\n    model.accumulate = 4\n")
    code = migrate(source).code
    assert "with model.no_sync() if (i + 1) % model.module.accumulate != 0 else contextlib.nullcontext():" in code
    assert "if (i + 1) % model.module.accumulate == 0:" in code
