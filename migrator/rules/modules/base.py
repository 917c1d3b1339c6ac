"""The common ground of the module rules (project mode: DDP030-DDP038, reported as DDP140).

A module that a migrated training script imports is read by the same analysis as a script (the
one traversal, its binding index, call graph and value flow: migrator.analysis), and these rules
plan into it from what that analysis collected, never walking the module again. ModuleRole is
what project mode knows of the module (who reaches it, where the script's model, epoch and
checkpoint state arrive in it); ModulePlanner holds the analysis, the role and the plan each rule
writes into, and the questions they share about where a node is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from migrator import edits
from migrator import names as N
from migrator.graph.bindings import dotted_name
from migrator.names import PROGRESS_BARS, TRACKER_RUNS
from migrator.options import Options
from migrator.tree import descendants
from migrator.types import Change, Diagnostic

# Rank 0 by torchrun's environment (unset: one plain process), with or without a process group.
ENV_RANK_ZERO = 'int(os.environ.get("RANK", 0)) == 0'
ENV_NOT_RANK_ZERO = 'int(os.environ.get("RANK", 0)) != 0'
NEEDS_MIGRATION = "DDP140"  # the report of what a module needs and no rule here can change


@dataclass
class Receivers:
    """One module's spellings of a handed-over value: by top-level function (`train`), by method
    (`Trainer.fit`), by class (`self.model`, read in any of its methods), and `<module>`."""

    scopes: Dict[str, Set[str]] = field(default_factory=dict)

    def add(self, scope: str, spelled: str) -> None:
        self.scopes.setdefault(scope, set()).add(spelled)

    def holds(self, function: Optional[str], cls: Optional[str], spelled: str) -> bool:
        """Is `spelled` the value in `function` (of class `cls`, when a method)?"""
        if cls is not None:
            return spelled in self.scopes.get(cls, ()) or bool(function) and spelled in self.scopes.get(f"{cls}.{function}", ())
        return spelled in self.scopes.get(function or "<module>", ())


@dataclass(frozen=True)
class ModuleRole:
    """What project mode knows about a module a migrated training script imports.

    `entries`: the scripts (as displayed) that reach it through their imports.
    `pieces`: the codes planned here (default: all); a migrated script itself only gets DDP031,
    the rest of it is the per-file engine's.
    `unwrap_keys`: the script's model was not wrapped in DataParallel unconditionally, so the
    checkpoints it wrote had the bare module's keys: the DDP-wrapped model saves through `.module`.
    """

    entries: Tuple[str, ...]
    pieces: Tuple[str, ...] = ("DDP030", "DDP031", "DDP032", "DDP033", "DDP034", "DDP035", "DDP036", "DDP037",
                               "DDP038")
    unwrap_keys: bool = True
    batch: str = "per-process"  # Options.batch as it applies to the scripts (rules.global_batch)
    batch_why: str = ""
    used: Optional[Tuple[str, ...]] = None  # the names the script imports from it (None: the whole module)
    # Where the scripts' model, epoch number and checkpoint states are read here (migrator.project.values:
    # None: no caller known).
    models: Optional[Receivers] = None
    epochs: Optional[Receivers] = None
    states: Optional[Receivers] = None
    # The module's functions whose loaders the scripts only evaluate with (`get_test_dataloader`).
    evaluation_loaders: FrozenSet[str] = frozenset()


@dataclass
class ModuleNames:
    """How the module spells torch, torch.distributed, DataLoader, DistributedSampler and DDP (its
    module-level imports, as the edits must spell them)."""

    torch_like: Set[str]
    dataloaders: Set[str]
    torch_saves: Set[str]
    torch_loads: Set[str]
    dist: str
    dist_needed: bool
    sampler: str
    sampler_needed: bool
    ddp: str
    ddp_needed: bool
    progress_bars: Set[str] = frozenset()  # how the module calls tqdm: `tqdm`, `tqdm.tqdm`, `trange`
    tracker_runs: Set[str] = frozenset()  # how it starts an experiment tracker's run: `wandb.init`

    @classmethod
    def of(cls, module: cst.Module) -> "ModuleNames":
        imported: Dict[str, str] = {}  # local name -> what it is
        for node in module.body:
            for small in node.body if isinstance(node, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        full = dotted_name(alias.name) or ""
                        local = alias.asname.name.value if alias.asname else full.split(".")[0]  # type: ignore[union-attr]
                        imported[local] = full if alias.asname else local
                elif isinstance(small, cst.ImportFrom) and small.module is not None and not isinstance(small.names, cst.ImportStar):
                    base = dotted_name(small.module) or ""
                    for alias in small.names:
                        name = alias.name.value if isinstance(alias.name, cst.Name) else ""
                        local = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
                        imported[local] = f"{base}.{name}"
        torch_like = {local for local, full in imported.items() if full == "torch" or full.startswith("torch.")} | {"torch"}
        dataloaders = {local for local, full in imported.items() if full.endswith(".DataLoader") and full.startswith("torch")}
        torch_saves = {f"{local}.save" for local, full in imported.items() if full == "torch"} | {
            local for local, full in imported.items() if full == "torch.save"}
        torch_loads = {f"{local}.load" for local, full in imported.items() if full == "torch"} | {
            local for local, full in imported.items() if full == "torch.load"}
        dist = next((local for local, full in imported.items() if full == "torch.distributed"), None)
        sampler = next((local for local, full in imported.items() if full.endswith(".DistributedSampler")), None)
        ddp = next((local for local, full in imported.items() if full.endswith(".DistributedDataParallel")), None)
        bars = {local for local, full in imported.items() if full in PROGRESS_BARS} | {
            f"{local}.{name}" for local, full in imported.items() if full in ("tqdm", "tqdm.auto") for name in ("tqdm", "trange")}
        runs = {local for local, full in imported.items() if full in TRACKER_RUNS} | {
            f"{local}.{run.rpartition('.')[2]}" for local, full in imported.items() for run in TRACKER_RUNS
            if full == run.rpartition(".")[0]}
        return cls(torch_like, dataloaders, torch_saves, torch_loads, dist or "dist", dist is None, sampler or "DistributedSampler",
                   sampler is None, ddp or "DDP", ddp is None, frozenset(bars), frozenset(runs))

    def need(self, plan: edits.Plan, dist: bool = False, sampler: bool = False, ddp: bool = False) -> None:
        if dist and self.dist_needed:
            plan.need_import("torch.distributed", None, "dist")
        if sampler and self.sampler_needed:
            plan.need_import("torch.utils.data.distributed", "DistributedSampler", None)
        if ddp and self.ddp_needed:
            plan.need_import("torch.nn.parallel", "DistributedDataParallel", "DDP")


class ModulePlanner:
    """The state every module rule reads and writes, and the questions they share."""

    def __init__(self, analysis, role: ModuleRole, options: Options) -> None:
        self.a = analysis  # migrator.analysis' _Analysis of the module: its sites, bindings, call graph
        self.c = analysis.c
        self.module: cst.Module = analysis.module
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = analysis.parents
        self.positions = analysis.positions
        self.role = role
        self.options = options
        self.names = ModuleNames.of(self.module)
        self.parts: List[edits.Plan] = []  # one per fix that runs (`_fix`), in planning order
        self.plan = edits.Plan()
        self.guarded_functions: Set[cst.FunctionDef] = set()  # DDP032: functions whose other ranks return early
        self.saved_paths: Set[str] = set()  # DDP032: the paths rank 0 now writes alone
        self.pickled: Set[cst.CSTNode] = set()  # DDP033: the script's models saved whole, now saved bare
        self.writers: Dict[cst.FunctionDef, bool] = {}  # DDP032: does the function only write

    def _fix(self, code: str) -> bool:
        """Whether fix `code` runs here; if it does, what follows plans into a plan of its own
        (edits.Plan.for_fix; "": the reports no fix owns, which always run)."""
        if code and not self._on(code):
            return False
        self.plan = edits.Plan().for_fix(code, self.parts)
        self.parts.append(self.plan)
        return True

    def _on(self, code: str) -> bool:
        return code in self.role.pieces and self.options.fix_enabled(code)

    def _trains(self, loop: cst.For) -> bool:
        """The engine's one answer (migrator.dataflow.calls), on this module read alone."""
        return self.a.call_graph.trains(loop)

    def _top_level_owner(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The module-level def or class holding `node` (None: module-level code)."""
        owner = None
        for current in self.a.ancestors(node):
            if isinstance(current, (cst.FunctionDef, cst.ClassDef)):
                owner = current
        return owner

    def _rank_checked(self, call: cst.CSTNode, function: cst.FunctionDef) -> bool:
        for node in self.a.ancestors(call):
            if node is function:
                break
            if isinstance(node, cst.If) and N.mentions_rank(node.test):  # the engine's one reading of a rank check
                return True
        return any(  # an early return for the other ranks at the top of the function
            isinstance(s, cst.If) and N.mentions_rank(s.test)
            and any(True for _ in descendants(s.body, cst.Return))
            for s in function.body.body
        )

    def _handed_over(self, node: cst.CSTNode, receiver: str) -> bool:
        """Is `receiver` the script's model where `node` is? Followed from the script's calls into
        the project (migrator.project.values), whatever it is called: `self.model`, `net`, `self.G`,
        a local `model = self.model`; never a name that only looks like one (`self.model_dir`)."""
        return self._holds(self.role.models, node, receiver)

    def _holds(self, receivers: Optional[Receivers], node: cst.CSTNode, receiver: str) -> bool:
        if receivers is None:
            return False
        cls, method = self._top_level_scope(node)
        return receivers.holds(method, cls, receiver)

    def _top_level_scope(self, node: cst.CSTNode) -> Tuple[Optional[str], Optional[str]]:
        """(the module-level class around `node`, the method of it, or the module-level function)."""
        chain = [n for n in self.a.ancestors(node) if isinstance(n, (cst.FunctionDef, cst.ClassDef))]
        chain.reverse()  # outermost first
        if not chain:
            return None, None
        if isinstance(chain[0], cst.ClassDef):
            method = chain[1].name.value if len(chain) > 1 and isinstance(chain[1], cst.FunctionDef) else None
            return chain[0].name.value, method
        return None, chain[0].name.value

    def _statement(self, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
        for current in self.a.ancestors(node):
            if isinstance(current, cst.SimpleStatementLine):
                return current
            if isinstance(current, (cst.BaseCompoundStatement, cst.Lambda, cst.BaseComp)):
                return None
        return None

    def _enclosing(self, node: cst.CSTNode, kind):
        return next((current for current in self.a.ancestors(node) if isinstance(current, kind)), None)

    def _line_col(self, node: cst.CSTNode) -> Tuple[int, int]:
        line, column = self.positions.start(node) or (1, 0)
        return line, column + 1

    def _change(self, code: str, node: cst.CSTNode, message: str) -> None:
        line, col = self._line_col(node)
        self.plan.changes.append(Change(code, line, col, message))

    def _report(self, node: cst.CSTNode, message: str) -> None:
        if self.options.enabled(NEEDS_MIGRATION, "project-module-needs-migration"):
            line, col = self._line_col(node)
            self.plan.diagnostics.append(Diagnostic(NEEDS_MIGRATION, line, col, message))


# -- the syntax the rules share ------------------------------------------------------------
def source_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def short(node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(source_of(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_plain_reference(node: cst.BaseExpression) -> bool:
    return dotted_name(node) is not None


def is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value in ("False", "None")


def calls_in(node: cst.CSTNode):
    return descendants(node, cst.Call)


def first_statement(function: cst.FunctionDef) -> cst.BaseStatement:
    """The guard goes after the docstring."""
    body = list(function.body.body)  # type: ignore[union-attr]
    first = body[0]
    if (len(body) > 1 and isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1
            and isinstance(first.body[0], cst.Expr) and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))):
        return body[1]
    return first


def assigned_target(statement: cst.SimpleStatementLine) -> Optional[str]:
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return dotted_name(small.targets[0].target)
    return None
