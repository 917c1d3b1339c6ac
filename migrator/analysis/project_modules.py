"""Helpers in the project's own modules: what `utils.init_distributed_mode(args)` does.

Each module is read and summarised once per process (migrator.graph.modules); the answer for a
name is worked out on first use and kept, so a helper calling helpers of the same module, names
imported from other project modules, and package `__init__` re-exports (`from .launch import
launch`, `from .launch import *`) are each followed once: linear in what is followed. A cycle of
imports answers "nothing" for the name being worked out.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from migrator.graph.modules import ModuleSummary, lookup

# What a helper in another module calls when it sets up distribution (read from its text, so
# by the last name of the call: `dist.init_process_group`, `DistributedDataParallel(...)`).
_SETUP_CALLS = {
    "init_process_group": "calls init_process_group",
    "DistributedDataParallel": "wraps the model in DistributedDataParallel",
    "FullyShardedDataParallel": "wraps the model in FSDP",
    "fully_shard": "wraps the model in FSDP",
    "start_processes": "starts the workers (mp.start_processes)",
    "init_distributed": "sets up the process group (init_distributed)",
}

Roots = Tuple[str, ...]
_IN_PROGRESS = ""  # the answer while a name is being worked out: a cycle finds "nothing" there
_ANSWERS: Dict[Tuple[Roots, str, str], Optional[str]] = {}


def what_it_does(roots: Roots, qualified: str) -> Optional[str]:
    """For `pkg.mod.func`: what `func` in the project's `pkg/mod.py` does to distribute, or None."""
    found = lookup(roots, qualified)
    if found is None:
        return None
    module, names = found
    return _does(roots, module, names[0]) or None


def _does(roots: Roots, module: ModuleSummary, name: str) -> Optional[str]:
    key = (roots, module.path, name)
    if key in _ANSWERS:
        return _ANSWERS[key]
    _ANSWERS[key] = _IN_PROGRESS
    answer = _ANSWERS[key] = _work_out(roots, module, name)
    return answer


def _work_out(roots: Roots, module: ModuleSummary, name: str) -> Optional[str]:
    if name in module.definitions:
        called = module.calls(name)
        direct = _direct(called)
        if direct:
            return direct
        for call in called:  # helpers calling helpers, of this module or imported from the project
            head, _, rest = call.partition(".")
            if head in module.definitions and head != name:
                why = _does(roots, module, head)
                if why:
                    return f"calls `{head}`, which {why}"
            elif head in module.imports:
                why = what_it_does(roots, module.imports[head] + (f".{rest}" if rest else ""))
                if why:
                    return f"calls `{call}`, which {why}"
        return None
    if name in module.imports:  # a re-export: `from .launch import launch` in a package's __init__
        return what_it_does(roots, module.imports[name])
    for star in module.star_imports:  # `from .launch import *`
        why = what_it_does(roots, f"{star}.{name}")
        if why:
            return why
    return None


def _direct(called: Tuple[str, ...]) -> Optional[str]:
    for name in called:
        last = name.rpartition(".")[2]
        if last in _SETUP_CALLS:
            return _SETUP_CALLS[last]
        if last == "spawn" and ("mp" in name.split(".") or "multiprocessing" in name):
            return "starts the workers (mp.spawn)"
    return None
