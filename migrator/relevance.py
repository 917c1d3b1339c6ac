"""Which files may need the engine at all, decided from the raw text (no parsing, no imports).

A pre-commit hook runs on every commit: a repository's plain Python files, and even its torch
model definitions, must cost nothing. The engine only ever changes or reports something in a
file that trains (a torch.optim optimizer, or a backward pass: hand-written updates and optimizers
built in another module train too), wraps a model in DataParallel, declares a --local_rank
argument or uses torch.distributed (the launcher too), so the rest is skipped unread. A training
script must never be skipped: what the engine cannot migrate it reports (DDP114).
"""
from __future__ import annotations

import re

# Any one of these makes a file a candidate on its own.
ALWAYS = ("local_rank", "local-rank", "torch.distributed")
# Otherwise the file must mention torch and one of these.
WITH_TORCH = ("optim", "DataParallel", "backward", ".train(", ".learn(", ".fit(")

# `from train_eval import train`, `from engine import train_one_epoch`: a script that hands its
# model to a project module that trains it (migrator.analysis.project_training).
_IMPORTED_TRAINING = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t][^\n]*\b(?:train|fit)\w*", re.M | re.I)

# Launcher files (shell, Make, YAML, ...) are candidates when they mention the launcher modules.
LAUNCHER = "torch.distributed"


def python_may_need_migration(text: str) -> bool:
    if any(word in text for word in ALWAYS):
        return True
    return "torch" in text and (any(word in text for word in WITH_TORCH) or _IMPORTED_TRAINING.search(text) is not None)


def launcher_may_need_migration(text: str) -> bool:
    return LAUNCHER in text
