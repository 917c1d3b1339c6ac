"""A fast read-only walk over libcst trees: the syntax nodes, in source order, without trivia.

libcst's `node.visit(visitor)` is shared with its transformers, so it rebuilds every node it
passes, and it visits whitespace, newlines, commas, dots and parentheses as nodes: about
25,000 nodes for a 1,000-line script, 60% of them trivia. The analysis only reads the tree and
never asks about trivia, so it walks the same children in the same order without either cost
(the order is learned from libcst itself, once per node class). Measured on the benchmark's
training scripts (scripts/bench.py --corpus): the analysis of the 1,005-line one went from
0.26 s to 0.07 s, of all ten from 1.19 s to 0.33 s. tests/test_tree.py holds the walk to
libcst's own order and parents on every fixture.

Everything here reads; nothing builds or changes a tree (edits.apply does that, with libcst's
own transformer machinery).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, FrozenSet, Iterator, List, Optional, Set, Tuple, Type, TypeVar, Union

import libcst as cst

N = TypeVar("N", bound=cst.CSTNode)

# Nodes that only carry layout: no name, call or statement can be below them.
_TRIVIA_BASES: Tuple[type, ...] = (
    cst.BaseParenthesizableWhitespace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Newline,
    cst.Comment,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.Asynchronous,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseUnaryOp,
    cst.BaseAugOp,
)


def _subclasses(base: type) -> Set[type]:
    # __subclasses__() rather than issubclass(): on libcst's ABCs the latter took 40 ms here.
    found = {base}
    for sub in base.__subclasses__():
        found |= _subclasses(sub)
    return found


_TRIVIA: FrozenSet[type] = frozenset().union(*(_subclasses(base) for base in _TRIVIA_BASES))

# Every node class that the walk yields. A set of exact types: libcst nodes are ABCs, and
# isinstance() against them is several times slower than a set lookup on type().
SYNTAX: FrozenSet[type] = frozenset(_subclasses(cst.CSTNode) - _TRIVIA)

_FIELDS: Dict[type, Tuple[str, ...]] = {}


class _FieldOrder(cst.CSTVisitor):
    """Records which attributes libcst's own traversal visits, and in which order."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: List[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return False

    def on_leave(self, original_node: cst.CSTNode) -> None:
        pass

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        self.fields.append(attribute)

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


def _learn_fields(node: cst.CSTNode) -> Tuple[str, ...]:
    recorder = _FieldOrder()
    node._visit_and_replace_children(recorder)  # the one place that knows the source order
    fields = list(dict.fromkeys(recorder.fields))
    # A field the traversal skips when it is empty (FormattedStringExpression.format_spec)
    # comes last, which is also where libcst visits it when it is set.
    fields += [f.name for f in dataclasses.fields(node) if f.name not in fields]
    learned = _FIELDS[type(node)] = tuple(fields)
    return learned


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The node's syntax children in source order (libcst's `children`, less the trivia)."""
    found: List[cst.CSTNode] = []
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = _learn_fields(node)
    for name in fields:
        value = getattr(node, name)
        kind = type(value)
        if kind in SYNTAX:
            found.append(value)
        elif kind is tuple or kind is list:
            found.extend(item for item in value if type(item) in SYNTAX)
    return found


def walk(root: cst.CSTNode, enter: Callable[[cst.CSTNode], bool], leave: Callable[[cst.CSTNode], None]) -> None:
    """Pre-order walk: `enter(node)` (children are skipped when it returns False), then `leave(node)`."""
    if enter(root):
        for child in children(root):
            walk(child, enter, leave)
    leave(root)


def descendants(root: cst.CSTNode, kind: Union[Type[N], Tuple[Type[N], ...]]) -> Iterator[N]:
    """Every node of type `kind` in the subtree of `root` (itself included), in source order."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, kind):
            yield node  # type: ignore[misc]
        stack.extend(reversed(children(node)))


def first(root: cst.CSTNode, kind: Union[Type[N], Tuple[Type[N], ...]]) -> Optional[N]:
    return next(descendants(root, kind), None)


def contains(root: cst.CSTNode, kind: Union[Type[N], Tuple[Type[N], ...]]) -> bool:
    return first(root, kind) is not None


