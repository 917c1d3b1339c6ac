"""The core of the flow analysis: its facts, its construction and the navigation every concern shares.

Part of the single analysis: built from the same collected sites and name index, never a new
traversal of the whole tree. "Training" is decided from the code, not from names: a loader
trains when a loop over it (here, or in a function it is passed to, or through `self`) reaches
a `backward()` or an optimizer `step()`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Protocol, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import ScopeOwner, dotted_name
from migrator.graph.flow import ALIAS, LOADER, MODEL, Edge, Value

Statement = cst.BaseStatement


# --------------------------------------------------------------------------- what the flow reads
# The flow analysis sits below the script analysis (migrator.analysis builds it and reads its
# facts); these two protocols say what it asks of the layer above, so it never imports it.


class Model(Protocol):
    """A trained model (migrator.analysis' ModelFact): how it is spelled and what it is wrapped after."""

    expr: str
    wrap_after: Optional[Statement]
    already_ddp: bool


class Navigation(Protocol):
    """The script's analysis (migrator.analysis' _Analysis): its collected sites and tree navigation."""

    module: cst.Module
    c: Any  # the collector's sites: calls, assignments, loops, functions, the name index
    calls_inside: Dict[cst.CSTNode, List[cst.Call]]
    call_graph: Any  # migrator.dataflow.calls.CallGraph, built once for the file
    values: Any  # migrator.graph.flow.ValueFlow, the file's value flow

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]: ...
    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]: ...
    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool: ...
    def comes_after(self, node: cst.CSTNode, statement: cst.CSTNode) -> bool: ...
    def statement_of(self, node: cst.CSTNode) -> Optional[Statement]: ...
    def block_of(self, statement: cst.CSTNode) -> Optional[cst.CSTNode]: ...
    def scope_of(self, node: cst.CSTNode) -> Optional[ScopeOwner]: ...
    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]: ...
    def enclosing_class(self, node: cst.CSTNode) -> Optional[cst.ClassDef]: ...
    def calls(self, qnames: FrozenSet[str]) -> List[cst.Call]: ...
    def holds_loop(self, statement: cst.CSTNode) -> bool: ...
    def top_statement_in(self, node: cst.CSTNode, block: Any) -> Optional[Statement]: ...


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class EpochHook:
    """`<loader>.sampler.set_epoch(<epoch>)` (or `<sampler>.set_epoch`) goes first in `loop`."""

    loop: cst.CSTNode  # a `for epoch ...` loop, or a `while` loop that counts its epochs
    loader_expr: str  # how the loader is spelled in the loop's scope
    epoch: Optional[str]  # None: the sampler's own counter advances (`sampler.set_epoch(sampler.epoch + 1)`)
    after: Optional[cst.SimpleStatementLine] = None  # `cur_epochs += 1` in a while loop: set_epoch goes after it
    before: Optional[cst.CSTNode] = None  # `it = iter(loader)` rebuilt on StopIteration: set_epoch goes before it


@dataclass(frozen=True)
class LoaderKeys:
    """`loaders = {x: DataLoader(data[x], ...) for x in ['train', 'val']}`: one call builds a loader
    per key, and only the key the training loop reads is sharded (the others are evaluated whole)."""

    variable: str  # the comprehension's key, `x`
    training: str  # the key whose loader trains, as written: `'train'`
    every: bool  # every key trains: the sampler needs no condition


@dataclass(frozen=True)
class LoaderFact:
    call: cst.Call
    statement: Statement  # the statement holding the DataLoader(...) call
    owner: ScopeOwner
    target: Optional[str]  # "train_loader", "self.train_loader"
    dataset: Optional[cst.BaseExpression]
    shuffle: Optional[cst.Arg]  # the shuffle=... argument, which the sampler takes over
    kwargs_dict: Optional[str]  # `**train_kwargs`: shuffle may hide in there
    training: bool
    hooks: Tuple[EpochHook, ...]
    problem: Optional[str]  # why it is declined: "sampler", "iterable", "untraced", or None
    no_epoch_loop: Optional[cst.CSTNode] = None  # the loop that iterates it without an epoch loop around
    distributed_sampler: bool = False  # already reads a DistributedSampler
    # `for step in range(iters_per_epoch): batch = next(data_iter)`: counts computed from the whole data
    # set would read past this rank's shard; each range(...) argument becomes min(n, len(loader)).
    step_bounds: Tuple[Tuple[cst.Arg, str], ...] = ()  # (the range argument, the loader as spelled there)
    keys: Optional[LoaderKeys] = None  # built once per key in a dict comprehension


@dataclass(frozen=True)
class SaveSite:
    """A checkpoint write and the statement(s) that must run on rank 0 only."""

    call: cst.Call
    guard: Tuple[Statement, ...]  # the helper's call sites, or the write itself
    shared: Optional[Statement] = None  # the guard would skip code every rank must run (a forward, a collective)
    inner: Optional[Statement] = None  # the write itself, when `guard` holds a helper's call sites
    # `save = lambda epoch: torch.save(...)`: the lambda's body is what runs on rank 0 (guarding its
    # definition would leave the name undefined on the other ranks)
    in_lambda: Optional[cst.Lambda] = None


