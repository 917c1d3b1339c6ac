"""Runtime tests: migrated fixtures really train under `torchrun --standalone --nproc_per_node=2`.

Observed from outside the scripts by the probe in tests/runtime_probe/ (nothing in a fixture
is edited). The self-tests at the bottom prove each property can fail.
Deselect with `-m "not runtime"` for the fast suite.
"""
from __future__ import annotations

import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

import fixture_cases
from runtime_probe.checks import (
    assert_all_ranks_recorded,
    assert_clean_exit,
    assert_ddp_wrapped,
    assert_identical_params,
    assert_process_group_destroyed,
    assert_trains_correctly_under_ddp,
    assert_world,
)
from runtime_probe.harness import run_single, run_torchrun

pytestmark = pytest.mark.runtime

if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
    pytest.skip("torch is not installed (pip install -e '.[test]')", allow_module_level=True)

RUNTIME_CASES = [case for case in fixture_cases.discover() if case.runs_under_torchrun]


@pytest.mark.parametrize("case", RUNTIME_CASES, ids=[case.name for case in RUNTIME_CASES])
def test_migrated_fixture_trains_under_torchrun(case: fixture_cases.FixtureCase, tmp_path: Path) -> None:
    report = run_torchrun(case.migrated_script, tmp_path / "run", args=case.args)
    assert_trains_correctly_under_ddp(report, nproc=2)


# --------------------------------------------------------------------------------------
# Harness self-tests: small scripts written here, each run a few seconds.
# --------------------------------------------------------------------------------------

