"""The output check every migration passes before it is returned: nothing it reads is unbound.

A fix that depends on something that did not happen shows in the code it writes as a name read
where nothing binds it: `model = DDP(model, device_ids=... if device.type == "cuda" ...)` written
130 lines above the script's `device = ...`; `train_sampler.set_epoch(epoch)` for a sampler the
loader rule could not create. Python raises NameError (or UnboundLocalError) there on every rank.
In the shape of black's `assert_equivalent`, the engine checks its own output: each read of a
name is resolved with Python's scoping rules (function locals, `global`/`nonlocal`, class bodies,
comprehensions) against the bindings that precede it (a binding further down a loop's body has not
run on its first pass),
in the input and in the output. A read that is unbound in the output and was not unbound there
in the input (counted per scope and name, so the user's own dynamic names cancel out) means the
plan is unsound: the engine then leaves the file unchanged and reports DDP125 with the name and
the line (migrator.api), never a half-migrated file.

It reads the code with CPython's `ast` (the output is already parsed with it by
codegen.check_parses): about a millisecond per hundred lines.
"""
from __future__ import annotations

import ast
import builtins
import difflib
from collections import Counter
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

Position = Tuple[int, int]  # (line, column), as ast gives them
_ALWAYS = frozenset(dir(builtins)) | {"__file__", "__builtins__", "__annotations__", "__path__", "__cached__", "__qualname__",
                                      "__module__", "__class__", "WindowsError"}
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


@dataclass(frozen=True)
class UnboundRead:
    """A name read where no binding of it can have run: `scope` is the dotted path of the
    function or class that reads it (`main`, `Trainer.fit`, `<module>`)."""

    scope: str
    name: str
    line: int
    col: int


class _Scope:
    __slots__ = ("node", "kind", "parent", "path", "bindings", "declared", "reads")

    def __init__(self, node: ast.AST, kind: str, parent: Optional["_Scope"], path: str) -> None:
        self.node, self.kind, self.parent, self.path = node, kind, parent, path
        self.bindings: Dict[str, List[Tuple[Position, Tuple[ast.AST, ...]]]] = {}  # name -> (where it takes effect, loops around it)
        self.declared: Dict[str, str] = {}  # `global` / `nonlocal` names
        self.reads: List[Tuple[str, Position, Tuple[ast.AST, ...]]] = []


