"""DDP002: each process uses its own GPU (cuda:local_rank), or the CPU when there is no CUDA."""
from __future__ import annotations

import libcst as cst

from migrator.analysis import CudaCall, DeviceLiteral, GpuIndex, HelperDevice, ScriptFacts
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories import CUDA_CALL_LEFT
from migrator.rules.process_group import needs_setup
from migrator.types import Change, Diagnostic

RULE = Rule(
    code="DDP002",
    name="per-rank-device",
    summary="use this process's GPU (cuda:local_rank) or the CPU, never a fixed GPU",
    what="""
Rewrites the script's device to this process's GPU: `torch.device("cuda")`, `"cuda:0"` and
`"cuda" if torch.cuda.is_available() else "cpu"` become `f"cuda:{local_rank}"` with a CPU
fallback (a device string the script compares with `"cuda"` stays `"cuda"`: after `set_device`
it is this process's GPU, and `if device == "cuda":` stays true); unconditional `x.cuda()` / `x.cuda(0)` become `x.to(device)`. A GPU the script picks by index
(`torch.cuda.set_device(args.gpu)`, `"cuda:{}".format(args.gpu)`) becomes `local_rank`, and an
`os.environ["CUDA_VISIBLE_DEVICES"] = ...` runs only when the script is not started by torchrun
(whose caller picks the GPUs). A device a helper the file cannot see into returns
(`device, ids = prepare_device(n_gpu)`, which may pick `cuda:0` on every rank) becomes this
process's GPU right after it is bound, when it is a GPU; a CPU device it returns stays, and DDP's
`device_ids` follow it. Calls already guarded by a
CUDA check (`if args.cuda: model.cuda()`) are left as they are: after
`torch.cuda.set_device(local_rank)` they land on the right GPU.""",
    why="""
Under torchrun every process runs the same script. A hard-coded `cuda:0` puts all of them on the
first GPU (out of memory, or silently slow), and a script that insists on CUDA cannot be tested
on a CPU machine with the gloo backend.""",
    fix="Rewrite the device expression; add a `device` variable to the setup when the script has none.",
    fix_safety="Safe: on CUDA machines the device is the one torchrun assigned; on CPU it falls back to the CPU.",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="cuda-calls",
            before='''import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4).cuda(non_blocking=True)
    model(x).sum().backward()
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
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        model = torch.nn.Linear(4, 2).to(device)
        model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(8, 4).to(device, non_blocking=True)
        model(x).sum().backward()
        optimizer.step()
    finally:
        dist.destroy_process_group()
''',
        ),
        Example(
            id="compared-string-stays-cuda",
            fires=False,
            before='''import torch
import torch.backends.cudnn as cudnn

if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Linear(4, 2).to(device)
    if device == "cuda":
        cudnn.benchmark = True
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4, device=device)).sum().backward()
    optimizer.step()
''',
            after='''import torch
import torch.backends.cudnn as cudnn
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
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = torch.nn.Linear(4, 2).to(device)
        model = DDP(model, device_ids=[local_rank] if torch.cuda.is_available() else None)
        if device == "cuda":
            cudnn.benchmark = True
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()
    finally:
        dist.destroy_process_group()
''',
        ),
        Example(
            id="device-a-helper-picks",
            before='''import torch
from utils import prepare_device

if __name__ == "__main__":
    device, device_ids = prepare_device(2)
    model = torch.nn.Linear(4, 2).to(device)
    if len(device_ids) > 1:
        model = torch.nn.DataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4).to(device)).sum().backward()
    optimizer.step()
''',
            after='''import torch
from utils import prepare_device
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
        device, device_ids = prepare_device(2)
        if str(device).startswith("cuda"):  # prepare_device() picks a GPU: under torchrun, this process's own
            device = torch.device("cuda", local_rank)
        model = torch.nn.Linear(4, 2).to(device)
        model = DDP(model, device_ids=[local_rank] if str(device).startswith("cuda") else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(8, 4).to(device)).sum().backward()
        optimizer.step()
    finally:
        dist.destroy_process_group()
''',
        ),
        Example(
            id="device-helper-of-this-file",
            before='''import torch


def prepare_device(n_gpu):
    return torch.device("cuda:0" if n_gpu > 0 and torch.cuda.is_available() else "cpu"), list(range(n_gpu))


if __name__ == "__main__":
    device, device_ids = prepare_device(2)
    model = torch.nn.Linear(4, 2).to(device)
    if len(device_ids) > 1:
        model = torch.nn.DataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4).to(device)).sum().backward()
    optimizer.step()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def prepare_device(n_gpu):
    return torch.device(f"cuda:{local_rank}" if n_gpu > 0 and torch.cuda.is_available() else "cpu"), list(range(n_gpu))


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
        device, device_ids = prepare_device(2)
        model = torch.nn.Linear(4, 2).to(device)
        model = DDP(model, device_ids=[local_rank] if str(device).startswith("cuda") else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.randn(8, 4).to(device)).sum().backward()
        optimizer.step()
    finally:
        dist.destroy_process_group()
''',
        ),
    ),
)

