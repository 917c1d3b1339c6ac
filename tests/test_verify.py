"""`ddp-migrate verify` without torchrun: its command line, its checks on made-up records (each
shown to pass and to fail), its report, table and JSON, the probe's watch on a script without
torch, and how it is packaged. The real runs are in test_verify_runtime.py.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from io import StringIO
from pathlib import Path
from typing import Dict, List

import pytest
from click.testing import CliRunner

from migrator import cli as cli_module
from migrator import render
from migrator.verify import checks, keys, stacks
from migrator.verify.checks import Observed
from migrator.verify.probe import PROBE_DIR
from migrator.verify.report import Report, build, traceback_tail
from migrator.verify.runner import Plan, Run, probe_env, torchrun_command

ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the command line


def _main(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`ddp-migrate ARGS` in a fresh interpreter (the console script's main)."""
    return subprocess.run([sys.executable, "-c", "from migrator.cli import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=120)


def test_the_main_help_names_the_verify_subcommand(tmp_path):
    result = _main("--help", cwd=tmp_path)
    assert result.returncode == 0
    assert "ddp-migrate verify SCRIPT run a migrated script briefly under torchrun and check it" in " ".join(
        result.stdout.split())


def test_verify_help_says_how_the_run_is_kept_short(tmp_path):
    result = _main("verify", "--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("Usage: ddp-migrate verify [OPTIONS] SCRIPT")
    text = " ".join(result.stdout.split())
    for words in ("ends after K batches", "When pass E+1 would start", "`except Exception` does not catch",
                  "`finally` blocks (destroy_process_group) run", "simply ends", "Exit status: 0"):
        assert words in text, words


@pytest.mark.parametrize("args, message", [
    (("missing.py",), "SCRIPT missing.py: no such file"),
    (("train.py", "--nproc", "0"), "--nproc must be 1 or more, not 0"),
    (("train.py", "--nproc", "two"), "'two' is not a valid integer"),  # click's words, on one line
    (("train.py", "--steps-per-epoch", "0"), "--steps-per-epoch must be 1 or more, not 0"),
    (("train.py", "--epochs", "-1"), "--epochs must be 1 or more, not -1"),
    (("train.py", "--timeout", "0"), "--timeout must be more than 0 seconds, not 0"),
    (("train.py", "--original", "gone.py"), "--original gone.py: no such file"),
    (("train.py", "--python", "/no/such/python"), "--python /no/such/python: no such interpreter"),
    (("train.py", "--device", "tpu"), "'tpu' is not one of 'cpu', 'cuda'"),
    (("train.py", "--no-such-flag"), "--no-such-flag"),
], ids=["missing-script", "nproc-0", "nproc-word", "steps-0", "epochs-negative", "timeout-0", "missing-original",
        "missing-python", "bad-device", "unknown-flag"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "train.py").write_text("print('never run')\n")
    result = _main("verify", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddp-migrate verify: error: ") and message in lines[0], lines
    assert result.stdout == ""


def test_an_interpreter_without_torch_is_one_line_and_exit_2(tmp_path):
    """--python names the training environment's interpreter: this one, without site-packages."""
    (tmp_path / "train.py").write_text("import torch\n")
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    result = _main("verify", "train.py", "--python", str(bare), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"ddp-migrate verify: error: {bare} has no torch: install torch there, or pass --python with the "
        "interpreter of the training environment"]


def test_the_migration_command_is_untouched_by_the_dispatch(tmp_path):
    (tmp_path / "verify.py").write_text("print('hi')\n")  # a file may still be called like the subcommand
    result = _main("verify.py", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "print('hi')\n"


def test_the_migration_command_does_not_load_verify():
    probe = ("import sys, migrator.cli; "
             "print(sorted(m for m in sys.modules if m.startswith('migrator.verify') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("module", ["command", "runner", "checks", "checks.base", "checks.checkpoints", "checks.run", "report",
                                    "keys", "stacks", "probe"])
def test_each_verify_module_imports_alone_and_never_torch(module):
    """No import cycle (each module is importable first), and none of them imports torch."""
    probe = f"import sys, migrator.verify.{module}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout
    assert out.strip() == "False"


def test_the_probe_ships_in_the_package_and_the_tests_use_it():
    import setuptools

    packages = setuptools.find_packages(str(ROOT), include=["migrator*"])
    assert "migrator.verify.probe" in packages
    assert {"sitecustomize.py", "_ddp_probe_watch.py"} <= {p.name for p in PROBE_DIR.iterdir()}
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from runtime_probe import harness
    finally:
        sys.path.remove(str(ROOT / "tests"))
    assert harness.PROBE_DIR == PROBE_DIR
    assert not (ROOT / "tests" / "runtime_probe" / "sitecustomize.py").exists()  # one probe, not two


def test_the_migration_summary_names_the_verify_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(textwrap.dedent("""
        import argparse
        import torch
        from torch import nn


        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("data")
            args = parser.parse_args()
            model = nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=2,
                                                 shuffle=True)
            for epoch in range(2):
                for (x,) in loader:
                    opt.zero_grad()
                    model(x).sum().backward()
                    opt.step()


        if __name__ == "__main__":
            main()
    """))
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    result = runner.invoke(cli_module.cli, ["--check", "-v", "train.py"], env={"NO_COLOR": "1", "TERM": "xterm"})
    rows = result.stderr.splitlines()
    assert "    one machine: torchrun --standalone --nproc_per_node=<gpus> train.py DATA" in rows
    assert rows[rows.index("    one machine: torchrun --standalone --nproc_per_node=<gpus> train.py DATA") + 3] == (
        "  check it first: ddp-migrate verify train.py -- DATA")
    plain = runner.invoke(cli_module.cli, ["--check", "train.py"], env={"NO_COLOR": "1", "TERM": "xterm"})
    assert ("would migrate train.py; check it: ddp-migrate verify train.py -- DATA; run it: "
            "torchrun --standalone --nproc_per_node=<gpus> train.py DATA") in plain.stderr.splitlines()


# --------------------------------------------------------------------------- the environment of a run


def test_the_probe_goes_first_on_pythonpath_and_a_launchers_variables_stay_out(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", "/users/own/path")
    monkeypatch.setenv("RANK", "3")  # verify itself started inside a job
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    plan = Plan("train.py", ("--lr", "0.1"), python="/env/bin/python", nproc=4)
    env = probe_env(plan, tmp_path)
    assert env["PYTHONPATH"] == f"{PROBE_DIR}{os.pathsep}/users/own/path"
    assert "RANK" not in env and env["CUDA_VISIBLE_DEVICES"] == ""
    assert (env["DDP_PROBE_MAX_BATCHES"], env["DDP_PROBE_EPOCHS"], env["DDP_PROBE_WATCH"]) == ("3", "2", "1")
    assert probe_env(Plan("train.py", device="cuda"), tmp_path)["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert torchrun_command(plan) == ["/env/bin/python", "-m", "torch.distributed.run", "--standalone",
                                      "--nproc_per_node=4", "train.py", "--lr", "0.1"]


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds a run's processes through /proc")
def test_every_process_of_a_run_is_ended_even_one_in_a_session_of_its_own(tmp_path):
    """torchrun starts each worker in a session of its own: a run's processes are found by
    descent and by the run's probe folder in their environment, an orphan too."""
    from migrator.verify import runner

    out_dir = tmp_path / "probe"
    env = dict(os.environ, DDP_PROBE_DIR=str(out_dir))
    # the launcher starts a worker in a new session, writes its pid, and sleeps
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; w = subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(600)'], start_new_session=True); print(w.pid, flush=True); time.sleep(600)"],
        env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(launcher.stdout.readline())
    run = runner._RunProcesses(launcher.pid, out_dir)
    assert {launcher.pid, worker} <= set(run.pids())
    assert os.getpgid(worker) != launcher.pid  # not in the launcher's group
    assert runner._end_all(launcher, run) == []
    assert not Path(f"/proc/{worker}").exists() or Path(f"/proc/{worker}/stat").read_text().split(")")[1].split()[0] == "Z"


# --------------------------------------------------------------------------- the probe, on a script without torch

SCRIPT_WITHOUT_TORCH = textwrap.dedent("""
    import logging, os, sys, warnings
    from pathlib import Path
    print("hello", 1, sep=" ")
    sys.stdout.write("two\\nlines\\n")
    logging.basicConfig(level=logging.INFO)
    logging.getLogger("mine").info("logged by the script")
    warnings.warn("a warning")
    with open("out.txt", "w") as handle:
        handle.write("x")
    Path("sub").mkdir(exist_ok=True)
    Path("sub/notes.txt").write_text("y")
    open("out.txt").read()  # reading is not writing
""")


def _probe_record(tmp_path: Path, **env: str) -> dict:
    out = tmp_path / "probe"
    out.mkdir()
    (tmp_path / "script.py").write_text(SCRIPT_WITHOUT_TORCH)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("DDP_PROBE", "_DDP_PROBE"))}
    run_env.update(PYTHONPATH=str(PROBE_DIR), DDP_PROBE_DIR=str(out), DDP_PROBE_SINGLE="1")
    run_env.update(env)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, env=run_env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello 1\ntwo\nlines\n"  # the output itself is unchanged
    return json.loads((out / "rank0.json").read_text())


def test_a_users_own_sitecustomize_still_runs_behind_the_probe(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("open('own-sitecustomize-ran', 'w').close()\n")
    record = _probe_record(tmp_path, DDP_PROBE_WATCH="1", PYTHONPATH=f"{PROBE_DIR}{os.pathsep}{own}")
    assert (tmp_path / "own-sitecustomize-ran").exists()
    assert "own-sitecustomize-ran" in record["writes"]  # it runs in every process of the run, watched too
    assert record["probe_errors"] == []


def test_without_verifys_settings_the_probe_records_what_it_always_did(tmp_path):
    record = _probe_record(tmp_path)
    for added in ("limits", "stop", "writes", "output", "dataloader_workers", "cwd_real"):
        assert added not in record
    assert not list((tmp_path / "probe").glob("alive-*.json"))


def test_the_watch_classifies_output_and_notes_files_written(tmp_path):
    record = _probe_record(tmp_path, DDP_PROBE_WATCH="1")
    output = record["output"]
    assert output["print"]["lines"] == 3 and output["print"]["samples"][0] == {
        "stream": "stdout", "text": "hello 1", "where": "script.py:4"}
    assert output["log"]["lines"] == 1 and "logged by the script" in output["log"]["samples"][0]["text"]
    assert output["warning"]["writes"] >= 1
    assert set(record["writes"]) == {"out.txt", os.path.join("sub", "notes.txt")}
    assert record["writes"]["out.txt"]["where"] == "script.py:9"
    assert record["probe_errors"] == []
    alive = json.loads(next((tmp_path / "probe").glob("alive-*.json")).read_text())
    assert alive["role"] == "rank" and alive["pid"] == record["pid"]


# --------------------------------------------------------------------------- the checks, on made-up records


def _rank(rank: int) -> dict:
    shard = list(range(rank, 48, 2))
    return {
        "rank": rank, "pid": 100 + rank, "cwd": "/work", "cwd_real": "/work", "tmp_dir": "/tmp",
        "init_process_group": [{"backend": "gloo", "world_size": 2, "rank": rank}],
        "destroy_process_group": [{"default_group": True}], "initialized_at_exit": False,
        "ddp": [{"index": 0, "module_class": "Net", "device_ids": None, "param_checksum": "abc",
                 "param_digests": {"fc.weight": "1", "fc.bias": "2"}}],
        "optimizer_steps": 6,
        "loaders": [{"index": 0, "dataset_class": "TensorDataset", "dataset_len": 48, "sampler_class": "DistributedSampler",
                     "sampler_index": 0, "iterations": [
                         {"epoch": 0, "indices": shard[:12], "batches": 3, "optimizer_steps": 3},
                         {"epoch": 1, "indices": shard[12:], "batches": 3, "optimizer_steps": 3}]}],
        "samplers": [{"index": 0, "num_replicas": 2, "rank": rank, "shuffle": True, "drop_last": False,
                      "dataset_len": 48, "set_epoch": [0, 1, 2]}],
        "saves": ([{"path": "/work/ckpt.pt", "summary": {"type": "mapping", "keys": ["epoch", "model"],
                                                         "items": {"model": {"type": "mapping", "keys": ["fc.bias", "fc.weight"],
                                                                             "state_dict": True}}}}]
                  if rank == 0 else []),
        "writes": {"log.txt": {"path": "log.txt", "modes": ["a"], "opens": 2, "where": "train.py:9"}} if rank == 0 else {},
        "output": ({"print": {"writes": 4, "lines": 2, "samples": [{"text": "epoch 0", "where": "train.py:40"}]}}
                   if rank == 0 else {"warning": {"writes": 1, "lines": 1, "samples": []}}),
        "dataloader_workers": [],
        "stop": {"epochs": 2, "loader_index": 0, "pass": 3, "where": "train.py:31"},
        "exception": None, "probe_errors": [],
    }


def _run(records: Dict[int, dict] = None, **changes) -> Run:
    run = Run("migration", ["python", "-m", "torch.distributed.run"], 0, "exited", 12.0, 300.0,
              records={0: _rank(0), 1: _rank(1)} if records is None else records)
    for key, value in changes.items():
        setattr(run, key, value)
    return run


def _observed(run: Run = None, original: Run = None) -> Observed:
    return Observed(Plan("train.py", cwd=Path("/work")), run or _run(), original,
                    "input.py" if original is not None else None)


def _verdicts(observed: Observed) -> Dict[str, str]:
    return {row.name: row.verdict for row in checks.judge(observed)}


def _evidence(observed: Observed, name: str) -> str:
    return next(row.evidence for row in checks.judge(observed) if row.name == name)


def test_a_good_run_passes_every_check():
    verdicts = _verdicts(_observed())
    assert verdicts.pop("dataloader_workers") == "SKIP" and verdicts.pop("checkpoint_keys") == "SKIP"
    assert set(verdicts.values()) == {"PASS"}, verdicts


def _edited(**per_rank) -> Run:
    """Both ranks' records, with `edit(record, rank)` applied for each named edit."""
    records = {0: _rank(0), 1: _rank(1)}
    for edit in per_rank.values():
        for rank, record in records.items():
            edit(record, rank)
    return _run(records)


def _set(path: List, value, ranks=(0, 1)):
    def edit(record, rank):
        if rank in ranks:
            target = record
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = copy.deepcopy(value)
    return edit


@pytest.mark.parametrize("edit, check, says", [
    (_set(["init_process_group"], []), "process_group", "ranks 0, 1 never called init_process_group"),
    (_set(["init_process_group", 0, "world_size"], 1), "process_group", "world size rank 0: 1, rank 1: 1, expected 2"),
    (_set(["ddp"], [], ranks=(1,)), "ddp", "rank 1 built no DistributedDataParallel"),
    (_set(["loaders", 0, "iterations", 0, "indices"], list(range(12))), "disjoint_batches",
     "in epoch 1 ranks 0 and 1 both drew"),
    (_set(["loaders", 0, "iterations", 1, "indices"], list(range(0, 24, 2)), ranks=(0,)), "reshuffled",
     "rank 0 drew the same batches in epochs 1 and 2"),
    (_set(["ddp", 0, "param_checksum"], "zzz", ranks=(1,)), "in_sync", "parameters differ between rank 0 and rank 1"),
    (_set(["optimizer_steps"], 5, ranks=(1,)), "in_sync", "different numbers of optimizer steps"),
    (_set(["optimizer_steps"], 0), "in_sync", "no optimizer step was taken"),
    (_set(["saves"], [{"path": "/work/ckpt.pt", "summary": {"type": "mapping", "keys": []}}], ranks=(1,)),
     "rank0_files", "ckpt.pt by ranks 0, 1 (torch.save x2)"),
    (_set(["writes"], {"log.txt": {"path": "log.txt", "modes": ["a"], "opens": 1}}, ranks=(1,)),
     "rank0_files", "log.txt by ranks 0, 1 (open x2)"),
    (_set(["output"], {"print": {"lines": 2, "writes": 2, "samples": [{"text": "loss 1.0", "where": "train.py:40"}]}},
          ranks=(1,)), "rank0_output", "rank 1 printed 2 lines (train.py:40: 'loss 1.0')"),
    (_set(["output"], {"tqdm": {"lines": 0, "writes": 9, "samples": []}}, ranks=(1,)), "rank0_output",
     "rank 1 drew tqdm progress bars (9 updates)"),
    (_set(["initialized_at_exit"], True), "destroyed", "destroy_process_group called, but the group was still there"),
])
def test_each_check_fails_on_what_it_guards(edit, check, says):
    observed = _observed(_edited(edit=edit))
    verdicts = _verdicts(observed)
    assert verdicts[check] == "FAIL", (verdicts, _evidence(observed, check))
    assert says in _evidence(observed, check)
    others = {name for name, verdict in verdicts.items() if verdict == "FAIL"}
    assert others == {check}, verdicts  # nothing else is blamed


def test_reshuffling_without_set_epoch_names_it():
    run = _edited(same=_set(["loaders", 0, "iterations", 1, "indices"], list(range(0, 24, 2)), ranks=(0,)),
                  never=_set(["samplers", 0, "set_epoch"], []))
    assert "sampler.set_epoch(epoch) was never called" in _evidence(_observed(run), "reshuffled")


def test_a_loader_that_does_not_shuffle_has_nothing_to_reshuffle():
    run = _edited(fixed=_set(["samplers", 0, "shuffle"], False))
    assert _verdicts(_observed(run))["reshuffled"] == "SKIP"


def test_padding_of_a_distributed_sampler_may_be_shared():
    """49 samples over 2 ranks: the sampler repeats one index to give both ranks 25."""
    run = _edited(odd=_set(["samplers", 0, "dataset_len"], 49),
                  shared=_set(["loaders", 0, "iterations", 0, "indices"], [0] + list(range(1, 24, 2)), ranks=(1,)))
    assert _verdicts(_observed(run))["disjoint_batches"] == "PASS"


def test_a_per_rank_file_named_by_its_rank_is_by_design():
    run = _edited(own=_set(["writes"], {"log_rank1.txt": {"path": "log_rank1.txt", "modes": ["w"], "opens": 1}},
                           ranks=(1,)))
    observed = _observed(run)
    assert _verdicts(observed)["rank0_files"] == "PASS" and "per-rank files [log_rank1.txt]" in _evidence(
        observed, "rank0_files")


def test_saves_in_the_temporary_folder_are_not_the_scripts_files():
    run = _edited(tmp=_set(["saves"], [{"path": "/tmp/scratch/x.pt", "summary": {}}], ranks=(1,)))
    assert _verdicts(_observed(run))["rank0_files"] == "PASS"


def test_other_ranks_logging_and_rank0_bars_pass():
    run = _edited(log=_set(["output"], {"log": {"lines": 1, "writes": 1, "samples": [{"text": "rank 1 on cpu",
                                                                                    "where": "train.py:7"}]}},
                           ranks=(1,)),
                  bar=_set(["output"], {"tqdm": {"lines": 3, "writes": 3, "samples": []}}, ranks=(0,)))
    observed = _observed(run)
    evidence = _evidence(observed, "rank0_output")
    assert _verdicts(observed)["rank0_output"] == "PASS"
    assert evidence.startswith("rank 0 drew tqdm progress bars (3 updates)")
    assert "not judged: rank 1 logged 1 line (train.py:7: 'rank 1 on cpu')" in evidence


def _original(prefix: str = "") -> Run:
    record = _rank(0)
    record["saves"][0]["summary"]["items"]["model"]["keys"] = [prefix + "fc.bias", prefix + "fc.weight"]
    return _run({0: record})


def test_the_original_checkpoint_keys_match_nested():
    observed = _observed(original=_original())
    assert _verdicts(observed)["checkpoint_keys"] == "PASS"
    assert "ckpt.pt: {epoch, model: state_dict of 2 keys}" in _evidence(observed, "checkpoint_keys")


def test_a_module_prefix_in_a_nested_state_dict_is_a_fail_with_the_keys():
    record = _rank(0)
    record["saves"][0]["summary"]["items"]["model"]["keys"] = ["module.fc.bias", "module.fc.weight"]
    observed = _observed(_run({0: record, 1: _rank(1)}), original=_original())
    assert _verdicts(observed)["checkpoint_keys"] == "FAIL"
    evidence = _evidence(observed, "checkpoint_keys")
    assert "ckpt.pt['model']: keys only in the migration's [module.fc.bias, module.fc.weight] (2)" in evidence
    assert "only in the original's [fc.bias, fc.weight] (2)" in evidence and "`module.` prefix" in evidence


def test_a_checkpoint_the_migration_never_writes_fails():
    record = _rank(0)
    record["saves"] = []
    observed = _observed(_run({0: record, 1: _rank(1)}), original=_original())
    assert "the original wrote [ckpt.pt], the migration did not" in _evidence(observed, "checkpoint_keys")


def test_a_dataloader_worker_that_joins_the_group_is_named():
    run = _run({}, ended="worker-hang", returncode=None, worker_inits=[
        {"pid": 7, "parent_rank": "0", "where": "train.py:40", "module": "__mp_main__"},
        {"pid": 8, "parent_rank": "1", "where": "train.py:40", "module": "__mp_main__"}])
    verdicts = _verdicts(_observed(run))
    assert verdicts["run"] == "FAIL" and verdicts["dataloader_workers"] == "FAIL"
    assert {v for name, v in verdicts.items() if name not in ("run", "dataloader_workers")} == {"SKIP"}
    assert "2 DataLoader worker processes of rank(s) 0, 1" in _evidence(_observed(run), "dataloader_workers")



@pytest.mark.parametrize("ended", ["worker-hang", "timeout"])
def test_a_run_ended_before_any_step_blames_the_run_not_the_sync(ended):
    """When the hang is broken, the ranks may still get to write their records (a worker's
    death raises in the rank): zero steps there is the run's failure, not a sync verdict."""
    def stopped(rank: int) -> dict:
        record = _rank(rank)
        record.update(optimizer_steps=0, loaders=[], stop=None,
                      exception={"type": "RuntimeError", "message": "DataLoader worker exited unexpectedly"})
        return record
    run = _run({0: stopped(0), 1: stopped(1)}, ended=ended, returncode=None)
    observed = _observed(run)
    verdicts = _verdicts(observed)
    assert verdicts["run"] == "FAIL" and verdicts["in_sync"] == "SKIP", verdicts
    assert "the run ended before any optimizer step (see run)" in _evidence(observed, "in_sync")


def test_workers_that_joined_the_group_and_died_are_the_finding_not_an_error():
    """The other ending of that shape: the workers die instead of hanging, their ranks raise
    before any step and the run exits; the report still names the workers (exit 1, not 2)."""
    def died(rank: int) -> dict:
        record = _rank(rank)
        record.update(optimizer_steps=0, loaders=[], stop=None,
                      exception={"type": "RuntimeError", "message": "DataLoader worker (pid(s) 7) exited unexpectedly"})
        return record
    run = _run({0: died(0), 1: died(1)}, ended="exited", returncode=1, worker_inits=[
        {"pid": 7, "parent_rank": "0", "where": "train.py:40", "module": "__mp_main__"}])
    observed = _observed(run)
    report = build(observed, {"total_s": 20.0}, ["torchrun"])
    assert report.error is None and report.exit_status == 1
    assert [row.name for row in report.failed] == ["run", "dataloader_workers"], [(r.name, r.evidence) for r in report.failed]
    assert "DataLoader workers joined the process group (dataloader_workers) and died" in _evidence(observed, "run")


DUMP = textwrap.dedent("""\
    Thread 0x00007f5488dff6c0 (most recent call first):
      File "/usr/lib/python3.11/threading.py", line 327 in wait
      File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

    Current thread 0x00007f54b2c5bb80 (most recent call first):
      File "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4811 in barrier
      File "/work/train.py", line 30 in main
      File "/work/train.py", line 41 in <module>
""")


def test_a_stack_says_where_the_script_is_and_what_it_waits_in():
    assert stacks.summary(DUMP, ["/work"]) == "train.py:30 in main, waiting in distributed_c10d.py:4811 in barrier"
    assert [f.func for f in stacks.main_thread(DUMP)] == ["barrier", "main", "<module>"]


def test_a_timeout_is_a_fail_with_each_ranks_place():
    run = _run({}, ended="timeout", returncode=None, stacks={100: DUMP},
               alive=[{"pid": 100, "role": "rank", "rank": 0}])
    observed = _observed(run)
    assert _evidence(observed, "run") == ("still running after --timeout 300s, so it was ended: rank 0 at train.py:30 "
                                          "in main, waiting in distributed_c10d.py:4811 in barrier (stacks below)")
    report = build(observed, {"total_s": 300.0}, ["torchrun"])
    assert report.exit_status == 1 and report.details[0].heading == "stack of rank 0 (pid 100, most recent call first)"


def test_a_gloo_abort_at_exit_after_a_clean_finish_is_not_the_scripts():
    run = _run(returncode=1, stderr="terminate called without an active exception\n")
    verdicts = _verdicts(_observed(run))
    assert verdicts["run"] == "PASS" and "upstream race" in _evidence(_observed(run), "run")


def test_a_crash_after_training_started_fails_the_run():
    record = _rank(1)
    record["exception"] = {"type": "RuntimeError", "message": "boom", "traceback": "Traceback...\nRuntimeError: boom"}
    run = _run({0: _rank(0), 1: record}, returncode=1)
    assert _evidence(_observed(run), "run").startswith("exit status 1: rank 1 raised RuntimeError: boom")
    assert build(_observed(run), {}, []).exit_status == 1


def test_a_failure_before_training_is_exit_2_with_the_traceback():
    records = {rank: dict(_rank(rank), optimizer_steps=0, exception={
        "type": "ValueError", "message": "sampler option is mutually exclusive with shuffle",
        "traceback": "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                     "    DataLoader(ds, sampler=s, shuffle=True)\nValueError: sampler option is mutually exclusive with shuffle"})
        for rank in (0, 1)}
    report = build(_observed(_run(records, returncode=1)), {}, [])
    assert report.exit_status == 2 and report.rows == []
    assert report.error == "ranks 0, 1 raised ValueError: sampler option is mutually exclusive with shuffle"
    assert report.details[0].heading == "traceback of ranks 0, 1 (last lines)"
    assert report.last_line() == ("verify: train.py failed before training started: ranks 0, 1 raised ValueError: "
                                  "sampler option is mutually exclusive with shuffle")


def test_a_traceback_tail_drops_the_probes_frames():
    text = ("Traceback (most recent call last):\n  File \"/w/train.py\", line 9, in <module>\n    DDP(model)\n"
            f"  File \"{PROBE_DIR}/sitecustomize.py\", line 342, in __init__\n    orig(self)\n"
            "  File \"/env/torch/nn/parallel/distributed.py\", line 859, in __init__\n    x()\nValueError: no group")
    assert "sitecustomize" not in traceback_tail(text) and traceback_tail(text).endswith("ValueError: no group")


def test_a_check_that_breaks_on_a_strange_record_skips_and_says_so():
    run = _edited(broken=_set(["loaders"], [{"index": 0, "iterations": [{"optimizer_steps": 1, "indices": None}]}]))
    rows = {row.name: row for row in checks.judge(_observed(run))}
    assert all(row.verdict in ("PASS", "FAIL", "SKIP") for row in rows.values())


def test_keys_name_a_module_prefix_both_ways():
    new = {"type": "state_dict", "keys": ["module.w"]}
    old = {"type": "state_dict", "keys": ["w"]}
    assert "save model.module.state_dict()" in keys.differences(new, old, "a.pt")[0]
    assert "its DataParallel wrapper; keep it" in keys.differences(old, new, "a.pt")[0]


# --------------------------------------------------------------------------- the report: table and JSON


def _report(run: Run = None) -> Report:
    return build(_observed(run), {"run_s": 12.0, "total_s": 12.5}, ["python", "-m", "torch.distributed.run"])


def test_the_json_report_has_checks_ranks_timings_and_the_status():
    doc = json.loads(_report().to_json())
    assert doc["exit_status"] == 0 and doc["passed"] and doc["failed"] == []
    assert [c["name"] for c in doc["checks"]] == list(checks.TITLES)
    assert set(doc["checks"][0]) == {"name", "title", "verdict", "evidence"}
    assert doc["ranks"]["1"]["optimizer_steps"] == 6 and doc["ranks"]["0"]["ended"] == "stopped by verify"
    assert doc["timings"] == {"run_s": 12.0, "total_s": 12.5}


def test_the_table_has_one_verdict_per_row_and_the_verdict_line_last():
    run = _edited(out=_set(["output"], {"print": {"lines": 1, "writes": 1, "samples": []}}, ranks=(1,)))
    out = StringIO()
    render.print_verify_table(render.make_console("never", file=out), _report(run))
    lines = out.getvalue().rstrip().splitlines()
    rows = {line.split()[0]: line.split()[1] for line in lines[:-1] if len(line.split()) > 1
            and line.split()[1] in ("PASS", "FAIL", "SKIP")}
    assert list(rows) == list(checks.TITLES) and rows["rank0_output"] == "FAIL"
    assert lines[-1] == "verify: FAIL rank0_output (only rank 0 prints or draws progress bars)"
    assert "\x1b[" not in out.getvalue()


def test_every_verify_flag_is_in_the_verify_doc():
    from migrator.verify.command import verify

    doc = (ROOT / "docs" / "verify.md").read_text(encoding="utf-8")
    section = doc[doc.index("# Verify a migration by running it"):]
    missing = [opt for param in verify.params for opt in getattr(param, "opts", [])
               if opt.startswith("--") and opt != "--help" and opt not in section]
    assert not missing, f"docs/verify.md does not mention {missing}"
    for name in checks.TITLES:
        assert f"| `{name}` |" in section, name
