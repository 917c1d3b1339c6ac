"""DDP014 / DDP015: after wrapping, the model's own API and its checkpoints go through `.module`."""
from __future__ import annotations

from typing import List, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis import ModelFact, ModelUse, ScriptFacts
from migrator.analysis.helpers import code_of
from migrator.edits import Plan
from migrator.names import NN_MODULE_API, STATE_DICT_METHODS, STRUCTURE_METHODS
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.process_group import needs_setup
from migrator.types import Change

CHECKPOINT_KEYS = Rule(
    code="DDP014",
    name="checkpoint-keys",
    summary="keep checkpoints loadable by the original code: state_dict()/load_state_dict() through .module",
    what="""
A script that saved `model.state_dict()` on one GPU now saves `model.module.state_dict()`, so the
keys carry no `module.` prefix and the original code still loads them; loading goes through
`model.module.load_state_dict(...)` likewise, and `torch.save(model, f)` saves `model.module`, as
does a model pickled inside a dict (`state = {"net": net}; torch.save(state, f)`), in DataParallel
scripts too: a pickled DDP wrapper cannot be loaded without a process group.
A DataParallel script keeps its `module.`-prefixed keys exactly as before (DDP's wrapper has the
same prefix), also when a later move (`if args.half: model.half()`) puts the wrap below its
checkpoint load: that load then runs on the bare module and drops the prefix as it reads
(`{k.removeprefix("module."): v for k, v in sd.items()}`), so the script resumes from its old
checkpoints and its new ones alike, and whatever else loads them still can. Where the keys
depended on the device or the GPU count (`if device == "cuda": net = nn.DataParallel(net)`), the
unwrapped module's keys are saved, and a load that followed that DataParallel, which read prefixed
keys on one branch and bare ones on the other, now runs before the wrap and drops the prefix as it
reads: the old checkpoints of either branch and the new ones all load. Every `torch.load` gets `map_location` (the script's device, or
"cpu") so each rank loads onto its own device instead of the GPU the checkpoint was saved from.""",
    why="""
Keys prefixed with `module.` make `load_state_dict` fail with "Missing key(s)" in the original
evaluation or inference code; without map_location every rank loads the checkpoint onto GPU 0.""",
    fix="Insert `.module` before state_dict/load_state_dict on the wrapped model; add map_location.",
    fix_safety="Safe.",
    requires=('DDP003',),
    fixable=True,
    examples=(
        Example(
            id="save-and-load",
            before='''import torch


def main():
    model = torch.nn.Linear(4, 1)
    model.load_state_dict(torch.load("pretrained.pt"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    torch.save(model.state_dict(), "final.pt")


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
    model = torch.nn.Linear(4, 1)
    model.load_state_dict(torch.load("pretrained.pt", map_location="cpu"))
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "final.pt")


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="dataparallel-load-before-a-late-move",
            before='''import os

import torch


def main():
    model = torch.nn.DataParallel(torch.nn.Linear(4, 1))
    if os.path.isfile("last.pt"):
        model.load_state_dict(torch.load("last.pt")["state_dict"])
    if os.environ.get("HALF"):
        model.half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        torch.save({"state_dict": model.state_dict()}, "last.pt")


if __name__ == "__main__":
    main()
''',
            after='''import os

import torch
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
    model = torch.nn.Linear(4, 1)
    if os.path.isfile("last.pt"):
        model.load_state_dict({k.removeprefix("module."): v for k, v in torch.load("last.pt", map_location="cpu")["state_dict"].items()})
    if os.environ.get("HALF"):
        model.half()
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"state_dict": model.state_dict()}, "last.pt")


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="dataparallel-on-gpu-only-resumes",
            before='''import os

import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
net = torch.nn.Linear(4, 1).to(device)
if device == "cuda":
    net = torch.nn.DataParallel(net)
if os.path.isfile("ckpt.pth"):
    checkpoint = torch.load("ckpt.pth")
    net.load_state_dict(checkpoint["net"])
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)
for epoch in range(2):
    for (x,) in loader:
        optimizer.zero_grad()
        net(x.to(device)).sum().backward()
        optimizer.step()
    torch.save({"net": net.state_dict()}, "ckpt.pth")
''',
            after='''import os

import torch
from torch.utils.data import DataLoader, TensorDataset
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

device = "cuda" if torch.cuda.is_available() else "cpu"
net = torch.nn.Linear(4, 1).to(device)
if os.path.isfile("ckpt.pth"):
    checkpoint = torch.load("ckpt.pth", map_location=device)
    net.load_state_dict({k.removeprefix("module."): v for k, v in checkpoint["net"].items()})
net = DDP(net, device_ids=[local_rank] if torch.cuda.is_available() else None)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
dataset = TensorDataset(torch.randn(16, 4))
sampler = DistributedSampler(dataset, shuffle=True)
if 4 % dist.get_world_size() and dist.get_rank() == 0:  # the global batch is split over the processes
    print("batch size %d does not split evenly over %d processes: each loads %d, a global batch of %d" % (4, dist.get_world_size(), max(1, 4 // dist.get_world_size()), max(1, 4 // dist.get_world_size()) * dist.get_world_size()))
loader = DataLoader(dataset, batch_size=max(1, 4 // dist.get_world_size()), sampler=sampler)
try:
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            optimizer.zero_grad()
            net(x.to(device)).sum().backward()
            optimizer.step()
        if dist.get_rank() == 0:
            torch.save({"net": net.module.state_dict()}, "ckpt.pth")
finally:
    dist.destroy_process_group()
''',
        ),
        Example(
            id="model-pickled-in-a-dict",
            before='''import torch


def main():
    net = torch.nn.DataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        net(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        state = {"net": net, "epoch": epoch}
        torch.save(state, "ckpt.t7")


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
    net = DDP(torch.nn.Linear(4, 1), device_ids=None)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        net(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        state = {"net": net.module, "epoch": epoch}
        if dist.get_rank() == 0:
            torch.save(state, "ckpt.t7")


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

MODULE_API = Rule(
    code="DDP015",
    name="module-api",
    summary="reach the model's own methods and attributes through .module after wrapping",
    what="""
After `model = DDP(model)`, `model.encode(x)`, `model.num_classes` or `model.generate(...)` go
through `model.module`. nn.Module's own API (`train`, `eval`, `parameters`, `to`, `zero_grad`, ...)
and DDP's (`no_sync`, `join`) stay on the wrapper, except the questions about the model's structure
that the wrapper answers differently (`children()` would yield the whole model, `named_parameters()`
names gain a `module.` prefix, `get_submodule("fc")` fails): those go through `.module` too. A
name that may hold the wrapped model or a plain module (`net = average` on one branch and
`net = model` on the other, a helper handed either) asks which it holds:
`(net.module if isinstance(net, DDP) else net).sample(n)`. In a DataParallel script the code
already saw a wrapper, and stays as it is.""",
    why="DistributedDataParallel does not forward attribute access: `model.encode` raises AttributeError.",
    fix="Insert `.module` before the attribute.",
    fix_safety="Safe. Calling a custom method through .module bypasses DDP's forward hooks, exactly as the original did.",
    requires=('DDP003',),
    fixable=True,
    examples=(
        Example(
            id="custom-method",
            before='''import torch
import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 2)
        self.embedding_dim = 2

    def forward(self, x):
        return self.proj(x)

    def encode(self, x):
        return self.proj(x).detach()


