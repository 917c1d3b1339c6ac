"""DDP010: every training DataLoader gets a DistributedSampler, so each rank sees its own shard."""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from migrator.analysis import LoaderFact, ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories import CUSTOM_SAMPLER, ITERABLE_DATASET, UNTRACED_LOADER
from migrator.rules.process_group import needs_setup
from migrator.tree import parameter_names
from migrator.types import Change, Diagnostic

RULE = Rule(
    code="DDP010",
    name="distributed-sampler",
    summary="shard each training DataLoader across ranks with a DistributedSampler",
    what="""
A DataLoader whose batches reach a backward pass or an optimizer step (decided from the code:
the loop over it, a function it is passed to, `self.train_loader` in a Trainer, a helper that
returns it) gets `sampler=DistributedSampler(<its dataset>, shuffle=<its shuffle>)` and loses
`shuffle=`. With `**train_kwargs` the shuffle flag is taken out of the dict
(`train_kwargs.pop("shuffle", False)`), since DataLoader refuses both. Evaluation loaders stay
unsharded: every rank evaluates the whole set, so metrics stay right. Loaders built one per key in
a dict comprehension (`{x: DataLoader(data[x], ...) for x in ['train', 'val']}`) get the sampler
inside it, for the one key the training loop reads (a literal key, or `if phase == 'train':`
around every backward and step); the other keys keep their shuffle and stay whole. When the key
that trains cannot be told, the loaders are reported (DDP108).""",
    why="""
Without a sampler every rank trains on the whole dataset: an epoch costs N times the work, the
effective batch is N copies of the same samples, and the speed-up you migrated for never comes.""",
    fix="Insert `<name>_sampler = DistributedSampler(dataset, shuffle=...)` and pass it to the loader.",
    fix_safety="""Safe. DistributedSampler pads the last shard by repeating samples so every rank gets
the same number of batches; loaders with their own sampler, batch_sampler or an IterableDataset
are reported instead (DDP106, DDP107).""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="train-and-eval-loaders",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    train_set = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    val_loader = DataLoader(train_set, batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            val = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in val_loader)


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
    train_set = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train_sampler = DistributedSampler(train_set, shuffle=True)
    train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
    val_loader = DataLoader(train_set, batch_size=8)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            val = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in val_loader)


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="loaders-keyed-by-phase",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset

data = {x: TensorDataset(torch.randn(16, 4), torch.randn(16, 1)) for x in ['train', 'val']}
loaders = {x: DataLoader(data[x], batch_size=4, shuffle=True) for x in ['train', 'val']}
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for phase in ['train', 'val']:
        for x, y in loaders[phase]:
            loss = torch.nn.functional.mse_loss(model(x), y)
            if phase == 'train':
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

# torchrun starts one process per device and sets LOCAL_RANK for each.
local_rank = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local_rank)
backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
if "RANK" in os.environ:  # started by torchrun
    dist.init_process_group(backend=backend)
else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)

data = {x: TensorDataset(torch.randn(16, 4), torch.randn(16, 1)) for x in ['train', 'val']}
loaders = {x: DataLoader(data[x], batch_size=4, shuffle=True if x != 'train' else None, sampler=DistributedSampler(data[x], shuffle=True) if x == 'train' else None) for x in ['train', 'val']}
model = torch.nn.Linear(4, 1)
model = DDP(model, device_ids=None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for epoch in range(2):
        loaders['train'].sampler.set_epoch(epoch)
        for phase in ['train', 'val']:
            for x, y in loaders[phase]:
                loss = torch.nn.functional.mse_loss(model(x), y)
                if phase == 'train':
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
finally:
    dist.destroy_process_group()
''',
            diagnostics=("DDP120",),
        ),
    ),
)


def sampler_name(loader: LoaderFact, facts: ScriptFacts) -> str:
    """`train_loader` -> `train_sampler`; `loader` -> `sampler`; `self.train_loader` -> `train_sampler`."""
    base = (loader.target or "loader").split(".")[-1]
    for suffix in ("dataloader", "loader", "dl"):
        if base.endswith(suffix):
            return free_name(base[: -len(suffix)] + "sampler", facts, loader)
    name = f"{base}_sampler"
    return free_name(name, facts, loader)


def free_name(name: str, facts: ScriptFacts, loader: LoaderFact) -> str:
    """`name`, or `name2`, `name3`... when the loader's scope binds it already."""
    return _build.unbound(name, facts.local_names.get(loader.owner, frozenset()))


def shards(loader: LoaderFact) -> bool:
    return loader.training and loader.problem is None


def reads_distributed_sampler(facts: ScriptFacts, loader: LoaderFact) -> bool:
    """Does the migrated loader read a DistributedSampler: its own, or the one this rule writes (only
    where the loader is built after the setup: DistributedSampler asks the process group for the
    world size)? The one answer for the rules that then use the sampler (set_epoch)."""
    return shards(loader) and (loader.distributed_sampler or facts.after_setup(loader.call))


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for loader in facts.loaders:
        if loader.training and loader.problem is not None:
            _decline(facts, plan, loader)
        elif shards(loader) and not reads_distributed_sampler(facts, loader):
            # DistributedSampler asks the process group for the world size when it is built.
            line, col = facts.line_col(loader.call)
            message = (f"{loader.target or 'loader'}: built before the process group is set up (in code that runs "
                       f"before the setup), so it cannot get a DistributedSampler there; {UNTRACED_LOADER.summary}")
            plan.diagnostics.append(Diagnostic(UNTRACED_LOADER.code, line, col, message))
        elif shards(loader):
            _shard(facts, plan, loader)
    if not any(loader.training for loader in facts.loaders):
        # The model trains, yet no loader could be followed to the training loop (it went through
        # nested returns or into another module): a shuffled one is almost surely the training
        # data. Said, not guessed: each rank would otherwise read the whole data set unnoticed.
        said = False
        for loader in facts.loaders:
            if loader.problem is None and loader.shuffle is not None and _shuffles(loader.shuffle):
                line, col = facts.line_col(loader.call)
                message = f"{loader.target or 'loader'}: shuffled, but its path to the training loop could not be followed; {UNTRACED_LOADER.summary}"
                plan.diagnostics.append(Diagnostic(UNTRACED_LOADER.code, line, col, message))
                said = True
        if not said and facts.models:
            # Batches from tensors (`get_batch()`, `batchify`), a custom iterator or the whole data set
            # at once: correct under DDP, but every rank computes the same thing. Said, so nobody
            # expects a speed-up the migration did not deliver.
            line, col = facts.line_col(facts.models[0].optimizer_call)
            plan.diagnostics.append(Diagnostic(UNTRACED_LOADER.code, line, col, (
                "no DataLoader of this file feeds the training (batches come from tensors, a custom iterator "
                "or the whole data set): every rank trains on the same data; split it by dist.get_rank() by hand"
            )))


def _shuffles(shuffle: cst.Arg) -> bool:
    return not (isinstance(shuffle.value, cst.Name) and shuffle.value.value == "False")


def _decline(facts: ScriptFacts, plan: Plan, loader: LoaderFact) -> None:
    rule = {"sampler": CUSTOM_SAMPLER, "iterable": ITERABLE_DATASET}.get(loader.problem, UNTRACED_LOADER)
    line, col = facts.line_col(loader.call)
    plan.diagnostics.append(Diagnostic(rule.code, line, col, rule.summary))


def _shard(facts: ScriptFacts, plan: Plan, loader: LoaderFact) -> None:
    if loader.keys is not None:
        _shard_key(facts, plan, loader)
        return
    name = sampler_name(loader, facts)
    inserted: List[cst.BaseStatement] = []
    dataset = code_of(loader.dataset)
    if not isinstance(loader.dataset, (cst.Name, cst.Attribute)):
        # The sampler and the loader must share one dataset object: build it once.
        hoisted = free_name(name[: -len("sampler")] + "dataset" if name.endswith("sampler") else f"{name}_dataset", facts, loader)
        inserted += _build.statements(facts, f"{hoisted} = {dataset}\n")
        plan.replace(loader.dataset, lambda _: cst.Name(hoisted))
        dataset = hoisted
    shuffle = _shuffle_expr(loader)
    if _shuffle_is_parameter(loader):
        # `def create_dataloader(..., shuffle=True)` builds the evaluation loaders too (shuffle=False):
        # only the calls that shuffle, the training ones, get a sampler; the others stay whole.
        sampler = f"{facts.names.sampler}({dataset}) if {shuffle} else None"
    else:
        sampler = f"{facts.names.sampler}({dataset}, shuffle={shuffle})"
    inserted += _build.statements(facts, f"{name} = {sampler}\n")
    # The new lines join the loader's paragraph: its blank lines and comment move above them.
    inserted[0] = inserted[0].with_changes(leading_lines=loader.statement.leading_lines)
    plan.insert_before(loader.statement, inserted)
    plan.replace(loader.statement, lambda statement: statement.with_changes(leading_lines=()))
    plan.replace(loader.call, lambda call: _with_sampler(call, cst.Name(name)))
    for bound, loader_expr in loader.step_bounds:
        # A step count from the whole data set would call next() past this rank's shard (StopIteration).
        plan.replace(bound, lambda arg, loader_expr=loader_expr: arg.with_changes(
            value=cst.parse_expression(f"min({code_of(arg.value)}, len({loader_expr}))")))
        line, col = facts.line_col(bound)
        plan.changes.append(Change(RULE.code, line, col, f"steps per epoch capped at len({loader_expr}): one shard per rank"))
    if facts.names.sampler_import_needed:
        plan.need_import("torch.utils.data.distributed", "DistributedSampler")
    line, col = facts.line_col(loader.call)
    plan.changes.append(Change(RULE.code, line, col, f"{loader.target or 'loader'} sharded with a DistributedSampler"))


def _shard_key(facts: ScriptFacts, plan: Plan, loader: LoaderFact) -> None:
    """`{x: DataLoader(data[x], shuffle=True) for x in ['train', 'val']}`: the training key's loader
    gets the sampler, in the comprehension; the others keep their shuffle and stay whole."""
    keys = loader.keys
    assert keys is not None
    sampler = f"{facts.names.sampler}({code_of(loader.dataset)}, shuffle={_shuffle_expr(loader)})"
    shuffle = None
    if not keys.every:
        sampler = f"{sampler} if {keys.variable} == {keys.training} else None"
        if loader.shuffle is not None:
            # DataLoader refuses a sampler with shuffle=True; None is its own default.
            shuffle = cst.parse_expression(f"{code_of(loader.shuffle.value)} if {keys.variable} != {keys.training} else None")
    plan.replace(loader.call, lambda call: _with_sampler(call, cst.parse_expression(sampler), shuffle))
    if facts.names.sampler_import_needed:
        plan.need_import("torch.utils.data.distributed", "DistributedSampler")
    line, col = facts.line_col(loader.call)
    plan.changes.append(Change(RULE.code, line, col, f"{loader.target or 'loader'}[{keys.training}] sharded with a DistributedSampler"))


def _shuffle_is_parameter(loader: LoaderFact) -> bool:
    """`shuffle=shuffle`, a parameter of the helper function that builds the loader."""
    value = loader.shuffle.value if loader.shuffle is not None else None
    owner = loader.owner
    if not isinstance(value, cst.Name) or not isinstance(owner, cst.FunctionDef):
        return False
    return value.value in parameter_names(owner)


def _shuffle_expr(loader: LoaderFact) -> str:
    if loader.shuffle is not None:
        return code_of(loader.shuffle.value)
    if loader.kwargs_dict is not None:
        return f'{loader.kwargs_dict}.pop("shuffle", False)'
    return "False"


def _with_sampler(call: cst.Call, value: cst.BaseExpression, shuffle: Optional[cst.BaseExpression] = None) -> cst.Call:
    """shuffle=... becomes sampler=<value> in place (or, given `shuffle`, keeps that value and the
    sampler follows it); without shuffle, sampler goes before **kwargs or last."""
    args = list(call.args)
    sampler = _build.keyword_arg("sampler", value)
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "shuffle":
            if shuffle is None:
                args[index] = sampler.with_changes(comma=arg.comma, equal=arg.equal)
            else:
                comma = arg.comma if isinstance(arg.comma, cst.Comma) else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                args[index:index + 1] = [arg.with_changes(value=shuffle, comma=comma), sampler.with_changes(comma=arg.comma, equal=arg.equal)]
            return call.with_changes(args=args)
    star = next((i for i, arg in enumerate(args) if arg.star == "**"), None)
    if star is not None:
        args.insert(star, sampler.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    elif args and isinstance(args[-1].comma, cst.Comma) and len(args) > 1 and isinstance(args[-2].comma, cst.Comma):
        # One argument per line with a trailing comma: the new line looks like its neighbours.
        last = args[-1]
        args[-1] = last.with_changes(comma=args[-2].comma)
        args.append(sampler.with_changes(comma=last.comma))
    else:
        args.append(sampler)
    return call.with_changes(args=args)
