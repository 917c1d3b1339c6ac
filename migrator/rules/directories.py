"""DDP016: directories every rank creates are created without a race."""
from __future__ import annotations

import libcst as cst

from migrator.analysis import ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.process_group import needs_setup
from migrator.names import attribute_name
from migrator.tree import descendants
from migrator.types import Change

RULE = Rule(
    code="DDP016",
    name="makedirs-exist-ok",
    summary="create output directories with exist_ok=True: every rank runs the same mkdir at once",
    what="""
`os.makedirs(path)` gets `exist_ok=True`, and `os.mkdir(path)` becomes
`os.makedirs(path, exist_ok=True)`, in a file being migrated. A `if not os.path.exists(path):`
check in front of them stays as it is. A check that refuses an existing folder
(`if os.path.exists(path): raise ...` before the creation) gets a `dist.barrier()` between it and
the creation: every rank checks before any rank creates the folder.""",
    why="""
Under torchrun every rank runs the script's setup code. Two ranks test `os.path.exists(path)`,
both see False, both call `os.makedirs(path)`, and the slower one dies with FileExistsError.""",
    fix="Add `exist_ok=True` (turning `os.mkdir` into `os.makedirs`).",
    fix_safety="Safe: it only stops raising when the directory is already there, which is what the script wanted.",
    fixable=True,
    per_site=True,
    examples=(
        Example(
            id="output-dir",
            before='''import os

import torch


def main():
    out = "runs/exp"
    if not os.path.exists(out):
        os.makedirs(out)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()


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
    out = "runs/exp"
    if not os.path.exists(out):
        os.makedirs(out, exist_ok=True)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
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
            id="refuses-an-existing-folder",
            before='''import os

import torch


def main(out="runs/exp1"):
    if os.path.exists(out):
        raise SystemExit(f"{out} exists already")
    os.makedirs(out)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(out="runs/exp1"):
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    if os.path.exists(out):
        raise SystemExit(f"{out} exists already")
    dist.barrier()  # every rank has checked the folder before one creates it
    os.makedirs(out, exist_ok=True)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
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
            id="already-exist-ok",
            fires=False,
            before='''import os

os.makedirs("out", exist_ok=True)
''',
            after=None,
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for call, spelled_os in directory_creations(facts):
        site = plan.site()  # each folder stands alone: suppressing one leaves the others exist_ok
        site.replace(call, lambda c, spelled_os=spelled_os: _race_free(c, spelled_os))
        line, col = facts.line_col(call)
        site.changes.append(Change(RULE.code, line, col, "directory created with exist_ok=True (every rank creates it)"))
        statement = _statement_of(facts, call)
        if statement is not None and facts.after_setup(call) and _refused_if_there(facts, statement):
            # `if os.path.exists(out): raise ...` then `os.makedirs(out)`: the rank that creates the folder
            # first would make the others' check fail. Every rank checks, then waits, then creates.
            site.insert_before(statement, _build.statements(
                facts, f"{facts.names.dist}.barrier()  # every rank has checked the folder before one creates it\n"))
            site.changes.append(Change(RULE.code, line, col, (
                "every rank checks that the folder is not there yet before any rank creates it (barrier)")))


def directory_creations(facts: ScriptFacts):
    """`os.makedirs(d)` and `os.mkdir(d)` that would raise when the directory exists, with how
    the file spells `os`."""
    for call in facts.calls_of(frozenset({"os.makedirs", "os.mkdir"})):
        keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
        positional = [arg for arg in call.args if arg.keyword is None]
        if "exist_ok" in keywords or any(arg.star for arg in call.args):
            continue
        if attribute_name(call.func) == "makedirs" and len(positional) > 2:
            continue  # makedirs(d, mode, exist_ok) positionally
        yield call, code_of(call.func.value) if isinstance(call.func, cst.Attribute) else "os"


def _statement_of(facts: ScriptFacts, call: cst.Call):
    node = facts.parents.get(call)
    while node is not None and not isinstance(node, cst.SimpleStatementLine):
        if isinstance(node, cst.BaseCompoundStatement):
            return None
        node = facts.parents.get(node)
    return node


def _refused_if_there(facts: ScriptFacts, statement: cst.SimpleStatementLine) -> bool:
    """Is the creation preceded, in its block, by `if os.path.exists(d): raise ...` (or in the `else:`
    of such an `if`)? Then a rank that checks after another created the folder refuses to run."""
    block = facts.parents.get(statement)
    owner = facts.parents.get(block) if block is not None else None
    if isinstance(owner, cst.Else):
        return _refuses(facts.parents.get(owner))
    body = list(getattr(block, "body", ()))
    if statement not in body:
        return False
    return any(_refuses(earlier) for earlier in body[: body.index(statement)])


def _refuses(node) -> bool:
    if not isinstance(node, cst.If):
        return False
    checks = any(
        (attribute_name(call.func) or getattr(call.func, "value", "")) in ("exists", "isdir", "lexists")
        for call in descendants(node.test, cst.Call)
    )
    refuses = any(True for _ in descendants(node.body, cst.Raise)) or any(
        code_of(call.func) in ("sys.exit", "exit", "quit") for call in descendants(node.body, cst.Call)
    )
    return checks and refuses


def _race_free(call: cst.Call, spelled_os: str) -> cst.Call:
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "mkdir":
        call = call.with_changes(func=call.func.with_changes(attr=cst.Name("makedirs")))
    elif isinstance(call.func, cst.Name) and call.func.value == "mkdir":
        call = call.with_changes(func=cst.parse_expression(f"{spelled_os}.makedirs"))
    return _build.with_keyword(call, "exist_ok", "True")
