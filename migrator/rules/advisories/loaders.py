"""DDP108 untraced-loader and DDP109 no-epoch-loop: loaders the sampler and set_epoch rules cannot follow. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

UNTRACED_LOADER = Rule(
    code="DDP108",
    name="untraced-loader",
    summary="training loader the tool cannot trace (built in an expression, a lambda, or elsewhere): shard it by hand",
    what="""
A DataLoader the tool cannot follow from where it is built to the loop that trains on it; also a
migrated script whose training no DataLoader of the file feeds at all (`get_batch()` slices of a
tensor, a custom iterator, full-batch training): every rank then trains on the same data.""",
    why="A loader that trains but is not sharded makes every rank repeat the same work.",
    fix="Assign the loader to a variable, or add `sampler=DistributedSampler(dataset)` yourself.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="loader-in-a-dict",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loaders = {"train": DataLoader(data, batch_size=8, shuffle=True)}
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loaders["train"]:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loaders = {"train": DataLoader(data, batch_size=8, shuffle=True)}
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loaders["train"]:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=('DDP108',),
        ),
        Example(
            id="lightning-shards-the-loader",
            before='''import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    # Lightning adds a DistributedSampler to this loader itself under the "ddp" strategy.
    loader = DataLoader(data, batch_size=8, shuffle=True)
    trainer = L.Trainer(max_epochs=2, strategy="ddp", accelerator="auto", devices="auto")
    trainer.fit(Regressor(), loader)
''',
            fires=False,
        ),
        Example(
            id="sharded-loader-from-a-helper",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def build_loader(batch_size):
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    return DataLoader(data, batch_size=batch_size, sampler=DistributedSampler(data))


def main():
    dist.init_process_group(backend="gloo")
    # Built by a helper: the sharding is there, in build_loader().
    loader = build_loader(batch_size=8)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
''',
            fires=False,
        ),
    ),
)

NO_EPOCH_LOOP = Rule(
    code="DDP109",
    name="no-epoch-loop",
    summary="no epoch loop drives this sharded loader: call sampler.set_epoch(...) whenever a new pass starts",
    what="""
The loader was sharded but no pass over it could be tied to an epoch: it is not iterated inside a
`for epoch in ...` loop, a `while` loop (whose turns, or `cur_epochs += 1` counter, are the
epochs), or restarted with `iter(loader)` on `StopIteration` (each restart is a pass): a single
pass, an iterator drawn from by a step loop, or a loop in another function called from a `while`.""",
    why="Without set_epoch the DistributedSampler repeats the same order on every pass.",
    fix="Count passes over the loader and call `loader.sampler.set_epoch(pass_index)` before each one.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="one-pass-iterator",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = iter(loader)
    for step in range(20):
        x, y = next(batches)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = iter(loader)
    for step in range(min(20, len(loader))):
        x, y = next(batches)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=('DDP109',),
        ),
        Example(
            id="set-epoch-on-each-new-iterator",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group(backend="gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # Step-based: each time the iterator runs out, a new pass starts with its own shuffle.
    passes = 0
    batches = iter(loader)
    for step in range(100):
        try:
            x, y = next(batches)
        except StopIteration:
            passes += 1
            sampler.set_epoch(passes)
            batches = iter(loader)
            x, y = next(batches)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
''',
            fires=False,
        ),
    ),
)
