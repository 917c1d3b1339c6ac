"""Training that a script hands to its project's modules, read from the modules' text.

`train(config, model, train_iter)` imported from train_eval.py builds the optimizer from
`model.parameters()` and runs the loop; `Trainer(model, loader)` does it in its (base class's)
`__init__`. The per-file engine traces a trained model from the optimizer built on its
parameters: here is how it learns that a call to the project's own code is one. Each module is
read once per process (migrator.graph.modules), parsed with `ast` only when its text could hold
the answer, and each (module, name) is worked out once. No LibCST here: the engine's first look
at a file (migrator.triage) asks these questions before anything heavy is loaded.
"""
from __future__ import annotations

import ast
import re
from typing import Dict, Iterator, List, Optional, Tuple

from migrator.context import FileContext
from migrator.graph.distributing import what_it_does
from migrator.graph.modules import NOT_PROJECT_PACKAGES, ModuleSummary, absolute, dotted as _dotted, import_lines, lookup

LOADER = "loader:"  # a summary entry for a parameter the callee trains on (its training loader)
MOVED = "moved:"  # ... for a trained parameter the callee moves to a device (`self.model = model.to(device)`)


def may_train_through_project(text: str, context: Optional[FileContext]) -> bool:
    """Could a call in `text` hand a model to a project module that trains it (or, for a save,
    to one that sets up the processes)? Read from the import lines alone, for files whose text has
    no training shape of its own (migrator.relevance): a name imported from the project and called
    here (`Trainer(...)`, `engine.train(...)`) whose function or class trains a parameter. Only
    the modules of names the file calls are read."""
    if context is None or context.modules is None:
        return False
    roots = context.modules.roots
    saves = saves_with_torch(text)
    for line in import_lines(text):
        base = absolute(line.level, line.module, context.package)
        if base is None or base.split(".")[0] in NOT_PROJECT_PACKAGES or base.startswith("torch"):
            continue
        if not line.names:  # `import trainer` / `import lib.engine as engine`: `engine.Trainer(...)`
            local = line.bound[0] if line.bound else base.split(".")[0]
            module = base if local != base.split(".")[0] else local  # `import a.b` binds `a`: `a.b.X(...)`
            for attribute in _called_attributes(text, local):
                qualified = f"{module}.{attribute}"
                if trained_parameters(roots, qualified) or (saves and what_it_does(roots, qualified)):
                    return True
            continue
        for name, local in zip(line.names, line.bound or line.names):
            if not _called(text, local):
                continue
            # `Trainer(...)`, and `engine.fit(...)` for `from lib import engine` (a module imported by name)
            for qualified in (f"{base}.{name}", *(f"{base}.{name}.{a}" for a in _called_attributes(text, local))):
                if trained_parameters(roots, qualified) or (saves and what_it_does(roots, qualified)):
                    return True
    return False


_TORCH_ALIAS = re.compile(r"^[ \t]*import[ \t]+torch[ \t]+as[ \t]+(\w+)", re.M)
_SAVE_IMPORTED = re.compile(r"^[ \t]*from[ \t]+torch[ \t]+import[^\n]*\bsave\b", re.M)


def saves_with_torch(text: str) -> bool:
    """Does the file call torch.save (so that every rank writing it could be a bug to report)?"""
    if "save" not in text:
        return False
    if "torch.save(" in text or _SAVE_IMPORTED.search(text):
        return True
    return any(f"{alias}.save(" in text for alias in _TORCH_ALIAS.findall(text))


def _called(text: str, name: str) -> bool:
    """Is `name` called (`name(`), or its attribute called (`name.x(`: a module or class), in `text`?"""
    return any(text[end:end + 1] in ("(", ".") for end in _uses(text, name))


_CHAIN = re.compile(r"((?:\s*\.\s*\w+)+)\s*\(")


def _called_attributes(text: str, local: str) -> List[str]:
    """The `x` of each `local.x(` or `local.x.y(` in `text` (the dotted rest after the module's name)."""
    found = set()
    for end in _uses(text, local):
        match = _CHAIN.match(text, end)
        if match:
            found.add("".join(match.group(1).split()).lstrip("."))
    return sorted(found)


