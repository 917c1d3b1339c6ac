"""DDP004: destroy the process group when training ends, also when it raises."""
from __future__ import annotations

import libcst as cst

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.process_group import needs_setup
from migrator.types import Change

RULE = Rule(
    code="DDP004",
    name="destroy-process-group",
    summary="destroy the process group at the end of the entry point, also when training raises",
    what="""
Runs the training entry point in `try:` and calls `destroy_process_group()` in `finally:`.
In a flat script or a main-guard body the `try:` starts at the training loop, so the
definitions above it keep their indentation.
When the entry point is a function, its call in the main guard is wrapped (so the function
body is not re-indented) and the call is guarded by `dist.is_initialized()`, since the
function may exit before the setup ran (argparse's --help, a bad argument).""",
    why="""
A process that exits with its process group alive leaks communicator resources; NCCL warns
about it and, when one rank raised, the others can hang at exit instead of stopping.""",
    fix="Wrap the entry point's call (or the rest of the guard/module body) in try/finally.",
    fix_safety="Safe: only adds cleanup after training.",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="guard-body",
            before='''import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

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
    try:
        model = torch.nn.Linear(4, 2)
        model = DDP(model, device_ids=None)
        optimizer = torch.optim.Adam(model.parameters())
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    finally:
        dist.destroy_process_group()
''',
        ),
    ),
)

DESTROY = "{dist}.destroy_process_group()\n"
DESTROY_IF_INITIALIZED = "if {dist}.is_initialized():\n\t{dist}.destroy_process_group()\n"


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts) or facts.has_destroy_process_group or facts.entry.kind == "caller":
        return  # the calling script that set the group up tears it down
    entry = facts.entry
    dist = facts.names.dist
    if entry.kind == "function":
        final = _build.statements(facts, DESTROY_IF_INITIALIZED, dist=dist)
        plan.replace(entry.call_statement, lambda stmt: _try_finally(stmt, final))
        where = entry.call_statement
    else:
        # From the training loop on: the definitions above it need no cleanup and keep their indentation.
        plan.try_finally_from(entry.block, entry.training, _build.statements(facts, DESTROY, dist=dist))
        where = entry.training
    line, col = facts.line_col(where)
    plan.changes.append(Change(RULE.code, line, col, "process group destroyed when training ends (try/finally)"))


def _try_finally(statement: cst.BaseStatement, final) -> cst.Try:
    return cst.Try(
        body=cst.IndentedBlock(body=[statement.with_changes(leading_lines=())]),
        finalbody=cst.Finally(body=cst.IndentedBlock(body=final)),
        leading_lines=statement.leading_lines,
    )
