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


# A main guard, a command line read and an optimizer stepped: a training script, whatever its file is
# called (a repository that names its scripts `train_test.py`, `mnist_test.py`). pytest and unittest
# modules have none of the first two together.
_MAIN_GUARD = re.compile(r"""^if[ \t]+__name__[ \t]*==[ \t]*['"]__main__['"]""", re.M)
_COMMAND_LINE = ("ArgumentParser", "sys.argv", "argparse", "click.", "fire.Fire", "OmegaConf", "hydra")


def runs_as_a_script(text: str) -> bool:
    """Does the file run as a training script (a main guard, reads its command line, steps an
    optimizer), whatever its name says?"""
    return ".step(" in text and _MAIN_GUARD.search(text) is not None and any(word in text for word in _COMMAND_LINE)


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
    ("--local", re.compile(r"--local[_-]rank")),  # the launcher's argument (DDP020, DDP005); `get_local_rank()` is none
    ("configure_optimizers", re.compile(r"(?<!def )\bconfigure_optimizers\b")),
    ("DataParallel", re.compile(r"(?<!Distributed)(?<!FullySharded)DataParallel\s*(?:\(|as\b)")),
    ("data_parallel", re.compile(r"\bdata_parallel\s*\(")),
    ("DistributedSampler", re.compile(r"DistributedSampler\s*(?:\(|as\b)")),
    ("optim.", re.compile(r"\boptim\.(?!Optimizer\b)[A-Z]\w*\s*\(")),
    *((name, re.compile(rf"(?<!class )(?<!def )\b{name}W?\s*\(")) for name in _OPTIMIZERS),
    # `get_optimizer(cfg, model)`, `build_optimizer(...)` called (not defined; not `get_optimizer_params`)
    ("optim", re.compile(r"(?i)(?<!def )\b(?:get|build|make|create|init)_\w*optim(?:izers?)?\s*\(")),
    ("Optim", re.compile(r"(?i)(?<!def )\b(?:get|build|make|create|init)_\w*optim(?:izers?)?\s*\(")),
)
# A backward pass or an optimizer's step without anything above: training through objects built
# elsewhere. It is reported (DDP114) only in a file that runs, or that builds a loader or uses
# torch.optim itself (rules.unmigrated's "sets up training").
_STEP_SHAPES: Tuple[_Shape, ...] = (
    ("backward", re.compile(r"(?<!def )\bbackward\s*\(")),
    # an optimizer's step (`optimizer.step()`, `self.opt_g.step()`); a scheduler's or a scaler's is not one
    (".step", re.compile(r"(?i)\b(?:\w*optim\w*|opt|opt_[gd]|solver)\s*\.\s*step\s*\(")),
)
_BUILDS_LOADERS = re.compile(r"\bDataLoader\s*\(")
# Code already written for several processes (its own process group, DDP, FSDP, workers started
# with spawn, a setup helper) is only reported for its genuine bugs, and those need a save or a
# rank check (the sampler and --local_rank are shapes of their own, above).
_DISTRIBUTED = ("torch.distributed", "DistributedDataParallel", "FullyShardedDataParallel", "spawn", "init_dist",
                "setup_dist", "dist_init", "Init_dist", "Setup_dist")
_DISTRIBUTED_BUG_SHAPES: Tuple[_Shape, ...] = (
    ("save", re.compile(r"\bsave\s*\(")),
    ("rank", re.compile(r"^[ \t]*(?:el)?if\b.*rank")),
    ("main_process", re.compile(r"^[ \t]*(?:el)?if\b.*main_process")),
    ("is_master", re.compile(r"^[ \t]*(?:el)?if\b.*is_master")),
    ("is_main", re.compile(r"^[ \t]*(?:el)?if\b.*\bis_main\b")),
)
_PARAMETER_LOOP = re.compile(r"\bfor\s+(\w+)\s+in\s+.*\bparameters\s*\(")  # a hand-written update reads p.grad
# a main guard, a loop at module level, or a backward pass or a step at module level (a flat script)
_RUNS = re.compile(r"^(?:if\s+__name__\b|for\b|while\b|[\w.]+\.(?:backward|step)\s*\()", re.M)
_TRAINING_CALL = re.compile(
    r"\.(?:fit|learn|train_epoch|train_one_epoch|training|train_step|optimize)\s*\(|\.train\(\s*\)"
    r"|(?i:(?:agent|learner|trainer|policy|algo)\w*)\.update\s*\(|\b(?:fit|learn|run_epoch|train\w*|\w+_train)\s*\("
)
_TRAINING_WORDS = ("train", "fit", "learn", "optimize", "run_epoch", "update")


