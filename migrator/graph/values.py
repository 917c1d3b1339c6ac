"""Where a training script's model goes in its project's modules: followed from the call sites.

The script hands its (DDP-wrapped) model to the project's code: `Trainer(model, loader)`,
`train(config, model, train_iter)`, `save_checkpoint(model, epoch)`, `trainer.fit(model)`. Each
call seeds the callee's parameter; from there the model is followed over the edges it takes
through the modules: a parameter, `self.x = model` (or `model.to(device)`) in `__init__`, which
makes `self.x` the model in every method of the class and of the classes built on it, a local
`model = self.x`, an argument passed on to another function or method of the project, and
`super().__init__(model)` into a base class in another module. What comes out is, per module,
the spellings of the model in each scope: project mode unwraps exactly those (DDP033, DDP034),
whatever they are called, and nothing that only shares a name with one (`self.model_dir`).

A checkpoint's state flows the same way, seeded by each argument that carries the model's
state without being the model (`save_checkpoint({"state_dict": model.state_dict()}, is_best)`):
project mode writes what such a parameter holds on rank 0 only (DDP032), and it is how a save of a
parameter is told from a data cache every rank may read back.

The epoch number flows the same way, seeded by each call inside a counting loop that passes the
loop's variable (`for epoch in range(n): trainer.train_epoch(epoch)`, in the script or in a
module's own base class, whose `self._train_epoch(epoch)` runs a subclass's override): project
mode's set_epoch uses it (DDP031).

Read with the standard `ast` module from the summaries of migrator.graph.modules (each module is
parsed once per process); a name is followed once per (definition, parameter).
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from migrator.graph.modules import NOT_PROJECT_PACKAGES, ModuleSummary, dotted, lookup

Roots = Tuple[str, ...]
Spec = str  # the parameter a call fills: "#0" (a position, `self` not counted) or its name


@dataclass
class Receivers:
    """One module's spellings of a handed-over value: by top-level function (`train`), by method
    (`Trainer.fit`), by class (`self.model`, read in any of its methods), and `<module>`."""

    scopes: Dict[str, Set[str]] = field(default_factory=dict)

    def add(self, scope: str, spelled: str) -> None:
        self.scopes.setdefault(scope, set()).add(spelled)

    def holds(self, function: Optional[str], cls: Optional[str], spelled: str) -> bool:
        """Is `spelled` the model in `function` (of class `cls`, when a method)?"""
        if cls is not None:
            if spelled in self.scopes.get(cls, ()) or (function and spelled in self.scopes.get(f"{cls}.{function}", ())):
                return True
            return False
        return spelled in self.scopes.get(function or "<module>", ())


@dataclass
class Handed:
    """What a module is handed by the training scripts: where their model and their epoch number
    are read there."""

    models: Receivers = field(default_factory=Receivers)
    epochs: Receivers = field(default_factory=Receivers)
    states: Receivers = field(default_factory=Receivers)

    def merge(self, other: "Handed") -> None:
        for mine, theirs in ((self.models, other.models), (self.epochs, other.epochs), (self.states, other.states)):
            for scope, spelled in theirs.scopes.items():
                for name in spelled:
                    mine.add(scope, name)


def handed_values(roots: Roots, script: ModuleSummary, models: Iterable[str], family: Family = ()) -> Dict[str, Handed]:
    """Module path -> where the script's `models`, the variable of an epoch loop around the call
    (`for epoch in range(n): trainer.train_epoch(epoch)`) and the states that carry a model's
    (`{"state_dict": model.state_dict()}`) are read there."""
    if script.tree is None:
        return {}
    wanted = set(models)
    flows = {kind: _Flow(roots, family) for kind in ("models", "epochs", "states")}
    classes = _instances(script)  # `trainer = Trainer(...)`: `trainer.fit(model)` runs Trainer.fit
    epochs = _epoch_variables(script.tree)
    for cls, call in _calls(script.tree):
        for spec, value in _arguments(call):
            spelled = dotted(value)
            if spelled in wanted:
                kind = "models"
            elif isinstance(value, ast.Name) and value.id in epochs.get(call, ()):
                kind = "epochs"
            elif carries_state(value, wanted):
                kind = "states"
            else:
                continue
            flows[kind].call(script, call, cls, spec, classes)
    found: Dict[str, Handed] = {}
    for kind, flow in flows.items():
        for path, receivers in flow.found.items():
            setattr(found.setdefault(path, Handed()), kind, receivers)
    return found


def carries_state(value: ast.expr, models: Set[str]) -> bool:
    """Does `value` hold a module's state: a `state_dict()` in it, or one of `models` (`{"encoder":
    encoder, "epoch": epoch}` keeps the whole module)?"""
    for node in ast.walk(value):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict":
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and dotted(node) in models:
            return True
    return False


class Definition(NamedTuple):
    """What a qualified name is defined as: the module, its top-level node, the dotted names inside."""

    module: ModuleSummary
    node: ast.AST
    names: Tuple[str, ...]


def _resolve(roots: Roots, qualified: str, depth: int = 0) -> Optional[Definition]:
    """The definition `qualified` names, through package `__init__` re-exports (`from .x import
    Trainer`, `from .x import *`)."""
    found = lookup(roots, qualified)
    if found is None or depth > 4:
        return None
    module, names = found
    node = module.definitions.get(names[0])
    if node is not None:
        return Definition(module, node, names)
    source = module.imports.get(names[0])
    candidates = [".".join((source, *names[1:]))] if source is not None else [
        ".".join((star, *names)) for star in module.star_imports]
    for candidate in candidates:
        if candidate != qualified:
            resolved = _resolve(roots, candidate, depth + 1)
            if resolved is not None:
                return resolved
    return None


def _definition(roots: Roots, module: ModuleSummary, name: str) -> Optional[Tuple[ModuleSummary, ast.AST]]:
    """The function or class `name` (as spelled in `module`) names: of `module`, or of the project."""
    local = module.definitions.get(name)
    if local is not None:
        return module, local
    head, _, rest = name.partition(".")
    source = module.imports.get(head)
    if source is None or source.split(".")[0] in NOT_PROJECT_PACKAGES or source.startswith("torch"):
        return None
    found = _resolve(roots, f"{source}.{rest}" if rest else source)
    return (found[0], found[1]) if found is not None else None


def _epoch_variables(tree: ast.Module) -> Dict[ast.Call, Set[str]]:
    """Call -> the variables of the `for v in range(...)` loops around it (a pass over the data each)."""
    found: Dict[ast.Call, Set[str]] = {}
    for loop in (n for n in ast.walk(tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)):
        if not _counts(loop.iter):
            continue
        for call in (n for statement in loop.body for n in ast.walk(statement) if isinstance(n, ast.Call)):
            found.setdefault(call, set()).add(loop.target.id)
    return found


def _counts(iterated: ast.expr) -> bool:
    """`range(...)`, `trange(...)`, `tqdm(range(...))`: a loop that counts."""
    while isinstance(iterated, ast.Call):
        name = (dotted(iterated.func) or "").split(".")[-1]
        if name in ("range", "trange"):
            return True
        if name != "tqdm" or not iterated.args:
            return False
        iterated = iterated.args[0]
    return False


Family = Sequence[Tuple[ModuleSummary, ast.ClassDef]]


class _Flow:
    def __init__(self, roots: Roots, family: Family = ()) -> None:
        self.roots = roots
        # Classes of the planned modules: `self._train_epoch(epoch)` in a base class runs a
        # subclass's override, which gets the value too.
        self.family = family
        self.found: Dict[str, Receivers] = {}
        self._done: Set[Tuple[str, str, Spec]] = set()

    def call(self, module: ModuleSummary, call: ast.Call, cls: Optional[ast.ClassDef], spec: Spec,
             classes: Dict[str, object]) -> None:
        """`call` in `module` (in a method of `cls`) hands the value over in its argument `spec`."""
        target = _callee(self.roots, module, call.func, cls)
        name = dotted(call.func) or ""
        head = name.partition(".")[0]
        owner, _, method = name.rpartition(".")
        if target is None and owner in classes:  # `trainer.fit(model)`, `self.saver.save(state)`: built above
            built = classes[owner]
            target = (built, method) if isinstance(built, ast.ClassDef) else f"{built}.{method}"
        if isinstance(target, Definition):
            self._seed_definition(target, spec)
        elif isinstance(target, tuple):
            self._class(module, target[0], target[1], spec)
            if head == "self":
                for owner, subclass in self._subclasses(module, target[0]):
                    self._class(owner, subclass, target[1], spec)
        elif isinstance(target, str):
            self.seed(target, spec)
        elif target is not None:
            self._function(module, target, None, spec)

    def _subclasses(self, module: ModuleSummary, cls: ast.ClassDef) -> Iterable[Tuple[ModuleSummary, ast.ClassDef]]:
        """The classes of the family built on `cls` (directly or through others)."""
        wanted = {(os.path.realpath(module.path), cls.name)}
        found: List[Tuple[ModuleSummary, ast.ClassDef]] = []
        for _ in range(3):  # grandchildren too
            for owner, candidate in self.family:
                key = (os.path.realpath(owner.path), candidate.name)
                if key in wanted:
                    continue
                for base in candidate.bases:
                    resolved = _definition(self.roots, owner, dotted(base) or "")
                    if resolved is not None and (os.path.realpath(resolved[0].path), getattr(resolved[1], "name", "")) in wanted:
                        wanted.add(key)
                        found.append((owner, candidate))
                        break
        return found

    def seed(self, qualified: str, spec: Spec) -> None:
        found = _resolve(self.roots, qualified)
        if found is not None:
            self._seed_definition(found, spec)

    def _seed_definition(self, found: Definition, spec: Spec) -> None:
        module, node, names = found
        if isinstance(node, ast.ClassDef):
            self._class(module, node, names[1] if len(names) > 1 else "__init__", spec)
        elif len(names) == 1:
            self._function(module, node, None, spec)

    def _receivers(self, module: ModuleSummary) -> Receivers:
        return self.found.setdefault(module.path, Receivers())

    def _class(self, module: ModuleSummary, cls: ast.ClassDef, method: str, spec: Spec) -> Set[str]:
        """Seed `cls.method`; returns the attributes of `self` the model is kept in (for subclasses)."""
        key = (module.path, f"{cls.name}.{method}", spec)
        if key in self._done:
            return set(self._receivers(module).scopes.get(cls.name, ()))
        self._done.add(key)
        fn = next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == method), None)
        if fn is None:  # inherited: `class Trainer(BaseTrainer)` without an __init__ of its own
            kept: Set[str] = set()
            for base in self._bases(module, cls):
                kept |= base(method, spec)
            for attribute in kept:
                self._receivers(module).add(cls.name, attribute)
            return kept
        kept = self._function(module, fn, cls, spec)
        return kept

    def _bases(self, module: ModuleSummary, cls: ast.ClassDef):
        """Callables seeding each base class of `cls` (defined here or imported from the project)."""
        for base in cls.bases:
            name = dotted(base)
            if name is None:
                continue
            local = module.definitions.get(name)
            if isinstance(local, ast.ClassDef):
                yield lambda method, spec, local=local: self._class(module, local, method, spec)
                continue
            head, _, rest = name.partition(".")
            source = module.imports.get(head)
            if source is None or source.split(".")[0] in NOT_PROJECT_PACKAGES:
                continue
            qualified = f"{source}.{rest}" if rest else source
            yield lambda method, spec, qualified=qualified: self._seed_base(qualified, method, spec)

    def _seed_base(self, qualified: str, method: str, spec: Spec) -> Set[str]:
        found = _resolve(self.roots, qualified)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return set()
        return self._class(found[0], found[1], method, spec)

    def _function(self, module: ModuleSummary, fn: ast.AST, cls: Optional[ast.ClassDef], spec: Spec) -> Set[str]:
        """The model arrives in `fn`'s parameter `spec`: record its spellings there and follow it on."""
        key = (module.path, f"{cls.name}.{fn.name}" if cls else fn.name, spec)  # type: ignore[attr-defined]
        if cls is None:
            if key in self._done:
                return set()
            self._done.add(key)
        param = _parameter(fn, spec, method=cls is not None)
        if param is None:
            return set()
        scope = f"{cls.name}.{fn.name}" if cls is not None else fn.name  # type: ignore[attr-defined]
        receivers = self._receivers(module)
        local = {param}
        kept: Set[str] = set()
        for node in (n for n in ast.walk(fn) if isinstance(n, ast.Assign)):
            for whole in node.targets:
                for target, value in _pairs(whole, node.value):
                    spelled = dotted(target)
                    if spelled and _passes(value, local):
                        (kept if spelled.startswith("self.") and cls is not None else local).add(spelled)
        for spelled in local:
            receivers.add(scope, spelled)
        self._pass_on(module, fn, cls, local)
        if cls is not None:
            kept |= self._super_init(module, fn, cls, local)
            for attribute in kept:
                receivers.add(cls.name, attribute)
            for method in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                aliases = self._aliases(method, kept)
                for alias in aliases:
                    receivers.add(f"{cls.name}.{method.name}", alias)
                self._pass_on(module, method, cls, kept | aliases)
        return kept

    def _super_init(self, module: ModuleSummary, fn: ast.AST, cls: ast.ClassDef, local: Set[str]) -> Set[str]:
        """`super().__init__(model, ...)`: the base class keeps the model too (in its own `self.x`)."""
        kept: Set[str] = set()
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Call)
                    and dotted(node.func.value.func) == "super"):
                continue
            for spec, value in _arguments(node):
                if dotted(value) in local:
                    for base in self._bases(module, cls):
                        kept |= base(node.func.attr, spec)
        return kept

    @staticmethod
    def _aliases(method: ast.AST, kept: Set[str]) -> Set[str]:
        """`model = self.model` in a method: the local is the model there too."""
        found: Set[str] = set()
        for node in (n for n in ast.walk(method) if isinstance(n, ast.Assign) and len(n.targets) == 1):
            for target, value in _pairs(node.targets[0], node.value):
                if isinstance(target, ast.Name) and dotted(value) in kept:
                    found.add(target.id)
        return found

    def _pass_on(self, module: ModuleSummary, fn: ast.AST, cls: Optional[ast.ClassDef], spelled: Set[str]) -> None:
        """Calls in `fn` that hand the value on, to code of this module or of the project."""
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            for spec, value in _arguments(call):
                if dotted(value) in spelled:
                    self.call(module, call, cls, spec, {})


def _callee(roots: Roots, module: ModuleSummary, func: ast.expr, cls: Optional[ast.ClassDef]):
    """What a call in `module` runs: a function of it, (a class of it, a method), or the Definition
    in another module of the project (through `from utils import *` too); None otherwise."""
    name = dotted(func)
    if name is None:
        return None
    if name.startswith("self.") and cls is not None and name.count(".") == 1:
        return (cls, name.split(".")[1])
    local = module.definitions.get(name)
    if isinstance(local, ast.ClassDef):
        return (local, "__init__")
    if isinstance(local, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return local
    head, _, rest = name.partition(".")
    source = module.imports.get(head)
    if source is None:
        stars = (_resolve(roots, f"{star}.{name}") for star in module.star_imports
                 if star.split(".")[0] not in NOT_PROJECT_PACKAGES)
        return next((found for found in stars if found is not None), None)
    if source.split(".")[0] in NOT_PROJECT_PACKAGES or source.startswith("torch"):
        return None
    return _resolve(roots, f"{source}.{rest}" if rest else source)


def _calls(tree: ast.Module) -> Iterable[Tuple[Optional[ast.ClassDef], ast.Call]]:
    """Every call of the module, with the top-level class it is in (None outside any)."""
    for node in tree.body:
        cls = node if isinstance(node, ast.ClassDef) else None
        yield from ((cls, n) for n in ast.walk(node) if isinstance(n, ast.Call))


def _qualified(script: ModuleSummary, func: ast.expr, classes: Dict[str, object]) -> Optional[str]:
    name = dotted(func)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head in classes and rest:
        return f"{classes[head]}.{rest}"
    source = script.imports.get(head)
    if source is None or source.split(".")[0] in NOT_PROJECT_PACKAGES or source.startswith("torch"):
        return None
    return f"{source}.{rest}" if rest else source


def _instances(script: ModuleSummary) -> Dict[str, object]:
    """`trainer = Trainer(...)`: name -> the class, imported from the project (its qualified name)
    or defined in the script (its definition)."""
    found: Dict[str, object] = {}
    for node in ast.walk(script.tree):  # type: ignore[arg-type]
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call):
            target, name = dotted(node.targets[0]), dotted(node.value.func)
            local = script.definitions.get(name or "")
            cls = local if isinstance(local, ast.ClassDef) else _qualified(script, node.value.func, {})
            if target and cls:
                found[target] = cls
    return found


def _arguments(call: ast.Call) -> Iterable[Tuple[Spec, ast.expr]]:
    position = 0
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            return
        yield f"#{position}", arg
        position += 1
    for keyword in call.keywords:
        if keyword.arg is not None:
            yield keyword.arg, keyword.value


def _parameter(fn: ast.AST, spec: Spec, method: bool) -> Optional[str]:
    args = fn.args  # type: ignore[attr-defined]
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if method and positional:
        positional = positional[1:]
    if spec.startswith("#"):
        index = int(spec[1:])
        return positional[index] if index < len(positional) else None
    names = set(positional) | {a.arg for a in args.kwonlyargs}
    return spec if spec in names else None


def _passes(value: ast.expr, local: Set[str]) -> bool:
    """Is `value` the model itself: `model`, or `model.to(device)` / `model.cuda()` (the same module)?"""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("to", "cuda", "float", "half"):
        value = value.func.value
    return dotted(value) in local


def _pairs(target: ast.expr, value: ast.expr) -> List[Tuple[ast.expr, ast.expr]]:
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        return list(zip(target.elts, value.elts))
    return [(target, value)]
