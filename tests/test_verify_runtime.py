"""`ddp-migrate verify` on real runs: it passes our fixtures' migrations, and fails deliberately
wrong ones with the right check named.

Every verification is a `ddp-migrate verify` subprocess (through VERIFY_WRAPPER, which also
notes whether torch was ever imported in ddp-migrate's own process) in a folder of its own. They
all start at once from one module-scoped fixture, a few at a time, and the tests read their
JSON reports (one case also its text table). A mutation edits expected.py's text: each (old, new)
must occur exactly once, so a fixture that changes makes the test fail loudly, not pass vacuously.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional, Tuple

import pytest

pytestmark = pytest.mark.runtime

if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
    pytest.skip("torch is not installed (pip install -e '.[test]')", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
#: Verifications at once: each is three Python processes that import torch (2-core machines).
PARALLEL = 3
TIMEOUT_S = 240  # per verification, from outside (verify's own --timeout is shorter)

#: Runs `ddp-migrate verify ARGS` in this process and writes, at the very end, whether torch was
#: imported here (it never must be: ddp-migrate does not depend on torch).
VERIFY_WRAPPER = textwrap.dedent("""
    import json, os, sys
    from migrator.cli import main
    try:
        main(["verify", *sys.argv[1:]])
    finally:
        with open(os.environ["VERIFY_TORCH_NOTE"], "w") as note:
            json.dump({"torch_imported": "torch" in sys.modules}, note)
""")

#: A stand-in for tqdm (not a test dependency) that draws its bar on stderr from a module named
#: tqdm, as the real one does.
TQDM_STAND_IN = textwrap.dedent('''
    """Stand-in for tqdm: the same call, a bar on stderr (disable=True: nothing)."""
    import sys


    class tqdm:
        def __init__(self, iterable=None, total=None, disable=False, file=None, **kwargs):
            self.iterable, self.disable, self.file, self.n = iterable, disable, file or sys.stderr, 0

        def __iter__(self):
            for item in self.iterable:
                yield item
                self.n += 1
                if not self.disable:
                    self.file.write(f"\\r{self.n}it [00:00, 9.99it/s]")
                    self.file.flush()
            if not self.disable:
                self.file.write("\\n")
''')

#: A run that never ends: rank 0 waits at a barrier that rank 1, asleep, never reaches.
HANG = textwrap.dedent("""
    import json, os, time
    import torch.distributed as dist

    dist.init_process_group("gloo")
    with open(f"pid-{dist.get_rank()}.json", "w") as out:
        json.dump({"pid": os.getpid(), "ppid": os.getppid()}, out)
    if dist.get_rank() == 0:
        dist.barrier()
    else:
        time.sleep(600)
