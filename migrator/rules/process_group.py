"""DDP001: set up the process group at the entry point (torchrun's LOCAL_RANK, device, backend)."""
from __future__ import annotations


from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.names import attribute_name
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories import IMPORT_TIME_MODEL, NO_ENTRY_POINT
from migrator.types import Change, Diagnostic

RULE = Rule(
    code="DDP001",
    name="process-group-setup",
    summary="initialize the process group from torchrun's LOCAL_RANK at the entry point",
    what="""
Finds where training starts (a main()-like function called under `if __name__ == "__main__":`,
the guard's body, or module level for flat scripts) and inserts, before the model, device or
loaders are built: `local_rank` read from the `LOCAL_RANK` environment variable,
`torch.cuda.set_device(local_rank)` when CUDA is available, and `init_process_group` with a backend
that works on GPU and CPU: "cpu:gloo,cuda:nccl" when CUDA is available (so a script run with
--no-cuda on a GPU machine still works), plain gloo without CUDA.""",
    why="""
torchrun starts one process per GPU and tells each its rank through environment variables.
Without a process group DistributedDataParallel cannot synchronize gradients; without
`set_device` every process allocates on GPU 0. The setup never runs at import time of a module
with a main guard: DataLoader workers started with spawn/forkserver re-import that module.""",
    fix="Insert the setup block; add `import os` and `import torch.distributed as dist` if missing.",
    fix_safety="Safe: the script keeps working with `torchrun --nproc_per_node=1`.",
    fixable=True,
    examples=(
        Example(
            id="main-function",
            before='''import torch
import torch.nn as nn


def main():
    model = nn.Linear(10, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 10)).sum().backward()
        optimizer.step()


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
    model = nn.Linear(10, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 10)).sum().backward()
        optimizer.step()


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

LOCAL_RANK = 'local_rank = int(os.environ.get("LOCAL_RANK", 0))\n'
LOCAL_RANK_COMMENT = "# torchrun starts one process per device and sets LOCAL_RANK for each.\n"
# The process group from torchrun's environment, or a world of one without torchrun. `{init}` is
# how the script spells init_process_group, `{arguments}` what it is given besides the world and
# `{world_of_one}` the same with WORLD_OF_ONE (rules.spawn fills them in for an mp.spawn worker's call).
INIT = """\
if "RANK" in os.environ:  # started by torchrun
\t{init}({arguments})
else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
\t{init}({world_of_one})
"""
WORLD_OF_ONE = "store={dist}.HashStore(), rank=0, world_size=1"
SETUP = """\
if {torch}.cuda.is_available():
\t{torch}.cuda.set_device(local_rank)
{backend} = "cpu:gloo,cuda:nccl" if {torch}.cuda.is_available() else "gloo"
""" + INIT.replace("{init}", "{dist}.init_process_group").replace("{arguments}", "backend={backend}").replace(
    "{world_of_one}", "backend={backend}, " + WORLD_OF_ONE)


def needs_setup(facts: ScriptFacts) -> bool:
    """Migrate this file? Only whole: a DataParallel left behind would end up inside DDP."""
    return (
        facts.trains
        and facts.entry is not None
        and not facts.already_distributed
        and not facts.unrewritable_dataparallel
        and not facts.moved_after_wrap
        and not facts.penalty_backwards
        and not facts.retained_backwards
    )


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if facts.trains and facts.entry is None and not facts.already_distributed:
        _report_no_entry_point(facts, plan)
    if not needs_setup(facts):
        return
    if facts.entry.kind == "caller":  # the calling script sets the group up (project mode migrates them together)
        if facts.names.dist_import_needed:
            plan.need_import_if_used("torch.distributed", asname="dist")  # for the rank checks the other rules write
        return
    names = facts.names
    setup = SETUP
    if facts.local_rank_at_module is not None:
        # A module-level device needs local_rank at import time; reading the environment there is harmless.
        hoisted = _build.statements(facts, LOCAL_RANK_COMMENT + LOCAL_RANK)
        # It joins the device line's paragraph: the blank lines above that line move above it.
        hoisted[0] = hoisted[0].with_changes(leading_lines=[*facts.local_rank_at_module.leading_lines, *hoisted[0].leading_lines])
        plan.insert_before(facts.local_rank_at_module, hoisted)
        plan.replace(facts.local_rank_at_module, lambda statement: statement.with_changes(leading_lines=()))
    else:
        setup = LOCAL_RANK_COMMENT + LOCAL_RANK + setup
    statements = _build.statements(facts, setup, torch=names.torch, dist=names.dist, backend=_backend_name(facts))
    plan.insert_before(facts.entry.anchor, _build.set_apart(statements, facts.entry.anchor))
    if facts.hoisted_into_guard is not None:
        plan.hoist_into(*facts.hoisted_into_guard)
    if names.os_import_needed:
        plan.need_import("os")
    if names.torch_import_needed:
        plan.need_import("torch")
    if names.dist_import_needed:
        plan.need_import("torch.distributed", asname="dist")
    line, col = facts.line_col(facts.entry.anchor)
    plan.changes.append(Change(RULE.code, line, col, f"process group set up in the {_where(facts)} (LOCAL_RANK, set_device, init_process_group)"))


def _backend_name(facts: ScriptFacts) -> str:
    """`backend`, unless the script has a name of its own spelled so where the setup goes."""
    taken = facts.local_names.get(facts.entry.scope, frozenset()) | facts.local_names.get(facts.module, frozenset())
    return next(name for name in ("backend", "dist_backend", "ddp_backend", "torchrun_backend") if name not in taken)


def _report_no_entry_point(facts: ScriptFacts, plan: Plan) -> None:
    if not any(attribute_name(call.func) in ("backward", "step") for call in facts.calls):
        return  # models and optimizers built, nothing trained here (a config or a definitions module)
    built = [model.definition for model in facts.models if model.definition is not None]
    if facts.import_time_model is not None:
        line, col = facts.line_col(facts.import_time_model)
        plan.diagnostics.append(Diagnostic(IMPORT_TIME_MODEL.code, line, col, IMPORT_TIME_MODEL.summary))
    elif built:
        line, col = facts.line_col(built[0])
        plan.diagnostics.append(Diagnostic(NO_ENTRY_POINT.code, line, col, NO_ENTRY_POINT.summary))


def _where(facts: ScriptFacts) -> str:
    entry = facts.entry
    if entry.kind == "function":
        return "entry point"
    return "main guard" if entry.kind == "guard" else "module (flat script)"
