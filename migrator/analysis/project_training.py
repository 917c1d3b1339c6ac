"""Training that a script hands to its project's modules: `train(config, model, train_iter)`
imported from train_eval.py builds the optimizer from `model.parameters()` and runs the loop.

The per-file engine traces a trained model from the optimizer built on its parameters. When that
optimizer is built in a function (or a class's `__init__`) of another module of the project, the
script only builds the model and passes it on; without this, the script is "not training" and
stays unmigrated while its model trains on one GPU. A call whose callee builds an optimizer from
one of its parameters counts as the script's optimizer (like `get_optimizer(args, model)`), and the
argument passed there is the trained model. Read with `ast` from the text a ProjectModules hands
over, only for calls to names imported from the project; summaries are cached per process.
"""
from __future__ import annotations

import ast
from typing import Dict, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis.distributed import _imported_names
from migrator.analysis.project_modules import _ast_imports, _is_package, _star_imports
from migrator.bindings import dotted_name
from migrator.context import FileContext, ProjectModules

_SUMMARIES: Dict[Tuple[Tuple[str, ...], str], Dict[str, Tuple[str, ...]]] = {}


LOADER = "loader:"  # a summary entry for a parameter the callee trains on (its training loader)
MOVED = "moved:"  # ... for a trained parameter the callee moves to a device (`self.model = model.to(device)`)


def trained_arguments(analysis_c, context: Optional[FileContext]) -> Dict[cst.Call, Tuple[List[cst.BaseExpression], List[str], bool]]:
    """Calls to project functions/classes that train an argument: call -> (the models passed, the
    code of the loaders passed where the callee loops over them to train (empty when not known),
    whether the callee moves the model to a device itself)."""
    if context is None or context.modules is None:
        return {}
    imported = _imported_names(analysis_c.import_statements, context.package)
    found: Dict[cst.Call, Tuple[List[cst.BaseExpression], List[str], bool]] = {}
    for call in analysis_c.calls:
        dotted = dotted_name(call.func)
        if not dotted:
            continue
        head, _, rest = dotted.partition(".")
        source = imported.get(head)
        if source is None or source.split(".")[0] in N.NOT_PROJECT_PACKAGES or source.startswith("torch"):
            continue
        qualified = f"{source}.{rest}" if rest else source
        trained = _trained_parameters(context.modules, qualified)
        if trained:
            models = _arguments_for(call, tuple(p for p in trained if not p.startswith((LOADER, MOVED))))
            loaders = _arguments_for(call, tuple(p[len(LOADER):] for p in trained if p.startswith(LOADER)))
            if models:
                found[call] = (models, [_code(value) for value in loaders], any(p.startswith(MOVED) for p in trained))
    return found


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _arguments_for(call: cst.Call, parameters: Tuple[str, ...]) -> List[cst.BaseExpression]:
    """The expressions passed for `parameters` (positions are encoded as "#0", "#1", ...)."""
    values = []
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    for parameter in parameters:
        if parameter.startswith("#"):
            index = int(parameter[1:])
            if index < len(positional):
                values.append(positional[index].value)
        else:
            values += [arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == parameter]
    return [v for v in values if isinstance(v, (cst.Name, cst.Attribute))]


def _trained_parameters(modules: ProjectModules, qualified: str, hops: int = 0) -> Tuple[str, ...]:
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        dotted = ".".join(parts[:cut])
        text = modules.source(dotted)
        if text is None:
            continue
        if len(parts) - cut != 1:
            return ()
        name = parts[cut]
        found = _summary(modules, dotted, text).get(name, ())
        if found or hops >= _MAX_BASE_HOPS or name not in text:
            return found
        # A package `__init__` that re-exports it: `from .trainer import Trainer`, `from .trainer import *`.
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return ()
        package = dotted if _is_package(modules, dotted) else dotted.rpartition(".")[0]
        source = _ast_imports(tree, package or None).get(name)
        if source is not None:
            return _trained_parameters(modules, source, hops + 1)
        for star in _star_imports(tree, package or None):
            found = _trained_parameters(modules, f"{star}.{name}", hops + 1)
            if found:
                return found
        return ()
    return ()


def _summary(modules: ProjectModules, dotted: str, text: str) -> Dict[str, Tuple[str, ...]]:
    """Function or class name -> the parameters it builds an optimizer from (name and "#position")."""
    key = (modules.roots, dotted)
    if key not in _SUMMARIES:
        _SUMMARIES[key] = {}
        if ("optim" in text and "parameters" in text) or "class " in text:  # a class may inherit its optimizer
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                tree = None
            if tree is not None:
                _SUMMARIES[key] = {
                    node.name: trained for node in tree.body
                    for trained in [_trained_by(node, modules, dotted, tree)] if trained
                }
    return _SUMMARIES[key]


