"""Backward passes DDP cannot synchronise: a gradient penalty alone (WGAN-GP trained as an update
of its own), and a second backward through a graph kept for it (`retain_graph=True`).

`grad = torch.autograd.grad(outputs=D(x_hat), inputs=x_hat, create_graph=True)[0]`, a penalty
computed from `grad` only, and `penalty.backward()`: the parameters that do not shape the gradient
with respect to the input (the last layer's bias) get no gradient in that pass. Under DDP the
reduction then never completes ("Expected to have finished reduction in the prior iteration"),
with `find_unused_parameters=True` too. A penalty added to a loss computed from the model's
outputs (one backward pass for both, StarGAN's `d_loss = d_loss_real + ... + lambda_gp * d_loss_gp`)
trains fine.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from migrator.graph.bindings import dotted_name
from migrator.dataflow.core import FlowBase, code_of
from migrator.tree import descendants

_FORWARD, _GRADIENT = "forward", "gradient"  # what a value was computed from


class PenaltyFlow(FlowBase):
    def penalty_backwards(self) -> Tuple[cst.Call, ...]:
        """`loss.backward()` calls whose loss comes from a create_graph gradient and from no output
        of a trained model, in the functions that take such a gradient."""
        functions = {self.a.enclosing_function(call) for call in self.c.calls if _double_backward(call)}
        found: List[cst.Call] = []
        for function in functions:
            if function is not None:
                found += self._in_function(function)
        return tuple(sorted(found, key=lambda call: self.c.order.get(call, 0)))

    def retained_backwards(self) -> Tuple[cst.Call, ...]:
        """`loss.backward(retain_graph=True)`: the graph is kept for a second backward through the
        same forward. DDP averages the gradients once per forward, in the first: what the second
        adds stays each rank's own, and the replicas drift apart with no error."""
        return tuple(call for call in self.c.calls if isinstance(call.func, cst.Attribute)
                     and call.func.attr.value == "backward" and any(
            arg.keyword is not None and arg.keyword.value == "retain_graph" and code_of(arg.value) not in ("False", "None")
            for arg in call.args))

    def _in_function(self, function: cst.FunctionDef) -> List[cst.Call]:
        events = [node for node in (*self.c.assign_nodes, *self.c.calls) if self.a.enclosing_function(node) is function]
        events.sort(key=lambda node: self.c.order.get(node, 0))
        sources: Dict[str, FrozenSet[str]] = {}
        found = []
        for node in events:
            if isinstance(node, cst.Assign):
                made = self._made_from(node.value, sources)
                for target in node.targets:
                    for name in _bound(target.target):
                        sources[name] = made
            elif _backward_of(node) is not None:
                made = sources.get(_backward_of(node) or "", frozenset())
                if _GRADIENT in made and _FORWARD not in made:
                    found.append(node)
        return found

    def _made_from(self, value: cst.BaseExpression, sources: Dict[str, FrozenSet[str]]) -> FrozenSet[str]:
        made = set()
        gradients = [call for call in descendants(value, cst.Call) if _double_backward(call)]
        if gradients:
            made.add(_GRADIENT)  # a gradient: what its outputs were computed from is not its own
        for node in descendants(value, (cst.Call, cst.Name, cst.Attribute)):
            if any(node is g or self.a.is_inside(node, g) for g in gradients):
                continue
            if isinstance(node, cst.Call) and self.is_model(node.func):
                made.add(_FORWARD)
            elif isinstance(node, (cst.Name, cst.Attribute)):
                made |= sources.get(code_of(node), frozenset())
        return frozenset(made)


def _double_backward(call: cst.Call) -> bool:
    """`torch.autograd.grad(..., create_graph=True)` (`autograd.grad`, `grad` as imported aside)."""
    if not (dotted_name(call.func) or "").endswith("autograd.grad"):
        return False
    return any(arg.keyword is not None and arg.keyword.value == "create_graph" and code_of(arg.value) == "True"
               for arg in call.args)


def _backward_of(call: cst.Call) -> Optional[str]:
    """`loss.backward()` -> "loss"."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "backward" and isinstance(func.value, (cst.Name, cst.Attribute)):
        return code_of(func.value)
    return None


def _bound(target: cst.BaseExpression) -> List[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _bound(element.value)]
    return [code_of(target)] if isinstance(target, (cst.Name, cst.Attribute)) else []
