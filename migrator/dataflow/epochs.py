"""Epoch loops: which loop drives a loader's epochs, where its set_epoch hook goes, gradient accumulation."""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from migrator import names as N
from migrator.dataflow.core import EpochHook, FlowBase, _iterated, code_of
from migrator.graph.flow import Value
from migrator.tree import descendants


class EpochFlow(FlowBase):
    """Epoch loops and the `set_epoch` hooks they need."""

    def epoch_hooks(self, loop: cst.CSTNode, spelled: str, loader: Optional[Value] = None) -> List[EpochHook]:
        """Where the epoch loop driving `loop` is, and how the loader is spelled there. A function
        handed several loaders (`train(data_loader=validation_loader)`, then `train(data_loader=
        train_loader)`) is driven, for this loader, by the calls whose argument holds it."""
        rebuilt = self.rebuilt_on_exhaustion(loop)
        if rebuilt is not None:
            return rebuilt
        enclosing = self.enclosing_epoch_loop(loop)
        if enclosing is not None:
            # Spelled as the loop spells it: the epoch loop is in the same function.
            return [EpochHook(enclosing, spelled, _loop_variable(enclosing))]
        counted = self.counted_while_hook(loop, spelled)
        if counted is not None:
            return [counted]
        fn = self.a.enclosing_function(loop)
        if fn is None:
            return []
        hooks, holding = [], []
        inner = spelled  # the loader as this function spells it (often a parameter)
        for call in self.c.calls:
            if self.callee(call) is not fn:
                continue
            outer = self.enclosing_epoch_loop(call)
            if outer is None:
                continue
            passed = None if inner.startswith("self.") else next(
                (value for param, value in self.values.arguments(fn, call) if param.name == inner), None)
            spelled_there = self.attribute_at(call, inner) if inner.startswith("self.") else (
                code_of(passed) if passed is not None else None)
            if spelled_there is None and inner in self.c.bound.get(self.a.module, ()):
                spelled_there = inner  # a module global, as in flat scripts with helpers
            if spelled_there is not None:
                hooks.append(EpochHook(outer, spelled_there, _loop_variable(outer)))
                if loader is not None and passed is not None and loader.holds(passed):
                    holding.append(hooks[-1])
        return holding or hooks

    def rebuilt_on_exhaustion(self, use: cst.CSTNode) -> Optional[List[EpochHook]]:
        """Step loops that restart the loader when it runs dry:
        `try: batch = next(it)` / `except StopIteration: it = iter(loader); batch = next(it)`.

        Each restart is a new pass over the data: the sampler advances its own epoch right before
        it (`sampler.set_epoch(sampler.epoch + 1)`). The first `iter(loader)`, before the loop, needs
        nothing (epoch 0). None when the loader is not restarted this way.
        """
        if not (isinstance(use, cst.Call) and N.is_name(use.func, "iter")):
            return None
        fn = self.a.enclosing_function(use)
        handlers = [
            h for h in descendants(fn or self.a.module, cst.ExceptHandler)
            if h.type is not None and "StopIteration" in code_of(h.type) and self.a.enclosing_function(h) is fn
        ]
        iterated = _iterated(use)
        for handler in handlers:
            restarts = [c for c in descendants(handler.body, cst.Call) if N.is_name(c.func, "iter") and _iterated(c) == iterated]
            if not restarts:
                continue
            if use not in restarts:
                return []  # the first iter(), before the loop: the restart carries the hook
            statement = self.a.statement_of(use)
            return [EpochHook(handler, iterated or "", None, before=statement)]
        return None

    def counted_while_hook(self, node: cst.CSTNode, spelled: str) -> Optional[EpochHook]:
        """`while True: cur_epochs += 1; for batch in loader: ...` (DeepLab-style iteration loops):
        the counter the loop keeps is its epoch, and set_epoch goes right after it is advanced;
        without one, each turn of the while loop is a pass and the sampler counts it."""
        fn = self.a.enclosing_function(node)
        for anc in self.a.ancestors(node):
            if anc is fn or isinstance(anc, cst.For):
                return None
            if isinstance(anc, cst.While) and isinstance(anc.body, cst.IndentedBlock):
                for statement in anc.body.body:
                    if any(anc2 is statement for anc2 in self.a.ancestors(node)):
                        break  # counters after the loop over the loader come too late
                    counter = _counter_increment(statement)
                    if counter is not None:
                        return EpochHook(anc, spelled, counter, after=statement)  # type: ignore[arg-type]
                if isinstance(node, cst.For) and self.a.parent(node) is anc.body:
                    # `while i <= train_iters: for batch in loader: ...`: each turn is one pass over the
                    # data, with no counter of its own: the sampler advances its own epoch.
                    return EpochHook(anc, spelled, None)
                return None
        return None

    @staticmethod
    def attribute_at(call: cst.Call, attribute: str) -> str:
        """`self.train_loader` as the caller spells it: itself in the class, `trainer.train_loader` outside."""
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value != "self":
            return func.value.value + attribute[len("self") :]
        return attribute

    def enclosing_epoch_loop(self, node: cst.CSTNode) -> Optional[cst.For]:
        fn = self.a.enclosing_function(node)
        for anc in self.a.ancestors(node):
            if anc is fn:
                return None
            if isinstance(anc, cst.For) and _loop_variable(anc) and _is_range_like(anc):
                return anc
        return None

    def accumulation_steps(self) -> List[cst.CSTNode]:
        """`if (step + 1) % accum == 0: optimizer.step()` inside a training loop."""
        found = []
        for call in self.c.calls:
            if not self.steps_optimizer(call):  # `optimizer.step()`, `scaler.step(optimizer)`
                continue
            condition = next((anc for anc in self.a.ancestors(call) if isinstance(anc, cst.If)), None)
            if condition is not None and _is_modulo_test(condition.test) and condition not in found:
                if any(isinstance(anc, (cst.For, cst.While)) for anc in self.a.ancestors(condition)) and not self._backward_in(condition):
                    found.append(condition)
        return found

    def _backward_in(self, condition: cst.If) -> bool:
        """`if (i + 1) % n_critic == 0:` around the backward pass as well as the step: the whole
        update runs every n steps (a GAN's generator), no gradient is accumulated across steps."""
        return any(
            isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" and self.a.is_inside(call, condition)
            for call in self.c.calls
        )


