"""DataLoaders: what each one loads, whether it trains, and why one is declined.

A loader is followed to its loops: where it is built, in functions it is passed to, through
`self`, and back out of the helpers that return it.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import dotted_name
from migrator.dataflow.core import _NOT_WRAPPERS, EpochHook, LoaderFact, _iterated, code_of
from migrator.graph.flow import LOADER, Value
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
        value = self.values.follow(self.values.receivers(call), LOADER, every=False)
        if statement is not None:
            target, loops = self.loader_loops(call, statement, value)
        if problem is None and target is None and not loops:
            problem = "untraced"
        if problem is None and not loops and _shuffles(shuffle) and self.has_updates:
            problem = "untraced"  # a named, shuffled loader whose use we cannot find
        # An untraced loader that shuffles is most likely the training one: better reported than missed.
        training = any(self.use_trains(loop) for loop, _ in loops) or (problem == "untraced" and _shuffles(shuffle))
        hooks: List[EpochHook] = []
        no_epoch = None
        if training:
            for loop, spelled in loops:
                if not self.use_trains(loop):
                    continue
                found = self.epoch_hooks(loop, spelled, value)
                if not found and no_epoch is None:
                    no_epoch = loop
                hooks.extend(h for h in found if h.loop not in {k.loop for k in hooks})
        distributed = self.has_distributed_sampler(call)
        bounds = tuple({id(b[0]): b for use, spelled in loops if training for b in self.step_bounds(use, spelled)}.values())
        return LoaderFact(call, statement, owner, target, dataset, shuffle, kwargs, training, tuple(hooks), problem, no_epoch, distributed, bounds)  # type: ignore[arg-type]

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

    def _walked(self, node: cst.CSTNode, value) -> List[Tuple[cst.CSTNode, str]]:
        """Where `node`, a reference to the loader, is walked: the loop or `iter()` over it, or the
        imported training function (or trainer) it is handed to."""
        walked: cst.CSTNode = node
        parent = self.a.parent(walked)
        while isinstance(parent, cst.Arg) and parent.keyword is None and not parent.star:
            call = self.a.parent(parent)
            if not isinstance(call, cst.Call) or call.args[0] is not parent:
                break
            if N.is_name(call.func, "iter"):
                return [(call, self._spelling(node, value))]
            if (dotted_name(call.func) or "").split(".")[-1] in _NOT_WRAPPERS:
                return []
            walked, parent = call, self.a.parent(call)
        if isinstance(parent, cst.For) and parent.iter is walked:
            return [(parent, self._spelling(node, value))]
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
        inner = [_first_walked(b.value) if isinstance(b.value, cst.Call) else None for b in read]
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
