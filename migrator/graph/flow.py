"""One value-flow propagation over the file's bindings (migrator.graph.bindings).

A value (the trained model, a loader, an epoch number) is the set of bindings that hold it. Each
binding knows where its value comes from, and those provenance edges are the only way a value
travels, whatever the names on either side:

  alias     `net = model`, `self.model = model`
  method    `model = model.to(device)`: an nn.Module method that returns the module itself
  wrapper   `pbar = tqdm(loader)`, `batches = enumerate(loader)`: a call handed the value first,
            which a loop over its result walks (not `range(len(loader))`, nor `iter(loader)`)
  argument  `train(model, loader)` -> train's parameters (a function, a method through `self`,
            a class's `__init__`, a method of an instance built from a class of the file)
  return    `return model, optimizer` -> `net, opt = build(args)` at each call site
  unpack    `a, (b, c) = x, (y, z)`, `train_loader, val_loader = loaders` (by position)
  derived   `idx = order[:n]`, `train = Subset(ds, idx)`, `perm = torch.randperm(n).tolist()`: a
            value computed from another (anywhere in the expression a binding is given, in an
            argument of the file's function, or out through its returns), asked for by a consumer
            that follows what a value decides rather than the value itself (a split's draw)

A consumer picks the kinds its value takes (a model goes through `.to()`, a loader through
`tqdm()`), seeds the bindings it starts from, and asks the Value which nodes hold it. A reference
holds a value when every binding it reads does (`self.model` assigned the model in `__init__` and
something else in another method may be either, and a DDP-only edit there would break one), or,
for a consumer that asks what may be the value (a loop that may walk this loader), when one does.
Which bindings hold the value on every way in (`ValueFlow.surely`: no edge into them brings
anything else, no call hands them something else) tells the two apart where a consumer edits
both: a name that may hold the wrapped model gets an edit that asks which it holds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from migrator.graph.bindings import Binding, NameIndex, ScopeOwner
from migrator.tree import descendants

MODEL = frozenset({"alias", "method", "argument", "return", "unpack"})
LOADER = frozenset({"alias", "wrapper", "argument", "return", "unpack"})
OPTIMIZER = frozenset({"alias", "argument", "return", "unpack"})
ALIAS = frozenset({"alias"})  # an object kept under another name (a trainer)
DERIVED = frozenset({"alias", "argument", "return", "unpack", "derived"})  # what a value decides

# nn.Module methods that return the module they are called on.
RETURNS_SELF = frozenset(
    {"train", "eval", "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "apply", "requires_grad_", "zero_grad"}
)
# Methods that put a value into a container (nn.ModuleList's append/extend/insert, any module's
# add_module/register_module, a list's append): the position of the argument they put in
# (`extend`: each element of a literal list or tuple there, or the iterable itself).
ADDS_MEMBER = {"append": 0, "extend": 0, "insert": 1, "add_module": 1, "register_module": 1}

# Calls whose first argument is not what a loop over their result walks (range(len(loader)) walks
# indices); `iter(loader)` is a stream, read by next(), not a loop.
NOT_WRAPPERS = frozenset({"range", "len", "reversed", "sorted", "iter"})


@dataclass(frozen=True)
class Edge:
    kind: str
    source: Binding
    target: Binding
    site: cst.CSTNode  # where the value passes: the statement, or the call handing it over


Callee = Callable[[cst.Call], Optional[cst.FunctionDef]]


class ValueFlow:
    """The provenance edges of one file's bindings, built on first use, and their propagation."""

    def __init__(self, index: NameIndex, callee: Callee) -> None:
        self.index = index
        self.callee = callee
        self._into: Optional[Dict[Binding, List[Edge]]] = None
        self._from: Dict[Binding, List[Edge]] = {}
        self._given: Dict[cst.CSTNode, List[Binding]] = {}  # an expression -> the bindings given it
        self._sites: Dict[cst.FunctionDef, List[cst.Call]] = {}  # a function of the file -> its calls
        self._derived: Dict[Binding, List[Edge]] = {}
        self._handed_other: Set[Binding] = set()  # parameters a call hands a value no binding holds

    # -- the edges ---------------------------------------------------------------------------
    def edges_into(self, binding: Binding) -> List[Edge]:
        self._build()
        return self._into.get(binding, [])  # type: ignore[union-attr]

    def edges_from(self, binding: Binding) -> List[Edge]:
        self._build()
        return self._from.get(binding, [])

    def _build(self) -> None:
        if self._into is not None:
            return
        self._into = {}
        self._origins: Dict[cst.CSTNode, List[Binding]] = {}
        for names in self.index.bindings.values():
            for bindings in names.values():
                for binding in bindings:
                    if binding.value is not None:
                        self._given.setdefault(binding.value, []).append(binding)
                    if binding.kind == "loop" and not binding.path and isinstance(binding.value, (cst.Name, cst.Attribute)):
                        for source in self.index.refers.get(binding.value, ()):  # `for m in modules:`
                            self._add(Edge("element", source, binding, binding.statement))
                    if binding.value is not None and binding.kind in ("assignment", "attribute", "unpacking", "with"):
                        for kind, source, site in self._sources(binding.value, binding.path, "alias", binding.statement):
                            if isinstance(source, Binding):
                                self._add(Edge(kind, source, binding, site))
                            else:
                                self._origins.setdefault(source, []).append(binding)
        for call in self._calls():
            function = self.callee(call)
            if function is not None:
                self._sites.setdefault(function, []).append(call)
                for param, value in self.arguments(function, call):
                    found = [(kind, source) for kind, source, _ in self._sources(value, (), "argument", call) if isinstance(source, Binding)]
                    for kind, source in found:
                        self._add(Edge("element" if kind == "element" else "argument", source, param, call))
                    if not found:  # `make_samples(Net(), 4)`, `f(model.module)`
                        self._handed_other.add(param)
            for source, container in self._members(call):
                self._add(Edge("member", source, container, call))

    def _members(self, call: cst.Call) -> Iterator[Tuple[Binding, Binding]]:
        """(the value's binding, the container's binding) for each value `call` puts into a container."""
        func = call.func
        position = ADDS_MEMBER.get(func.attr.value) if isinstance(func, cst.Attribute) else None
        if position is None or not isinstance(func.value, (cst.Name, cst.Attribute)):  # type: ignore[union-attr]
            return
        args = [arg for arg in call.args if arg.keyword is None and not arg.star]
        if position >= len(args):
            return
        value = args[position].value
        values = [e.value for e in value.elements] if isinstance(value, (cst.List, cst.Tuple)) else [value]
        for member in values:
            for source in self.index.refers.get(member, ()) if isinstance(member, (cst.Name, cst.Attribute)) else ():
                for container in self.index.refers.get(func.value, ()):  # type: ignore[union-attr]
                    yield source, container

    def receivers(self, node: cst.CSTNode) -> List[Binding]:
        """The bindings that get the value `node` makes (`loader = DataLoader(...)`, or each
        `train, val = make_loaders()` where make_loaders returns `DataLoader(...), DataLoader(...)`)."""
        self._build()
        return self._origins.get(node, [])

    def derived(self, node: cst.CSTNode, returned: Optional[List[cst.Call]] = None) -> List[Binding]:
        """The bindings given a value computed from `node` (a reference, or a call that makes a
        value): up its expression to the binding given it, into the parameter of the file's function
        it is an argument of, or out of a `return` to where the function is called (those calls,
        which hold it too, are added to `returned`)."""
        self._build()
        found: List[Binding] = []
        pending, seen = [node], set()
        while pending:
            child = pending.pop()
            parent = self.index.parents.get(child)
            while parent is not None and child not in self._given:
                if isinstance(parent, cst.Arg) and isinstance(self.index.parents.get(parent), cst.Call):
                    call = self.index.parents[parent]
                    function = self.callee(call)  # type: ignore[arg-type]
                    if function is not None:
                        found += [param for param, value in self.arguments(function, call) if value is parent.value]  # type: ignore[arg-type]
                        break
                if isinstance(parent, cst.Return):
                    function = self.index.owner_of(parent)
                    if function not in seen:
                        seen.add(function)
                        pending += self._sites.get(function, [])  # type: ignore[arg-type]
                        if returned is not None:
                            returned += self._sites.get(function, [])  # type: ignore[arg-type]
                    break
                if isinstance(parent, (cst.BaseSmallStatement, cst.BaseStatement, cst.BaseSuite)):
                    break  # a statement that binds nothing from it (`print(order)`, `if order:`)
                child, parent = parent, self.index.parents.get(parent)
            found += self._given.get(child, [])
        return found

    def call_sites(self, function: cst.CSTNode) -> List[cst.Call]:
        """The calls of the file that run `function` (a def of the file, a method through `self`)."""
        self._build()
        return self._sites.get(function, [])  # type: ignore[call-overload]

    def _derived_from(self, binding: Binding) -> List[Edge]:
        if binding not in self._derived:
            self._derived[binding] = [Edge("derived", binding, target, node)
                                      for node in binding.references for target in self.derived(node)]
        return self._derived[binding]

    def _add(self, edge: Edge) -> None:
        self._into.setdefault(edge.target, []).append(edge)  # type: ignore[union-attr]
        self._from.setdefault(edge.source, []).append(edge)

    def _calls(self) -> Iterator[cst.Call]:
        calls = getattr(self.index, "calls", None)
        return iter(calls) if calls is not None else descendants(self.index.module, cst.Call)

    def arguments(self, function: cst.FunctionDef, call: cst.Call) -> Iterator[Tuple[Binding, cst.BaseExpression]]:
        """(the parameter's binding, the argument) for each argument `call` passes to `function`."""
        params = [p for p in (*function.params.posonly_params, *function.params.params)]
        if params and params[0].name.value in ("self", "cls") and isinstance(self.index.scope_parent.get(function), cst.ClassDef):
            params = params[1:]
        by_name = {p.name.value: p for p in (*params, *function.params.kwonly_params)}
        for position, arg in enumerate(call.args):
            if arg.star:
                return
            param = by_name.get(arg.keyword.value) if arg.keyword is not None else (
                params[position] if position < len(params) else None)
            binding = self.index.binding_at.get(param) if param is not None else None
            if binding is not None:
                yield binding, arg.value

    def _sources(self, value: cst.BaseExpression, path: Tuple[int, ...], kind: str, site: Optional[cst.CSTNode],
                 depth: int = 0) -> Iterator[Tuple[str, Union[Binding, cst.CSTNode], cst.CSTNode]]:
        """(edge kind, source binding, site) for each binding `value` (at `path` inside it) passes
        on, and (kind, node, site) for an expression that makes it (its origin: `DataLoader(...)`)."""
        if depth > 8:
            return
        site = site if site is not None else value
        if path:
            if isinstance(value, (cst.Tuple, cst.List)):
                elements = [e.value for e in value.elements if not isinstance(e, cst.StarredElement)]
                if len(elements) == len(value.elements) and path[0] < len(elements):
                    yield from self._sources(elements[path[0]], path[1:], "unpack", site, depth + 1)
                return
            if isinstance(value, cst.Call):
                yield from self._returned(value, path, depth)
                return
            for binding in self.index.refers.get(value, ()):  # `loaders, w = f()` then `a, b = loaders`
                if binding.value is not None and binding.kind in ("assignment", "unpacking"):
                    yield from self._sources(binding.value, (*binding.path, *path), "unpack", site, depth + 1)
            return
        if isinstance(value, (cst.Name, cst.Attribute)):
            for binding in self.index.refers.get(value, ()):
                yield kind, binding, site
            return
        yield kind, value, site
        if isinstance(value, cst.Subscript) and isinstance(value.value, (cst.Name, cst.Attribute)):
            for binding in self.index.refers.get(value.value, ()):  # `student = modules[0]`
                yield "element", binding, site
            return
        if not isinstance(value, cst.Call):
            return
        func = value.func
        if isinstance(func, cst.Attribute) and func.attr.value in RETURNS_SELF:
            yield from self._sources(func.value, (), "method", site, depth + 1)
        elif self.callee(value) is not None:
            yield from self._returned(value, (), depth)
        else:
            first = value.args[0] if value.args else None
            if first is not None and not first.keyword and not first.star and _called_name(func) not in NOT_WRAPPERS:
                yield from self._sources(first.value, (), "wrapper", site, depth + 1)

    def _returned(self, call: cst.Call, path: Tuple[int, ...], depth: int) -> Iterator[Tuple[str, Union[Binding, cst.CSTNode], cst.CSTNode]]:
        """What a call of one of the file's functions returns (at `path`): each `return` of it."""
        function = self.callee(call)
        if function is None or function.name.value == "__init__":
            return
        for ret in descendants(function, cst.Return):
            if ret.value is not None and self.index.owner_of(ret) is function:
                for kind, source, _ in self._sources(ret.value, path, "return", ret, depth + 1):
                    yield ("return" if isinstance(source, Binding) and kind != "element" else kind), source, ret

    # -- propagation -------------------------------------------------------------------------
    def follow(self, seeds: Iterable[Binding], kinds: FrozenSet[str], since: Optional[cst.CSTNode] = None,
               keep: Callable[[Edge], bool] = lambda edge: True, every: bool = True) -> "Value":
        """The value that `seeds` hold, followed over edges of `kinds` that `keep` accepts.

        `every`: a reference holds the value only when every binding it reads does (an edit that
        is right for this value only); else when any does (a loop that may walk this loader).

        `since`: the seeds hold it only from this statement on (a model once it is wrapped): in
        their own scope, only their references after it do, and only what they hand over after it
        travels on."""
        value = Value(self.index, since=since, every=every)
        pending = list(seeds)
        value.seeds = frozenset(pending)
        for seed in pending:
            value.bindings.add(seed)
        while pending:
            binding = pending.pop()
            edges = self.edges_from(binding)
            if "derived" in kinds:
                edges = edges + self._derived_from(binding)
            for edge in edges:
                if edge.kind not in kinds or edge.target in value.bindings or not keep(edge):
                    continue
                if binding in value.seeds and since is not None and not self._after(edge.site, since):
                    continue
                value.bindings.add(edge.target)
                value.edges.append(edge)
                pending.append(edge.target)
        return value

    def surely(self, values: Iterable["Value"]) -> FrozenSet[Binding]:
        """The bindings of `values` that hold one of them whichever way their value comes in: a
        seed, or a binding every edge into it comes from such a binding (from a seed, only once it
        holds the value: after `since`), and no call hands something else to (a parameter that
        one call gives the wrapped model and another a plain module, `net = average` on one branch
        and `net = model` on the other: both may be either)."""
        values = list(values)
        seeds = {seed: value for value in values for seed in value.seeds}
        sure = set().union(*(value.bindings for value in values)) - self._handed_other | set(seeds)

        def carries(edge: Edge) -> bool:
            value = seeds.get(edge.source)
            if value is not None:
                return value.since is None or self._after(edge.site, value.since)
            return edge.source in sure

        changed = True
        while changed:
            changed = False
            for binding in list(sure):
                if binding not in seeds and not all(carries(edge) for edge in self.edges_into(binding)):
                    sure.discard(binding)
                    changed = True
        return frozenset(sure)

    def _after(self, node: cst.CSTNode, since: cst.CSTNode) -> bool:
        return self.index.order.get(node, -1) > self.index.ends.get(since, 1 << 62)


