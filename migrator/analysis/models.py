"""Models and DataParallel: which models train, and what each DataParallel site wraps.

The methods of a mixin of `_Analysis` (passes.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from migrator import names as N
from migrator.names import attribute_name
from migrator.graph.flow import ADDS_MEMBER, MODEL, RETURNS_SELF, Value
from migrator.tree import descendants
from migrator.analysis.facts import DataParallelSite, ModelFact
from migrator.analysis.helpers import (
    Statement,
    _called_names,
    _parameter_owners,
    _parameter_owners_in,
    _returns,
    code_of,
    code_of_target,
)


def _calls_cuda(statement: cst.CSTNode) -> bool:
    return any(attribute_name(call.func) == "cuda" for call in descendants(statement, cst.Call))


def _assignments(value: Value, scope=None) -> List[cst.SimpleStatementLine]:
    """The assignment statements that bind the value (in `scope`, when given)."""
    return [
        b.statement for b in value.bindings
        if isinstance(b.statement, cst.SimpleStatementLine) and b.kind in ("assignment", "unpacking", "attribute")
        and (scope is None or b.scope is scope)
    ]


def _is_cuda_available_call(test: cst.BaseExpression) -> bool:
    return isinstance(test, cst.Call) and code_of(test.func).endswith("cuda.is_available")


def _call_chain(value: Optional[cst.CSTNode]) -> List[cst.Call]:
    """`nn.Sequential(a, b).cuda().train()` -> the three calls, outermost first."""
    calls = []
    while isinstance(value, cst.Call):
        calls.append(value)
        value = value.func.value if isinstance(value.func, cst.Attribute) else None
    return calls


# Builders whose models start on the CPU (torchvision.models.resnet50(), timm.create_model(...)).
_CPU_BUILDERS = ("torch.", "torchvision.", "timm.", "transformers.", "torch_geometric.")


def _passes(call: cst.Call, value: Value) -> bool:
    """Is the value an argument of `call`, itself or inside a tuple/list argument?"""
    for arg in call.args:
        values = [e.value for e in arg.value.elements] if isinstance(arg.value, (cst.Tuple, cst.List)) else [arg.value]
        if any(value.holds(v) for v in values):
            return True
    return False


def _unpacks_parameter(statement: cst.SimpleStatementLine, params) -> bool:
    small = statement.body[0]
    return (
        isinstance(small, cst.Assign)
        and isinstance(small.value, cst.Name)
        and small.value.value in params
        and any(isinstance(t.target, (cst.Tuple, cst.List)) for t in small.targets)
    )


# nn.Module methods: an argument called with one of these is a model.
_MODULE_METHODS = frozenset({"to", "cuda", "train", "eval", "parameters", "named_parameters", "state_dict", "load_state_dict"})

# Custom methods that finish building a model (`net.create_architecture()`, `model.init_weights()`,
# `model.load_pretrained(path)`): the wrap goes after them, since DDP registers the parameters it
# sees when it is built. A custom `model.fit(...)` is not one: it may train.
_BUILDING_PREFIXES = ("create", "build", "init", "load", "reset", "setup", "freeze", "set_", "initialize")


def _prepares_model(method: str) -> bool:
    return method in N.PREPARE_METHODS or method.lstrip("_").startswith(_BUILDING_PREFIXES)


@dataclass(frozen=True)
class Forward:
    """What the training's forward calls for the parameters of one module (ModelAnalysis.forward).

    route: "itself" (`model(x)`, under any name the flow gives it), "element" (read out of a
    container it was put in, then called: `modules.append(student)`, `modules[0](x)`), "members" (a
    container the training never calls, whose modules it calls: the optimizer's `trainable_list`),
    "container" (through the forward of a container holding it), "unreached" (nothing to wrap can
    be told), or "untraced" (the file runs no forward of it: handed to code the flow cannot read).
    """

    route: str
    entered: Optional[Statement] = None  # "element": the statement of its block where it first enters a container
    containers: Tuple[str, ...] = ()  # the containers it enters, or that hold it
    members: Tuple[str, ...] = ()  # "members": the modules put into it, each trained in its place
    reason: Optional[str] = None  # "container", "unreached": why no DDP is written (DDP104)


_MEMBERS = MODEL | {"member"}
_ELEMENTS = MODEL | {"element"}


class ModelAnalysis:
    """Models and DataParallel: which models train, and what each DataParallel site wraps."""

    # -- models ------------------------------------------------------------------------
    def dataparallel_site(self, call: cst.Call) -> DataParallelSite:
        statement = self.statement_of(call)
        chained = None
        parent = self.parent(call)
        if isinstance(parent, cst.Attribute) and parent.attr.value in N.MOVE_METHODS:
            outer = self.parent(parent)
            if isinstance(outer, cst.Call) and outer.func is parent:
                chained = outer
        top = chained or call
        target = None
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            if isinstance(small, cst.Assign) and small.value is top and len(small.targets) == 1:
                target = code_of(small.targets[0].target)
        inner = call.args[0].value if call.args and call.args[0].keyword is None else None
        conditional = None
        owner = self.parent(self.block_of(statement)) if statement is not None else None
        if isinstance(owner, cst.If) and owner.orelse is None and N.is_gpu_count_test(owner.test):
            others = [s for s in owner.body.body if s is not statement]
            if all(N.is_log_statement(s) for s in others):
                conditional = owner
        return DataParallelSite(call, statement, target, inner, chained, conditional)  # type: ignore[arg-type]

    def is_chained_dp(self, cuda_call: cst.Call, dp_sites: Sequence[DataParallelSite]) -> bool:
        return any(site.chained is cuda_call for site in dp_sites)

    def ddp_wrapped_targets(self) -> Set[str]:
        targets = set()
        for call in self.calls(N.DDP):
            if call.args:
                targets.add(code_of(call.args[0].value))
            statement = self.statement_of(call)
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Assign):
                        targets.update(code_of(t.target) for t in small.targets)
        return targets

    def trained_models(self, dp_sites, ddp_targets: Set[str]) -> Tuple[ModelFact, ...]:
        models: Dict[str, ModelFact] = {}
        updates = [call for call, _ in self.c.optimizer_calls] + self.c.manual_updates + self.c.optimizer_helpers
        for call in updates:
            if self.idle_optimizer(call):
                continue
            first: Optional[str] = None  # the first model this update trains: the others join its optimizer
            pending = list(self.parameter_owners(call))
            seen: Set[str] = set()
            while pending:
                expr = pending.pop(0)
                if expr in seen:
                    continue
                seen.add(expr)
                if expr in models or expr == "self":
                    first = first or (expr if expr in models else None)
                    continue  # `self`: a module building its own optimizer (configure_optimizers) is not training
                definition = self.model_definition(expr, call)
                if definition is None and "." not in expr:
                    # `def define_optimizer(g_model, ...)`: the model is built by the one caller that passes it.
                    expr, definition = self.model_from_caller(expr, call)
                    if expr in models:
                        first = first or expr
                        continue
                if definition is None and "." in expr:
                    # Parameter groups of submodules (`model.backbone.parameters()`, `net.linear1.parameters()`):
                    # the model is the object they belong to, built here.
                    expr, definition = self.owning_model(expr, call)
                    if expr in models:
                        first = first or expr
                        continue
                if definition is not None and not expr.startswith("self."):
                    # `self.model, self.optimizer = model, optimizer`: from there on the model is `self.model`.
                    expr, definition = self.kept_on_self(expr, definition)
                    if expr in models:
                        first = first or expr
                        continue
                forward = self.forward(expr, definition) if definition is not None else Forward("untraced")
                if forward.route == "members":
                    pending[:0] = forward.members  # the modules training calls, each wrapped before it enters a container
                    continue
                sites = [
                    s for s in dp_sites
                    if (s.target == expr or (s.target or "").startswith(expr + ".")) and self.same_variable(expr, s.statement, definition)
                ]
                anchor = self.branch_anchor(definition) if definition is not None else None
                stripped = self.nested_sites(sites, definition, anchor)
                plain_dp = None if stripped else next((s for s in sites if s.target == expr), None)
                # An unconditional DataParallel keeps its `module.` keys (see DDP014); a conditional one does not.
                first_dp = plain_dp or (stripped[0] if stripped else None)
                dp_from = self.top_statement_in(first_dp.statement, self.block_of(anchor)) if first_dp is not None and anchor is not None else None
                keyed_from = dp_from if plain_dp is not None and plain_dp.conditional is None else None
                wrap_after = self.last_preparation(expr, anchor, keyed_from) if anchor is not None else None
                if forward.entered is not None and wrap_after is not None and (
                        wrap_after is forward.entered or self.comes_after(wrap_after, forward.entered)):
                    forward = Forward("unreached", reason=(
                        f"training calls {expr} as an element of `{forward.containers[0]}`, and {expr} is still "
                        f"prepared after it is put there (line {self.line_of(wrap_after)}): wrap it in DDP by hand, "
                        "after it is final and before it enters a container"))
                if stripped:
                    wrap_after = self.after_branches(stripped, anchor, wrap_after)
                dp = None if stripped else next((s for s in sites if s.target == expr), None)
                moved = self.moved_before_wrap(definition, anchor, wrap_after) if anchor is not None else True
                # Handed to a project trainer that moves it (minGPT's `self.model = self.model.to(self.device)`):
                # moved to this process's device before the wrap, so the trainer's move finds it there.
                handed_to_mover = not moved and any(
                    expr in (code_of(v) for v in self.c.trained_arguments.get(call, ())) for call in self.c.trained_moves
                )
                # Put into a container that is moved afterwards (`modules.append(student)`, then
                # `modules.cuda()`): the wrap before it enters moves it to this process's device itself.
                handed_to_mover = handed_to_mover or (not moved and forward.entered is not None and self.container_moved(expr, definition))
                # A later move (`if args.half: model.half()`) pushed the wrap below a load that expected
                # DataParallel's `module.` keys: that load now runs on the bare model, so it drops the
                # prefix (DDP014) while the saves keep it, as before. Behind a conditional DataParallel
                # (`if device == "cuda": net = DataParallel(net)`, stripped) the load read prefixed keys on one branch only, and the saves
                # now write bare ones: dropping the prefix reads both.
                bare_loads = self.loads_between(expr, dp_from, wrap_after) if dp_from is not None and wrap_after is not None else ()
                early_reads = self.module_reads_between(expr, dp_from, wrap_after) if dp_from is not None and wrap_after is not None else ()
                models[expr] = ModelFact(
                    expr=expr,
                    optimizer_call=call,
                    definition=definition,
                    wrap_after=wrap_after,
                    dataparallel=dp,
                    stripped=stripped,
                    already_ddp=expr in ddp_targets,
                    scope=self.scope_of(definition) if definition is not None else None,
                    device_expr=self.device_expr_at(definition, typed=True) if definition is not None else None,
                    cuda_condition=self.cuda_condition(expr, anchor, wrap_after) if anchor is not None else None,
                    moved=moved,
                    bare_loads=bare_loads,
                    module_reads_before_wrap=early_reads,
                    held_by=self.held_before_wrap(expr, definition, wrap_after) if definition is not None else None,
                    device_unknown=definition is not None and self.built_by_helper(definition) and not self.moves_itself(expr, definition),
                    optional=definition is not None and self.assigned_none(expr, definition),
                    moved_later=None if moved or handed_to_mover else self.moved_in_callee(expr, definition),
                    move_to_local=handed_to_mover,
                    auxiliary=first is not None and first != expr and definition is not None and models[first].definition is not None
                    and self.applied_to(self.model_value(expr, definition), self.model_value(first, models[first].definition)),
                    parameters_changed_later=self.parameters_changed_later(expr, definition, wrap_after)
                    if definition is not None and wrap_after is not None else (),
                    forward_unreached=forward.reason,
                )
                first = first or expr
        return tuple(models.values())

    def idle_optimizer(self, call: cst.Call) -> bool:
        """An optimizer built and never used to train: a scheduler's plotting demo under a module's
        main guard (`optimizer = SGD(resnet.parameters()); for i in ...: scheduler(optimizer, i)`).
        Nothing in the file runs a backward or an optimizer step, and the model is handed to nothing
        that could (training needs its forward): not to code this file cannot read (an imported
        `train(model, optimizer)`, a trainer object), to its own code that trains, or into another
        object or container. An optimizer a class builds on `self` may be stepped by a base class
        defined elsewhere: it is never idle."""
        if call in self.c.manual_updates or call in self.c.optimizer_helpers or self.enclosing_class(call) is not None:
            return False
        if self._file_trains():
            return False
        owners = _parameter_owners(call)
        for expr in owners:
            definition = self.model_definition(expr, call) if "." not in expr else None
            if definition is None:
                return False  # a model whose build we cannot find: its training may be anywhere
            if any(self._may_train_through(use) for use in self.model_value(expr, definition).references()):
                return False
        return bool(owners)

    def _may_train_through(self, use: cst.CSTNode) -> bool:
        """Could what `use` (a reference of the model) is part of train the model elsewhere?"""
        parent = self.parent(use)
        if isinstance(parent, cst.Attribute) and parent.value is use:
            return False  # `model.parameters()`, `model.eval()`: its own methods and attributes
        if isinstance(parent, cst.Arg):
            holder = self.parent(parent)
            if isinstance(holder, cst.Call):
                target = self.call_graph.callee(holder)
                if target is not None:
                    return self.call_graph.trains(target)
                builtin = N.is_builtin(holder.func) and not self.c.refers.get(holder.func)
                return not builtin and (self.c.resolve(holder.func) or "").split(".")[0] not in N.LIBRARIES
        if isinstance(parent, cst.Assign) and all(isinstance(t.target, cst.Name) for t in parent.targets):
            return False  # `m = model`: the flow follows the name
        return not isinstance(parent, (cst.Comparison, cst.Expr))

    def _file_trains(self) -> bool:
        """Does any code of the file run a backward or step an optimizer it builds?"""
        if "_file_trains_cache" not in self.__dict__:
            graph = self.call_graph
            self.__dict__["_file_trains_cache"] = any(
                (isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward") or graph.steps_optimizer(c)
                or c in self.c.trained_arguments for c in self.c.calls)
        return self.__dict__["_file_trains_cache"]

    def same_variable(self, expr: str, statement, definition) -> bool:
        """Is `expr` in `statement` the same variable as at `definition`: the same function's local, or
        `self.x` in the same class? A local `model` of the class's `sample()` is not `train()`'s."""
        if definition is None:
            return False
        if self.scope_of(statement) is self.scope_of(definition):
            return True
        if not expr.startswith("self."):
            return False
        cls = self.enclosing_class(definition)
        return cls is not None and cls is self.enclosing_class(statement)

    def split_dataparallel(self, dp_sites, models) -> Tuple[Tuple[DataParallelSite, ...], Tuple[DataParallelSite, ...]]:
        """DataParallel sites no model took over: blocking when they build a trained model, else left alone."""
        taken = {id(s) for m_ in models for s in (m_.stripped or ((m_.dataparallel,) if m_.dataparallel else ()))}
        blocking, other = [], []
        for site in dp_sites:
            if id(site) in taken:
                continue
            if self.feeds_trained_model(site, models) and not self.evaluates_after_training(site, models):
                blocking.append(site)
            else:
                other.append(site)
        return tuple(blocking), tuple(other)

    def evaluates_after_training(self, site: DataParallelSite, models) -> bool:
        """`model = DataParallel(model).cuda()` for the final test, after the training loop has run:
        nothing trains through it (no optimizer takes its parameters afterwards)."""
        if site.target in {m_.expr for m_ in models}:
            return False
        fn = self.enclosing_function(site.call)
        return any(
            self.enclosing_function(loop) is fn and self.comes_after(site.statement, loop) and self.call_graph.trains(loop)
            for loop in self.c.loops
        )

    def feeds_trained_model(self, site: DataParallelSite, models) -> bool:
        fn = self.enclosing_function(site.call)
        for model in models:
            if model.definition is None:
                continue
            if self.scope_of(site.statement) is self.scope_of(model.definition):
                return True
            if fn is not None and fn.name.value in _called_names(model.definition):
                return True  # `model = build()` where build() returns DataParallel(...)
        return False

    def nested_sites(self, sites, definition, anchor) -> Tuple[DataParallelSite, ...]:
        """DataParallel sites to unwrap in place: several, on a submodule, or in branches below the model's block.

        One site in the model's own block (`model = DP(model)`, or the tutorial's
        `if torch.cuda.device_count() > 1: model = DP(model)`) is simply replaced by the wrap.
        """
        if definition is None or not sites:
            return ()
        if len(sites) == 1:
            site = sites[0]
            holder = site.conditional or site.statement
            if self.block_of(holder) is self.block_of(anchor) and "." not in (site.target or "").replace(
                code_of_target(definition), "", 1
            ):
                return ()
        return tuple(sites)

    def after_branches(self, sites, anchor, wrap_after):
        """The statement of the model's block that comes last among the branches holding `sites`."""
        block = self.block_of(anchor)
        body = list(block.body)  # type: ignore[union-attr]
        last = body.index(wrap_after)
        for site in sites:
            top = self.top_statement_in(site.statement, block)
            if top is not None:
                last = max(last, body.index(top))
        return body[last]

    def parameter_owners_nearby(self, optimizer_call: cst.Call) -> List[str]:
        """Parameter groups built beforehand (`decay = [p for n, p in model.named_parameters() ...]`).

        The bindings the optimizer call reads are followed: the statements of its function that
        assign them, the `append`/`extend` calls on them, and the loops that fill them.
        """
        read = {b for node in descendants(optimizer_call, (cst.Name, cst.Attribute)) for b in self.c.refers.get(node, ())}
        if not read:
            return []
        owners: List[str] = []
        scope = self.scope_of(optimizer_call)
        fn = self.enclosing_function(optimizer_call) or self.module
        for binding in sorted(read, key=lambda b: self.c.order.get(b.statement, 0)):  # in source order
            if isinstance(binding.statement, cst.SimpleStatementLine) and binding.scope is scope and binding.kind != "parameter":
                owners += [o for o in _parameter_owners_in(binding.statement) if o not in owners]
        for receiver, method, statement in self.c.expr_calls:
            if method in ("append", "extend") and self.is_inside(statement, fn) and read & set(self.c.refers.get(receiver, ())):
                owners += [o for o in _parameter_owners_in(statement) if o not in owners]
        for loop in self.c.loops:
            if isinstance(loop, cst.For) and self.is_inside(loop, fn) and any(
                read & set(self.c.refers.get(node, ())) for node in descendants(loop.body, (cst.Name, cst.Attribute))
            ):
                owners += [o for o in _parameter_owners_in(loop.iter) if o not in owners]
        return owners

    def model_from_caller(self, param: str, update: cst.Call) -> Tuple[str, Optional[cst.SimpleStatementLine]]:
        """A parameter of the function that builds the optimizer, traced to the calls of that function
        in this file (the value flow's arguments) and to the statement there that builds the model
        they pass: every call (`main("warmup", model)`, then `main(run, model)`) must pass the same."""
        fn = self.enclosing_function(update)
        if fn is None or self.enclosing_class(fn) is not None:
            return param, None
        found = {(edge.source.name, self.model_definition(edge.source.name, edge.site))  # type: ignore[arg-type]
                 for binding in self.c.bindings.get(fn, {}).get(param, ()) if binding.kind == "parameter"
                 for edge in self.values.edges_into(binding) if edge.kind == "argument"}
        if len(found) == 1:
            passed, definition = found.pop()
            if definition is not None:
                return passed, definition
        return param, None

    def cuda_condition(self, expr: str, anchor: Statement, wrap_after: Statement) -> Optional[str]:
        """The test guarding the model's `.cuda()` move (`if args.cuda: net.cuda()`), when that is how it
        reaches a GPU: on a GPU machine run without the flag it stays on the CPU, where DDP needs
        `device_ids=None`. None when the move is unconditional, in an else branch, or tests CUDA
        availability itself (the default already does)."""
        block = self.block_of(anchor)
        body = list(block.body) if block is not None else []  # type: ignore[union-attr]
        if anchor not in body or wrap_after not in body:
            return None
        region = body[body.index(anchor) : body.index(wrap_after) + 1]
        model = self.model_value(expr, anchor)
        moves = [s for s in self.statements_calling(model, ("cuda",))]
        moves += [s for s in _assignments(model) if _calls_cuda(s)]
        in_region = [m for m in moves if any(m is top or self.is_inside(m, top) for top in region)]
        guards = {next((a for a in self.ancestors(m) if isinstance(a, cst.If)), None) for m in in_region}
        if len(guards) != 1:
            return None  # no move, or moves under different conditions (if/else arms): nothing simple to say
        guard = guards.pop()
        if guard is None or not any(guard is top or self.is_inside(guard, top) for top in region):
            return None  # an unconditional move
        if not all(self.is_inside(m, guard.body) for m in in_region) or _is_cuda_available_call(guard.test):
            return None
        if any(isinstance(a, cst.If) and any(a is top or self.is_inside(a, top) for top in region) for a in self.ancestors(guard)):
            return None  # nested conditions: the innermost test alone is not the whole story
        return code_of(guard.test)

    def kept_on_self(self, expr: str, definition: cst.SimpleStatementLine) -> Tuple[str, cst.SimpleStatementLine]:
        """`self.model = model` (or a tuple assignment) later in the same function: the attribute is the
        model the rest of the class trains, moves and wraps; its statement is the definition."""
        scope = self.scope_of(definition)
        for binding in self.c.holding(expr, scope):
            if binding.statement is not definition:
                continue
            for edge in self.values.edges_from(binding):
                statement = edge.target.statement
                if (edge.kind in ("alias", "unpack") and edge.target.name.startswith("self.") and self.scope_of(statement) is scope
                        and self.comes_after(statement, definition) and self.block_of(statement) is not None):
                    return edge.target.name, statement  # type: ignore[return-value]
        return expr, definition

    def moved_before_wrap(self, definition: Statement, anchor: Statement, wrap_after: Statement) -> bool:
        """Is anything moved to a device (`.to(...)`, `.cuda()`) from the model's definition to its wrap,
        or does a helper build it (`build_model(cfg, device)`: it may move it)? When neither, the model
        stays where the file builds it, on the CPU."""
        block = self.block_of(anchor)
        body = list(block.body) if block is not None else []  # type: ignore[union-attr]
        if anchor not in body or wrap_after not in body:
            return True
        region = body[body.index(anchor) : body.index(wrap_after) + 1]
        if any(attribute_name(c.func) in N.MOVE_METHODS for top in region for c in descendants(top, cst.Call)):
            return True
        return any(isinstance(arg.value, cst.Name) and "device" in arg.value.value.lower()
                   for c in descendants(definition, cst.Call) for arg in c.args)

    def held_before_wrap(self, expr: str, definition: Statement, wrap_after: Optional[Statement]) -> Optional[str]:
        """A module built from the bare model before its wrap point and trained through
        (`seg = nn.Sequential(enc, dec)`, `net = SegmentationModule(encoder, decoder)`, then `seg(x)` and
        a backward in the loop): it holds the unwrapped model, so wrapping `enc` would sync nothing."""
        scope = self.scope_of(definition)
        model = self.model_value(expr, definition)
        for target, statement in self.c.assignments:
            if self.scope_of(statement) is not scope or statement in _assignments(model):
                continue
            small = statement.body[0]
            chain = _call_chain(getattr(small, "value", None))
            built = next((call for call in chain if _passes(call, model)), None)
            if built is None:
                continue
            qname = self.c.resolve(built.func) or ""
            holder = self.model_value(target, statement)
            if N.is_optimizer(qname) or qname in N.DATAPARALLEL or not self.trained_through(holder):
                continue
            moved = any(attribute_name(call.func) in N.MOVE_METHODS for call in chain) or self.is_moved(holder)
            if wrap_after is not None and self.comes_after(statement, wrap_after) and not moved:
                continue  # built after the wrap, never moved: it holds the DDP wrapper, whose forward syncs
            return target
        return None

    def moves_itself(self, expr: str, definition: Statement) -> bool:
        """Does this file move the model itself (`model.to(device)`, `Net().cuda()`, `model = model.cuda()`),
        or build it with a device argument? When not, a helper (`get_network(args)`) decides its device."""
        if any(attribute_name(call.func) in N.MOVE_METHODS for call in descendants(definition, cst.Call)):
            return True
        if any(isinstance(arg.value, cst.Name) and "device" in arg.value.value.lower()
               for call in descendants(definition, cst.Call) for arg in call.args):
            return True
        scope = self.scope_of(definition)
        model = self.model_value(expr, definition)
        for statement in _assignments(model, scope):
            # `model_fine = None` ... `if fine: model_fine = NeRF(...).to(device)`: every build counts.
            if any(attribute_name(call.func) in N.MOVE_METHODS for call in descendants(statement, cst.Call)):
                return True
        for call in self.c.calls:
            if not isinstance(call.func, cst.Attribute) or attribute_name(call.func) not in N.MOVE_METHODS:
                continue
            receiver = call.func.value
            # `model.cuda()`, or `DataParallel(model).cuda()`: the chain moves the model it wraps.
            if self.scope_of(call) is scope and (
                model.holds(receiver) or any(_passes(c, model) for c in _call_chain(receiver))
            ):
                return True
        return False

    def built_by_helper(self, definition: Statement) -> bool:
        """Is the model built by a function of the project (`net = get_network(args)`), which may or
        may not have moved it to a GPU? Classes (CapWords) and library builders start on the CPU."""
        value = getattr(definition.body[0], "value", None) if isinstance(definition, cst.SimpleStatementLine) else None
        chain = _call_chain(value)
        if not chain:
            return False
        builder = chain[-1].func
        if isinstance(builder, cst.Attribute):
            name = builder.attr.value
        elif isinstance(builder, cst.Name):
            name = builder.value
        else:
            return False  # `models.__dict__[args.arch]()`: a registry of model classes
        qname = self.c.resolve(builder) or ""
        return bool(name) and name[:1].islower() and not qname.startswith(_CPU_BUILDERS)

    def assigned_none(self, expr: str, definition: Statement) -> bool:
        """`model_fine = None` then `if args.N_importance > 0: model_fine = NeRF(...)`: it may stay None."""
        scope = self.scope_of(definition)
        return any(
            binding.scope is scope and isinstance(binding.value, cst.Name) and binding.value.value == "None"
            for binding in self.c.holding(expr, scope)
        )

    def model_value(self, expr: str, definition: Statement) -> Value:
        """The model `expr` that `definition` builds, as the value flow has it: the bindings of that
        name in its scope (self.x: its class's), and every name it is handed on to (`m =
        model.to(device)`, a parameter, a return), whatever they are called; made once per model."""
        scope = self.scope_of(definition)
        cache = self.__dict__.setdefault("_model_values", {})
        if (expr, scope) not in cache:
            cache[expr, scope] = self.values.follow(self.c.holding(expr, scope), MODEL, every=False)
        return cache[expr, scope]

    def calls_on(self, value: Value, methods: Sequence[str], calls: Optional[Sequence[cst.Call]] = None) -> List[cst.Call]:
        """The calls of `methods` made on the value (`model.cuda()`, `net.load_state_dict(...)`)."""
        return [
            call for call in (self.c.calls if calls is None else calls)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value in methods and value.holds(call.func.value)
        ]

    def statements_calling(self, value: Value, methods: Sequence[str]) -> List[cst.CSTNode]:
        return [self.statement_of(call) for call in self.calls_on(value, methods)]

    def applied_to(self, module: Value, model: Value) -> bool:
        """Is `module` a loss of `model`: called on what the model computes, its output (`output =
        model(x)`) or its own parameters (`model.decoder.weight`), and on something else, the target
        (`criterion(model.decoder.weight, model.decoder.bias, output, targets)`), and is what it
        returns the loss a backward() runs on? A network fed the model's output (`G_BA(G_AB(x))`, a
        decoder given a style code too), whose result goes on into another call, is not."""
        for call in self.c.calls:
            if module.holds(call.func):
                computed = [self._computed_by(arg.value, model) for arg in call.args]
                if any(computed) and not all(computed) and self._reaches_backward(call):
                    return True
        return False

    def _reaches_backward(self, node: cst.CSTNode, depth: int = 0) -> bool:
        """Does `node`'s value reach a `.backward()` through arithmetic and names only (`loss =
        raw_loss`, `loss = loss + reg`, `(loss / n).backward()`)?"""
        parent = self.parent(node)
        while isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)):
            node, parent = parent, self.parent(parent)
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "backward":
            return isinstance(self.parent(parent), cst.Call)
        if depth > 4 or not isinstance(parent, (cst.Assign, cst.AugAssign)) or parent.value is not node:
            return False
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        bindings = [self.c.binding_at[t] for t in targets if t in self.c.binding_at]
        return any(self._reaches_backward(r, depth + 1) for b in bindings for r in b.references)

    def _computed_by(self, node: cst.BaseExpression, model: Value) -> bool:
        while isinstance(node, (cst.Attribute, cst.Subscript)):
            node = node.value
        return model.holds(node) or any(
            isinstance(b.value, cst.Call) and model.holds(b.value.func) for b in self.c.refers.get(node, ())
        )

    def is_moved(self, value: Value) -> bool:
        """Is the value moved anywhere, `.to(...)` / `.cuda()` (a container moves what it holds)?"""
        return bool(self.calls_on(value, N.MOVE_METHODS))

    def forward(self, expr: str, definition: Statement) -> Forward:
        """What the training's forward calls for the parameters of the module `expr` built at
        `definition`, as the value flow has it (its member and element edges, migrator.graph.flow).

        DDP syncs the gradients of a forward that runs through its wrapper, and registers the
        parameters the module has when it is built: the wrap must be of the value training calls,
        once nothing more is added to it. Training that calls a module read out of a container
        (`module_list.append(model_s)`, then `module_list[0](x)`) calls what the container was
        given: the module is wrapped before it enters the first container, so that every
        container holds the wrapper. A container of modules that is never called (the optimizer's
        `trainable_list.parameters()`) stands for the modules put into it. Found once per model."""
        cache = self.__dict__.setdefault("_forwards", {})
        key = (expr, self.scope_of(definition))
        if key not in cache:
            cache[key] = Forward("untraced")  # a container holding itself is not followed round again
            cache[key] = self._forward(expr, definition)
        return cache[key]

    def _forward(self, expr: str, definition: Statement) -> Forward:
        model = self.model_value(expr, definition)
        if self.trained_through(model):
            return Forward("itself")
        holders = self.values.follow(model.bindings, _MEMBERS, every=False)
        containers = Value(self.values.index, every=False, bindings=holders.bindings - model.bindings)
        names = tuple(sorted({b.name for b in containers.bindings}))
        if containers.bindings and self.trained_through(containers):
            return Forward("container", containers=names, reason=(
                f"training calls a container that holds {expr} (`{names[0]}`), not {expr}: a DDP around {expr} would "
                f"not sync that forward; wrap the container in DDP by hand, once nothing more is put into it"))
        if containers.bindings:
            elements = self.values.follow(containers.bindings, _ELEMENTS, every=False)
            read = Value(self.values.index, every=False, bindings=elements.bindings - holders.bindings)
            if self.trained_through(read) or self.trained_through(containers, element=True):
                entered = self._entered(model, definition)
                if entered is None:
                    return Forward("unreached", containers=names, reason=(
                        f"training calls {expr} as an element of `{names[0]}`, which it enters outside the block "
                        f"where it is built: wrap {expr} in DDP by hand before it enters a container"))
                return Forward("element", entered=entered, containers=names)
        members = self._members_put_into(model)
        if not members or not all(self._attribute_of(r) for r in model.references()):
            return Forward("untraced")  # not a container, or one used otherwise than by its methods: may be run elsewhere
        found: List[str] = []
        for call, argument in members:
            member = code_of(argument)
            member_definition = self.model_definition(member, call) if isinstance(argument, cst.Name) else None
            route = self.forward(member, member_definition).route if member_definition is not None else None
            if route not in ("itself", "element"):
                return Forward("unreached", reason=(
                    f"the optimizer trains the modules put into `{expr}`, a container training never calls, and "
                    f"training does not call `{member}` (put into it at line {self.line_of(call)}) either, nor reads it "
                    f"out of a container: wrap the modules it calls in DDP by hand"))
            if member not in found:
                found.append(member)
        return Forward("members", containers=(expr,), members=tuple(found))

    def _attribute_of(self, reference: cst.CSTNode) -> bool:
        parent = self.parent(reference)
        return isinstance(parent, cst.Attribute) and parent.value is reference

    def _members_put_into(self, model: Value) -> List[Tuple[cst.Call, cst.BaseExpression]]:
        """(the call, the argument) for each value put into the module (`trainable.append(model_s)`)."""
        found = []
        for call in self.calls_on(model, tuple(ADDS_MEMBER)):
            args = [arg for arg in call.args if arg.keyword is None and not arg.star]
            position = ADDS_MEMBER[call.func.attr.value]  # type: ignore[attr-defined]
            value = args[position].value if position < len(args) else call
            values = [e.value for e in value.elements] if isinstance(value, (cst.List, cst.Tuple)) else [value]
            found += [(call, v) for v in values]
        return found

    def _entered(self, model: Value, definition: Statement) -> Optional[Statement]:
        """The statement of the block the module is built in where it is first put into a container."""
        block = self.block_of(self.branch_anchor(definition))  # type: ignore[arg-type]
        sites = [edge.site for binding in model.bindings for edge in self.values.edges_from(binding) if edge.kind == "member"]
        if not sites or block is None:
            return None
        first = min(sites, key=lambda site: self.c.order.get(site, 0))
        return self.top_statement_in(first, block)

    def container_moved(self, expr: str, definition: Statement) -> bool:
        """Is a container the module is put into moved to a device (`module_list.cuda()`)?"""
        model = self.model_value(expr, definition)
        holders = self.values.follow(model.bindings, _MEMBERS, every=False)
        return self.is_moved(Value(self.values.index, every=False, bindings=holders.bindings - model.bindings))

    def line_of(self, node: cst.CSTNode) -> int:
        start = self.positions.start(node)
        return start[0] if start else 0

    def trained_through(self, value: Value, element: bool = False) -> bool:
        """Is the value called in a loop that trains (migrator.dataflow.calls)? With `element`: or an
        element read out of it there (`module_list[0](x)`)."""
        def called(func: cst.BaseExpression) -> bool:
            if element and isinstance(func, cst.Subscript):
                func = func.value
            return value.holds(func)
        return any(
            any(called(call.func) for call in self.calls_inside.get(loop, ())) and self.call_graph.trains(loop)
            for loop in self.c.loops
        )

    def loads_between(self, expr: str, start: Statement, end: Statement) -> Tuple[cst.Call, ...]:
        """The calls loading a state dict into the model from `start` to `end` (same block)."""
        block = self.block_of(start)
        body = list(block.body) if block is not None else []  # type: ignore[union-attr]
        if start not in body or end not in body:
            return ()
        calls = [call for statement in body[body.index(start) : body.index(end) + 1] for call in descendants(statement, cst.Call)]
        return tuple(call for call in self.calls_on(self.model_value(expr, start), ("load_state_dict",), calls) if call.args)

    def module_reads_between(self, expr: str, start: Statement, end: Statement) -> Tuple[cst.Attribute, ...]:
        """`self.model.module` from the DataParallel line `start` to `end`, after which the DDP wrap
        goes now: the model is bare there (pytorch-deeplab-xception's `if args.cuda:
        self.model.module.load_state_dict(...)` in the resume block below its DataParallel)."""
        block = self.block_of(start)
        body = list(block.body) if block is not None else []  # type: ignore[union-attr]
        if start not in body or end not in body:
            return ()
        inside = body[body.index(start) : body.index(end) + 1]
        model = self.model_value(expr, start)
        return tuple(
            parent for node in model.references()
            for parent in (self.parent(node),)
            if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "module"
            and any(self.is_inside(node, statement) for statement in inside)
        )

    def moved_in_callee(self, expr: str, definition: Optional[Statement]) -> Optional[cst.Call]:
        """A model the file never moves before its wrap, moved later by a function it is handed to:
        `Trainer.__init__(self, model, gpu_id)` doing `self.model = model.to(gpu_id)`, followed by the
        value flow (migrator.graph.flow), whatever the function calls it.

        A DDP built on CPU parameters that are moved afterwards never sees the moved tensors; the file is
        declined (DDP104) rather than wrapped in the wrong place."""
        if definition is None:
            return None
        home = self.scope_of(definition)
        value = self.values.follow(self.c.holding(expr, home), MODEL, every=False)
        for call in self.c.calls:
            receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
            if attribute_name(call.func) not in N.MOVE_METHODS or not isinstance(receiver, (cst.Name, cst.Attribute)):
                continue
            scope = self.scope_of(call)
            if scope is not home and isinstance(scope, cst.FunctionDef) and value.holds(receiver):
                return call
        return None

    def owning_model(self, expr: str, update: cst.Call) -> Tuple[str, Optional[cst.SimpleStatementLine]]:
        """The shortest prefix of `model.backbone` (never bare `self`) that is assigned in the update's scope."""
        parts = expr.split(".")
        for end in range(1, len(parts)):
            prefix = ".".join(parts[:end])
            if prefix == "self":
                continue
            definition = self.model_definition(prefix, update)
            if definition is not None:
                return prefix, definition
        return expr, None

    def parameter_owners(self, update: cst.Call) -> List[str]:
        """The models an update trains: an optimizer's parameter owners, or the receiver of a
        hand-written update's `model.parameters()`."""
        if update in self.c.manual_updates:
            return [code_of(update.func.value)]  # type: ignore[attr-defined]
        if update in self.c.optimizer_helpers:
            return self.models_passed(update)
        owners = _parameter_owners(update)
        for owner in self.group_parameter_owners(update):
            if owner not in owners:
                owners.append(owner)
        return owners or self.parameter_owners_nearby(update)

    def group_parameter_owners(self, optimizer_call: cst.Call) -> List[str]:
        """`{"params": head.weight, "weight_decay": 4e-4}`: a module whose single Parameter trains.

        Only a module (`head.cuda()`, `DataParallel(head)`, `head.train()`): `{"params": cfg.weights}`
        never makes `cfg` a model."""
        owners: List[str] = []
        if not optimizer_call.args:
            return owners
        # `train_params = [{"params": model.get_1x_lr_params(), ...}]; SGD(train_params)` (deeplab)
        for group in descendants(self.c.assigned_value(optimizer_call.args[0].value, optimizer_call), cst.Dict):
            for element in group.elements:
                key = getattr(element, "key", None)
                if not isinstance(key, cst.SimpleString) or key.evaluated_value != "params":
                    continue
                value = element.value
                method = attribute_name(value.func) if isinstance(value, cst.Call) else None
                if method is not None and method.endswith(("params", "parameters")) and isinstance(value.func, cst.Attribute):
                    # `model.get_10x_lr_params()`: a method of the model that yields its parameters
                    owner = code_of(value.func.value)
                    if owner not in owners and owner != "self":
                        owners.append(owner)
                elif isinstance(value, cst.Attribute) and isinstance(value.value, (cst.Name, cst.Attribute)):
                    owner = code_of(value.value)
                    if owner not in owners and self.used_as_module(value.value):
                        owners.append(owner)
        return owners

    def models_passed(self, helper: cst.Call) -> List[str]:
        """The models handed to an optimizer-building helper: arguments used as modules elsewhere
        (moved, wrapped in DataParallel, switched to train mode), so that `cfg` or `args` never are."""
        if helper in self.c.trained_arguments:  # the callee's optimizer is built on these (project_training)
            return [code_of(value) for value in self.c.trained_arguments[helper]]
        found = []
        for arg in helper.args:
            expr = code_of(arg.value)
            owners = _parameter_owners_in(self.c.parameters_value(arg.value, helper))
            if owners:
                found += [o for o in owners if o not in found]
            elif isinstance(arg.value, (cst.Name, cst.Attribute)) and self.used_as_module(arg.value) and expr not in found:
                found.append(expr)
        return found

    def used_as_module(self, node: cst.BaseExpression) -> bool:
        """Is the value `node` reads a module: switched to train mode, moved, asked for its parameters
        or state, or wrapped in DataParallel, anywhere it flows (`cfg` or `args` never are)?"""
        value = self.values.follow(self.c.bindings_of(node), MODEL, every=False)
        for reference in value.references():
            parent = self.parent(reference)
            if isinstance(parent, cst.Attribute) and parent.value is reference and parent.attr.value in _MODULE_METHODS:
                if isinstance(self.parent(parent), cst.Call):
                    return True
            holder = self.parent(self.parent(reference)) if isinstance(parent, cst.Arg) else None
            if isinstance(holder, cst.Call) and holder.args[0] is parent and self.c.resolve(holder.func) in N.DATAPARALLEL:
                return True
        return False

    def model_definition(self, expr: str, optimizer_call: cst.Call) -> Optional[cst.SimpleStatementLine]:
        """The first statement binding `expr` where the optimizer's function reads it (its own, or an
        enclosing scope's: a function that updates a global model, `def train(): ... for p in
        model.parameters():`, trains the one built at module level); for `self.x`, the class's."""
        fn = self.enclosing_function(optimizer_call)
        if expr.startswith("self.") and expr.count(".") == 1:
            cls = self.enclosing_class(optimizer_call)
            found = list(self.c.bindings.get(cls, {}).get(expr, ())) if cls is not None else []
        elif "." not in expr:
            reader = fn or self.module
            # The scope's own statements first: a `global model` assignment in another function
            # (a resume helper's `model = torch.load(f)`) runs only when that function does.
            found = sorted(self.c.holding(expr, reader), key=lambda b: self.scope_of(b.statement) is not reader)
        else:
            return None  # `model.backbone`: the model it belongs to is its owner (owning_model)
        for binding in sorted(found, key=lambda b: self.c.order.get(b.statement, 0)) if expr.startswith("self.") else found:
            statement = binding.statement
            if binding.kind not in ("assignment", "unpacking", "attribute") or not isinstance(statement, cst.SimpleStatementLine):
                continue
            if not isinstance(self.block_of(statement), (cst.Module, cst.IndentedBlock)):
                continue
            if fn is not None and _unpacks_parameter(statement, self.c.params.get(fn, ())):
                return None  # `(enc, dec) = nets` with `nets` an argument: built by the caller, not here.
            return statement
        return None

    def branch_anchor(self, definition: cst.SimpleStatementLine) -> Statement:
        """Where the walk to the wrap point starts: the definition, lifted out of the branches holding it.

        A model chosen in `if args.arch == ...: / elif: / else:`, or unpickled in a resume branch,
        is one model: it is wrapped once, after the whole `if` (and after the moves that follow
        it), never inside each branch. Lifting goes through if/elif/else, try and with blocks, and
        stops at loops and functions, and at a statement that itself holds the training loop
        (`if args.train: model = Net(); for epoch ...`): there the wrap stays inside.
        """
        node: Statement = definition
        while True:
            holder = self.branch_holder(node)
            if holder is None or self.holds_training(holder):
                return node
            node = holder

    def branch_holder(self, statement: Statement) -> Optional[Statement]:
        """The if/try/with statement whose branch `statement` sits in (None: a loop, a def or the top)."""
        branch_parts = (cst.IndentedBlock, cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally, cst.With)
        for anc in self.ancestors(statement):
            if not isinstance(anc, branch_parts):
                return None
            if isinstance(anc, (cst.If, cst.Try, cst.With)) and self.block_of(anc) is not None:
                return None if isinstance(anc, cst.If) and N.is_main_guard(anc.test) else anc
        return None

    def holds_training(self, statement: Statement) -> bool:
        """Does `statement` contain a loop that trains (backward, a step, or a call of this file's functions)?"""
        fn = self.enclosing_function(statement)
        return any(
            self.is_inside(loop, statement) and self.enclosing_function(loop) is fn and self.call_graph.trains(loop)
            for loop in self.c.loops
        )

    def last_preparation(self, expr: str, definition: Statement, keyed_from: Optional[Statement] = None) -> Statement:
        """The last statement, before training starts, that still prepares the model.

        Walks forward from the definition to the first loop (training) or return; statements
        that move, compile, load or re-assign the model, also inside `if`/`with`/`try` blocks
        (`if args.resume: model.load_state_dict(...)`), push the wrap further down: DDP must see the
        model on its final device, and checkpoints load into it without a `module.` prefix.

        `keyed_from`: the statement of a DataParallel script's `model = DataParallel(model)`. Checkpoints
        loaded after it carry DataParallel's `module.` keys (and the script saves them so): they must
        load into the wrapper, so loads after that line do not push the wrap down; moves still do.
        """
        block = self.block_of(definition)
        body = list(block.body)  # type: ignore[union-attr]
        last: Statement = definition
        for statement in body[body.index(definition) + 1 :]:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue  # defined here, run later: neither a preparation nor training
            if _returns(statement) or self.starts_training(statement, expr):
                break
            keyed = keyed_from is not None and (statement is keyed_from or self.comes_after(statement, keyed_from))
            if self.prepares(statement, expr, loads=not keyed):
                last = statement
        return last

    def starts_training(self, statement: Statement, expr: str) -> bool:
        """Is `statement` where training (or any use of the model in a loop) begins?

        A loop that only builds parameter groups (`for k, v in model.named_parameters():`) or
        renames checkpoint keys does not: the model is still being prepared after it (detectron-
        and faster-rcnn-style scripts call `model.cuda()` and load a checkpoint below such loops).
        """
        if isinstance(statement, (cst.For, cst.While)):
            model = self.model_value(expr, statement)
            return self.holds_training(statement) or any(self.is_inside(r, statement.body) for r in model.references())
        if not isinstance(statement, cst.SimpleStatementLine):
            return self.holds_training(statement)
        if any(call in self.c.trained_arguments for call in descendants(statement, cst.Call)):
            return True  # `train(config, model, ...)` of a project module that trains it
        return self.call_graph.trains(statement)  # `loss.backward()`, or `train(model, loader)` of this file

    def prepares(self, statement: Statement, expr: str, loads: bool = True) -> bool:
        if isinstance(statement, cst.SimpleStatementLine):
            inside = lambda s: s is statement  # noqa: E731
        else:
            inside = lambda s: self.is_inside(s, statement)  # noqa: E731
        model = self.model_value(expr, statement)
        # Rebound (`model = model.cuda()`), or moved under another name (`m = model.to(device)`): the
        # value flow's bindings of the model, whatever they are called.
        if any(inside(s) for s in _assignments(model)):
            return True
        if any(
            model.holds(r) and _prepares_model(meth) and (loads or not meth.startswith("load")) and inside(s)
            for r, meth, s in self.c.expr_calls
        ):
            return True
        # A change to which parameters it has or which of them train (DDP registers those that require
        # grad when it is built): here, or in a function of the file this statement hands the model to.
        changes = self.parameter_changes(model)
        if any(self.is_inside(change, statement) for change, _ in changes):
            return True
        # `init_network(model)`, `weights_init(net)`: a function that finishes the model it is handed
        # (DDP broadcasts rank 0's parameters when it is built: a re-initialisation after it is not synced).
        for call in descendants(statement, cst.Call):
            if isinstance(call.func, cst.Name) and _prepares_model(call.func.value) and _passes(call, model):
                return True
            callee = self.call_graph.callee(call) if changes else None
            if callee is not None and _passes(call, model) and any(self.is_inside(change, callee) for change, _ in changes):
                return True
        return False

    def parameter_changes(self, model: Value) -> Tuple[Tuple[cst.CSTNode, bool], ...]:
        """Where the uses of the model value change which parameters it has or which of them train,
        and whether the change is to a part of it only (see changes_parameters), in source order;
        found once per model value."""
        cache = self.__dict__.setdefault("_parameter_changes", {})
        if id(model) not in cache:
            found = {change for reference in model.references() for change in (self.changes_parameters(reference),) if change is not None}
            cache[id(model)] = tuple(sorted(found, key=lambda change: self.c.order.get(change[0], 0)))
        return cache[id(model)]

    def changes_parameters(self, reference: cst.CSTNode, depth: int = 0) -> Optional[Tuple[cst.CSTNode, bool]]:
        """Where this use of a module (`reference`, a node that holds it) changes which parameters it
        has or which of them train, through the module or any attribute path below it:
        `model.fc = nn.Linear(...)`, `model.backbone.requires_grad_(False)`, `model.add_module(...)`,
        and `for p in model.features.parameters(): p.requires_grad = False` (the parts of the module
        a loop walks are followed to what is done with them). None when it does not.

        With it, whether the change is to a part of the module only (a submodule, a new one, the
        parameters a loop picks by name), or to all of it (`model.requires_grad_(False)`, every `p`
        of `model.parameters()`: a GAN's discriminator switched off for the generator's step)."""
        node = reference
        parent = self.parent(node)
        part = False
        while True:
            if isinstance(parent, (cst.Attribute, cst.Subscript)) and parent.value is node:  # `model.layer4[0]`
                outer = self.parent(parent)
                method = isinstance(outer, cst.Call) and outer.func is parent
                if not method and not (isinstance(parent, cst.Attribute) and parent.attr.value == "module" and node is reference):
                    part = True  # a path below the module (DataParallel's own `.module` is all of it)
                node, parent = parent, self.parent(parent)
                continue
            if isinstance(parent, cst.Call) and parent.func is node and isinstance(node, cst.Attribute):
                method = node.attr.value
                if method in N.SETS_PARAMETERS or method in ADDS_MEMBER:  # `trainable.append(head)` adds its parameters
                    return parent, part or method != "requires_grad_"
                if method in N.MODULE_PARTS:
                    found = self._changes_parts(parent, depth) if depth < 3 else None
                    return (found[0], found[1] or part) if found is not None else None
                if method in RETURNS_SELF:  # `model.features.eval().requires_grad_(False)`
                    node, parent = parent, self.parent(parent)
                    continue
            break
        if node is not reference and isinstance(parent, cst.AssignTarget) and parent.target is node:
            return node, True  # `model.fc = ...`, `model[-1] = ...`, `p.requires_grad = False`
        return None

    def _changes_parts(self, parts: cst.Call, depth: int) -> Optional[Tuple[cst.CSTNode, bool]]:
        """`for name, p in model.named_parameters(): ... p.requires_grad_(False)`: the first change a
        loop over the module's parts makes through the names it binds; to a part only when the
        loop picks what it changes (an `if` in its body, a comprehension's condition) or changes a
        part of each element."""
        loop = self.parent(parts)
        if not isinstance(loop, (cst.For, cst.CompFor)) or loop.iter is not parts:
            return None
        for name in descendants(loop.target, cst.Name):
            binding = self.c.binding_at.get(name)
            for reference in binding.references if binding is not None else ():
                found = self.changes_parameters(reference, depth + 1)
                if found is None:
                    continue
                change, part = found
                if isinstance(change, cst.Attribute) and change.value is reference and change.attr.value == "requires_grad":
                    part = False  # `p.requires_grad = False` on the element itself
                picked = bool(getattr(loop, "ifs", ())) or any(
                    isinstance(a, cst.If) for a in self.ancestors(change) if self.is_inside(a, loop) and a is not loop)
                return change, part or picked
        return None

    def parameters_changed_later(self, expr: str, definition: Statement, wrap_after: Statement) -> Tuple[cst.CSTNode, ...]:
        """Changes to which of the model's parameters train that no wrap point can come after: made
        after the wrap, inside a loop that trains or before a later one in the same function (a
        second phase that unfreezes the backbone). DDP keeps reducing the parameters it registered
        when it was built (DDP116). Only `requires_grad` changes and the methods that add
        parameters count here: in a training loop, `model.hidden = model.init_hidden(bsz)` keeps
        state, it adds no parameter."""
        found = []
        for change, part in self.parameter_changes(self.model_value(expr, definition)):
            if not part or (isinstance(change, cst.Attribute) and change.attr.value != "requires_grad"):
                continue
            if self.scope_of(change) is self.scope_of(wrap_after) and not self.comes_after(change, wrap_after):
                continue
            fn = self.enclosing_function(change)
            if any(self.call_graph.trains(loop) and (self.is_inside(change, loop) or (
                    self.enclosing_function(loop) is fn and self.comes_after(loop, self.statement_of(change))))
                   for loop in self.c.loops):
                found.append(change)
        return tuple(found)
