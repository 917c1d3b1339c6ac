"""`_Analysis`: turns the collected sites into facts.

The steps by concern live in `entry.py`, `models.py`, `devices.py` and `imports.py`, each a
mixin class of its methods that `_Analysis` is made of.
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
from migrator.analysis.facts import EntryPoint, ModelFact, ScriptFacts
from migrator.positions import LazyPositions
from migrator.analysis.helpers import Block, Statement, _has_map_location
from migrator.analysis import distributed
from migrator.context import FileContext
from migrator.tree import class_constructors, class_methods
from migrator.analysis.devices import DeviceAnalysis
from migrator.analysis.entry import EntryAnalysis, caller_entry
from migrator.analysis.imports import ImportAnalysis
from migrator.analysis.models import ModelAnalysis


class _Analysis(EntryAnalysis, ModelAnalysis, DeviceAnalysis, ImportAnalysis):
    """Turns the collected sites into facts. Read-only; small named steps, one concern per mixin
    (entry.py, models.py, devices.py, imports.py)."""

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
            entry = caller_entry()
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
            visible_devices=self.visible_devices(),
            import_time_model=import_time_model,
            hoisted_into_guard=(guard, hoisted[1]) if hoisted is not None else None,
            device_var_needed=device_var_needed,
            device_var=device_var,
            local_rank_at_module=self.module_level_device_statement(entry),
            names=self.import_names(),
            calls=tuple(self.c.calls),
            loops=tuple(self.c.loops),
            attributes=tuple(self.c.attributes),
            assigns=tuple(self.c.assign_nodes),
            import_statements=tuple(self.c.import_statements),
            functions=tuple(self.c.functions),
            index=self.c,
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
        flow = self.flow = Flow(self, models, entry_function, entry.scope if entry is not None else None,
                    set_up_by_caller=entry is not None and entry.kind == "caller",
                    trained_through=self.context.trains_through if self.context is not None else frozenset())
        loaders = flow.loaders()
        wrapped = [m_ for m_ in models if not m_.already_ddp and m_.wrap_after is not None]
        self.rebound = {m_.expr: flow.reassignments(m_) for m_ in wrapped}
        uses = _one_use_per_node(use for model in wrapped for use in flow.model_uses(model))
        saves = flow.saves()
        logged = flow.logged_statements(loaders)
        return dict(
            loaders=loaders,
            split_draws=flow.split_draws(loaders),
            saves=saves,
            reads_after_write=flow.reads_after_write(saves),
            accumulation_steps=tuple(flow.accumulation_steps()),
            rank_divergent=tuple(flow.rank_divergent()),
            local_rank_arguments=self.local_rank_arguments(),
            required_arguments=self.required_arguments(),
            log_statements=tuple(statement for statement, shared in logged if not shared),
            hoisted_prints=flow.hoisted_prints(logged),
            penalty_backwards=flow.penalty_backwards() if wrapped else (),
            retained_backwards=flow.retained_backwards() if wrapped else (),
            model_uses=uses,
            bare_unwraps=flow.bare_unwraps(uses),
            returned_models=tuple((name, m_) for m_ in wrapped for name in flow.returned_models(m_)),
            flow=flow,
            torch_loads=tuple(
                (call, self.device_expr_at(call)) for call in self.calls(N.TORCH_LOAD) if not _has_map_location(call)
            ),
        )






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


def _one_use_per_node(uses) -> tuple:
    """A helper handed two models (`train_model(model_ft, ...)`, then `train_model(model_conv, ...)`)
    reads both through the same `model.state_dict()`: one use, one `.module` edit (two made
    `model.module.module`). The model wrapped only with parameters to train (ModelFact.guarded)
    wins: its isinstance unwrap is right for the other too."""
    found: dict = {}
    for use in uses:
        kept = found.get(use.node)
        if kept is None or (use.model.guarded and not kept.model.guarded):
            found[use.node] = use
    return tuple(found.values())
