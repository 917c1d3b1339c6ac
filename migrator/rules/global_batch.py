"""DDP019: keep the global batch (`--batch global`): a sharded training loader's batch_size is
split over the processes.

nn.DataParallel splits one batch of `batch_size` over the GPUs; under DDP every process loads its
own `batch_size`. A DataParallel script migrated as it is trains with an N times larger global
batch at the same learning rate: a different optimisation. `--batch global` (the default for a
DataParallel script) divides each sharded training loader's batch_size by the world size, and
stops at start-up with a clear message when it does not divide; `--batch per-process` (the
default for a single-GPU script, where a larger global batch is usually the point of scaling out)
keeps it and reports DDP120 with the factor. Gradient-accumulation steps are kept either way.
"""
from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from migrator.analysis import LoaderFact, ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.process_group import needs_setup
from migrator.rules.sampler import shards
from migrator.types import Change

_DATAPARALLEL_SCRIPT = '''import torch
from torch.utils.data import DataLoader, TensorDataset


def main(batch_size=32):
    model = torch.nn.DataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=batch_size, shuffle=True)
    for epoch in range(2):
        for (x,) in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''

GLOBAL = "global"
PER_PROCESS = "per-process"

RULE = Rule(
    code="DDP019",
    name="global-batch",
    summary="keep the global batch: a sharded training loader's batch_size is divided by the world size",
    what="""
With `--batch global` (the default for a DataParallel script, or `batch = "global"` in
[tool.ddp-migrate]), each training DataLoader that gets a DistributedSampler loads
`batch_size // world_size` samples per process (at least one). A world that does not divide the
batch (128 on 3 GPUs) is never refused: each process loads 42, and rank 0 says so once at start-up,
with the global batch that results (126). A batch size given by a name, an attribute, a
subscript or a number is split where the loader is built; one in a `**loader_kwargs` dict is split
in the call. `--batch per-process` (the default for a single-GPU script) leaves batch_size alone
and reports DDP120.""",
    why="""
DataParallel's batch already was the global one: it split `batch_size` over the GPUs. Under DDP
every process loads `batch_size`, so without the split one optimizer step sees N times the
samples at the same learning rate and an epoch has N times fewer steps: the migrated run
optimises something else than the original.""",
    fix="`batch_size=max(1, args.batch_size // dist.get_world_size())`; rank 0 says the global batch when the world does not divide it.",
    fix_safety="""
Safe: the global batch, the number of steps per epoch and the learning rate's meaning stay as
they were (the last partial batch may differ by the sampler's padding). A batch size computed by
an expression is reported (DDP120), not split.""",
    requires=('DDP010',),
    fixable=True,
    examples=(
        Example(
            id="dataparallel-batch-stays-global",
            before=_DATAPARALLEL_SCRIPT,
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def main(batch_size=32):
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    model = DDP(torch.nn.Linear(4, 1), device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = TensorDataset(torch.randn(64, 4))
    sampler = DistributedSampler(dataset, shuffle=True)
    if batch_size % dist.get_world_size() and dist.get_rank() == 0:  # the global batch is split over the processes
        print("batch size %d does not split evenly over %d processes: each loads %d, a global batch of %d" % (batch_size, dist.get_world_size(), max(1, batch_size // dist.get_world_size()), max(1, batch_size // dist.get_world_size()) * dist.get_world_size()))
    loader = DataLoader(dataset, batch_size=max(1, batch_size // dist.get_world_size()), sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="per-process-on-request",
            before=_DATAPARALLEL_SCRIPT,
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def main(batch_size=32):
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    model = DDP(torch.nn.Linear(4, 1), device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = TensorDataset(torch.randn(64, 4))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            options=(("batch", "per-process"),),
            diagnostics=("DDP120",),
            fires=False,
        ),
    ),
)


def batch_mode(facts: ScriptFacts, plan: Plan) -> Tuple[str, str]:
    """The mode for this script, and why (for the messages)."""
    if plan.batch is not None:
        return plan.batch, f"--batch {plan.batch}"
    if dataparallel_script(facts):
        return GLOBAL, "the default for a DataParallel script: its batch already was the global one"
    return PER_PROCESS, "the default for a single-GPU script"


def dataparallel_script(facts: ScriptFacts) -> bool:
    return any(model.dataparallel is not None or model.stripped for model in facts.models)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    mode, why = batch_mode(facts, plan)
    if mode != GLOBAL:
        return
    for loader in facts.loaders:
        if shards(loader) and facts.after_setup(loader.call):
            _split(facts, plan, loader, why)


def splittable(loader: LoaderFact) -> Optional[str]:
    """How the loader's batch size is given: "keyword", "positional", "kwargs" (in its `**dict`), or
    None when it cannot be split (DataLoader's default of 1, or an expression evaluated twice)."""
    argument = batch_argument(loader.call)
    if argument is not None:
        return ("keyword" if argument.keyword is not None else "positional") if plain_value(argument.value) else None
    if loader.kwargs_dict is not None:
        return "kwargs"
    return None


def batch_argument(call: cst.Call) -> Optional[cst.Arg]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "batch_size":
            return arg
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    return positional[1] if len(positional) > 1 else None


def plain_value(value: cst.BaseExpression) -> bool:
    """Safe to evaluate twice (the check and the split): a name, an attribute, a number, `cfg["bs"]`."""
    if isinstance(value, (cst.Name, cst.Integer)):
        return True
    if isinstance(value, cst.Attribute):
        return plain_value(value.value)
    if isinstance(value, cst.Subscript):
        return plain_value(value.value) and all(
            isinstance(element.slice, cst.Index) and isinstance(element.slice.value, (cst.SimpleString, cst.Integer, cst.Name))
            for element in value.slice
        )
    return False


def _split(facts: ScriptFacts, plan: Plan, loader: LoaderFact, why: str) -> None:
    how = splittable(loader)
    if how is None:
        return  # reported by DDP120 (migrator.rules.caveats), with the reason
    dist = facts.names.dist
    world = f"{dist}.get_world_size()"
    if how == "kwargs":
        kwargs = loader.kwargs_dict
        size = f'{kwargs}.get("batch_size", 1)'
        plan.replace(loader.call, lambda call: _split_kwargs(call, kwargs, size, world))
    else:
        size = code_of(batch_argument(loader.call).value)  # type: ignore[union-attr]
        plan.replace(loader.call, lambda call: _split_argument(call, world))
    # Never refused: a world that does not divide the batch rounds down per process (every rank
    # still runs the same number of steps), and rank 0 says the global batch that results.
    per_process = f"max(1, {size} // {world})"
    check = (
        f"if {size} % {world} and {dist}.get_rank() == 0:  # the global batch is split over the processes\n"
        f"\tprint(\"batch size %d does not split evenly over %d processes: each loads %d, a global batch of %d\""
        f" % ({size}, {world}, {per_process}, {per_process} * {world}))\n"
    )
    plan.insert_before(loader.statement, _build.statements(facts, check))
    line, col = facts.line_col(loader.call)
    plan.changes.append(Change(RULE.code, line, col, (
        f"{loader.target or 'loader'}: batch size {size} kept as the global batch, "
        f"{size} // world_size per process ({why})"
    )))


def _split_argument(call: cst.Call, world: str) -> cst.Call:
    argument = batch_argument(call)
    args = list(call.args)
    index = next(i for i, arg in enumerate(args) if arg is argument)
    value = cst.parse_expression(f"max(1, {code_of(argument.value)} // {world})")  # type: ignore[union-attr]
    args[index] = args[index].with_changes(value=value)
    return call.with_changes(args=args)


def _split_kwargs(call: cst.Call, kwargs: str, size: str, world: str) -> cst.Call:
    args = list(call.args)
    for index, arg in enumerate(args):
        if arg.star == "**" and code_of(arg.value) == kwargs:
            split = cst.parse_expression(f'{{**{kwargs}, "batch_size": max(1, {size} // {world})}}')
            args[index] = arg.with_changes(value=split)
    return call.with_changes(args=args)
