"""Project mode: plan the migration of a training script together with the modules it imports.

The per-file engine migrates each file by itself. A training script whose loaders, epoch loop or
checkpoints live in other modules of its project (`from trainer import Trainer`,
`make_data_loader(args)` from `dataloaders/`, a `Saver` in `utils/saver.py`) gets the setup and
the DDP wrap from it, and nothing else. Here, after every file has been through the engine:

1. the scripts it migrated (they got the process-group setup, DDP001) are the entry points;
2. the project modules each one imports, directly or through others (migrator.project.graph),
   are planned as part of its training (migrator.project.rewrite: sampler, set_epoch, rank-0
   checkpoints, unwrapped keys), each edit conditional on a process group so other callers of
   the module are unaffected;
3. a module among the files given is changed; one outside them is not, and the script's own
   findings say which module needs what (DDP140).

Modules that are already distributed, test modules and other entry points are never planned.
Everything here is pure: the CLI passes the files it read and applies what comes back.
"""
from __future__ import annotations

import ast
import os
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from migrator.context import ProjectModules, package_of
from migrator.errors import MigrateError
from migrator.graph.modules import ModuleSummary
from migrator.project.values import Family, Handed, Receivers, handed_values
from migrator.options import Options
from migrator.project.graph import ProjectGraph
from migrator.project.outcome import ProjectFile, Update, plannable, relative
from migrator.project.hints import LIBRARY_DECLINES
from migrator.project.trainers import Engine, left_with_its_script, migrate_together
from migrator.project.rewrite import DATAPARALLEL_IN_MODULE, ModuleRole, migrate_module
from migrator.rules.modules import MODULE_MODEL_API, MODULE_NEEDS_MIGRATION, MODULE_SAMPLER, MODULE_SET_EPOCH
from migrator.types import Change, Diagnostic, Result

SETUP_CODE = "DDP001"  # the per-file engine set up the process group: the file is an entry point
SET_EPOCH_CODE = "DDP011"
UNTRACED_LOADER = "DDP108"  # "no DataLoader of this file feeds the training": project mode may find it
NO_EPOCH_LOOP = "DDP109"  # "no epoch loop drives this sharded loader": the module's loop may have one
_ANSWERED = LIBRARY_DECLINES | {MODULE_NEEDS_MIGRATION.code}  # a planned module's per-file declines and hint


def plan_project(files: Sequence[ProjectFile], options: Optional[Options] = None, rewrite: bool = True,
                 engine: Optional[Engine] = None) -> Dict[str, Update]:
    """Updates by real path, for the entry points and the walked modules they train through.
    `engine` runs the per-file engine on a file again, told what project mode knows
    (migrator.project.trainers); without it, a script training through a module that builds its
    own models stays declined."""
    options = options or Options()
    graph = ProjectGraph({f.path: f.text for f in files})
    together = migrate_together(files, graph, engine, rewrite)
    updates = _planned_with_entries(together.files, graph, options, rewrite, together.modules)
    for path, needs in together.needs.items():  # its module was not given: the script stays as it was
        also = updates.get(path, Update(None)).diagnostics
        updates[path] = Update(None, (), needs + tuple(d for d in also if d.code == MODULE_NEEDS_MIGRATION.code), revert=True)
    final = {path: together.updates[path].then(updates.get(path)) if path in together.updates else update
             for path, update in {**together.updates, **updates}.items()}
    for module, scripts in together.scripts.items():
        stuck = next((s for s in scripts if final.get(s, Update(None)).revert), None)
        if stuck is not None and module in final:
            final[module] = left_with_its_script(module, stuck, final[module])
    return final


