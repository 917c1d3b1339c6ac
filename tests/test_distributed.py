"""Code that already trains on many GPUs (issue 11): never broken, never nagged.

The engine is told where a file is (migrator.context.FileContext): a test module gets no training
advisories, and a helper imported from the project's own modules is looked into. Already
distributed files change only where torchrun needs it (--local_rank) and report only genuine
bugs (DDP130, DDP131), each with its evidence.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from migrator import migrate
from migrator.cli import cli
from migrator.context import FileContext, ProjectModules


def _codes(result):
    return sorted({c.code for c in result.changes} | {d.code for d in result.diagnostics})


def _write(root: Path, files: dict) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


# A single-GPU-looking training script: everything distributed happens in `launch(...)`, a
# function of the project's package (detectron2's `launch` starts workers with mp.start_processes).
TRAIN_THROUGH_PROJECT_LAUNCH = """\
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from mylib.engine import launch


    def main():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
        for epoch in range(2):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


    if __name__ == "__main__":
        launch(main, num_gpus=2)
"""
PROJECT = {
    "setup.py": "",
    "mylib/__init__.py": "",
    "mylib/engine/__init__.py": "from .launch import *\n",
    "mylib/engine/launch.py": """\
        import torch.multiprocessing as mp
        import torch.distributed as dist

        __all__ = ["launch"]


        def _worker(rank, fn, world):
            dist.init_process_group("gloo", rank=rank, world_size=world)
            fn()


        def launch(fn, num_gpus=1):
            if num_gpus > 1:
                mp.start_processes(_worker, args=(fn, num_gpus), nprocs=num_gpus)
            else:
                fn()
    """,
    "tools/train_net.py": TRAIN_THROUGH_PROJECT_LAUNCH,
}


def test_a_helper_of_the_project_makes_the_file_distributed(tmp_path):
    _write(tmp_path, PROJECT)
    script = tmp_path / "tools" / "train_net.py"
    source = script.read_text()
    # Judged by its text alone it is a single-GPU script, and would get a second process group.
    assert "DDP001" in _codes(migrate(source))
    result = migrate(source, context=FileContext.for_file(script))
    assert result.code == source
    assert _codes(result) == []


def test_the_cli_looks_into_the_project_and_says_nothing(tmp_path, monkeypatch):
    _write(tmp_path, PROJECT)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["tools/train_net.py", "--check"])
    assert result.exit_code == 0, result.output
    assert "DDP" not in result.output


def test_relative_imports_resolve_inside_the_package(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/dist_utils.py": "import torch.distributed as dist\n\ndef bootstrap():\n    dist.init_process_group('gloo')\n",
        "pkg/train.py": TRAIN_THROUGH_PROJECT_LAUNCH.replace("from mylib.engine import launch", "from .dist_utils import bootstrap")
        .replace("        launch(main, num_gpus=2)", "        bootstrap()\n        main()"),
    })
    script = tmp_path / "pkg" / "train.py"
    context = FileContext.for_file(script)
    assert context.package == "pkg"
    result = migrate(script.read_text(), context=context)
    assert _codes(result) == []


def test_a_project_helper_that_does_not_distribute_changes_nothing(tmp_path):
    _write(tmp_path, {
        "helpers.py": "def seed_everything(seed):\n    import random\n    random.seed(seed)\n",
        "train.py": TRAIN_THROUGH_PROJECT_LAUNCH.replace("from mylib.engine import launch", "from helpers import seed_everything")
        .replace("        launch(main, num_gpus=2)", "        seed_everything(0)\n        main()"),
    })
    script = tmp_path / "train.py"
    assert "DDP001" in _codes(migrate(script.read_text(), context=FileContext.for_file(script)))


def test_project_modules_pickle(tmp_path):
    import pickle

    modules = ProjectModules((str(tmp_path),))
    assert pickle.loads(pickle.dumps(modules)) == modules


@pytest.mark.parametrize("path, expected", [
    ("tests/test_model.py", True), ("test_model.py", True), ("model_test.py", True), ("conftest.py", True),
    ("pkg/tests/helpers.py", True), ("train.py", False), ("latest/train.py", False), ("contest.py", False),
])
def test_test_modules(path, expected):
    assert FileContext(path=path).is_test_module is expected


PYTEST_FILE = """\
import torch


