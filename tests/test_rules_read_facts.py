"""Rules read the facts the analysis collected once; none walks the whole module again.

A rule may look inside a node it was handed (a statement, a loop's test), never start a
traversal at the module: what it needs of the whole file (its calls, loops, assignments) is a
field of ScriptFacts, collected in the single pass.
"""
from __future__ import annotations

import ast
from pathlib import Path

RULES = Path(__file__).resolve().parent.parent / "migrator" / "rules"
WALKERS = {"descendants", "walk", "children"}


def _whole_module_walks(text: str, where: str):
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        first = node.args[0]
        spelled = ast.unparse(first)
        if name in WALKERS and (spelled in ("module", "facts.module", "self.module") or spelled.endswith(".module")):
            yield f"{where}:{node.lineno}: {ast.unparse(node)}"
        if name == "visit" and isinstance(node.func, ast.Attribute) and spelled.endswith("module"):
            yield f"{where}:{node.lineno}: {ast.unparse(node)}"


def test_no_rule_walks_the_whole_module():
    found = [walk for path in sorted(RULES.rglob("*.py"))
             for walk in _whole_module_walks(path.read_text(encoding="utf-8"), str(path.relative_to(RULES.parent.parent)))]
    assert found == []


def test_the_check_sees_a_whole_module_walk():
    sample = (
        "def rule(facts, plan):\n"
        "    for call in descendants(facts.module, cst.Call):\n"
        "        pass\n"
        "    for call in descendants(statement, cst.Call):  # a node it was handed: fine\n"
        "        pass\n"
    )
    assert [w.split(": ")[0] for w in _whole_module_walks(sample, "sample.py")] == ["sample.py:2"]