""")

ROTATION = "checkpoint_rotation"  # small, shuffled DistributedSampler, rank-0 saves and prints, try/finally
GUARDED_SAVE = "        if is_main:\n            torch.save(model.module.state_dict(), snapshot_path)\n"
STEP = ("            loss = nn.functional.mse_loss(model(x), y)\n"
        "            loss.backward()\n")
MAIN_GUARD = ("    try:\n        main()\n    finally:\n        if dist.is_initialized():\n"
              "            dist.destroy_process_group()\n")
TRAINER_SETUP = ('    if "RANK" in os.environ:  # started by torchrun\n'
                 "        dist.init_process_group(backend=backend)\n"
                 "    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)\n"
                 "        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)\n")


@dataclass(frozen=True)
class Case:
    name: str
    fixture: Optional[str] = None  # its expected.py is the script (None: `script` is)
    edits: Tuple[Tuple[str, str], ...] = ()
    script: str = ""
    flags: Tuple[str, ...] = ()
    script_args: Tuple[str, ...] = ()
    original: bool = False  # --original with the fixture's input.py
    files: Dict[str, str] = field(default_factory=dict)  # more files in the run's folder
    text: bool = False  # the text table instead of JSON


CASES = [
    # correct migrations: every check passes
    Case("rotation", ROTATION, original=True),
    # its loop ends by itself; the parameter count is logged on every rank again (the migration logs it on
    # rank 0), so that verify shows what other ranks log without judging it
    Case("trainer", "trainer_class", original=True, script_args=("--epochs", "2"), edits=((
        '        if dist.get_rank() == 0:\n            logger.info("model has',
        '        logger.info("model has'),)),
    # wrong migrations: the named check fails
    Case("no_set_epoch", ROTATION, edits=(("        sampler.set_epoch(epoch)\n", ""),)),
    Case("unguarded_save", ROTATION, edits=(
        (GUARDED_SAVE, "        torch.save(model.module.state_dict(), snapshot_path)\n        if is_main:\n"),)),
    Case("no_sampler", ROTATION, edits=(
        ("    sampler = DistributedSampler(data, shuffle=True)\n", ""),
        ("DataLoader(data, batch_size=8, sampler=sampler)", "DataLoader(data, batch_size=8, shuffle=True)"),
        ("        sampler.set_epoch(epoch)\n", ""))),
    Case("module_prefix", ROTATION, original=True, edits=(
        ("torch.save(model.module.state_dict(), snapshot_path)", "torch.save(model.state_dict(), snapshot_path)"),)),
    Case("prints_on_every_rank", ROTATION, text=True, edits=(
        ("        is_best = total < best\n", "        print(\"epoch done\", epoch)\n        is_best = total < best\n"),)),
    Case("tqdm_on_every_rank_in_except_exception", ROTATION, edits=(
        ("import torch\n", "import torch\nfrom tqdm import tqdm\n"),
        ("        for x, y in loader:\n", "        for x, y in tqdm(loader):\n"),
        # `except Exception` around the loop would swallow a stop that were an Exception: exit 3
        ("    for epoch in range(args.epochs):\n", "    try:\n      for epoch in range(args.epochs):\n"),
        ("            print(\"epoch\", epoch, \"loss\", total)\n",
         "            print(\"epoch\", epoch, \"loss\", total)\n    except Exception:\n        raise SystemExit(3)\n"),
    ), files={"tqdm/__init__.py": TQDM_STAND_IN}),
    Case("no_destroy", ROTATION, edits=((MAIN_GUARD, "    main()\n"),)),
    Case("no_sync_every_step", ROTATION, edits=(
        (STEP, "            with model.no_sync():\n" + textwrap.indent(STEP, "    ")),)),
    Case("shuffle_next_to_sampler", ROTATION, edits=(
        ("DataLoader(data, batch_size=8, sampler=sampler)", "DataLoader(data, batch_size=8, sampler=sampler, shuffle=True)"),)),
    Case("module_level_setup_spawned_workers", "flat_kaggle_script", flags=("--timeout", "150"), edits=(
        ("sampler=train_sampler, num_workers=0)", "sampler=train_sampler, num_workers=1, multiprocessing_context=\"spawn\")"),)),
    Case("ddp_without_process_group", "trainer_class", edits=((TRAINER_SETUP, ""),)),
    Case("hang", script=HANG, flags=("--timeout", "60")),  # room for a loaded machine to reach the hang
]


@dataclass
class Verified:
    case: Case
    folder: Path
    returncode: int
    stdout: str
    stderr: str
    torch_imported: Optional[bool]

    @property
    def doc(self) -> dict:
        assert not self.case.text, "a text case has no JSON"
        try:
            return json.loads(self.stdout)
        except ValueError:
            raise AssertionError(f"[{self.case.name}] not JSON (exit {self.returncode}):\n{self.stdout}\n{self.stderr}")

    def verdicts(self) -> Dict[str, str]:
        return {check["name"]: check["verdict"] for check in self.doc["checks"]}

    def evidence(self, name: str) -> str:
        return next(check["evidence"] for check in self.doc["checks"] if check["name"] == name)

    def explain(self) -> str:
        return f"[{self.case.name}] exit {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr[-3000:]}"


def _script_text(case: Case) -> str:
    if case.fixture is None:
        return case.script
    text = (FIXTURES / case.fixture / "expected.py").read_text()
    for old, new in case.edits:
        assert text.count(old) == 1, f"[{case.name}] the edit no longer applies to {case.fixture}: {old!r}"
        text = text.replace(old, new)
    return text


def _verify(case: Case, folder: Path) -> Verified:
    folder.mkdir(parents=True)
    (folder / "train.py").write_text(_script_text(case))
    for name, text in case.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    args = ["train.py", *case.flags]
    if case.original:
        (folder / "original.py").write_text((FIXTURES / case.fixture / "input.py").read_text())
        args += ["--original", "original.py"]
    if not case.text:
        args += ["--output-format", "json"]
    if case.script_args:
        args += ["--", *case.script_args]
    note = folder.parent / f"{case.name}.torch.json"
    env = dict(os.environ, VERIFY_TORCH_NOTE=str(note), PYTHONPATH=str(ROOT), NO_COLOR="1")
    done = subprocess.run([sys.executable, "-c", VERIFY_WRAPPER, *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    torch_imported = json.loads(note.read_text())["torch_imported"] if note.exists() else None
    return Verified(case, folder, done.returncode, done.stdout, done.stderr, torch_imported)


@pytest.fixture(scope="module")
def verified(tmp_path_factory) -> Dict[str, Verified]:
    root = tmp_path_factory.mktemp("verify")
    # The hang first: it waits out its timeout while the others run.
    ordered = sorted(CASES, key=lambda case: case.name != "hang")
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        done = list(pool.map(lambda case: _verify(case, root / case.name), ordered))
    return {result.case.name: result for result in done}


def _passes(result: Verified) -> None:
    assert result.returncode == 0, result.explain()
    doc = result.doc
    assert doc["passed"] and doc["failed"] == [] and doc["exit_status"] == 0, result.explain()
    assert set(result.verdicts().values()) <= {"PASS", "SKIP"}, result.explain()


def _fails(result: Verified, *names: str) -> None:
    assert result.returncode == 1, result.explain()
    assert result.doc["failed"] == list(names), result.explain()


# --------------------------------------------------------------------------- correct migrations


@pytest.mark.parametrize("name", ["rotation", "trainer"])
def test_a_correct_migration_passes(verified, name):
    result = verified[name]
    _passes(result)
    verdicts = result.verdicts()
    for check in ("run", "process_group", "ddp", "disjoint_batches", "reshuffled", "in_sync", "rank0_files",
                  "rank0_output", "destroyed", "checkpoint_keys"):
        assert verdicts[check] == "PASS", (check, result.explain())
    ranks = result.doc["ranks"]
    assert set(ranks) == {"0", "1"} and all(rank["optimizer_steps"] > 0 for rank in ranks.values())
    assert all(max(rank["batches_per_epoch"]) <= 3 for rank in ranks.values())  # --steps-per-epoch 3


def test_the_run_stops_after_two_epochs_of_a_longer_loop(verified):
    """checkpoint_rotation loops 3 epochs: verify ends it as the third would start, on every rank,
    through the script's `finally` (destroy_process_group ran), exit status 0."""
    result = verified["rotation"]
    assert "stopped by verify on every rank after 2 epochs" in result.evidence("run")
    assert all(rank["ended"] == "stopped by verify" and rank["epochs"] == 2 for rank in result.doc["ranks"].values())
    assert "snapshots/snapshot_epoch_1.pt" in result.evidence("checkpoint_keys")  # the original: the same steps
    assert "snapshots/best.pt" in result.evidence("rank0_files")  # shutil.copyfile: an open() for writing