def _planned_with_entries(files: Sequence[ProjectFile], graph: ProjectGraph, options: Options, rewrite: bool,
                          together: FrozenSet[str]) -> Dict[str, Update]:
    """`together`: modules migrated with their script by the engine (migrator.project.trainers):
    only their loops over the loaders they are handed are planned here (set_epoch)."""
    entries = [f for f in files if any(c.code == SETUP_CODE for c in f.changes)]
    callers = [f for f in files if f.distributed and f not in entries]
    if not entries and not callers:
        return {}
    by_path = {f.path: f for f in files}
    entry_paths = {f.path for f in entries}
    roles: Dict[str, List[ProjectFile]] = {}  # module -> entries reaching it
    used: Dict[str, Optional[Tuple[str, ...]]] = {}  # module -> the names the entries import from it (None: all)
    outside: Dict[str, List[Tuple[str, Tuple[str, ...]]]] = {}  # entry -> modules not given, with chains
    updates: Dict[str, Update] = _answered_by_distributed_callers(callers, graph, by_path)
    for entry in list(entries):
        reached = [(m, chain) for m, chain in graph.reachable(entry.path) if m not in entry_paths and plannable(m, graph.text(m))]
        # A module migrated with the script by the engine had its DataParallel replaced there.
        blocker = _dataparallel_module([r for r in reached if r[0] not in together], graph)
        if blocker is not None:
            updates[entry.path] = _blocked(entry, blocker, graph)
            entries.remove(entry)
            continue
        for module, chain in reached:
            if module in together and not graph.walked(module):
                continue  # not given, and migrated with the script by the engine: migrator.project.trainers says what it needs
            if graph.walked(module):
                roles.setdefault(module, []).append(entry)
                names = graph.imported_names(entry.path, module) if len(chain) == 2 else None
                before = used.get(module, ())
                used[module] = None if names is None or before is None else tuple(dict.fromkeys((*before, *names)))
            else:
                outside.setdefault(entry.path, []).append((module, chain))
    made: Dict[str, FrozenSet[str]] = {}  # entry -> the codes its modules got
    # module -> where the entry's model and epoch are read there; read only when a module or the
    # script's own epochs ask (it parses the script and the modules its values reach)
    handed = _Lazy(lambda path: _handed(by_path[path]))
    inside = _handed_inside([by_path[m] for m in roles])  # ... and what the modules hand each other
    wrapping = {entry.path: _dataparallel_use(entry.text) for entry in entries}  # each script parsed once
    for module, reaching in roles.items():
        batch, why = _batch_mode(options, [wrapping[e.path][0] for e in reaching])
        role = ModuleRole(tuple(e.display for e in reaching), unwrap_keys=not any(wrapping[e.path][1] for e in reaching),
                          batch=batch, batch_why=why, used=used.get(module),
                          **_merged([handed[e.path].get(module) for e in reaching] + [inside.get(module)]),
                          **({"pieces": (MODULE_SET_EPOCH.code,)} if module in together else {}))
        current = by_path[module]
        update = _module_update(current, role, options, rewrite)
        if update is not None and (update.changes or update.diagnostics or _ANSWERED & current.codes):
            updates[module] = update
            for entry in reaching:
                made[entry.path] = made.get(entry.path, frozenset()) | {c.code for c in update.changes}
    for module in together:  # migrated with its script: the loaders it is handed, or feeds it from, are sharded now
        reaching = [e for e in roles.get(module, ()) if MODULE_SAMPLER.code in made.get(e.path, frozenset())]
        if reaching:
            update = updates.get(module, Update(None))
            updates[module] = replace(update, dropped=update.dropped | {UNTRACED_LOADER})
    for entry in entries:
        updates[entry.path] = _entry_update(entry, outside.get(entry.path, ()), graph, options, rewrite,
                                            made.get(entry.path, frozenset()), lambda entry=entry: handed[entry.path])
    return updates


def _answered_by_distributed_callers(callers: Sequence[ProjectFile], graph: ProjectGraph,
                                      by_path: Dict[str, ProjectFile]) -> Dict[str, Update]:
    """A module whose model comes from a caller (DDP101/DDP104/DDP114, and the hint DDP140) is not
    left for a human when a script that imports it is set up for several processes already (the
    project once migrated, or written for torchrun): that script is its caller. Nothing changes."""
    updates: Dict[str, Update] = {}
    if not any(_ANSWERED & file.codes for file in by_path.values()):
        return updates  # no module is left for a human: nothing to answer, no import graph to walk
    for caller in callers:
        for module, _ in graph.reachable(caller.path):
            file = by_path.get(module)
            if file is not None and _ANSWERED & file.codes:
                updates[module] = Update(None, dropped=_ANSWERED)
    return updates


def _module_update(file: ProjectFile, role: ModuleRole, options: Options, rewrite: bool) -> Optional[Update]:
    try:
        found, code = _planned(file, role, options, rewrite)
    except MigrateError:  # a module the planner cannot read stays as the engine left it (a bug is raised: cli reports it)
        return None
    # The engine's "no entry point here" for this module is answered: its caller is migrated with it.
    return Update(code, found.changes, found.diagnostics, _ANSWERED)


def _planned(file: ProjectFile, role: ModuleRole, options: Options, rewrite: bool) -> Tuple[Result, Optional[str]]:
    """What project mode finds in a file, and its new code (None: unchanged, or only checked).

    One code path for the findings, whatever the mode: they are always planned on the file as
    read, so `--check`, `--diff` and `--in-place` report the same changes at the same places;
    the code is then made from the per-file engine's output, which may have moved the lines."""
    found = migrate_module(file.text, role, options, rewrite=False)
    if not rewrite or file.code is None or not found.changes:
        return found, None
    made = migrate_module(file.code, role, options, rewrite=True)
    return found, made.code if made.code != file.code else None


