"""migrator.tree must see what libcst's own traversal sees, less the trivia, in the same order.

libcst is the reference: its CSTVisitor, its ParentNodeProvider and its matchers' findall, on
every fixture (inputs and expected outputs) and on a few constructs chosen for their field order.
"""
from typing import List

import libcst as cst
import libcst.matchers as m
import pytest
from libcst.metadata import MetadataWrapper, ParentNodeProvider

from fixture_cases import discover
from migrator import tree
from migrator.graph.bindings import NameIndex

SOURCES = [
    pytest.param(path, id=f"{case.name}/{path.name}")
    for case in discover()
    if not case.expects_parse_error
    for path in (case.input_path, case.expected_path)
    if path.exists() and (case.input_parses or path == case.expected_path)
]

# Source order differs from the dataclass field order in these (decorators before `def`,
# `body if test else orelse`, f-string format specs, `lambda` defaults, match statements ...).
TRICKY = '''\
@decorator(arg)
@other
async def f(a: int = g(), *args: "x", b=lambda q=h(): q, **kw) -> R:
    x = body() if test() else orelse()
    y = f"{value!r:>{width}} {other=}"
    z = [i for i in range(3) if i % 2] + {k: v for k, v in items()}.keys()
    async with open(p) as fh, other() as (a, b):
        del x[1:2, ::3]
    global G
    try:
        pass
    except (E1, E2) as e:
        raise E3 from e
    else:
        pass
    finally:
        return (yield from gen())

match command.split():
    case [action, *rest] if rest:
        pass
    case {"k": v, **others}:
        pass
    case Point(x=0, y=yy) | None:
        pass

class C(Base, metaclass=Meta):
    attr: int = 1
    def m(self): return self.attr @ other
'''


def _libcst_order(root: cst.CSTNode) -> List[cst.CSTNode]:
    """Pre-order, as libcst's own CSTVisitor reaches the nodes (trivia included)."""
    seen: List[cst.CSTNode] = []

    class Recorder(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            seen.append(node)
            return True

    root.visit(Recorder())
    return seen


def _walk_order(root: cst.CSTNode) -> List[cst.CSTNode]:
    seen: List[cst.CSTNode] = []

    def enter(node: cst.CSTNode) -> bool:
        seen.append(node)
        return True

    tree.walk(root, enter, lambda node: None)
    return seen


def _check_order(module: cst.Module) -> None:
    reference = _libcst_order(module)
    assert _walk_order(module) == [node for node in reference if type(node) in tree.SYNTAX]
    # Nothing that matters is hidden under trivia.
    for node in reference:
        if type(node) not in tree.SYNTAX:
            assert all(type(below) not in tree.SYNTAX for below in _libcst_order(node)), type(node).__name__


@pytest.mark.parametrize("path", SOURCES)
def test_walk_is_libcsts_order_without_trivia(path):
    _check_order(cst.parse_module(path.read_text(encoding="utf-8")))


def test_walk_order_on_tricky_constructs():
    module = cst.parse_module(TRICKY)
    _check_order(module)
    names = [node.value for node in _walk_order(module) if isinstance(node, cst.Name)]
    # decorators first, then the name, parameters (annotation before default), return annotation
    assert names[:8] == ["decorator", "arg", "other", "f", "a", "int", "g", "args"]
    assert names.index("body") < names.index("test") < names.index("orelse")


@pytest.mark.parametrize("path", SOURCES[:12])
def test_parents_agree_with_parent_node_provider(path):
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ParentNodeProvider)
    index = NameIndex(module)
    index.run(module)
    checked = 0
    for node, parent in index.parents.items():
        assert reference[node] is parent, type(node).__name__
        checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    "kind", [cst.Call, cst.Name, cst.SimpleString, cst.Return, (cst.Name, cst.SimpleString), cst.BinaryOperation]
)
def test_descendants_match_findall(kind):
    module = cst.parse_module(TRICKY + "\n" + SOURCES[0].values[0].read_text(encoding="utf-8"))
    kinds = kind if isinstance(kind, tuple) else (kind,)
    matchers = [getattr(m, k.__name__)() for k in kinds]  # m.Call() matches every Call
    matcher = m.OneOf(*matchers) if len(matchers) > 1 else matchers[0]
    for root in (module, *module.body):
        assert list(tree.descendants(root, kind)) == list(m.findall(root, matcher))


def test_visitor_dispatches_visit_and_leave_by_class_name():
    events = []

    class Calls(tree.Visitor):
        def visit_Call(self, node):
            events.append(("visit", tree.first(node.func, cst.Name).value))

        def leave_Call(self, node):
            events.append(("leave", tree.first(node.func, cst.Name).value))

        def visit_Lambda(self, node):
            return False  # children skipped, leave still called

    Calls().run(cst.parse_module("f(g(1), lambda: h())\n"))
    assert events == [("visit", "f"), ("visit", "g"), ("leave", "g"), ("leave", "f")]


def test_trivia_classes_cover_layout_only():
    for cls in (cst.SimpleWhitespace, cst.Comma, cst.Dot, cst.LeftParen, cst.Add, cst.Equal, cst.Newline):
        assert cls not in tree.SYNTAX
    for cls in (cst.Name, cst.Call, cst.Attribute, cst.ImportStar, cst.Ellipsis, cst.Decorator, cst.Param):
        assert cls in tree.SYNTAX
