"""Helpers in the project's own modules: what `utils.init_distributed_mode(args)` does.

Read with the standard `ast` module from the text a ProjectModules hands over, one module at a
time and only when a file calls into it; summaries are cached per process. Followed: functions
calling functions of the same module, names imported from other project modules, package
`__init__` re-exports (`from .launch import launch`, `from .launch import *`), up to _MAX_HOPS.
"""
from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, Optional, Tuple

from migrator.context import ProjectModules

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
_MAX_HOPS = 3  # re-exports and helpers calling helpers followed this deep


def absolute(level: int, module: Optional[str], package: Optional[str]) -> Optional[str]:
    if not level:
        return module or None
    if package is None:
        return module or None  # a script run from its folder: `from .x import y` cannot run; read as `x`
    parts = package.split(".")
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def what_it_does(modules: ProjectModules, qualified: str, hops: int = 0) -> Optional[str]:
    """For `pkg.mod.func`: what `func` in the project's `pkg/mod.py` does to distribute, or None."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        text = modules.source(".".join(parts[:cut]))
        if text is None:
            continue
        summary = _module_summary(modules, ".".join(parts[:cut]), text, hops)
        return summary.get(parts[cut])
    return None


_SUMMARIES: Dict[Tuple[Tuple[str, ...], str], Dict[str, str]] = {}


def _module_summary(modules: ProjectModules, dotted: str, text: str, hops: int) -> Dict[str, str]:
    """Name -> what it does, for the functions and classes of a module that set up distribution
    (directly, through another function of the module, or through one it imports from the project)."""
    key = (modules.roots, dotted)
    if key in _SUMMARIES:
        return _SUMMARIES[key]
    _SUMMARIES[key] = {}  # a module importing itself (or a cycle) answers "nothing" meanwhile
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    package = dotted if text and _is_package(modules, dotted) else dotted.rpartition(".")[0]
    imported = _ast_imports(tree, package or None)
    summary: Dict[str, str] = {}
    bodies = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for name, node in bodies.items():
        why = _direct(node)
        if why:
            summary[name] = why
    changed = True
    while changed:  # helpers calling helpers of the same module
        changed = False
        for name, node in bodies.items():
            if name in summary:
                continue
            for called in _called_names(node):
                head = called.split(".")[0]
                if head in summary:
                    summary[name] = f"calls `{head}`, which {summary[head]}"
                elif hops < _MAX_HOPS and head in imported:
                    rest = called[len(head):]
                    why = what_it_does(modules, imported[head] + rest, hops + 1)
                    if why:
                        summary[name] = f"calls `{called}`, which {why}"
                if name in summary:
                    changed = True
                    break
    # Re-exports: `from .launch import launch` or `from .launch import *` in a package's __init__.
    for local, source in imported.items():
        if local not in summary and local not in bodies and hops < _MAX_HOPS:
            why = what_it_does(modules, source, hops + 1)
            if why:
                summary[local] = why
    for star in _star_imports(tree, package or None) if hops < _MAX_HOPS else ():
        star_text = modules.source(star)
        if star_text is not None:
            for name, why in _module_summary(modules, star, star_text, hops + 1).items():
                summary.setdefault(name, why)
    _SUMMARIES[key] = summary
    return summary


def _is_package(modules: ProjectModules, dotted: str) -> bool:
    return any(os.path.isfile(os.path.join(root, *dotted.split("."), "__init__.py")) for root in modules.roots)


def _direct(node: ast.AST) -> Optional[str]:
    for called in _called_names(node):
        last = called.split(".")[-1]
        if last in _SETUP_CALLS:
            return _SETUP_CALLS[last]
        if last == "spawn" and ("mp" in called.split(".") or "multiprocessing" in called):
            return "starts the workers (mp.spawn)"
    return None


def _called_names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            dotted = _ast_dotted(sub.func)
            if dotted:
                yield dotted


def _ast_dotted(node: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _star_imports(tree: ast.Module, package: Optional[str]) -> Iterator[str]:
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            base = absolute(node.level, node.module, package)
            if base:
                yield base


def _ast_imports(tree: ast.Module, package: Optional[str]) -> Dict[str, str]:
    found: Dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                found.setdefault(local, alias.name if alias.asname else local)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node.level, node.module, package)
            if base is None:
                continue
            for alias in node.names:
                if alias.name != "*":
                    found.setdefault(alias.asname or alias.name, f"{base}.{alias.name}")
    return found
