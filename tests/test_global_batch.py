"""--batch global|per-process (DDP019, DDP120): what a sharded training loader's batch_size means.

The runtime tests prove the property on a migrated DataParallel fixture: under torchrun x2 the
ranks' training loaders load half the original batch each (the global batch is the original
one), every rank takes as many steps per epoch as ranks x steps = the original's steps, and a world
the batch does not divide into stops at start-up with the numbers.
"""
from __future__ import annotations

import importlib.util
import os

import pytest
from click.testing import CliRunner

import fixture_cases
from migrator import migrate
from migrator.cli import cli
from migrator.options import Options
from migrator.rules.global_batch import RULE

# The rule's own example (a DataParallel script), and the same script on one GPU.
DATAPARALLEL = RULE.examples[0].before
SINGLE = DATAPARALLEL.replace("model = torch.nn.DataParallel(torch.nn.Linear(4, 1))", "model = torch.nn.Linear(4, 1)")


def _codes(result):
    return {c.code for c in result.changes}, {d.code: d.message for d in result.diagnostics}


def test_single_gpu_script_keeps_the_batch_per_process_by_default():
    changes, diagnostics = _codes(migrate(SINGLE))
    assert "DDP019" not in changes
    assert "the default for a single-GPU script" in diagnostics["DDP120"]


def test_dataparallel_script_keeps_the_global_batch_by_default():
    result = migrate(DATAPARALLEL)
    changes, diagnostics = _codes(result)
    assert "DDP019" in changes and "DDP120" not in diagnostics
    assert "batch_size=max(1, batch_size // dist.get_world_size())" in result.code
    assert "if batch_size % dist.get_world_size() and dist.get_rank() == 0:" in result.code
    assert "SystemExit" not in result.code  # never refused
    message = next(c.message for c in result.changes if c.code == "DDP019")
    assert "the default for a DataParallel script" in message


def test_the_option_wins_over_the_default():
    per_process = migrate(DATAPARALLEL, Options(batch="per-process"))
    assert "DataParallel split this batch" in _codes(per_process)[1]["DDP120"]
    assert "// dist.get_world_size()" not in per_process.code
    split = migrate(SINGLE, Options(batch="global"))
    assert "DDP019" in _codes(split)[0]
    assert "--batch global" in next(c.message for c in split.changes if c.code == "DDP019")


def test_a_batch_size_computed_inline_is_reported_not_split():
    result = migrate(DATAPARALLEL.replace("batch_size=batch_size,", "batch_size=batch_size * 2,"))
    changes, diagnostics = _codes(result)
    assert "DDP019" not in changes
    assert "could not split" in diagnostics["DDP120"] and "`batch_size * 2`" in diagnostics["DDP120"]


def test_a_batch_size_in_a_kwargs_dict_is_split_in_the_call():
    source = SINGLE.replace(
        "    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=batch_size, shuffle=True)\n",
        "    train_kwargs = {'batch_size': batch_size, 'shuffle': True}\n"
        "    loader = DataLoader(TensorDataset(torch.randn(64, 4)), **train_kwargs)\n",
    )
    result = migrate(source, Options(batch="global"))
    assert '**{**train_kwargs, "batch_size": max(1, train_kwargs.get("batch_size", 1) // dist.get_world_size())}' in result.code
    assert 'if train_kwargs.get("batch_size", 1) % dist.get_world_size() and dist.get_rank() == 0:' in result.code
    compile(result.code, "train.py", "exec")


def test_config_and_command_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-migrate]\nbatch = "global"\n')
    script = tmp_path / "train.py"
    script.write_text(SINGLE)
    runner = CliRunner()
    assert "// dist.get_world_size()" in runner.invoke(cli, [str(script)]).output
    assert "// dist.get_world_size()" not in runner.invoke(cli, [str(script), "--batch", "per-process"]).output
    (tmp_path / "pyproject.toml").write_text('[tool.ddp-migrate]\nbatch = "globl"\n')
    bad = runner.invoke(cli, [str(script)])
    assert bad.exit_code == 2
    assert "batch must be one of 'global', 'per-process', not 'globl'" in bad.output
    assert "Traceback" not in bad.output


# --------------------------------------------------------------------------- runtime

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None and not os.environ.get("CI"),
                                 reason="torch is not installed")


@needs_torch
@pytest.mark.runtime
def test_global_batch_is_the_original_batch_under_torchrun(tmp_path):
    from runtime_probe.harness import run_single, run_torchrun
    from runtime_probe.checks import assert_clean_exit

    case = next(c for c in fixture_cases.discover() if c.name == "dataparallel_nn_alias")
    original = run_single(case.input_path, tmp_path / "original", args=case.args, script_name="train.py",
                          label="dataparallel_nn_alias input.py, one process")
    migrated = run_torchrun(case.expected_path, tmp_path / "torchrun", args=case.args, script_name="train.py",
                            label="dataparallel_nn_alias expected.py under torchrun x2")
    assert_clean_exit(original)
    assert_clean_exit(migrated)
    before = original.loaders(0)[0]
    sharded = [next(l for l in migrated.loaders(rank) if migrated.sampler(rank, l) is not None) for rank in migrated.ranks]
    assert sum(loader["batch_size"] for loader in sharded) == before["batch_size"], (before, sharded)
    steps_before = sum(it["batches"] for it in before["iterations"])
    for loader in sharded:  # every rank takes the original's number of steps: the same optimisation
        assert sum(it["batches"] for it in loader["iterations"]) == steps_before


@needs_torch
@pytest.mark.runtime
def test_a_batch_the_world_does_not_divide_rounds_down_and_says_so_once(tmp_path):
    """128 on 3 GPUs must not refuse to start: each rank loads 10 // 3 = 3, every rank takes the
    same number of steps, and only rank 0 says what the global batch became."""
    from runtime_probe.harness import run_torchrun
    from runtime_probe.checks import assert_clean_exit

    case = next(c for c in fixture_cases.discover() if c.name == "dataparallel_nn_alias")
    report = run_torchrun(case.expected_path, tmp_path, args=[*case.args, "--batch-size", "10"], nproc=3,
                          script_name="train.py", label="batch 10 over 3 processes")
    assert_clean_exit(report)
    output = report.stderr + report.stdout
    assert output.count("batch size 10 does not split evenly over 3 processes: each loads 3, a global batch of 9") == 1, output
    sharded = [next(l for l in report.loaders(rank) if report.sampler(rank, l) is not None) for rank in report.ranks]
    assert [loader["batch_size"] for loader in sharded] == [3, 3, 3]
    steps = {sum(it["batches"] for it in loader["iterations"]) for loader in sharded}
    assert len(steps) == 1, steps
