"""The package's layering: no import cycles between its modules.

Every import counts, at module level, inside functions (the CLI's lazy imports) and under
TYPE_CHECKING alike: a cycle hidden behind either still ties two layers together. The one
exception is a package and its own submodules (`migrator.rules` imports its rules, which import
`migrator.rules._build`): a package's __init__ is its facade, not a layer.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "migrator"


def _module_names() -> Dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _imported(path: Path, modules: Set[str], name: str) -> Set[str]:
    """The package's modules that `path` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            # `from migrator.rules import _build` imports the submodule, not only the package
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules}


def _related(a: str, b: str) -> bool:
    """A package and one of its own submodules."""
    return a.startswith(b + ".") or b.startswith(a + ".")


def import_graph() -> Dict[str, Set[str]]:
    modules = _module_names()
    return {
        name: {other for other in _imported(path, set(modules), name) if other != name and not _related(name, other)}
        for name, path in modules.items()
    }


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    on_stack: Set[str] = set()
    stack: List[str] = []
    found: List[List[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_modules_import_each_other_without_cycles():
    assert cycles(import_graph()) == []


def test_the_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_every_kind_of_import_is_seen():
    graph = import_graph()
    assert "migrator.dataflow" in graph["migrator.analysis.passes"]  # module level
    assert "migrator.api" in graph["migrator.cli"]  # inside a function (the CLI's lazy imports)
    assert "migrator.options" in graph["migrator.jobs.command"]  # under TYPE_CHECKING
    # a package and its own submodules are exempt, one package's module importing another's is not
    assert "migrator.rules" not in graph["migrator.rules.unwrap_module"]
    assert "migrator.analysis" in graph["migrator.rules.unwrap_module"]


def test_the_lower_layers_stand_alone():
    """The flow analysis and code generation import nothing of the layers that use them."""
    graph = import_graph()
    upper = ("migrator.analysis", "migrator.rules", "migrator.project", "migrator.api", "migrator.cli")

    def reaches(start: str) -> Set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    for lower in ("migrator.dataflow", "migrator.dataflow.core", "migrator.codegen", "migrator.tree", "migrator.edits"):
        assert not {m for m in reaches(lower) if m.startswith(upper)}, lower


# -- the rules read the facts ---------------------------------------------------------------------
RULES = PACKAGE / "rules"
_WALKS = {"descendants", "walk", "visit", "visit_batched", "MetadataWrapper", "parse_module", "parse"}
_VISITORS = {"CSTVisitor", "CSTTransformer", "BatchableCSTVisitor", "NodeVisitor", "NodeTransformer", "MatcherDecoratableTransformer"}


def _walks_of_the_whole_tree(source: str, filename: str) -> List[str]:
    """Calls that walk or re-parse the whole module, and visitor classes, in one rule module.

    A rule may look inside a node the facts hand it (`descendants(loop.body, cst.Call)`); the whole
    file's sites are facts (`facts.calls`, `facts.loops`, `facts.functions`), found by the one
    traversal. `_build` parses its own code templates, never the user's file."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            bases = {getattr(base, "attr", getattr(base, "id", "")) for base in node.bases}
            if bases & _VISITORS:
                found.append(f"{filename}:{node.lineno} class {node.name} is a visitor")
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "attr", getattr(node.func, "id", ""))
        if name not in _WALKS or (name in ("parse_module", "parse") and filename == "_build.py"):
            continue
        if name == "parse" and not (isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", "") == "ast"):
            continue  # `parse` of something else (a version string, a size)
        first = ast.unparse(node.args[0]) if node.args else ""
        if name == "descendants" and not (first == "module" or first.endswith(".module")):
            continue
        found.append(f"{filename}:{node.lineno} {ast.unparse(node)[:80]}")
    return found


def test_rules_never_walk_the_whole_tree():
    found = [hit for path in sorted(RULES.glob("*.py")) for hit in _walks_of_the_whole_tree(path.read_text(encoding="utf-8"), path.name)]
    assert found == []


def test_a_walk_in_a_rule_is_caught():
    source = (
        "import ast\nimport libcst as cst\nfrom migrator.tree import descendants\n"
        "class Finder(cst.CSTVisitor):\n    pass\n"
        "def plan(facts, plan):\n"
        "    calls = list(descendants(facts.module, cst.Call))\n"
        "    facts.module.visit(Finder())\n"
        "    tree = ast.parse(facts.source)\n"
        "    inner = list(descendants(facts.entry.scope, cst.Call))\n"
    )
    found = _walks_of_the_whole_tree(source, "some_rule.py")
    assert sorted(hit.split(" ")[0] for hit in found) == ["some_rule.py:4", "some_rule.py:7", "some_rule.py:8", "some_rule.py:9"]
