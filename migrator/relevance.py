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
from typing import Iterator, Optional, Pattern, Tuple

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


# -- the second look: the shapes of calls that training and distributed code make ------------
# A candidate by the words above is parsed (LibCST, the costliest step by far) only when its text
# also has the shape of something a rule reads: an optimizer being built or stepped, a backward
# pass, a hand-written update, a DataParallel call, a sampler, a setup helper, a launch command,
# `async=`, or, in a file that runs (a main guard, a loop at module level), a training call. A
# library's model and layer files mention `optim`, `DataParallel` and `.train(` in passing and have
# none of these. The expressions may match in a comment or a string: that costs a parse, never a
# finding. Training handed to the project's own modules (`Trainer(model, loader)` from
# trainer.py) is judged by the caller, which knows them (api.migrate, through
# migrator.analysis.project_training). tests/test_relevance.py holds these to the engine.
# Each shape is a word (found with str.find, which is fast) and an expression tried on the lines that
# hold it (one alternation over a whole file is slow in `re`: 150 ms on a 5,000-line model file).
_Shape = Tuple[str, Optional[Pattern[str]]]
_LAUNCH_SHAPES: Tuple[_Shape, ...] = (
    ("distributed", re.compile(r"torch[./]distributed[./](?:launch|run)\b|distributed\s+import\s+.*\blaunch\b")),
    ("async", re.compile(r"\basync\s*=")),
)
_OPTIMIZERS = ("SGD", "Adam", "Adamax", "Adadelta", "Adagrad", "ASGD", "LBFGS", "NAdam", "RAdam", "RMSprop", "Rprop")
_TRAINING_SHAPES: Tuple[_Shape, ...] = (
    ("local_rank", None),
    ("local-rank", None),
    ("configure_optimizers", None),
    ("spawn", None),
    ("DataParallel", re.compile(r"(?<!Distributed)(?<!FullySharded)DataParallel\s*(?:\(|as\b)")),
    ("data_parallel", re.compile(r"\bdata_parallel\s*\(")),
    ("DistributedSampler", re.compile(r"DistributedSampler\s*(?:\(|as\b)")),
    ("backward", re.compile(r"(?<!def )\bbackward\s*\(")),
    (".step", re.compile(r"\.step\s*\(")),
    ("optim.", re.compile(r"\boptim\.(?!Optimizer\b)[A-Z]\w*\s*\(")),
    *((name, re.compile(rf"(?<!class )(?<!def )\b{name}W?\s*\(")) for name in _OPTIMIZERS),
    ("dist", re.compile(r"(?i)init_dist|setup_dist|dist_init")),
    # `get_optimizer(cfg, model)`, `optimizer = optimizer_cls(model.parameters())`
    ("optim", re.compile(r"(?i)\b(?:get|build|make|create|init)_\w*optim\w*\s*\(|^[ \t]*[\w., \t]*optim\w*[ \t]*=[ \t]*[\w.]+[ \t]*\(")),
    ("Optim", re.compile(r"(?i)\b(?:get|build|make|create|init)_\w*optim\w*\s*\(|^[ \t]*[\w., \t]*optim\w*[ \t]*=[ \t]*[\w.]+[ \t]*\(")),
)
# Code already written for several processes (torch.distributed, DDP, FSDP) is only reported for its
# genuine bugs, and those need a save or a rank check.
_DISTRIBUTED = ("torch.distributed", "DistributedDataParallel", "FullyShardedDataParallel")
_DISTRIBUTED_BUG_SHAPES: Tuple[_Shape, ...] = (
    ("save", re.compile(r"\bsave\s*\(")),
    ("rank", re.compile(r"^[ \t]*(?:el)?if\b.*rank")),
    ("main_process", re.compile(r"^[ \t]*(?:el)?if\b.*main_process")),
    ("is_master", re.compile(r"^[ \t]*(?:el)?if\b.*is_master")),
)
_PARAMETER_LOOP = re.compile(r"\bfor\s+(\w+)\s+in\s+.*\bparameters\s*\(")  # a hand-written update reads p.grad
_RUNS = re.compile(r"^(?:if\s+__name__\b|for\b|while\b)", re.M)  # a main guard, or a loop at module level
_TRAINING_CALL = re.compile(
    r"\.(?:fit|learn|train_epoch|train_one_epoch|training|train_step|optimize)\s*\(|\.train\(\s*\)"
    r"|(?i:(?:agent|learner|trainer|policy|algo)\w*)\.update\s*\(|\b(?:fit|learn|run_epoch|train\w*|\w+_train)\s*\("
)
_TRAINING_WORDS = ("train", "fit", "learn", "optimize", "run_epoch", "update")


def python_may_train(text: str, test_module: bool = False) -> bool:
    """Does a candidate's text have the shape of something the engine changes or reports? In a test
    module (pytest's files) only launch commands and PyTorch 0.3 syntax are."""
    if _has_shape(text, _LAUNCH_SHAPES):
        return True
    if test_module:
        return False
    if _has_shape(text, _TRAINING_SHAPES):
        return True
    if any(word in text for word in _DISTRIBUTED) and _has_shape(text, _DISTRIBUTED_BUG_SHAPES):
        return True
    if ".grad" in text:
        updated = {name for line in _lines_with(text, "parameters") for name in _PARAMETER_LOOP.findall(line)}
        if any(re.search(rf"\b{re.escape(name)}\.grad\b", text) for name in updated):
            return True
    return _RUNS.search(text) is not None and any(
        _TRAINING_CALL.search(line) for word in _TRAINING_WORDS for line in _lines_with(text, word)
    )


def _has_shape(text: str, shapes: Tuple[_Shape, ...]) -> bool:
    for word, pattern in shapes:
        if word in text and (pattern is None or any(pattern.search(line) for line in _lines_with(text, word))):
            return True
    return False


def _lines_with(text: str, word: str) -> Iterator[str]:
    """Each line of `text` that holds `word`, once."""
    start = text.find(word)
    while start != -1:
        begin = text.rfind("\n", 0, start) + 1
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        yield text[begin:end]
        start = text.find(word, end)


def launcher_may_need_migration(text: str) -> bool:
    return LAUNCHER in text
