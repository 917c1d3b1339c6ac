"""The frozen facts the analysis produces: what the rules read (positions: migrator.positions)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, FrozenSet, Iterator, List, Mapping, Optional, Tuple

import libcst as cst

from migrator.graph.bindings import ScopeOwner
from migrator.positions import LazyPositions
from migrator.dataflow import LoaderFact, ModelUse, SaveSite, SplitDraw
from migrator.analysis.distributed import Distributed
from migrator.analysis.helpers import Block, Statement


# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class EntryPoint:
    """Where training starts, and so where the process group is set up and torn down.

    kind: "function" (a main()-like function called from the launch block), "guard" (the body of
    `if __name__ == "__main__":`), "module" (a flat script with no guard) or "caller" (a module
    project mode migrates with the script that calls it: that script sets up the process group
    before any function here runs, so nothing is set up or torn down here, and `local_rank` is in
    no scope of this module: `block`, `anchor`, `training` and `scope` are placeholders outside it).
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
    # `if args.cuda: model.cuda()`: the model is on a GPU only when this holds (DDP's device_ids follow it)
    cuda_condition: Optional[str] = None
    moved: bool = True  # False: nothing moves it to a device before the wrap (it stays on the CPU)
    # `model.module` (DataParallel's) read between the DataParallel line and the wrap below it: bare there (DDP003)
    module_reads_before_wrap: Tuple[cst.Attribute, ...] = ()
    bare_loads: Tuple[cst.Call, ...] = ()  # a DataParallel script's load_state_dict calls that now run before the wrap (DDP014)
    optional: bool = False  # may still be None where it is wrapped (`model_fine = None`, built under a flag)
    device_unknown: bool = False  # built by a helper that may or may not move it (`get_network(args)`)
    held_by: Optional[str] = None  # a module built from it before the wrap, and trained through: `seg = Seq(enc, dec)`
    moved_later: Optional[cst.Call] = None  # not moved before the wrap, but by a function it is passed to
    # not moved here, but by the project trainer it is handed to: the wrap moves it to this process's device
    move_to_local: bool = False
    # A loss or a head trained with another model: its parameters join that model's optimizer
    # (`list(model.parameters()) + list(criterion.parameters())`) and it is applied to what that model
    # computes. It may have no parameter to train (awd-lstm-lm's SplitCrossEntropyLoss below 75,000
    # words), and DDP refuses to wrap such a module: its wrap is guarded by its parameters, and its
    # unwraps ask whether it is wrapped.
    auxiliary: bool = False
    # `p.requires_grad = True` for the backbone at epoch 5, after the wrap: no wrap point comes after
    # the change and before training (DDP116)
    parameters_changed_later: Tuple[cst.CSTNode, ...] = ()
    # Why no DDP around it would sync the forward training runs (a container holding it is called;
    # it is still prepared after it enters the container training reads it from): the file is
    # left unchanged (DDP104)
    forward_unreached: Optional[str] = None

    @property
    def guarded(self) -> bool:
        """Is it wrapped only when it has parameters to train (auxiliary)? A DataParallel it
        replaces, or a move the wrap makes, keep the plain wrap."""
        return self.auxiliary and self.dataparallel is None and not self.stripped and not self.move_to_local


@dataclass(frozen=True)
class DeviceLiteral:
    """A "cuda" / "cuda:0" string that names the script's device."""

    node: cst.SimpleString
    conditional: bool  # already inside `... if <cond> else "cpu"`
    scope: ScopeOwner
    device_call: Optional[cst.Call] = None  # torch.device("cuda", 0): the call whose index argument goes
    device_expr: Optional[str] = None  # `.to("cuda")` with a device variable in reach: use it instead
    compared: bool = False  # the variable it is assigned to is compared with "cuda" somewhere


@dataclass(frozen=True)
class HelperDevice:
    """`device, ids = prepare_device(n)` ... `model.to(device)`: the model's device comes from a function
    this file cannot see into, which may pick the same GPU on every rank (`torch.device("cuda:0")`)."""

    statement: cst.SimpleStatementLine  # the one binding of the device variable in the entry scope
    name: str  # the device variable
    helper: str  # the function, as spelled (`prepare_device`)
    models: FrozenSet[str] = frozenset()  # the models moved to it
    seen: bool = False  # the helper is a function of this file (its device strings are rewritten there)