class _Collector(ast.NodeVisitor):
    """One walk: every scope's bindings (with the position each takes effect and the loops around
    it) and reads (with the loops around them)."""

    def __init__(self) -> None:
        self.scopes: List[_Scope] = []
        self._scope: Optional[_Scope] = None
        self._loops: List[ast.AST] = []
        self.star_import = False

    # -- scopes -----------------------------------------------------------------------------
    def _enter(self, node: ast.AST, kind: str, name: str) -> _Scope:
        parent = self._scope
        path = name if parent is None or parent.kind == "module" else f"{parent.path}.{name}"
        scope = _Scope(node, kind, parent, path)
        self.scopes.append(scope)
        return scope

    def visit_Module(self, node: ast.Module) -> None:
        self._scope = self._enter(node, "module", "<module>")
        self.generic_visit(node)

    def _function(self, node, name: str) -> None:
        for decorator in getattr(node, "decorator_list", ()):
            self.visit(decorator)
        args = node.args
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default)
        if not isinstance(node, ast.Lambda):
            self._bind(node.name, (node.lineno, node.col_offset))
        outer, loops = self._scope, self._loops
        self._scope, self._loops = self._enter(node, "function", name), []
        start = (node.lineno, node.col_offset)
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a is not None)]:
            self._bind(arg.arg, start)
        body = node.body if isinstance(node.body, list) else [node.body]
        for statement in body:
            self.visit(statement)
        self._scope, self._loops = outer, loops

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._function(node, "<lambda>")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expression in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expression)
        outer, loops = self._scope, self._loops
        self._scope, self._loops = self._enter(node, "class", node.name), []
        for statement in node.body:
            self.visit(statement)
        self._scope, self._loops = outer, loops
        self._bind(node.name, (node.end_lineno or node.lineno, node.end_col_offset or 0))

    def _comprehension(self, node, elements: Iterable[ast.AST]) -> None:
        generators = node.generators
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        outer = self._scope
        self._scope = self._enter(node, "comprehension", "<comprehension>")
        for index, generator in enumerate(generators):
            if index:
                self.visit(generator.iter)
            self._bind_target(generator.target, (generator.target.lineno, generator.target.col_offset))
            for condition in generator.ifs:
                self.visit(condition)
        for element in elements:
            self.visit(element)
        self._scope = outer

    def visit_ListComp(self, node: ast.ListComp) -> None:
        self._comprehension(node, [node.elt])

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node, [node.key, node.value])

    # -- bindings ---------------------------------------------------------------------------
    def _bind(self, name: str, at: Position, scope: Optional[_Scope] = None) -> None:
        scope = scope or self._scope
        assert scope is not None
        declared = scope.declared.get(name)
        if declared == "global":
            scope = self.scopes[0]
        elif declared == "nonlocal":
            scope = _enclosing_binder(scope, name) or scope
        scope.bindings.setdefault(name, []).append((at, tuple(self._loops)))

    def _bind_target(self, target: ast.AST, at: Position) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self._bind(node.id, at)
            elif isinstance(node, (ast.Attribute, ast.Subscript)):
                pass  # reads of their roots are visited below
        self._visit_target_reads(target)

    def _visit_target_reads(self, target: ast.AST) -> None:
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            self.visit(target)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._visit_target_reads(element)
        elif isinstance(target, ast.Starred):
            self._visit_target_reads(target.value)

    @staticmethod
    def _end(node: ast.AST) -> Position:
        return (node.end_lineno or node.lineno, node.end_col_offset or 0)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self._bind_target(target, self._end(node.value))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self._bind_target(node.target, self._end(node.value))
        elif not isinstance(node.target, ast.Name):
            self._visit_target_reads(node.target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):
            self._read(node.target.id, (node.target.lineno, node.target.col_offset))
        self.visit(node.value)
        self._bind_target(node.target, self._end(node))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        scope = self._scope
        while scope is not None and scope.kind == "comprehension":
            scope = scope.parent
        self._bind(node.target.id, self._end(node), scope)

    def _loop(self, node, target: Optional[ast.AST]) -> None:
        self.visit(node.iter if target is not None else node.test)
        self._loops.append(node)
        if target is not None:
            self._bind_target(target, (target.lineno, target.col_offset))
        if isinstance(node, ast.While):
            self.visit(node.test)  # tested again after each pass
        for statement in node.body:
            self.visit(statement)
        self._loops.pop()
        for statement in node.orelse:
            self.visit(statement)

    def visit_For(self, node: ast.For) -> None:
        self._loop(node, node.target)

    visit_AsyncFor = visit_For

    def visit_While(self, node: ast.While) -> None:
        self._loop(node, None)

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self._bind_target(node.optional_vars, self._end(node.context_expr))

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self._bind(node.name, (node.lineno, node.col_offset))
        for statement in node.body:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0], self._end(node))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.star_import = True
            else:
                self._bind(alias.asname or alias.name, self._end(node))

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._scope.declared[name] = "global"  # type: ignore[union-attr]

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        for name in node.names:
            self._scope.declared[name] = "nonlocal"  # type: ignore[union-attr]

    def visit_MatchAs(self, node) -> None:  # pragma: no cover - Python 3.10+
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self._bind(node.name, (node.lineno, node.col_offset))

    def visit_MatchStar(self, node) -> None:  # pragma: no cover - Python 3.10+
        if node.name:
            self._bind(node.name, (node.lineno, node.col_offset))

    def visit_MatchMapping(self, node) -> None:  # pragma: no cover - Python 3.10+
        self.generic_visit(node)
        if node.rest:
            self._bind(node.rest, (node.lineno, node.col_offset))

    # -- reads ------------------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._read(node.id, (node.lineno, node.col_offset))
        elif isinstance(node.ctx, ast.Del):
            self._read(node.id, (node.lineno, node.col_offset))

    def _read(self, name: str, at: Position) -> None:
        self._scope.reads.append((name, at, tuple(self._loops)))  # type: ignore[union-attr]


def _enclosing_binder(scope: _Scope, name: str) -> Optional[_Scope]:
    parent = scope.parent
    while parent is not None and parent.kind != "module":
        if parent.kind == "function" and name in parent.bindings:
            return parent
        parent = parent.parent
    return None


