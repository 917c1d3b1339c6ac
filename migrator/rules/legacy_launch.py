"""DDP005: a script written for `python -m torch.distributed.launch` joins the CPU loop.

Such a script is already distributed (its own init_process_group and DDP), so the migration
leaves its setup alone, except for what stops it from running on a CPU under
`torchrun --nproc_per_node=2` like every migrated script does: an unconditional
`torch.cuda.set_device(...)`, the "nccl" backend, DDP's `device_ids=`/`output_device=`. The two
genuine bugs of such scripts are fixed too where the fix cannot change anything else: a missing
`sampler.set_epoch(epoch)` (DDP130 otherwise) and a checkpoint every rank writes (DDP131
otherwise). Scripts of the torchrun era (no `--local_rank`) are never touched here.
"""
from __future__ import annotations

import libcst as cst

from migrator.analysis import ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.types import Change

RULE = Rule(
    code="DDP005",
    name="legacy-launch-cpu",
    summary="a torch.distributed.launch script runs on CPU too: set_device only with CUDA, the CPU-capable backend, device_ids only on CUDA",
    what="""
In a script written for `python -m torch.distributed.launch` (it declares `--local_rank` and sets
up its own process group): `torch.cuda.set_device(x)` outside any CUDA check goes under
`if torch.cuda.is_available():`; an `init_process_group` backend of "nccl" becomes
`"cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"`; DDP's `device_ids=[x]` and
`output_device=x` become `... if torch.cuda.is_available() else None`; a device built for CUDA
alone (`torch.device("cuda", args.local_rank)`, `torch.device(f"cuda:{args.local_rank}")`) becomes
`... if torch.cuda.is_available() else torch.device("cpu")`. With no `set_epoch` anywhere,
`loader.sampler.set_epoch(epoch)` goes first in the epoch loop of a loader built once with a
DistributedSampler; a `torch.save` statement every rank reaches runs on rank 0 only.""",
    why="""
Every other migrated script trains on a laptop under `torchrun --nproc_per_node=2` (gloo), which is
how people debug before they rent GPUs; these calls stop a legacy script there with a CUDA
error ("Torch not compiled with CUDA enabled"). The two bugs train silently wrong (the same order every epoch) or race on one file.""",
    fix="The edits above; nothing else in the setup changes.",
    fix_safety="Safe: on a CUDA machine every edited expression evaluates to what it was before.",
    fixable=True,
    examples=(
        Example(
            id="nccl-and-set-device",
            before='''import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()

torch.cuda.set_device(args.local_rank)
dist.init_process_group(backend="nccl")
model = torch.nn.Linear(4, 1).to(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
model = DDP(model, device_ids=[args.local_rank], output_device=args.local_rank)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 4, device=next(model.parameters()).device)).sum().backward()
optimizer.step()
dist.destroy_process_group()
''',
            after='''import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
args = parser.parse_args()

if torch.cuda.is_available():
    torch.cuda.set_device(args.local_rank)
dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
model = torch.nn.Linear(4, 1).to(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
model = DDP(model, device_ids=[args.local_rank] if torch.cuda.is_available() else None, output_device=args.local_rank if torch.cuda.is_available() else None)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 4, device=next(model.parameters()).device)).sum().backward()
optimizer.step()
dist.destroy_process_group()
''',
        ),
        Example(
            id="torchrun-era-script",
            fires=False,
            before='''import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# Written for torchrun (no --local_rank): its setup is its own business.
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group(backend="nccl")
model = DDP(torch.nn.Linear(4, 1).cuda(), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 4).cuda()).sum().backward()
optimizer.step()
dist.destroy_process_group()
''',
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    found = facts.distributed
    legacy = found.legacy if found is not None else None
    if legacy is None:
        return
    cuda = f"{facts.names.torch}.cuda.is_available()"
    for statement in legacy.set_device:
        plan.guard(statement, cuda)
        _change(facts, plan, statement, "set_device only when CUDA is available")
    for literal in legacy.nccl:
        backend = cst.parse_expression(f'{literal.quote}cpu:gloo,cuda:nccl{literal.quote} if {cuda} else {literal.quote}gloo{literal.quote}')
        plan.replace(literal, lambda _, new=backend: new)
        _change(facts, plan, literal, 'backend "cpu:gloo,cuda:nccl" with CUDA, "gloo" without')
    for call in legacy.cuda_devices:
        plan.replace(call, lambda node: cst.parse_expression(
            f'{code_of(node)} if {cuda} else {facts.names.torch}.device("cpu")'))
        _change(facts, plan, call, "the CUDA device only with CUDA, the CPU without")
    for value in legacy.device_args:
        plan.replace(value, lambda node: cst.parse_expression(f"{code_of(node)} if {cuda} else None"))
        _change(facts, plan, value, "DDP's device argument only on CUDA")
    _fix_set_epoch(facts, plan, found)
    _fix_every_rank_saves(facts, plan, found)


def _fix_set_epoch(facts: ScriptFacts, plan: Plan, found) -> None:
    if found.sets_epoch:
        return
    for loader in facts.loaders:
        if not (loader.training and loader.distributed_sampler and loader.hooks) or _built_conditionally(facts, loader.statement):
            continue
        hook = loader.hooks[0]
        if hook.epoch is None or not isinstance(hook.loop.body, cst.IndentedBlock):
            continue  # reported as DDP130 instead
        plan.insert_before(hook.loop.body.body[0], _build.statements(facts, f"{hook.loader_expr}.sampler.set_epoch({hook.epoch})\n"))
        _change(facts, plan, hook.loop, f"{hook.loader_expr}.sampler.set_epoch({hook.epoch}) added: a new order every epoch")


def _fix_every_rank_saves(facts: ScriptFacts, plan: Plan, found) -> None:
    dist = facts.names.dist
    for save, via in found.every_rank_saves:
        call = via or save
        statement = _bare_statement(facts, call)
        if statement is None:
            continue  # reported as DDP131 instead
        # The single-process path of such scripts (`--local_rank -1`) never initialises the group.
        plan.guard(statement, f"not {dist}.is_initialized() or {dist}.get_rank() == 0")
        if facts.names.dist_import_needed:
            plan.need_import("torch.distributed", asname="dist")
        _change(facts, plan, save, "checkpoint written on rank 0 only")


def _bare_statement(facts: ScriptFacts, call: cst.Call):
    statement = facts.parents.get(facts.parents.get(call))
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Expr) and small.value is call:
            return statement
    return None


def _built_conditionally(facts: ScriptFacts, statement) -> bool:
    """`if args.distributed: loader = DataLoader(..., sampler=DistributedSampler(ds))` `else: ...`:
    the loop also runs with the other loader, whose sampler has no set_epoch."""
    node = facts.parents.get(statement)
    while node is not None and node is not facts.owner_of(statement):
        if isinstance(node, (cst.If, cst.Else, cst.Try)):
            return True
        node = facts.parents.get(node)
    return False


def _change(facts: ScriptFacts, plan: Plan, node, message: str) -> None:
    line, col = facts.line_col(node)
    plan.changes.append(Change(RULE.code, line, col, message))
