"""The module planner's common ground (migrator.project.rewrite): what project mode knows about a
module (ModuleRole), and the Planner every concern's planner builds on: the module's tree and
parents, its names, the plan it writes into, and where a node is (its statement, function,
top-level scope; is it the script's model there)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Set, Tuple

import libcst as cst

from migrator import edits
from migrator import names as N
from migrator.analysis.facts import LazyPositions
from migrator.analysis.passes import call_graph
from migrator.dataflow.calls import CallGraph
from migrator.graph.values import Receivers
from migrator.options import Options
from migrator.project.rules import MODULE_NEEDS_MIGRATION
from migrator.types import Change, Diagnostic
from migrator.project.shapes import ModuleNames, walk


# Rank 0 by torchrun's environment (unset: one plain process), with or without a process group.
ENV_RANK_ZERO = 'int(os.environ.get("RANK", 0)) == 0'
ENV_NOT_RANK_ZERO = 'int(os.environ.get("RANK", 0)) != 0'


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
    # Where the scripts' model, epoch number and checkpoint states are read here (migrator.graph.values;
    # None: no caller known).
    models: Optional[Receivers] = None
    epochs: Optional[Receivers] = None
    states: Optional[Receivers] = None


class Planner:
    """The state every concern's planner reads (set up by migrator.project.rewrite._Finder) and the
    questions they share about where a node is."""

    module: cst.Module
    positions: LazyPositions
    parents: Dict[cst.CSTNode, cst.CSTNode]
    role: ModuleRole
    options: Options
    plan: edits.Plan
    names: ModuleNames
    _graph: Optional[CallGraph]
    guarded_functions: Set[cst.FunctionDef]  # DDP032: functions whose other ranks return early
    saved_paths: Set[str]  # DDP032: the paths rank 0 now writes alone
    pickled: Set[cst.CSTNode]  # DDP033: the script's models saved whole, now saved bare
    writers: Dict[cst.FunctionDef, bool]  # DDP032: does the function only write (Checkpoints._only_writes)

    def _trains(self, loop: cst.For) -> bool:
        """The engine's one answer (migrator.dataflow.calls), on this module read alone."""
        if self._graph is None:
            self._graph = call_graph(self.module)
        return self._graph.trains(loop)

    def _top_level_owner(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The module-level def or class holding `node` (None: module-level code)."""
        owner = None
        current = self.parents.get(node)
        while current is not None and current is not self.module:
            if isinstance(current, (cst.FunctionDef, cst.ClassDef)):
                owner = current
            current = self.parents.get(current)
        return owner

    def _on(self, code: str) -> bool:
        return code in self.role.pieces and self.options.fix_enabled(code)

    def _rank_checked(self, call: cst.CSTNode, function: cst.FunctionDef) -> bool:
        node = self.parents.get(call)
        while node is not None and node is not function:
            if isinstance(node, cst.If) and N.mentions_rank(node.test):  # the engine's one reading of a rank check
                return True
            node = self.parents.get(node)
        return any(  # an early return for the other ranks at the top of the function
            isinstance(s, cst.If) and N.mentions_rank(s.test)
            and any(isinstance(n, cst.Return) for n in walk(s.body))
            for s in function.body.body
        )

    def _handed_over(self, node: cst.CSTNode, receiver: str) -> bool:
        """Is `receiver` the script's model where `node` is? Followed from the script's calls into
        the project (migrator.graph.values), whatever it is called: `self.model`, `net`, `self.G`,
        a local `model = self.model`; never a name that only looks like one (`self.model_dir`)."""
        return self._holds(self.role.models, node, receiver)

    def _holds(self, receivers: Optional[Receivers], node: cst.CSTNode, receiver: str) -> bool:
        if receivers is None:
            return False
        cls, method = self._top_level_scope(node)
        return receivers.holds(method, cls, receiver)

    def _top_level_scope(self, node: cst.CSTNode) -> Tuple[Optional[str], Optional[str]]:
        """(the module-level class around `node`, the method of it, or the module-level function)."""
        chain = []
        current = self.parents.get(node)
        while current is not None and current is not self.module:
            if isinstance(current, (cst.FunctionDef, cst.ClassDef)):
                chain.append(current)
            current = self.parents.get(current)
        chain.reverse()  # outermost first
        if not chain:
            return None, None
        if isinstance(chain[0], cst.ClassDef):
            method = chain[1].name.value if len(chain) > 1 and isinstance(chain[1], cst.FunctionDef) else None
            return chain[0].name.value, method
        return None, chain[0].name.value

    # ----------------------------------------------------------------- helpers
    def _statement(self, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
        current = self.parents.get(node)
        while current is not None and not isinstance(current, cst.SimpleStatementLine):
            if isinstance(current, (cst.BaseCompoundStatement, cst.Lambda, cst.BaseComp)):
                return None
            current = self.parents.get(current)
        return current

    def _enclosing(self, node: cst.CSTNode, kind):
        current = self.parents.get(node)
        while current is not None and not isinstance(current, kind):
            current = self.parents.get(current)
        return current

    def _line_col(self, node: cst.CSTNode) -> Tuple[int, int]:
        line, column = self.positions.start(node) or (1, 0)
        return line, column + 1

    def _change(self, code: str, node: cst.CSTNode, message: str) -> None:
        line, col = self._line_col(node)
        self.plan.changes.append(Change(code, line, col, message))

    def _report(self, node: cst.CSTNode, message: str) -> None:
        if self.options.enabled(MODULE_NEEDS_MIGRATION.code, MODULE_NEEDS_MIGRATION.name):
            line, col = self._line_col(node)
            self.plan.diagnostics.append(Diagnostic(MODULE_NEEDS_MIGRATION.code, line, col, message))


def walk_calls(node: cst.CSTNode):
    return (n for n in walk(node) if isinstance(n, cst.Call))
