"""The rule registry: an explicit, ordered tuple. Planning runs in this order.

Each fixing rule module exposes `RULE` and `plan(facts, plan)`; advisories (DDP1xx) are
reported by the rules that decline, and documented in `advisories`.
"""
from __future__ import annotations

from typing import Callable, Dict, FrozenSet, Optional, Tuple

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.launcher import LAUNCHER_RULES
from migrator.legacy_syntax import RULE as ASYNC_KEYWORD
from migrator.rules import modules as project_rules
from migrator.rule import Rule
from migrator.rules import (
    advisories,
    caveats,
    device,
    directories,
    distributed_bugs,
    downloads,
    global_batch,
    gradient_penalty,
    launch_calls,
    legacy_launch,
    loader_workers,
    local_rank,
    moved_after_wrap,
    no_sync,
    process_group,
    rank_zero,
    sampler,
    set_epoch,
    shared_split,
    sharded_eval,
    shutdown,
    spawn,
    unmigrated,
    unwrap_module,
    wrap_model,
)

Planner = Callable[[ScriptFacts, Plan], None]

# (rule, planner) in planning order: the setup is inserted before the device line, and so on.
FIXERS: Tuple[Tuple[Rule, Planner], ...] = (
    (process_group.RULE, process_group.plan),
    (device.RULE, device.plan),
    (wrap_model.RULE, wrap_model.plan),
    (shutdown.RULE, shutdown.plan),
    (downloads.RULE, downloads.plan),  # before the sampler: its barrier precedes a data set the sampler hoists
    (sampler.RULE, sampler.plan),
    (shared_split.RULE, shared_split.plan),
    (global_batch.RULE, global_batch.plan),  # after the sampler: both edit the loader call
    (loader_workers.RULE, loader_workers.plan),
    (set_epoch.RULE, set_epoch.plan),
    (no_sync.RULE, no_sync.plan),
    (sharded_eval.RULE, sharded_eval.plan),
    (rank_zero.CHECKPOINT, rank_zero.plan_checkpoints),
    (rank_zero.LOGGING, rank_zero.plan_logging),
    (unwrap_module.CHECKPOINT_KEYS, unwrap_module.plan_checkpoint_keys),
    (unwrap_module.MODULE_API, unwrap_module.plan_module_api),
    (directories.RULE, directories.plan),
    (local_rank.RULE, local_rank.plan),
    (legacy_launch.RULE, legacy_launch.plan),  # already-distributed scripts only (it gates itself)
    (spawn.RULE, spawn.plan),  # --spawn only (it gates itself): an mp.spawn script, distributed already
    (launch_calls.RULE, launch_calls.plan),
)

# Report-only planners: they add diagnostics, never edits.
REPORTERS: Tuple[Tuple[Tuple[Rule, ...], Planner], ...] = (
    (caveats.RULES, caveats.plan),
    ((moved_after_wrap.RULE,), moved_after_wrap.plan),
    ((gradient_penalty.RULE, gradient_penalty.RETAINED), gradient_penalty.plan),
    (distributed_bugs.RULES, distributed_bugs.plan),
    # Last: it reports a training file that everything above left unchanged and unreported.
    ((unmigrated.RULE,), unmigrated.plan),
)

# Launcher files (shell, Make, YAML, Dockerfile, Markdown) share the codes and the registry.
RULES: Tuple[Rule, ...] = (
    tuple(rule for rule, _ in FIXERS) + (ASYNC_KEYWORD,) + advisories.RULES + (unmigrated.RULE, moved_after_wrap.RULE, gradient_penalty.RULE, gradient_penalty.RETAINED) + caveats.RULES + distributed_bugs.RULES + project_rules.RULES + LAUNCHER_RULES
)
RULES_BY_CODE: Dict[str, Rule] = {rule.code: rule for rule in RULES}

# What may change or be reported in a Python file that is not a single-process training script.
# Launch commands and syntax PyTorch no longer parses are fixed everywhere.
_LAUNCH_USAGE = frozenset({launch_calls.RULE.code, ASYNC_KEYWORD.code, advisories.LEGACY_LAUNCH_IMPORT.code, advisories.PYTHON_LAUNCH_UNSAFE.code})
# Already distributed: what torchrun needs (the --local_rank argument) and the genuine bugs.
# With --spawn, an mp.spawn script becomes a torchrun script (or says why not).
ALREADY_DISTRIBUTED_SCOPE = _LAUNCH_USAGE | frozenset(
    {local_rank.RULE.code, legacy_launch.RULE.code, caveats.RANK_DIVERGENCE.code, caveats.EVAL_SHARDED.code, *(rule.code for rule in distributed_bugs.RULES),
     spawn.RULE.code, advisories.SPAWN_NOT_MIGRATED.code}
)
# Test modules (pytest/unittest files) build models and optimizers to test them: no training advisories.
TEST_MODULE_SCOPE = _LAUNCH_USAGE


def rules_in_scope(facts: ScriptFacts, test_module: bool) -> Optional[FrozenSet[str]]:
    """The codes that may fire on this file (`test_module`: FileContext.tests); None: all of them (a
    single-process training script)."""
    if test_module:
        return TEST_MODULE_SCOPE
    if facts.already_distributed:
        return ALREADY_DISTRIBUTED_SCOPE
    return None
