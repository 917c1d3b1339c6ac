"""DDP121 sharded evaluation, DDP124 rank-divergent code: where the ranks stop agreeing. Report only
(plan() in the package)."""
from __future__ import annotations

from migrator.rule import Example, Rule

EVAL_SHARDED = Rule(
    code="DDP121",
    name="sharded-evaluation",
    summary="an evaluation loader reads a DistributedSampler: metrics cover one shard (all_reduce them) and padding repeats samples",
    what="A loader that does not train but gets its samples from a DistributedSampler.",
    why="""
Each rank then evaluates its own shard: rank 0's accuracy is not the accuracy of the whole set,
and DistributedSampler pads the last shard with repeated samples, which counts some twice.""",
    fix="""All-reduce the metric sums and counts (`dist.all_reduce(t, op=dist.ReduceOp.SUM)`), and
drop the padding (or evaluate unsharded, as the migration does for the loaders it rewrites).""",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="sharded-val-loader",
            before='''import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def evaluate(model, dataset):
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, shuffle=False))
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct / len(dataset)
''',
            diagnostics=("DDP121",),
        ),
        Example(
            id="metrics-all-reduced",
            before='''import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def evaluate(model, dataset):
    # Each rank scores its own shard; the counts are summed over all ranks before dividing.
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, shuffle=False))
    counts = torch.zeros(2)
    with torch.no_grad():
        for x, y in loader:
            counts[0] += (model(x).argmax(1) == y).sum()
            counts[1] += len(y)
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


if __name__ == "__main__":
    dist.init_process_group(backend="gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    accuracy = evaluate(torch.nn.Linear(4, 2), data)
    if dist.get_rank() == 0:
        print(f"accuracy {accuracy:.3f}")
    dist.destroy_process_group()
''',
            fires=False,
        ),
        Example(
            id="training-loader",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group(backend="gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    # A DistributedSampler on the *training* loader: this is what it is for.
    train_sampler = DistributedSampler(data, shuffle=True)
    train_loader = DataLoader(data, batch_size=8, sampler=train_sampler)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
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


RANK_DIVERGENCE = Rule(
    code="DDP124",
    name="rank-divergent-code",
    summary="code every rank must run (a forward, a collective) sits behind a rank check: the other ranks will hang",
    what="An `if` on the rank (`if rank == 0:`, `if dist.get_rank() == 0:`) whose body runs the wrapped model or a collective.",
    why="""
Collectives, and DDP's forward (which may sync buffers), wait for every rank. Run on rank 0
only, they wait forever for the others.""",
    fix="Compute on every rank; keep only the printing or saving of the result under the rank check.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="barrier-on-rank-zero",
            before='''import torch
import torch.distributed as dist


def finish(rank):
    if rank == 0:
        dist.barrier()
        print("done")
''',
            diagnostics=("DDP124",),
        ),
        Example(
            id="every-rank-calls-the-collective",
            before='''"""comm.py: helpers for code that runs on every rank."""
import torch.distributed as dist


def gather(data, dst=0):
    """Every rank's `data` in a list on rank `dst`; [] on the others."""
    if dist.get_world_size() == 1:
        return [data]
    rank = dist.get_rank()
    # Both branches call the collective: every rank takes part, only the arguments differ.
    if rank == dst:
        output = [None] * dist.get_world_size()
        dist.gather_object(data, output, dst=dst)
        return output
    else:
        dist.gather_object(data, None, dst=dst)
        return []
''',
            fires=False,
        ),
        Example(
            id="is-this-run-distributed",
            before='''import argparse

import torch
import torch.distributed as dist


def average(value, args):
    t = torch.tensor([value], dtype=torch.float64)
    # "Is this run distributed?": -1 only without a launcher, the same answer on every rank.
    if args.local_rank != -1:
        dist.all_reduce(t)
        t /= dist.get_world_size()
    return t.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    args = parser.parse_args()
    if args.local_rank != -1:
        dist.init_process_group(backend="gloo")
    print(average(1.0, args))
''',
            after='''import argparse

import torch
import torch.distributed as dist
import os


def average(value, args):
    t = torch.tensor([value], dtype=torch.float64)
    # "Is this run distributed?": -1 only without a launcher, the same answer on every rank.
    if args.local_rank != -1:
        dist.all_reduce(t)
        t /= dist.get_world_size()
    return t.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))
    args = parser.parse_args()
    if args.local_rank != -1:
        dist.init_process_group(backend="gloo")
    print(average(1.0, args))
''',
            fires=False,
        ),
    ),
)