def main():
    model = Encoder()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    print(model.embedding_dim, model.encode(torch.randn(1, 4)))


if __name__ == "__main__":
    main()
''',
            after='''import torch
import torch.nn as nn
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 2)
        self.embedding_dim = 2

    def forward(self, x):
        return self.proj(x)

    def encode(self, x):
        return self.proj(x).detach()


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
    model = Encoder()
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(model.module.embedding_dim, model.module.encode(torch.randn(1, 4)))


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="structure-questions",
            before='''import torch
import torch.nn as nn

if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    head = list(model.children())[-1]
    names = [name for name, _ in model.named_parameters()]
''',
            after='''import torch
import torch.nn as nn
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
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for step in range(3):
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
        head = list(model.module.children())[-1]
        names = [name for name, _ in model.module.named_parameters()]
    finally:
        dist.destroy_process_group()
''',
        ),
        Example(
            id="handed-on-by-helpers",
            before='''import torch
import torch.nn as nn


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos_emb = nn.Embedding(16, 4)
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(self.pos_emb(x))


def show_sample(model):
    context_size = model.pos_emb.weight.shape[0]
    print("context", context_size)


def train(model, optimizer, steps):
    for step in range(steps):
        model(torch.arange(8)).sum().backward()
        optimizer.step()
    show_sample(model)


def main():
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, optimizer, 3)


if __name__ == "__main__":
    main()
''',
            after='''import torch
import torch.nn as nn
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos_emb = nn.Embedding(16, 4)
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        return self.head(self.pos_emb(x))


def show_sample(model):
    context_size = model.module.pos_emb.weight.shape[0]
    if dist.get_rank() == 0:
        print("context", context_size)


def train(model, optimizer, steps):
    for step in range(steps):
        model(torch.arange(8)).sum().backward()
        optimizer.step()
    show_sample(model)


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
    model = TinyLM()
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, optimizer, 3)


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


def plan_checkpoint_keys(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for use in facts.model_uses:
        if use.node.attr.value in STATE_DICT_METHODS and _keys_change(use.model):
            plan.replace(use.node, lambda n, use=use: _through_module(facts, use, n))
            choice = facts.parents.get(facts.parents.get(use.node))  # type: ignore[arg-type]
            if isinstance(choice, cst.IfExp):
                # `net.module.state_dict() if args.mGPUs else net.state_dict()`: both branches now agree.
                plan.replace(choice, _one_branch_if_same)
            line, col = facts.line_col(use.node)
            plan.changes.append(Change(CHECKPOINT_KEYS.code, line, col, f"{use.node.attr.value}() through .module: keys as before"))
    for name, model in facts.bare_unwraps:
        if _keys_change(model):
            plan.replace(name, lambda n, model=model: unwrapped(facts, model, n))
            line, col = facts.line_col(name)
            plan.changes.append(Change(CHECKPOINT_KEYS.code, line, col, f"{name.value} unwrapped like its other branch"))
    for name, model in facts.returned_models:
        if _keys_change(model):
            # Returned once training is over (the process group is destroyed on the way out): the caller
            # saves or evaluates it as the plain module it was before the migration.
            plan.replace(name, lambda n, model=model: unwrapped(facts, model, n))
            line, col = facts.line_col(name)
            plan.changes.append(Change(CHECKPOINT_KEYS.code, line, col, f"{name.value} returned unwrapped (.module) to the caller"))
    for arg, model in whole_model_saves(facts):
        # Always the bare module, DataParallel scripts included: a pickled DDP wrapper cannot be
        # loaded without a process group (a pickled DataParallel could).
        plan.replace(arg, lambda a, model=model: a.with_changes(value=unwrapped(facts, model, a.value)))
        line, col = facts.line_col(arg)
        plan.changes.append(Change(CHECKPOINT_KEYS.code, line, col, "the unwrapped model is saved"))
    for model in facts.models:
        for call in model.bare_loads:
            # Runs on the bare model now, before the wrap: the keys it reads (the script's own
            # checkpoints, old and new) carry DataParallel's `module.` prefix.
            plan.replace(call, _accepting_prefixed_keys)
            line, col = facts.line_col(call)
            plan.changes.append(Change(CHECKPOINT_KEYS.code, line, col, "load_state_dict() before the wrap accepts the module.-prefixed keys"))
    for call, device in facts.torch_loads:
        location = device or '"cpu"'
        plan.replace(call, lambda c, location=location: _build.with_keyword(c, "map_location", location))
        line, col = facts.line_col(call)
        plan.changes.append(Change(CHECKPOINT_KEYS.code, line, col, f"torch.load(..., map_location={location})"))


def plan_module_api(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for use in facts.model_uses:
        attr = use.node.attr.value
        if _wrapped_before(use.model) or attr in STATE_DICT_METHODS:
            continue
        if attr in STRUCTURE_METHODS:
            what = f"{attr}() asked of the model, not of its wrapper: through .module"
        elif attr in NN_MODULE_API:
            continue
        else:
            what = f"{attr} is the model's own: through .module"
        if use.maybe:
            what += " where it holds the wrapper (it may hold a plain module too)"
        plan.replace(use.node, lambda n, use=use: _through_module(facts, use, n))
        line, col = facts.line_col(use.node)
        plan.changes.append(Change(MODULE_API.code, line, col, what))
    if any(not model.already_ddp and model.wrap_after is not None for model in facts.models):
        for call in facts.calls:
            if wrapper_test(call, facts.parents.get(call), facts.resolve):
                _widen_wrapper_test(facts, plan, call)


def wrapper_test(call: cst.Call, parent, resolve) -> bool:
    """`if isinstance(net, nn.DataParallel): net = net.module`: the test of a multi-GPU wrapper whose
    `.module` holds the model (an EMA helper's, a checkpoint writer's). DDP is such a wrapper too.
    Only a test (`if`, conditional expression), not a call whose answer is kept."""
    if not (isinstance(call.func, cst.Name) and call.func.value == "isinstance" and len(call.args) == 2):
        return False
    if not (isinstance(parent, (cst.If, cst.IfExp)) and parent.test is call):
        return False
    return resolve(call.args[1].value) in N.DATAPARALLEL


def _widen_wrapper_test(facts: ScriptFacts, plan: Plan, call: cst.Call) -> None:
    ddp = facts.names.ddp
    plan.replace(call, lambda updated: updated.with_changes(args=[
        updated.args[0], updated.args[1].with_changes(value=_build.expression(facts, f"({code_of(updated.args[1].value)}, {ddp})"))]))
    plan.need_import("torch.nn.parallel", "DistributedDataParallel", ddp if ddp != "DistributedDataParallel" else None)
    line, col = facts.line_col(call)
    plan.changes.append(Change(MODULE_API.code, line, col, "`isinstance(..., DataParallel)` unwraps DDP's `.module` too"))


def _accepting_prefixed_keys(call: cst.Call) -> cst.Call:
    """`m.load_state_dict(sd)` -> `m.load_state_dict({k.removeprefix("module."): v for k, v in sd.items()})`."""
    first = call.args[0]
    source = cst.Module(body=[]).code_for_node(first.value)
    if not isinstance(first.value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)):
        source = f"({source})"
    value = cst.parse_expression(f'{{k.removeprefix("module."): v for k, v in {source}.items()}}')
    return call.with_changes(args=[first.with_changes(value=value), *call.args[1:]])


def _keys_change(model) -> bool:
    """A DataParallel script's keys already had `module.`: DDP keeps them. Otherwise unwrap."""
    return model.dataparallel is None or model.dataparallel.conditional is not None


def _wrapped_before(model) -> bool:
    """Under DataParallel the script already had to say `model.module.x`."""
    return model.dataparallel is not None and model.dataparallel.conditional is None


def _one_branch_if_same(node: cst.IfExp) -> cst.BaseExpression:
    same = cst.Module(body=[]).code_for_node(node.body) == cst.Module(body=[]).code_for_node(node.orelse)
    return node.body.with_changes(lpar=node.lpar, rpar=node.rpar) if same else node


def _through_module(facts: ScriptFacts, use: ModelUse, node: cst.Attribute) -> cst.Attribute:
    return node.with_changes(value=unwrapped(facts, use.model, node.value, maybe=use.maybe))


def unwrapped(facts: ScriptFacts, model: ModelFact, node: cst.BaseExpression, maybe: bool = False) -> cst.BaseExpression:
    """The bare module that `node` reads: `model.module`; for a model wrapped only when it has
    parameters to train (ModelFact.guarded), or a name that may hold a plain module too
    (ModelUse.maybe), `(criterion.module if isinstance(criterion, DDP) else criterion)`."""
    if not (model.guarded or maybe):
        return cst.Attribute(value=node, attr=cst.Name("module"))
    code = cst.Module(body=[]).code_for_node(node)
    return cst.parse_expression(f"({code}.module if isinstance({code}, {facts.names.ddp}) else {code})")


def whole_model_saves(facts: ScriptFacts) -> List[Tuple[cst.CSTNode, ModelFact]]:
    """`torch.save(model, f)` and `state = {"net": net, ...}; torch.save(state, f)` after the wrap:
    the pickled object (an Arg or a DictElement) must be the bare module, since a pickled DDP
    cannot be loaded without a process group. The model is the wrapped one wherever it is read
    (migrator.graph.flow: a helper's parameter, an alias), one edit per saved object."""
    wrapped = [m for m in facts.models if not m.already_ddp and m.wrap_after is not None]
    found: List[Tuple[cst.CSTNode, ModelFact]] = []
    for call in facts.calls_of(N.TORCH_SAVE) if wrapped else ():
        for holder in [*call.args[:1], *_pickled_dict_elements(facts, call)]:
            model = next((model for model in wrapped if facts.flow.holds_wrapped(model, holder.value)), None)
            if model is not None and all(holder is not h for h, _ in found):
                found.append((holder, model))
    return found


def _pickled_dict_elements(facts: ScriptFacts, call: cst.Call) -> List[cst.BaseElement]:
    """The items of the dict, list or tuple torch.save writes: a display, or the one last assigned
    to the name it saves (the bindings that name reads there)."""
    displays = (cst.Dict, cst.List, cst.Tuple)
    value = call.args[0].value if call.args else None
    if isinstance(value, cst.Name):
        assigned = [b for b in facts.index.refers.get(value, ()) if isinstance(b.value, displays) and not b.path]
        value = max(assigned, key=lambda b: b.position).value if assigned else value
    if not isinstance(value, displays):
        return []
    return [element for element in value.elements if isinstance(element, (cst.DictElement, cst.Element))]