_NOT_VALUES = frozenset({"import", "function", "class"})


@dataclass
class Value:
    """The bindings that hold one value, and the edges it took to reach them."""

    index: NameIndex
    since: Optional[cst.CSTNode] = None
    every: bool = True
    bindings: set = field(default_factory=set)
    seeds: FrozenSet[Binding] = frozenset()
    edges: List[Edge] = field(default_factory=list)

    def holds(self, node: cst.CSTNode, every: Optional[bool] = None) -> bool:
        """Is `node` (a Name or `self.x` that reads bindings) this value (on every binding it reads,
        or on one of them: `every`, the value's own unless given)?"""
        read = self.read(node)
        if not read or not (all if (self.every if every is None else every) else any)(binding in self.bindings for binding in read):
            return False
        if self.since is None or not any(binding in self.seeds for binding in read):
            return True
        return self._after_since(node, read)

    def read(self, node: cst.CSTNode) -> Tuple[Binding, ...]:
        """The bindings `node` reads that hold a value made at run time (an import, def or class
        the name also binds does not: `import model` then `model = model.RNNModel(...)`)."""
        return tuple(b for b in self.index.refers.get(node, ()) if b.kind not in _NOT_VALUES)

    def _after_since(self, node: cst.CSTNode, read: Tuple[Binding, ...]) -> bool:
        """A seed's reference holds the value after `since` where source order is run order: in
        the scope `since` runs in (a `global model` of main() read in main()), in the seed's own
        scope (for `self.x`: in the whole class); anywhere else once it is reached at all."""
        index = self.index
        owner = index.owner_of(node)
        here = owner is index.owner_of(self.since) or any(  # type: ignore[arg-type]
            b.scope is owner or b.name.startswith("self.") for b in read if b in self.seeds)
        return not here or index.order.get(node, -1) > index.ends.get(self.since, 1 << 62)  # type: ignore[arg-type]

    def references(self, every: Optional[bool] = None) -> Iterator[cst.CSTNode]:
        """Every node that holds the value (see holds)."""
        seen = set()
        for binding in self.bindings:
            for node in binding.references:
                if node not in seen:
                    seen.add(node)
                    if self.holds(node, every):
                        yield node

    def scopes(self) -> Dict[ScopeOwner, List[Binding]]:
        found: Dict[ScopeOwner, List[Binding]] = {}
        for binding in self.bindings:
            found.setdefault(binding.scope, []).append(binding)
        return found


def _called_name(func: cst.BaseExpression) -> Optional[str]:
    if isinstance(func, cst.Name):
        return func.value
    return func.attr.value if isinstance(func, cst.Attribute) else None
