"""One read-only pass over a script: everything the rules need to know, found once.

Rules never walk the tree themselves; they read `ScriptFacts`. Names are resolved with
libcst's QualifiedNameProvider, so `nn.DataParallel`, `torch.nn.DataParallel` and
`from torch.nn import DataParallel as DP` are the same thing here.
"""
from __future__ import annotations

import bisect
from contextlib import contextmanager

from dataclasses import dataclass, replace
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple, Union

import libcst as cst
import libcst.matchers as m
from libcst._nodes.internal import CodegenState

from migrator import names as N
from migrator.bindings import NameIndex, ScopeOwner
from migrator.dataflow import Flow, LoaderFact, ModelUse, SaveSite

Block = Union[cst.Module, cst.IndentedBlock]
Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class EntryPoint:
    """Where training starts, and so where the process group is set up and torn down.

    kind: "function" (a main()-like function called from the launch block), "guard" (the body of
    `if __name__ == "__main__":`) or "module" (a flat script with no guard).
    """

    kind: str
    block: Block  # the block the setup goes into
    anchor: Statement  # setup is inserted before this statement of `block`
    training: Statement  # the first loop at or after the anchor: try/finally starts here (guard/module)
    scope: ScopeOwner  # scope of `block`; `local_rank` is defined there
    call_statement: Optional[Statement] = None  # for kind == "function": the launch statement calling it


@dataclass(frozen=True)
class DataParallelSite:
    call: cst.Call  # the DataParallel(...) call
    statement: Statement  # the statement holding it
    target: Optional[str]  # "model" in `model = DP(...)`; None when not a plain assignment
    inner: Optional[cst.BaseExpression]  # the module being wrapped
    chained: Optional[cst.Call]  # `DP(m).cuda()` / `.to(dev)`: the outer call, to move inside the wrap
    conditional: Optional[cst.If]  # `if torch.cuda.device_count() > 1: model = DP(model)`


@dataclass(frozen=True)
class ModelFact:
    """A trained model: its parameters reach a torch.optim optimizer."""

    expr: str  # "model", "self.model", "netG"
    optimizer_call: cst.Call
    definition: Optional[cst.SimpleStatementLine]  # the statement that builds it (None: came from a caller)
    wrap_after: Optional[Statement]  # last statement preparing it (to/cuda/compile/load); the wrap goes after
    dataparallel: Optional[DataParallelSite]
    already_ddp: bool
    scope: Optional[ScopeOwner]
    device_expr: Optional[str] = None  # a torch.device variable visible where the model is built
    # DataParallel inside branches (imagenet's `if arch.startswith("vgg"): model.features = DP(...)`
    # `else: model = DP(model).cuda()`): each is unwrapped in place and one DDP wraps the whole
    # model after the branches.
    stripped: Tuple[DataParallelSite, ...] = ()
    rebound: Tuple[Statement, ...] = ()  # later `model = ...` (a reloaded model): wrapped again there


@dataclass(frozen=True)
class DeviceLiteral:
    """A "cuda" / "cuda:0" string that names the script's device."""

    node: cst.SimpleString
    conditional: bool  # already inside `... if <cond> else "cpu"`
    scope: ScopeOwner
    device_call: Optional[cst.Call] = None  # torch.device("cuda", 0): the call whose index argument goes
    device_expr: Optional[str] = None  # `.to("cuda")` with a device variable in reach: use it instead


@dataclass(frozen=True)
class CudaCall:
    """`x.cuda(...)` on a tensor or module."""

    call: cst.Call
    scope: ScopeOwner
    guarded: bool  # under `if <something about cuda>:` so it only runs when CUDA is there
    device_expr: Optional[str]  # a device variable usable at this point ("device", "self.device")
    pinned: bool  # has a positional device index (`.cuda(0)`, `.cuda(args.gpu)`)


@dataclass(frozen=True)
class ImportNames:
    """How the script spells the things the migration writes (its own aliases where it has them)."""

    torch: str
    torch_import_needed: bool
    dist: str
    dist_import_needed: bool
    ddp: str
    ddp_import_needed: bool
    os_import_needed: bool
    sampler: str = "DistributedSampler"
    sampler_import_needed: bool = True


class _OffsetState(CodegenState):
    """Code generation that notes where nodes start, as character offsets only.

    libcst's PositionProvider tracks line and column for every token and node: about 0.3 s on
    a 1,000-line script, for the handful of places a migration reports. Offsets cost a length
    addition per token; lines and columns are derived for the nodes actually asked about.
    """

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.starts: Dict[cst.CSTNode, int] = {}

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    @contextmanager
    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        start = self.offset
        try:
            yield
        finally:
            self.starts[node] = self.starts[start_node] if start_node is not None else start


