"""One name for "this process is rank 0" in each function that asks it more than once.

The rank-0 fixes (rules.rank_zero, rules.downloads, ...) each put their statement under
`if dist.get_rank() == 0:`; neighbours share one `if` (edits.Plan.guard). A training function with
a dozen prints and saves would still read `if dist.get_rank() == 0:` a dozen times, so where a
function (or a flat script) gets two or more separate guards, the test is computed once:

    is_main = dist.get_rank() == 0
    ...
    if is_main:
        print(...)

The name goes in the innermost block holding every guard of that function, before the statement
that holds the first one, so it runs before each of them; in the entry point it also has to come
after the process group's setup (which goes before `facts.entry.anchor`), else the function keeps
its inline tests. A finishing step over the plan, not a rule: it changes how the guards read,
never what runs.
"""
from __future__ import annotations

import functools
import re
from collections import defaultdict
from typing import Dict, List, Optional

import libcst as cst

from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.rules import _build

# The first of these that the file never mentions (a comment or string mentioning it counts too:
# the cost of a false mention is only a longer name).
NAMES = ("is_main", "is_main_rank", "is_rank_zero", "on_rank_zero")
_BLOCKS = (cst.IndentedBlock, cst.Module)


def name_rank_checks(facts: ScriptFacts, plan: Plan, source: str) -> None:
    condition = f"{facts.names.dist}.get_rank() == 0"
    by_scope: Dict[object, List[cst.CSTNode]] = defaultdict(list)
    for statement, guard in plan.guards.items():
        if guard == condition:
            by_scope[facts.owner_of(statement)].append(statement)
    scopes = [statements for statements in by_scope.values() if _separate_guards(facts, plan, statements) >= 2]
    if not scopes:
        return
    name = _free_name(source)
    if name is None:
        return
    for statements in scopes:
        statements.sort(key=lambda s: facts.order.get(s, 0))
        anchor = _anchor(facts, statements)
        if anchor is None or not _after_setup(facts, anchor):
            continue
        _insert_before(plan, anchor, _build.statements(facts, f"{name} = {condition}\n"))
        for statement in statements:
            plan.guards[statement] = name


def _separate_guards(facts: ScriptFacts, plan: Plan, statements: List[cst.CSTNode]) -> int:
    """How many `if` blocks the guards make once neighbours share one (edits._Applier._merge_guards)."""
    count = 0
    for statement in statements:
        block = facts.parents.get(statement)
        body = list(getattr(block, "body", ()))
        index = next((i for i, s in enumerate(body) if s is statement), None)
        previous = body[index - 1] if index else None
        if previous is None or plan.guards.get(previous) != plan.guards[statement]:
            count += 1
    return count


def _blocks_above(facts: ScriptFacts, node: cst.CSTNode) -> List[cst.CSTNode]:
    """The blocks holding `node`, innermost first."""
    found = []
    parent = facts.parents.get(node)
    while parent is not None:
        if isinstance(parent, _BLOCKS):
            found.append(parent)
        parent = facts.parents.get(parent)
    return found


def _anchor(facts: ScriptFacts, statements: List[cst.CSTNode]) -> Optional[cst.CSTNode]:
    """The statement of the innermost block holding every guard that holds (or is) the first guard."""
    common = _blocks_above(facts, statements[0])
    for statement in statements[1:]:
        above = {id(block) for block in _blocks_above(facts, statement)}
        common = [block for block in common if id(block) in above]
    if not common:
        return None
    block = common[0]
    node = statements[0]
    while facts.parents.get(node) is not block:
        node = facts.parents.get(node)
        if node is None:
            return None
    return node


def _after_setup(facts: ScriptFacts, anchor: cst.CSTNode) -> bool:
    entry = facts.entry
    if entry is None:
        return False
    if facts.owner_of(anchor) is not entry.scope:
        return facts.after_setup(anchor)  # a function called once the process group exists
    return facts.order.get(anchor, 0) >= facts.order.get(entry.anchor, 0)


def _insert_before(plan: Plan, anchor: cst.CSTNode, statements: List[cst.BaseStatement]) -> None:
    """The blank lines above the anchor go above the new line, which then reads as the block's first."""
    blank = list(getattr(anchor, "leading_lines", ()))
    count = next((i for i, line in enumerate(blank) if line.comment is not None), len(blank))
    if count and not plan.before.get(anchor):
        statements[0] = statements[0].with_changes(leading_lines=blank[:count])
        plan.replace(anchor, functools.partial(_without_blank_lines, count=count))
    plan.insert_before(anchor, statements)


def _without_blank_lines(node, count: int):
    if not isinstance(node, cst.BaseStatement) or len(node.leading_lines) < count:
        return node  # another edit replaced the statement: its lines are its own
    return node.with_changes(leading_lines=node.leading_lines[count:])


def _free_name(source: str) -> Optional[str]:
    return next((name for name in NAMES if not re.search(rf"\b{name}\b", source)), None)
