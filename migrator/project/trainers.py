"""Project mode: a script whose training runs in a class of another module that builds its models
itself (StarGAN's `solver = Solver(loader, config); solver.train()`, a config-driven `Trainer`).

The per-file engine declines both files: the script builds no model (DDP114, or nothing said when
it never names torch), the module trains but has no entry point to set up the process group in
(DDP101). Migrated together they are one
program, so the engine runs on both again, told so (migrator.context.FileContext):

- the module with `set_up_by`: its caller sets up the process group before any of its functions
  runs, so the module gets everything but the setup (the DDP wraps, rank-0 checkpoints and prints,
  `.module` for the checkpoint keys and the model's own methods);
- the script with `trains_through`, the names it imports from the module: calling one is its
  training, so the setup goes before it (and before the loaders it hands over) and the teardown
  after it.

Both are made, or neither: the module must come out with its models wrapped and nothing left for
a human, the script must get its setup, and no other file among those given may import the
module without being migrated with it (it would run the DDP models with no process group);
otherwise nothing changes and the script's findings say why (DDP140).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from migrator.errors import MigrateError
from migrator.project.graph import ProjectGraph
from migrator.project.outcome import ProjectFile, Update, plannable, relative
from migrator.rules.modules import MODULE_NEEDS_MIGRATION
from migrator.types import Diagnostic, Result

NO_ENTRY_POINT = "DDP101"  # the module trains, with models of its own, but nothing sets up a group
NOT_MIGRATED = "DDP114"  # the script trains through something built elsewhere, and nothing was done
SETUP = "DDP001"
WRAP = "DDP003"
_MAX_LISTED = 6  # changes named one by one on a script whose module was not given

# Runs the per-file engine on a file again: (file, set_up_by=script, trains_through=names) -> Result.
Engine = Callable[..., Result]


@dataclass(frozen=True)
class Together:
    """What migrating scripts with the modules they train through gives."""

    files: List[ProjectFile]  # the files given, those migrated together replaced by their new outcome
    updates: Dict[str, Update]  # by path: the new outcomes (`replaces`), or why a pair was left alone
    modules: FrozenSet[str] = frozenset()  # the modules migrated (or, not given, to migrate) with a script
    # Scripts whose module was not among the files given: what it needs; the script stays as it was
    # (its setup alone would have every rank train a copy of its own).
    needs: Dict[str, Tuple[Diagnostic, ...]] = field(default_factory=dict)
    scripts: Dict[str, Tuple[str, ...]] = field(default_factory=dict)  # module migrated -> the scripts migrated with it


def migrate_together(
    files: Sequence[ProjectFile], graph: ProjectGraph, engine: Optional[Engine], rewrite: bool,
) -> Together:
    """Each module that builds and trains its models (DDP101), with the scripts that import it."""
    if engine is None:
        return Together(list(files), {})
    modules = {f.path: f for f in files if NO_ENTRY_POINT in f.codes and not f.distributed}
    callers = _callers(files, graph, engine, modules)
    replaced: Dict[str, ProjectFile] = {}
    updates: Dict[str, Update] = {}
    needs: Dict[str, Tuple[Diagnostic, ...]] = {}
    outcomes = {path: _together(modules[path], scripts, files, graph, engine) for path, scripts in callers.items()}
    # A script whose factory may pick a module that cannot be migrated stays as it was, and so do
    # the others it would be migrated with: `--model` would choose a model trained without DDP.
    failed: Dict[str, Tuple[str, Diagnostic]] = {}
    for path, outcome in outcomes.items():
        if isinstance(outcome, Diagnostic):
            for script, _ in callers[path]:
                failed.setdefault(script.path, (path, outcome))
    for path, scripts in callers.items():
        module, outcome = modules[path], outcomes[path]
        stuck = next((script for script, _ in sorted(scripts, key=lambda pair: "__main__" not in pair[0].text)
                      if script.path in failed), None)
        if isinstance(outcome, Diagnostic) or stuck is not None:
            for script, _ in scripts:
                cause, why = failed[script.path]
                updates[script.path] = Update(None, diagnostics=(replace(why, line=graph.import_line(script.path, cause)),))
            if not isinstance(outcome, Diagnostic) and graph.walked(path):
                updates[path] = _left_with_a_sibling(module, stuck, failed[stuck.path][0])
            continue
        given = graph.walked(path)
        for file, result in outcome:
            replaced[file.path] = ProjectFile(file.path, file.display, file.text, result.code if rewrite else None,
                                              result.changes, result.diagnostics, file.distributed, result.models)
            if given:
                updates[file.path] = Update(result.code if rewrite else None, result.changes, result.diagnostics, replaces=True)
            elif file is not module:
                needs[file.path] = _module_needs(file, module, outcome[0][1], graph)
    scripts_given = any(_runs(f) for f in files if f.path not in modules)  # else: its hint says to give them
    for path, module in modules.items():
        if scripts_given and path not in callers and graph.walked(path):
            updates[path] = _no_script(module)
    scripts = {path: tuple(s.path for s, _ in callers[path]) for path in callers if path in replaced}
    return Together([replaced.get(f.path, f) for f in files], updates, frozenset(callers), needs, scripts)


def _left_with_a_sibling(module: ProjectFile, script: ProjectFile, cause: str) -> Update:
    first = min((d for d in module.diagnostics if d.code == NO_ENTRY_POINT), key=lambda d: (d.line, d.col), default=None)
    return Update(None, diagnostics=(_left_unchanged(module.path, first.line if first else 1, first.col if first else 1, (
        f"{relative(script.path, module.path)} chooses it by name; it may choose {relative(cause, module.path)} too, "
        "which cannot be migrated (see its findings): the script and every module it may train stay as they are, "
        "or that model would train without DDP")),), dropped=frozenset({MODULE_NEEDS_MIGRATION.code}))


def left_with_its_script(module: str, script: str, update: Update) -> Update:
    """A module migrated with a script that, after all, stays as it was (a DataParallel elsewhere
    blocks it): the module stays too, its DDP models would run with no process group."""
    line = min((c.line for c in update.changes), default=1)
    return Update(None, (), (_left_unchanged(module, line, 1, (
        f"is migrated together with {relative(script, module)}, which stays as it was (see its findings): "
        "the two are migrated together or not at all")),), revert=True)


def _left_unchanged(module: str, line: int, col: int, why: str) -> Diagnostic:
    """DDP140 on a module that builds and trains its models, kept as it was with its script."""
    return Diagnostic(MODULE_NEEDS_MIGRATION.code, line, col,
                      f"left unchanged: this module builds and trains its models, and {why}")


def _callers(files: Sequence[ProjectFile], graph: ProjectGraph, engine: Engine,
             modules: Dict[str, ProjectFile]) -> Dict[str, List[Tuple[ProjectFile, Tuple[str, ...]]]]:
    """Module -> the scripts that import names from it, with those names. A module not given is
    looked at (from disk) only for a script whose training the engine found and did not migrate."""
    callers: Dict[str, List[Tuple[ProjectFile, Tuple[str, ...]]]] = {}
    for script in files:
        if script.distributed or script.changes or script.path in modules:
            continue  # migrated, distributed, or a module of its own kind: nothing to set up
        runs = _runs(script)
        for module in graph.imports(script.path):
            names = graph.imported_names(script.path, module)
            if not names:
                continue
            # The module itself, or those its factory picks by name at run time (`create_model(opt)`
            # importing `models/<opt.model>_model.py`): the script's call of the factory is its training.
            # Every file that calls the factory builds those models (a test script with no main guard
            # too): each is migrated with them, or the engine finds no place for its setup and none is.
            chosen = graph.chosen_modules(module) if graph.defines_functions(module, names) else ()
            for trained in ((module,) if runs else ()) + chosen:
                # a module not given is read when the script's training was found and not migrated,
                # or when the factory it calls picks it: the script names no model of its own then
                read = NOT_MIGRATED in script.codes or trained in chosen
                if trained in modules or read and _trains_unset(trained, graph, engine, modules):
                    callers.setdefault(trained, []).append((script, names))
                    graph.imported_through(script.path, trained, module)
    return callers


def _no_script(module: ProjectFile) -> Update:
    """A module that builds and trains its models, with no script among the files given that
    builds its classes by name: its per-file hint ("project mode migrates the two together") is
    answered with what project mode found."""
    first = min((d for d in module.diagnostics if d.code == NO_ENTRY_POINT), key=lambda d: (d.line, d.col))
    message = ("left unchanged: this module builds and trains its models, but no script among the files given "
               "builds its classes by name (a factory that chooses the class at run time, by importlib or a registry, "
               "is not followed): set up the process group in the script and wrap the models here by hand")
    return Update(None, diagnostics=(Diagnostic(MODULE_NEEDS_MIGRATION.code, first.line, first.col, message),),
                  dropped=frozenset({MODULE_NEEDS_MIGRATION.code}))


def _trains_unset(path: str, graph: ProjectGraph, engine: Engine, modules: Dict[str, ProjectFile]) -> bool:
    """A module not among the files given that trains with models of its own and no entry point
    (what the engine says of it alone): read from disk, and kept in `modules`."""
    if path in modules:
        return True
    text = graph.text(path)
    if graph.walked(path) or text is None or not plannable(path, text):
        return False
    try:
        alone = engine(ProjectFile(path, path, text, None))
    except MigrateError:  # a module that is not Python 3 is not followed (a bug in the engine is raised)
        return False
    if NO_ENTRY_POINT not in {d.code for d in alone.diagnostics}:
        return False
    modules[path] = ProjectFile(path, path, text, None, alone.changes, alone.diagnostics)
    return True


def _module_needs(script: ProjectFile, module: ProjectFile, made: Result, graph: ProjectGraph) -> Tuple[Diagnostic, ...]:
    """The script's findings when the module it trains through was not given: why it is left as it
    is, then each change the module needs (DDP140, at the import)."""
    line = graph.import_line(script.path, module.path)
    shown = relative(module.path, script.path)
    why = Diagnostic(MODULE_NEEDS_MIGRATION.code, line, 1, (
        f"left unchanged: this script trains through {shown}, which builds and trains its models, and the two are "
        f"migrated together; {shown} is not among the files given: run ddp-migrate on the project's folder, or name it too"))
    listed = [Diagnostic(MODULE_NEEDS_MIGRATION.code, line, 1, f"{shown}:{change.line} needs {change.code}: {change.message}")
              for change in made.changes[:_MAX_LISTED]]
    rest = Counter(change.code for change in made.changes[_MAX_LISTED:])
    if rest:
        counted = ", ".join(f"{code} x{count}" for code, count in sorted(rest.items()))
        listed.append(Diagnostic(MODULE_NEEDS_MIGRATION.code, line, 1, f"{shown}: and {sum(rest.values())} more changes there ({counted})"))
    return (why, *listed)


def _together(module: ProjectFile, scripts, files: Sequence[ProjectFile], graph: ProjectGraph, engine: Engine):
    """[(file, its new result)] for the module and its scripts, or the Diagnostic saying why not."""
    shown = os.path.basename(module.path)
    others = [f for f in files if f.path != module.path and f not in [s for s, _ in scripts]
              and not f.distributed and _runs(f) and module.path in graph.imports(f.path)]
    if others:
        return _declined(f"{shown} builds and trains its models, but {relative(others[0].path, module.path)} imports it "
                         "too and sets up no process group: the DDP models would run without one there")
    try:
        made = engine(module, set_up_by=scripts[0][0].display)
    except MigrateError:  # a module the engine cannot migrate this way stays as it was
        return _declined(f"{shown} builds and trains its models, but migrating it with this script failed")
    if not any(c.code == WRAP for c in made.changes) or NO_ENTRY_POINT in {d.code for d in made.diagnostics}:
        why = next((f" ({shown}:{d.line} {d.code}: {d.message})" for d in made.diagnostics
                    if d.code not in (NO_ENTRY_POINT, MODULE_NEEDS_MIGRATION.code)), "")
        return _declined(f"{shown} builds and trains its models, but they could not be wrapped in DDP there{why}")
    outcome = [(module, made)]
    for script, names in scripts:
        try:
            result = engine(script, trains_through=frozenset(names))
        except MigrateError:
            result = None
        if result is None or not any(c.code == SETUP for c in result.changes):
            return _declined(f"{shown} builds and trains its models, but no place to set up the process group "
                             f"before {relative(script.path, module.path)} calls {', '.join(names)} was found")
        outcome.append((script, result))
    return outcome


def _runs(file: ProjectFile) -> bool:
    """A script, by its text: a main guard, or the engine's word that it trains through something
    built elsewhere. A module that subclasses the class (`class SinCUT(CUTModel)`) is none; the
    engine, run on a candidate, decides the rest."""
    return "__main__" in file.text or NOT_MIGRATED in file.codes


def _declined(why: str) -> Diagnostic:
    return Diagnostic(MODULE_NEEDS_MIGRATION.code, 1, 1, f"left unchanged: {why}; migrate the two by hand")

