"""Every rule's code and name, generated from the registry by `python -m migrator.docs --write`.

Plain data, so the CLI can check --select/--ignore and name findings without importing the
rules (and LibCST). Do not edit: tests/test_readme.py fails when this no longer matches RULES.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Tuple

#: (code, name) of every rule, in registry order.
CODES: Tuple[Tuple[str, str], ...] = (
    ("DDP001", "process-group-setup"),
    ("DDP002", "per-rank-device"),
    ("DDP003", "wrap-model"),
    ("DDP004", "destroy-process-group"),
    ("DDP018", "download-once"),
    ("DDP010", "distributed-sampler"),
    ("DDP026", "shared-split"),
    ("DDP019", "global-batch"),
    ("DDP025", "per-process-workers"),
    ("DDP011", "set-epoch"),
    ("DDP022", "no-sync-accumulation"),
    ("DDP023", "eval-sharded-reduce"),
    ("DDP012", "rank-zero-checkpoint"),
    ("DDP013", "rank-zero-logging"),
    ("DDP014", "checkpoint-keys"),
    ("DDP015", "module-api"),
    ("DDP016", "makedirs-exist-ok"),
    ("DDP020", "local-rank-argument"),
    ("DDP005", "legacy-launch-cpu"),
    ("DDP024", "spawn-to-torchrun"),
    ("DDP021", "launch-command-in-python"),
    ("DDP017", "async-keyword"),
    ("DDP101", "no-entry-point"),
    ("DDP102", "cuda-call-without-device"),
    ("DDP103", "dataparallel-unsupported"),
    ("DDP104", "model-not-traced"),
    ("DDP105", "import-time-model"),
    ("DDP106", "loader-has-sampler"),
    ("DDP107", "iterable-dataset"),
    ("DDP126", "split-not-shared"),
    ("DDP108", "untraced-loader"),
    ("DDP109", "no-epoch-loop"),
    ("DDP110", "save-runs-shared-code"),
    ("DDP111", "dataparallel-outside-training"),
    ("DDP112", "legacy-launch-import"),
    ("DDP113", "python-launch-unsafe"),
    ("DDP115", "save-after-teardown"),
    ("DDP117", "spawn-not-migrated"),
    ("DDP125", "unsound-migration"),
    ("DDP114", "training-not-migrated"),
    ("DDP116", "moved-after-wrap"),
    ("DDP118", "gradient-penalty-backward"),
    ("DDP119", "second-backward-retained-graph"),
    ("DDP120", "global-batch-size"),
    ("DDP121", "sharded-evaluation"),
    ("DDP122", "gradient-accumulation-no-sync"),
    ("DDP123", "sync-batchnorm"),
    ("DDP124", "rank-divergent-code"),
    ("DDP130", "distributed-sampler-without-set-epoch"),
    ("DDP131", "every-rank-writes-checkpoint"),
    ("DDP030", "module-distributed-sampler"),
    ("DDP031", "module-set-epoch"),
    ("DDP032", "module-rank-zero-checkpoint"),
    ("DDP033", "module-checkpoint-keys"),
    ("DDP034", "module-model-api"),
    ("DDP140", "project-module-needs-migration"),
    ("DDP035", "module-rank-zero-output"),
    ("DDP036", "module-shared-folders"),
    ("DDP037", "module-network-factory"),
    ("DDP038", "module-device-list"),
    ("DDP201", "launch-to-torchrun"),
    ("DDP202", "drop-use-env"),
    ("DDP203", "drop-local-rank-arg"),
    ("DDP204", "launcher-unsafe"),
)

NAMES: Dict[str, str] = dict(CODES)  # code -> name
BY_NAME: Dict[str, str] = {name: code for code, name in CODES}  # name -> code

#: code -> the fixes its edits rely on (Rule.requires); a selection pulls them in.
REQUIRES: Dict[str, Tuple[str, ...]] = {
    "DDP002": ("DDP001",),
    "DDP003": ("DDP001", "DDP002",),
    "DDP004": ("DDP001",),
    "DDP018": ("DDP001",),
    "DDP010": ("DDP001",),
    "DDP026": ("DDP001",),
    "DDP019": ("DDP010",),
    "DDP025": ("DDP001",),
    "DDP011": ("DDP010",),
    "DDP022": ("DDP003",),
    "DDP023": ("DDP001",),
    "DDP012": ("DDP001",),
    "DDP013": ("DDP001",),
    "DDP014": ("DDP003",),
    "DDP015": ("DDP003",),
    "DDP030": ("DDP001",),
    "DDP031": ("DDP001",),
    "DDP032": ("DDP001",),
    "DDP033": ("DDP003",),
    "DDP034": ("DDP003",),
    "DDP035": ("DDP001",),
    "DDP036": ("DDP001",),
    "DDP037": ("DDP001",),
    "DDP038": ("DDP001",),
}

#: Fixes whose sites stand alone (Rule.per_site): a suppression drops one site, not the fix.
PER_SITE: FrozenSet[str] = frozenset({"DDP026", "DDP012", "DDP013", "DDP016"})

#: Advisories that ask for no action: they never fail --check (every other finding does).
INFORMATIONAL: FrozenSet[str] = frozenset({"DDP111", "DDP120", "DDP122", "DDP123"})
