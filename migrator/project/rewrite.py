"""Project mode's engine for one module a migrated training script imports.

Such a module is called by the script's training but has no entry point of its own: the
trainer class, the `make_data_loader(args)` helper, the checkpoint `Saver`. The per-file engine
leaves it alone (it cannot know who calls it); project mode knows the caller sets up the process
group, and the module rules plan here (migrator.rules.modules: DDP030-DDP038), on the module read
by the same analysis as a script (migrator.analysis): parse -> analyse -> plan each fix into a
plan of its own -> apply, so that a suppressed fix is dropped from what was planned
(`_Planned.without`, as in the per-file engine).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Tuple, Union

import libcst as cst

from migrator import edits, suppress
from migrator.positions import LazyPositions
from migrator.analysis.passes import _analysis
from migrator.codegen import check_parses, with_imports
from migrator.options import Options
from migrator.parsing import parse
from migrator.rules.modules import DATAPARALLEL_IN_MODULE, ModuleRole, plan_module
from migrator.types import Change, Result

__all__ = ["DATAPARALLEL_IN_MODULE", "ModuleRole", "migrate_module"]

# A module with none of these words has nothing any module rule looks for: it is not parsed.
_WORDS = ("DataLoader", "loader", "save", "state_dict", "model", "net", "iter", "data", "print", "tqdm",
          "mkdir", "makedirs", "set_device", "stdout", "open(")


def migrate_module(
    source: str, role: ModuleRole, options: Optional[Options] = None, rewrite: bool = True,
    parsed: Optional[Tuple[cst.Module, LazyPositions]] = None,
) -> Result:
    """The module's source with the project edits made (or, `rewrite=False`, only what they
    would be: `code` stays `source` and `pending` says whether anything would change).
    `parsed`: `source` already parsed (the per-file engine has it), so it is not parsed again.

    `# ddp-migrate: ignore[DDP032]` comments work as in a script (migrator.suppress): each fix
    plans into a plan of its own, and a suppressed one is dropped from them."""
    options = options or Options()
    engine = functools.partial(_plan_module, role=role, rewrite=rewrite, parsed=(source, parsed) if parsed else None)
    return suppress.apply_planned(engine, source, options, suppress.python_suppressions(source))


def _plan_module(
    source: str, options: Options, role: ModuleRole, rewrite: bool,
    parsed: Optional[Tuple[str, Tuple[cst.Module, LazyPositions]]] = None,
) -> Union[Result, "_Planned"]:
    if not any(word in source for word in _WORDS):
        return Result(code=source, original=source)
    if parsed is not None and parsed[0] == source:  # a suppression's rerun gets other text, parsed anew
        module = parsed[1][0]
        analysis = _analysis(module, None, source)
    else:
        module, analysis = analysed(source)  # a SourceParseError where it is not Python 3
    parts = plan_module(analysis, source, role, options)
    return _Planned(source, module, analysis.parents, tuple(parts), rewrite)


_ANALYSED: Dict[str, Tuple[cst.Module, object]] = {}  # a module's text -> its tree and analysis


def analysed(source: str) -> Tuple[cst.Module, object]:
    """A module parsed and analysed once per process for project mode: the flow of the script's
    values into it (migrator.project.values) and its planning read the same tree (read-only)."""
    found = _ANALYSED.get(source)
    if found is None:
        if len(_ANALYSED) > 256:  # a long-lived process (the test suite) reads many projects
            _ANALYSED.clear()
        module = parse(source)
        found = _ANALYSED[source] = (module, _analysis(module, None, source))
    return found


@dataclass(frozen=True)
class _Planned:
    """A module planned: each fix's plan, from which the Result is made (as api._Planned)."""

    source: str
    module: cst.Module
    parents: Dict[cst.CSTNode, cst.CSTNode]
    parts: Tuple[edits.Plan, ...]
    rewrite: bool

    def without(self, options: Options, changes: FrozenSet[Change] = frozenset()) -> Optional[Result]:
        """The Result with the fixes `options` turns off dropped; None where a part that stays read
        what one of them planned (the DataParallel report, which a network factory's fix takes on).
        Project mode's fixes go whole: none has sites of its own (`changes` is for those)."""
        if changes:
            return None
        dropped = {part.owner for part in self.parts if part.owner and not options.fix_enabled(part.owner)}
        if any(part.read_from & dropped for part in self.parts if part.owner not in dropped):
            return None
        return self.result(options)

    def result(self, options: Options) -> Result:
        source = self.source
        kept = [part for part in self.parts if not part.owner or options.fix_enabled(part.owner)]
        plan = edits.merged(kept, frozenset(part.owner for part in kept if part.owner))
        if plan.empty:
            return Result(code=source, diagnostics=tuple(plan.diagnostics), original=source)
        changes = tuple(sorted(plan.changes, key=lambda c: (c.line, c.col)))
        if not self.rewrite:
            return Result(source, changes, tuple(plan.diagnostics), original=source, pending=True)
        new = with_imports(edits.apply(self.module, plan, self.parents), plan)
        check_parses(new.code)
        return Result(new.code, changes, tuple(plan.diagnostics), original=source)
