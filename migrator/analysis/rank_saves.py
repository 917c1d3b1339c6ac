"""Checkpoints every rank writes in code that is already distributed (DDP131's evidence).

Precision first: a `torch.save` counts only when the function holding it (or an unguarded call
of that function, two levels up) runs after a setup or wrap in a function of this file; a rank
check around it or an early `if <not rank 0>: return` keeps it quiet, and so does a path that
names the rank (a deliberate per-rank file), and so does a file in a folder each process makes
for itself (dataflow.saves.private_path, the rank-0 planner's own answer).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis.helpers import code_of
from migrator.dataflow.saves import private_path
from migrator.tree import descendants

WRAPPERS = N.DDP | frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
    }
)
_SAVE_DEPTH = 2  # callers of the function holding a save followed this far up


def every_rank_saves(analysis, helper_call: Optional[cst.Call] = None) -> Tuple[Tuple[cst.Call, Optional[cst.Call]], ...]:
    """`torch.save` calls that run on every rank after the setup, with nothing choosing one rank.

    Precision first: a save counts only when the function holding it (or an unguarded call of
    that function, two levels up) runs after the setup in a function of this file that sets up
    or wraps; a save whose path names the rank is a deliberate per-rank file.
    """
    anchors = _setup_points(analysis, helper_call)
    found_saves = []
    for save in analysis.calls(N.TORCH_SAVE):
        if _guarded(analysis, save) or _per_rank_path(save) or any(private_path(analysis.c, arg.value) for arg in save.args[1:2]):
            continue
        via = _reached_after_setup(analysis, save, anchors, _SAVE_DEPTH)
        if via is not False:
            found_saves.append((save, via))
    return tuple(found_saves)


def _setup_points(analysis, helper_call: Optional[cst.Call]) -> Dict[Optional[cst.CSTNode], int]:
    """Function (None: the module) -> source position of its first setup or wrap call."""
    calls = [*analysis.calls(N.INIT_PROCESS_GROUP), *analysis.calls(WRAPPERS)]
    if helper_call is not None:
        calls.append(helper_call)  # `dist_utils.bootstrap(args)`, seen in the project's own module
    calls += [
        call for call in analysis.c.calls
        if N.is_distributed_setup_name((call.func.value if isinstance(call.func, cst.Name) else N.attribute_name(call.func)) or "")
    ]
    points: Dict[Optional[cst.CSTNode], int] = {}
    for call in calls:
        fn = analysis.enclosing_function(call)
        position = analysis.c.order.get(call, 0)
        points[fn] = min(points.get(fn, position), position)
    return points


def _reached_after_setup(analysis, node: cst.CSTNode, anchors, depth: int):
    """The unguarded call that leads to `node` after a setup (None: `node` itself runs after it),
    or False when no such path is seen."""
    fn = analysis.enclosing_function(node)
    if fn in anchors and analysis.c.order.get(node, 0) > anchors[fn]:
        return None
    if fn is None or depth == 0:
        return False
    for call in analysis.c.calls:
        name = call.func.value if isinstance(call.func, cst.Name) else N.attribute_name(call.func)
        if name != fn.name.value or call is node or _guarded(analysis, call):
            continue
        if isinstance(call.func, cst.Attribute) and not N.is_name(call.func.value, "self"):
            continue  # `other.save(...)` is not this function
        if _reached_after_setup(analysis, call, anchors, depth - 1) is not False:
            return call
    return False


def _guarded(analysis, node: cst.CSTNode) -> bool:
    """Under a check of the rank (`if rank == 0:`, `if is_main_process():`), or after an early
    `if <not rank 0>: return` in its function."""
    previous = node
    for anc in analysis.ancestors(node):
        if isinstance(anc, (cst.If, cst.IfExp)) and previous is not anc.test and _rank_test(anc.test):
            return True  # also `torch.save(...) if rank == 0 else None` (a lambda's body)
        if isinstance(anc, cst.IndentedBlock):
            for statement in anc.body:
                if statement is previous:
                    break
                if isinstance(statement, cst.If) and _rank_test(statement.test) and _exits(statement.body):
                    return True
        previous = anc
    return False


def _rank_test(test: cst.BaseExpression) -> bool:
    """`rank == 0`, `is_main_process()`, `args.gpu == 0` (one process per GPU: the first GPU's)."""
    words = {n.value.lower() for n in descendants(test, cst.Name)} | {a.attr.value.lower() for a in descendants(test, cst.Attribute)}
    if N.mentions_rank(test) or any(
        word.startswith(("is_main", "main_proc", "master", "is_master", "is_primary", "primary", "rank0", "is_rank0"))
        for word in words
    ):
        return True
    return any(
        isinstance(comparison.comparisons[0].comparator, cst.Integer) and "gpu" in code_of(comparison.left).lower()
        for comparison in descendants(test, cst.Comparison)
    )


def _exits(body: cst.BaseSuite) -> bool:
    return any(isinstance(node, (cst.Return, cst.Continue)) for node in descendants(body, (cst.Return, cst.Continue)))


def _per_rank_path(save: cst.Call) -> bool:
    """`torch.save(state, f"shard_{rank}.pt")`: each rank writes its own file on purpose."""
    if len(save.args) < 2:
        return False
    path = save.args[1].value
    words = [n.value.lower() for n in descendants(path, cst.Name)] + [a.attr.value.lower() for a in descendants(path, cst.Attribute)]
    words += [s.value.lower() for s in descendants(path, (cst.SimpleString, cst.FormattedStringText))]
    return any("rank" in word or "shard" in word for word in words)
