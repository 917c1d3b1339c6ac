"""DDP011: call sampler.set_epoch(epoch) at the top of the epoch loop that drives a sharded loader."""
from __future__ import annotations

from typing import Set, Tuple

import libcst as cst

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories import NO_EPOCH_LOOP
from migrator.rules.process_group import needs_setup
from migrator.rules.sampler import reads_distributed_sampler, sampler_name
from migrator.types import Change, Diagnostic

RULE = Rule(
    code="DDP011",
    name="set-epoch",
    summary="reshuffle every epoch: call sampler.set_epoch(epoch) at the top of the epoch loop",
    what="""
Finds the epoch loop that drives each sharded loader (the loop around the loop over it, or the
loop that calls the function iterating it, `train_one_epoch(model, loader, ...)` or
`self.train_epoch(epoch)`) and inserts `<sampler>.set_epoch(<epoch>)` as its first statement.
Where the sampler variable is not in reach, `<loader>.sampler.set_epoch(epoch)` is used. A loader
built on one branch of several (`if args.dataset == 'cifar10':`), whose sampler is not bound on
every path to the epoch loop, is asked first: `if isinstance(<loader>.sampler,
DistributedSampler):`, one call for all the branches.""",
    why="""
DistributedSampler shuffles with a seed derived from the epoch it is told. Without set_epoch every
epoch visits the samples in the same order: the model silently trains on a fixed ordering.""",
    fix="Insert the set_epoch call as the first statement of the epoch loop.",
    fix_safety="Safe.",
    requires=('DDP010',),
    fixable=True,
    examples=(
        Example(
            id="helper-function-loop",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def train_one_epoch(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        train_one_epoch(model, loader, optimizer)


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def train_one_epoch(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


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
    for epoch in range(3):
        sampler.set_epoch(epoch)
        train_one_epoch(model, loader, optimizer)


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    planned: Set[Tuple[cst.CSTNode, str]] = set()
    for loader in facts.loaders:
        if not reads_distributed_sampler(facts, loader) or _never_shuffles(loader):
            continue  # a loader left whole (DDP108 says why) has no set_epoch: RandomSampler has none
        if not loader.hooks:
            where = loader.no_epoch_loop or loader.call
            line, col = facts.line_col(where)
            plan.diagnostics.append(Diagnostic(NO_EPOCH_LOOP.code, line, col, NO_EPOCH_LOOP.summary))
            continue
        for hook in loader.hooks:
            guard = ""
            if facts.owner_of(hook.loop) is loader.owner and loader.target == hook.loader_expr:
                sampler = sampler_name(loader, facts)
                if not _runs_before(facts, loader.statement, hook.loop):
                    # Built in one branch (`if args.dataset == 'cifar10':`) of several: on the
                    # others the name is unbound, or the loader has no DistributedSampler.
                    sampler = f"{hook.loader_expr}.sampler"
                    guard = f"if isinstance({sampler}, {facts.names.sampler}):\n    "
            else:
                sampler = f"{hook.loader_expr}.sampler"
            if not isinstance(hook.loop.body, cst.IndentedBlock):
                continue  # `for epoch in range(n): train(epoch)` on one line: rare, left alone
            epoch = hook.epoch if hook.epoch is not None else f"{sampler}.epoch + 1"
            text = f"{guard}{sampler}.set_epoch({epoch})\n"
            if (hook.loop, text) in planned:
                continue  # two branches' loaders, one loop: one call
            planned.add((hook.loop, text))
            statement = _build.statements(facts, text)
            if hook.after is not None:
                plan.insert_after(hook.after, statement)  # a while loop's epoch counter was just advanced
            elif hook.before is not None:
                plan.insert_before(hook.before, statement)  # the loader restarts: a new pass, a new order
            else:
                plan.insert_before(hook.loop.body.body[0], statement)
            line, col = facts.line_col(hook.loop)
            plan.changes.append(Change(RULE.code, line, col, f"{sampler}.set_epoch({epoch}) at the start of each epoch"))


def _runs_before(facts: ScriptFacts, statement: cst.CSTNode, loop: cst.CSTNode) -> bool:
    """Does every path to `loop` run `statement` first: does the block holding it hold the loop?"""
    block = facts.block_of(statement)
    return block is not None and facts.inside(loop, block)


def _never_shuffles(loader) -> bool:
    value = loader.shuffle.value if loader.shuffle is not None else None
    return loader.kwargs_dict is None and (value is None or getattr(value, "value", None) == "False")