@dataclass(frozen=True)
class GpuIndex:
    """A GPU picked by the script: `torch.cuda.set_device(args.gpu)`, `"cuda:{}".format(args.gpu)`,
    `f"cuda:{gpu}"`. Under torchrun every rank would pick the same one."""

    node: cst.CSTNode  # the index argument of set_device, or the whole device-string expression
    scope: ScopeOwner
    set_device: bool  # node is set_device's argument (replaced by `local_rank`, not by a string)


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
    distributed: Optional[Distributed]  # why the file is already distributed (None: it is not)
    has_destroy_process_group: bool
    models: Tuple[ModelFact, ...]
    blocking_dataparallel: Tuple[DataParallelSite, ...]  # feeds a trained model, cannot be rewritten
    other_dataparallel: Tuple[DataParallelSite, ...]  # elsewhere (inference code): left, and reported
    evaluation_dataparallel: Tuple[DataParallelSite, ...]  # of those, a final test after training: removed
    device_literals: Tuple[DeviceLiteral, ...]
    cuda_calls: Tuple[CudaCall, ...]
    gpu_indexes: Tuple[GpuIndex, ...]
    helper_devices: Tuple[HelperDevice, ...]
    visible_devices: Tuple[Tuple[cst.SimpleStatementLine, str], ...]  # os.environ["CUDA_VISIBLE_DEVICES"] = ...; `os.environ` as spelled
    import_time_model: Optional[Statement]  # a model built at import time of a module with a main guard
    device_var_needed: bool  # the setup must define `device` (unguarded .cuda() with no device variable)
    device_var: Optional[str]  # the device variable of the entry scope, if the script has one
    local_rank_at_module: Optional[Statement]  # a module-level device needs local_rank before this statement
    names: ImportNames
    loaders: Tuple[LoaderFact, ...]
    saves: Tuple[SaveSite, ...]
    log_statements: Tuple[Statement, ...]  # per-step/epoch prints and logs
    # prints to show once whose arguments run the model on every rank: (print, the calls to run first)
    hoisted_prints: Tuple[Tuple[Statement, Tuple[cst.Call, ...]], ...]
    reads_after_write: Tuple[Statement, ...]  # loads of a checkpoint written earlier: barrier first
    local_rank_arguments: Tuple[cst.Call, ...]  # parser.add_argument("--local_rank", ...)
    accumulation_steps: Tuple[cst.CSTNode, ...]  # optimizer steps taken every N micro-batches
    rank_divergent: Tuple[cst.If, ...]  # `if rank == 0:` around a forward or a collective
    required_arguments: Tuple[str, ...]  # what the script's own argparse parser requires
    model_uses: Tuple[ModelUse, ...]  # attributes of wrapped models (state_dict, custom methods)
    returned_models: Tuple[Tuple[cst.Name, ModelFact], ...]  # `return ..., model` from the entry function
    bare_unwraps: Tuple[Tuple[cst.Name, ModelFact], ...]  # `model._orig_mod if c else model`: the bare `model`
    torch_loads: Tuple[Tuple[cst.Call, Optional[str]], ...]  # torch.load without map_location, device in reach
    # The raw sites of the one traversal, in source order, for rules that read the whole file
    # (rules never walk the tree themselves).
    calls: Tuple[cst.Call, ...] = ()
    loops: Tuple[cst.CSTNode, ...] = ()  # For and While
    attributes: Tuple[cst.Attribute, ...] = ()
    assigns: Tuple[cst.Assign, ...] = ()
    import_statements: Tuple[cst.CSTNode, ...] = ()  # Import and ImportFrom
    functions: Tuple[cst.FunctionDef, ...] = ()  # every def, nested ones included
    # (main guard, first statement): the module-level set-up from that statement on moves into
    # the guard, after the process group's setup (analysis.entry.guard_hoist)
    hoisted_into_guard: Optional[Tuple[cst.If, Statement]] = None
    # Calls of the script that train through a module migrated with it (`Solver(loader, config)`,
    # FileContext.trains_through): the script trains, though it builds no model itself.
    trained_elsewhere: Tuple[cst.Call, ...] = ()
    # `penalty.backward()` of a gradient penalty alone (dataflow.penalty): DDP cannot train it
    penalty_backwards: Tuple[cst.Call, ...] = ()
    # `loss.backward(retain_graph=True)`, kept for a second backward (dataflow.penalty): DDP syncs only the first
    retained_backwards: Tuple[cst.Call, ...] = ()
    # random draws from a generator nothing seeded that decide which samples loaders read (dataflow.draws)
    split_draws: Tuple[SplitDraw, ...] = ()
    # The graph the facts are a view of: the binding index and the resolved calls (migrator.graph.bindings,
    # filled by analysis.collector), and the value flow (migrator.graph.flow). Rules ask them questions
    # about the patterns they fix (calls_of, resolve, bindings); they never walk the tree.
    index: Any = None
    flow: Any = None  # the script's dataflow.Flow: the model's values, what runs the model, rank checks

    def calls_of(self, qnames: FrozenSet[str]) -> List[cst.Call]:
        """The calls of any of `qnames` (resolved through the file's imports), in source order."""
        found = [call for q in qnames for call in self.index.calls_by_qname.get(q, [])]
        return sorted(found, key=self.index.call_order.__getitem__) if len(found) > 1 else found

    def resolve(self, node: cst.CSTNode) -> Optional[str]:
        """The qualified name of a Name/Attribute chain rooted in an import (`nn.Linear` -> `torch.nn.Linear`)."""
        return self.index.resolve(node)

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        return next((a for a in self.ancestors(node) if isinstance(a, cst.FunctionDef)), None)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parents.get(node)
        while current is not None:
            yield current
            current = self.parents.get(current)

    def statement_of(self, node: cst.CSTNode) -> Optional[Statement]:
        for current in (node, *self.ancestors(node)):
            if isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return current  # type: ignore[return-value]
        return None

    def block_of(self, statement: cst.CSTNode) -> Optional[Block]:
        parent = self.parents.get(statement)
        return parent if isinstance(parent, (cst.Module, cst.IndentedBlock)) else None

    def comes_after(self, node: cst.CSTNode, statement: cst.CSTNode) -> bool:
        """Does `node` come after the whole of `statement` in the source?"""
        return self.order.get(node, -1) > self.index.ends.get(statement, 1 << 62)

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
        after_anchor = self.order.get(node, 0) >= self.order.get(self.entry.anchor, 0)  # the setup goes before the anchor
        if owner is self.entry.scope:
            return after_anchor
        if owner is self.module:
            return False
        return not any(fn in self.before_setup for fn in self.enclosing_functions(node))

    def inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        """Is `node` part of `container`'s subtree? (Up the parents: rules never walk down.)"""
        current = self.parents.get(node)
        while current is not None:
            if current is container:
                return True
            current = self.parents.get(current)
        return container is self.module

    def enclosing_functions(self, node: cst.CSTNode):
        owner = self.owner_of(node)
        while owner is not self.module and owner is not None:
            yield owner
            owner = self.owner_of(owner)

    @property
    def already_distributed(self) -> bool:
        """Set up for several processes already (its own process group, DDP, mp.spawn, a framework):
        only what torchrun needs changes, and only genuine bugs are reported."""
        return self.distributed is not None

    @property
    def trains(self) -> bool:
        return bool(self.models) or bool(self.trained_elsewhere)

    @property
    def unrewritable_dataparallel(self) -> Tuple[DataParallelSite, ...]:
        """DataParallel that builds a trained model in a shape the tool cannot rewrite: the file is left alone."""
        return self.blocking_dataparallel

    @property
    def moved_after_wrap(self) -> Tuple[ModelFact, ...]:
        """Models a callee moves to a device after the point where they would be wrapped, or that a
        container built before that point trains through: the file is left alone."""
        return tuple(m for m in self.models if (m.moved_later is not None or m.held_by or m.forward_unreached) and not m.already_ddp)

    def enclosing_function_name(self, node: cst.CSTNode) -> str:
        """`Trainer.__init__`, `train`, or `<module>` for the code around `node`."""
        names = []
        current: Optional[cst.CSTNode] = node
        while current is not None:
            if isinstance(current, (cst.FunctionDef, cst.ClassDef)):
                names.append(current.name.value)
            current = self.parents.get(current)
        return ".".join(reversed(names)) or "<module>"

    def local_rank_visible(self, scope: Optional[ScopeOwner]) -> bool:
        """Will the `local_rank` variable written by the setup be visible from `scope`?"""
        if self.entry is None or scope is None:
            return False
        if self.local_rank_at_module is not None or self.entry.scope is self.module:
            # A module global: visible from every function that does not shadow it.
            return scope is self.entry.scope or "local_rank" not in self.local_names.get(scope, ())
        return scope is self.entry.scope