def _counter_increment(statement: cst.CSTNode) -> Optional[str]:
    """`cur_epochs += 1` (a name whose spelling says it counts epochs) -> "cur_epochs"."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if (
        isinstance(small, cst.AugAssign)
        and isinstance(small.operator, cst.AddAssign)
        and isinstance(small.target, cst.Name)
        and isinstance(small.value, cst.Integer)
        and "epoch" in small.target.value.lower()
    ):
        return small.target.value
    return None


def _is_range_like(loop: cst.For) -> bool:
    """An epoch loop: `for epoch in range(...)`, `for epoch in tqdm(range(...))`, `for epoch in epochs`."""
    ranged = any(N.is_name(call.func, "range") for call in descendants(loop.iter, cst.Call))
    return ranged or "epoch" in code_of(loop.target).lower()


def _is_modulo_test(test: cst.BaseExpression) -> bool:
    """`if (step + 1) % accumulation_steps == 0:`"""
    return any(isinstance(op.operator, cst.Modulo) for op in descendants(test, cst.BinaryOperation))


def _loop_variable(loop: cst.For) -> str:
    target = loop.target
    if isinstance(target, cst.Name):
        return target.value
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
        return code_of(target)  # `for self.epoch in range(...)`: the trainer keeps its epoch
    if isinstance(target, cst.Tuple) and target.elements and isinstance(target.elements[0].value, cst.Name):
        return target.elements[0].value.value  # type: ignore[attr-defined]
    return ""