def test_a_loop_that_ends_by_itself_simply_ends(verified):
    result = verified["trainer"]  # -- --epochs 2: verify's 2 epochs are the script's own
    assert "ended by itself after 2 epochs" in result.evidence("run")
    assert "outputs/har/last.pt" in result.evidence("rank0_files")


def test_nested_checkpoint_keys_match_the_original(verified):
    evidence = verified["trainer"].evidence("checkpoint_keys")
    assert "model_state: state_dict of 13 keys" in evidence and "optimizer_state: optimizer_state_dict" in evidence


def test_what_other_ranks_log_is_shown_not_judged(verified):
    """trainer_class, edited to log its parameter count on every rank (logging from the script's own code)."""
    evidence = verified["trainer"].evidence("rank0_output")
    assert "not judged: rank 1 logged 1 line (train.py:" in evidence and "trainable params" in evidence


def test_ddp_migrate_itself_never_imports_torch(verified):
    notes = {name: result.torch_imported for name, result in verified.items()}
    assert set(notes.values()) == {False}, notes


# --------------------------------------------------------------------------- wrong migrations


@pytest.mark.parametrize("name, check, says", [
    ("no_set_epoch", "reshuffled", "set_epoch(epoch) was never called"),
    ("unguarded_save", "rank0_files", "snapshots/snapshot_epoch_0.pt by ranks 0, 1"),
    ("no_sampler", "disjoint_batches", "sampler=DistributedSampler(dataset)"),
    ("module_prefix", "checkpoint_keys", "`module.` prefix"),
    ("tqdm_on_every_rank_in_except_exception", "rank0_output", "rank 1 drew tqdm progress bars"),
    ("no_destroy", "destroyed", "destroy_process_group never called"),
    ("no_sync_every_step", "in_sync", "parameters differ between rank 0 and rank 1"),
])
def test_a_wrong_migration_fails_the_right_check(verified, name, check, says):
    result = verified[name]
    _fails(result, check)
    assert says in result.evidence(check), result.explain()


