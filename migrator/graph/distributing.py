"""Helpers in the project's own modules that distribute: what `utils.init_distributed_mode(args)` does.

Each module is read and summarised once per process (migrator.graph.modules); the answer for a
name is worked out on first use and kept, so a helper calling helpers of the same module, names
imported from other project modules, and package `__init__` re-exports (`from .launch import
launch`, `from .launch import *`) are each followed once: linear in what is followed. A cycle of
imports answers "nothing" for the name being worked out.
"""
from __future__ import annotations

from typing import Dict, Iterator, Optional, Tuple

from migrator.graph.modules import INDEX, NOT_PROJECT_PACKAGES, ModuleSummary, absolute, import_lines, lookup

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
    if not _may_distribute(roots, module):
        return None  # nothing it can reach names a setup call: answered without parsing anything
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


_REACH: Dict[Tuple[Roots, str], bool] = {}
_SETUP_WORDS = (*_SETUP_CALLS, "spawn")


def _may_distribute(roots: Roots, module: ModuleSummary) -> bool:
    """Can anything in `module` lead to a setup call: its own text names one, or a project module
    it imports can (import lines read from the text; each module is looked at once). A model or
    layer file that imports only other such files cannot, and is never parsed for the question."""
    key = (roots, module.path)
    if key not in _REACH:
        _REACH[key] = False  # an import cycle reaches nothing new
        _REACH[key] = any(word in module.text for word in _SETUP_WORDS) or any(
            _may_distribute(roots, imported) for imported in _imported_modules(roots, module)
        )
    return _REACH[key]


def _imported_modules(roots: Roots, module: ModuleSummary) -> Iterator[ModuleSummary]:
    for line in import_lines(module.text):
        base = absolute(line.level, line.module, module.package)
        if base is None or base.split(".")[0] in NOT_PROJECT_PACKAGES:
            continue
        for dotted in (base, *(f"{base}.{name}" for name in line.names)):
            found = INDEX.module(roots, dotted)
            if found is not None and found.path != module.path:
                yield found


def _direct(called: Tuple[str, ...]) -> Optional[str]:
    for name in called:
        last = name.rpartition(".")[2]
        if last in _SETUP_CALLS:
            return _SETUP_CALLS[last]
        if last == "spawn" and ("mp" in name.split(".") or "multiprocessing" in name):
            return "starts the workers (mp.spawn)"
    return None
