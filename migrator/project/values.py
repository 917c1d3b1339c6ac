"""Where a training script's model, epoch and checkpoint state go in its project's modules.

One value flow (migrator.graph.flow) across the project: each module the values reach is read by
the same analysis as a script (its binding index and call graph, migrator.analysis), and a call
that hands a value to a function or class of another project module seeds the parameter it fills
there; the module's own flow takes it on (aliases, `self.x = model` in `__init__`, which makes
`self.x` the model in every method of the class, its own functions), and its calls seed further
modules in turn. A class that inherits a method keeps what that method keeps (`self.model` of a
base class is the subclass's too), `super().__init__(model)` seeds the base class, and
`trainer.fit(model)` runs the method of the class `trainer` was built from, also through an
attribute (`self.saver = Saver(args)`, then `self.saver.save(state)`).

Three values are followed this way:
  models  the DDP-wrapped models the script hands over (`Trainer(model, loader)`): the module
          rules unwrap exactly those (DDP033, DDP034), whatever they are called there;
  epochs  the variable of a counting loop around a call (`for epoch in range(n):
          trainer.train_epoch(epoch)`), in the script or in a planned module's base class, whose
          `self._train_epoch(epoch)` runs a subclass's override (DDP031);
  states  an argument that carries a model's state without being the model
          (`save_checkpoint({"state_dict": model.state_dict()}, is_best)`): a save of it is a
          checkpoint, written on rank 0 only (DDP032).

What comes out, per module, is where each value is read there (Receivers: by scope, the names
that hold it), for the module rules to read again in their own reading of the module.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from migrator.errors import MigrateError
from migrator.graph.bindings import Binding, dotted_name
from migrator.dataflow import loops_over
from migrator.graph.flow import MODEL, Value
from migrator.graph.modules import NOT_PROJECT_PACKAGES, INDEX, ModuleSummary, lookup
from migrator.project.rewrite import analysed
from migrator.rules.modules.base import Receivers
from migrator.rules.modules.epochs import counts
from migrator.tree import descendants

Roots = Tuple[str, ...]
Model = Union[str, Tuple[str, str]]  # `model`, or (`model`, the scope it is wrapped in: `main`, `<module>`)
EPOCH = frozenset({"alias", "argument"})
STATE = frozenset({"alias", "argument", "unpack"})
_KINDS = {"models": MODEL, "epochs": EPOCH, "states": STATE}


@dataclass
class Handed:
    """What a module is handed by the training scripts: where their model, their epoch number and
    their checkpoint states are read there."""

    models: Receivers = field(default_factory=Receivers)
    epochs: Receivers = field(default_factory=Receivers)
    states: Receivers = field(default_factory=Receivers)
    # A function of the module that returns a loader -> whether a script trains on what it returns
    # (False: the script only evaluates with it, and its shuffled DataLoader stays whole).
    loaders: Dict[str, bool] = field(default_factory=dict)

    def merge(self, other: "Handed") -> None:
        for kind in _KINDS:
            for scope, spelled in getattr(other, kind).scopes.items():
                for name in spelled:
                    getattr(self, kind).add(scope, name)
        for function, trains in other.loaders.items():
            self.loaders[function] = self.loaders.get(function, False) or trains

    def evaluation_loaders(self) -> FrozenSet[str]:
        return frozenset(function for function, trains in self.loaders.items() if not trains)


class Family(NamedTuple):
    """A class of the planned modules: `self._train_epoch(epoch)` in a base class runs a
    subclass's override, which gets the value too."""

    path: str
    name: str


def handed_values(roots: Roots, script: ModuleSummary, models: Iterable[Model] = (),
                  family: Sequence[Family] = ()) -> Dict[str, Handed]:
    """Module path -> where the script's `models`, the variable of a counting loop around a call
    and the states that carry a model's are read there (the script itself included: its own
    functions). A model is `(expr, scope)` as the engine wraps it (`("model", "main")`), or its
    name alone (any binding of it in the script)."""
    project = _Project(roots, family)
    reading = project.reading(script.path, script)
    if reading is None:
        return {}
    seeds = {b for model in models for b in reading.model_bindings(model)}
    project.start("models", reading, seeds)
    model_value = reading.values.follow(seeds, MODEL, every=False)
    for call in reading.c.calls:
        epochs = reading.epoch_variables(call)
        for spec, value in _arguments(call):
            if isinstance(value, cst.Name) and value.value in epochs:
                project.hand("epochs", reading, call, spec)
            elif not model_value.holds(value) and carries_state(value, model_value):
                project.hand("states", reading, call, spec)
        project.returned_loader(reading, call)
    project.run()
    return project.found


