"""DDP025: DataLoader workers scaled by the GPU count go back to one process's count."""
from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis import ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules.process_group import needs_setup
from migrator.types import Change

RULE = Rule(
    code="DDP025",
    name="per-process-workers",
    summary="DataLoader workers multiplied by the GPU count: under torchrun each process starts its own",
    what="""
`opt.workers *= torch.cuda.device_count()`, `workers = workers * n_gpu` (with `n_gpu` bound to
the GPU count) and `num_workers = args.workers * n_gpu` lose the multiplication in a file being
migrated: the count the user asked for is what each process starts. The same multiplication of a
batch size is left to DDP019/DDP120, which keep the global batch.""",
    why="""
Under DataParallel one process fed every GPU, so scripts multiplied the loader workers by the
GPU count. Under torchrun there is one process per GPU and each starts its own workers: on 8 GPUs
the multiplied count starts 64 workers per process, 512 in all, which runs out of shared memory
or file handles and starves the CPUs.""",
    fix="Drop the multiplication by the GPU count (the statement, when it only rescales the name).",
    fix_safety="Safe: each process loads for one GPU, as each of DataParallel's GPUs was fed before.",
    requires=("DDP001",),
    fixable=True,
    examples=(
        Example(
            id="workers-times-gpus",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def main(workers=2):
    n_gpu = torch.cuda.device_count()
    workers *= max(n_gpu, 1)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=workers)
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
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def main(workers=2):
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    n_gpu = torch.cuda.device_count()
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=workers)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
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
        ),
        Example(
            id="workers-not-scaled",
            fires=False,
            before='''import torch

workers = 4 * 2
threads = torch.cuda.device_count() * 2
''',
            after=None,
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for statement, target, other in gpu_count_scalings(facts, "worker"):
        if other is None or code_of(other) == target:  # `x *= n_gpu`, `x = x * n_gpu`: only rescales x
            plan.replace(statement, lambda updated, alone=_alone(facts, statement): (
                updated.with_changes(body=[cst.Pass()]) if alone else cst.RemoveFromParent()))
        else:  # `num_workers = args.workers * n_gpu`
            plan.replace(statement.body[0].value, lambda _, other=other: other)
        line, col = facts.line_col(statement)
        plan.changes.append(Change(RULE.code, line, col, (
            f"`{target}` no longer multiplied by the GPU count: each torchrun process starts its own workers")))


def _alone(facts: ScriptFacts, statement: cst.SimpleStatementLine) -> bool:
    """A block may not become empty: a statement alone in it becomes `pass`."""
    block = facts.parents.get(statement)
    return isinstance(block, cst.IndentedBlock) and len(block.body) == 1


def gpu_count_scalings(facts: ScriptFacts, word: str) -> List[Tuple[cst.SimpleStatementLine, str, Optional[cst.BaseExpression]]]:
    """(statement, target, the other factor) for assignments to a name containing `word` that
    multiply by the GPU count: the call, a name bound to it, `max(n_gpu, 1)` or `(n_gpu or 1)`
    (the other factor is None for `x *= n_gpu`). DataParallel's way to keep the per-GPU batch
    (`batch_size *= torch.cuda.device_count()`), or to feed every GPU from one process
    (`opt.workers = opt.workers * opt.num_gpu`)."""
    counts = facts.calls_of(frozenset({"torch.cuda.device_count"}))
    if not counts:
        return []
    names = {code_of(call) for call in counts}  # the call itself, and the names it is kept in
    for call in counts:
        names.update(code_of(target) for target in facts.index._statement_of_call.get(call, ()))
    found = []
    for target, statement in facts.index.assignments:
        small = statement.body[0]
        if word not in target.split(".")[-1].lower():
            continue
        if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.MultiplyAssign):
            if _is_gpu_count(small.value, names):
                found.append((statement, target, None))
        elif isinstance(small, cst.Assign) and isinstance(small.value, cst.BinaryOperation) and isinstance(small.value.operator, cst.Multiply):
            left, right = small.value.left, small.value.right
            if _is_gpu_count(right, names) or _is_gpu_count(left, names):
                found.append((statement, target, left if _is_gpu_count(right, names) else right))
    return found


def _is_gpu_count(node: cst.BaseExpression, names) -> bool:
    """The GPU count, or a name bound to it, also as `max(n_gpu, 1)` and `(n_gpu or 1)`."""
    if code_of(node) in names:
        return True
    if isinstance(node, cst.Call) and N.is_name(node.func, "max"):
        return any(code_of(arg.value) in names for arg in node.args)
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or):
        return code_of(node.left) in names
    return False
