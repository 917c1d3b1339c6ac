"""DDP130, DDP131: genuine bugs in code that is already distributed. Report only.

In a file that already runs several processes (migrator.analysis.distributed) the migration
changes only what torchrun needs; the other rules stay quiet. These two report what trains
wrong there all the same, each with the evidence in its message. Both prefer silence to a
guess: a `set_epoch` call anywhere in the file, a rank check around a save or around the call
that leads to it, a per-rank file name, or a framework that runs the processes keep them quiet.
"""
from __future__ import annotations

from migrator.analysis import ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.types import Diagnostic

MISSING_SET_EPOCH = Rule(
    code="DDP130",
    name="distributed-sampler-without-set-epoch",
    summary="an epoch loop over a DistributedSampler loader never calls set_epoch: every epoch repeats the same order",
    what="""
A training DataLoader reads a DistributedSampler, an epoch loop in this file iterates it, and
nothing in the file calls `set_epoch`.""",
    why="""
DistributedSampler shuffles with a seed plus its epoch, and the epoch only moves when
`set_epoch` is called: every epoch then visits the samples in the same order, on every rank.
The training converges worse than the single-process version and nothing says why.""",
    fix="Call `loader.sampler.set_epoch(epoch)` (or `sampler.set_epoch(epoch)`) first thing in the epoch loop.",
    fix_safety="Not fixed automatically in code that is already distributed: only what torchrun needs is changed there.",
    fixable=False,
    examples=(
        Example(
            id="epoch-loop-without-set-epoch",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
''',
            diagnostics=("DDP130",),
        ),
        Example(
            id="set-epoch-through-the-loader",
            fires=False,
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        if dist.is_initialized():
            loader.sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
''',
        ),
    ),
)

EVERY_RANK_SAVES = Rule(
    code="DDP131",
    name="every-rank-writes-checkpoint",
    summary="a checkpoint is written by every rank at once: they race on the same file",
    what="""
In code that already runs distributed, a `torch.save` that every rank reaches after the setup:
no rank check around it, around the call that leads to it, or an early return before it.""",
    why="""
All processes write the same path at the same moment. The file can end up truncated or mixed,
and on a shared file system the writes multiply the I/O by the world size for nothing.""",
    fix="Save under `if dist.get_rank() == 0:` (and `dist.barrier()` before others read it back).",
    fix_safety="Not fixed automatically in code that is already distributed: only what torchrun needs is changed there.",
    fixable=False,
    examples=(
        Example(
            id="save-on-every-rank",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    torch.save(model.module.state_dict(), "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
''',
            diagnostics=("DDP131",),
        ),
        Example(
            id="helper-called-on-rank-zero",
            fires=False,
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(model, path):
    torch.save(model.module.state_dict(), path)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(4, 1))
    torch.save(model.module.state_dict(), f"model_rank{rank}.pt")  # one file per rank, on purpose
    if rank == 0:
        save_checkpoint(model, "model.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
''',
        ),
    ),
)

RULES = (MISSING_SET_EPOCH, EVERY_RANK_SAVES)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    found = facts.distributed
    if found is None:
        return
    # What DDP005 fixed in a torch.distributed.launch script is not reported again.
    fixed = {(c.line, c.col) for c in plan.changes if c.code == "DDP005"}
    if not found.sets_epoch and not found.framework:
        _missing_set_epoch(facts, plan, fixed)
    for save, via in found.every_rank_saves:
        line, col = facts.line_col(save)
        if (line, col) in fixed:
            continue
        path = code_of(save.args[1].value) if len(save.args) > 1 else "the file"
        if via is None:
            where = "no rank check around it"
        else:
            where = f"it runs through the unguarded call `{_short(via)}` at line {facts.line_col(via)[0]}"
        plan.diagnostics.append(Diagnostic(EVERY_RANK_SAVES.code, line, col, (
            f"`torch.save` at line {line} runs on every rank after the setup ({where}): every process "
            f"writes `{path}` at once; save under `if dist.get_rank() == 0:`"
        )))


def _missing_set_epoch(facts: ScriptFacts, plan: Plan, fixed) -> None:
    for loader in facts.loaders:
        if not (loader.training and loader.distributed_sampler and loader.hooks):
            continue
        loop = loader.hooks[0].loop
        name = loader.target or "the training loader"
        line, col = facts.line_col(loop)
        if (line, col) in fixed:
            continue
        plan.diagnostics.append(Diagnostic(MISSING_SET_EPOCH.code, line, col, (
            f"`{name}` reads a DistributedSampler, but the epoch loop at line {line} (and the rest of the file) "
            f"never calls set_epoch: every epoch repeats the same order; call `{loader.hooks[0].loader_expr}.sampler.set_epoch(epoch)` "
            "at the top of the loop"
        )))


def _short(node) -> str:
    text = " ".join(code_of(node).split())
    return text if len(text) <= 50 else text[:47] + "..."
