"""The binding index (migrator.graph.bindings) against LibCST's ScopeProvider.

ScopeProvider is the reference for Python's scoping rules: for every Name that it says reads a
binding of the file, the index must say it reads the same bindings, on every fixture (inputs and
expected outputs, the project fixtures' modules too) and on constructs chosen for their scoping
rules. The index is built in the analysis' own traversal, about ten times cheaper.
"""
from pathlib import Path
from typing import Dict, List, Set

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, ScopeProvider

from fixture_cases import FIXTURES
from migrator.graph.bindings import NameIndex

SOURCES = sorted(
    path for path in FIXTURES.rglob("*.py")
    if "python2" not in str(path) and not path.name.startswith("_")
)

SCOPING = '''\
import torch
from torch import nn as tnn
model = build()
class Net(tnn.Module):
    scale = 2
    def __init__(self, model, depth=model):
        super().__init__()
        self.model = model
        self.depth = depth
    def forward(self, x):
        model = x * self.scale          # a local named like the trained model: not it
        return self.model(model)
def train(model, loader, epochs=3):
    for epoch in range(epochs):
        for x, y in loader:
            out = model(x)
    return [model for model in range(3)], {k: v for k, v in zip(a, b)}
def resume():
    global model
    model = model.cuda()
def outer():
    count = 0
    def inner():
        nonlocal count
        count += 1
        return count
    return inner
@decorate(model)
def g(a=model, *, b=lambda q=model: q, c: tnn.Module = None) -> tnn.Module:
    try:
        pass
    except ValueError as error:
        print(error)
    with open(a) as handle, torch.no_grad():
        handle.read()
    if (n := len(a)) > 1:
        print(n)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
net, (first, second) = model, (1, 2)
'''


def _index(module: cst.Module) -> NameIndex:
    index = NameIndex(module)
    index.run(module)
    index.resolve_references()
    return index


def _reference_answers(module: cst.Module) -> Dict[cst.Name, Set[cst.CSTNode]]:
    """Name -> the nodes ScopeProvider says it reads (each an assignment's node)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes = wrapper.resolve(ScopeProvider)
    found: Dict[cst.Name, Set[cst.CSTNode]] = {}
    for scope in set(scopes.values()):
        if scope is None:
            continue
        for access in scope.accesses:
            if not isinstance(access.node, cst.Name):
                continue
            referents = {a.node for a in access.referents if hasattr(a, "node")}
            if referents:
                found[access.node] = referents
    return found


def _compare(source: str) -> List[str]:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return []  # not Python 3 (a fixture of what the tool repairs first)
    index = _index(module)
    wrong = []
    for name, expected in _reference_answers(module).items():
        ours = {_libcst_node(index, b) for b in index.refers.get(name, ())}
        if _in_comprehension(index, name):
            # One deliberate difference: a comprehension runs where it is written, so it reads the
            # enclosing function's bindings made before it, as the function's own reads do
            # (ScopeProvider treats it as a nested function, which might run later: all of them).
            expected = {node for node in expected
                        if node in ours or node not in index.binding_at or index.binding_at[node].position <= index.order[name]}
        if ours != expected:
            line = source[: source.find(module.code_for_node(name))].count("\n") + 1
            wrong.append(f"{name.value} (near line {line}): index {sorted(map(_describe, ours))}, "
                         f"ScopeProvider {sorted(map(_describe, expected))}")
    return wrong


def _in_comprehension(index: NameIndex, node: cst.CSTNode) -> bool:
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        if isinstance(parent, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return True
        parent = index.parents.get(parent)
    return False


def _libcst_node(index: NameIndex, binding) -> cst.CSTNode:
    """The node ScopeProvider records for a binding: the import statement for an imported name."""
    return index.parents[binding.node] if binding.kind == "import" else binding.node


def _describe(node: cst.CSTNode) -> str:
    return f"{type(node).__name__}:{getattr(getattr(node, 'name', node), 'value', '')}"


def test_the_scoping_rules_match_libcst():
    assert _compare(SCOPING) == []


def test_a_local_named_like_the_model_is_another_binding():
    module = cst.parse_module(SCOPING)
    index = _index(module)
    forward_locals = [b for scope, names in index.bindings.items() for b in names.get("model", ())
                      if isinstance(scope, cst.FunctionDef) and scope.name.value == "forward"]
    module_model = index.bindings[module]["model"]
    assert len(forward_locals) == 1 and forward_locals[0].kind == "assignment"
    assert not set(forward_locals[0].references) & {r for b in module_model for r in b.references}
    # `global model` in resume(): its assignment is a binding of the module's `model`
    assert [b.kind for b in module_model] == ["assignment", "assignment"]
    kept = next(b for names in index.bindings.values() for b in names.get("self.model", ()))
    assert kept.kind == "attribute" and len(kept.references) == 1  # `self.model(model)` in forward()


def test_unpacking_records_where_each_element_comes_from():
    module = cst.parse_module(SCOPING)
    index = _index(module)
    paths = {name: index.bindings[module][name][0].path for name in ("net", "first", "second")}
    assert paths == {"net": (0,), "first": (1, 0), "second": (1, 1)}
    assert {index.bindings[module][name][0].kind for name in paths} == {"unpacking"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_every_fixture_resolves_as_libcst_does(path: Path):
    assert _compare(path.read_text(encoding="utf-8")) == []