class LazyPositions:
    """Where nodes start (1-based line, 0-based column), computed on first use."""

    def __init__(self, module: cst.Module) -> None:
        self._module = module
        self._state: Optional[_OffsetState] = None
        self._newlines: List[int] = []

    def start(self, node: cst.CSTNode) -> Optional[Tuple[int, int]]:
        if self._state is None:
            self._state = _OffsetState(self._module)
            self._module._codegen(self._state)
            code = "".join(self._state.tokens)
            self._newlines = [i for i, ch in enumerate(code) if ch == "\n"]
        offset = self._state.starts.get(node)
        if offset is None:
            return None
        line = bisect.bisect_left(self._newlines, offset)
        line_start = self._newlines[line - 1] + 1 if line else 0
        return line + 1, offset - line_start


@dataclass(frozen=True)
class ScriptFacts:
    module: cst.Module
    positions: LazyPositions
    local_names: Mapping[ScopeOwner, FrozenSet[str]]  # names bound in each function (or the module)
    owners: Mapping[cst.CSTNode, ScopeOwner]  # node -> the function (or class, or module) it runs in
    order: Mapping[cst.CSTNode, int]  # node -> its place in the source
    parents: Mapping[cst.CSTNode, cst.CSTNode]  # node -> its parent (the edit pass walks only edited paths)
    before_setup: FrozenSet[cst.CSTNode]  # functions called before the process group exists
    entry: Optional[EntryPoint]
    has_main_guard: bool
    has_init_process_group: bool
    has_destroy_process_group: bool
    models: Tuple[ModelFact, ...]
    dataparallel_sites: Tuple[DataParallelSite, ...]
    blocking_dataparallel: Tuple[DataParallelSite, ...]  # feeds a trained model, cannot be rewritten
    other_dataparallel: Tuple[DataParallelSite, ...]  # elsewhere (inference code): left, and reported
    device_literals: Tuple[DeviceLiteral, ...]
    cuda_calls: Tuple[CudaCall, ...]
    import_time_model: Optional[Statement]  # a model built at import time of a module with a main guard
    device_var_needed: bool  # the setup must define `device` (unguarded .cuda() with no device variable)
    device_var: Optional[str]  # the device variable of the entry scope, if the script has one
    local_rank_at_module: Optional[Statement]  # a module-level device needs local_rank before this statement
    names: ImportNames
    loaders: Tuple[LoaderFact, ...]
    saves: Tuple[SaveSite, ...]
    log_statements: Tuple[Statement, ...]  # per-step/epoch prints and logs
    reads_after_write: Tuple[Statement, ...]  # loads of a checkpoint written earlier: barrier first
    progress_bars: Tuple[cst.Call, ...]  # tqdm(...) without disable=
    local_rank_arguments: Tuple[cst.Call, ...]  # parser.add_argument("--local_rank", ...)
    accumulation_steps: Tuple[cst.CSTNode, ...]  # optimizer steps taken every N micro-batches
    batchnorm_layers: Tuple[cst.Call, ...]  # nn.BatchNorm*d(...) calls
    rank_divergent: Tuple[cst.If, ...]  # `if rank == 0:` around a forward or a collective
    required_arguments: Tuple[str, ...]  # what the script's own argparse parser requires
    launch_literals: Tuple[cst.BaseExpression, ...]  # strings / argv lists running torch.distributed.launch|run
    legacy_launch_imports: Tuple[cst.CSTNode, ...]  # import torch.distributed.launch
    model_uses: Tuple[ModelUse, ...]  # attributes of wrapped models (state_dict, custom methods)
    whole_model_saves: Tuple[Tuple[cst.Arg, ModelFact], ...]  # torch.save(model, f) after the wrap
    bare_unwraps: Tuple[Tuple[cst.Name, ModelFact], ...]  # `model._orig_mod if c else model`: the bare `model`
    torch_loads: Tuple[Tuple[cst.Call, Optional[str]], ...]  # torch.load without map_location, device in reach
    dataparallel_imports: Tuple[Tuple[str, str, Optional[str]], ...]  # (module, name, asname) to drop if unused

    def line_col(self, node: cst.CSTNode) -> Tuple[int, int]:
        """1-based line and column, as editors and linters show them."""
        start = self.positions.start(node)
        return (start[0], start[1] + 1) if start else (1, 1)

    def owner_of(self, node: cst.CSTNode) -> ScopeOwner:
        return self.owners.get(node, self.module)

    def after_setup(self, node: cst.CSTNode) -> bool:
        """Does `node` run once the process group exists? Rank guards and barriers need it.

        Code in functions runs when called, which for a migrated script is from the entry point
        (after the setup); the launch block and module-level code run only after the setup when
        the setup is there, and then only below it.
        """
        if self.entry is None:
            return False
        owner = self.owner_of(node)
        after_anchor = self.order.get(node, 0) > self.order.get(self.entry.anchor, 0)
        if owner is self.entry.scope:
            return after_anchor
        if owner is self.module:
            return False
        return not any(fn in self.before_setup for fn in self.enclosing_functions(node))

    def enclosing_functions(self, node: cst.CSTNode):
        owner = self.owner_of(node)
        while owner is not self.module and owner is not None:
            yield owner
            owner = self.owner_of(owner)

    @property
    def trains(self) -> bool:
        return bool(self.models)

    @property
    def unrewritable_dataparallel(self) -> Tuple[DataParallelSite, ...]:
        """DataParallel that builds a trained model in a shape the tool cannot rewrite: the file is left alone."""
        return self.blocking_dataparallel

    def local_rank_visible(self, scope: Optional[ScopeOwner]) -> bool:
        """Will the `local_rank` variable written by the setup be visible from `scope`?"""
        if self.entry is None or scope is None:
            return False
        if self.local_rank_at_module is not None or self.entry.scope is self.module:
            # A module global: visible from every function that does not shadow it.
            return scope is self.entry.scope or "local_rank" not in self.local_names.get(scope, ())
        return scope is self.entry.scope


