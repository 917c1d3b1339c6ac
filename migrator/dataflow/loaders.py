"""DataLoaders: what each one loads, whether it trains, and why one is declined.

A loader is followed to its loops: where it is built, in functions it is passed to, through
`self`, and back out of the helpers that return it.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import dotted_name
from migrator.dataflow.core import (_NOT_WRAPPERS, EpochHook, LoaderFact, LoaderKeys, _iterated, code_of, loader_value,
                                    walked_by)
from migrator.graph.flow import Value
from migrator.dataflow.epochs import EpochFlow
from migrator.tree import descendants


class LoaderFlow(EpochFlow):
    """Loader facts; the epoch hooks of a training loader come from `EpochFlow`."""

    def loaders(self) -> Tuple[LoaderFact, ...]:
        return tuple(self.loader(call) for call in self.a.calls(N.DATALOADER))

    def loader(self, call: cst.Call) -> LoaderFact:
        statement = self.a.statement_of(call)
        owner = self.a.scope_of(call)
        dataset = _argument(call, 0, "dataset")
        shuffle = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "shuffle"), None)
        kwargs = next((code_of(arg.value) for arg in call.args if arg.star == "**"), None)
        problem = self.loader_problem(call, dataset, statement)
        target: Optional[str] = None
        loops: List[Tuple[cst.For, str]] = []
        comprehension = _keyed_by(self.a, call)
        value = loader_value(self.a, comprehension or call)
        trained = loader_value(self.a, comprehension or call, training=True)
        keys = None
        if statement is not None and comprehension is not None:
            target, loops, keys = self.keyed_loops(comprehension, statement, value)
            if problem is None and (keys is None and loops or not _pure(dataset, comprehension) or kwargs):
                problem = "untraced"  # which key trains, or the sampler's dataset, is not clear: reported
        elif statement is not None:
            target, loops = self.loader_loops(call, statement, value)
        walks = loops  # the uses that walk it where it may train
        if trained.bindings != value.bindings and statement is not None:
            walks = (self.keyed_loops(comprehension, statement, trained)[1] if comprehension is not None
                     else self.loader_loops(call, statement, trained)[1])
        if problem is None and target is None and not loops:
            problem = "untraced"
        if problem is None and not loops and _shuffles(shuffle) and self.has_updates:
            problem = "untraced"  # a named, shuffled loader whose use we cannot find
        # An untraced loader that shuffles is most likely the training one: better reported than missed.
        training = any(self.use_trains(loop) for loop, _ in walks) or (problem == "untraced" and _shuffles(shuffle))
        hooks: List[EpochHook] = []
        no_epoch = None
        if training:
            for loop, spelled in walks:
                if not self.use_trains(loop):
                    continue
                found = self.epoch_hooks(loop, spelled, value)
                if not found and no_epoch is None:
                    no_epoch = loop
                hooks.extend(h for h in found if h.loop not in {k.loop for k in hooks})
        distributed = self.has_distributed_sampler(call)
        bounds = tuple({id(b[0]): b for use, spelled in loops if training for b in self.step_bounds(use, spelled)}.values())
        return LoaderFact(call, statement, owner, target, dataset, shuffle, kwargs, training, tuple(hooks), problem, no_epoch,  # type: ignore[arg-type]
                          distributed, bounds, keys)

    def step_bounds(self, use: cst.CSTNode, spelled: str) -> List[Tuple[cst.Arg, str]]:
        """`data_iter = iter(loader)` then `for step in range(n): data = next(data_iter)`: the `n`s
        that do not already come from the loader's own length."""
        if not (isinstance(use, cst.Call) and N.is_name(use.func, "iter")):
            return []
        if self.rebuilt_on_exhaustion(use) is not None:
            return []  # restarted when it runs dry: the count is of steps in all, not per pass
        statement = self.a.statement_of(use)
        iterator = _assigned_name(statement, use)
        fn = self.a.enclosing_function(use) or self.a.module
        if iterator is None:
            return []
        found = []
        for loop in self.c.loops:
            if not isinstance(loop, cst.For) or not self.a.is_inside(loop, fn) or not isinstance(loop.iter, cst.Call):
                continue
            if not N.is_name(loop.iter.func, "range") or len(loop.iter.args) != 1:
                continue
            reads = any(
                N.is_name(c.func, "next") and c.args and code_of(c.args[0].value) == iterator
                for c in descendants(loop.body, cst.Call)
            )
            # `if (step + 1) % iters_per_epoch == 0: data_iter = iter(loader)`: restarted inside the
            # loop, so the range counts all steps of the run, not one pass over the shard.
            rebuilt = any(
                N.is_name(c.func, "iter") and _assigned_name(self.a.statement_of(c), c) == iterator
                for c in descendants(loop.body, cst.Call)
            )
            bound = loop.iter.args[0]
            if reads and not rebuilt and "len(" not in code_of(bound.value):
                found.append((bound, _iterated(use) or spelled))
        return found

    def has_distributed_sampler(self, call: cst.Call) -> bool:
        sampler = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "sampler"), None)
        if isinstance(sampler, cst.Name):
            sampler = self.value_of(sampler)
        return isinstance(sampler, cst.Call) and self.c.resolve(sampler.func) in N.DISTRIBUTED_SAMPLER

    def loader_problem(self, call: cst.Call, dataset, statement) -> Optional[str]:
        keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
        if "sampler" in keywords or "batch_sampler" in keywords:
            return "sampler"
        if dataset is None or statement is None or self.a.block_of(statement) is None:
            return "untraced"
        if self.is_iterable_dataset(dataset, call):
            return "iterable"
        return None

    def is_iterable_dataset(self, dataset: cst.BaseExpression, at: cst.CSTNode) -> bool:
        value: Optional[cst.CSTNode] = dataset
        if isinstance(dataset, cst.Name):
            value = self.value_of(dataset)
        if not isinstance(value, cst.Call):
            return False
        name = dotted_name(value.func)
        if self.c.resolve(value.func) in N.ITERABLE_DATASET:
            return True
        cls = next((c for c in self.c.classes if c.name.value == name), None)
        return cls is not None and any(self.c.resolve(base.value) in N.ITERABLE_DATASET for base in cls.bases)

    def loader_loops(self, call: cst.Call, statement, value: Value) -> Tuple[Optional[str], List[Tuple[cst.CSTNode, str]]]:
        """The loader's name where it is built, and every use of it that walks it, each with the
        loader as spelled there: a loop over it (through `tqdm()`, `enumerate()`), an `iter()` of
        it, a call handing it to a training function the file imports. The loader is a value of
        the file's value flow (migrator.graph.flow): followed through names, `self.` attributes,
        arguments, returns and unpacking, whatever they are called."""
        uses: Dict[cst.CSTNode, str] = {}
        for node in sorted(value.references(), key=lambda n: self.c.order.get(n, 0)):
            for use, spelled in self._walked(node, value):
                uses.setdefault(use, spelled)
        return _assigned_name(statement, call), list(uses.items())

    def keyed_loops(self, comprehension: cst.DictComp, statement, value: Value):
        """`loaders = {x: DataLoader(data[x], ...) for x in ['train', 'val']}`, walked as
        `for batch in loaders[phase]` under `for phase in ['train', 'val']`: the loops over one
        key's loader, spelled with that key (`loaders['train']`, which the epoch loop can read),
        and the key that trains. A key trains when the loop reads it as a literal, or when every
        backward and step in the loop sits under `if phase == 'train':`."""
        elements = [e.value for e in comprehension.for_in.iter.elements]  # type: ignore[attr-defined]
        keys = {_text(k): code_of(k) for k in elements}
        uses: Dict[cst.CSTNode, Tuple[str, str, Optional[str]]] = {}  # use: (dict, as read, key that trains)
        unknown = False
        for node in sorted(value.references(), key=lambda n: self.c.order.get(n, 0)):
            read = self.a.parent(node)
            if not (isinstance(read, cst.Subscript) and read.value is node and len(read.slice) == 1
                    and isinstance(read.slice[0].slice, cst.Index)):
                continue  # `loaders.items()`, `len(loaders)`: no loader of one key is walked there
            key = read.slice[0].slice.value
            for use, _ in self._walked(read, value):
                trains = self.use_trains(use)
                which = _text(key) if isinstance(key, cst.SimpleString) else self._key_trained(use, key) if trains else None
                unknown = unknown or (trains and which is None)
                uses.setdefault(use, (code_of(node), code_of(read), which if trains else None))
        training = {which for _, _, which in uses.values() if which is not None}
        if unknown and len(keys) == 1:
            training, unknown = set(keys), False  # one key: it is the one that trains
        target = _assigned_name(statement, comprehension)
        if unknown or len(training) != 1 or not training <= set(keys):
            return target, [(use, read) for use, (_, read, _) in uses.items()], None
        (key,) = training
        found = LoaderKeys(comprehension.for_in.target.value, keys[key], every=len(keys) == 1)  # type: ignore[union-attr]
        return target, [(use, f"{spelled}[{found.training}]") for use, (spelled, _, _) in uses.items()], found

    def _key_trained(self, use: cst.CSTNode, key: cst.BaseExpression) -> Optional[str]:
        """The key under which `use` (a loop over `loaders[key]`) trains: every backward and optimizer
        step in it sits in the body of an `if key == 'train':` (None when one does not)."""
        read = set(self.c.refers.get(key, ()))
        found = set()
        for call in self.a.call_graph.calls_in(use):
            if not self.call_trains(call):
                continue
            tests = (anc.test for anc in self.a.ancestors(call) if isinstance(anc, cst.If) and self.a.is_inside(call, anc.body))
            literal = next(filter(None, (_compared(test, read, self.c.refers) for test in tests)), None)
            if literal is None:
                return None
            found.add(literal)
        return found.pop() if len(found) == 1 else None

    def _walked(self, node: cst.CSTNode, value) -> List[Tuple[cst.CSTNode, str]]:
        """Where `node`, a reference to the loader, is walked: the loop or `iter()` over it, or the
        imported training function (or trainer) it is handed to."""
        use = walked_by(self.a, node)
        if use is not None:
            return [(use, self._spelling(node, value))]
        holder = self.a.parent(node)
        call = self.a.parent(holder) if isinstance(holder, cst.Arg) else None
        if not isinstance(call, cst.Call) or self.callee(call) is not None:
            return []
        spelled = code_of(node)
        if self.external_training_call(call, node):
            return [(call, spelled)]
        if self.external_trainer(call, node):
            return [(run, spelled) for run in self.trainer_runs(call)]
        return []

    def _spelling(self, node: cst.CSTNode, value) -> str:
        """The loader as spelled where `node` reads it: the loader itself, not the progress bar or
        the `enumerate(...)` a name holds (`pbar = tqdm(train_loader)`: `train_loader`)."""
        read = self.c.refers.get(node, ())
        given = [b.given() for b in read]
        inner = [_first_walked(g) if isinstance(g, cst.Call) else None for g in given]
        if read and all(isinstance(i, (cst.Name, cst.Attribute)) and value.holds(i) for i in inner):
            return code_of(inner[0])
        return code_of(node)


