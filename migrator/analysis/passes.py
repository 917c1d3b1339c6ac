"""`_Analysis`: turns the collected sites into facts.

The steps by concern live in `entry.py`, `models.py`, `devices.py` and `imports.py` as plain
functions taking the analysis; they are bound here as its methods.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import ScopeOwner
from migrator.dataflow import Flow
from migrator.dataflow.calls import CallGraph
from migrator.graph.flow import ValueFlow
from migrator.analysis.collector import _Collector
from migrator.analysis.facts import EntryPoint, LazyPositions, ModelFact, ScriptFacts
from migrator.analysis.helpers import Block, Statement, _has_map_location, code_of
from migrator.analysis import distributed
from migrator.analysis.spawn import spawn_facts
from migrator.context import FileContext
from migrator.tree import class_constructors, class_methods, descendants
from migrator.analysis import devices as _devices, entry as _entry, imports as _imports, models as _models


class _Analysis:
    """Turns the collected sites into facts. Read-only; small named steps."""

    def __init__(self, module: cst.Module, c: _Collector, context: Optional[FileContext] = None,
                 source: Optional[str] = None) -> None:
        self.module = module
        self.c = c
        self.context = context
        self._local_rank_arguments: Optional[Tuple[cst.Call, ...]] = None  # imports.local_rank_arguments
        self.parents = c.parents
        self.positions = LazyPositions(module, source)
        self.calls_inside = self._index_calls()
        self.call_graph = CallGraph(self)
        self.values = ValueFlow(c, self.call_graph.callee)

    def _index_calls(self) -> Dict[cst.CSTNode, List[cst.Call]]:
        """Calls under each loop, function and class, from one walk up each call's ancestors."""
        index: Dict[cst.CSTNode, List[cst.Call]] = {self.module: list(self.c.calls)}
        kinds = (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.With, cst.If)
        for call in self.c.calls:
            for anc in self.ancestors(call):
                if isinstance(anc, kinds):
                    index.setdefault(anc, []).append(call)
        return index

    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        return container is self.module or any(anc is container for anc in self.ancestors(node))

    def comes_after(self, node: cst.CSTNode, statement: cst.CSTNode) -> bool:
        """Does `node` come after the whole of `statement` in the source?"""
        return self.c.order.get(node, -1) > self.c.ends.get(statement, 1 << 62)

    # -- tree helpers ---------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode):
        node = self.parent(node)
        while node is not None:
            yield node
            node = self.parent(node)

    def statement_of(self, node: cst.CSTNode) -> Optional[Statement]:
        for anc in [node, *self.ancestors(node)]:
            if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return anc  # type: ignore[return-value]
        return None

    def block_of(self, statement: cst.CSTNode) -> Optional[Block]:
        parent = self.parent(statement)
        return parent if isinstance(parent, (cst.Module, cst.IndentedBlock)) else None

    def scope_of(self, node: cst.CSTNode) -> Optional[ScopeOwner]:
        return self.c.owner_of(node)

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.FunctionDef)), None)

    def enclosing_class(self, node: cst.CSTNode) -> Optional[cst.ClassDef]:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.ClassDef)), None)

    def calls(self, qnames: FrozenSet[str]) -> List[cst.Call]:
        """The calls of any of `qnames`, in source order (a set's order changes with the hash seed,
        and the first one found is the one a finding names)."""
        found = [call for q in qnames for call in self.c.calls_by_qname.get(q, [])]
        return sorted(found, key=self.c.call_order.__getitem__) if len(found) > 1 else found

    # -- facts ------------------------------------------------------------------------
    def facts(self) -> ScriptFacts:
        guard = self.c.main_guards[0] if self.c.main_guards else None
        dp_sites = tuple(self.dataparallel_site(call) for call in self.calls(N.DATAPARALLEL))
        elsewhere = self.trained_elsewhere()
        ddp_targets = self.ddp_wrapped_targets()
        models = self.trained_models(dp_sites, ddp_targets)
        import_time_model = self.import_time_model(guard, models)
        hoisted = self.hoist_into_guard(guard, models) if import_time_model is not None else None
        if hoisted is not None:
            import_time_model = None
            entry = hoisted[0]
        else:
            entry = None if import_time_model is not None else self.entry_point(guard, models, elsewhere)
        if entry is None and models and import_time_model is None and self.context is not None and self.context.set_up_by:
            entry = _entry.caller_entry()
        device_var = self.entry_device_var(entry)
        helper_devices = self.helper_devices(models, entry)
        if helper_devices:
            # DDP002 gives such a device this process's GPU only when it is one: the model is on a GPU
            # exactly when the helper's device is a CUDA one, and DDP's device_ids follow it.
            models = tuple(
                replace(m_, cuda_condition=next(
                    (f'str({d.name}).startswith("cuda")' for d in helper_devices if m_.expr in d.models), None))
                if m_.cuda_condition is None else m_
                for m_ in models
            )
        cuda_calls = tuple(self.cuda_call(call) for call in self.c.cuda_calls if not self.is_chained_dp(call, dp_sites))
        device_var_needed = device_var is None and entry is not None and any(
            not c.guarded and not c.pinned and c.scope is entry.scope for c in cuda_calls
        )
        if device_var_needed:
            device_var = "device"
            cuda_calls = tuple(self.with_entry_device(c, entry) for c in cuda_calls)
            models = tuple(
                replace(m_, device_expr="device") if m_.device_expr is None and m_.scope is entry.scope else m_
                for m_ in models
            )
        blocking_dp, other_dp = self.split_dataparallel(dp_sites, models)
        facts = ScriptFacts(
            module=self.module,
            positions=self.positions,
            local_names={owner: frozenset(names) for owner, names in self.c.bound.items()},
            owners=self.c.owners,
            order=self.c.order,
            parents=self.c.parents,
            before_setup=frozenset(),
            entry=entry,
            has_main_guard=guard is not None,
            distributed=distributed.evidence(self, self.context),
            has_destroy_process_group=bool(self.calls(N.DESTROY_PROCESS_GROUP)),
            models=models,
            blocking_dataparallel=blocking_dp,
            other_dataparallel=other_dp,
            evaluation_dataparallel=tuple(
                site for site in other_dp
                if self.feeds_trained_model(site, models) and self.evaluates_after_training(site, models)
            ),
            device_literals=tuple(filter(None, (self.device_literal(s) for s in self.c.device_strings))),
            cuda_calls=cuda_calls,
            gpu_indexes=self.gpu_indexes(),
            helper_devices=helper_devices,
            functional_dataparallel=tuple(self.calls(N.FUNCTIONAL_DATAPARALLEL)),
            download_statements=self.download_statements(entry),
            batch_scalings=self.batch_scalings(),
            worker_scalings=self.worker_scalings(),
            visible_devices=self.visible_devices(),
            import_time_model=import_time_model,
            hoisted_into_guard=(guard, hoisted[1]) if hoisted is not None else None,
            device_var_needed=device_var_needed,
            device_var=device_var,
            local_rank_at_module=self.module_level_device_statement(entry),
            names=self.import_names(),
            dataparallel_imports=self.dataparallel_imports(),
            calls=tuple(self.c.calls),
            loops=tuple(self.c.loops),
            attributes=tuple(self.c.attributes),
            assigns=tuple(self.c.assign_nodes),
            import_statements=tuple(self.c.import_statements),
            functions=tuple(self.c.functions),
            spawn=spawn_facts(self),
            trained_elsewhere=elsewhere if entry is not None and entry.kind != "caller" else (),
            **self.flow_facts(models, entry),
        )
        facts = replace(facts, models=tuple(replace(m_, rebound=self.rebound.get(m_.expr, ())) for m_ in facts.models))
        return replace(facts, before_setup=self.functions_before_setup(facts))

    def functions_before_setup(self, facts: ScriptFacts) -> FrozenSet[cst.CSTNode]:
        """Module-level functions called before the setup (`_init_(cfg)` in the guard, before main())."""
        functions = {f.name.value: f for f in self.module.body if isinstance(f, cst.FunctionDef)}
        functions.update(class_constructors(self.module))  # `CharDataset(text)`: its __init__ runs there
        methods = class_methods(self.module)  # `meter.display()`: every method of that name
        found: Set[cst.CSTNode] = set()
        changed = True
        while changed:
            changed = False
            for call in self.c.calls:
                if isinstance(call.func, cst.Name):
                    called = [functions[call.func.value]] if call.func.value in functions else []
                elif isinstance(call.func, cst.Attribute):
                    called = methods.get(call.func.attr.value, [])
                else:
                    called = []
                called = [fn for fn in called if fn not in found and not (facts.entry is not None and fn is facts.entry.scope)]
                if not called:
                    continue
                caller = replace(facts, before_setup=frozenset(found))
                if not caller.after_setup(call):
                    found.update(called)
                    changed = True
        return frozenset(found)

    def flow_facts(self, models: Tuple[ModelFact, ...], entry: Optional[EntryPoint]) -> dict:
        entry_function = entry.scope if entry is not None and entry.kind == "function" else None
        flow = Flow(self, models, entry_function, entry.scope if entry is not None else None,
                    set_up_by_caller=entry is not None and entry.kind == "caller",
                    trained_through=self.context.trains_through if self.context is not None else frozenset())
        loaders = flow.loaders()
        wrapped = [m_ for m_ in models if not m_.already_ddp and m_.wrap_after is not None]
        self.rebound = {m_.expr: flow.reassignments(m_) for m_ in wrapped}
        uses = tuple(use for model in wrapped for use in flow.model_uses(model))
        saves = flow.saves()
        logged = flow.logged_statements(loaders)
        return dict(
            loaders=loaders,
            saves=saves,
            reads_after_write=flow.reads_after_write(saves),
            accumulation_steps=tuple(flow.accumulation_steps()),
            batchnorm_layers=tuple(self.calls(N.BATCHNORM)),
            converts_sync_batchnorm=any(N.attribute_name(call.func) == "convert_sync_batchnorm" for call in self.c.calls),
            rank_divergent=tuple(flow.rank_divergent()),
            local_rank_arguments=self.local_rank_arguments(),
            launch_literals=self.launch_literals(),
            required_arguments=self.required_arguments(),
            legacy_launch_imports=tuple(self.c.legacy_launch_imports),
            progress_bars=tuple(
                call for call in self.calls(N.PROGRESS_BARS)
                if not any(arg.keyword is not None and arg.keyword.value == "disable" for arg in call.args)
            ),
            tracker_runs=tuple(call for call in self.calls(N.TRACKER_RUNS) if not flow.under_rank_check(call)),
            log_statements=tuple(statement for statement, shared in logged if not shared),
            hoisted_prints=flow.hoisted_prints(logged),
            penalty_backwards=flow.penalty_backwards() if wrapped else (),
            retained_backwards=flow.retained_backwards() if wrapped else (),
            model_uses=uses,
            bare_unwraps=flow.bare_unwraps(uses),
            directory_creations=self.directory_creations(),
            returned_models=tuple((name, m_) for m_ in wrapped for name in flow.returned_models(m_)),
            whole_model_saves=tuple(self.whole_model_saves(flow, wrapped)),
            torch_loads=tuple(
                (call, self.device_expr_at(call)) for call in self.calls(N.TORCH_LOAD) if not _has_map_location(call)
            ),
        )

    def download_statements(self, entry: Optional[EntryPoint]) -> Tuple[Statement, ...]:
        """Statements that download or unpack a data set, which every rank would run at once: a
        data set built with `download=True` (torchvision's CIFAR10(..., download=True)); in a
        function, a call that fetches or extracts (`urllib.request.urlretrieve`, `tarfile.open`,
        `requests.get`) or a call of this file's own function that does (`download_data(root)`,
        the call site in the entry point, not the helper's body). An `if not os.path.exists(root):`
        around one is part of it: a rank that checks after rank 0 finished would skip the barrier."""
        found: List[Statement] = []
        for call in self.c.calls:
            if any(arg.keyword is not None and arg.keyword.value == "download" and N.is_name(arg.value, "True") for arg in call.args):
                statement = self.statement_of(call)
                if isinstance(statement, cst.SimpleStatementLine) and statement not in found:
                    found.append(statement)
        if entry is None:
            return tuple(found)
        helpers = self.downloading_functions(entry.scope)
        fetches = set(self.calls(N.DOWNLOADS))
        for call in self.c.calls:
            if call not in fetches and not (isinstance(call.func, cst.Name) and call.func.value in helpers):
                continue
            if self.scope_of(call) is not entry.scope:
                continue  # a helper's own body, a method (a Dataset's __getitem__): its caller decides
            statement = self.download_unit(call, entry.scope)
            if statement is not None and statement not in found:
                found.append(statement)
        # `with requests.get(url) as r: with tarfile.open(fileobj=r.raw) as t: ...`: one download,
        # barriered once, around the outermost statement (nested pairs would pair up wrongly).
        chosen = set(found)
        outermost = [s for s in found if not any(a in chosen for a in self.ancestors(s))]
        return tuple(sorted(outermost, key=lambda node: self.c.order.get(node, 0)))

    def downloading_functions(self, entry: ScopeOwner) -> Dict[str, cst.FunctionDef]:
        """This file's module-level functions that download or unpack, also through each other
        (the entry point aside)."""
        functions = {f.name.value: f for f in self.module.body if isinstance(f, cst.FunctionDef) and f is not entry}
        fetches = set(self.calls(N.DOWNLOADS))
        found: Dict[str, cst.FunctionDef] = {}
        changed = True
        while changed:
            changed = False
            for call in self.c.calls:
                owner = self.scope_of(call)
                if not isinstance(owner, cst.FunctionDef) or functions.get(owner.name.value) is not owner:
                    continue
                if owner.name.value in found:
                    continue
                if call in fetches or (isinstance(call.func, cst.Name) and call.func.value in found):
                    found[owner.name.value] = owner
                    changed = True
        return found

    def download_unit(self, call: cst.Call, owner: ScopeOwner) -> Optional[Statement]:
        """The statement the barriers go around: the call's own, or the outermost `if` checking the
        file system around it. None inside a loop (a barrier per iteration is not a download)."""
        statement = self.statement_of(call)
        unit = statement
        for anc in self.ancestors(call):
            if anc is owner:
                break
            if isinstance(anc, (cst.For, cst.While)):
                return None
            if isinstance(anc, cst.If) and any(
                N.attribute_name(c.func) in N.PATH_CHECKS for c in descendants(anc.test, cst.Call)
            ):
                unit = anc
        return unit if self.block_of(unit) is not None else None

    def batch_scalings(self) -> Tuple[Tuple[cst.SimpleStatementLine, str], ...]:
        """`opt.batch_size = opt.batch_size * opt.num_gpu` (num_gpu = torch.cuda.device_count()),
        `batch_size *= torch.cuda.device_count()`: DataParallel's way to keep the per-GPU batch."""
        return tuple((statement, target) for statement, target, _ in self.gpu_count_scalings("batch"))

    def worker_scalings(self) -> Tuple[Tuple[cst.SimpleStatementLine, str, Optional[cst.BaseExpression]], ...]:
        """`opt.workers = opt.workers * opt.num_gpu`, `num_workers *= torch.cuda.device_count()`: one
        DataParallel process fed every GPU; under torchrun each process would start that many."""
        return self.gpu_count_scalings("worker")

    def gpu_count_scalings(self, word: str) -> Tuple[Tuple[cst.SimpleStatementLine, str, Optional[cst.BaseExpression]], ...]:
        """(statement, target, the other factor) for assignments to a name containing `word` that
        multiply by the GPU count: the call, a name bound to it, `max(n_gpu, 1)` or `(n_gpu or 1)`.
        The other factor is None for `x *= n_gpu`."""
        counts = self.calls(frozenset({"torch.cuda.device_count"}))
        if not counts:
            return ()
        names = {code_of(call) for call in counts}  # the call itself, and the names it is kept in
        for call in counts:
            names.update(code_of(target) for target in self.c._statement_of_call.get(call, ()))
        found = []
        for target, statement in self.c.assignments:
            small = statement.body[0]
            if word not in target.split(".")[-1].lower():
                continue
            if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.MultiplyAssign):
                if _is_gpu_count(small.value, names):
                    found.append((statement, target, None))
            elif isinstance(small, cst.Assign) and isinstance(small.value, cst.BinaryOperation) and isinstance(small.value.operator, cst.Multiply):
                left, right = small.value.left, small.value.right
                if _is_gpu_count(right, names) or _is_gpu_count(left, names):
                    found.append((statement, target, left if _is_gpu_count(right, names) else right))
        return tuple(found)

    def directory_creations(self) -> Tuple[Tuple[cst.Call, str], ...]:
        """`os.makedirs(d)` and `os.mkdir(d)` that would raise when the directory exists."""
        found = []
        for call in self.calls(frozenset({"os.makedirs", "os.mkdir"})):
            keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
            positional = [arg for arg in call.args if arg.keyword is None]
            if "exist_ok" in keywords or any(arg.star for arg in call.args):
                continue
            if N.attribute_name(call.func) == "makedirs" and len(positional) > 2:
                continue  # makedirs(d, mode, exist_ok) positionally
            spelled = code_of(call.func.value) if isinstance(call.func, cst.Attribute) else "os"
            found.append((call, spelled))
        return tuple(found)

    def whole_model_saves(self, flow: Flow, wrapped) -> List[Tuple[cst.CSTNode, ModelFact]]:
        """`torch.save(model, f)` and `state = {"net": net, ...}; torch.save(state, f)` after the wrap:
        the pickled object (an Arg or a DictElement) must be the bare module, since a pickled DDP
        cannot be loaded without a process group."""
        found: List[Tuple[cst.CSTNode, ModelFact]] = []
        for call in self.calls(N.TORCH_SAVE):
            if not call.args:
                continue
            for holder in [call.args[0], *self.pickled_dict_elements(call)]:
                model = next((model for model in wrapped if flow.holds_wrapped(model, holder.value)), None)
                if model is not None and all(holder is not h for h, _ in found):
                    found.append((holder, model))
        return found

    def pickled_dict_elements(self, call: cst.Call) -> List[cst.DictElement]:
        """The values of the dict torch.save writes: a literal, or one assigned to a name just before."""
        value = call.args[0].value
        if isinstance(value, cst.Name):
            scope = self.scope_of(call)
            assigned = [
                statement.body[0].value for target, statement in self.c.assignments
                if target == value.value and self.scope_of(statement) is scope and not self.comes_after(statement, self.statement_of(call))
                and isinstance(getattr(statement.body[0], "value", None), cst.Dict)
            ]
            value = assigned[-1] if assigned else value
        if not isinstance(value, cst.Dict):
            return []
        return [element for element in value.elements if isinstance(element, cst.DictElement)]

    # -- entry point -------------------------------------------------------------------
    # (functions in migrator/analysis/entry.py)
    entry_point = _entry.entry_point
    trained_elsewhere = _entry.trained_elsewhere
    import_time_model = _entry.import_time_model
    hoist_into_guard = _entry.hoist_into_guard
    guard_hoist = _entry.guard_hoist
    holds_loop = _entry.holds_loop
    top_statement_in = _entry.top_statement_in
    reaches = _entry.reaches
    builds_loaders = _entry.builds_loaders
    entry_in_block = _entry.entry_in_block
    needs_no_process_group = _entry.needs_no_process_group

    # -- models ------------------------------------------------------------------------
    # (functions in migrator/analysis/models.py)
    dataparallel_site = _models.dataparallel_site
    is_chained_dp = _models.is_chained_dp
    ddp_wrapped_targets = _models.ddp_wrapped_targets
    trained_models = _models.trained_models
    same_scope = _models.same_scope
    split_dataparallel = _models.split_dataparallel
    feeds_trained_model = _models.feeds_trained_model
    nested_sites = _models.nested_sites
    after_branches = _models.after_branches
    parameter_owners_nearby = _models.parameter_owners_nearby
    model_definition = _models.model_definition
    parameter_owners = _models.parameter_owners
    owning_model = _models.owning_model
    kept_on_self = _models.kept_on_self
    cuda_condition = _models.cuda_condition
    moved_before_wrap = _models.moved_before_wrap
    moved_in_callee = _models.moved_in_callee
    loads_between = _models.loads_between
    held_before_wrap = _models.held_before_wrap
    trained_through = _models.trained_through
    is_moved = _models.is_moved
    evaluates_after_training = _models.evaluates_after_training
    group_parameter_owners = _models.group_parameter_owners
    moves_itself = _models.moves_itself
    assigned_none = _models.assigned_none
    built_by_helper = _models.built_by_helper
    model_from_caller = _models.model_from_caller
    models_passed = _models.models_passed
    used_as_module = _models.used_as_module
    last_preparation = _models.last_preparation
    branch_anchor = _models.branch_anchor
    branch_holder = _models.branch_holder
    holds_training = _models.holds_training
    loop_trains = _models.loop_trains
    starts_training = _models.starts_training
    calls_training_function = _models.calls_training_function
    prepares = _models.prepares
    is_dataparallel_if = _models.is_dataparallel_if

    # -- devices -----------------------------------------------------------------------
    # (functions in migrator/analysis/devices.py)
    device_literal = _devices.device_literal
    gpu_indexes = _devices.gpu_indexes
    visible_devices = _devices.visible_devices
    helper_devices = _devices.helper_devices
    is_torch_device_call = _devices.is_torch_device_call
    device_assignments = _devices.device_assignments
    entry_device_var = _devices.entry_device_var
    module_level_device_statement = _devices.module_level_device_statement
    device_expr_at = _devices.device_expr_at
    cuda_call = _devices.cuda_call
    with_entry_device = _devices.with_entry_device
    in_orelse = _devices.in_orelse

    # -- imports -----------------------------------------------------------------------
    # (functions in migrator/analysis/imports.py)
    import_names = _imports.import_names
    required_arguments = _imports.required_arguments
    local_rank_arguments = _imports.local_rank_arguments
    launch_literals = _imports.launch_literals
    dataparallel_imports = _imports.dataparallel_imports