def carries_state(value: cst.BaseExpression, models: Value) -> bool:
    """Does `value` hold a module's state: a `state_dict()` in it, or one of the models (`{"encoder":
    encoder, "epoch": epoch}` keeps the whole module)?"""
    return any(
        node.func.attr.value == "state_dict" if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        else isinstance(node, (cst.Name, cst.Attribute)) and models.holds(node)
        for node in descendants(value, (cst.Call, cst.Name, cst.Attribute))
    )


class _Reading:
    """One module of the project read by the script analysis, with its summary (imports)."""

    def __init__(self, path: str, summary: ModuleSummary, analysis) -> None:
        self.path, self.summary, self.a = path, summary, analysis
        self.c, self.values = analysis.c, analysis.values
        self.top: Dict[str, cst.CSTNode] = {
            name: found[-1].node for name, found in self.c.bindings[analysis.module].items()
            if found[-1].kind in ("function", "class")}

    def model_bindings(self, model: Model) -> List[Binding]:
        expr, where = (model, None) if isinstance(model, str) else model
        return [b for names in self.c.bindings.values() for b in names.get(expr, ())
                if (where is None or self.scope_name(b) == where) and b.kind not in ("import", "function", "class")]

    def method(self, cls: cst.ClassDef, name: str) -> Optional[cst.FunctionDef]:
        found = self.c.bindings.get(cls, {}).get(name, ())
        return found[-1].node if found and found[-1].kind == "function" else None  # type: ignore[return-value]

    def epoch_variables(self, call: cst.Call) -> Set[str]:
        """The variables of the `for v in range(...)` loops around `call` (a pass over the data each)."""
        found = set()
        for node in self.a.ancestors(call):
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and counts(node.iter):
                found.add(node.target.value)
        return found

    def scope_name(self, binding: Binding) -> Optional[str]:
        """`train`, `Trainer.fit`, `Trainer` (an attribute of self) or `<module>` for a binding."""
        chain = [binding.scope, *self.a.ancestors(binding.scope)] if binding.scope is not self.a.module else []
        named = [n for n in chain if isinstance(n, (cst.FunctionDef, cst.ClassDef))]
        named.reverse()
        if not named:
            return "<module>"
        if isinstance(named[0], cst.ClassDef):
            if binding.name.startswith("self.") or len(named) == 1:
                return named[0].name.value
            return f"{named[0].name.value}.{named[1].name.value}"
        return named[0].name.value