GOOD_DDP = """
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    g = torch.Generator().manual_seed(DATA_SEED)
    ds = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
    sampler = DistributedSampler(ds, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(FORWARD(x), y).backward()
            opt.step()
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "epoch": 2}, "ckpt.pt")
    CRASH
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def ddp_script(tmp_path: Path, name: str, *, data_seed: str = "1", forward: str = "model",
               destroy: bool = True, crash: str = "") -> Path:
    text = (GOOD_DDP.replace("DATA_SEED", data_seed).replace("FORWARD", forward)
            .replace("CRASH", crash or "pass"))
    if not destroy:
        text = text.replace("    dist.destroy_process_group()\n", "")
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def expect_failure(check, *args, match: str) -> str:
    with pytest.raises(AssertionError) as info:
        check(*args)
    message = str(info.value)
    assert match in message, message
    return message


def test_self_correct_ddp_script_passes(tmp_path: Path) -> None:
    report = run_torchrun(ddp_script(tmp_path, "good"), tmp_path / "run")
    assert_trains_correctly_under_ddp(report, nproc=2)

    # Records the next checks build on: checkpoints, sampler shards, set_epoch.
    assert report.saved_paths(0) == ["ckpt.pt"] and report.saved_paths(1) == [], report.explain()
    (save,) = report.saves(0)
    assert save["rank"] == 0
    assert save["nested_state_dict_keys"] == {"model": ["weight", "bias"]}
    assert save["nested_optimizer_state_dicts"] == ["optimizer"]
    assert (tmp_path / "run" / "ckpt.pt").exists()
    for rank in (0, 1):
        assert [c["epoch"] for c in report.set_epoch_calls(rank)] == [0, 1]
        (sampler,) = report.record(rank)["samplers"]
        assert (sampler["num_replicas"], sampler["rank"]) == (2, rank)
        iterations = report.loader_iterations(rank)
        assert [it["epoch"] for it in iterations] == [0, 1]
        assert [it["batches"] for it in iterations] == [4, 4]
    for epoch in (0, 1):
        shard0 = report.loader_iterations(0)[epoch]["indices"]
        shard1 = report.loader_iterations(1)[epoch]["indices"]
        assert not set(shard0) & set(shard1) and sorted(shard0 + shard1) == list(range(32))
    assert report.loader_iterations(0)[0]["indices"] != report.loader_iterations(0)[1]["indices"]


def test_self_missing_destroy_process_group_is_detected(tmp_path: Path) -> None:
    report = run_torchrun(ddp_script(tmp_path, "no_destroy", destroy=False), tmp_path / "run")
    assert_trains_correctly_under_ddp(report, skip={"process_group_destroyed"})
    expect_failure(assert_process_group_destroyed, report, match="still initialised")


UNWRAPPED = """
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group(backend="gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Linear(4, 1)
g = torch.Generator().manual_seed(100 + rank)  # each rank sees different data
ds = TensorDataset(torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(ds, batch_size=8):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
dist.destroy_process_group()
"""


def test_self_training_without_ddp_is_detected(tmp_path: Path) -> None:
    script = tmp_path / "unwrapped.py"
    script.write_text(textwrap.dedent(UNWRAPPED))
    report = run_torchrun(script, tmp_path / "run")
    assert_clean_exit(report)
    assert_all_ranks_recorded(report)
    assert_world(report)
    expect_failure(assert_ddp_wrapped, report, match="constructed no DistributedDataParallel")
    expect_failure(assert_trains_correctly_under_ddp, report, match="constructed no DistributedDataParallel")
    # The divergence is visible to the probe (via the optimizer's parameters).
    checksums = {report.record(r)["optimizers"][0]["param_checksum"] for r in (0, 1)}
    assert len(checksums) == 2, report.explain()


def test_self_unsynchronised_gradients_are_detected(tmp_path: Path) -> None:
    # Wrapped, but the forward bypasses DDP (model.module) so no all-reduce happens, and
    # each rank draws different data: the parameters drift apart.
    script = ddp_script(tmp_path, "bypass", data_seed="100 + rank", forward="model.module")
    report = run_torchrun(script, tmp_path / "run")
    assert_clean_exit(report)
    assert_ddp_wrapped(report)
    assert_process_group_destroyed(report)
    message = expect_failure(assert_identical_params, report, match="parameters differ")
    assert "weight" in message and "bias" in message


def test_self_crash_on_one_rank_fails_with_its_stderr(tmp_path: Path) -> None:
    crash = 'if rank == 1:\n        raise RuntimeError("boom on rank 1")\n    dist.barrier()'
    report = run_torchrun(ddp_script(tmp_path, "crash", crash=crash), tmp_path / "run", timeout=90)
    assert not report.timed_out, report.explain()
    assert report.returncode not in (0, None)
    message = expect_failure(assert_trains_correctly_under_ddp, report, match="exited with code")
    assert 'raise RuntimeError("boom on rank 1")' in message  # the worker's traceback, from stderr


SINGLE = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
ds = TensorDataset(torch.randn(10, 4), torch.randn(10, 1))
for x, y in DataLoader(ds, batch_size=5, shuffle=True):
    model(x)
# worker processes, reused across epochs: indices are still recorded once per pass
loader = DataLoader(ds, batch_size=4, num_workers=1, persistent_workers=True)
for epoch in range(2):
    for x, y in loader:
        model(x)
torch.save(model.state_dict(), "model.pt")
"""


def test_self_single_process_run_is_recorded(tmp_path: Path) -> None:
    script = tmp_path / "single.py"
    script.write_text(textwrap.dedent(SINGLE))
    report = run_single(script, tmp_path / "run")
    assert_clean_exit(report)
    assert report.ranks == [0]
    record = report.record(0)
    assert record["mode"] == "single" and record["init_process_group"] == []
    (save,) = report.saves(0)
    assert save["state_dict_keys"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert save["rank"] is None and report.saved_paths() == ["model.pt"]
    (iteration,) = report.loader_iterations(0, loader=0)
    assert sorted(iteration["indices"]) == list(range(10)) and iteration["batches"] == 2
    persistent = report.loader_iterations(0, loader=1)
    assert [it["indices"] for it in persistent] == [list(range(10))] * 2
    assert [it["batches"] for it in persistent] == [3, 3]
    assert report.record(0)["probe_errors"] == []