def test_the_stop_passes_through_except_exception(verified):
    result = verified["tqdm_on_every_rank_in_except_exception"]
    assert result.verdicts()["run"] == "PASS" and "stopped by verify on every rank" in result.evidence("run")


def test_prints_on_every_rank_fail_in_the_table(verified):
    result = verified["prints_on_every_rank"]
    assert result.returncode == 1, result.explain()
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()
            if len(line.split()) > 1 and line.split()[1] in ("PASS", "FAIL", "SKIP")}
    assert rows["rank0_output"] == "FAIL" and rows["run"] == "PASS" and rows["in_sync"] == "PASS", result.stdout
    assert "rank 1 printed 2 lines (train.py:" in " ".join(result.stdout.split())
    last = result.stdout.rstrip().splitlines()[-1]
    assert last == "verify: FAIL rank0_output (only rank 0 prints or draws progress bars)", result.stdout


@pytest.mark.parametrize("name, says", [
    ("shuffle_next_to_sampler", "sampler option is mutually exclusive with shuffle"),
    ("ddp_without_process_group", "Default process group has not been initialized"),
])
def test_a_script_that_fails_before_training_exits_2_with_its_traceback(verified, name, says):
    result = verified[name]
    assert result.returncode == 2, result.explain()
    doc = result.doc
    assert doc["exit_status"] == 2 and says in doc["error"], result.explain()
    tails = "\n".join(detail["text"] for detail in doc["details"])
    assert tails.startswith("Traceback (most recent call last)") and says in tails.splitlines()[-1], tails
    assert 'train.py", line' in tails and "verify/probe" not in tails, tails  # the user's frame, not the probe's


def test_module_level_setup_with_spawned_workers_is_named(verified):
    """A spawned DataLoader worker re-imports the flat script, whose module level sets up the
    process group: the worker joins the rendezvous as a copy of its rank and the run hangs."""
    result = verified["module_level_setup_spawned_workers"]
    _fails(result, "run", "dataloader_workers")
    evidence = result.evidence("dataloader_workers")
    assert "re-imported the script (as __mp_main__)" in evidence and "init_process_group at train.py:" in evidence
    # They hang in the rendezvous (the run is ended), or die there and their ranks raise: both are named.
    assert "DataLoader workers joined the process group (dataloader_workers)" in result.evidence("run")
    assert result.doc["timings"]["run_s"] < 150  # ended once the workers were seen, not at the timeout


def test_a_hang_shows_each_ranks_stack_and_leaves_nothing_running(verified):
    result = verified["hang"]
    _fails(result, "run")
    evidence = result.evidence("run")
    assert "still running after --timeout 60s" in evidence
    barrier, sleep = (HANG.splitlines().index(line) + 1 for line in ("    dist.barrier()", "    time.sleep(600)"))
    assert f"rank 0 at train.py:{barrier} in <module>, waiting in distributed_c10d.py:" in evidence, evidence
    assert f"rank 1 at train.py:{sleep} in <module>" in evidence, evidence  # time.sleep is C: no frame of its own
    headings = [detail["heading"] for detail in result.doc["details"]]
    assert any(h.startswith("stack of rank 0") for h in headings) and any(h.startswith("stack of rank 1") for h in headings)
    pids = [json.loads((result.folder / f"pid-{rank}.json").read_text()) for rank in (0, 1)]
    for pid in {p["pid"] for p in pids} | {p["ppid"] for p in pids}:  # the ranks and torchrun itself
        assert not _running(pid), f"pid {pid} survived the verification"


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie (a zombie is dead, waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"