# --------------------------------------------------------------------------- analysis


class _Collector(NameIndex):
    """The single traversal: bindings (from NameIndex) plus the raw sites the facts are made of."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module)
        self.calls: List[cst.Call] = []
        self.calls_by_qname: Dict[str, List[cst.Call]] = {}
        self.optimizer_calls: List[Tuple[cst.Call, str]] = []
        self.cuda_calls: List[cst.Call] = []
        self.device_strings: List[cst.SimpleString] = []
        self.main_guards: List[cst.If] = []
        self.assignments: List[Tuple[str, cst.SimpleStatementLine]] = []
        self.expr_calls: List[Tuple[str, str, cst.SimpleStatementLine]] = []  # (receiver, method, statement)
        self.loops: List[Union[cst.For, cst.While]] = []
        self.functions: List[cst.FunctionDef] = []
        self.attributes: List[cst.Attribute] = []
        self.classes: List[cst.ClassDef] = []
        self.log_statements: List[cst.SimpleStatementLine] = []
        self.launch_strings: List[cst.BaseExpression] = []
        self.rank_checks: List[cst.If] = []
        self.legacy_launch_imports: List[cst.CSTNode] = []

    def qnames(self, node: cst.CSTNode) -> Set[str]:
        qualified = self.resolve(node)
        return {qualified} if qualified else set()

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def resolve_calls(self) -> None:
        """After the traversal, when every import is known (scripts import late, too)."""
        for node in self.calls:
            qualified = self.resolve(node.func)
            if qualified:
                self.calls_by_qname.setdefault(qualified, []).append(node)
                if N.is_optimizer(qualified):
                    self.optimizer_calls.append((node, qualified))
            if m.matches(node.func, m.Attribute(attr=m.Name("cuda"))) and self.resolve(node.func.value) != "torch":  # type: ignore[attr-defined]
                self.cuda_calls.append(node)

    def visit_For(self, node: cst.For) -> None:
        super().visit_For(node)
        self.loops.append(node)

    def visit_While(self, node: cst.While) -> None:
        self.loops.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.attributes.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if N.is_cuda_string(node):
            self.device_strings.append(node)
        elif N.LAUNCH_MODULES_TEXT in node.value:
            self.launch_strings.append(node)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        if any(N.LAUNCH_MODULES_TEXT in getattr(part, "value", "") for part in node.parts):
            self.launch_strings.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        super().visit_Import(node)
        if any(code_of(alias.name).startswith("torch.distributed.launch") for alias in node.names):
            self.legacy_launch_imports.append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        super().visit_ImportFrom(node)
        module = code_of(node.module) if node.module is not None else ""
        names = [] if isinstance(node.names, cst.ImportStar) else [code_of(a.name) for a in node.names]
        if module.startswith("torch.distributed.launch") or (module == "torch.distributed" and "launch" in names):
            self.legacy_launch_imports.append(node)

    def visit_If(self, node: cst.If) -> None:
        if m.matches(node.test, N.MAIN_GUARD):
            self.main_guards.append(node)
        elif N.mentions_rank(node.test):
            self.rank_checks.append(node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if N.is_log_statement(node):
            self.log_statements.append(node)
        for small in node.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = (
                    [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                )
                for target in targets:
                    self.assignments.append((code_of(target), node))
            elif isinstance(small, cst.Expr) and m.matches(small.value, m.Call(func=m.Attribute())):
                func = small.value.func  # type: ignore[attr-defined]
                self.expr_calls.append((code_of(func.value), func.attr.value, node))


def analyze(module: cst.Module) -> ScriptFacts:
    collector = _Collector(module)
    module.visit(collector)
    collector.resolve_calls()
    return _Analysis(module, collector).facts()


class _Analysis:
    """Turns the collected sites into facts. Read-only; small named steps."""

    def __init__(self, module: cst.Module, c: _Collector) -> None:
        self.module = module
        self.c = c
        self.parents = c.parents
        self.positions = LazyPositions(module)
        self.calls_inside = self._index_calls()

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
        return [call for q in qnames for call in self.c.calls_by_qname.get(q, [])]

    # -- facts ------------------------------------------------------------------------
    def facts(self) -> ScriptFacts:
        guard = self.c.main_guards[0] if self.c.main_guards else None
        dp_sites = tuple(self.dataparallel_site(call) for call in self.calls(N.DATAPARALLEL))
        ddp_targets = self.ddp_wrapped_targets()
        models = self.trained_models(dp_sites, ddp_targets)
        import_time_model = self.import_time_model(guard, models)
        entry = None if import_time_model is not None else self.entry_point(guard, models)
        device_var = self.entry_device_var(entry)
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
            has_init_process_group=bool(self.calls(N.INIT_PROCESS_GROUP)),
            has_destroy_process_group=bool(self.calls(N.DESTROY_PROCESS_GROUP)),
            models=models,
            dataparallel_sites=dp_sites,
            blocking_dataparallel=self.split_dataparallel(dp_sites, models)[0],
            other_dataparallel=self.split_dataparallel(dp_sites, models)[1],
            device_literals=tuple(filter(None, (self.device_literal(s) for s in self.c.device_strings))),
            cuda_calls=cuda_calls,
            import_time_model=import_time_model,
            device_var_needed=device_var_needed,
            device_var=device_var,
            local_rank_at_module=self.module_level_device_statement(entry),
            names=self.import_names(),
            dataparallel_imports=self.dataparallel_imports(),
            **self.flow_facts(models, entry),
        )
        facts = replace(facts, models=tuple(replace(m_, rebound=self.rebound.get(m_.expr, ())) for m_ in facts.models))
        return replace(facts, before_setup=self.functions_before_setup(facts))

    def functions_before_setup(self, facts: ScriptFacts) -> FrozenSet[cst.CSTNode]:
        """Module-level functions called before the setup (`_init_(cfg)` in the guard, before main())."""
        functions = {f.name.value: f for f in self.module.body if isinstance(f, cst.FunctionDef)}
        found: Set[cst.CSTNode] = set()
        changed = True
        while changed:
            changed = False
            for call in self.c.calls:
                fn = functions.get(call.func.value) if isinstance(call.func, cst.Name) else None
                if fn is None or fn in found or (facts.entry is not None and fn is facts.entry.scope):
                    continue
                caller = replace(facts, before_setup=frozenset(found))
                if not caller.after_setup(call):
                    found.add(fn)
                    changed = True
        return frozenset(found)

    def flow_facts(self, models: Tuple[ModelFact, ...], entry: Optional[EntryPoint]) -> dict:
        entry_function = entry.scope if entry is not None and entry.kind == "function" else None
        flow = Flow(self, {m_.expr for m_ in models}, entry_function)
        loaders = flow.loaders()
        wrapped = [m_ for m_ in models if not m_.already_ddp and m_.wrap_after is not None]
        self.rebound = {m_.expr: flow.reassignments(m_) for m_ in wrapped}
        uses = tuple(use for model in wrapped for use in flow.model_uses(model, model.wrap_after))
        saves = flow.saves()
        return dict(
            loaders=loaders,
            saves=saves,
            reads_after_write=flow.reads_after_write(saves),
            accumulation_steps=tuple(flow.accumulation_steps()),
            batchnorm_layers=tuple(self.calls(N.BATCHNORM)),
            rank_divergent=tuple(flow.rank_divergent()),
            local_rank_arguments=tuple(call for call in self.c.calls if _is_local_rank_argument(call)),
            launch_literals=self.launch_literals(),
            required_arguments=self.required_arguments(),
            legacy_launch_imports=tuple(self.c.legacy_launch_imports),
            progress_bars=tuple(
                call for call in self.calls(N.PROGRESS_BARS)
                if not any(arg.keyword is not None and arg.keyword.value == "disable" for arg in call.args)
            ),
            log_statements=flow.print_statements(loaders),
            model_uses=uses,
            bare_unwraps=flow.bare_unwraps(uses),
            whole_model_saves=tuple(self.whole_model_saves(flow, wrapped)),
            torch_loads=tuple(
                (call, self.device_expr_at(call)) for call in self.calls(N.TORCH_LOAD) if not _has_map_location(call)
            ),
        )

    def whole_model_saves(self, flow: Flow, wrapped) -> List[Tuple[cst.Arg, ModelFact]]:
        found = []
        for call in self.calls(N.TORCH_SAVE):
            if not call.args:
                continue
            saved = code_of(call.args[0].value)
            for model in wrapped:
                for spelling, scope, after in flow.wrapped_scopes(model, model.wrap_after):
                    if saved == spelling and self.is_inside(call, scope) and (after is None or self.comes_after(call, after)):
                        found.append((call.args[0], model))
        return found

    # -- entry point -------------------------------------------------------------------
    def entry_point(self, guard: Optional[cst.If], models: Tuple[ModelFact, ...]) -> Optional[EntryPoint]:
        sites = [m_.definition for m_ in models if m_.definition is not None]
        if not sites:
            return None
        launch_block: Block = guard.body if guard is not None else self.module  # type: ignore[assignment]
        # 1. Training written straight into the guard body (or, without a guard, at module level).
        direct = [s for s in sites if self.top_statement_in(s, launch_block) is not None]
        if direct:
            kind = "guard" if guard is not None else "module"
            return self.entry_in_block(kind, launch_block, None)
        # 2. A function called from the launch block that (transitively) builds the model.
        functions = {f.name.value: f for f in self.module.body if isinstance(f, (cst.FunctionDef, cst.ClassDef))}
        for statement in launch_block.body:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue
            for name in _called_names(statement):
                target = functions.get(name)
                if isinstance(target, cst.FunctionDef) and self.reaches(target, sites, functions, set()):
                    if self.holds_loop(statement):
                        # `for fold in range(5): train_loop(fold)`: one process group for all the
                        # calls, so the setup goes in the launch block, before the loop.
                        kind = "guard" if guard is not None else "module"
                        return self.entry_in_block(kind, launch_block, None)
                    return self.entry_in_block("function", target.body, statement)  # type: ignore[arg-type]
        return None

    def import_time_model(self, guard: Optional[cst.If], models: Tuple[ModelFact, ...]) -> Optional[Statement]:
        """A model built at module level although the module has a main guard.

        The setup cannot go there: DataLoader workers started with spawn/forkserver re-import the
        main module, and would each try to join the process group.
        """
        if guard is None:
            return None
        return next(
            (m_.definition for m_ in models if m_.definition is not None and self.parent(m_.definition) is self.module),
            None,
        )

    def holds_loop(self, statement: cst.CSTNode) -> bool:
        """A loop, or a try/with/if around one (`try: for epoch ...: except KeyboardInterrupt:`)."""
        if isinstance(statement, (cst.For, cst.While)):
            return True
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine)):
            return False
        return any(self.is_inside(loop, statement) and self.enclosing_function(loop) is self.enclosing_function(statement) for loop in self.c.loops)

    def top_statement_in(self, node: cst.CSTNode, block: Block) -> Optional[Statement]:
        """The statement of `block` that contains `node`, unless a def/class lies in between."""
        for anc in [node, *self.ancestors(node)]:
            if isinstance(anc, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if self.parent(anc) is block:
                return anc  # type: ignore[return-value]
        return None

    def reaches(self, fn: cst.CSTNode, sites, functions, seen: Set[str]) -> bool:
        if any(anc is fn for s in sites for anc in self.ancestors(s)):
            return True
        name = fn.name.value  # type: ignore[attr-defined]
        seen.add(name)
        return any(
            callee in functions and callee not in seen and self.reaches(functions[callee], sites, functions, seen)
            for callee in _referenced_names(fn)
        )

    def entry_in_block(self, kind: str, block: Block, call_statement: Optional[Statement]) -> EntryPoint:
        body = list(block.body)
        index = 0
        while index < len(body) - 1 and N.is_preamble(body[index], module_level=isinstance(block, cst.Module)):
            index += 1
        scope = self.scope_of(body[index])
        training = next((s for s in body[index:] if self.holds_loop(s)), body[index])
        return EntryPoint(kind, block, body[index], training, scope, call_statement)  # type: ignore[arg-type]

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
        for call, _ in self.c.optimizer_calls:
            for expr in _parameter_owners(call) or self.parameter_owners_nearby(call):
                if expr in models:
                    continue
                definition = self.model_definition(expr, call)
                sites = [
                    s for s in dp_sites
                    if (s.target == expr or (s.target or "").startswith(expr + ".")) and self.same_scope(s.statement, definition)
                ]
                wrap_after = self.last_preparation(expr, definition) if definition is not None else None
                stripped = self.nested_sites(sites, definition)
                if stripped:
                    wrap_after = self.after_branches(stripped, definition, wrap_after)
                dp = None if stripped else next((s for s in sites if s.target == expr), None)
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
                )
        return tuple(models.values())

    def same_scope(self, statement, definition) -> bool:
        """Is `statement` about the same variable as `definition` (same function; same class for self.x)?"""
        if definition is None:
            return False
        if self.scope_of(statement) is self.scope_of(definition):
            return True
        cls = self.enclosing_class(definition)
        return cls is not None and cls is self.enclosing_class(statement)

    def split_dataparallel(self, dp_sites, models) -> Tuple[Tuple[DataParallelSite, ...], Tuple[DataParallelSite, ...]]:
        """DataParallel sites no model took over: blocking when they build a trained model, else left alone."""
        taken = {id(s) for m_ in models for s in (m_.stripped or ((m_.dataparallel,) if m_.dataparallel else ()))}
        blocking, other = [], []
        for site in dp_sites:
            if id(site) in taken:
                continue
            (blocking if self.feeds_trained_model(site, models) else other).append(site)
        return tuple(blocking), tuple(other)

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

    def nested_sites(self, sites, definition) -> Tuple[DataParallelSite, ...]:
        """DataParallel sites to unwrap in place: several, on a submodule, or in branches below the model's block.

        One site in the model's own block (`model = DP(model)`, or the tutorial's
        `if torch.cuda.device_count() > 1: model = DP(model)`) is simply replaced by the wrap.
        """
        if definition is None or not sites:
            return ()
        if len(sites) == 1:
            site = sites[0]
            holder = site.conditional or site.statement
            if self.block_of(holder) is self.block_of(definition) and "." not in (site.target or "").replace(
                code_of_target(definition), "", 1
            ):
                return ()
        return tuple(sites)

    def after_branches(self, sites, definition, wrap_after):
        """The statement of the model's block that comes last among the branches holding `sites`."""
        block = self.block_of(definition)
        body = list(block.body)  # type: ignore[union-attr]
        last = body.index(wrap_after)
        for site in sites:
            top = self.top_statement_in(site.statement, block)
            if top is not None:
                last = max(last, body.index(top))
        return body[last]

    def parameter_owners_nearby(self, optimizer_call: cst.Call) -> List[str]:
        """Parameter groups built beforehand (`decay = [p for n, p in model.named_parameters() ...]`).

        Only the names the optimizer call uses are followed, to the statements of the same
        function that assign or extend them.
        """
        names = {name.value for name in m.findall(optimizer_call, m.Name())}  # type: ignore[attr-defined]
        owners: List[str] = []
        fn = self.enclosing_function(optimizer_call) or self.module
        for target, statement in self.c.assignments:
            if target in names and self.scope_of(statement) is self.scope_of(optimizer_call):
                owners += [o for o in _parameter_owners_in(statement) if o not in owners]
        for receiver, method, statement in self.c.expr_calls:
            if receiver in names and method in ("append", "extend") and self.is_inside(statement, fn):
                owners += [o for o in _parameter_owners_in(statement) if o not in owners]
        for loop in self.c.loops:
            if isinstance(loop, cst.For) and self.is_inside(loop, fn) and names & _referenced_names(loop.body):
                owners += [o for o in _parameter_owners_in(loop.iter) if o not in owners]
        return owners

    def model_definition(self, expr: str, optimizer_call: cst.Call) -> Optional[cst.SimpleStatementLine]:
        """The first statement assigning `expr` in the optimizer's function (or class, for self.x)."""
        container: cst.CSTNode = self.enclosing_function(optimizer_call) or self.module
        if expr.startswith("self."):
            container = self.enclosing_class(optimizer_call) or container
        for target, statement in self.c.assignments:
            if target == expr and any(a is container for a in self.ancestors(statement)):
                if not isinstance(self.block_of(statement), (cst.Module, cst.IndentedBlock)):
                    continue
                return statement
        return None

    def last_preparation(self, expr: str, definition: cst.SimpleStatementLine) -> Statement:
        """The last statement, before training starts, that still prepares the model.

        Walks forward from the definition to the first loop (training) or return; statements
        that move, compile, load or re-assign the model, also inside `if`/`with`/`try` blocks
        (`if args.resume: model.load_state_dict(...)`), push the wrap further down: DDP must see the
        model on its final device, and checkpoints load into it without a `module.` prefix.
        """
        block = self.block_of(definition)
        body = list(block.body)  # type: ignore[union-attr]
        last: Statement = definition
        for statement in body[body.index(definition) + 1 :]:
            if isinstance(statement, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)) or _returns(statement):
                break
            if not isinstance(statement, cst.SimpleStatementLine) and any(
                self.is_inside(loop, statement) for loop in self.c.loops
            ):
                break
            if self.prepares(statement, expr):
                last = statement
        return last

    def prepares(self, statement: Statement, expr: str) -> bool:
        if isinstance(statement, cst.SimpleStatementLine):
            inside = lambda s: s is statement  # noqa: E731
        else:
            inside = lambda s: self.is_inside(s, statement)  # noqa: E731
        if any(t == expr and inside(s) for t, s in self.c.assignments):
            return True
        return any(r == expr and meth in N.PREPARE_METHODS and inside(s) for r, meth, s in self.c.expr_calls)

    def is_dataparallel_if(self, statement: cst.If) -> bool:
        return any(anc is statement for call in self.calls(N.DATAPARALLEL) for anc in self.ancestors(call))

    # -- devices -----------------------------------------------------------------------
    def device_literal(self, node: cst.SimpleString) -> Optional[DeviceLiteral]:
        parent = self.parent(node)
        conditional = isinstance(parent, cst.IfExp) and parent.body is node and N.is_cpu_string(parent.orelse)
        holder = parent if conditional else node
        arg = self.parent(holder)
        scope = self.scope_of(node)
        if isinstance(arg, cst.Arg) and arg.keyword is None:
            call = self.parent(arg)
            if isinstance(call, cst.Call) and call.args and call.args[0] is arg:
                qnames = self.c.qnames(call.func)
                if qnames & N.TORCH_DEVICE:
                    indexed = len(call.args) > 1 and call.args[1].keyword is None
                    return DeviceLiteral(node, conditional, scope, call if indexed else None)  # type: ignore[arg-type]
                if m.matches(call.func, m.Attribute(attr=m.Name("to"))):
                    device = None if conditional else self.device_expr_at(call)
                    return DeviceLiteral(node, conditional, scope, device_expr=device)  # type: ignore[arg-type]
            return None
        if isinstance(arg, cst.Assign) and any("device" in code_of(t.target) for t in arg.targets):
            return DeviceLiteral(node, conditional, scope)  # type: ignore[arg-type]
        return None

    def is_torch_device_call(self, value: Optional[cst.CSTNode]) -> bool:
        return isinstance(value, cst.Call) and bool(self.c.qnames(value.func) & N.TORCH_DEVICE)

    def device_assignments(self) -> List[Tuple[str, cst.SimpleStatementLine]]:
        """Assignments of the script's device variables: `device = torch.device(...)` or a "cuda" string."""
        found = []
        for target, statement in self.c.assignments:
            small = statement.body[0]
            value = getattr(small, "value", None)
            if value is None:
                continue
            if self.is_torch_device_call(value) or (
                "device" in target and any(s in self.c.device_strings for s in _strings_in(value))
            ):
                found.append((target, statement))
        return found

    def entry_device_var(self, entry: Optional[EntryPoint]) -> Optional[str]:
        if entry is None:
            return None
        for target, statement in self.device_assignments():
            scope = self.scope_of(statement)
            if "." not in target and scope is not None and (scope is entry.scope or scope is self.module):
                return target
        return None

    def module_level_device_statement(self, entry: Optional[EntryPoint]) -> Optional[Statement]:
        """A module-level device assignment in a script whose setup runs in a function.

        The device then needs `local_rank` at import time: reading an environment variable
        there is harmless, unlike setting up the process group.
        """
        if entry is None or entry.kind == "module":
            return None
        for target, statement in self.device_assignments():
            if self.parent(statement) is self.module and any(
                literal in self.c.device_strings for literal in _strings_in(statement)
            ):
                return statement
        return None

    def device_expr_at(self, node: cst.CSTNode, typed: bool = False) -> Optional[str]:
        """A device variable that code at `node` can use (`typed`: a torch.device, which has `.type`)."""
        scope = self.scope_of(node)
        if scope is None:
            return None
        for target, statement in self.device_assignments():
            if typed and not self.is_torch_device_call(getattr(statement.body[0], "value", None)):
                continue
            if "." in target:
                # self.device: usable in the methods of the class that assigns it.
                cls = self.enclosing_class(statement)
                if target.startswith("self.") and cls is not None and cls is self.enclosing_class(node):
                    return target
                continue
            owner = self.scope_of(statement)
            if owner is scope or (owner is self.module and target not in self.c.bound.get(scope, ())):
                return target
        if not typed and "device" in self.c.params.get(scope, ()):
            return "device"
        return None

    def cuda_call(self, call: cst.Call) -> CudaCall:
        guarded = any(
            (isinstance(anc, cst.If) and N.mentions_cuda(anc.test) and not self.in_orelse(call, anc))
            or (isinstance(anc, cst.IfExp) and N.mentions_cuda(anc.test))
            for anc in self.ancestors(call)
        )
        pinned = bool(call.args) and call.args[0].keyword is None
        return CudaCall(call, self.scope_of(call), guarded, self.device_expr_at(call), pinned)  # type: ignore[arg-type]

    def with_entry_device(self, cuda_call: CudaCall, entry: EntryPoint) -> CudaCall:
        """Once the setup defines `device`, code in the entry scope can use it."""
        visible = cuda_call.scope is entry.scope or entry.scope is self.module
        if cuda_call.device_expr is None and visible:
            return CudaCall(cuda_call.call, cuda_call.scope, cuda_call.guarded, "device", cuda_call.pinned)
        return cuda_call

    def in_orelse(self, node: cst.CSTNode, if_node: cst.If) -> bool:
        return if_node.orelse is not None and any(a is if_node.orelse for a in self.ancestors(node))

    # -- imports -----------------------------------------------------------------------
    def import_names(self) -> ImportNames:
        bound = {qualified: local for local, qualified in self.c.imported[self.module].items()}
        torch = bound.get("torch")
        dist = bound.get("torch.distributed")
        ddp = bound.get("torch.nn.parallel.DistributedDataParallel") or bound.get(
            "torch.nn.parallel.distributed.DistributedDataParallel"
        )
        taken = self.c.bound[self.module]
        sampler = next((bound[q] for q in N.DISTRIBUTED_SAMPLER if q in bound), None)
        return ImportNames(
            torch=torch or "torch",
            torch_import_needed=torch is None,
            dist=dist or ("dist" if "dist" not in taken else f"{torch or 'torch'}.distributed"),
            dist_import_needed=dist is None and "dist" not in taken,
            ddp=ddp or ("DDP" if "DDP" not in taken else "DistributedDataParallel"),
            ddp_import_needed=ddp is None,
            os_import_needed="os" not in bound,
            sampler=sampler or "DistributedSampler",
            sampler_import_needed=sampler is None,
        )

    def required_arguments(self) -> Tuple[str, ...]:
        """`DATA` for a positional, `--config CONFIG` for a required option, in declaration order."""
        found: List[str] = []
        for call in self.c.calls:
            if not m.matches(call.func, m.Attribute(attr=m.Name("add_argument"))) or not call.args:
                continue
            first = call.args[0].value
            if not isinstance(first, cst.SimpleString) or _is_local_rank_argument(call):
                continue
            name = str(first.evaluated_value)
            keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            optional_nargs = m.matches(keywords.get("nargs"), m.SimpleString(value=m.MatchRegex(r"""^['"][?*]['"]$""")))
            if not name.startswith("-") and "default" not in keywords and not optional_nargs:
                found.append(name.upper())
            elif name.startswith("-") and m.matches(keywords.get("required"), m.Name("True")):
                longest = max((str(a.value.evaluated_value) for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)), key=len)
                found.append(f"{longest} {longest.lstrip('-').replace('-', '_').upper()}")
        return tuple(found)

    def launch_literals(self) -> Tuple[cst.BaseExpression, ...]:
        """Argv lists holding the launcher module, and strings (not inside such lists) holding a launch."""
        lists = []
        for node in self.c.launch_strings:
            parent = self.parent(self.parent(node))
            if isinstance(self.parent(node), cst.Element) and isinstance(parent, (cst.List, cst.Tuple)):
                if parent not in lists:
                    lists.append(parent)
        strings = []
        for node in self.c.launch_strings:
            if isinstance(self.parent(node), cst.Element) and self.parent(self.parent(node)) in lists:
                continue
            while isinstance(self.parent(node), cst.ConcatenatedString):
                node = self.parent(node)  # the whole implicit concatenation is one command
            if " " in _raw_text(node) and node not in strings:
                strings.append(node)
        return tuple(lists + strings)

    def dataparallel_imports(self) -> Tuple[Tuple[str, str, Optional[str]], ...]:
        """`from torch.nn import DataParallel [as DP]`: (module, name, asname), to drop once unused."""
        found = []
        for local, qualified in self.c.imported[self.module].items():
            if qualified in N.DATAPARALLEL and "." not in local:
                module, name = qualified.rsplit(".", 1)
                found.append((module, name, local if local != name else None))
        return tuple(found)


