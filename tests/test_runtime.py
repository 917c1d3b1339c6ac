"""Runtime tests: migrated fixtures really train under `torchrun --standalone --nproc_per_node=2`.

Observed from outside the scripts by the probe in tests/runtime_probe/ (nothing in a fixture
is edited). For every training fixture:

  test_migrated_fixture_trains_under_torchrun   world size 2, DDP wrap, identical parameters
      across ranks, clean shutdown, disjoint covering DistributedSampler shards every epoch
      (evaluation loaders unsharded), reshuffled every epoch, each checkpoint written by rank 0
      only.
  test_migrated_fixture_saves_original_keys     input.py run once as a plain process saves
      the same files with the same (nested) state_dict keys; skipped when the migration
      changed nothing or fixture.toml says `original_runs_on_cpu = false`.

A fixture's support/ folder (modules the script imports, not migrated by ddp-migrate) is copied
next to the script in both runs.

A fixture.toml table `runtime_skip = {check_name = "why it cannot hold here"}` skips named
checks (the names in checks.assert_trains_correctly_under_ddp, or "same_saved_keys").

Both tests share one torchrun run per fixture. The self-tests at the bottom prove each
property can fail. Deselect with `-m "not runtime"` for the fast suite.
"""
from __future__ import annotations

import importlib.util
import json
import os
import textwrap
from pathlib import Path
from typing import Dict

import pytest

import fixture_cases
from runtime_probe.checks import (
    assert_all_ranks_recorded,
    assert_clean_exit,
    assert_ddp_wrapped,
    assert_disjoint_shards,
    assert_evaluation_whole,
    assert_identical_params,
    assert_process_group_destroyed,
    assert_rank0_output,
    assert_reshuffled_each_epoch,
    assert_same_saved_keys,
    assert_single_writer,
    assert_trains_correctly_under_ddp,
    assert_world,
)
from runtime_probe.harness import RunReport, run_single, run_torchrun

pytestmark = pytest.mark.runtime

if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
    pytest.skip("torch is not installed (pip install -e '.[test]')", allow_module_level=True)

RUNTIME_CASES = [case for case in fixture_cases.discover() if case.runs_under_torchrun]
KEYS_CHECK = "same_saved_keys"
LEGACY_LAUNCH = "legacy-launch"  # fixture.toml `kind`: written for torch.distributed.launch
SCRIPT_NAME = "train.py"  # both the original and the migrated copy, for scripts naming outputs by __file__

_TORCHRUN_REPORTS: Dict[str, RunReport] = {}


