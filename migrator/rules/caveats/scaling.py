"""DDP120 global batch, DDP122 gradient accumulation, DDP123 BatchNorm: what a migration changes in
the optimisation itself. Report only (plan() in the package)."""
from __future__ import annotations

from migrator.rule import Example, Rule

_TRAIN = '''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        micro = 0
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y) / 4
            loss.backward()
            micro += 1
            if micro % 4 == 0:
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    main()
'''

_TRAIN_MIGRATED = '''import torch
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
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        micro = 0
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y) / 4
            loss.backward()
            micro += 1
            if micro % 4 == 0:
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
'''

GLOBAL_BATCH = Rule(
    code="DDP120",
    name="global-batch-size",
    summary="the global batch is now batch_size x world_size: scale the learning rate or divide the batch",
    what="""
Reported at every training loader the migration shards whose batch_size stays per process:
with `--batch per-process` (the default for a single-GPU script), or when `--batch global` (the
default for a DataParallel script, DDP019) cannot split it (a batch size computed inline,
DataLoader's default of 1). Also where a DataParallel-era script multiplies its batch size by the
GPU count (`batch_size * torch.cuda.device_count()`) and the batch stays per process, which under
DDP makes every process's batch that large.""",
    why="""
Each of N processes takes `batch_size` samples per step, so one optimizer step now sees N times
as many samples and an epoch has N times fewer steps. With the old learning rate and schedule
the model trains differently than before.""",
    fix="""Either keep the global batch (`--batch global`, or pass `batch_size // world_size` yourself)
or scale the learning rate (linear scaling: `lr * world_size`, with warmup) and shorten step-based
schedules.""",
    fix_safety="Not fixable automatically: it is a training decision.",
    informational=True,
    fixable=False,
    examples=(
        Example(id="sharded-loader", before=_TRAIN, after=_TRAIN_MIGRATED, diagnostics=("DDP120",)),
        Example(
            id="batch-times-gpu-count",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    batch_size = 16
    num_gpu = torch.cuda.device_count()
    if num_gpu > 1:
        batch_size = batch_size * num_gpu
    model = torch.nn.DataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=batch_size, shuffle=True)
    for epoch in range(2):
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

if __name__ == "__main__":
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    batch_size = 16
    num_gpu = torch.cuda.device_count()
    if num_gpu > 1:
        batch_size = batch_size * num_gpu
    model = DDP(torch.nn.Linear(4, 1), device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = TensorDataset(torch.randn(64, 4))
    sampler = DistributedSampler(dataset, shuffle=True)
    if batch_size % dist.get_world_size() and dist.get_rank() == 0:  # the global batch is split over the processes
        print("batch size %d does not split evenly over %d processes: each loads %d, a global batch of %d" % (batch_size, dist.get_world_size(), max(1, batch_size // dist.get_world_size()), max(1, batch_size // dist.get_world_size()) * dist.get_world_size()))
    loader = DataLoader(dataset, batch_size=max(1, batch_size // dist.get_world_size()), sampler=sampler)
    try:
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for (x,) in loader:
                model(x).sum().backward()
                optimizer.step()
    finally:
        dist.destroy_process_group()
''',
            fires=False,  # a DataParallel script: --batch global splits the product again (DDP019)
        ),
        Example(
            id="batch-size-per-process",
            before='''import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    # Already per process: the global batch is batch_size x world_size, and the script says so.
    parser.add_argument("--batch-size", type=int, default=16, help="samples per process and step")
    args = parser.parse_args()
    dist.init_process_group(backend="gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
    for epoch in range(2):
        sampler.set_epoch(epoch)
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


ACCUMULATION = Rule(
    code="DDP122",
    name="gradient-accumulation-no-sync",
    summary="gradient accumulation: wrap the non-stepping backward passes in model.no_sync()",
    what="An optimizer step taken every N micro-batches (`if (step + 1) % accum_steps == 0:`).",
    why="""
DDP all-reduces gradients in every backward pass. When only every N-th pass is followed by a
step, the other N-1 all-reduces are wasted bandwidth: correct, but slower than it needs to be.""",
    fix="Run the forward and backward passes that do not step under `with model.no_sync():`.",
    fix_safety="""Fixed automatically in the plain shape (DDP022: the step condition tests the loop's own
counter, and the forward, the backward and the test are statements of one loop body); reported
here when the loop's structure differs, as when a counter moves between the backward and the test.""",
    informational=True,
    fixable=False,
    examples=(
        Example(id="every-fourth-step", before=_TRAIN, after=_TRAIN_MIGRATED, diagnostics=("DDP122",)),
        Example(
            id="update-every-second-step",
            fires=False,
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, shuffle=True)
    generator, critic = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    g_optimizer = torch.optim.Adam(generator.parameters())
    d_optimizer = torch.optim.Adam(critic.parameters())
    for epoch in range(2):
        for i, (x,) in enumerate(loader):
            d_loss = critic(generator(x).detach()).mean() - critic(x).mean()
            d_optimizer.zero_grad()
            d_loss.backward()
            d_optimizer.step()
            # The generator's whole update runs every second step: nothing accumulates.
            if (i + 1) % 2 == 0:
                g_loss = -critic(generator(x)).mean()
                g_optimizer.zero_grad()
                g_loss.backward()
                g_optimizer.step()


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
    dataset = TensorDataset(torch.randn(64, 4))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    generator, critic = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    generator = DDP(generator, device_ids=None)
    critic = DDP(critic, device_ids=None)
    g_optimizer = torch.optim.Adam(generator.parameters())
    d_optimizer = torch.optim.Adam(critic.parameters())
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for i, (x,) in enumerate(loader):
            d_loss = critic(generator(x).detach()).mean() - critic(x).mean()
            d_optimizer.zero_grad()
            d_loss.backward()
            d_optimizer.step()
            # The generator's whole update runs every second step: nothing accumulates.
            if (i + 1) % 2 == 0:
                g_loss = -critic(generator(x)).mean()
                g_optimizer.zero_grad()
                g_loss.backward()
                g_optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="no-sync-on-accumulating-passes",
            before='''import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

ACCUMULATE = 4


def main():
    dist.init_process_group(backend="gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            stepping = (step + 1) % ACCUMULATE == 0
            # The passes that do not step skip DDP's all-reduce.
            with contextlib.nullcontext() if stepping else model.no_sync():
                loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATE
                loss.backward()
            if stepping:
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

SYNC_BATCHNORM = Rule(
    code="DDP123",
    name="sync-batchnorm",
    summary="BatchNorm sees only this process's part of the batch: consider nn.SyncBatchNorm.convert_sync_batchnorm(model)",
    what="The model uses BatchNorm layers.",
    why="""
Under DDP each BatchNorm normalises with the statistics of its own process's samples. With a
small per-GPU batch those statistics get noisy; SyncBatchNorm computes them over all processes.""",
    fix="`model = nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping the model in DDP (CUDA only).",
    fix_safety="Not fixable automatically: SyncBatchNorm costs a collective per layer and only runs on CUDA.",
    informational=True,
    fixable=False,
    examples=(
        Example(id="batchnorm1d", before=_TRAIN, after=_TRAIN_MIGRATED, diagnostics=("DDP123",)),
        Example(
            id="converted-before-the-wrap",
            before='''import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    # BatchNorm statistics over all processes' samples, converted before the wrap.
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model).cuda()
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        x, y = torch.randn(8, 4).cuda(), torch.randint(0, 2, (8,)).cuda()
        nn.functional.cross_entropy(model(x), y).backward()
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