def _entry_update(entry: ProjectFile, outside, graph: ProjectGraph, options: Options, rewrite: bool, made: FrozenSet[str],
                  handed: Callable[[], Dict[str, Handed]]) -> Update:
    """The script's own loops over loaders built elsewhere get set_epoch (DDP031); the modules it
    trains through that were not given are reported on it (DDP140)."""
    code: Optional[str] = None
    changes: Tuple[Change, ...] = ()
    diagnostics: List[Diagnostic] = []
    if not any(c.code == SET_EPOCH_CODE for c in entry.changes):
        try:
            # its own epochs, handed to its own helpers
            role = ModuleRole((entry.display,), pieces=(MODULE_SET_EPOCH.code,),
                              **_merged([handed().get(os.path.realpath(entry.path))]))
            result, code = _planned(entry, role, options, rewrite)
        except MigrateError:  # not Python 3 (an engine bug is raised: cli reports it)
            result = None
        if result is not None and result.changes:
            changes = result.changes
            diagnostics += result.diagnostics
    unmet = False
    crashes: Optional[Diagnostic] = None
    for module, chain in outside:
        text = graph.text(module)
        if text is None:
            continue
        try:
            role = ModuleRole((entry.display,), **_merged([handed().get(module)]))
            needs = migrate_module(text, role, options, rewrite=False)
        except MigrateError:  # not Python 3 (an engine bug is raised: cli reports it)
            continue
        for change in needs.changes:
            unmet = unmet or change.code == MODULE_SAMPLER.code
            diagnostics.append(_needs(entry, module, chain, change, graph.import_line(entry.path, chain[1])))
            if change.code == MODULE_MODEL_API.code and crashes is None:
                crashes = _crashes(entry, module, chain, change, graph.import_line(entry.path, chain[1]))
    if crashes is not None:
        # `evaluate(model, ...)` in evaluate.py reads `net.n_classes`: handed the DDP wrapper, it
        # would raise AttributeError at the first call. A script that crashes is worse than one
        # left as it was: it stays unchanged until its module can be migrated with it.
        return Update(None, (), (crashes, *(d for d in diagnostics if options.enabled(d.code))), revert=True)
    # The script's "no loader of this file feeds the training" and "no epoch loop drives this
    # sharded loader" are answered where its modules got the sampler and the set_epoch.
    made = made | {c.code for c in changes}
    dropped = set()
    if MODULE_SAMPLER.code in made and not unmet:
        dropped.add(UNTRACED_LOADER)
    if MODULE_SET_EPOCH.code in made:
        dropped.add(NO_EPOCH_LOOP)
    return Update(code, changes, tuple(d for d in diagnostics if options.enabled(d.code)), frozenset(dropped))


def _summary(entry: ProjectFile) -> Tuple[ModuleSummary, Tuple[str, ...]]:
    here = Path(entry.path)
    return ModuleSummary(entry.path, entry.text, package_of(here)), ProjectModules.for_script(here).roots


class _Lazy(dict):
    """A dict whose values are made on first use."""

    def __init__(self, make: Callable[[str], Dict[str, Handed]]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, key: str) -> Dict[str, Handed]:
        value = self[key] = self.make(key)
        return value


def _handed(entry: ProjectFile) -> Dict[str, Handed]:
    """File (real path) -> where `entry`'s wrapped models and its epoch are read there (the script
    itself included: its own helpers)."""
    script, roots = _summary(entry)
    return _by_real_path(handed_values(roots, script, entry.models))


def _handed_inside(modules: Sequence[ProjectFile]) -> Dict[str, Handed]:
    """What the planned modules hand each other and themselves: their epochs (`for epoch in
    range(...): self._train_epoch(epoch)` in a base class, run by a subclass's override, so every
    planned class is in the family a `self.` call may reach)."""
    summaries = [_summary(module) for module in modules]  # each module parsed once
    family = [Family(summary.path, node.name) for summary, _ in summaries if summary.tree is not None
              for node in summary.tree.body if isinstance(node, ast.ClassDef)]
    found: Dict[str, Handed] = {}
    for summary, roots in summaries:
        for path, handed in _by_real_path(handed_values(roots, summary, (), family)).items():
            found.setdefault(path, Handed()).merge(handed)
    return found


def _by_real_path(found: Dict[str, Handed]) -> Dict[str, Handed]:
    return {os.path.realpath(path): handed for path, handed in found.items()}


def _merged(found: List[Optional[Handed]]) -> Dict[str, Optional[Receivers]]:
    """ModuleRole's models, epochs and states, from what several scripts hand one module (None:
    no script hands it anything)."""
    known = [h for h in found if h is not None]
    if not known:
        return {}
    merged = Handed()
    for handed in known:
        merged.merge(handed)
    return {"models": merged.models, "epochs": merged.epochs, "states": merged.states,
            "evaluation_loaders": merged.evaluation_loaders()}