def _trained_by(node: ast.stmt, modules: ProjectModules, dotted: str, tree: ast.Module, hops: int = 0) -> Tuple[str, ...]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _from_function(node, skip_self=False)
    if not isinstance(node, ast.ClassDef):
        return ()
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None:
        # The call is `Trainer(model, ...)`: positions are counted without `self`.
        own = _from_function(init, skip_self=True, scope=node)
        if own:
            return own
    if hops >= _MAX_BASE_HOPS:
        return ()
    for base in node.bases:  # `class Trainer(BaseTrainer)`: the optimizer is built in the base's __init__
        inherited = _base_trained(base, modules, dotted, tree, hops + 1)
        if not inherited:
            continue
        if init is None:
            return inherited
        params = [a.arg for a in init.args.args][1:]
        mapped = []
        for entry in inherited:  # by name: `def __init__(self, model, ...): super().__init__(model)`
            prefix = next((p for p in (LOADER, MOVED) if entry.startswith(p)), "")
            name = entry[len(prefix):]
            if not name.startswith("#") and name in params:
                mapped += [prefix + name, f"{prefix}#{params.index(name)}"]
        return tuple(mapped) if any(not m.startswith((LOADER, MOVED)) for m in mapped) else ()
    return ()


_MAX_BASE_HOPS = 3


def _base_trained(base: ast.expr, modules: ProjectModules, dotted: str, tree: ast.Module, hops: int) -> Tuple[str, ...]:
    """What a base class's __init__ trains: the base in this module, or imported from the project."""
    name = _dotted(base)
    if name is None:
        return ()
    local = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if local is not None:
        return _trained_by(local, modules, dotted, tree, hops)
    package = dotted if _is_package(modules, dotted) else dotted.rpartition(".")[0]
    imported = _ast_imports(tree, package or None)
    head, _, rest = name.partition(".")
    source = imported.get(head)
    if source is None:
        return ()
    qualified = f"{source}.{rest}" if rest else source
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        text = modules.source(".".join(parts[:cut]))
        if text is None or len(parts) - cut != 1:
            continue
        try:
            base_tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return ()
        base_module = ".".join(parts[:cut])
        for node in base_tree.body:
            if isinstance(node, ast.ClassDef) and node.name == parts[cut]:
                return _trained_by(node, modules, base_module, base_tree, hops)
        # `from .base_trainer import *` in a package __init__: look one module further
        for star in _star_imports(base_tree, base_module if _is_package(modules, base_module) else base_module.rpartition(".")[0] or None):
            star_text = modules.source(star)
            if star_text is not None and f"class {parts[cut]}" in star_text:
                star_tree = ast.parse(star_text)
                for node in star_tree.body:
                    if isinstance(node, ast.ClassDef) and node.name == parts[cut]:
                        return _trained_by(node, modules, star, star_tree, hops)
        return ()
    return ()


def _from_function(fn: ast.FunctionDef, skip_self: bool, scope: Optional[ast.AST] = None) -> Tuple[str, ...]:
    params = [a.arg for a in fn.args.args]
    if skip_self and params:
        params = params[1:]
    names = set(params) | {a.arg for a in fn.args.kwonlyargs}
    kept = {}  # `self.model = model`: the attribute stands for the parameter
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Name) and sub.value.id in names:
            for target in sub.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                    kept[f"self.{target.attr}"] = sub.value.id
    trained = []
    for sub in ast.walk(scope or fn):
        owner = _optimized_owner(sub)
        name = kept.get(owner, owner) if owner else None
        if name in names and name not in trained:
            trained.append(name)
    loaders = []
    for sub in ast.walk(scope or fn) if trained else ():
        iterated = _training_loop_over(sub)
        name = kept.get(iterated, iterated) if iterated else None
        if name in names and name not in loaders and name not in trained:
            loaders.append(name)
    moved = []
    for sub in ast.walk(scope or fn) if trained else ():
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in ("to", "cuda"):
            owner = _dotted(sub.func.value)
            name = kept.get(owner, owner) if owner else None
            if name in trained and name not in moved:
                moved.append(name)
    out = []
    for prefix, found in (("", trained), (LOADER, loaders), (MOVED, moved)):
        for name in found:
            out.append(prefix + name)
            if name in params:
                out.append(f"{prefix}#{params.index(name)}")
    return tuple(out)


def _training_loop_over(node: ast.AST) -> Optional[str]:
    """`train_iter` in `for batch in enumerate(train_iter):` whose body calls backward() or step()."""
    if not isinstance(node, ast.For):
        return None
    iterated = node.iter
    while isinstance(iterated, ast.Call) and (_dotted(iterated.func) or "") in ("enumerate", "tqdm", "tqdm.tqdm", "iter") and iterated.args:
        iterated = iterated.args[0]
    if not any(isinstance(n, ast.Attribute) and n.attr in ("backward", "step") for body in node.body for n in ast.walk(body)):
        return None
    return _dotted(iterated)


def _optimized_owner(node: ast.AST) -> Optional[str]:
    """`model` in `optim.Adam(model.parameters(), ...)` (or `filter(..., model.parameters())` in it)."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Attribute) and node.func.attr == "configure_optimizers":
        return _dotted(node.func.value)  # minGPT / Lightning style: the model builds its own optimizer
    func = _dotted(node.func) or ""
    if "optim" not in func.lower() and not func.split(".")[-1] in ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad"):
        return None
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in ("parameters", "named_parameters"):
            return _dotted(sub.func.value)
    return None


def _dotted(node: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None
