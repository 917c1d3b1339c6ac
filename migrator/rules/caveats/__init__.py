"""DDP120-DDP124: what changes meaning under DDP and needs a human decision. Report only.

Unlike the other advisories these do not mark something the tool declined: the migration is
complete, but the training is now distributed, and these are the places where that changes
what the numbers mean or where a script can hang.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from migrator import names as N
from migrator.analysis import ScriptFacts, code_of
from migrator.names import attribute_name
from migrator.tree import descendants
from migrator.edits import Plan
from migrator.rule import Rule
from migrator.rules import global_batch, no_sync
from migrator.rules.loader_workers import gpu_count_scalings
from migrator.rules.caveats.ranks import EVAL_SHARDED, RANK_DIVERGENCE
from migrator.rules.caveats.scaling import ACCUMULATION, GLOBAL_BATCH, SYNC_BATCHNORM
from migrator.rules.process_group import needs_setup
from migrator.rules.sampler import shards
from migrator.types import Diagnostic

RULES = (GLOBAL_BATCH, EVAL_SHARDED, ACCUMULATION, SYNC_BATCHNORM, RANK_DIVERGENCE)
SETUP, SAMPLER, WRAP = "DDP001", "DDP010", "DDP003"  # the fixes whose consequences these report


def plan(facts: ScriptFacts, plan: Plan) -> None:
    # What a migration changes in meaning is said where the fix that changes it runs (a selection
    # may leave the sampler or the wrap out).
    migrating = needs_setup(facts) and SETUP in plan.fixes
    if migrating:
        mode, why = global_batch.batch_mode(facts, plan)
        for loader in facts.loaders if SAMPLER in plan.fixes else ():
            if shards(loader):
                message = _batch_message(facts, loader, mode, why)
                if message is not None:
                    _report(facts, plan, GLOBAL_BATCH, loader.call, message)
        wraps = WRAP in plan.fixes
        for node in facts.accumulation_steps if wraps else ():
            if no_sync.no_sync_span(facts, node) is None:  # else DDP022 put the passes under no_sync()
                _report(facts, plan, ACCUMULATION, node)
        batchnorm = facts.calls_of(N.BATCHNORM)
        if wraps and batchnorm and not any(attribute_name(call.func) == "convert_sync_batchnorm" for call in facts.calls):
            _report(facts, plan, SYNC_BATCHNORM, batchnorm[0])
        # With --batch global the loader splits `batch_size * gpu_count` over the processes again:
        # the product stays the global batch, as under DataParallel. Per process, it is said.
        for statement, scaled, _ in gpu_count_scalings(facts, "batch") if mode != global_batch.GLOBAL else ():
            line, col = facts.line_col(statement)
            plan.diagnostics.append(Diagnostic(GLOBAL_BATCH.code, line, col, (
                f"`{scaled}` is multiplied by the GPU count (a DataParallel habit: one process split it over the GPUs); "
                "under DDP every process loads that many samples: drop the multiplication to keep the global batch"
            )))
    # Code that is already distributed chose its sharded evaluation and its rank checks, and runs
    # as it is: there, a sharded evaluation loader is reported only when nothing in the file
    # combines the ranks' results, and rank checks are left alone (each is deliberate far more
    # often than it is a hang).
    for loader in facts.loaders:
        if not loader.training and loader.distributed_sampler:
            if migrating or (
                _evaluates(loader) and _iterated_here(facts, loader.target) and not _combines_ranks(facts)
            ):
                _report(facts, plan, EVAL_SHARDED, loader.call, None if migrating else (
                    f"`{loader.target}` reads a DistributedSampler and nothing in this file all-reduces or gathers "
                    "what it computes: the metric covers this rank's shard only (and the sampler's padding repeats samples)"
                ))
    for node in facts.rank_divergent:
        # In code that already runs distributed, only a collective behind the check is evidence
        # of a hang; a forward there (sampling, logging on rank 0) usually runs on the bare module.
        collective = _collective_in(node)
        if migrating or collective is not None:
            _report(facts, plan, RANK_DIVERGENCE, node, None if collective is None else (
                f"`{code_of(collective.func)}(...)` runs only where `{code_of(node.test)}` holds: the other ranks never "
                "join that collective and it waits for them forever"
            ))


# torch.distributed's collectives by their last name (`dist.gather_object`, `torch.distributed.barrier`).
COLLECTIVE_NAMES = frozenset(name.rsplit(".", 1)[1] for name in N.COLLECTIVES)

# Calls that combine per-rank results: torch.distributed's collectives and the helpers projects
# write around them (`torch_dist_sum`, `reduce_tensor`, `metric_logger.synchronize_between_processes()`).
_COMBINING_WORDS = ("reduce", "gather", "dist_sum", "synchron")


def _evaluates(loader) -> bool:
    """Named for evaluation (`val_loader`, `test_loader`), or built in `evaluate()`/`validate()`: a
    loader whose training this file cannot see (KAIR's `model.optimize_parameters()`) is not
    taken for an evaluation one."""
    owner = getattr(loader.owner, "name", None)
    names = ((loader.target or "").split(".")[-1], owner.value if isinstance(owner, cst.Name) else "")
    return any(word in name.lower() for name in names for word in ("val", "test", "eval"))


def _iterated_here(facts: ScriptFacts, loader: Optional[str]) -> bool:
    """Is the loader looped over in this file (so its metric is computed, unreduced, here)?"""
    if loader is None:
        return False
    name = loader.split(".")[-1]
    return any(
        name in {n.value for n in descendants(loop.iter, cst.Name)} | {a.attr.value for a in descendants(loop.iter, cst.Attribute)}
        for loop in facts.loops if isinstance(loop, cst.For)
    )


def _collective_in(node: cst.If) -> Optional[cst.Call]:
    return next((call for call in descendants(node.body, cst.Call) if attribute_name(call.func) in COLLECTIVE_NAMES), None)


def _combines_ranks(facts: ScriptFacts) -> bool:
    for call in facts.calls:
        name = (call.func.value if isinstance(call.func, cst.Name) else attribute_name(call.func) or "").lower()
        if any(word in name for word in _COMBINING_WORDS):
            return True
    return False


def _batch_message(facts: ScriptFacts, loader, mode: str, why: str) -> Optional[str]:
    """DDP120 for a sharded loader: none when DDP019 kept the global batch; else the factor, the
    mode and why (or why the batch could not be split)."""
    if mode == global_batch.GLOBAL:
        if not facts.after_setup(loader.call):
            return None  # not sharded either: DDP108 says why
        if global_batch.splittable(loader) is not None:
            return None
        argument = global_batch.batch_argument(loader.call)
        reason = (f"its batch size `{code_of(argument.value)}` is an expression (split it by hand: `// dist.get_world_size()`)"
                  if argument is not None else "it uses DataLoader's default batch_size of 1")
        return (f"the global batch is now batch_size x world_size: --batch global could not split this loader's batch, "
                f"{reason}")
    if global_batch.dataparallel_script(facts):
        return (f"the global batch is now batch_size x world_size ({why}): DataParallel split this batch over the "
                "GPUs, each process now loads all of it; --batch global keeps the original global batch")
    return (f"the global batch is now batch_size x world_size ({why}): scale the learning rate, or run ddp-migrate "
            "with --batch global to keep the original global batch")


def _report(facts: ScriptFacts, plan: Plan, rule: Rule, node, message: Optional[str] = None) -> None:
    line, col = facts.line_col(node)
    plan.diagnostics.append(Diagnostic(rule.code, line, col, message or rule.summary))
