"""What a module without an entry point needs, said where the per-file engine declines it.

`train(config, model, train_iter)` in train_eval.py, a Trainer class in trainer.py: the model
comes from a caller in another module, so the per-file engine cannot migrate the file (DDP101,
DDP104, DDP114). Project mode can, with the script that calls it; this finding (DDP140) says so
and lists what project mode would change in the module itself, so a run on the file alone is
never a silent decline.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import libcst as cst

from migrator.positions import LazyPositions
from migrator.options import Options
from migrator.project.rewrite import ModuleRole, migrate_module
from migrator.rules.modules import MODULE_NEEDS_MIGRATION, MODULE_SET_EPOCH
from migrator.types import Diagnostic, Result

# The declines of a module whose model comes from a caller elsewhere.
LIBRARY_DECLINES = frozenset({"DDP101", "DDP104", "DDP114"})
NO_ENTRY_POINT = "DDP101"  # of those, the one of a module that builds the models it trains
_MAX_LISTED = 6


def library_hint(
    source: str, declines: Sequence[Diagnostic], options: Options, parsed: Optional[Tuple[cst.Module, LazyPositions]] = None,
    with_its_script: Optional[Callable[[], Result]] = None,
) -> Optional[Diagnostic]:
    """DDP140 at the first decline: run project mode; what it would change here. `with_its_script`:
    the engine's verdict on this module with its script setting up the process group, for a
    module that builds the models it trains (DDP101): project mode migrates the two together."""
    if not options.enabled(MODULE_NEEDS_MIGRATION.code, MODULE_NEEDS_MIGRATION.name) or not declines:
        return None
    first = min(declines, key=lambda d: (d.line, d.col))
    if with_its_script is not None and first.code == NO_ENTRY_POINT:
        return _builds_its_models(first, with_its_script, source, options, parsed)
    try:
        needs = migrate_module(source, ModuleRole(("the script that calls it",)), options, rewrite=False, parsed=parsed)
    except Exception:  # noqa: BLE001 - a hint is never worth a failure
        return None
    changes = _listed([f"line {c.line} {c.code}: {c.message}" for c in needs.changes], [c.code for c in needs.changes])
    by_hand = _listed([f"line {d.line}: {d.message}" for d in needs.diagnostics])
    parts = [f"here it would change: {changes}" if changes else "nothing in this module itself needs a rewrite"]
    if by_hand:
        parts.append(f"by hand: {by_hand}")
    message = (
        "the model this module trains comes from a caller in another module, so the file alone cannot be migrated: "
        "run ddp-migrate on the project's folder (or name the calling script too), and project mode migrates this "
        "module together with the script that builds the model; " + "; ".join(parts)
    )
    return Diagnostic(MODULE_NEEDS_MIGRATION.code, first.line, first.col, message)


def _listed(items: Sequence[str], codes: Sequence[str] = ()) -> str:
    """The first few items; the rest counted, with their codes when given (`and 9 more: DDP012, DDP031`)."""
    shown = "; ".join(items[:_MAX_LISTED])
    if len(items) <= _MAX_LISTED:
        return shown
    rest = sorted(set(codes[_MAX_LISTED:]))
    return shown + f"; and {len(items) - _MAX_LISTED} more" + (f": {', '.join(rest)}" if rest else "")


def _builds_its_models(first: Diagnostic, with_its_script: Callable[[], Result], source: str, options: Options,
                       parsed: Optional[Tuple[cst.Module, LazyPositions]]) -> Optional[Diagnostic]:
    """The engine's changes with the script setting up, and the sampler epochs project mode then
    sets in the module's own loops (DDP031), as a run on the project would make them."""
    try:
        made = with_its_script()
        epochs = migrate_module(source, ModuleRole(("the script that uses it",), pieces=(MODULE_SET_EPOCH.code,)),
                                options, rewrite=False, parsed=parsed)
    except Exception:  # noqa: BLE001 - a hint is never worth a failure
        return None
    if not made.changes:
        return None
    found = sorted(made.changes + epochs.changes, key=lambda c: (c.line, c.col))
    changes = _listed([f"line {c.line} {c.code}: {c.message}" for c in found], [c.code for c in found])
    message = (
        "this module builds and trains its models, but the script that runs them is another module, which must set "
        "up the process group, so the file alone cannot be migrated: run ddp-migrate on the project's folder (or "
        "name the script that uses it too), and "
        f"project mode migrates the two together; here it would change: {changes}"
    )
    return Diagnostic(MODULE_NEEDS_MIGRATION.code, first.line, first.col, message)
