"""The model after it is wrapped: attribute uses that must unwrap, and reassignments of its name.

The wrapped model is a value of the file's value flow (migrator.graph.flow): the bindings of the
model in the scope it is wrapped in, from the wrap on, and every binding it reaches from there
(handed to a helper, kept as `self.model` by an instance it is given to, returned to a caller).
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.dataflow.core import FlowBase, Model, ModelUse, Statement
from migrator.graph.bindings import Binding, dotted_name
from migrator.graph.flow import MODEL, RETURNS_SELF, Value
from migrator.tree import descendants


class ModelFlow(FlowBase):
    """Uses of a model once it is wrapped in DistributedDataParallel."""

    def wrapped(self, model: Model) -> Value:
        """The model's value from its wrap on (followed out of the entry function it is built in
        by no `return`: the entry's caller gets it back after the process group is gone)."""
        found = self._wrapped.get(id(model))
        if found is None:
            entry = self.entry_function
            seeds = self.model_bindings(model)
            found = self.values.follow(
                seeds, MODEL, since=model.wrap_after,
                keep=lambda edge: not (edge.kind == "return" and entry is not None and edge.source.scope is entry))
            self._wrapped[id(model)] = found
        return found

    def model_uses(self, model: Model) -> Tuple[ModelUse, ...]:
        """Attribute accesses on `model` made where it may already be wrapped (a name read where
        another model, wrapped too, is what it holds is that model's use): `maybe` where the name
        may hold a plain module too, one of the bindings it reads not surely holding a wrapped
        model (ValueFlow.surely)."""
        value = self.wrapped(model)
        others = [self.wrapped(other) for other in self._wrapped_models() if other is not model]
        sure = self.surely_wrapped()
        uses: Dict[cst.CSTNode, ModelUse] = {}
        for node in value.references(every=False):
            parent = self.a.parent(node)
            if not isinstance(parent, cst.Attribute) or parent.value is not node or parent in uses:
                continue
            if not value.holds(node, every=True) and any(other.holds(node, every=True) for other in others):
                continue
            uses[parent] = ModelUse(parent, model, maybe=not all(b in sure for b in value.read(node)))
        return tuple(sorted(uses.values(), key=lambda use: self.c.order.get(use.node, 0)))

    def surely_wrapped(self) -> FrozenSet[Binding]:
        """The bindings that hold a wrapped model (one of the models, whichever) on every way in."""
        if self._surely is None:
            self._surely = self.values.surely(self.wrapped(m) for m in self._wrapped_models())
        return self._surely

    def _wrapped_models(self) -> List[Model]:
        return [m for m in self.models if not m.already_ddp and m.wrap_after is not None]

    def bare_unwraps(self, uses: Tuple[ModelUse, ...]) -> Tuple[Tuple[cst.Name, Model], ...]:
        """`raw = model._orig_mod if compiled else model`: the bare branch must unwrap too."""
        found = []
        for use in uses:
            parent = self.a.parent(use.node)
            if not isinstance(parent, cst.IfExp) or use.node not in (parent.body, parent.orelse):
                continue
            other = parent.orelse if parent.body is use.node else parent.body
            if isinstance(other, cst.Name) and self.wrapped(use.model).holds(other):
                found.append((other, use.model))
        return tuple(found)

    def returned_models(self, model: Model) -> List[cst.Name]:
        """`return losses, model` at the end of the entry function: the caller gets the model back after
        the process group is gone, and uses it as a plain module (`torch.save(model.state_dict())`)."""
        fn = self.entry_function
        if fn is None or self.a.scope_of(model.wrap_after) is not fn or "." in model.expr:
            return []
        value = self.wrapped(model)
        found = []
        for ret in descendants(fn, cst.Return):
            if self.a.enclosing_function(ret) is not fn or ret.value is None:
                continue
            elements = [e.value for e in ret.value.elements] if isinstance(ret.value, cst.Tuple) else [ret.value]
            found += [e for e in elements if isinstance(e, cst.Name) and value.holds(e)]
        return found

    def reassignments(self, model: Model) -> Tuple[Statement, ...]:
        """`model = torch.load(f)` after training: the name must stay a DDP wrapper from there on."""
        if model.wrap_after is None:
            return ()
        owner = self.a.scope_of(model.wrap_after)
        found = []
        for binding in self.model_bindings(model):
            statement = binding.statement
            if binding.kind not in ("assignment", "attribute", "unpacking") or statement is model.wrap_after:
                continue
            if self.a.scope_of(statement) is not owner:
                continue  # bound elsewhere (`self.model` in another method, the global in a helper: _reloads)
            if not isinstance(statement, cst.SimpleStatementLine) or not self.a.comes_after(statement, model.wrap_after):
                continue
            value = binding.value
            if isinstance(value, cst.Call) and self.c.resolve(value.func) in N.DDP:
                continue
            if _returns_itself(value, binding):
                continue  # `model = model.train()`: nn.Module methods return the (wrapped) module itself
            if self._hands_back(value, model):
                continue  # `model = train_model(model, ...)`, which returns the model it is handed
            if statement not in found:
                found.append(statement)
        found += [s for s in self._reloads(model, owner) if s not in found]
        return tuple(found)

    def _hands_back(self, value: Optional[cst.BaseExpression], model: Model) -> bool:
        """A call of this file's function, handed the wrapped model, whose every return gives back
        what it was handed (the transfer-learning tutorial's `train_model(model, ...)`: `return model`):
        the name still holds the wrapper."""
        target = self.callee(value) if isinstance(value, cst.Call) else None
        if target is None:
            return False
        wrapped = self.wrapped(model)
        if not any(wrapped.holds(arg.value) for arg in value.args):  # type: ignore[union-attr]
            return False
        returns = [r for r in descendants(target, cst.Return) if self.a.enclosing_function(r) is target]
        return bool(returns) and all(isinstance(r.value, cst.Name) and wrapped.holds(r.value) for r in returns)

    def _reloads(self, model: Model, owner) -> List[Statement]:
        """`model_load(path)` after the wrap, a function of the file whose `global model` rebinds
        the model (awd-lstm's resume helper, called again for the best checkpoint): the model is
        reloaded there too."""
        if owner is not self.a.module or "." in model.expr:
            return []
        helpers = {self.a.enclosing_function(b.statement) for b in self.model_bindings(model)
                   if b.scope is owner and b.kind in ("assignment", "unpacking")} - {None}
        found = []
        for call in self.calls_within(owner) if helpers else ():
            statement = self.a.statement_of(call)
            if (self.callee(call) in helpers and self.a.scope_of(call) is owner and isinstance(statement, cst.SimpleStatementLine)
                    and self.a.comes_after(statement, model.wrap_after)):
                found.append(statement)
        return found

    def holds_wrapped(self, model: Model, node: Optional[cst.CSTNode]) -> bool:
        return node is not None and self.wrapped(model).holds(node)


def _returns_itself(value: Optional[cst.BaseExpression], binding) -> bool:
    """`model.train()`, `model.to(device).float()`: a chain of self-returning calls on the model itself."""
    node = value
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in RETURNS_SELF:
        node = node.func.value
    return node is not value and node is not None and dotted_name(node) == binding.name
