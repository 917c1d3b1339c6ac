"""The model after it is wrapped: attribute uses that must unwrap, and reassignments of its name."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.dataflow.core import FlowBase, Model, ModelUse, Statement, code_of
from migrator.tree import descendants


class ModelFlow(FlowBase):
    """Uses of a model once it is wrapped in DistributedDataParallel."""

    def model_uses(self, model: Model, wrap_point: Statement) -> Tuple[ModelUse, ...]:
        """Attribute accesses on `model` made when it is already wrapped."""
        uses: Dict[cst.CSTNode, ModelUse] = {}
        for spelling, scope, after in self.wrapped_scopes(model, wrap_point):
            for node in self.attributes_on(spelling):
                if node in uses or not self.a.is_inside(node, scope):
                    continue
                if after is not None and not self.a.comes_after(node, after):
                    continue
                uses[node] = ModelUse(node, model)
        return tuple(uses.values())

    def attributes_on(self, spelling: str) -> List[cst.Attribute]:
        """Every `<spelling>.attr` in the file, from one index of attribute receivers built on first use."""
        if self._attributes_by_receiver is None:
            index: Dict[str, List[cst.Attribute]] = {}
            for node in self.c.attributes:
                index.setdefault(code_of(node.value), []).append(node)
            self._attributes_by_receiver = index
        return self._attributes_by_receiver.get(spelling, [])

    def bare_unwraps(self, uses: Tuple[ModelUse, ...]) -> Tuple[Tuple[cst.Name, Model], ...]:
        """`raw = model._orig_mod if compiled else model`: the bare branch must unwrap too."""
        found = []
        for use in uses:
            parent = self.a.parent(use.node)
            if not isinstance(parent, cst.IfExp) or use.node not in (parent.body, parent.orelse):
                continue
            other = parent.orelse if parent.body is use.node else parent.body
            if isinstance(other, cst.Name) and other.value == code_of(use.node.value):
                found.append((other, use.model))
        return tuple(found)

    def returned_models(self, model: Model, wrap_point: Statement) -> List[cst.Name]:
        """`return losses, model` at the end of the entry function: the caller gets the model back after
        the process group is gone, and uses it as a plain module (`torch.save(model.state_dict())`)."""
        fn = self.entry_function
        if fn is None or self.a.scope_of(wrap_point) is not fn or "." in model.expr:
            return []
        found = []
        for ret in descendants(fn, cst.Return):
            if self.a.enclosing_function(ret) is not fn or not self.a.comes_after(ret, wrap_point):
                continue
            value = ret.value
            elements = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
            found += [e for e in elements if isinstance(e, cst.Name) and e.value == model.expr]
        return found

    def reassignments(self, model: Model) -> Tuple[Statement, ...]:
        """`model = torch.load(f)` after training: the name must stay a DDP wrapper from there on."""
        if model.wrap_after is None:
            return ()
        owner = self.a.scope_of(model.wrap_after)
        found = []
        for target, statement in self.c.assignments:
            if target != model.expr or self.a.scope_of(statement) is not owner:
                continue
            if statement is model.wrap_after or not self.a.comes_after(statement, model.wrap_after):
                continue
            value = getattr(statement.body[0], "value", None)
            if isinstance(value, cst.Call) and self.c.resolve(value.func) in N.DDP:
                continue
            if _returns_itself(value, model.expr):
                continue  # `model = model.train()`: nn.Module methods return the (wrapped) module itself
            found.append(statement)
        return tuple(found)

    def wrapped_scopes(self, model: Model, wrap_point: Statement) -> List[Tuple[str, cst.CSTNode, Optional[Statement]]]:
        """(spelling, scope where it is the wrapped model, statement it is wrapped after)."""
        owner = self.a.scope_of(wrap_point)
        if model.expr.startswith("self."):
            cls = self.a.enclosing_class(wrap_point)
            return [(model.expr, cls, wrap_point)] if cls is not None else []
        scopes: List[Tuple[str, cst.CSTNode, Optional[Statement]]] = [(model.expr, owner, wrap_point)]
        for call in self.calls_within(owner):
            fn = self.callee(call)
            if fn is None or fn is owner:
                continue
            param = self.param_for(fn, call, model.expr)
            if param is not None and self.a.comes_after(call, wrap_point):
                scopes.append((param, fn, None))
                scopes += self.kept_by_instance(fn, param)
        if owner is self.a.module:
            # A flat script's global model, used by its helper functions (called after the wrap).
            scopes += [(model.expr, fn, None) for fn in self.c.functions if model.expr not in self.c.bound.get(fn, ())]
        elif isinstance(owner, cst.FunctionDef) and owner is not self.entry_function:
            scopes += self.returned_to_callers(model, owner, wrap_point)
        return scopes

    def kept_by_instance(self, fn: cst.FunctionDef, param: str) -> List[Tuple[str, cst.CSTNode, Optional[Statement]]]:
        """`Evaluator(model)` whose `__init__` keeps `self.model = model`: every method of the class
        sees the wrapper under `self.model` (`self.model.generate(x)` must go through `.module`).
        Only an attribute the class assigns once: one rebound elsewhere may hold something else."""
        cls = self.a.enclosing_class(fn)
        if cls is None or fn.name.value != "__init__":
            return []
        kept = []
        for target, statement in self.c.assignments:
            if not target.startswith("self.") or self.a.scope_of(statement) is not fn:
                continue
            small = statement.body[0]
            if isinstance(small, cst.Assign) and N.is_name(small.value, param):
                kept.append(target)
        bound = [t for t, s in self.c.assignments if t in kept and self.a.enclosing_class(s) is cls]
        return [(attr, cls, None) for attr in kept if bound.count(attr) == 1]

    def returned_to_callers(self, model: Model, owner: cst.FunctionDef, wrap_point: Statement) -> List[Tuple[str, cst.CSTNode, Optional[Statement]]]:
        """`model, model_fine, optimizer = create_models(args)`: a builder returns the wrapped model,
        and the caller (and the functions it hands the model to) use the DDP wrapper under that name.
        (The entry function's own returns are `returned_models`: the caller gets the bare module.)"""
        positions = self.returned_positions(owner, model.expr, wrap_point)
        if not positions:
            return []
        scopes: List[Tuple[str, cst.CSTNode, Optional[Statement]]] = []
        for call in self.c.calls:
            if self.callee(call) is not owner:
                continue
            statement = self.a.statement_of(call)
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            if not isinstance(small, cst.Assign) or small.value is not call or len(small.targets) != 1:
                continue
            target = small.targets[0].target
            for position in positions:
                if position is None and not isinstance(target, (cst.Tuple, cst.List)):
                    name = code_of(target)
                elif position is not None and isinstance(target, (cst.Tuple, cst.List)) and position < len(target.elements):
                    name = code_of(target.elements[position].value)
                else:
                    continue
                caller = self.a.scope_of(statement)
                scopes.append((name, caller, statement))
                for inner in self.calls_within(caller):
                    fn = self.callee(inner)
                    param = self.param_for(fn, inner, name) if fn is not None and fn is not caller else None
                    if param is not None and self.a.comes_after(inner, statement):
                        scopes.append((param, fn, None))
        return scopes

    def returned_positions(self, fn: cst.FunctionDef, expr: str, wrap_point: Statement) -> List[Optional[int]]:
        """Where `fn` returns `expr` after the wrap: None for `return model`, i for a tuple's element i."""
        positions: List[Optional[int]] = []
        for ret in descendants(fn, cst.Return):
            if self.a.enclosing_function(ret) is not fn or not self.a.comes_after(ret, wrap_point) or ret.value is None:
                continue
            if isinstance(ret.value, cst.Tuple):
                positions += [i for i, e in enumerate(ret.value.elements) if code_of(e.value) == expr]
            elif code_of(ret.value) == expr:
                positions.append(None)
        return positions


# nn.Module methods that return the module they are called on.
_RETURNS_SELF = frozenset(
    {"train", "eval", "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "apply", "requires_grad_", "zero_grad"}
)


def _returns_itself(value: Optional[cst.BaseExpression], expr: str) -> bool:
    """`model.train()`, `model.to(device).float()`: a chain of self-returning calls on `expr`."""
    node = value
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _RETURNS_SELF:
        node = node.func.value
    return node is not value and node is not None and code_of(node) == expr