# `optimizer = optimizer_cls(model.parameters())`: an optimizer chosen at run time, built from a
# model's parameters (on that line, or through a name assigned them: so the file must call parameters())
_OPTIMIZER_ASSIGNED = re.compile(r"(?i)^[ \t]*[\w., \t]*optim\w*[ \t]*=[ \t]*[\w.]+[ \t]*\(")


def python_may_train(text: str, test_module: bool = False) -> bool:
    """Does a candidate's text have the shape of something the engine changes or reports? In a test
    module (pytest's files) only launch commands and PyTorch 0.3 syntax are."""
    if _has_shape(text, _LAUNCH_SHAPES):
        return True
    if test_module:
        return False
    if _has_shape(text, _TRAINING_SHAPES):
        return True
    runs = _RUNS.search(text) is not None
    sets_up = "torch.optim" in text or _has_shape(text, (("DataLoader", _BUILDS_LOADERS),))
    if (runs or sets_up) and _has_shape(text, _STEP_SHAPES):
        return True
    if "parameters" in text and any(
        _OPTIMIZER_ASSIGNED.search(line) for word in ("optim", "Optim", "OPTIM") for line in _lines_with(text, word)
    ):
        return True
    if any(word in text for word in _DISTRIBUTED) and _has_shape(text, _DISTRIBUTED_BUG_SHAPES):
        return True
    if ".grad" in text:
        updated = {name for line in _lines_with(text, "parameters") for name in _PARAMETER_LOOP.findall(line)}
        if any(re.search(rf"\b{re.escape(name)}\.grad\b", text) for name in updated):
            return True
    return runs and any(_TRAINING_CALL.search(line) for word in _TRAINING_WORDS for line in _lines_with(text, word))


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


# Helpers that set up the process group (DeiT/DINO/DETR's `init_distributed_mode`, mmcv's `init_dist`).
_DIST_SETUP_PREFIXES = ("init_distributed", "init_dist", "setup_distributed", "setup_dist", "dist_init", "init_process_group")


def is_distributed_setup_name(name: str) -> bool:
    return name.lower().lstrip("_").startswith(_DIST_SETUP_PREFIXES)


# -- code written for several processes: what the engine still reports there --------------------
# A file set up for several processes already is changed and reported only for what torchrun
# needs and for genuine bugs (rules.ALREADY_DISTRIBUTED_SCOPE): launch commands and PyTorch 0.3
# syntax, a --local_rank argument, a DistributedSampler (set_epoch, sharded evaluation), torch.save
# on every rank, a collective behind a rank check. The text of each, or it has nothing to say.
# Frameworks that set up the processes and wrap the model themselves.
FRAMEWORKS: Tuple[Tuple[str, str], ...] = (
    ("accelerate", "Hugging Face Accelerate"),
    ("lightning_fabric", "Lightning Fabric"),
    ("lightning", "Lightning"),
    ("pytorch_lightning", "PyTorch Lightning"),
    ("deepspeed", "DeepSpeed"),
    ("horovod", "Horovod"),
    ("ignite.distributed", "Ignite's idist"),
    ("torch.distributed.elastic", "torch.distributed.elastic"),
    ("torch.distributed.fsdp", "FSDP"),
    ("torch.distributed._composable", "FSDP"),
    ("fairscale", "FairScale"),
    ("colossalai", "ColossalAI"),
    ("torch_xla", "PyTorch/XLA"),
    ("trl", "TRL"),
)
# From transformers, only its Trainer distributes (it reads torchrun's environment itself).
TRANSFORMERS_TRAINERS = ("Trainer", "Seq2SeqTrainer", "TrainingArguments", "Seq2SeqTrainingArguments")

#: torch.distributed's collectives by their last name (a test keeps them equal to names.COLLECTIVES).
COLLECTIVE_NAMES = frozenset({
    "barrier", "monitored_barrier", "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor",
    "broadcast", "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "new_group",
    "init_process_group", "destroy_process_group",
})
_RANK_CHECK = re.compile(r"^[ \t]*(?:el)?if\b.*(?:rank|main_process|is_master)", re.M)
_COLLECTIVE_CALL = re.compile(r"\b(?:" + "|".join(sorted(COLLECTIVE_NAMES, key=len, reverse=True)) + r")\s*\(")


def has_distributed_findings_shape(text: str, saves_with_torch: bool) -> bool:
    """Could an already distributed file have something to change or report (see above)?"""
    if _has_shape(text, _LAUNCH_SHAPES) or _has_shape(text, _TRAINING_SHAPES[:1]) or "DistributedSampler" in text:
        return True  # launch usage, --local_rank, a sampler
    if saves_with_torch:
        return True
    return _RANK_CHECK.search(text) is not None and _COLLECTIVE_CALL.search(text) is not None

