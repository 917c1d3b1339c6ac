"""DDP106 loader-has-sampler and DDP107 iterable-dataset: training loaders a DistributedSampler cannot shard. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

CUSTOM_SAMPLER = Rule(
    code="DDP106",
    name="loader-has-sampler",
    summary="training loader has its own sampler/batch_sampler: left unsharded; shard it by rank yourself",
    what="""
A training DataLoader that already passes `sampler=` or `batch_sampler=` (a WeightedRandomSampler,
a bucketing batch sampler). The tool cannot combine it with a DistributedSampler, so it leaves it.""",
    why="Every rank would draw from the whole dataset: duplicated work, no speed-up.",
    fix="Give each rank its own slice (e.g. weights[rank::world_size]) or use a distributed version of the sampler.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="weighted-sampler",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    weights = torch.where(data.tensors[1] == 1, 4.0, 1.0)
    loader = DataLoader(data, batch_size=8, sampler=WeightedRandomSampler(weights, len(weights)))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler
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
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    weights = torch.where(data.tensors[1] == 1, 4.0, 1.0)
    loader = DataLoader(data, batch_size=8, sampler=WeightedRandomSampler(weights, len(weights)))
    model = torch.nn.Linear(4, 2)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=('DDP106',),
        ),
        Example(
            id="already-a-distributed-sampler",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group(backend="gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    # Its own sampler is a DistributedSampler: the loader is sharded already.
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
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

ITERABLE_DATASET = Rule(
    code="DDP107",
    name="iterable-dataset",
    summary="training loader reads an IterableDataset: shard it by rank inside __iter__",
    what="A training DataLoader over an `IterableDataset`, which a DistributedSampler cannot index.",
    why="Every rank would stream the same samples.",
    fix="Split the stream in `__iter__` with torch.distributed.get_rank() / get_world_size() (and the worker info).",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="iterable-dataset",
            before='''import torch
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        for _ in range(64):
            yield torch.randn(4), torch.randn(1)


def main():
    loader = DataLoader(Stream(), batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, IterableDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Stream(IterableDataset):
    def __iter__(self):
        for _ in range(64):
            yield torch.randn(4), torch.randn(1)


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
    loader = DataLoader(Stream(), batch_size=8)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=('DDP107',),
        ),
        Example(
            id="shards-by-rank-and-worker",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Shards(IterableDataset):
    """Streams the records; each (rank, worker) pair reads every n-th one."""

    def __init__(self, records):
        self.records = records
        # Read here, in the main process: DataLoader workers do not join the process group.
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()

    def __iter__(self):
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        start = self.rank * workers + worker_id
        yield from self.records[start::self.world_size * workers]


def main():
    dist.init_process_group(backend="gloo")
    records = [(torch.randn(4), torch.randn(1)) for _ in range(64)]
    loader = DataLoader(Shards(records), batch_size=8, num_workers=2)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
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

SPLIT_NOT_SHARED = Rule(
    code="DDP126",
    name="split-not-shared",
    summary="give that draw a generator seeded with one value on every rank (or seed its family first)",
    what="""
A random draw that decides which samples a loader reads (a split, a permutation or a shuffle of the
indices), from a generator nothing seeds before it, that DDP026 cannot give a generator of its own:
a function imported by its bare name (`from numpy.random import permutation`), or a draw inside
the training loader's own call, whose dataset the sampler rule builds again.""",
    why="""
Under torchrun each rank draws its own split: the ranks shard different training sets, samples
repeat or go unseen, and validation samples leak into training.""",
    fix="""Seed the draw with a value every rank shares: `np.random.RandomState(0).permutation(n)`,
`random_split(ds, lens, generator=torch.Generator().manual_seed(0))`, or seed its family
(`np.random.seed(args.seed)`) before it.""",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="permutation-imported-bare",
            before='''import torch
from numpy.random import permutation
from torch.utils.data import DataLoader, Subset, TensorDataset


def main():
    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
    order = permutation(80).tolist()
    loader = DataLoader(Subset(full, order[:64]), batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from numpy.random import permutation
from torch.utils.data import DataLoader, Subset, TensorDataset
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
    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
    order = permutation(80).tolist()
    dataset = Subset(full, order[:64])
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP126", "DDP120"),
        ),
    ),
)