def test_loss_goes_down():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    first = None
    for _ in range(20):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        first = first if first is not None else loss.item()
    assert loss.item() < first


if __name__ == "__main__":
    test_loss_goes_down()
"""


def test_test_modules_get_no_training_advisories():
    assert "DDP001" in _codes(migrate(PYTEST_FILE))  # as a script, it would be migrated
    result = migrate(PYTEST_FILE, context=FileContext(path="tests/test_training.py"))
    assert result.code == PYTEST_FILE and _codes(result) == []


# -- DDP020: only when the value matters -------------------------------------------------------
LEGACY = """\
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0{required})
args = parser.parse_args()
{body}
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
"""


@pytest.mark.parametrize("required, body, fires", [
    ("", "", False),  # declared for the old launcher, never read (DINO, DeiT, timm)
    ("", "torch.cuda.set_device(args.local_rank)", True),  # picks the GPU, nothing reads LOCAL_RANK
    ("", 'import os\nargs.local_rank = int(os.environ["LOCAL_RANK"])\ntorch.cuda.set_device(args.local_rank)', False),
    (", required=True", "", True),  # argparse stops the script under torchrun
    ("", "print(args.local_rank)", True),
])
def test_local_rank_argument_fires_only_when_it_matters(required, body, fires):
    source = LEGACY.format(required=required, body=body)
    assert ("DDP020" in _codes(migrate(source))) is fires


# -- DDP131: every rank writes ---------------------------------------------------------------
SAVES = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(model, path):
    torch.save(model.module.state_dict(), path)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(4, 1))
{body}
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("body, fires", [
    ('    torch.save(model.module.state_dict(), "model.pt")', True),
    ('    save_checkpoint(model, "model.pt")', True),
    ('    if rank == 0:\n        save_checkpoint(model, "model.pt")', False),
    ('    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), "model.pt")', False),
    ('    torch.save(model.module.state_dict(), f"model_rank{rank}.pt")', False),
])
def test_every_rank_save(body, fires):
    result = migrate(SAVES.format(body=body))
    assert ("DDP131" in _codes(result)) is fires
    assert result.code == SAVES.format(body=body)  # reported, never rewritten
    if fires:
        message = next(d.message for d in result.diagnostics if d.code == "DDP131")
        assert "every rank" in message and "model.pt" in message


SPAWN_PARENT_SAVE = """\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DDP(torch.nn.Linear(4, 1))
    if rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
    torch.save({"done": True}, "status.pt")  # the parent, once
"""


def test_a_save_in_the_spawning_parent_is_not_every_rank():
    assert _codes(migrate(SPAWN_PARENT_SAVE)) == []


def test_an_early_return_guards_the_rest_of_the_function():
    source = SAVES.replace(
        "def save_checkpoint(model, path):\n",
        "def save_checkpoint(model, path):\n    if dist.get_rank() != 0:\n        return\n",
    ).format(body='    save_checkpoint(model, "model.pt")')
    assert "DDP131" not in _codes(migrate(source))


# -- DDP130: set_epoch ------------------------------------------------------------------------
def test_missing_set_epoch_names_the_loader_and_the_loop():
    from migrator.rules.distributed_bugs import MISSING_SET_EPOCH

    result = migrate(MISSING_SET_EPOCH.examples[0].before)
    [diagnostic] = [d for d in result.diagnostics if d.code == "DDP130"]
    assert "`loader`" in diagnostic.message and f"line {diagnostic.line}" in diagnostic.message


def test_a_framework_keeps_every_advisory_quiet():
    source = """\
from accelerate import Accelerator
import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            optimizer.step()
    torch.save(accelerator.unwrap_model(model).state_dict(), "model.pt")


if __name__ == "__main__":
    main()
"""
    result = migrate(source)
    assert result.code == source and _codes(result) == []


# -- DDP124 and DDP121 in code that is already distributed --------------------------------------
COMM = """\
import torch.distributed as dist


