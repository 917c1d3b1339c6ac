"""Where data and models flow: which loaders train, which loops are epochs, who writes checkpoints.

Part of the single analysis: built from the same collected sites and name index, never a new
traversal of the whole tree. "Training" is decided from the code, not from names: a loader
trains when a loop over it (here, or in a function it is passed to, or through `self`) reaches
a `backward()` or an optimizer `step()`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Set, Tuple

import libcst as cst

from migrator import names as N
from migrator.bindings import ScopeOwner, dotted_name
from migrator.tree import contains, descendants

if TYPE_CHECKING:  # pragma: no cover
    from migrator.analysis import ModelFact, _Analysis

Statement = cst.BaseStatement


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class EpochHook:
    """`<loader>.sampler.set_epoch(<epoch>)` (or `<sampler>.set_epoch`) goes first in `loop`."""

    loop: cst.For
    loader_expr: str  # how the loader is spelled in the loop's scope
    epoch: str


@dataclass(frozen=True)
class LoaderFact:
    call: cst.Call
    statement: Statement  # the statement holding the DataLoader(...) call
    owner: ScopeOwner
    target: Optional[str]  # "train_loader", "self.train_loader"
    dataset: Optional[cst.BaseExpression]
    shuffle: Optional[cst.Arg]  # the shuffle=... argument, which the sampler takes over
    kwargs_dict: Optional[str]  # `**train_kwargs`: shuffle may hide in there
    training: bool
    hooks: Tuple[EpochHook, ...]
    problem: Optional[str]  # why it is declined: "sampler", "iterable", "untraced", or None
    no_epoch_loop: Optional[cst.CSTNode] = None  # the loop that iterates it without an epoch loop around
    distributed_sampler: bool = False  # already reads a DistributedSampler


@dataclass(frozen=True)
class SaveSite:
    """A checkpoint write and the statement(s) that must run on rank 0 only."""

    call: cst.Call
    guard: Tuple[Statement, ...]  # the helper's call sites, or the write itself
    shared: Optional[Statement] = None  # the guard would skip code every rank must run (a forward, a collective)
    inner: Optional[Statement] = None  # the write itself, when `guard` holds a helper's call sites


@dataclass(frozen=True)
class ModelUse:
    """An attribute of a wrapped model: `model.state_dict()`, `model.encode(x)`..."""

    node: cst.Attribute
    model: "ModelFact"


# --------------------------------------------------------------------------- the analysis


class Flow:
    def __init__(self, a: "_Analysis", model_exprs: Set[str], entry_function: Optional[cst.CSTNode]) -> None:
        self.a = a
        self.c = a.c
        self.model_exprs = model_exprs
        self.entry_function = entry_function
        self.functions: Dict[str, cst.FunctionDef] = {
            f.name.value: f for f in self.c.functions if isinstance(a.parent(f), cst.Module)
        }
        self.classes: Dict[str, cst.ClassDef] = {c.name.value: c for c in self.c.classes if isinstance(a.parent(c), cst.Module)}
        self._trains_cache: Dict[cst.CSTNode, bool] = {}
        self.optimizer_names = self._optimizer_names()

    # -- small helpers -------------------------------------------------------------------
    def _optimizer_names(self) -> Set[str]:
        found = set()
        for call, _ in self.c.optimizer_calls:
            statement = self.a.statement_of(call)
            if isinstance(statement, cst.SimpleStatementLine):
                small = statement.body[0]
                if isinstance(small, cst.Assign):
                    found.update(code_of(t.target) for t in small.targets)
        return found

    def method_of(self, cls: Optional[cst.ClassDef], name: str) -> Optional[cst.FunctionDef]:
        if cls is None:
            return None
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == name:
                return statement
        return None

    def callee(self, call: cst.Call) -> Optional[cst.FunctionDef]:
        """The function of this file a call runs: `train(...)` or `self.train_epoch(...)`."""
        if isinstance(call.func, cst.Name):
            if call.func.value in self.classes:  # Trainer(model, loader): its __init__ runs
                return self.method_of(self.classes[call.func.value], "__init__")
            return self.functions.get(call.func.value)
        if isinstance(call.func, cst.Attribute) and N.is_name(call.func.value, "self"):
            return self.method_of(self.a.enclosing_class(call), call.func.attr.value)
        return None

    def bound_params(self, fn: cst.FunctionDef) -> List[str]:
        """The parameters a call fills, `self`/`cls` of a method left out."""
        params = [p.name.value for p in fn.params.params]
        if params and params[0] in ("self", "cls") and self.a.enclosing_class(fn) is not None:
            params = params[1:]
        return params

    def param_for(self, fn: cst.FunctionDef, call: cst.Call, expr: str) -> Optional[str]:
        """The parameter of `fn` that receives `expr` at `call`."""
        params = self.bound_params(fn)
        for index, arg in enumerate(call.args):
            if code_of(arg.value) != expr:
                continue
            if arg.keyword is not None:
                return arg.keyword.value
            if arg.star == "" and index < len(params):
                return params[index]
        return None

    def calls_within(self, node: cst.CSTNode) -> List[cst.Call]:
        return self.a.calls_inside.get(node, [])

    def loops_over(self, expr: str, within: cst.CSTNode) -> List[cst.CSTNode]:
        """`for ... in <expr>` loops, and `iter(<expr>)` calls (step loops that call next())."""
        loops = [loop for loop in self.c.loops if isinstance(loop, cst.For) and _iterated(loop) == expr]
        streams = [
            call for call in self.calls_within(within)
            if N.is_name(call.func, "iter") and _iterated(call) == expr
        ]
        return [node for node in loops if self.a.is_inside(node, within)] + streams

    def use_trains(self, use: cst.CSTNode) -> bool:
        """A loop over the loader trains; so does an `iter(loader)` in a function that trains."""
        if isinstance(use, cst.For):
            return self.trains(use)
        return self.trains(self.a.enclosing_function(use) or self.a.module)

    def trains(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Does running `node` reach a backward() or an optimizer step()?"""
        if node in self._trains_cache:
            return self._trains_cache[node]
        self._trains_cache[node] = False  # recursion guard
        result = False
        for call in self.calls_within(node):
            func = call.func
            if isinstance(func, cst.Attribute) and (
                func.attr.value == "backward" or (func.attr.value == "step" and code_of(func.value) in self.optimizer_names)
            ):
                result = True
                break
            target = self.callee(call)
            if target is not None and depth < 4 and self.trains(target, depth + 1):
                result = True
                break
        self._trains_cache[node] = result
        return result

    # -- loaders -------------------------------------------------------------------------
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
        if problem is None and not loops and _shuffles(shuffle) and self.c.optimizer_calls:
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
        return LoaderFact(call, statement, owner, target, dataset, shuffle, kwargs, training, tuple(hooks), problem, no_epoch, distributed)  # type: ignore[arg-type]

    def has_distributed_sampler(self, call: cst.Call) -> bool:
        sampler = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "sampler"), None)
        if isinstance(sampler, cst.Name):
            sampler = self.assigned_value(sampler.value, self.a.scope_of(call))
        return isinstance(sampler, cst.Call) and self.c.resolve(sampler.func) in N.DISTRIBUTED_SAMPLER

    def accumulation_steps(self) -> List[cst.CSTNode]:
        """`if (step + 1) % accum == 0: optimizer.step()` inside a training loop."""
        found = []
        for call in self.c.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
                continue
            stepped = code_of(func.value) in self.optimizer_names or any(
                code_of(arg.value) in self.optimizer_names for arg in call.args
            )  # scaler.step(optimizer)
            if not stepped:
                continue
            condition = next((anc for anc in self.a.ancestors(call) if isinstance(anc, cst.If)), None)
            if condition is not None and _is_modulo_test(condition.test) and condition not in found:
                if any(isinstance(anc, (cst.For, cst.While)) for anc in self.a.ancestors(condition)):
                    found.append(condition)
        return found

    def rank_divergent(self) -> List[cst.If]:
        """Rank checks around code every rank must run."""
        paired = self.paired_barrier_checks()
        return [
            node for node in self.c.rank_checks
            if node not in paired and N.mentions_rank(node.test) and self.runs_shared_code(node.body)
        ]

    def paired_barrier_checks(self) -> Set[cst.If]:
        """The "first process does it, the others wait" idiom: two rank checks around barriers, in one function."""
        by_function: Dict[Optional[cst.CSTNode], List[cst.If]] = {}
        for node in self.c.rank_checks:
            calls = self.calls_within(node)
            if calls and all(self.c.resolve(call.func) == "torch.distributed.barrier" for call in calls):
                by_function.setdefault(self.a.enclosing_function(node), []).append(node)
        return {node for nodes in by_function.values() if len(nodes) >= 2 for node in nodes}

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

    def assigned_value(self, name: str, owner: ScopeOwner) -> Optional[cst.BaseExpression]:
        for target, statement in self.c.assignments:
            if target == name and self.a.scope_of(statement) is owner:
                small = statement.body[0]
                if isinstance(small, cst.Assign):
                    return small.value
        return None

    def loader_loops(self, call: cst.Call, statement) -> Tuple[Optional[str], List[Tuple[cst.For, str]]]:
        """The loader's name where it is built, and every loop over it (with its spelling there)."""
        target = _assigned_name(statement, call)
        if target is not None:
            return target, self.uses(target, self.a.scope_of(call))
        # `return DataLoader(...)` or `return train_loader, val_loader` from a helper function.
        fn = self.a.enclosing_function(call)
        if fn is not None and isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Return):
            return None, self.returned_uses(fn, 0)
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
            for call in self.calls_within(scope):
                fn = self.callee(call)
                param = self.param_for(fn, call, expr) if fn is not None else None
                if param is not None and depth < 3:
                    found += [(loop, expr) for loop, _ in self.uses(param, fn, depth + 1)]
        # `self.loader = loader` in a constructor or method: the loader lives on the instance.
        if "." not in expr and isinstance(owner, cst.FunctionDef) and depth < 3:
            for attribute in self.stored_on_self(expr, owner):
                found += [(loop, expr) for loop, _ in self.uses(attribute, owner, depth + 1)]
        # A helper that returns the loader: `train_loader, val_loader = make_loaders(...)`.
        if "." not in expr and isinstance(owner, cst.FunctionDef):
            for position in self.return_positions(owner, expr):
                found += self.returned_uses(owner, position)
        return found

    def stored_on_self(self, name: str, fn: cst.FunctionDef) -> List[str]:
        found = []
        for target, statement in self.c.assignments:
            if not target.startswith("self.") or self.a.scope_of(statement) is not fn:
                continue
            value = getattr(statement.body[0], "value", None)
            if isinstance(value, cst.Name) and value.value == name:
                found.append(target)
        return found

    def return_positions(self, fn: cst.FunctionDef, expr: str) -> List[int]:
        positions = []
        for ret in descendants(fn, cst.Return):
            value = ret.value
            elements = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
            positions += [i for i, e in enumerate(elements) if e is not None and code_of(e) == expr]
        return positions

    def returned_uses(self, fn: cst.FunctionDef, position: int) -> List[Tuple[cst.For, str]]:
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
            target = assign.targets[0].target
            elements = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
            if position < len(elements):
                found += self.uses(code_of(elements[position]), self.a.scope_of(call), depth=1)
        return found

    # -- epochs --------------------------------------------------------------------------
    def epoch_hooks(self, loop: cst.CSTNode, spelled: str) -> List[EpochHook]:
        """Where the epoch loop driving `loop` is, and how the loader is spelled there."""
        enclosing = self.enclosing_epoch_loop(loop)
        if enclosing is not None:
            # Spelled as the loop spells it: the epoch loop is in the same function.
            return [EpochHook(enclosing, _iterated(loop) or spelled, _loop_variable(enclosing))]
        fn = self.a.enclosing_function(loop)
        if fn is None:
            return []
        hooks = []
        inner = _iterated(loop) or spelled  # the loader as this function spells it (often a parameter)
        for call in self.c.calls:
            if self.callee(call) is not fn:
                continue
            outer = self.enclosing_epoch_loop(call)
            if outer is None:
                continue
            spelled_there = inner if inner.startswith("self.") else self.argument_for(fn, call, inner)
            if spelled_there is None and inner in self.c.bound.get(self.a.module, ()):
                spelled_there = inner  # a module global, as in flat scripts with helpers
            if spelled_there is not None:
                hooks.append(EpochHook(outer, spelled_there, _loop_variable(outer)))
        return hooks

    def enclosing_epoch_loop(self, node: cst.CSTNode) -> Optional[cst.For]:
        fn = self.a.enclosing_function(node)
        for anc in self.a.ancestors(node):
            if anc is fn:
                return None
            if isinstance(anc, cst.For) and _loop_variable(anc) and _is_range_like(anc):
                return anc
        return None

    def argument_for(self, fn: cst.FunctionDef, call: cst.Call, param: str) -> Optional[str]:
        params = self.bound_params(fn)
        for index, arg in enumerate(call.args):
            if arg.keyword is not None and arg.keyword.value == param:
                return code_of(arg.value)
            if arg.keyword is None and arg.star == "" and index < len(params) and params[index] == param:
                return code_of(arg.value)
        return None

    def while_loop_around(self, node: cst.CSTNode) -> Optional[cst.While]:
        return next((anc for anc in self.a.ancestors(node) if isinstance(anc, cst.While)), None)

    # -- checkpoints ---------------------------------------------------------------------
    def saves(self) -> Tuple[SaveSite, ...]:
        sites = []
        for call in self.a.calls(N.RESULT_WRITES):
            if self.under_rank_check(call):
                continue
            fn = self.a.enclosing_function(call)
            helper_calls = self.save_helper_calls(fn) if fn is not None else None
            inner = self.save_statement(call)
            if helper_calls:
                guard = tuple(self.a.statement_of(c) for c in helper_calls if not self.under_rank_check(c))
            else:
                guard = (inner,)
            statements = tuple(s for s in guard if s is not None)
            shared = next((s for s in statements if self.runs_shared_code(s)), None)
            sites.append(SaveSite(call, statements, shared, inner if helper_calls else None))
        return tuple(sites)

    def runs_shared_code(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Does `node` run something every rank must run: the model's forward, a collective?

        Such code must never sit behind a rank-0 guard: the other ranks would wait for it forever.
        """
        for call in descendants(node, cst.Call):
            func = call.func
            if code_of(func) in self.model_exprs or self.c.resolve(func) in N.COLLECTIVES:
                return True
            target = self.callee(call)  # type: ignore[arg-type]
            if target is not None and depth < 3 and self.runs_shared_code(target.body, depth + 1):
                return True
        return False

    def save_helper_calls(self, fn: cst.FunctionDef) -> Optional[List[cst.Call]]:
        """Call sites of a checkpoint helper such as save_checkpoint(state, is_best).

        Only a helper that does nothing every rank must do (no loops, no backward/step, no
        collectives) is guarded at its call sites; anything else gets the guard inside.
        """
        if fn is self.entry_function or any(self.a.is_inside(loop, fn) for loop in self.c.loops) or self.trains(fn):
            return None
        if any(self.c.resolve(call.func) and self.c.resolve(call.func).startswith("torch.distributed.") for call in self.calls_within(fn)):  # type: ignore[union-attr]
            return None
        calls = [call for call in self.c.calls if self.callee(call) is fn]
        statements = [self.a.statement_of(call) for call in calls]
        if not calls or any(not isinstance(s, cst.SimpleStatementLine) for s in statements):
            return None
        return calls

    def save_statement(self, call: cst.Call) -> Optional[Statement]:
        """The statement to guard: the save itself, or the `with open(...)` that only serves it."""
        statement = self.a.statement_of(call)
        block = self.a.block_of(statement) if statement is not None else None
        owner = self.a.parent(block) if block is not None else None
        if isinstance(owner, cst.With) and len(owner.body.body) == 1:  # type: ignore[union-attr]
            return owner
        return statement

    def under_rank_check(self, node: cst.CSTNode) -> bool:
        return any(isinstance(anc, cst.If) and N.mentions_rank(anc.test) for anc in self.a.ancestors(node))

    def print_statements(self, loaders: Tuple[LoaderFact, ...]) -> Tuple[Statement, ...]:
        """Per-step / per-epoch prints and logs: inside epoch loops and loops over loaders."""
        loops: Set[cst.CSTNode] = {loop for loop in self.c.loops if self.trains(loop)}
        for loader in loaders:
            loops.update(h.loop for h in loader.hooks)
        for loop in self.c.loops:
            if isinstance(loop, cst.For) and any(_iterated(loop) == (l.target or "") for l in loaders):
                loops.add(loop)
        found = []
        for statement in self.c.log_statements:
            if self.under_rank_check(statement) or self.runs_shared_code(statement):
                continue
            if any(self.a.is_inside(statement, loop) for loop in loops) or self.in_loader_function(statement, loaders):
                found.append(statement)
        return tuple(found)

    def in_loader_function(self, statement: cst.CSTNode, loaders: Tuple[LoaderFact, ...]) -> bool:
        """A print in train()/test(): a function that loops over a loader passed to it."""
        fn = self.a.enclosing_function(statement)
        if fn is None:
            return False
        return any(
            isinstance(loop, cst.For) and self.a.is_inside(loop, fn) and self.is_loader_loop(loop, loaders)
            for loop in self.c.loops
        )

    def is_loader_loop(self, loop: cst.For, loaders: Tuple[LoaderFact, ...]) -> bool:
        """A loop over a loader handed to this function (a parameter, or self.x): train()/test()/validate()."""
        iterated = _iterated(loop)
        if iterated is None:
            return False
        fn = self.a.enclosing_function(loop)
        params = {p.name.value for p in fn.params.params} if fn is not None else set()
        return iterated in params or iterated.startswith("self.")

    def reads_after_write(self, saves: Tuple[SaveSite, ...]) -> Tuple[Statement, ...]:
        """Top-level statements that load a checkpoint this script wrote earlier in the same function.

        Rank 0 alone writes it now, so every rank waits at a barrier before reading it back; only
        at the top of a function body, where every rank is sure to arrive.
        """
        found = []
        for call in self.loading_calls():
            fn = self.a.enclosing_function(call) or self.a.module
            block = fn.body if isinstance(fn, cst.FunctionDef) else fn
            top = self.a.top_statement_in(call, block)
            if top is None or top in found or self.a.holds_loop(top):
                continue
            if any(
                self.a.enclosing_function(site.call) is self.a.enclosing_function(call) and self.a.comes_after(call, site.call)
                for site in saves
            ):
                found.append(top)
        return tuple(found)

    def loading_calls(self) -> List[cst.Call]:
        """torch.load calls, and calls of this file's functions that (transitively) torch.load."""
        loads = list(self.a.calls(N.TORCH_LOAD))
        loaders = {self.a.enclosing_function(call) for call in loads} - {None}
        for _ in range(2):  # helpers of helpers
            callers = [call for call in self.c.calls if self.callee(call) in loaders]
            loads += [call for call in callers if call not in loads]
            loaders |= {self.a.enclosing_function(call) for call in callers} - {None}
        return loads

    # -- model uses after wrapping ---------------------------------------------------------
    def model_uses(self, model: "ModelFact", wrap_point: Statement) -> Tuple[ModelUse, ...]:
        """Attribute accesses on `model` made when it is already wrapped."""
        uses: Dict[cst.CSTNode, ModelUse] = {}
        for spelling, scope, after in self.wrapped_scopes(model, wrap_point):
            for node in self.c.attributes:
                if node in uses or code_of(node.value) != spelling or not self.a.is_inside(node, scope):
                    continue
                if after is not None and not self.a.comes_after(node, after):
                    continue
                uses[node] = ModelUse(node, model)
        return tuple(uses.values())

    def bare_unwraps(self, uses: Tuple[ModelUse, ...]) -> Tuple[Tuple[cst.Name, "ModelFact"], ...]:
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

    def reassignments(self, model: "ModelFact") -> Tuple[Statement, ...]:
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
            found.append(statement)
        return tuple(found)

    def wrapped_scopes(self, model: "ModelFact", wrap_point: Statement) -> List[Tuple[str, cst.CSTNode, Optional[Statement]]]:
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
        if owner is self.a.module:
            # A flat script's global model, used by its helper functions (called after the wrap).
            scopes += [(model.expr, fn, None) for fn in self.c.functions if model.expr not in self.c.bound.get(fn, ())]
        return scopes


# --------------------------------------------------------------------------- helpers


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


# Calls whose first argument is not what the loop walks over (range(len(loader)) walks indices).
_NOT_WRAPPERS = {"range", "len", "reversed", "sorted"}


def _iterated(loop: cst.CSTNode) -> Optional[str]:
    """What a loop (or an `iter(...)` call) walks over: `train_loader` in `for x in train_loader`,
    `enumerate(train_loader)`, `tqdm(train_loader, ...)`, `metric_logger.log_every(train_loader, 10)`.
    """
    node = loop.iter if isinstance(loop, cst.For) else loop
    while isinstance(node, cst.Call) and node.args and node.args[0].keyword is None:
        if (dotted_name(node.func) or "").split(".")[-1] in _NOT_WRAPPERS:
            return None
        node = node.args[0].value
    return code_of(node) if isinstance(node, (cst.Name, cst.Attribute)) else None


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
    if isinstance(target, cst.Tuple) and target.elements and isinstance(target.elements[0].value, cst.Name):
        return target.elements[0].value.value  # type: ignore[attr-defined]
    return ""