class Visitor:
    """A read-only visitor with libcst's naming (`visit_Call`, `leave_FunctionDef`), run by `walk`.

    Subclasses override `on_visit`/`on_leave` for per-node bookkeeping and call super().
    """

    _handlers: Dict[type, Tuple[Optional[Callable], Optional[Callable]]]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls._handlers = {}

    def _handlers_for(self, node_type: type) -> Tuple[Optional[Callable], Optional[Callable]]:
        handlers = self._handlers.get(node_type)
        if handlers is None:
            name = node_type.__name__
            handlers = self._handlers[node_type] = (
                getattr(type(self), f"visit_{name}", None),
                getattr(type(self), f"leave_{name}", None),
            )
        return handlers

    def on_visit(self, node: cst.CSTNode) -> bool:
        visit = self._handlers_for(type(node))[0]
        return visit is None or visit(self, node) is not False

    def on_leave(self, node: cst.CSTNode) -> None:
        leave = self._handlers_for(type(node))[1]
        if leave is not None:
            leave(self, node)

    def run(self, root: cst.CSTNode) -> None:
        walk(root, self.on_visit, self.on_leave)


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """`name=value`, spelled the PEP 8 way for keyword arguments (no spaces around `=`)."""
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def with_keyword(call: cst.Call, name: str, value: str) -> cst.Call:
    """The call with `name=value` appended to its arguments."""
    return call.with_changes(args=[*call.args, keyword_arg(name, cst.parse_expression(value))])


def parameters(function: cst.FunctionDef) -> List[cst.Param]:
    """Every parameter of `function`, in order: positional-only, plain, `*args`, keyword-only, `**kwargs`."""
    params = function.params
    star = [params.star_arg] if isinstance(params.star_arg, cst.Param) else []
    kwargs = [params.star_kwarg] if params.star_kwarg is not None else []
    return [*params.posonly_params, *params.params, *star, *params.kwonly_params, *kwargs]


def parameter_names(function: cst.FunctionDef) -> FrozenSet[str]:
    return frozenset(param.name.value for param in parameters(function))


def on_rank_zero_only(call: cst.Call, on_rank_zero: str) -> Optional[cst.Call]:
    """`wandb.init(project=p)` -> `wandb.init(project=p, mode=None if <on_rank_zero> else "disabled")`.

    The other ranks get a disabled run, whose `log()` and `config.update()` do nothing, so code that
    uses the run needs no guard of its own; rank 0 keeps the mode it had (None: the environment's
    WANDB_MODE). None when the call takes `**kwargs`, which may hold a mode of its own, or when its
    mode is already disabled off rank 0 (`mode=... if ... else "disabled"`, a second run)."""
    if any(arg.star == "**" for arg in call.args):
        return None
    given = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "mode"), None)
    if given is not None and isinstance(given.value, cst.IfExp) and isinstance(given.value.orelse, cst.SimpleString) and (
            given.value.orelse.evaluated_value == "disabled"):
        return None
    if given is None:
        return with_keyword(call, "mode", f'None if {on_rank_zero} else "disabled"')
    kept = cst.Module([]).code_for_node(given.value)
    if isinstance(given.value, (cst.IfExp, cst.Lambda)):
        kept = f"({kept})"
    value = cst.parse_expression(f'{kept} if {on_rank_zero} else "disabled"')
    return call.with_changes(args=[arg.with_changes(value=value) if arg is given else arg for arg in call.args])


def class_constructors(module: cst.Module) -> Dict[str, cst.FunctionDef]:
    """The module-level classes of the file by name, each with its own `__init__`."""
    found: Dict[str, cst.FunctionDef] = {}
    for node in module.body:
        if isinstance(node, cst.ClassDef) and isinstance(node.body, cst.IndentedBlock):
            init = next((f for f in node.body.body if isinstance(f, cst.FunctionDef) and f.name.value == "__init__"), None)
            if init is not None:
                found[node.name.value] = init
    return found


def class_methods(module: cst.Module) -> Dict[str, List[cst.FunctionDef]]:
    """The methods of the file's module-level classes by name (`display` of a ProgressMeter), dunder
    methods aside (they run implicitly, not by a call naming them)."""
    found: Dict[str, List[cst.FunctionDef]] = {}
    for node in module.body:
        if isinstance(node, cst.ClassDef) and isinstance(node.body, cst.IndentedBlock):
            for method in node.body.body:
                if isinstance(method, cst.FunctionDef) and not method.name.value.startswith("__"):
                    found.setdefault(method.name.value, []).append(method)
    return found
