"""DDP011: call sampler.set_epoch(epoch) at the top of the epoch loop that drives a sharded loader."""
from __future__ import annotations

import libcst as cst

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories import NO_EPOCH_LOOP
from migrator.rules.process_group import needs_setup
from migrator.rules.sampler import sampler_name, shards
from migrator.types import Change, Diagnostic

RULE = Rule(
    code="DDP011",
    name="set-epoch",
    summary="reshuffle every epoch: call sampler.set_epoch(epoch) at the top of the epoch loop",
    what="""
Finds the epoch loop that drives each sharded loader (the loop around the loop over it, or the
loop that calls the function iterating it, `train_one_epoch(model, loader, ...)` or
`self.train_epoch(epoch)`) and inserts `<sampler>.set_epoch(<epoch>)` as its first statement.
Where the sampler variable is not in reach, `<loader>.sampler.set_epoch(epoch)` is used.""",
    why="""
DistributedSampler shuffles with a seed derived from the epoch it is told. Without set_epoch every
epoch visits the samples in the same order: the model silently trains on a fixed ordering.""",
    fix="Insert the set_epoch call as the first statement of the epoch loop.",
    fix_safety="Safe.",
    fixable=True,
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for loader in facts.loaders:
        if not shards(loader) or _never_shuffles(loader):
            continue
        if not loader.hooks:
            where = loader.no_epoch_loop or loader.call
            line, col = facts.line_col(where)
            plan.diagnostics.append(Diagnostic(NO_EPOCH_LOOP.code, line, col, NO_EPOCH_LOOP.summary))
            continue
        for hook in loader.hooks:
            if facts.owner_of(hook.loop) is loader.owner and loader.target == hook.loader_expr:
                sampler = sampler_name(loader, facts)
            else:
                sampler = f"{hook.loader_expr}.sampler"
            if not isinstance(hook.loop.body, cst.IndentedBlock):
                continue  # `for epoch in range(n): train(epoch)` on one line: rare, left alone
            first = hook.loop.body.body[0]
            plan.insert_before(first, _build.statements(facts, f"{sampler}.set_epoch({hook.epoch})\n"))
            line, col = facts.line_col(hook.loop)
            plan.changes.append(Change(RULE.code, line, col, f"{sampler}.set_epoch({hook.epoch}) at the start of each epoch"))


def _never_shuffles(loader) -> bool:
    value = loader.shuffle.value if loader.shuffle is not None else None
    return loader.kwargs_dict is None and (value is None or getattr(value, "value", None) == "False")
