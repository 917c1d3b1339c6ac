"""DDP031 in a module a migrated script imports: a training loop over a loader gets `set_epoch` in
reach of its epoch number (or the sampler's own count of passes), and a loader started again
when it runs dry moves its epoch on."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from migrator.graph.bindings import dotted_name
from migrator.project.rules import MODULE_SET_EPOCH
from migrator.project.shapes import iterated_loader, source_of, walk, wrappers
from migrator.project.planner import Planner, walk_calls


class Epochs(Planner):
    """DDP031: the epoch of the loaders the module's training loops walk over."""

    def _set_epoch(self, loop: cst.For) -> None:
        function = self._enclosing(loop, cst.FunctionDef)
        loader = iterated_loader(loop.iter, wrappers(function or self.module))
        # What a training loop walks over is its data, whatever it is called: the set_epoch below
        # is guarded by the sampler's type, so a list or an iterator of the caller's runs as before.
        passes = loader is not None and _one_pass(loop, function, loader)
        if loader is None or not (passes or self._trains(loop)):
            return
        scope = function or self.module
        if any(isinstance(n, cst.Attribute) and n.attr.value == "set_epoch" for n in walk(scope)):
            return  # the epoch is set already (maybe by the per-file engine, for its own loaders)
        # The epoch number where it is known; else the sampler's own count of passes moves on by one
        # (each run of this loop is one pass over the loader: all ranks count alike).
        epoch = self._epoch_in_reach(loop, function) or f"{loader}.sampler.epoch + 1"
        statement = cst.parse_statement(
            f"if isinstance(getattr({loader}, \"sampler\", None), {self.names.sampler}):  # a new order each epoch\n"
            f"    {loader}.sampler.set_epoch({epoch})\n")
        self.plan.insert_before(loop, [statement])
        self.names.need(self.plan, sampler=True)
        where = "each pass over the wrapped loader" if passes else "before the training loop"
        self._change(MODULE_SET_EPOCH.code, loop, f"`{loader}.sampler.set_epoch({epoch})` {where}")

    def _restart_epoch(self, handler: cst.ExceptHandler) -> None:
        """`except StopIteration: data_iter = iter(train_loader)`: a loop over steps that starts the
        loader again when it runs out. Each restart is a new pass: the sampler's epoch moves on."""
        if not self._ends_iteration(handler):
            return
        function = self._enclosing(handler, cst.FunctionDef)
        scope = function or self.module
        if any(isinstance(n, cst.Attribute) and n.attr.value == "set_epoch" for n in walk(scope)):
            return
        # `except StopIteration:` with the restart in it, or under an `if` there (one of several loaders)
        for statement in (n for n in walk(handler.body) if isinstance(n, cst.SimpleStatementLine)):
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            value = getattr(small, "value", None)
            if not (isinstance(small, cst.Assign) and isinstance(value, cst.Call) and dotted_name(value.func) == "iter"
                    and len(value.args) == 1 and not any(True for _ in walk_calls(value.args[0].value))):
                continue  # `iter(loader)`, `iter(self.loaders[i])`: no call to run twice
            loader = source_of(value.args[0].value)
            epoch = cst.parse_statement(
                f"if isinstance(getattr({loader}, \"sampler\", None), {self.names.sampler}):  # a new order each pass\n"
                f"    {loader}.sampler.set_epoch({loader}.sampler.epoch + 1)\n")
            self.plan.insert_before(statement, [epoch])
            self.names.need(self.plan, sampler=True)
            self._change(MODULE_SET_EPOCH.code, statement, f"`{loader}.sampler.set_epoch(...)` each time the loader starts again")

    def _ends_iteration(self, handler: cst.ExceptHandler) -> bool:
        """`except StopIteration:`, or a bare `except:` / `except Exception:` around a `next(it)`:
        the handler runs when the iterator runs dry (StarGAN's solver catches everything there)."""
        caught = dotted_name(handler.type) if handler.type is not None else None
        if caught == "StopIteration":
            return True
        attempt = self.parents.get(handler)
        return caught in (None, "Exception", "BaseException") and isinstance(attempt, cst.Try) and any(
            isinstance(n, cst.Call) and dotted_name(n.func) == "next" for n in walk(attempt.body))

    def _epoch_in_reach(self, loop: cst.For, function: Optional[cst.FunctionDef]) -> Optional[str]:
        """The variable of a counting loop around `loop` (`for epoch in range(n)`: one pass of the
        data each), or the epoch the scripts pass in (`trainer.train_epoch(epoch)`)."""
        node = self.parents.get(loop)
        while node is not None and node is not function:
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and _counts(node.iter):
                return node.target.value
            node = self.parents.get(node)
        if function is not None and self.role.epochs is not None:
            cls, method = self._top_level_scope(function.body)
            for param in function.params.params:
                if self.role.epochs.holds(method, cls, param.name.value):
                    return param.name.value
        return None


def _one_pass(loop: cst.For, function: Optional[cst.FunctionDef], loader: str) -> bool:
    """`def __iter__(self): for data in self.dataloader: yield data`: a class that wraps a loader,
    each pass over it one pass over the loader (one epoch of the loop that iterates it)."""
    return (function is not None and function.name.value == "__iter__" and loader.startswith("self.")
            and any(isinstance(node, cst.Yield) for node in walk(loop.body)))


def _counts(iterated: cst.BaseExpression) -> bool:
    """`range(...)`, `trange(...)`, `tqdm(range(...))`: a loop that counts (migrator.graph.values' twin)."""
    while isinstance(iterated, cst.Call):
        name = (dotted_name(iterated.func) or "").split(".")[-1]
        if name in ("range", "trange"):
            return True
        if name != "tqdm" or not iterated.args:
            return False
        iterated = iterated.args[0].value
    return False
