"""DDP003: wrap every trained model in DistributedDataParallel (DataParallel in any spelling included)."""
from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis import DataParallelSite, ModelFact, ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories import DATAPARALLEL_LEFT, DATAPARALLEL_SHAPE, MODEL_NOT_TRACED
from migrator.rules.device import to_device
from migrator.rules.process_group import needs_setup
from migrator.types import Change, Diagnostic
from migrator.names import attribute_name
from migrator.tree import descendants

RULE = Rule(
    code="DDP003",
    name="wrap-model",
    summary="wrap each trained model in DistributedDataParallel (replaces DataParallel)",
    what="""
Every model whose parameters an optimizer trains is wrapped in `DistributedDataParallel` right
after it is built and moved to its device (and after `torch.compile`, which stays applied to
the inner module). `DataParallel(m, device_ids=..., output_device=...)` in any spelling
(`nn.DataParallel`, `torch.nn.parallel.DataParallel`, `from torch.nn import DataParallel as DP`)
becomes `DDP(m, device_ids=[local_rank])` on CUDA (`device_ids=None` on CPU, as DDP requires), and
`if torch.cuda.device_count() > 1: model = nn.DataParallel(model)` becomes an unconditional wrap.
The functional form inside a forward, `nn.parallel.data_parallel(self.main, x, range(self.ngpu))`,
becomes the direct call `self.main(x)`: each process drives one GPU.""",
    why="""
Without the wrap each process trains its own copy and the gradients are never averaged: the
script runs, the loss goes down, and N different models are trained. DataParallel is
single-process and slower than DDP even on one machine.""",
    fix="Insert or rewrite the wrap; import DistributedDataParallel; drop a DataParallel import made unused.",
    fix_safety="""Safe for training. The wrapped model's own methods (`model.generate()`) and its
state_dict keys now go through `model.module`. A loss or a head trained with the model (its
parameters join the model's optimizer, and it is applied to what the model computes and to the
target) may have no parameter to train, and DDP refuses such a module: it is wrapped only when it
has some, and is unwrapped with `(criterion.module if isinstance(criterion, DDP) else criterion)`.""",
    requires=('DDP001', 'DDP002'),
    fixable=True,
    examples=(
        Example(
            id="dataparallel-from-import",
            before='''import torch
from torch.nn import DataParallel as DP


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 2).to(device)
    model = DP(model, device_ids=[0, 1])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()


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
    model = torch.nn.Linear(4, 2).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.randn(8, 4, device=device)).sum().backward()
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
            id="moved-under-another-name",
            before='''import torch
import torch.nn as nn


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(4, 2)
    m = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()
    print(sum(p.numel() for p in m.parameters()))


if __name__ == "__main__":
    main()
''',
            after='''import torch
import torch.nn as nn
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
    model = nn.Linear(4, 2)
    m = model.to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        model(torch.randn(8, 4, device=device)).sum().backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(sum(p.numel() for p in m.parameters()))


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="loss-trained-with-the-model",
            before='''import torch
import torch.nn as nn


class ScaledLoss(nn.Module):
    def __init__(self, learned):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1)) if learned else None

    def forward(self, output, target):
        scale = self.scale if self.scale is not None else 1.0
        return nn.functional.cross_entropy(output * scale, target)


def main():
    model = nn.Linear(4, 3)
    criterion = ScaledLoss(learned=False)
    params = list(model.parameters()) + list(criterion.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1)
    for step in range(3):
        output = model(torch.randn(8, 4))
        loss = criterion(output, torch.randint(0, 3, (8,)))
        loss.backward()
        optimizer.step()
    torch.save([model, criterion], "model.pt")


if __name__ == "__main__":
    main()
''',
            after='''import torch
import torch.nn as nn
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class ScaledLoss(nn.Module):
    def __init__(self, learned):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1)) if learned else None

    def forward(self, output, target):
        scale = self.scale if self.scale is not None else 1.0
        return nn.functional.cross_entropy(output * scale, target)


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
    model = nn.Linear(4, 3)
    model = DDP(model, device_ids=None)
    criterion = ScaledLoss(learned=False)
    if any(p.requires_grad for p in criterion.parameters()):
        criterion = DDP(criterion, device_ids=None)
    params = list(model.parameters()) + list(criterion.parameters())
    optimizer = torch.optim.SGD(params, lr=0.1)
    for step in range(3):
        output = model(torch.randn(8, 4))
        loss = criterion(output, torch.randint(0, 3, (8,)))
        loss.backward()
        optimizer.step()
    if dist.get_rank() == 0:
        torch.save([model.module, (criterion.module if isinstance(criterion, DDP) else criterion)], "model.pt")


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

WRAP = "{target} = {ddp}({target}, device_ids={device_ids})\n"


def plan(facts: ScriptFacts, plan: Plan) -> None:
    for model in facts.models:
        if model.definition is None and not model.already_ddp and not facts.already_distributed:
            line, col = facts.line_col(model.optimizer_call)
            plan.diagnostics.append(Diagnostic(MODEL_NOT_TRACED.code, line, col, f"{model.expr}: {MODEL_NOT_TRACED.summary}"))
    for model in facts.moved_after_wrap:
        if not facts.already_distributed and model.forward_unreached:
            line, col = facts.line_col(model.definition)
            plan.diagnostics.append(Diagnostic(MODEL_NOT_TRACED.code, line, col, f"{model.expr}: {model.forward_unreached}"))
        elif not facts.already_distributed and model.held_by:
            line, col = facts.line_col(model.definition)
            plan.diagnostics.append(Diagnostic(MODEL_NOT_TRACED.code, line, col, (
                f"{model.expr}: training runs through `{model.held_by}`, a module built from {model.expr} "
                f"(before its wrap point, or moved afterwards), so a DDP around {model.expr} would not sync it; "
                f"wrap `{model.held_by}` in DDP instead, by hand"
            )))
        elif not facts.already_distributed:
            line, col = facts.line_col(model.moved_later)
            where = facts.enclosing_function_name(model.moved_later)
            plan.diagnostics.append(Diagnostic(MODEL_NOT_TRACED.code, line, col, (
                f"{model.expr}: moved to a device in `{where}` after the point where it would be wrapped "
                "(DDP must wrap it after its last move); wrap it in DDP there, by hand"
            )))
    for site in facts.blocking_dataparallel:
        if facts.trains:
            line, col = facts.line_col(site.call)
            plan.diagnostics.append(Diagnostic(DATAPARALLEL_SHAPE.code, line, col, DATAPARALLEL_SHAPE.summary))
    for site in facts.other_dataparallel:
        if not needs_setup(facts):
            continue
        line, col = facts.line_col(site.call)
        if site in facts.evaluation_dataparallel:
            # The final test after training, in the same torchrun process: a DataParallel there would
            # demand its module on cuda:0 and fail on every other rank. Each rank tests on its own GPU.
            _unwrap_site(facts, plan, site, keep_move=site.chained is not None and site.inner is not None and site.target == code_of(site.inner))
            plan.changes.append(Change(RULE.code, line, col, "DataParallel for the evaluation after training removed (one GPU per process)"))
        else:
            plan.diagnostics.append(Diagnostic(DATAPARALLEL_LEFT.code, line, col, DATAPARALLEL_LEFT.summary))
    if not needs_setup(facts):
        return
    wrapped = False
    for model in facts.models:
        if model.already_ddp or model.definition is None:
            continue
        wrapped = True
        if model.stripped:
            _strip_dataparallel(facts, plan, model)
        elif model.dataparallel is not None:
            _replace_dataparallel(facts, plan, model, model.dataparallel)
        else:
            plan.insert_after(model.wrap_after, _wrap_statement(facts, model))
            line, col = facts.line_col(model.wrap_after)
            when = " when it has parameters to train" if model.guarded else ""
            plan.changes.append(Change(RULE.code, line, col, f"{model.expr} wrapped in DistributedDataParallel{when}"))
    for model in facts.models:
        for statement in model.rebound if not model.already_ddp and model.definition is not None else ():
            # A reloaded model (`model = torch.load(f)`): wrap it again so every use stays consistent.
            plan.insert_after(statement, _wrap_statement(facts, model))
            line, col = facts.line_col(statement)
            plan.changes.append(Change(RULE.code, line, col, f"reloaded {model.expr} wrapped in DistributedDataParallel again"))
    for call in facts.calls_of(N.FUNCTIONAL_DATAPARALLEL):
        _plan_functional_dataparallel(facts, plan, call)
    if wrapped and facts.names.ddp_import_needed:
        plan.need_import("torch.nn.parallel", "DistributedDataParallel", facts.names.ddp if facts.names.ddp != "DistributedDataParallel" else None)
    for module, name, asname in _dataparallel_imports(facts):
        plan.unused_imports.append((module, name, asname))


def _device_read_too_early(facts: ScriptFacts, model: ModelFact) -> bool:
    """The model's device variable is bound only below the wrap (a flat script that defines
    `device` near its end): the wrap cannot read it there, so the parameters say where it is."""
    if not model.device_expr or model.cuda_condition or model.wrap_after is None:
        return False
    root = model.device_expr.split(".")[0].split("[")[0]
    if root == "self" or not facts.index.visible(root, facts.owner_of(model.wrap_after)):
        return False  # a device variable the device rule writes with the process group's setup
    return not facts.index.bound_after(root, model.wrap_after)


def _wrap_statement(facts: ScriptFacts, model: ModelFact, inner: str = "") -> list:
    if model.device_unknown and not model.cuda_condition or _device_read_too_early(facts, model):
        # A helper built it (`net = get_network(args)` moves it only `if args.gpu`): its parameters say
        # where it is; DDP refuses device_ids for a CPU module on a GPU machine.
        device_ids = _build.device_ids(facts, model.scope, cuda_condition=f"next({model.expr}.parameters()).is_cuda")
    elif model.moved or model.device_expr or model.cuda_condition or model.move_to_local:
        device_ids = _build.device_ids(facts, model.scope, model.device_expr, model.cuda_condition)
    else:
        # Nothing moves it: it stays on the CPU even on a GPU machine, where DDP refuses device_ids.
        device_ids = "None"
    text = WRAP.format(target=model.expr, ddp=facts.names.ddp, device_ids=device_ids)
    conditions = []
    if model.optional and not inner:
        conditions.append(f"{model.expr} is not None")
    if model.guarded and not inner:
        # DDP refuses a module with no parameter to train: a loss sharing the model's optimizer may have none.
        conditions.append(f"any(p.requires_grad for p in {model.expr}.parameters())")
    if conditions:
        text = f"if {' and '.join(conditions)}:\n\t{text}"
    statements = _build.statements(facts, text)
    if model.move_to_local and not inner:
        torch = facts.names.torch
        rank = "local_rank" if facts.local_rank_visible(model.scope) else f"{torch}.cuda.current_device()"
        inner = f'{model.expr}.to({torch}.device("cuda", {rank}) if {torch}.cuda.is_available() else {torch}.device("cpu"))'
    if inner:
        statements = [_with_inner(statements[0], inner)]
    return statements


def _with_inner(statement: cst.SimpleStatementLine, inner: str) -> cst.SimpleStatementLine:
    assign = statement.body[0]
    call = assign.value  # type: ignore[attr-defined]
    first = call.args[0].with_changes(value=cst.parse_expression(inner))
    return statement.with_changes(body=[assign.with_changes(value=call.with_changes(args=[first, *call.args[1:]]))])  # type: ignore[attr-defined]


def _plan_functional_dataparallel(facts: ScriptFacts, plan: Plan, call: cst.Call) -> None:
    """`nn.parallel.data_parallel(self.main, x, range(self.ngpu))` -> `self.main(x)`.

    Under DDP each process drives one GPU: splitting its batch again over `ngpu` devices would put
    DataParallel inside DDP. On one device the function is the module's forward."""
    line, col = facts.line_col(call)
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    if len(positional) < 2 or len(positional) != len([a for a in call.args if a.keyword is None]) or isinstance(positional[1].value, cst.Tuple):
        plan.diagnostics.append(Diagnostic(DATAPARALLEL_LEFT.code, line, col, "nn.parallel.data_parallel(...) left as is: call the module directly (one GPU per process)"))
        return
    direct = cst.Call(func=positional[0].value, args=[positional[1].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
    plan.replace(call, lambda _: direct)
    plan.changes.append(Change(RULE.code, line, col, "functional data_parallel becomes a direct call (one GPU per process)"))


def _replace_dataparallel(facts: ScriptFacts, plan: Plan, model: ModelFact, site: DataParallelSite) -> None:
    line, col = facts.line_col(site.call)
    inner = code_of(site.inner) if site.inner is not None else model.expr
    if site.chained is not None:
        # DP(m).cuda() / DP(m).to(dev): move the model first, then wrap (DDP needs it on its device).
        moved = site.chained.with_changes(func=site.chained.func.with_changes(value=site.inner))  # type: ignore[attr-defined]
        inner = code_of(moved)
        if site.chained.func.attr.value == "cuda":  # type: ignore[attr-defined]
            if facts.device_var:
                inner = code_of(to_device(moved, facts.device_var, pinned=bool(moved.args) and moved.args[0].keyword is None))
            else:
                # No device variable: `.cuda()` only where there is CUDA (the DataParallel line may have
                # sat under a CUDA check; the wrap now runs everywhere, CPU test runs included).
                bare = code_of(site.inner) if site.inner is not None else model.expr
                inner = f"{inner} if {facts.names.torch}.cuda.is_available() else {bare}"
    holder = site.conditional or site.statement
    new = _wrap_statement(facts, model, inner)
    if model.wrap_after is holder:
        plan.replace(holder, lambda updated: new[0].with_changes(leading_lines=updated.leading_lines))
    elif inner != model.expr and site.conditional is None:
        # `model = DP(build()).cuda()` and the model is still moved after it: the line keeps building
        # (and moving) the model, unwrapped; the wrap goes after the last move and names the variable,
        # never running the constructor again.
        kept = _build.statements(facts, f"{model.expr} = {inner}\n")[0]
        plan.replace(holder, lambda updated: kept.with_changes(leading_lines=updated.leading_lines))
        plan.insert_after(model.wrap_after, _wrap_statement(facts, model))
        _bare_before_wrap(facts, plan, model)
    else:
        # The model is still moved or loaded after the DataParallel line: wrap after that instead,
        # under the comment that was above it (`# Handle multi-gpu if desired`).
        plan.replace(holder, lambda _: cst.RemoveFromParent())
        _bare_before_wrap(facts, plan, model)
        plan.comments_moved.add(holder)
        comments = [line for line in holder.leading_lines if line.comment is not None]
        plan.insert_after(model.wrap_after, [new[0].with_changes(leading_lines=[*comments, *new[0].leading_lines]), *new[1:]])
    _drop_replication_patch(facts, plan, site)
    what = "conditional DataParallel" if site.conditional else "DataParallel"
    plan.changes.append(Change(RULE.code, line, col, f"{what} on {model.expr} becomes DistributedDataParallel"))


def _strip_dataparallel(facts: ScriptFacts, plan: Plan, model: ModelFact) -> None:
    """DataParallel in branches or on submodules: unwrap each, then one DDP around the whole model."""
    for site in model.stripped:
        line, col = facts.line_col(site.call)
        _unwrap_site(facts, plan, site, keep_move=site.target == model.expr and site.chained is not None)
        plan.changes.append(Change(RULE.code, line, col, f"DataParallel removed: {model.expr} is wrapped whole in DDP below"))
    plan.insert_after(model.wrap_after, _wrap_statement(facts, model))
    line, col = facts.line_col(model.wrap_after)
    plan.changes.append(Change(RULE.code, line, col, f"{model.expr} wrapped in DistributedDataParallel"))
    _bare_before_wrap(facts, plan, model)


def _bare_before_wrap(facts: ScriptFacts, plan: Plan, model: ModelFact) -> None:
    """`self.model.module.load_state_dict(...)` between the DataParallel line and the wrap, which
    now comes after it: the model is bare there, `.module` goes."""
    for read in model.module_reads_before_wrap:
        plan.replace(read, lambda node: node.value)
        line, col = facts.line_col(read)
        plan.changes.append(Change(RULE.code, line, col, f"{model.expr} is not wrapped yet here: its own module, not .module"))


def _unwrap_site(facts: ScriptFacts, plan: Plan, site: DataParallelSite, keep_move: bool) -> None:
    if keep_move:
        # `model = DP(model).cuda()` -> `model = model.cuda()`: still moved to its device.
        plan.replace(site.chained, lambda c, site=site: c.with_changes(func=c.func.with_changes(value=site.inner)))
    else:
        # `model.features = DP(model.features)` or `model = DP(model)`: nothing left to do there.
        plan.replace(site.statement, _remove_statement)
        _drop_emptied_else(facts, plan, site.statement)
    _drop_replication_patch(facts, plan, site)


def _drop_emptied_else(facts: ScriptFacts, plan: Plan, statement) -> None:
    """`else: model = DP(model)` alone in its branch: the whole `else:` goes, not a `pass` left behind."""
    block = facts.parents.get(statement)
    branch = facts.parents.get(block) if block is not None else None
    owner = facts.parents.get(branch) if branch is not None else None
    if isinstance(branch, cst.Else) and isinstance(owner, cst.If) and len(block.body) == 1:  # type: ignore[union-attr]
        plan.replace(owner, lambda node: node.with_changes(orelse=None) if isinstance(node.orelse, cst.Else) and _only_pass(node.orelse.body) else node)
    elif isinstance(branch, cst.If) and branch.orelse is None and _plain_test(branch.test):
        # `if multi_gpus: net = DataParallel(net)`: nothing left to decide, the whole `if` goes.
        plan.replace(branch, _drop_if_emptied)


def _drop_if_emptied(node):
    # Registered once per DataParallel line in the branch: the first call may already have removed it.
    if isinstance(node, cst.If) and _only_pass(node.body):
        return cst.RemoveFromParent()
    return node


def _plain_test(test: cst.BaseExpression) -> bool:
    """A condition without calls other than the usual CUDA queries and `len(device_ids)` (dropping
    it runs nothing less)."""
    return all(
        attribute_name(call.func) in ("is_available", "device_count") or (isinstance(call.func, cst.Name) and call.func.value == "len")
        for call in descendants(test, cst.Call)
    )


# Synchronized-BatchNorm-PyTorch (vendored by deeplab, CSAIL segmentation and others) patches a
# DataParallel so its replicas share BatchNorm statistics; it asserts it is given a DataParallel.
_REPLICATION_PATCHES = ("patch_replication_callback",)


def _drop_replication_patch(facts: ScriptFacts, plan: Plan, site: DataParallelSite) -> None:
    """`patch_replication_callback(model)` after the DataParallel line goes with it: DDP has no
    replicas to patch (and the call would fail its DataParallel assertion)."""
    block = facts.parents.get(site.statement)
    body = list(getattr(block, "body", ()))
    if site.target is None or site.statement not in body:
        return
    for statement in body[body.index(site.statement) + 1:]:
        call = _lone_call(statement)
        if call is None:
            break
        name = call.func.value if isinstance(call.func, cst.Name) else attribute_name(call.func)
        if name in _REPLICATION_PATCHES and call.args and code_of(call.args[0].value) == site.target:
            plan.replace(statement, _remove_statement)
            line, col = facts.line_col(call)
            plan.changes.append(Change(RULE.code, line, col, f"`{name}({site.target})` removed: it patches DataParallel replicas, DDP has none"))
            return


def _lone_call(statement) -> "cst.Call | None":
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr):
        value = statement.body[0].value
        return value if isinstance(value, cst.Call) else None
    return None


def _only_pass(block) -> bool:
    """Is the block empty, or just `pass` (what is left once its statements were removed)?"""
    if not isinstance(block, cst.IndentedBlock):
        return False
    body = block.body
    return not body or (
        len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and all(isinstance(s, cst.Pass) for s in body[0].body)
    )


def _remove_statement(statement):
    # A block may not become empty: leave `pass` where the statement was alone.
    return cst.RemoveFromParent()


def _dataparallel_imports(facts: ScriptFacts) -> List[Tuple[str, str, Optional[str]]]:
    """`from torch.nn import DataParallel [as DP]`: (module, name, asname), to drop once unused."""
    found = []
    for local, qualified in facts.index.imported[facts.module].items():
        if qualified in N.DATAPARALLEL and "." not in local:
            module, name = qualified.rsplit(".", 1)
            found.append((module, name, local if local != name else None))
    return found
