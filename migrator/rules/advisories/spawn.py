"""DDP117 spawn-not-migrated: an mp.spawn script `--spawn` leaves as it is, and why. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

SPAWN_NOT_MIGRATED = Rule(
    code="DDP117",
    name="spawn-not-migrated",
    summary="with --spawn: this script starts its workers in a way the tool cannot turn into torchrun's; the message says why",
    what="""
With `--spawn`, a script that starts its own workers but that the tool cannot make a torchrun
script of, left byte-for-byte as it is: `mp.spawn` only under a flag (`if
args.multiprocessing_distributed:`, with another way to train in the `else:`), in a loop, several
spawn calls, a lambda or a method as the worker, `join=False`, `args=` that is not a literal tuple,
workers started with `mp.Process`, a worker that trains nothing, a rank or world size the tool
cannot trace to the process index, one the script sets per environment (`if "SLURM_JOB_ID" in
os.environ: args.rank = ...`, several machines through its own rendezvous), or workers started
by another package's helper (`launch(main, num_gpus, ...)`). The message names the line and the
reason.""",
    why="""
Half a migration is worse than none: a script whose spawn is gone but whose rank still comes
from its own rendezvous joins the wrong process group, or trains every machine on the same data.
The script keeps working as it did, with `python train.py`.""",
    fix="""
Make the shape the message names plain (one unconditional `mp.spawn(worker, nprocs=n, args=(...))`
of a function of the file, the rank computed from the process index), then run `--spawn` again;
or start the workers under torchrun by hand: drop the spawn, call the worker with
`int(os.environ["LOCAL_RANK"])`, and let `init_process_group` read RANK and WORLD_SIZE.""",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="spawn-under-a-flag",
            options=(("spawn", True),),
            before='''import argparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(gpu, ngpus, args):
    if args.distributed:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=ngpus, rank=gpu)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed", action="store_true")
    args = parser.parse_args()
    ngpus = torch.cuda.device_count()
    if args.distributed:
        mp.spawn(worker, nprocs=ngpus, args=(ngpus, args))
    else:
        worker(0, 1, args)
''',
            diagnostics=("DDP117",),
        ),
        Example(
            id="lambda-worker",
            options=(("spawn", True),),
            before='''import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=world_size, rank=rank)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    mp.spawn(lambda rank: train(rank, 2), nprocs=2)
''',
            diagnostics=("DDP117",),
        ),
        Example(
            id="without-the-flag",
            fires=False,
            before='''import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=world_size, rank=rank)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    # Without --spawn a script that starts its own workers is distributed already: nothing to say.
    mp.spawn(lambda rank: train(rank, 2), nprocs=2)
''',
        ),
    ),
)
