"""The rule registry: an explicit, ordered tuple. Planning runs in this order.

Each fixing rule module exposes `RULE` and `plan(facts, plan)`; advisories (DDP1xx) are
reported by the rules that decline, and documented in `advisories`.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.launcher import LAUNCHER_RULES
from migrator.legacy_syntax import RULE as ASYNC_KEYWORD
from migrator.rule import Rule
from migrator.rules import (
    advisories,
    caveats,
    device,
    directories,
    downloads,
    launch_calls,
    local_rank,
    moved_after_wrap,
    process_group,
    rank_zero,
    sampler,
    set_epoch,
    shutdown,
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
    (set_epoch.RULE, set_epoch.plan),
    (rank_zero.CHECKPOINT, rank_zero.plan_checkpoints),
    (rank_zero.LOGGING, rank_zero.plan_logging),
    (unwrap_module.CHECKPOINT_KEYS, unwrap_module.plan_checkpoint_keys),
    (unwrap_module.MODULE_API, unwrap_module.plan_module_api),
    (directories.RULE, directories.plan),
    (local_rank.RULE, local_rank.plan),
    (launch_calls.RULE, launch_calls.plan),
)

# Report-only planners: they add diagnostics, never edits.
REPORTERS: Tuple[Tuple[Tuple[Rule, ...], Planner], ...] = (
    (caveats.RULES, caveats.plan),
    ((moved_after_wrap.RULE,), moved_after_wrap.plan),
    # Last: it reports a training file that everything above left unchanged and unreported.
    ((unmigrated.RULE,), unmigrated.plan),
)

# Launcher files (shell, Make, YAML, Dockerfile, Markdown) share the codes and the registry.
RULES: Tuple[Rule, ...] = (
    tuple(rule for rule, _ in FIXERS) + (ASYNC_KEYWORD,) + advisories.RULES + (unmigrated.RULE, moved_after_wrap.RULE) + caveats.RULES + LAUNCHER_RULES
)
RULES_BY_CODE: Dict[str, Rule] = {rule.code: rule for rule in RULES}
