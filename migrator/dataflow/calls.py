"""The file's own call graph, and the one answer to "does running this train?".

Which function of this file a call runs (`train(...)`, `Trainer(...)`'s `__init__`,
`self.train_epoch(...)`, `trainer.fit()` on an instance built in the same scope), and whether
running a loop, a function or a class reaches training: a `backward()`, an optimizer's `step()`,
a call that hands a model to a project function that trains it (migrator.analysis.project_training),
or a call of this file's code that does one of these. Built once per file from the collected
sites; the flows, the model analysis (where training starts) and spawn (does the worker train)
all read it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import Binding
from migrator.graph.flow import OPTIMIZER, Edge, Value
from migrator.tree import descendants


class CallGraph:
    def __init__(self, a: Any) -> None:
        self.a = a
        self.c = a.c
        top = a.module
        self.functions: Dict[str, cst.FunctionDef] = {
            f.name.value: f for f in self.c.functions if a.parent(f) is top
        }
        self.classes: Dict[str, cst.ClassDef] = {c.name.value: c for c in self.c.classes if a.parent(c) is top}
        self._optimizers: Optional[Value] = None
        self._trains: Dict[cst.CSTNode, bool] = {}
        self._callees: Dict[cst.Call, Optional[cst.FunctionDef]] = {}
        self._call_trains: Dict[cst.Call, bool] = {}

    def steps_optimizer(self, call: cst.Call) -> bool:
        """`optimizer.step()`, or `scaler.step(optimizer)`, on an optimizer the file builds, whatever
        it is called where it steps (the value flow from the names its builders' calls bind)."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
            return False
        if self._optimizers is None:
            built = [call for call, _ in self.c.optimizer_calls] + list(self.c.optimizer_helpers)
            seeds = [binding for call in built for binding in self.a.values.receivers(call)]
            self._optimizers = self.a.values.follow(seeds, OPTIMIZER, every=False)
        return self._optimizers.holds(func.value) or any(self._optimizers.holds(arg.value) for arg in call.args)

    # -- which function a call runs ---------------------------------------------------------
    def method_of(self, cls: Optional[cst.ClassDef], name: str) -> Optional[cst.FunctionDef]:
        if cls is None:
            return None
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                return statement
        return None

    def callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function of this file a call runs: `train(...)` or `self.train_epoch(...)`."""
        if call not in self._callees:  # asked of every call by the flow, the saves and the epochs
            self._callees[call] = self._callee(call)
        return self._callees[call]

    def _callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        func = call.func
        if isinstance(func, cst.Name):
            read = self.c.refers.get(func)
            if read:  # the def or class the name reads, wherever it is defined (in an `if` block too)
                # ... or an instance of this file's class, called: `scheduler(optimizer, i, epoch)`
                return self._defined(read) or self.method_of(self.instance_class(func), "__call__")
            if func.value in self.classes:
                return self.method_of(self.classes[func.value], "__init__")
            return self.functions.get(func.value)
        if isinstance(func, cst.Attribute) and N.is_name(func.value, "self"):
            return self.method_of(self.a.enclosing_class(call), func.attr.value)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            # `trainer.training(epoch)`, where the `trainer` it reads is `Trainer(args)` of this file.
            cls = self.instance_class(func.value)
            return self.method_of(cls, func.attr.value) if cls is not None else None
        return None

    def _defined(self, read) -> Optional[cst.FunctionDef]:
        """The def (or a class's __init__) that a call of a name reading these bindings runs: the
        one bound last in the source, when it is the file's only def or class among them (mixup's
        `checkpoint = torch.load(...)` under `if args.resume:`, then `def checkpoint(acc, epoch)`,
        called from test() once the module has run)."""
        last = max(read, key=lambda b: b.position)
        defs = {b.node for b in read if b.kind in ("function", "class")}
        if last.kind not in ("function", "class") or len(defs) != 1:
            return None
        if last.kind == "class":  # Trainer(model, loader): its __init__ runs
            return self.method_of(last.node, "__init__")  # type: ignore[arg-type]
        return last.node  # type: ignore[return-value]

    def instance_class(self, name: cst.Name) -> Optional[cst.ClassDef]:
        """The class of this file that the bindings `name` reads instantiate (`trainer = Trainer(args)`),
        when they all build the same one."""
        found = set()
        for binding in self.c.refers.get(name, ()):
            value = binding.value if binding.kind == "assignment" and not binding.path else None
            found.add(self.classes.get(value.func.value) if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) else None)
        return found.pop() if len(found) == 1 else None

    # -- does running it train ------------------------------------------------------------
    def trains(self, node: cst.CSTNode) -> bool:
        """Does running `node` (a loop, a function, a class, the module) reach training?"""
        if node in self._trains:
            return self._trains[node]
        self._trains[node] = False  # a recursion trains only through a call that does
        result = any(self.call_trains(call) for call in self.calls_in(node))
        self._trains[node] = result
        return result

    def calls_in(self, node: cst.CSTNode) -> List[cst.Call]:
        if node in self.a.calls_inside:  # loops, functions, classes, blocks: indexed once
            return self.a.calls_inside[node]
        return list(descendants(node, cst.Call))  # a single statement

    def call_trains(self, call: cst.Call) -> bool:
        """Does running `call` train? Decided per call site: the same function trains what
        `train_val(model, train_loader, optimizer)` hands it and only evaluates for
        `train_val(model, test_loader)` when its training sits under `if train_optimizer is not
        None:` (or `if not is_validate:`, `is_train = ...` on the way) and this call's arguments
        make that test false."""
        if call not in self._call_trains:
            self._call_trains[call] = False  # a recursion trains only through a call that does
            self._call_trains[call] = self._call_trains_here(call)
        return self._call_trains[call]

    def _call_trains_here(self, call: cst.Call) -> bool:
        if _is_backward(call) or self.steps_optimizer(call):
            return True
        if call in self.c.trained_arguments:  # hands a model to a project function that trains it
            return True
        target = self.callee(call)
        if target is None or not self.trains(target):
            return False
        known = self._constant_parameters(call, target)
        if not known:
            return True
        return any(self.call_trains(inner) for inner in self.calls_in(target)
                   if not self._ruled_out(inner, target, known))

    def carries_training(self, edge: Edge) -> bool:
        """May a value that takes `edge` of the flow train where it goes? Not when it is handed to
        a function that trains, by a call whose arguments rule that training out: the loops of
        `train_val(model, test_loader)` evaluate, though `train_val(model, train_loader, optimizer)`
        trains in them. (A constructor that keeps its loader for a later `fit()` carries it on.)"""
        if edge.kind != "argument" or not isinstance(edge.site, cst.Call):
            return True
        target = self.callee(edge.site)
        return target is None or not self.trains(target) or self.call_trains(edge.site)

    # -- what a call's arguments decide in the function it runs ---------------------------
    def _constant_parameters(self, call: cst.Call, target: cst.FunctionDef) -> Dict[Binding, Optional[bool]]:
        """The parameters of `target` that this call gives None, True or False (or leaves at such a
        default): {parameter: None / True / False}."""
        if any(arg.star for arg in call.args):
            return {}
        passed = dict(self.a.values.arguments(target, call))
        scope = self.a.values.index.bindings.get(target, {})
        known: Dict[Binding, Optional[bool]] = {}
        for bindings in scope.values():
            for param in bindings:
                if param.kind == "parameter":
                    given = passed.get(param, param.node.default)  # type: ignore[attr-defined]
                    if isinstance(given, cst.Name) and given.value in _CONSTANTS:
                        known[param] = _CONSTANTS[given.value]
        return known

    def _ruled_out(self, node: cst.CSTNode, target: cst.FunctionDef, known: Dict[Binding, Optional[bool]]) -> bool:
        """Does `node` sit (inside `target`) in a branch of an `if` whose test the constant
        parameters `known` make false?"""
        for anc in self.a.ancestors(node):
            if anc is target:
                return False
            if isinstance(anc, cst.If) and node is not anc.test and not self.a.is_inside(node, anc.test):
                truth = self._truth(anc.test, target, known)
                if truth is not None and (truth is False) == self.a.is_inside(node, anc.body):
                    return True
        return False

    def _truth(self, test: cst.BaseExpression, target: cst.FunctionDef, known: Dict[Binding, Optional[bool]],
               depth: int = 0) -> Optional[bool]:
        """The truth of `test` given the constant parameters (None when it is not known): a
        parameter, `not x`, `x is None`, `x is not None`, `and`/`or`, and a local assigned once
        one of these (`is_train = train_optimizer is not None`)."""
        value = self._constant(test, target, known, depth)
        return None if value is _UNKNOWN else bool(value)

    def _constant(self, node: cst.BaseExpression, target: cst.FunctionDef, known: Dict[Binding, Optional[bool]],
                  depth: int) -> object:
        if depth > 8:
            return _UNKNOWN
        if isinstance(node, cst.Name):
            if node.value in _CONSTANTS:
                return _CONSTANTS[node.value]
            read = self.c.refers.get(node, ())
            if len(read) != 1:
                return _UNKNOWN
            (binding,) = read
            if binding in known:
                return known[binding]
            if binding.scope is target and binding.kind == "assignment" and binding.value is not None and len(
                    self.a.values.index.bindings.get(target, {}).get(binding.name, ())) == 1:
                return self._constant(binding.value, target, known, depth + 1)
            return _UNKNOWN
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            inner = self._truth(node.expression, target, known, depth + 1)
            return _UNKNOWN if inner is None else not inner
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and N.is_name(node.comparisons[0].comparator, "None"):
            operator = node.comparisons[0].operator
            if isinstance(operator, (cst.Is, cst.IsNot)):
                left = self._constant(node.left, target, known, depth + 1)
                if left is _UNKNOWN:
                    return _UNKNOWN
                return (left is None) == isinstance(operator, cst.Is)
        if isinstance(node, cst.BooleanOperation):
            left = self._truth(node.left, target, known, depth + 1)
            right = self._truth(node.right, target, known, depth + 1)
            if isinstance(node.operator, cst.And):
                return False if False in (left, right) else True if left and right else _UNKNOWN
            return True if True in (left, right) else False if left is False and right is False else _UNKNOWN
        return _UNKNOWN


_CONSTANTS: Dict[str, Optional[bool]] = {"None": None, "True": True, "False": False}
_UNKNOWN = object()


def _is_backward(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"