def _uses(text: str, name: str) -> Iterator[int]:
    """Where each use of the identifier `name` in `text` ends, spaces after it skipped (str.find,
    not a regular expression per name: a file asks about dozens of imported names)."""
    start = text.find(name)
    while start != -1:
        end = start + len(name)
        before, after = text[start - 1:start], text[end:end + 1]
        if not _identifier_char(before) and before != "." and not _identifier_char(after):
            while text[end:end + 1] in (" ", "\t"):
                end += 1
            yield end
        start = text.find(name, start + 1)


def _identifier_char(char: str) -> bool:
    return bool(char) and (char.isalnum() or char == "_")


Roots = Tuple[str, ...]
_IN_PROGRESS: Tuple[str, ...] = ()  # the answer while a name is worked out: a cycle trains nothing
_ANSWERS: Dict[Tuple[Roots, str, str], Tuple[str, ...]] = {}


def trained_parameters(roots: Roots, qualified: str) -> Tuple[str, ...]:
    """What `qualified` (a function or class of the project) trains: its parameters that reach an
    optimizer, as names and positions ("#0"), plus LOADER/MOVED entries."""
    found = lookup(roots, qualified)
    if found is None or len(found[1]) != 1:
        return ()
    return _trained(roots, found[0], found[1][0])


def _trained(roots: Roots, module: ModuleSummary, name: str) -> Tuple[str, ...]:
    """Each (module, name) worked out once per process (per folder it is seen from)."""
    key = (roots, module.path, name)
    if key in _ANSWERS:
        return _ANSWERS[key]
    _ANSWERS[key] = _IN_PROGRESS
    answer = _ANSWERS[key] = _work_out(roots, module, name)
    return answer


def _work_out(roots: Roots, module: ModuleSummary, name: str) -> Tuple[str, ...]:
    kind = module.defines(name)
    if kind is not None and not _may_train(module, name, kind):
        return ()  # answered from the text: the module is not parsed for it
    node = module.definitions.get(name)
    if node is not None:
        return _trained_by(node, roots, module)
    # A package `__init__` that re-exports it: `from .trainer import Trainer`, `from .trainer import *`.
    source = module.imports.get(name)
    if source is not None:
        return trained_parameters(roots, source)
    for star in module.star_imports:
        found = trained_parameters(roots, f"{star}.{name}")
        if found:
            return found
    return ()


def _may_train(module: ModuleSummary, name: str, kind: str) -> bool:
    """Can top-level `name` train a parameter? Only in a module that names an optimizer
    (torch.optim, configure_optimizers), or for a class, through a base class defined or imported
    here (`class Trainer(BaseTrainer)`); `class Net(nn.Module)` in a model file cannot."""
    if "optim" in module.text:
        return True
    if kind != "class":
        return False
    heads = {base.split(".")[0].split("[")[0] for base in module.class_bases(name)}
    heads -= {"object", "nn", "torch", "Module", "ABC", "abc", "Generic", "Protocol", "Enum", "dict", "list", "Exception"}
    return any(module.defines(head) == "class" or head in module.imported_names for head in heads)


def _trained_by(node: ast.stmt, roots: Roots, module: ModuleSummary) -> Tuple[str, ...]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # Only a module that names an optimizer (torch.optim, configure_optimizers) can train here.
        return _from_function(node, skip_self=False) if "optim" in module.text else ()
    if not isinstance(node, ast.ClassDef):
        return ()
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is not None and "optim" in module.text:
        # The call is `Trainer(model, ...)`: positions are counted without `self`.
        own = _from_function(init, skip_self=True, scope=node)
        if own:
            return own
    for base in node.bases:  # `class Trainer(BaseTrainer)`: the optimizer is built in the base's __init__
        inherited = _base_trained(base, roots, module)
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


def _base_trained(base: ast.expr, roots: Roots, module: ModuleSummary) -> Tuple[str, ...]:
    """What a base class's __init__ trains: the base in this module, or imported from the project."""
    name = _dotted(base)
    if name is None:
        return ()
    if isinstance(module.definitions.get(name), ast.ClassDef):
        return _trained(roots, module, name)
    head, _, rest = name.partition(".")
    source = module.imports.get(head)
    if source is None:
        return ()
    return trained_parameters(roots, f"{source}.{rest}" if rest else source)


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