# --------------------------------------------------------------------------- small helpers


def _parameter_owners(optimizer_call: cst.Call) -> List[str]:
    """`model` in optim.SGD(model.parameters()), [{"params": model.parameters()}], filter(..., m.parameters())."""
    if not optimizer_call.args:
        return []
    return _parameter_owners_in(optimizer_call.args[0].value)


def _parameter_owners_in(params: cst.CSTNode) -> List[str]:
    owners: List[str] = []
    for call in m.findall(params, m.Call(func=m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters")))):
        owner = code_of(call.func.value)  # type: ignore[attr-defined]
        if owner not in owners:
            owners.append(owner)
    return owners


def _called_names(node: cst.CSTNode) -> List[str]:
    return [call.func.value for call in m.findall(node, m.Call(func=m.Name()))]  # type: ignore[attr-defined]


def _referenced_names(node: cst.CSTNode) -> Set[str]:
    return {name.value for name in m.findall(node, m.Name())}  # type: ignore[attr-defined]


def code_of_target(statement: cst.SimpleStatementLine) -> str:
    small = statement.body[0]
    target = small.targets[0].target if isinstance(small, cst.Assign) else getattr(small, "target", None)
    return code_of(target) if target is not None else ""


def _returns(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in statement.body)


def _raw_text(node: cst.CSTNode) -> str:
    return node.raw_value if isinstance(node, cst.SimpleString) else code_of(node)


def _is_local_rank_argument(call: cst.Call) -> bool:
    if not m.matches(call.func, m.Attribute(attr=m.Name("add_argument"))):
        return False
    return any(
        isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in ("--local_rank", "--local-rank")
        for arg in call.args
        if arg.keyword is None
    )


def _has_map_location(call: cst.Call) -> bool:
    keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    positional = [arg for arg in call.args if arg.keyword is None]
    return "map_location" in keywords or len(positional) > 1


def _strings_in(node: cst.CSTNode) -> List[cst.SimpleString]:
    return list(m.findall(node, m.SimpleString()))  # type: ignore[arg-type]
