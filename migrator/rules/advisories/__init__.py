"""DDP1xx: what the tool declines to rewrite, each with a place and a hint. Report only.

The rules are split by concern, one module each: `entry` (no place to set up the process
group), `devices` (`.cuda()` calls), `dataparallel` and `models` (what the wrap rule leaves),
`sharding` and `loaders` (training loaders), `checkpoints` (saves the rank-0 rule cannot guard),
`launch` (torch.distributed.launch driven from Python) and `spawn` (mp.spawn scripts `--spawn` leaves). The rules that decline import them
from here; `RULES` keeps the registry's (and the README table's) order.
"""
from __future__ import annotations

from migrator.rules.advisories.checkpoints import SAVE_AFTER_TEARDOWN, SHARED_WORK_IN_SAVE
from migrator.rules.advisories.dataparallel import DATAPARALLEL_LEFT, DATAPARALLEL_SHAPE
from migrator.rules.advisories.devices import CUDA_CALL_LEFT
from migrator.rules.advisories.entry import IMPORT_TIME_MODEL, NO_ENTRY_POINT
from migrator.rules.advisories.launch import LEGACY_LAUNCH_IMPORT, PYTHON_LAUNCH_UNSAFE
from migrator.rules.advisories.loaders import NO_EPOCH_LOOP, UNTRACED_LOADER
from migrator.rules.advisories.models import MODEL_NOT_TRACED
from migrator.rules.advisories.sharding import CUSTOM_SAMPLER, ITERABLE_DATASET, SPLIT_NOT_SHARED
from migrator.rules.advisories.soundness import UNSOUND_MIGRATION
from migrator.rules.advisories.spawn import SPAWN_NOT_MIGRATED

RULES = (
    NO_ENTRY_POINT,
    CUDA_CALL_LEFT,
    DATAPARALLEL_SHAPE,
    MODEL_NOT_TRACED,
    IMPORT_TIME_MODEL,
    CUSTOM_SAMPLER,
    ITERABLE_DATASET,
    SPLIT_NOT_SHARED,
    UNTRACED_LOADER,
    NO_EPOCH_LOOP,
    SHARED_WORK_IN_SAVE,
    DATAPARALLEL_LEFT,
    LEGACY_LAUNCH_IMPORT,
    PYTHON_LAUNCH_UNSAFE,
    SAVE_AFTER_TEARDOWN,
    SPAWN_NOT_MIGRATED,
    UNSOUND_MIGRATION,
)

__all__ = [
    "CUDA_CALL_LEFT",
    "CUSTOM_SAMPLER",
    "DATAPARALLEL_LEFT",
    "DATAPARALLEL_SHAPE",
    "IMPORT_TIME_MODEL",
    "ITERABLE_DATASET",
    "LEGACY_LAUNCH_IMPORT",
    "MODEL_NOT_TRACED",
    "NO_ENTRY_POINT",
    "NO_EPOCH_LOOP",
    "PYTHON_LAUNCH_UNSAFE",
    "RULES",
    "SAVE_AFTER_TEARDOWN",
    "SHARED_WORK_IN_SAVE",
    "SPAWN_NOT_MIGRATED",
    "SPLIT_NOT_SHARED",
    "UNTRACED_LOADER",
    "UNSOUND_MIGRATION",
]