def gather(data, dst=0):
    rank = dist.get_rank()
{body}
"""


@pytest.mark.parametrize("body, fires", [
    ("    if rank == dst:\n        out = [None] * dist.get_world_size()\n        dist.gather_object(data, out, dst=dst)\n"
     "        return out\n    else:\n        dist.gather_object(data, None, dst=dst)\n        return []", False),
    ("    if rank != -1:\n        dist.barrier()\n    return data", False),  # "is this run distributed?"
    ("    if rank == 0:\n        dist.barrier()\n    return data", True),
])
def test_rank_divergence_in_distributed_code(body, fires):
    result = migrate(COMM.format(body=body))
    found = [d for d in result.diagnostics if d.code == "DDP124"]
    assert bool(found) is fires
    if fires:
        assert "dist.barrier(...)" in found[0].message and "rank == 0" in found[0].message


EVAL = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main(model):
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
    {name} = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    correct = 0
    with torch.no_grad():
        for x, y in {name}:
            correct += (model(x).argmax(1) == y).sum().item()
{combine}    print(correct / len(data))
"""


@pytest.mark.parametrize("name, combine, fires", [
    ("val_loader", "", True),
    ("val_loader", "    t = torch.tensor(correct)\n    dist.all_reduce(t)\n    correct = t.item()\n", False),
    ("train_loader", "", False),  # a loader whose training is elsewhere is not an evaluation loader
])
def test_sharded_evaluation_in_distributed_code(name, combine, fires):
    result = migrate(EVAL.format(name=name, combine=combine))
    found = [d for d in result.diagnostics if d.code == "DDP121"]
    assert bool(found) is fires
    if fires:
        assert "`val_loader`" in found[0].message


def test_a_save_after_a_project_helper_set_up_is_every_rank(tmp_path):
    _write(tmp_path, {
        "dist_utils.py": "import torch.distributed as dist\n\n\ndef bootstrap():\n    dist.init_process_group('gloo')\n",
        "train.py": """\
            import torch

            import dist_utils


            def main():
                dist_utils.bootstrap()
                model = torch.nn.Linear(4, 1)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                model(torch.randn(8, 4)).sum().backward()
                optimizer.step()
                torch.save(model.state_dict(), "model.pt")


            if __name__ == "__main__":
                main()
        """,
    })
    script = tmp_path / "train.py"
    result = migrate(script.read_text(), context=FileContext.for_file(script))
    assert _codes(result) == ["DDP131"]


# -- DDP005: torch.distributed.launch scripts join the CPU loop (issue 12) -----------------------
LAUNCH_ERA = """\
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default={default})
args = parser.parse_args()
torch.cuda.set_device({device})
dist.init_process_group(backend="nccl")
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
{loader}
model = DDP(torch.nn.Linear(4, 1), device_ids=[{device}])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
torch.save(model.module.state_dict(), "model.pt")
"""
ONE_LOADER = "loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))"
TWO_LOADERS = (
    "if args.local_rank != -1:\n    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))\n"
    "else:\n    loader = DataLoader(data, batch_size=8, sampler=RandomSampler(data))"
)


def test_a_launch_era_script_joins_the_cpu_loop():
    result = migrate(LAUNCH_ERA.format(default=0, device="args.local_rank", loader=ONE_LOADER))
    code = result.code
    assert "if torch.cuda.is_available():\n    torch.cuda.set_device(args.local_rank)" in code
    assert 'backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"' in code
    assert "device_ids=[args.local_rank] if torch.cuda.is_available() else None" in code
    assert "    loader.sampler.set_epoch(epoch)\n    for x, y in loader:" in code
    assert 'if not dist.is_initialized() or dist.get_rank() == 0:\n    torch.save(' in code
    assert code.count("init_process_group") == 1  # its own setup, never a second one
    assert _codes(result) == ["DDP005", "DDP020"]
    assert migrate(code).code == code


def test_a_loader_built_in_a_branch_gets_no_set_epoch_but_a_report():
    result = migrate(LAUNCH_ERA.format(default=-1, device="args.local_rank", loader=TWO_LOADERS))
    assert "set_epoch" not in result.code  # the RandomSampler of the other branch has none
    assert "DDP130" in _codes(result)


def test_a_torchrun_era_script_is_left_alone():
    # --local_rank declared but never read; the device comes from the environment
    source = LAUNCH_ERA.format(default=0, device='int(__import__("os").environ["LOCAL_RANK"])', loader=ONE_LOADER)
    result = migrate(source)
    assert result.code == source
    assert "DDP005" not in _codes(result) and "DDP020" not in _codes(result)
