"""DDP116: a wrapped model moved to another device or dtype, or its trainable parameters changed, while it trains."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules.process_group import needs_setup
from migrator.types import Diagnostic

# Calls on the DDP wrapper that move or retype its parameters. `.to(device)` and `.cuda()` are left
# out: after the wrap they are almost always no-ops (the model is already there).
MOVES = frozenset({"cpu", "half", "double", "bfloat16"})

RULE = Rule(
    code="DDP116",
    name="moved-after-wrap",
    summary="the DDP-wrapped model is moved, retyped or has what trains changed while it trains; DDP's buckets stay as they were when it was wrapped",
    what="""
A call such as `model.eval().cpu()` (to save CPU tensors, then `model.to(device).train()`) or
`model.half()` on the model inside a loop after it was wrapped in DistributedDataParallel, in a
migrated file. After the loop (a final `model.cpu()` before saving) nothing trains any more, and
nothing is said.

Also a change to which of its parameters train made after the wrap while it still trains: inside
the training loop (`if epoch == 5: for p in model.backbone.parameters(): p.requires_grad = True`),
or before a later training loop. Changes before training starts (a frozen trunk, a new head, a
`--freeze` branch) move the wrap below them instead; these have no such place.""",
    why="""
DDP builds its gradient buckets for the parameters' device and dtype when it wraps the model;
moving or retyping them afterwards is unsupported and can stop the ranks from staying in sync.
Saving does not need a move: `model.module.state_dict()` can be copied to the CPU instead. DDP also
registers the parameters that require grad when it is built: one frozen afterwards is still waited
for (`Expected to have finished reduction in the prior iteration`), one unfrozen afterwards is never
synchronised between the ranks.""",
    fix=("Save `{k: v.cpu() for k, v in model.module.state_dict().items()}` without moving the model, or retype it before the wrap; "
         "after a change of what trains, wrap `model.module` in DDP again."),
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="cpu-round-trip-to-save",
            before='''import torch


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.Adam(model.parameters())
    for step in range(4):
        model(torch.randn(2, 4, device=device)).sum().backward()
        optimizer.step()
        if step % 2 == 0:
            model.eval().cpu()
            torch.save(model.state_dict(), "checkpoint.pth")
            model.to(device).train()


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


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
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters())
    for step in range(4):
        model(torch.randn(2, 4, device=device)).sum().backward()
        optimizer.step()
        if step % 2 == 0:
            model.eval().cpu()
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "checkpoint.pth")
            model.to(device).train()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP116",),
        ),
        Example(
            id="mode-toggles-in-the-loop",
            before='''import torch


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters())
    for epoch in range(4):
        model.train()
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        # eval() and train() switch modes (dropout, batch norm); they move nothing.
        model.eval()
        with torch.no_grad():
            print(epoch, model(torch.randn(8, 4, device=device)).mean().item())


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


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
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1)).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters())
    for epoch in range(4):
        model.train()
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        # eval() and train() switch modes (dropout, batch norm); they move nothing.
        model.eval()
        with torch.no_grad():
            model_result = model(torch.randn(8, 4, device=device)).mean().item()
            if dist.get_rank() == 0:
                print(epoch, model_result)


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            fires=False,
        ),
        Example(
            id="unfreezes-while-training",
            before='''import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    model.body.requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(4):
        if epoch == 2:  # unfreeze the body for the last epochs
            for p in model.body.parameters():
                p.requires_grad = True
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


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
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    model.body.requires_grad_(False)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(4):
        if epoch == 2:  # unfreeze the body for the last epochs
            for p in model.module.body.parameters():
                p.requires_grad = True
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP116",),
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for use in facts.model_uses:
        if use.model.already_ddp:
            continue
        moved = _move_in_chain(facts, use.node)
        if moved is not None and _in_a_loop(facts, moved):
            # Inside the loop that trains: the next steps run on moved parameters. After the last
            # step (`model.cpu()` before a final save) nothing trains any more.
            line, col = facts.line_col(moved)
            plan.diagnostics.append(Diagnostic(
                RULE.code, line, col,
                f"`{facts.module.code_for_node(moved)}()` while training: {RULE.summary.split('; ', 1)[1]}",
            ))
    for model in facts.models:
        if model.already_ddp or model.definition is None:
            continue
        for change in model.parameters_changed_later:
            line, col = facts.line_col(change)
            plan.diagnostics.append(Diagnostic(
                RULE.code, line, col,
                f"`{facts.module.code_for_node(change)}` changes which parameters of {model.expr} train after it is wrapped: "
                "DDP keeps reducing the parameters that required grad when it was built; wrap it again after the change, by hand",
            ))


def _in_a_loop(facts: ScriptFacts, node: cst.CSTNode) -> bool:
    current = facts.parents.get(node)
    while current is not None and not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Module)):
        if isinstance(current, (cst.For, cst.While)):
            return True
        current = facts.parents.get(current)
    return False


# nn.Module methods that return the module itself: `model.eval().cpu()` still moves the model.
_CHAINABLE = frozenset({"train", "eval", "to", "cuda", "float", "requires_grad_", "zero_grad"})


def _move_in_chain(facts: ScriptFacts, attribute: cst.Attribute) -> Optional[cst.Attribute]:
    """`model.cpu()`, or the `.cpu` of `model.eval().cpu()`."""
    current = attribute
    while True:
        if current.attr.value in MOVES:
            return current
        if current.attr.value not in _CHAINABLE:
            return None
        call = facts.parents.get(current)
        outer = facts.parents.get(call) if isinstance(call, cst.Call) else None
        if not isinstance(outer, cst.Attribute) or outer.value is not call:
            return None
        current = outer
