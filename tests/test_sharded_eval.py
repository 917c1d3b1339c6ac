"""--eval sharded (DDP023): evaluation loaders split over the ranks, metric sums all-reduced.

The runtime test proves the property: the migrated script under torchrun x2 computes the same
validation loss and accuracy as the original single process, to 1e-6, on a validation set whose
size the world does not divide (a DistributedSampler would have padded it with repeats), while
each rank reads a disjoint part of it.
"""
from __future__ import annotations

import importlib.util
import json
import os

import pytest

from migrator import migrate
from migrator.options import Options
from migrator.rules.sharded_eval import RULE

SCRIPT = RULE.examples[0].before  # the rule's own `--eval sharded` example (migrator.rules.sharded_eval)


def test_replicated_by_default():
    assert "sampler=range(" not in migrate(SCRIPT).code


def test_sharded_evaluation_splits_the_loader_and_reduces_the_sums():
    result = migrate(SCRIPT, Options(eval="sharded"))
    code = result.code
    assert "val_loader = DataLoader(val_set, batch_size=8, sampler=range(dist.get_rank(), len(val_set), dist.get_world_size()))" in code
    assert "reduced = torch.tensor([float(total_loss), float(correct), float(seen)], dtype=torch.float64)" in code
    assert "dist.all_reduce(reduced)" in code
    assert "DDP023" in {c.code for c in result.changes}
    assert migrate(code, Options(eval="sharded")).code == code


def test_a_data_set_built_in_the_call_is_built_once_before_the_loader():
    """`DataLoader(make_set(72), batch_size=36)`: sharded like the training loaders (fixture
    eval_sharded_inline_dataset runs it under torchrun)."""
    source = SCRIPT.replace("    val_loader = DataLoader(val_set, batch_size=8)",
                            "    val_loader = DataLoader(TensorDataset(val_set.tensors[0], val_set.tensors[1]), batch_size=8)")
    assert source != SCRIPT
    code = migrate(source, Options(eval="sharded")).code
    assert "    val_dataset = TensorDataset(val_set.tensors[0], val_set.tensors[1])\n" in code
    assert "val_loader = DataLoader(val_dataset, batch_size=8, sampler=range(dist.get_rank(), len(val_dataset), dist.get_world_size()))" in code
    assert migrate(code, Options(eval="sharded")).code == code


@pytest.mark.parametrize("change, why", [
    ("            correct += (out.argmax(dim=1) == y).sum().item()\n",
     "            correct += (out.argmax(dim=1) == y).sum().item()\n            outputs.append(out)\n"),
    ("    with torch.no_grad():\n", "    if True:\n"),
    ("correct += (out.argmax(dim=1) == y).sum().item()", "correct += (out.argmax(dim=1) == y).sum()"),
], ids=["keeps-outputs", "no-no-grad", "tensor-sum"])
def test_shapes_it_leaves_whole_and_reports(change, why):
    assert change in SCRIPT
    source = SCRIPT.replace(change, why).replace("    seen = 0\n", "    seen = 0\n    outputs = []\n")
    result = migrate(source, Options(eval="sharded"))
    assert "sampler=range(" not in result.code
    assert any(d.code == "DDP023" and "left whole" in d.message for d in result.diagnostics)


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None and not os.environ.get("CI"),
                                 reason="torch is not installed")


@needs_torch
@pytest.mark.runtime
def test_sharded_metric_equals_the_single_process_one(tmp_path):
    from runtime_probe.checks import assert_clean_exit
    from runtime_probe.harness import run_single, run_torchrun

    original_script = tmp_path / "original.py"
    original_script.write_text(SCRIPT)
    migrated_script = tmp_path / "migrated.py"
    migrated_script.write_text(migrate(SCRIPT, Options(eval="sharded")).code)
    original = run_single(original_script, tmp_path / "single", script_name="train.py", label="original, one process")
    sharded = run_torchrun(migrated_script, tmp_path / "torchrun", script_name="train.py", label="--eval sharded, torchrun x2")
    assert_clean_exit(original)
    assert_clean_exit(sharded)
    before = json.loads((tmp_path / "single" / "metrics.json").read_text())
    after = json.loads((tmp_path / "torchrun" / "metrics.json").read_text())
    assert after["loss"] == pytest.approx(before["loss"], rel=1e-6, abs=1e-9)
    assert after["accuracy"] == pytest.approx(before["accuracy"], rel=1e-6, abs=1e-9)
    # Each rank read its own part of the 37 validation samples: 19 and 18, no sample twice.
    parts = []
    for rank in sharded.ranks:
        validation = [loader for loader in sharded.loaders(rank) if loader.get("dataset_len") == 37][0]
        parts.append(validation["sampler_len"])
    assert sorted(parts) == [18, 19]
