"""Code generation shared by the script engine and project mode: the imports a plan needs, added
to (and removed from) the rewritten module, and the check that the new code parses.

A leaf: it knows edits' Plan and LibCST, nothing of the analysis, the rules or project mode.
"""
from __future__ import annotations

import ast

import libcst as cst

from migrator.edits import Plan
from migrator.errors import IntroducedSyntaxError
from migrator.tree import descendants


def with_imports(module: cst.Module, plan: Plan) -> cst.Module:
    # Imported here: libcst.codemod (and the libcst.matchers it pulls in) costs 0.2 s to import,
    # and only a run that rewrites something needs it; `--check` of a clean tree never does.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

    context = CodemodContext()
    wanted = [*plan.imports, *_read_in(module, plan.imports_if_used)]
    for mod, obj, asname in wanted:
        AddImportsVisitor.add_needed_import(context, mod, obj, asname)
    if wanted:
        module = _add_imports(module, AddImportsVisitor(context))
    if plan.unused_imports:
        for mod, obj, asname in plan.unused_imports:
            RemoveImportsVisitor.remove_unused_import(context, mod, obj, asname)
        # Needs scope analysis of the whole file; only runs when a DataParallel import may be unused.
        module = RemoveImportsVisitor(context).transform_module(module)
    return module


def _read_in(module: cst.Module, imports):
    """Those of `imports` whose bound name the module reads (a walk of the new tree: only for the
    few plans that have such imports)."""
    if not imports:
        return []
    names = {node.value for node in descendants(module, cst.Name)}
    return [(mod, obj, asname) for mod, obj, asname in imports if (asname or obj or mod.split(".")[0]) in names]


def _add_imports(module: cst.Module, visitor: cst.CSTTransformer) -> cst.Module:
    """AddImportsVisitor, shown only the file's leading import block.

    It only ever inserts after that block, and the analysis already decided which imports are
    missing; visiting the whole tree twice (its gather and transform passes) cost about 1.4 s
    on a 1,000-line script, the head costs a few milliseconds.
    """
    body = list(module.body)
    end = 0
    while end < len(body) and _is_import_or_docstring(body[end]):
        end += 1
    head = module.with_changes(body=body[:end])
    new_head = cst.MetadataWrapper(head, unsafe_skip_copy=True).visit(visitor)
    return module.with_changes(header=new_head.header, body=[*new_head.body, *body[end:]])


def _is_import_or_docstring(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom))
        or (isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)))
        for small in statement.body
    )


def check_parses(code: str) -> None:
    # CPython's own parser: the arbiter of "does it run", and ten times faster than re-parsing with libcst.
    try:
        ast.parse(code)
    except SyntaxError as exc:  # pragma: no cover - a bug, tested via fixtures
        raise IntroducedSyntaxError(
            f"ddp-migrate produced code that does not parse (line {exc.lineno}: {exc.msg}); nothing was written. "
            "Please report this with the input file."
        ) from None
