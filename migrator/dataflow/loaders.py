"""DataLoaders: what each one loads, whether it trains, and why one is declined.

A loader is followed to its loops: where it is built, in functions it is passed to, through
`self`, and back out of the helpers that return it.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import ScopeOwner, dotted_name
from migrator.dataflow.core import EpochHook, LoaderFact, Statement, _iterated, _wrapped, code_of
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
        if statement is not None:
            target, loops = self.loader_loops(call, statement)
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
                found = self.epoch_hooks(loop, spelled)
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
            sampler = self.assigned_value(sampler.value, self.a.scope_of(call))
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
            value = self.assigned_value(dataset.value, self.a.scope_of(at))
        if not isinstance(value, cst.Call):
            return False
        name = dotted_name(value.func)
        if self.c.resolve(value.func) in N.ITERABLE_DATASET:
            return True
        cls = next((c for c in self.c.classes if c.name.value == name), None)
        return cls is not None and any(self.c.resolve(base.value) in N.ITERABLE_DATASET for base in cls.bases)

    def loader_loops(self, call: cst.Call, statement) -> Tuple[Optional[str], List[Tuple[cst.For, str]]]:
        """The loader's name where it is built, and every loop over it (with its spelling there)."""
        target = _assigned_name(statement, call)
        if target is not None:
            return target, self.uses(target, self.a.scope_of(call))
        # `return DataLoader(...)` or `return train_loader, val_loader` from a helper function.
        fn = self.a.enclosing_function(call)
        if fn is not None and isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Return):
            found: List[Tuple[cst.For, str]] = []
            for path in _paths_to_node(statement.body[0].value, call, ()):
                found += self.returned_uses(fn, path)
            return None, found
        return None, []

    def uses(self, expr: str, owner: ScopeOwner, depth: int = 0) -> List[Tuple[cst.For, str]]:
        """Loops over `expr` in `owner`, in methods of its class (self.x), and in functions it is passed to."""
        found: List[Tuple[cst.For, str]] = []
        scopes: List[cst.CSTNode] = [owner]
        if expr.startswith("self."):
            cls = self.a.enclosing_class(owner)
            scopes = [cls] if cls is not None else scopes
        for scope in scopes:
            found += [(loop, expr) for loop in self.loops_over(expr, scope)]
            for alias in self.progress_aliases(expr, scope):
                found += [(loop, expr) for loop in self.loops_over(alias, scope)]
            for call in self.calls_within(scope):
                fn = self.callee(call)
                param = self.param_for(fn, call, expr) if fn is not None else None
                if param is not None and depth < MAX_DEPTH:
                    found += [(loop, expr) for loop, _ in self.uses(param, fn, depth + 1)]
                elif fn is None and self.external_training_call(call, expr):
                    found.append((call, expr))  # type: ignore[arg-type]
                elif fn is None and self.external_trainer(call, expr):
                    found += [(run, expr) for run in self.trainer_runs(call)]  # type: ignore[misc]
        # `self.loader = loader` in a constructor or method: the loader lives on the instance.
        if "." not in expr and isinstance(owner, cst.FunctionDef) and depth < MAX_DEPTH:
            for attribute in self.stored_on_self(expr, owner):
                found += [(loop, expr) for loop, _ in self.uses(attribute, owner, depth + 1)]
        # A helper that returns the loader: `train_loader, val_loader = make_loaders(...)`.
        if "." not in expr and isinstance(owner, cst.FunctionDef):
            for position in self.return_positions(owner, expr):
                found += self.returned_uses(owner, position)
        return found

    def progress_aliases(self, expr: str, scope: cst.CSTNode) -> List[str]:
        """`pbar = tqdm(train_loader, ...)` / `batches = enumerate(train_loader)`: names whose loops
        are loops over the loader (an `iter(...)` is a stream, followed by loops_over itself)."""
        if self._wrapping is None:
            # One pass: every `name = wrapper(<loader>, ...)` assignment, by what it wraps.
            self._wrapping = {}
            for target, statement in self.c.assignments:
                value = getattr(statement.body[0], "value", None)
                if not isinstance(value, cst.Call) or N.is_name(value.func, "iter") or "." in target or "," in target:
                    continue
                wrapped = _wrapped(value)
                if wrapped is not None:
                    self._wrapping.setdefault(wrapped, []).append((target, statement))
        found = []
        for target, statement in self._wrapping.get(expr, ()):
            if self.a.is_inside(statement, scope):
                self.loader_aliases[target] = expr
                found.append(target)
        return found

    def stored_on_self(self, name: str, fn: cst.FunctionDef) -> List[str]:
        found = []
        for target, statement in self.c.assignments:
            if not target.startswith("self.") or self.a.scope_of(statement) is not fn:
                continue
            small = statement.body[0]
            value = getattr(small, "value", None)
            if isinstance(value, cst.Name) and value.value == name:
                found.append(target)
            elif isinstance(small, cst.Assign) and isinstance(value, cst.Tuple):
                # `self.model, self.data_loader = model, data_loader`: element by element.
                for assign_target in small.targets:
                    names = assign_target.target
                    if isinstance(names, cst.Tuple) and len(names.elements) == len(value.elements):
                        found += [
                            target for element, item in zip(names.elements, value.elements)
                            if code_of(element.value) == target and isinstance(item.value, cst.Name) and item.value.value == name
                        ]
        return found

    def return_positions(self, fn: cst.FunctionDef, expr: str) -> List[Tuple[int, ...]]:
        """Where `fn` returns `expr`: a path into nested tuples (`return (train, val), w` -> (0, 0))."""
        positions: List[Tuple[int, ...]] = []
        for ret in descendants(fn, cst.Return):
            if ret.value is not None:
                positions += _paths_to(ret.value, expr, ())
        return positions

    def returned_uses(self, fn: cst.FunctionDef, path: Tuple[int, ...]) -> List[Tuple[cst.For, str]]:
        found: List[Tuple[cst.For, str]] = []
        for call in self.c.calls:
            if self.callee(call) is not fn:
                continue
            statement = self.a.statement_of(call)
            if not isinstance(statement, cst.SimpleStatementLine) or not isinstance(statement.body[0], cst.Assign):
                continue
            assign = statement.body[0]
            if assign.value is not call:
                continue
            name = self.unpacked_name(assign.targets[0].target, path, statement)
            if name is not None:
                found += self.uses(name, self.a.scope_of(call), depth=1)
        return found

    def unpacked_name(self, target: cst.BaseExpression, path: Tuple[int, ...], statement: Statement) -> Optional[str]:
        """The name the value at `path` ends up in: `(train, val), w = f()`, or `loaders, w = f()`
        followed by `train, val = loaders` in the same function."""
        if not path:
            return code_of(target) if isinstance(target, (cst.Name, cst.Attribute)) else None
        if isinstance(target, (cst.Tuple, cst.List)):
            if path[0] >= len(target.elements):
                return None
            return self.unpacked_name(target.elements[path[0]].value, path[1:], statement)
        if not isinstance(target, cst.Name):
            return None
        scope = self.a.scope_of(statement)
        for name, later in self.c.assignments:
            small = later.body[0]
            if (
                later is not statement and self.a.scope_of(later) is scope and self.a.comes_after(later, statement)
                and isinstance(small, cst.Assign) and isinstance(small.value, cst.Name) and small.value.value == target.value
            ):
                return self.unpacked_name(small.targets[0].target, path, later)
        return None


# How many hand-overs a loader is followed through: returned by a helper, passed to train(), to a
# Trainer's __init__, stored on self and looped over in a method is four.
MAX_DEPTH = 4


def _paths_to_node(value: Optional[cst.BaseExpression], node: cst.CSTNode, prefix: Tuple[int, ...]) -> List[Tuple[int, ...]]:
    if value is node:
        return [prefix]
    if isinstance(value, cst.Tuple):
        return [p for i, e in enumerate(value.elements) for p in _paths_to_node(e.value, node, (*prefix, i))]
    return []


def _paths_to(value: cst.BaseExpression, expr: str, prefix: Tuple[int, ...]) -> List[Tuple[int, ...]]:
    if isinstance(value, cst.Tuple):
        paths: List[Tuple[int, ...]] = []
        for index, element in enumerate(value.elements):
            paths += _paths_to(element.value, expr, (*prefix, index))
        return paths
    return [prefix] if code_of(value) == expr else []


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
