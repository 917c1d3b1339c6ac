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
from migrator.graph.flow import OPTIMIZER, Value
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
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            return True
        if self.steps_optimizer(call):
            return True
        if call in self.c.trained_arguments:  # hands a model to a project function that trains it
            return True
        target = self.callee(call)
        return target is not None and self.trains(target)