def _dataparallel_module(reached, graph: ProjectGraph) -> Optional[Tuple[str, Tuple[str, ...], int]]:
    """The first module the script trains through that wraps a model in DataParallel itself."""
    for module, chain in reached:
        text = graph.text(module) or ""
        if "DataParallel" not in text:
            continue
        # What the script takes from a module it imports directly (`from test import validation`):
        # a DataParallel in a function it never reaches from those names does not concern it.
        used = graph.imported_names(chain[-2], module) if len(chain) == 2 else None
        try:
            found = migrate_module(text, ModuleRole(("the script",), used=used), rewrite=False)
        except MigrateError:  # not Python 3 (an engine bug is raised: cli reports it)
            continue
        for diagnostic in found.diagnostics:
            if diagnostic.message.startswith(DATAPARALLEL_IN_MODULE):
                return module, chain, diagnostic.line
    return None


def _blocked(entry: ProjectFile, blocker, graph: ProjectGraph) -> Update:
    module, chain, line = blocker
    via = " -> ".join(relative(p, entry.path) for p in chain[1:-1])
    message = (
        f"left unchanged: {relative(module, entry.path)}:{line}, which this script trains through"
        f"{f' (imported through {via})' if via else ''}, wraps the model in DataParallel itself; a DataParallel "
        "around the DDP model would break: replace it there with DDP (or drop it), then run ddp-migrate again"
    )
    diagnostic = Diagnostic(MODULE_NEEDS_MIGRATION.code, graph.import_line(entry.path, chain[1]), 1, message)
    return Update(None, (), (diagnostic,), revert=True)



def _needs(entry: ProjectFile, module: str, chain: Tuple[str, ...], change: Change, line: int) -> Diagnostic:
    """DDP140 on the script: `utils/saver.py:12 (imported through trainer.py) needs ...`."""
    shown = relative(module, entry.path)
    through = _imported_through(entry, chain)
    message = (f"{shown}:{change.line} needs {change.code}: {change.message}{through}; it is not among the files "
               "given, so it was left unchanged: run ddp-migrate on the project's folder, or name it too")
    return Diagnostic(MODULE_NEEDS_MIGRATION.code, line, 1, message)  # at the import that leads to it


def _imported_through(entry: ProjectFile, chain: Tuple[str, ...]) -> str:
    """` (imported through trainer.py -> utils/saver.py)`, or nothing for a module the script imports."""
    via = " -> ".join(relative(p, entry.path) for p in chain[1:-1])
    return f" (imported through {via})" if via else ""


def _crashes(entry: ProjectFile, module: str, chain: Tuple[str, ...], change: Change, line: int) -> Diagnostic:
    """DDP140 on a script left unchanged: a module not given reads the model's own attributes."""
    shown = relative(module, entry.path)
    through = _imported_through(entry, chain)
    message = (f"left unchanged: {shown}:{change.line}{through} reads the model's own attributes, which the DDP "
               f"wrapper does not have (it would raise AttributeError there), and {shown} is not among the files given: "
               "run ddp-migrate on the project's folder, or name it too")
    return Diagnostic(MODULE_NEEDS_MIGRATION.code, line, 1, message)


def _batch_mode(options: Options, wraps: Sequence[bool]) -> Tuple[str, str]:
    """--batch for the loaders of a module: the option, else "global" when a script that trains
    through it wrapped its model in DataParallel (as rules.global_batch decides per file)."""
    if options.batch is not None:
        return options.batch, f"--batch {options.batch}"
    if any(wraps):
        return "global", "the default for a DataParallel script: its batch already was the global one"
    return "per-process", "the default for a single-GPU script"


def _dataparallel_use(text: str) -> Tuple[bool, bool]:
    """(does the script call DataParallel at all, does it wrap outside any `if`). Wrapped for good,
    its checkpoints had `module.`-prefixed keys, as DDP's have: the modules' state_dict calls stay."""
    if "DataParallel" not in text:
        return False, False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False, False
    calls = any(isinstance(node, ast.Call) and _called(node) == "DataParallel" for node in ast.walk(tree))
    return calls, calls and _unconditional_dataparallel(tree.body)


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _unconditional_dataparallel(body: List[ast.stmt]) -> bool:
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.With, ast.For, ast.While, ast.Try)):
            nested = list(statement.body) + list(getattr(statement, "finalbody", []))
            if _unconditional_dataparallel(nested):
                return True
            continue
        if isinstance(statement, ast.If):
            if "__name__" in ast.dump(statement.test) and _unconditional_dataparallel(statement.body):
                return True  # the launch block runs whenever the script does
            continue
        if any(isinstance(node, ast.Call) and _called(node) == "DataParallel" for node in ast.walk(statement)):
            return True
    return False