@dataclass(frozen=True)
class ModelUse:
    """An attribute of a wrapped model: `model.state_dict()`, `model.encode(x)`..."""

    node: cst.Attribute
    model: Any  # the analysis' ModelFact (a Model), whose other fields the rules read
    # The name may hold a plain module too (`net = average` on one branch, `net = model` on the
    # other; a helper handed either): the edit asks which it holds (`isinstance(net, DDP)`).
    maybe: bool = False


# --------------------------------------------------------------------------- the analysis


class FlowBase:
    """Construction and shared navigation: callees, parameters, loops over an expression, training."""

    def __init__(
        self,
        a: Navigation,
        models: Tuple[Any, ...],
        entry_function: Optional[cst.CSTNode],
        entry_scope: Optional[cst.CSTNode] = None,
        set_up_by_caller: bool = False,
        trained_through: FrozenSet[str] = frozenset(),
    ) -> None:
        self.a = a
        self.c = a.c
        self.models = models  # the analysis' ModelFacts
        self._any_model: Optional[Any] = None
        self.entry_function = entry_function
        self.entry_scope = entry_scope  # where the setup goes: the entry function, or the module
        # A module whose caller sets up the process group (analysis.facts.EntryPoint "caller"):
        # every function of it runs on every rank, from a script that runs it once.
        self.set_up_by_caller = set_up_by_caller
        # Names whose calls train in a module migrated with this script (`Solver`): every rank runs them.
        self.trained_through = trained_through
        graph = a.call_graph  # the file's calls and what trains: computed once, shared (dataflow.calls)
        self.functions, self.classes = graph.functions, graph.classes
        self.callee, self.method_of, self.instance_class = graph.callee, graph.method_of, graph.instance_class
        self.trains, self.call_trains, self.steps_optimizer = graph.trains, graph.call_trains, graph.steps_optimizer
        self.values = a.values  # the file's value flow (migrator.graph.flow), built once
        self._wrapped: Dict[int, Any] = {}  # id(model) -> its Value once wrapped (dataflow.models)
        self._surely: Optional[FrozenSet[Any]] = None  # the bindings that surely hold a wrapped model

    def is_model(self, node: cst.CSTNode) -> bool:
        """May `node` be one of the trained models (wrapped or not), whatever it is called there?
        (The value flow from the models' bindings: migrator.graph.flow.)"""
        if self._any_model is None:
            seeds = [b for model in self.models for b in self.model_bindings(model)]
            self._any_model = self.values.follow(seeds, MODEL, every=False)
        return self._any_model.holds(node)

    def model_bindings(self, model: Model):
        """The bindings of the model where it is wrapped, or built (`self.model`: the class's)."""
        where = model.wrap_after if model.wrap_after is not None else getattr(model, "definition", None)
        return self.c.holding(model.expr, self.a.scope_of(where) if where is not None else self.a.module)

    def value_of(self, name: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """What a name holds where it is read: the value of the last binding it reads, when that
        is a plain assignment (`sampler = DistributedSampler(ds)`, then `sampler=sampler`)."""
        found = [b for b in self.c.refers.get(name, ()) if b.kind == "assignment" and b.value is not None]
        return max(found, key=lambda b: b.position).value if found else None

    def calls_within(self, node: cst.CSTNode) -> List[cst.Call]:
        return self.a.calls_inside.get(node, [])

    @property
    def has_updates(self) -> bool:
        """Does anything in the file train parameters (an optimizer, a helper building one, a manual update)?"""
        return bool(self.c.optimizer_calls or self.c.optimizer_helpers or self.c.manual_updates)

    def external_training_call(self, call: cst.Call, argument: cst.BaseExpression) -> bool:
        """`train(config, train_loader, model, ...)` imported from the project's own module: the loader
        it is given (`argument`) is the training data, even though the loop over it is in that other
        module."""
        if call in self.c.trained_loaders:  # the project module's own loops say which loaders it trains on
            return any(loader is argument for loader in self.c.trained_loaders[call])
        func = call.func
        name = func.value if isinstance(func, cst.Name) else N.attribute_name(func)
        return bool(name) and N.is_training_function_name(name) and self.has_updates

    def external_trainer(self, call: cst.Call, argument: cst.BaseExpression) -> bool:
        """`Train(model, train_loader, optimizer, ...)` / `Trainer(...)` imported from the project: an
        object built around the loader (`argument`) that trains when one of its methods runs."""
        if call in self.c.trained_loaders:
            return any(loader is argument for loader in self.c.trained_loaders[call])
        name = call.func.value if isinstance(call.func, cst.Name) else N.attribute_name(call.func) or ""
        trainer = name[:1].isupper() and ("Train" in name or "Solver" in name)
        return trainer and self.has_updates

    def trainer_runs(self, constructor: cst.Call) -> List[cst.Call]:
        """The calls that run the trainer built by `constructor` inside an epoch loop
        (`train = Train(...)`, then `for epoch ...: train.run_epoch(...)`)."""
        statement = self.a.statement_of(constructor)
        if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(statement.body[0], cst.Assign):
            return []
        assign = statement.body[0]
        if assign.value is not constructor or len(assign.targets) != 1:
            return []
        trainer = self.values.follow(self.values.receivers(constructor), ALIAS, every=False)
        scope = self.a.scope_of(statement)
        return [
            call for call in self.calls_within(scope if scope is not None else self.a.module)
            if isinstance(call.func, cst.Attribute) and trainer.holds(call.func.value)
            and self.a.comes_after(call, statement)
        ]

    def use_trains(self, use: cst.CSTNode) -> bool:
        """A loop over the loader trains; so does an `iter(loader)` in a function that trains, and
        a call that hands the loader to an imported training function."""
        if isinstance(use, cst.For):
            return self.trains(use)
        if isinstance(use, cst.Call) and not N.is_name(use.func, "iter"):
            return True
        return self.trains(self.a.enclosing_function(use) or self.a.module)



# --------------------------------------------------------------------------- helpers


# Calls whose first argument is not what the loop walks over (range(len(loader)) walks indices).
_NOT_WRAPPERS = {"range", "len", "reversed", "sorted"}


def walked_by(a: Navigation, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The loop, or the `iter()` call, that walks `node` (a loader), through the wrappers handed it
    first (`enumerate(tqdm(loader))`); None when nothing walks it there (`len(loader)`)."""
    walked, parent = node, a.parent(node)
    while isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
        call = a.parent(parent)
        if not isinstance(call, cst.Call) or call.args[0] is not parent:
            break
        if N.is_name(call.func, "iter"):
            return call
        if (dotted_name(call.func) or "").split(".")[-1] in _NOT_WRAPPERS:
            return None
        walked, parent = call, a.parent(call)
    return parent if isinstance(parent, cst.For) and parent.iter is walked else None


def loader_value(a: Navigation, made: cst.CSTNode, training: bool = False) -> Value:
    """The loader `made` builds (or returns), wherever the file's value flow takes it. `training`:
    only where it may train, not into a call that does not (`train_val(model, test_loader)`
    evaluates, though `train_val(model, train_loader, optimizer)` trains in the same loop)."""
    keep = a.call_graph.carries_training if training else _anywhere
    return a.values.follow(a.values.receivers(made), LOADER, keep=keep, every=False)


def _anywhere(edge: Edge) -> bool:
    return True


def loops_over(a: Navigation, made: cst.CSTNode, training: bool = False) -> Optional[List[cst.CSTNode]]:
    """The loops (and `iter()` calls) that walk the loader `made` builds or returns, wherever the
    file's value flow takes it (`training`: where it may train, see loader_value); None when a
    reference hands it on to code the flow does not follow (`trainer.fit(model, loader)`, `return
    loader`), which may walk it too. `len(loader)` and `loader.dataset` read it without walking it."""
    value = loader_value(a, made, training)
    found: List[cst.CSTNode] = []
    for node in value.references():
        use = walked_by(a, node)
        if use is not None:
            found.append(use)
        elif _handed_on(a, node):
            return None
    return found


def _handed_on(a: Navigation, node: cst.CSTNode) -> bool:
    parent = a.parent(node)
    if isinstance(parent, cst.Return):
        return True
    call = a.parent(parent) if isinstance(parent, cst.Arg) else None
    if not isinstance(call, cst.Call) or a.call_graph.callee(call) is not None:
        return False  # not an argument, or one the flow follows into the file's own function
    return (dotted_name(call.func) or "").split(".")[-1] not in _NOT_WRAPPERS


def _iterated(loop: cst.CSTNode) -> Optional[str]:
    """What a loop (or an `iter(...)` call) walks over: `train_loader` in `for x in train_loader`,
    `enumerate(train_loader)`, `tqdm(train_loader, ...)`, `metric_logger.log_every(train_loader, 10)`.
    """
    if isinstance(loop, cst.Call) and not N.is_name(loop.func, "iter"):
        return None  # a call handing the loader to a training function: spelled as it is passed
    return _wrapped(loop.iter if isinstance(loop, cst.For) else loop)


def _wrapped(node: cst.CSTNode) -> Optional[str]:
    """The loader inside `enumerate(tqdm(loader), 1)`-like wrappers: the first positional argument, down."""
    while isinstance(node, cst.Call) and node.args and node.args[0].keyword is None:
        if (dotted_name(node.func) or "").split(".")[-1] in _NOT_WRAPPERS:
            return None
        node = node.args[0].value
    return code_of(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