def _first_walked(node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The value inside `enumerate(tqdm(loader), 1)`-like wrappers: the first positional argument, down."""
    while isinstance(node, cst.Call) and node.args and node.args[0].keyword is None and not node.args[0].star:
        if (dotted_name(node.func) or "").split(".")[-1] in _NOT_WRAPPERS or N.is_name(node.func, "iter"):
            return None
        node = node.args[0].value
    return node

def _keyed_by(a, call: cst.Call) -> Optional[cst.DictComp]:
    """The dict comprehension `{x: DataLoader(...) for x in ['train', 'val']}` that builds `call`
    once per literal key (no `if`, no nested `for`), when it is the value of an assignment."""
    comprehension = a.parent(call)
    if not isinstance(comprehension, cst.DictComp) or comprehension.value is not call:
        return None
    for_in = comprehension.for_in
    if for_in.ifs or for_in.inner_for_in is not None or not isinstance(for_in.target, cst.Name):
        return None
    elements = for_in.iter.elements if isinstance(for_in.iter, (cst.List, cst.Tuple)) else ()
    if not elements or not all(isinstance(e, cst.Element) and isinstance(e.value, cst.SimpleString) for e in elements):
        return None
    if not (isinstance(comprehension.key, cst.Name) and comprehension.key.value == for_in.target.value):
        return None
    return comprehension


def _pure(dataset: Optional[cst.BaseExpression], comprehension: cst.DictComp) -> bool:
    """The loader's dataset can be read twice (by the sampler too) without building it twice:
    a name, an attribute, or `datasets[x]` by the comprehension's key."""
    if isinstance(dataset, cst.Subscript):
        index = dataset.slice[0].slice if len(dataset.slice) == 1 else None
        pure = isinstance(index, cst.Index) and isinstance(index.value, (cst.Name, cst.SimpleString))
        dataset = dataset.value if pure else None
    return isinstance(dataset, (cst.Name, cst.Attribute))


def _text(literal: cst.BaseExpression) -> str:
    value = literal.evaluated_value if isinstance(literal, cst.SimpleString) else None
    return value if isinstance(value, str) else code_of(literal)


def _compared(test: cst.BaseExpression, read, refers) -> Optional[str]:
    """`phase == 'train'` (either way round), `phase` reading the bindings `read`: 'train'."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return None
    left, right = test.left, test.comparisons[0].comparator
    for name, literal in ((left, right), (right, left)):
        if isinstance(literal, cst.SimpleString) and read and set(refers.get(name, ())) == read:
            return _text(literal)
    return None


def _shuffles(shuffle: Optional[cst.Arg]) -> bool:
    return shuffle is not None and not (isinstance(shuffle.value, cst.Name) and shuffle.value.value == "False")


def _argument(call: cst.Call, position: int, keyword: str) -> Optional[cst.BaseExpression]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [arg for arg in call.args if arg.keyword is None and arg.star == ""]
    return positional[position].value if len(positional) > position else None


def _assigned_name(statement, call: cst.Call) -> Optional[str]:
    if isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], (cst.Assign, cst.AnnAssign)):
        small = statement.body[0]
        if small.value is call:
            target = small.targets[0].target if isinstance(small, cst.Assign) else small.target
            if isinstance(target, (cst.Name, cst.Attribute)):
                return code_of(target)
    return None
