"""Is a file set up for several processes already? The signs the engine reads the same way, found
with the standard `ast` module (no LibCST), for the engine's first look at a file (migrator.triage).

Only signs that mean the same here and in the engine (migrator.analysis.distributed) count: a call
of a setup helper by its name (`init_process_group`, `init_distributed_mode`: the engine does not
resolve those either), a framework imported (Accelerate, Lightning, DeepSpeed ...), and a call of
a project function that sets up (migrator.graph.distributing, the same answers the engine gets).
A sign the engine resolves differently (DDP through an alias) is not looked for: the file then goes
to the engine, which decides. Nothing is ever claimed that the engine would not find.
"""
from __future__ import annotations

import ast
from typing import Dict, Iterator, Optional, Set

from migrator.context import FileContext
from migrator.graph.distributing import what_it_does
from migrator.graph.modules import NOT_PROJECT_PACKAGES, absolute, dotted
from migrator.relevance import FRAMEWORKS, TRANSFORMERS_TRAINERS, is_distributed_setup_name


def distribution_evidence(tree: ast.Module, context: Optional[FileContext]) -> Optional[str]:
    """Why the file is distributed already (one reason), or None when no such sign is found."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    for call in calls:
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", None)
        if name and is_distributed_setup_name(name):
            return f"`{name}(...)` sets up the process group"
    framework = next(_frameworks(tree), None)
    if framework is not None:
        return f"it trains through {framework}"
    if context is None or context.modules is None:
        return None
    imported = _imported_names(tree, context.package)
    rebound = _rebound_names(tree)
    for call in calls:
        name = dotted(call.func)
        head, _, rest = (name or "").partition(".")
        source = imported.get(head)
        if source is None or head in rebound or source.split(".")[0] in NOT_PROJECT_PACKAGES:
            continue
        why = what_it_does(context.modules.roots, f"{source}.{rest}" if rest else source)
        if why:
            return f"`{name}(...)` {why}"
    return None


def _frameworks(tree: ast.Module) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sources = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "transformers" and any(alias.name in TRANSFORMERS_TRAINERS for alias in node.names):
                yield "the Hugging Face Trainer"
                continue
            sources = [node.module]
        else:
            continue
        for source in sources:
            for prefix, framework in FRAMEWORKS:
                if source == prefix or source.startswith(prefix + "."):
                    yield framework
                    break


def _imported_names(tree: ast.Module, package: Optional[str]) -> Dict[str, str]:
    """Local name -> absolute dotted source, as analysis.distributed._imported_names reads them."""
    found: Dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                found.setdefault(local, alias.name if alias.asname else local)
        elif isinstance(node, ast.ImportFrom) and not any(alias.name == "*" for alias in node.names):
            base = absolute(node.level, node.module or "", package)
            if base is None:
                continue
            for alias in node.names:
                found.setdefault(alias.asname or alias.name, f"{base}.{alias.name}" if base else alias.name)
    return found


def _rebound_names(tree: ast.Module) -> Set[str]:
    """Names bound other than by an import anywhere in the file (assigned, a parameter, a loop
    target): a call through one of them may not be the imported helper, so it is no sign here."""
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names