class _Project:
    def __init__(self, roots: Roots, family: Sequence[Family]) -> None:
        self.roots = roots
        self.family = family
        self.found: Dict[str, Handed] = {}
        self._readings: Dict[str, Optional[_Reading]] = {}
        self._seeds: Dict[Tuple[str, str], Set[Binding]] = {}  # (path, kind) -> the bindings handed the value
        self._inherited: Dict[Tuple[str, str], Set[Tuple[cst.ClassDef, str]]] = {}  # (path, kind) -> (class, self.x)
        self._pending: List[Tuple[str, str]] = []
        self._given: Set[Binding] = set()
        # (module, class) -> the classes seen handing values to it by `super()` (its heirs, in any module)
        self._heirs: Dict[Tuple[str, cst.ClassDef], Set[Tuple["_Reading", cst.ClassDef]]] = {}  # the script's own bindings of its values: where they start, not where they arrive

    def start(self, kind: str, reading: "_Reading", seeds: Set[Binding]) -> None:
        self._given |= seeds
        if seeds:
            self._seed(kind, reading, seeds)

    # -- reading modules ----------------------------------------------------------------------
    def reading(self, path: str, summary: Optional[ModuleSummary] = None) -> Optional[_Reading]:
        real = os.path.realpath(path)
        if real not in self._readings:
            if summary is None:
                summary = next((s for s in _summaries(self.roots, real)), None)
            self._readings[real] = _read(real, summary) if summary is not None else None
        return self._readings[real]

    def returned_loader(self, reading: _Reading, call: cst.Call) -> None:
        """`test_loader = get_test_dataloader(..., shuffle=True)` in the script: whether the loops
        that walk what a module function returns train (a backward, a step) or only evaluate."""
        if not reading.values.receivers(call):
            return  # most calls: nothing keeps what they return
        loops = loops_over(reading.a, call)
        if not loops or not all(isinstance(loop, cst.For) for loop in loops):
            return  # handed on, not walked here, or read by next(): not known
        functions = [(target, function) for target, function, cls in self._targets(reading, call)
                     if target is not reading and cls is None]  # read only now: it may parse a module
        trains = any(reading.a.call_graph.trains(loop) for loop in loops_over(reading.a, call, training=True) or ())
        for target, function in functions:
            loaders = self.found.setdefault(target.path, Handed()).loaders
            loaders[function.name.value] = loaders.get(function.name.value, False) or trains

    # -- handing a value over -----------------------------------------------------------------
    def hand(self, kind: str, reading: _Reading, call: cst.Call, spec: str) -> None:
        """`call` in `reading` hands the value over in its argument `spec` (a position or a keyword)."""
        for target, function, cls in self._targets(reading, call):
            param = _parameter(function, spec, method=cls is not None)
            binding = target.c.binding_at.get(param) if param is not None else None
            if binding is not None:
                self._seed(kind, target, {binding})

    def _seed(self, kind: str, reading: _Reading, bindings: Set[Binding]) -> None:
        seeds = self._seeds.setdefault((reading.path, kind), set())
        if not bindings <= seeds:
            seeds |= bindings
            self._pending.append((reading.path, kind))

    def run(self) -> None:
        """Follow each module's seeds in it, and what it hands on, until nothing new is seeded."""
        while self._pending:
            path, kind = self._pending.pop()
            reading = self._readings[path]
            if reading is not None:
                self._follow(kind, reading)

    def _follow(self, kind: str, reading: _Reading) -> None:
        value = reading.values.follow(self._seeds[(reading.path, kind)], _KINDS[kind], every=False)
        receivers = getattr(self.found.setdefault(reading.path, Handed()), kind)
        kept: Dict[cst.ClassDef, Set[str]] = {}
        for binding in value.bindings:
            scope = reading.scope_name(binding)
            if scope is not None and binding not in self._given:
                receivers.add(scope, binding.name)
            if binding.name.startswith("self.") and isinstance(binding.scope, cst.ClassDef):
                kept.setdefault(binding.scope, set()).add(binding.name)
        for (cls, attribute) in self._inherited.get((reading.path, kind), ()):
            kept.setdefault(cls, set()).add(attribute)
            receivers.add(cls.name.value, attribute)
        for cls, attributes in kept.items():
            self._subclasses_keep(kind, reading, cls, attributes)
        for call in reading.c.calls:
            for spec, argument in _arguments(call):
                if self._holds(reading, value, kept, argument):
                    self._hand_on(kind, reading, call, spec)

    @staticmethod
    def _holds(reading: _Reading, value: Value, kept: Dict[cst.ClassDef, Set[str]], node: cst.BaseExpression) -> bool:
        if value.holds(node):
            return True
        spelled = dotted_name(node) if isinstance(node, cst.Attribute) else None
        if spelled is None or not spelled.startswith("self.") or spelled.count(".") != 1 or reading.c.refers.get(node):
            return False
        cls = next((n for n in reading.a.ancestors(node) if isinstance(n, cst.ClassDef)), None)
        return cls is not None and spelled in kept.get(cls, ())  # an attribute an inherited method keeps

    def _hand_on(self, kind: str, reading: _Reading, call: cst.Call, spec: str) -> None:
        """A call in a module the value reached: to another project module (the module's own
        functions are its flow's), to a base class (`super().__init__(model)`), or to an inherited
        or overriding method."""
        local = reading.a.call_graph.callee(call)
        for target, function, cls in self._targets(reading, call):
            if target is reading and function is local:
                continue  # the module's own flow took it there
            param = _parameter(function, spec, method=cls is not None)
            binding = target.c.binding_at.get(param) if param is not None else None
            if binding is not None:
                self._seed(kind, target, {binding})

    def _subclasses_keep(self, kind: str, reading: _Reading, cls: cst.ClassDef, attributes: Set[str]) -> None:
        """The classes built on `cls` (in the project's planned family, and in the module itself)
        read what it keeps in their own methods too."""
        for sub_reading, sub in self._subclasses(reading, cls):
            inherited = self._inherited.setdefault((sub_reading.path, kind), set())
            new = {(sub, attribute) for attribute in attributes} - inherited
            if new:
                inherited |= new
                self._seeds.setdefault((sub_reading.path, kind), set())
                self._pending.append((sub_reading.path, kind))

    # -- what a call runs ----------------------------------------------------------------------
    def _targets(self, reading: _Reading, call: cst.Call) -> Iterator[Tuple[_Reading, cst.FunctionDef, Optional[cst.ClassDef]]]:
        """(the module, the function, its class) that `call` runs: a function or class of the
        module or of another project module (its `__init__`), a method of the instance a name or
        attribute was built as, `super().m(...)` in a base class, and `self.m(...)` in a class of
        the family overriding it."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and dotted_name(func.value.func) == "super":
            cls = next((n for n in reading.a.ancestors(call) if isinstance(n, cst.ClassDef)), None)
            for base_reading, base in self._bases(reading, cls) if cls is not None else ():
                self._heirs.setdefault((base_reading.path, base), set()).add((reading, cls))  # type: ignore[arg-type]
                yield from self._method(base_reading, base, func.attr.value)
            return
        spelled = dotted_name(func)
        if spelled is None:
            return
        owner, _, method = spelled.rpartition(".")
        if owner == "self":
            cls = next((n for n in reading.a.ancestors(call) if isinstance(n, cst.ClassDef)), None)
            if cls is not None:
                yield from self._method(reading, cls, method)
                for sub_reading, sub in self._subclasses(reading, cls):
                    own = sub_reading.method(sub, method)
                    if own is not None:
                        yield sub_reading, own, sub
            return
        if owner:
            built = self._instance(reading, func.value)  # `trainer.fit(...)`, `self.saver.save(...)`
            if built is not None:
                yield from self._method(built[0], built[1], method)
                return
        found = self._definition(reading, spelled)
        if found is None:
            return
        target, node, names = found
        if isinstance(node, cst.ClassDef):
            yield from self._method(target, node, names[1] if len(names) > 1 else "__init__")
        elif isinstance(node, cst.FunctionDef) and len(names) == 1:
            yield target, node, None

    def _method(self, reading: _Reading, cls: cst.ClassDef, name: str,
                depth: int = 0) -> Iterator[Tuple[_Reading, cst.FunctionDef, Optional[cst.ClassDef]]]:
        """`cls.name`, defined in the class or inherited from a base class of the project."""
        own = reading.method(cls, name)
        if own is not None:
            yield reading, own, cls
        elif depth < 4:
            for base_reading, base in self._bases(reading, cls):
                yield from self._method(base_reading, base, name, depth + 1)

    def _instance(self, reading: _Reading, receiver: cst.BaseExpression) -> Optional[Tuple[_Reading, cst.ClassDef]]:
        """The class `receiver` was built as (`trainer = Trainer(...)`, `self.saver = Saver(args)`)."""
        for binding in reading.c.bindings_of(receiver):
            if isinstance(binding.value, cst.Call) and not binding.path:
                found = self._definition(reading, dotted_name(binding.value.func) or "")
                if found is not None and isinstance(found[1], cst.ClassDef):
                    return found[0], found[1]
        return None

    def _definition(self, reading: _Reading, spelled: str) -> Optional[Tuple[_Reading, cst.CSTNode, Tuple[str, ...]]]:
        """The function or class `spelled` names in `reading`: its own, or another project module's
        (through its imports, package re-exports and star imports)."""
        head, _, rest = spelled.partition(".")
        local = reading.top.get(head)
        if local is not None:
            return reading, local, tuple(spelled.split("."))
        source = reading.summary.imports.get(head)
        if source is not None:
            if source.split(".")[0] in NOT_PROJECT_PACKAGES or source.startswith("torch"):
                return None
            return self._resolve(f"{source}.{rest}" if rest else source)
        for star in reading.summary.star_imports:
            if star.split(".")[0] not in NOT_PROJECT_PACKAGES:
                found = self._resolve(f"{star}.{spelled}")
                if found is not None:
                    return found
        return None

    def _resolve(self, qualified: str, depth: int = 0) -> Optional[Tuple[_Reading, cst.CSTNode, Tuple[str, ...]]]:
        """The definition `qualified` names, through package `__init__` re-exports (`from .x import
        Trainer`, `from .x import *`)."""
        found = lookup(self.roots, qualified)
        if found is None or depth > 4:
            return None
        summary, names = found
        if names[0] in summary.definitions:
            target = self.reading(summary.path, summary)
            node = target.top.get(names[0]) if target is not None else None
            return (target, node, names) if target is not None and node is not None else None
        source = summary.imports.get(names[0])
        candidates = [".".join((source, *names[1:]))] if source is not None else [
            ".".join((star, *names)) for star in summary.star_imports]
        for candidate in candidates:
            if candidate != qualified:
                resolved = self._resolve(candidate, depth + 1)
                if resolved is not None:
                    return resolved
        return None

    def _bases(self, reading: _Reading, cls: cst.ClassDef) -> Iterator[Tuple[_Reading, cst.ClassDef]]:
        for base in cls.bases:
            found = self._definition(reading, dotted_name(base.value) or "")
            if found is not None and isinstance(found[1], cst.ClassDef):
                yield found[0], found[1]

    def _subclasses(self, reading: _Reading, cls: cst.ClassDef) -> List[Tuple[_Reading, cst.ClassDef]]:
        """The classes built on `cls` (directly or through others): of the module itself, and of
        the family (the planned modules' classes)."""
        candidates: List[Tuple[_Reading, cst.ClassDef]] = [
            (reading, node) for node in reading.top.values() if isinstance(node, cst.ClassDef)]
        candidates += sorted(self._heirs.get((reading.path, cls), ()), key=lambda heir: (heir[0].path, heir[1].name.value))
        for member in self.family:
            other = self.reading(member.path)
            node = other.top.get(member.name) if other is not None else None
            if isinstance(node, cst.ClassDef):
                candidates.append((other, node))  # type: ignore[arg-type]
        wanted = {(reading.path, cls)}
        found: List[Tuple[_Reading, cst.ClassDef]] = []
        for _ in range(3):  # grandchildren too
            for candidate in candidates:
                if (candidate[0].path, candidate[1]) in wanted:
                    continue
                if any((base_reading.path, base) in wanted for base_reading, base in self._bases(*candidate)):
                    wanted.add((candidate[0].path, candidate[1]))
                    found.append(candidate)
        return found


def _read(path: str, summary: ModuleSummary) -> Optional[_Reading]:
    try:
        _, analysis = analysed(summary.text)  # parsed once, shared with the module's planning
    except MigrateError:  # not Python 3: nothing is followed into it
        return None
    return _Reading(path, summary, analysis)


def _summaries(roots: Roots, path: str) -> Iterator[ModuleSummary]:
    """The summary of the project file `path` (read once per process: migrator.graph.modules)."""
    for root in roots:
        relative = os.path.relpath(path, root)
        if relative.startswith(".."):
            continue
        name = relative[: -len(".py")].replace(os.sep, ".")
        name = name[: -len(".__init__")] if name.endswith(".__init__") else name
        found = INDEX.summary(path, name)
        if found is not None:
            yield found


def _arguments(call: cst.Call) -> Iterator[Tuple[str, cst.BaseExpression]]:
    """("#0", value) for each positional argument, (keyword, value) for each keyword one."""
    position = 0
    for arg in call.args:
        if arg.star == "*":
            return
        if arg.star:
            continue
        if arg.keyword is None:
            yield f"#{position}", arg.value
            position += 1
        else:
            yield arg.keyword.value, arg.value


def _parameter(function: cst.FunctionDef, spec: str, method: bool) -> Optional[cst.Param]:
    params = [*function.params.posonly_params, *function.params.params]
    if method and params:
        params = params[1:]
    if spec.startswith("#"):
        index = int(spec[1:])
        return params[index] if index < len(params) else None
    return next((p for p in (*params, *function.params.kwonly_params) if p.name.value == spec), None)