DEVICE = 'device = {torch}.device(f"cuda:{{local_rank}}" if {torch}.cuda.is_available() else "cpu")\n'


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    if facts.device_var_needed:
        plan.insert_before(facts.entry.anchor, _build.statements(facts, DEVICE, torch=facts.names.torch))
    for literal in facts.device_literals:
        _plan_literal(facts, plan, literal)
    for call in facts.cuda_calls:
        _plan_cuda_call(facts, plan, call)
    for index in facts.gpu_indexes:
        _plan_gpu_index(facts, plan, index)
    for device in facts.helper_devices:
        if not device.seen:
            _plan_helper_device(facts, plan, device)
    for statement, environ in facts.visible_devices:
        # Under torchrun a script that narrows CUDA_VISIBLE_DEVICES to `--gpu_id 0` leaves every
        # rank one GPU, and set_device(local_rank) fails on rank 1. torchrun's caller picks the GPUs.
        plan.guard(statement, f'"LOCAL_RANK" not in {environ}')
        line, col = facts.line_col(statement)
        plan.changes.append(Change(
            RULE.code, line, col,
            "CUDA_VISIBLE_DEVICES set by the script only when not started by torchrun (set it on the torchrun command line)",
        ))


HELPER_DEVICE = """if str({name}).startswith("cuda"):  # {helper}() picks a GPU: under torchrun, this process's own
	{name} = {torch}.device("cuda", local_rank)
"""


def _plan_helper_device(facts: ScriptFacts, plan: Plan, device: HelperDevice) -> None:
    """`device, ids = prepare_device(n)`: a GPU the helper picks becomes this process's own; a CPU
    it picks stays (the model then stays on the CPU, and DDP gets no device_ids)."""
    text = HELPER_DEVICE.format(name=device.name, helper=device.helper, torch=facts.names.torch)
    plan.insert_after(device.statement, _build.statements(facts, text))
    line, col = facts.line_col(device.statement)
    plan.changes.append(Change(
        RULE.code, line, col, f"a GPU `{device.helper}()` picks for `{device.name}` becomes this process's GPU (local_rank)",
    ))


def _plan_gpu_index(facts: ScriptFacts, plan: Plan, index: GpuIndex) -> None:
    """`set_device(args.gpu)` / `"cuda:{}".format(args.gpu)`: the GPU becomes this process's own."""
    line, col = facts.line_col(index.node)
    was = facts.module.code_for_node(index.node)
    if not facts.local_rank_visible(index.scope):
        plan.diagnostics.append(Diagnostic(
            CUDA_CALL_LEFT.code, line, col,
            f"`{was}` picks the same GPU on every rank and `local_rank` is not in reach here: use LOCAL_RANK",
        ))
        return
    text = "local_rank" if index.set_device else 'f"cuda:{local_rank}"'
    new = _build.expression(facts, text)
    plan.replace(index.node, lambda _: new)
    plan.changes.append(Change(RULE.code, line, col, f"GPU `{was}` becomes this process's GPU (local_rank)"))


def _plan_literal(facts: ScriptFacts, plan: Plan, literal: DeviceLiteral) -> None:
    quote = literal.node.quote
    if literal.device_expr is not None:
        text = literal.device_expr  # .to("cuda") -> .to(device)
    else:
        if facts.local_rank_visible(literal.scope) and not literal.compared:
            text = f"f{quote}cuda:{{local_rank}}{quote}"
        else:
            # The current device, which set_device made this process's GPU; also what keeps
            # `if device == "cuda":` true.
            text = f"{quote}cuda{quote}"
        if not literal.conditional:
            text = f"{text} if {facts.names.torch}.cuda.is_available() else {quote}cpu{quote}"
    if literal.node.value == text:
        return
    new = _build.expression(facts, text)
    plan.replace(literal.node, lambda _: new)
    if literal.device_call is not None:
        # torch.device("cuda", 0): the index is now part of the string.
        plan.replace(literal.device_call, _keep_first_argument)
    line, col = facts.line_col(literal.node)
    plan.changes.append(Change(RULE.code, line, col, f"device {literal.node.value} becomes this process's device"))


def _keep_first_argument(call: cst.Call) -> cst.Call:
    return call.with_changes(args=[call.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)])


def _plan_cuda_call(facts: ScriptFacts, plan: Plan, call: CudaCall) -> None:
    line, col = facts.line_col(call.call)
    if call.device_expr is not None and (call.pinned or not call.guarded):
        plan.replace(call.call, lambda updated: to_device(updated, call.device_expr, call.pinned))
        plan.changes.append(Change(RULE.code, line, col, f".cuda() becomes .to({call.device_expr})"))
    elif call.pinned or (not call.guarded and not facts.after_setup(call.call)):
        # A bare `.cuda()` that runs after the setup lands on this process's GPU: the setup's
        # set_device(local_rank) made it the current device. Only a pinned index, or a call
        # before the setup, still picks the same GPU on every rank.
        plan.diagnostics.append(Diagnostic(CUDA_CALL_LEFT.code, line, col, CUDA_CALL_LEFT.summary))


def to_device(call: cst.Call, device_expr: str, pinned: bool) -> cst.Call:
    """`x.cuda(0, non_blocking=True)` -> `x.to(device, non_blocking=True)`."""
    kept = [arg for i, arg in enumerate(call.args) if not (pinned and i == 0)]
    device_arg = cst.Arg(cst.parse_expression(device_expr))
    if kept:
        device_arg = device_arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(
        func=call.func.with_changes(attr=cst.Name("to")),  # type: ignore[attr-defined]
        args=[device_arg, *kept],
    )