def _bound_before(bindings: List[Tuple[Position, Tuple[ast.AST, ...]]], at: Position, loops: Tuple[ast.AST, ...]) -> bool:
    """Has one of `bindings` (of the reader's own scope) run before a read at `at` on every way
    there: written before it. A binding further down the same loop body runs only from the second
    pass on, so the first pass reads the name unbound (`sampler.set_epoch(epoch)` written at the top
    of an epoch loop whose body builds the sampler): not bound. The user's own reads that only a
    later pass reaches (`if i: print(last)`) are in the input too, and cancel out there."""
    del loops
    return any(where <= at for where, _ in bindings)


def unbound_reads(source: str) -> List[UnboundRead]:
    """Every read of a name in `source` that no binding can reach, by Python's scoping rules.

    A read in a function of a name the function never binds is resolved in the enclosing scopes
    at call time (any of their bindings counts); a read of a name the reading scope binds needs
    a binding before it (in source order, or in a loop around the read). Names a `from x import *`
    may bring in are not judged at module level (nothing can be said of them)."""
    tree = ast.parse(source)
    collector = _Collector()
    collector.visit(tree)
    module = collector.scopes[0]
    found: List[UnboundRead] = []
    for scope in collector.scopes:
        for name, at, loops in scope.reads:
            if not _reaches(scope, module, name, at, loops, collector.star_import):
                found.append(UnboundRead(scope.path, name, at[0], at[1]))
    return found


def _reaches(scope: _Scope, module: _Scope, name: str, at: Position, loops, star_import: bool) -> bool:
    declared = scope.declared.get(name)
    if declared == "global":
        return name in module.bindings or name in _ALWAYS or star_import
    if declared == "nonlocal":
        return _enclosing_binder(scope, name) is not None
    own = scope.bindings.get(name)
    if own is not None and scope.kind == "comprehension":
        return True  # its targets are bound before its element is computed, whatever the text order
    if own is not None and scope.kind != "class":
        if _bound_before(own, at, loops):
            return True
        # A function's local: only its own bindings count (UnboundLocalError otherwise); a
        # comprehension's target likewise. At module level the name is simply not bound yet.
        return False
    if own is not None and _bound_before(own, at, loops):  # a class body's own name
        return True
    parent = scope.parent
    while parent is not None:
        if parent.kind == "module":
            if parent is scope.parent and scope.kind in ("class", "comprehension") and not _inside_function(scope):
                # a class body or comprehension run at module level reads the module as it is then
                bindings = parent.bindings.get(name)
                if bindings and _bound_before(bindings, at, loops):
                    return True
            elif name in parent.bindings:
                return True
            break
        if parent.kind == "function" and name in parent.bindings:
            return True
        if parent.kind == "comprehension" and name in parent.bindings:
            return True
        parent = parent.parent
    return name in _ALWAYS or star_import


def _inside_function(scope: _Scope) -> bool:
    parent = scope.parent
    while parent is not None:
        if parent.kind == "function":
            return True
        parent = parent.parent
    return False


def new_unbound_reads(before: str, after: str) -> List[UnboundRead]:
    """The reads `after` has that no binding reaches, beyond those `before` already had (per
    scope and name: the user's own late or dynamic names appear in both and cancel out)."""
    old = Counter((read.scope, read.name) for read in unbound_reads(before))
    new: List[UnboundRead] = []
    seen: Counter = Counter()
    for read in unbound_reads(after):
        key = (read.scope, read.name)
        seen[key] += 1
        if seen[key] > old[key]:
            new.append(read)
    return new


def original_line(before: str, after: str, line: int) -> int:
    """The line of `before` that line `line` of `after` stands for: itself where the migration kept
    it, else the first kept line after it (what an inserted block was written in front of)."""
    old, new = before.splitlines(), after.splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if j1 <= line - 1 < j2:
            if tag == "equal":
                return i1 + (line - 1 - j1) + 1
            return min(i1 + 1, max(len(old), 1))
    return max(len(old), 1)


def later_binding_line(source: str, name: str) -> Optional[int]:
    """The first line of `source` that binds `name` anywhere (for the message), else None."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return node.lineno
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node.lineno
    return None


__all__ = ["UnboundRead", "unbound_reads", "new_unbound_reads", "original_line", "later_binding_line"]


def _names(reads: Iterable[UnboundRead]) -> Set[str]:  # pragma: no cover - debugging aid
    return {read.name for read in reads}