def _is_gpu_count(node: cst.BaseExpression, names: Set[str]) -> bool:
    """The GPU count, or a name bound to it, also as `max(n_gpu, 1)` and `(n_gpu or 1)`."""
    if code_of(node) in names:
        return True
    if isinstance(node, cst.Call) and N.is_name(node.func, "max"):
        return any(code_of(arg.value) in names for arg in node.args)
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or):
        return code_of(node.left) in names
    return False


def analyze(module: cst.Module, context: Optional[FileContext] = None, source: Optional[str] = None) -> ScriptFacts:
    """The facts of `module` (parsed from `source`, when given: positions are then cheap)."""
    return _analysis(module, context, source).facts()


def call_graph(module: cst.Module) -> CallGraph:
    """The module's calls and what trains, for a module read without a script's facts (project mode)."""
    return _analysis(module).call_graph


def _analysis(module: cst.Module, context: Optional[FileContext] = None, source: Optional[str] = None) -> _Analysis:
    collector = _Collector(module)
    collector.run(module)
    collector.resolve_calls()
    if context is not None and context.modules is not None:
        from migrator.analysis.project_training import trained_arguments

        trained = trained_arguments(collector, context)
        collector.trained_arguments = {call: models for call, (models, _, _) in trained.items()}
        collector.trained_loaders = {call: loaders for call, (_, loaders, _) in trained.items() if loaders}
        collector.trained_moves = {call for call, (_, _, moves) in trained.items() if moves}
        collector.optimizer_helpers += [call for call in collector.trained_arguments if call not in collector.optimizer_helpers]
    return _Analysis(module, collector, context, source)
