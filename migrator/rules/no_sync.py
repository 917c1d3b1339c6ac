"""DDP022: gradient accumulation under DDP: the backward passes that do not step skip the all-reduce.

DDP all-reduces gradients in every backward pass. In an accumulation loop
(`loss.backward()` every micro-batch, `if (i + 1) % accum == 0: optimizer.step()`) all but the
last all-reduce of each step are wasted communication. The forward and backward of the passes
that do not step run under `model.no_sync()` (DDP decides in the forward whether the backward
syncs, so the forward goes in too); the pass that steps runs under `contextlib.nullcontext()`
and syncs the accumulated gradients once.
"""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from migrator.analysis import ModelFact, ScriptFacts, code_of
from migrator.edits import Plan
from migrator.names import attribute_name
from migrator.rule import Example, Rule
from migrator.rules.process_group import needs_setup
from migrator.tree import descendants
from migrator.types import Change

RULE = Rule(
    code="DDP022",
    name="no-sync-accumulation",
    summary="gradient accumulation: the forward and backward passes that do not step run under model.no_sync()",
    what="""
In a training loop that steps the optimizer every N micro-batches
(`if (step + 1) % accum_steps == 0: optimizer.step()`, `scaler.step(optimizer)`), the statements
from the model's forward to the backward pass run under
`with model.no_sync() if not <the step condition> else contextlib.nullcontext():`.""",
    why="""
Every backward pass of a DDP model all-reduces the gradients across the processes. When only
every N-th pass is followed by a step, N-1 of those all-reduces are wasted bandwidth: gradients
accumulate locally under `no_sync()` and are all-reduced once, in the pass that steps.""",
    fix="The `with` above, around the forward and the backward of each micro-batch.",
    fix_safety="""
Safe: the optimizer sees the same averaged gradients. Left as it is (and reported, DDP122) when
the step condition depends on a counter the loop changes between the forward and the test, when
the forward, the backward and the test are not statements of the same loop body, or when several
models train there.""",
    requires=('DDP003',),
    fixable=True,
    examples=(
        Example(
            id="accumulate-four",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATE = 4


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATE
            loss.backward()
            if (i + 1) % ACCUMULATE == 0:
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import contextlib
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

ACCUMULATE = 4


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
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            with model.no_sync() if (i + 1) % ACCUMULATE != 0 else contextlib.nullcontext():
                loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATE
                loss.backward()
            if (i + 1) % ACCUMULATE == 0:
                optimizer.step()
                optimizer.zero_grad()


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
    for condition in facts.accumulation_steps:
        span = no_sync_span(facts, condition)
        if span is None:
            continue
        block, first, last, model = span
        def header(written: cst.CSTNode, expr: str = model.expr) -> str:
            # The test as the other rules left it: `model.hyperparams[...]` is `model.module.hyperparams[...]` by then.
            test = written.test if isinstance(written, cst.If) else condition.test  # type: ignore[attr-defined]
            return f"{expr}.no_sync() if {_negated(test)} else contextlib.nullcontext()"

        plan.with_block(block, first, last, header, condition)
        plan.need_import("contextlib")
        line, col = facts.line_col(first)
        plan.changes.append(Change(RULE.code, line, col, (
            f"micro-batches that do not step run under {model.expr}.no_sync(): gradients are all-reduced once per "
            "optimizer step, not at every backward pass"
        )))


def no_sync_span(facts: ScriptFacts, condition: cst.CSTNode) -> Optional[Tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode, ModelFact]]:
    """(the loop body, the first and the last statement to run under no_sync, the model), or None
    when the shape is not the plain one (DDP122 then says what to do)."""
    if not isinstance(condition, cst.If):
        return None
    models = [m for m in facts.models if not m.already_ddp]
    if len(models) != 1:
        return None
    model = models[0]
    block = facts.parents.get(condition)
    loop = facts.parents.get(block) if block is not None else None
    if not isinstance(block, cst.IndentedBlock) or not isinstance(loop, (cst.For, cst.While)):
        return None
    body = list(block.body)
    at = body.index(condition)
    backwards = [i for i, s in enumerate(body[:at]) if _has_backward(s)]
    if len(backwards) != 1 or any(_has_backward(s) for s in body[at + 1:]):
        return None
    last = backwards[0]
    name = model.expr
    first = next((i for i, s in enumerate(body[: last + 1]) if _mentions(s, name)), None)
    if first is None:
        return None  # the loop calls the model by another name (a helper's parameter): not this one's to say
    if any(isinstance(s, (cst.FunctionDef, cst.ClassDef)) for s in body[first : last + 1]):
        return None
    tested = {n.value for n in descendants(condition.test, cst.Name)}
    if tested & _assigned(body[first:at]):
        return None  # `step += 1` between the forward and the test: the test would be read at another count
    return block, body[first], body[last], model


def _has_backward(statement: cst.CSTNode) -> bool:
    return any(attribute_name(call.func) == "backward" for call in descendants(statement, cst.Call))


def _mentions(statement: cst.CSTNode, expr: str) -> bool:
    head = expr.split(".")[0]
    for node in descendants(statement, (cst.Name, cst.Attribute)):
        if code_of(node) == expr or (isinstance(node, cst.Name) and node.value == head and "." not in expr):
            return True
    return False


def _assigned(statements: List[cst.CSTNode]) -> Set[str]:
    names: Set[str] = set()
    for statement in statements:
        for node in descendants(statement, (cst.AssignTarget, cst.AugAssign)):
            target = node.target
            names |= {n.value for n in descendants(target, cst.Name)} | ({target.value} if isinstance(target, cst.Name) else set())
    return names


def _negated(test: cst.BaseExpression) -> str:
    """`(i + 1) % accum == 0` -> `(i + 1) % accum != 0`; anything else -> `not (...)`."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.comparisons[0].operator, cst.Equal):
        return f"{code_of(test.left)} != {code_of(test.comparisons[0].comparator)}"
    return f"not ({code_of(test)})"