def torchrun_report(case: fixture_cases.FixtureCase, tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    """The fixture's migrated script under torchrun, run once per session for both tests."""
    if case.name not in _TORCHRUN_REPORTS:
        workdir = tmp_path_factory.mktemp(f"{case.name}-torchrun")
        _TORCHRUN_REPORTS[case.name] = run_torchrun(
            case.migrated_script, workdir, args=case.args, script_name=SCRIPT_NAME, support=case.support_dir,
            label=f"fixture {case.name}: {case.migrated_script.name} under torchrun")
    return _TORCHRUN_REPORTS[case.name]


@pytest.mark.parametrize("case", RUNTIME_CASES, ids=[case.name for case in RUNTIME_CASES])
def test_migrated_fixture_trains_under_torchrun(case: fixture_cases.FixtureCase,
                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    report = torchrun_report(case, tmp_path_factory)
    skip = {name: why for name, why in case.runtime_skip.items() if name != KEYS_CHECK}
    notes = assert_trains_correctly_under_ddp(report, nproc=2, skip=skip)
    if case.evaluation_whole:
        notes["evaluation_whole"] = assert_evaluation_whole(report)
    for name, reason in skip.items():
        notes[name] = f"skipped by fixture.toml: {reason}"
    print(f"{case.name}: torchrun run {report.duration_s:.1f}s")  # shown with -rP
    for name, note in notes.items():
        print(f"  {name}: {note}")


@pytest.mark.parametrize("case", RUNTIME_CASES, ids=[case.name for case in RUNTIME_CASES])
def test_migrated_fixture_saves_original_keys(case: fixture_cases.FixtureCase,
                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    if case.expected_path_or_none is None:
        pytest.skip("no migration: input.py is the script under test, nothing to compare with")
    if KEYS_CHECK in case.runtime_skip:
        pytest.skip(f"fixture.toml runtime_skip: {case.runtime_skip[KEYS_CHECK]}")
    if not case.original_runs_on_cpu:
        pytest.skip("fixture.toml: original_runs_on_cpu = false (the original input.py cannot run on a "
                    "CPU-only machine), so there are no original checkpoints to compare keys with")
    report = torchrun_report(case, tmp_path_factory)
    assert_clean_exit(report)
    original = original_run(case, tmp_path_factory)
    print(f"{case.name}: original run {original.duration_s:.1f}s; same_saved_keys: "
          f"{assert_same_saved_keys(report, original)}")  # shown with -rP


@pytest.mark.parametrize("case", RUNTIME_CASES, ids=[case.name for case in RUNTIME_CASES])
def test_migrated_fixture_runs_as_plain_python(case: fixture_cases.FixtureCase,
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    """`python train.py` with no torchrun environment: the migrated script trains as one process
    (a world of one) and writes the original's files with the original's keys."""
    if case.expected_path_or_none is None:
        pytest.skip("no migration: input.py is the script under test")
    if case.config.get("kind") == LEGACY_LAUNCH and not case.original_runs_on_cpu:
        pytest.skip("a torch.distributed.launch script whose own setup needs a launcher (it stays its own)")
    plain = run_single(case.migrated_script, tmp_path_factory.mktemp(f"{case.name}-plain"),
                       args=case.args, script_name=SCRIPT_NAME, support=case.support_dir,
                       label=f"fixture {case.name}: migrated script as plain `python` (no torchrun)")
    assert_clean_exit(plain)
    if KEYS_CHECK in case.runtime_skip or not case.original_runs_on_cpu:
        return  # nothing to compare with: the original cannot run on this machine
    original = original_run(case, tmp_path_factory)
    print(f"{case.name}: plain run {plain.duration_s:.1f}s; same_saved_keys: "
          f"{assert_same_saved_keys(plain, original)}")  # shown with -rP


def test_dataparallel_script_resumes_from_its_prefixed_checkpoint(tmp_path: Path) -> None:
    """fixtures/dataparallel_resume_before_half: the wrap sits below the resume, so the load runs
    on the bare model. The checkpoint the migrated script writes keeps DataParallel's `module.`
    keys, and resuming from it under torchrun works (the load drops the prefix as it reads)."""
    case = next(c for c in RUNTIME_CASES if c.name == "dataparallel_resume_before_half")
    first = run_torchrun(case.migrated_script, tmp_path, args=["--epochs", "1"], script_name=SCRIPT_NAME,
                         label="dataparallel_resume_before_half: first run")
    assert_clean_exit(first)
    saved = [save for rank in first.ranks for save in first.saves(rank)]
    summaries = json.dumps([save.get("summary") for save in saved])
    assert saved and "module.0.weight" in summaries and '"0.weight"' not in summaries, summaries
    second = run_torchrun(case.migrated_script, tmp_path, args=["--epochs", "1", "--resume", "save_temp/checkpoint.th"],
                          script_name=SCRIPT_NAME, label="dataparallel_resume_before_half: resumed")
    assert_clean_exit(second)
    assert second.stdout.count("=> resumed from epoch 1") == 1, second.stdout


def test_a_loss_with_parameters_of_its_own_is_wrapped_and_synced(tmp_path: Path) -> None:
    """fixtures/loss_module_without_parameters run with `--splits 2`: the loss now has parameters,
    so the guarded wrap wraps it; both modules are DDP, in sync, and the pickle holds bare modules
    (the fixture's own run covers the loss with none, which DDP would refuse)."""
    case = next(c for c in RUNTIME_CASES if c.name == "loss_module_without_parameters")
    report = run_torchrun(case.migrated_script, tmp_path, args=["--splits", "2"], script_name=SCRIPT_NAME,
                          label="loss_module_without_parameters: --splits 2")
    assert_trains_correctly_under_ddp(report, nproc=2)
    assert sorted(m["module_class"] for m in report.ddp_modules(0)) == ["Net", "TailLoss"], report.ddp_modules(0)


_ORIGINAL_REPORTS: Dict[str, RunReport] = {}


def original_run(case: fixture_cases.FixtureCase, tmp_path_factory: pytest.TempPathFactory) -> RunReport:
    """input.py as one plain CPU process, run once per session for the tests that compare with it."""
    if case.name not in _ORIGINAL_REPORTS:
        original = run_single(case.input_path, tmp_path_factory.mktemp(f"{case.name}-original"),
                              args=case.args, script_name=SCRIPT_NAME, support=case.support_dir,
                              label=f"fixture {case.name}: original input.py as one plain CPU process")
        if not original.ok:
            raise AssertionError(
                f"[fixture {case.name}] the original input.py failed as one plain CPU process, so its saved "
                "keys cannot be compared; if it cannot run without CUDA, set `original_runs_on_cpu = false` "
                f"in fixtures/{case.name}/fixture.toml\n{original.explain()}")
        _ORIGINAL_REPORTS[case.name] = original
    return _ORIGINAL_REPORTS[case.name]


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
    ds = TensorDataset(torch.randn(33, 4, generator=g), torch.randn(33, 1, generator=g))  # odd: padded
    sampler = DistributedSampler(ds, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    val_loader = DataLoader(TensorDataset(torch.randn(10, 4, generator=g)), batch_size=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(FORWARD(x), y).backward()
            opt.step()
        with torch.no_grad():
            for (x,) in val_loader:
                model(x)
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "epoch": 2}, "ckpt.pt")
    CRASH
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def ddp_script(tmp_path: Path, name: str, *, data_seed: str = "1", forward: str = "model",
               destroy: bool = True, crash: str = "", sampler: bool = True, set_epoch: bool = True,
               save_on_every_rank: bool = False, save_wrapper: bool = False) -> Path:
    """GOOD_DDP, or one of its broken variants."""
    text = (GOOD_DDP.replace("DATA_SEED", data_seed).replace("FORWARD", forward)
            .replace("CRASH", crash or "pass"))
    if not destroy:
        text = _edit(text, "    dist.destroy_process_group()\n", "")
    if not sampler:  # every rank iterates the whole training set
        text = _edit(text, "DataLoader(ds, batch_size=4, sampler=sampler)", "DataLoader(ds, batch_size=4, shuffle=True)")
        text = _edit(text, "    sampler = DistributedSampler(ds, shuffle=True, seed=0)\n", "")
    if not sampler or not set_epoch:
        text = _edit(text, "        sampler.set_epoch(epoch)\n", "")
    if save_on_every_rank:
        text = _edit(text, "    if rank == 0:\n        torch.save(", "    if True:\n        torch.save(")
    if save_wrapper:  # the DDP wrapper's state_dict: keys "module.weight", "module.bias"
        text = _edit(text, '"model": model.module.state_dict()', '"model": model.state_dict()')
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


# GOOD_DDP as it was before the migration: one process, no DDP, no sampler.
ORIGINAL_SINGLE = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.Linear(4, 1)
g = torch.Generator().manual_seed(1)
ds = TensorDataset(torch.randn(33, 4, generator=g), torch.randn(33, 1, generator=g))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in DataLoader(ds, batch_size=4, shuffle=True):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 2}, "ckpt.pt")
"""


def original_report(tmp_path: Path) -> RunReport:
    script = tmp_path / "original.py"
    script.write_text(textwrap.dedent(ORIGINAL_SINGLE))
    report = run_single(script, tmp_path / "original_run", label="self-test original")
    assert_clean_exit(report)
    return report


def expect_failure(check, *args, match: str) -> str:
    with pytest.raises(AssertionError) as info:
        check(*args)
    message = str(info.value)
    assert match in message, message
    return message


def test_self_correct_ddp_script_passes(tmp_path: Path) -> None:
    report = run_torchrun(ddp_script(tmp_path, "good"), tmp_path / "run")
    notes = assert_trains_correctly_under_ddp(report, nproc=2)
    assert "DataLoader #0 over TensorDataset(len=33)" in notes["disjoint_shards"], notes
    assert notes["disjoint_shards"].endswith("DataLoader #1 over TensorDataset(len=10) with SequentialSampler, "
                                             "batch_size=4: not sharded, whole dataset on every rank"), notes
    assert notes["reshuffled_each_epoch"].endswith(": reshuffled every epoch"), notes
    assert_same_saved_keys(report, original_report(tmp_path))

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
        assert [it["batches"] for it in iterations] == [5, 5]
        assert all(it["shard"] == it["indices"] for it in iterations)  # the sampler's whole yield
        val = report.loader_iterations(rank, loader=1)
        assert [it["indices"] for it in val] == [list(range(10))] * 2  # unsharded: every rank sees all
        assert report.loaders(rank)[1]["sampler_index"] is None
    for epoch in (0, 1):
        shard0 = report.loader_iterations(0)[epoch]["indices"]
        shard1 = report.loader_iterations(1)[epoch]["indices"]
        # 33 samples over 2 ranks: 17 each, the 34th repeats the permutation's first index
        assert len(shard0) == len(shard1) == 17
        assert set(shard0) | set(shard1) == set(range(33)) and set(shard0) & set(shard1) == {shard0[0]}
    assert report.loader_iterations(0)[0]["indices"] != report.loader_iterations(0)[1]["indices"]


def test_self_training_loader_without_distributed_sampler_is_detected(tmp_path: Path) -> None:
    report = run_torchrun(ddp_script(tmp_path, "no_sampler", sampler=False), tmp_path / "run")
    assert_trains_correctly_under_ddp(report, skip={"disjoint_shards"})
    message = expect_failure(assert_disjoint_shards, report, match="the training data is not sharded")
    assert message.startswith("DataLoader #0 over TensorDataset(len=33) with RandomSampler, batch_size=4 "
                              "feeds training (18 optimizer steps on its batches on rank 0) but has no "
                              "DistributedSampler"), message
    assert "in pass 0 rank 0 drew 33 distinct of 33 samples, and ranks [0, 1] share 33 of them" in message


def test_self_sampler_on_the_evaluation_loader_only_is_detected(tmp_path: Path) -> None:
    # The migration sharded the wrong loader: the evaluation loader got the DistributedSampler.
    script = ddp_script(tmp_path, "wrong_loader", sampler=False)
    text = _edit(script.read_text(), "DataLoader(TensorDataset(torch.randn(10, 4, generator=g)), batch_size=4)",
                 "DataLoader(TensorDataset(torch.randn(10, 4, generator=g)), batch_size=4, "
                 "sampler=DistributedSampler(TensorDataset(torch.randn(10, 4)), shuffle=False))")
    script.write_text(text)
    report = run_torchrun(script, tmp_path / "run")
    assert_clean_exit(report)
    expect_failure(assert_disjoint_shards, report,
                   match="with RandomSampler, batch_size=4 feeds training (18 optimizer steps")


def test_self_sharded_evaluation_loader_is_detected(tmp_path: Path) -> None:
    # Both loaders got a DistributedSampler: the evaluation scores a different half on each rank.
    script = ddp_script(tmp_path, "sharded_eval")
    text = _edit(script.read_text(), "DataLoader(TensorDataset(torch.randn(10, 4, generator=g)), batch_size=4)",
                 "DataLoader(TensorDataset(torch.randn(10, 4, generator=g)), batch_size=4, "
                 "sampler=DistributedSampler(TensorDataset(torch.randn(10, 4)), shuffle=False))")
    script.write_text(text)
    report = run_torchrun(script, tmp_path / "run")
    assert_trains_correctly_under_ddp(report)  # shards, reshuffling and the rest do not see it
    message = expect_failure(assert_evaluation_whole, report, match="feeds no training")
    assert "DataLoader #1 over TensorDataset(len=10) with DistributedSampler(shuffle=False" in message, message
    assert "this rank evaluated 5 of 10 samples" in message, message
    assert assert_evaluation_whole(run_torchrun(ddp_script(tmp_path, "good"), tmp_path / "good")).endswith(
        "every sharded loader feeds training")


def test_self_split_drawn_apart_on_each_rank_is_detected(tmp_path: Path) -> None:
    # Each rank holds out its own 3 samples (a split drawn from a generator seeded apart): the
    # sampler's shards of the Subset's indices are disjoint, but the samples behind them are not.
    script = ddp_script(tmp_path, "split_apart")
    script.write_text(_edit(script.read_text(), "    sampler = DistributedSampler(ds, shuffle=True, seed=0)\n",
                            "    order = torch.randperm(33, generator=torch.Generator().manual_seed(rank)).tolist()\n"
                            "    ds = torch.utils.data.Subset(ds, order[3:])\n"
                            "    sampler = DistributedSampler(ds, shuffle=True, seed=0)\n"))
    report = run_torchrun(script, tmp_path / "run")
    assert_trains_correctly_under_ddp(report, skip={"disjoint_shards"})
    message = expect_failure(assert_disjoint_shards, report, match="the ranks' Subsets pick different samples")
    assert message.startswith("DataLoader #0 over Subset(len=30) with DistributedSampler, batch_size=4, a Subset of "
                              "TensorDataset(len=33): the ranks' Subsets pick different samples of the dataset "
                              "(rank 0: 30, rank 1: 30; "), message


def test_self_missing_set_epoch_is_detected(tmp_path: Path) -> None:
    report = run_torchrun(ddp_script(tmp_path, "no_set_epoch", set_epoch=False), tmp_path / "run")
    assert_trains_correctly_under_ddp(report, skip={"reshuffled_each_epoch"})
    message = expect_failure(assert_reshuffled_each_epoch, report, match="set_epoch was never called")
    assert "on rank 0: all 2 passes ran with sampler epoch 0, so every pass drew the same order" in message


def test_self_checkpoint_written_by_every_rank_is_detected(tmp_path: Path) -> None:
    report = run_torchrun(ddp_script(tmp_path, "save_everywhere", save_on_every_rank=True), tmp_path / "run")
    assert_trains_correctly_under_ddp(report, skip={"single_writer"})
    expect_failure(assert_single_writer, report,
                   match="'ckpt.pt' is written by rank(s) [0, 1] (rank 0: 1 call(s), rank 1: 1 call(s))")


def test_self_output_on_every_rank_is_detected(tmp_path: Path) -> None:
    report = run_torchrun(ddp_script(tmp_path, "print_everywhere", crash='print(f"done on rank {rank}")'),
                          tmp_path / "run")
    assert_trains_correctly_under_ddp(report, skip={"rank0_output"})
    expect_failure(assert_rank0_output, report, match="rank 1: 1 printed line(s), 0 tqdm update(s), e.g. ")


def test_self_wrapper_state_dict_keys_are_detected(tmp_path: Path) -> None:
    migrated = run_torchrun(ddp_script(tmp_path, "save_wrapper", save_wrapper=True), tmp_path / "run",
                            label="self-test save_wrapper")
    assert_trains_correctly_under_ddp(migrated)
    message = expect_failure(assert_same_saved_keys, migrated, original_report(tmp_path),
                             match="'ckpt.pt' holds different keys than the original's")
    assert message.startswith("[self-test save_wrapper] "), message
    assert ("'ckpt.pt'['model']: keys only in the migrated save ['module.bias', 'module.weight'] (2), "
            "only in the original's ['bias', 'weight'] (2)") in message, message


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
# a DistributedSampler (explicit replicas: no process group) with interleaved passes, as in
# step-based loops that evaluate on the training loader: each pass keeps its own shard
from torch.utils.data.distributed import DistributedSampler
sharded = DataLoader(ds, batch_size=2, sampler=DistributedSampler(ds, num_replicas=2, rank=0, seed=3))
outer = iter(sharded)
for x, y in sharded:
    break
next(outer)
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
    outer, inner = report.loader_iterations(0, loader=2)  # pass 0 drew its first batch last
    assert outer["shard"] == inner["shard"] and len(outer["shard"]) == 5
    assert outer["indices"] == inner["indices"] == outer["shard"][:2]
    assert report.record(0)["probe_errors"] == []


def test_self_support_modules_are_copied_next_to_the_script(tmp_path: Path) -> None:
    """`support=`: a sibling module the script imports is importable in both kinds of run."""
    support = tmp_path / "support"
    (support / "pkg").mkdir(parents=True)
    (support / "helpers.py").write_text("import torch\n\ndef save(m):\n    torch.save(m.state_dict(), 'm.pt')\n")
    (support / "pkg" / "__init__.py").write_text("SIZE = 3\n")
    script = tmp_path / "uses_support.py"
    script.write_text("import torch\nfrom helpers import save\nfrom pkg import SIZE\n\n"
                      "save(torch.nn.Linear(SIZE, 1))\n")
    report = run_single(script, tmp_path / "run", support=support)
    assert_clean_exit(report)
    assert report.saved_paths() == ["m.pt"], report.explain()
    assert (tmp_path / "run" / "pkg" / "__init__.py").exists()
    assert not run_single(script, tmp_path / "bare").ok  # without support= the import fails


def test_a_branch_whose_loader_keeps_its_own_sampler_still_runs(tmp_path: Path) -> None:
    """fixtures/loaders_built_per_branch: the samplers exist on the other branches only, so the
    epoch loop asks the loader before setting its epoch; the branch with its own sampler
    placeholder (reported, left unsharded) runs as one process (it died with UnboundLocalError)."""
    case = next(c for c in fixture_cases.discover() if c.name == "loaders_built_per_branch")
    plain = run_single(case.migrated_script, tmp_path, args=["--dataset", "large"], script_name=SCRIPT_NAME,
                       label="fixture loaders_built_per_branch: the branch with its own sampler, plain `python`")
    assert_clean_exit(plain)


def test_a_name_that_may_hold_the_wrapped_model_or_a_plain_one_runs_either_way(tmp_path: Path) -> None:
    """fixtures/method_through_wrapper: with --average the helper is handed the plain averaged copy
    instead of the wrapped model (the other arch, too); the run under torchrun exercises the
    other side of the `isinstance(net, DDP)` unwraps (the default run the wrapped one). It died
    with AttributeError: 'LinearDecoder' object has no attribute 'module'."""
    case = next(c for c in fixture_cases.discover() if c.name == "method_through_wrapper")
    report = run_torchrun(case.migrated_script, tmp_path, args=["--average", "--arch", "linear"], script_name=SCRIPT_NAME,
                          label="fixture method_through_wrapper: --average --arch linear under torchrun")
    assert_clean_exit(report)
    assert_world(report, nproc=2)
