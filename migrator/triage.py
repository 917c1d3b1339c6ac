"""The engine's first look at a Python file: may any rule act on it? From its text, and the
project's modules, without LibCST.

Parsing with LibCST (and importing it: 0.35 s) is most of what a run costs. A repository's
model, layer and utility files mention torch and `optim` without training; they are answered here
and never parsed. See migrator.relevance (the words and shapes of the text) and
migrator.graph.training (what the project's own functions and classes train).
"""
from __future__ import annotations

from typing import Optional

from migrator.context import FileContext
from migrator.relevance import python_may_need_migration, python_may_train


def may_need_a_look(source: str, test_module: bool) -> bool:
    """The text-only part of may_need_engine, for the CLI's reading of each file (no project
    module is read): False when neither the text nor any project module it imports can matter."""
    if not python_may_need_migration(source):
        return False
    if python_may_train(source, test_module):
        return True
    return not test_module and _imports_from_a_project(source)


def _imports_from_a_project(source: str) -> bool:
    """Does an import line name a module that may be the project's (relative, or not a well-known package)?"""
    from migrator.graph.modules import NOT_PROJECT_PACKAGES, import_lines

    return any(
        line.level or (line.module or "").split(".")[0] not in NOT_PROJECT_PACKAGES and not (line.module or "").startswith("torch")
        for line in import_lines(source)
    )


def may_need_engine(source: str, context: Optional[FileContext]) -> bool:
    """False only when no rule can change or report anything in `source` (tests/test_relevance.py
    holds every file this passes over to the whole engine)."""
    if not python_may_need_migration(source):
        return False
    test_module = context is not None and context.tests(source)
    if python_may_train(source, test_module):
        return True
    if test_module:
        return False
    from migrator.graph.training import may_train_through_project

    return may_train_through_project(source, context)


# -- files set up for several processes already -------------------------------------------------
#: What the first look says of a file: nothing to do, distributed already with nothing to report
#: (project mode still counts it as the caller of the modules it imports), or the engine's.
NOTHING, DISTRIBUTED, ENGINE = "nothing", "distributed", "engine"


#: With `--spawn`, a file that may start its own workers goes to the engine (rules.spawn migrates or
#: declines it): torch.multiprocessing's spawn/start_processes/Process, or a `launch(main, ...)` helper.
SPAWN_WORDS = ("spawn", "start_processes", "Process", "launch(")


def verdict(source: str, context: Optional[FileContext], spawn: bool = False) -> str:
    """NOTHING, DISTRIBUTED or ENGINE (see above). DISTRIBUTED only when the engine would find the
    same: a sign of distribution it reads the same way (a setup helper called by name, a framework
    imported, a project helper that sets up, seen in the project's modules), and none of what it
    reports in such a file (migrator.relevance.has_distributed_findings_shape). `spawn`
    (Options.spawn): a file that may start its own workers is the engine's."""
    if spawn and "torch" in source and any(word in source for word in SPAWN_WORDS):
        return ENGINE  # it may train in the workers it starts, wherever they come from
    if not may_need_engine(source, context):
        return NOTHING
    from migrator.graph.training import saves_with_torch
    from migrator.relevance import has_distributed_findings_shape

    if has_distributed_findings_shape(source, saves_with_torch(source)):
        return ENGINE
    return DISTRIBUTED if _distributed(source, context) else ENGINE


def _distributed(source: str, context: Optional[FileContext]) -> bool:
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    from migrator.graph.evidence import distribution_evidence

    return distribution_evidence(tree, context) is not None
