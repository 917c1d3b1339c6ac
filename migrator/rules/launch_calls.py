"""DDP021: launch commands inside Python (subprocess, os.system, argv lists) become torchrun.

The command text itself is rewritten by `migrator.launcher` (the one place that understands
shell words); this rule only maps Python literals to words and back. Non-literal parts
(`f"...{n}..."` fields in strings, `sys.executable` in argv lists) travel as placeholders, which
the launcher treats like shell variables or Python-provided words, and come back unchanged.
"""
from __future__ import annotations

import re
from typing import List, Sequence

import libcst as cst

from migrator.analysis import ScriptFacts, code_of
from migrator.analysis.helpers import _raw_text
from migrator.edits import Plan
from migrator.launcher import launch_problem, rewrite_command_string, rewrite_command_words
from migrator.rule import Example, Rule
from migrator.rules.advisories import LEGACY_LAUNCH_IMPORT, PYTHON_LAUNCH_UNSAFE
from migrator.types import Change, Diagnostic

RULE = Rule(
    code="DDP021",
    name="launch-command-in-python",
    summary="python -m torch.distributed.launch in a subprocess call or argv list becomes torchrun",
    what="""
String commands (`os.system("python -m torch.distributed.launch --nproc_per_node=2 train.py")`,
f-strings included) and argv lists (`subprocess.run([sys.executable, "-m",
"torch.distributed.launch", ...])`) that start the deprecated launcher are rewritten the way
launcher files are (DDP201-DDP203): `torchrun` for a plain `python`, `<interpreter> -m
torch.distributed.run` when the interpreter is a variable such as `sys.executable`,
`--use_env` and an explicit `--local_rank` dropped.""",
    why="torch.distributed.launch is deprecated and passes `--local-rank`, which scripts written for it reject.",
    fix="Rewrite the literal; everything that is not a literal is kept as it is.",
    fix_safety="Safe; a command the launcher cannot rewrite safely is reported (DDP113) instead.",
    fixable=True,
    examples=(
        Example(
            id="subprocess-argv",
            before='''import subprocess
import sys


def launch(n):
    subprocess.run([sys.executable, "-m", "torch.distributed.launch", "--nproc_per_node", str(n), "--use_env", "train.py"], check=True)
''',
            after='''import subprocess
import sys


def launch(n):
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n), "train.py"], check=True)
''',
        ),
    ),
)

_PLACEHOLDER = "${{__ddp_migrate_{}}}"
_PLACEHOLDER_RE = re.compile(r"\$\{__ddp_migrate_(\d+)\}")
_LAUNCH_COMMAND = re.compile(r"-m\s+torch\.distributed\.launch\b")


def plan(facts: ScriptFacts, plan: Plan) -> None:
    for node in launch_literals(facts):
        if isinstance(node, (cst.List, cst.Tuple)):
            _plan_argv(facts, plan, node)
        else:
            _plan_string(facts, plan, node)
    for node in facts.index.legacy_launch_imports:
        line, col = facts.line_col(node)
        plan.diagnostics.append(Diagnostic(LEGACY_LAUNCH_IMPORT.code, line, col, LEGACY_LAUNCH_IMPORT.summary))


# -- strings ---------------------------------------------------------------------------------


def _plan_string(facts: ScriptFacts, plan: Plan, node: cst.BaseExpression) -> None:
    text, fields = _string_text(node)
    if text is None:
        return
    new_text = rewrite_command_string(text)
    line, col = facts.line_col(node)
    if new_text is None:
        # A docstring or a bare string statement only documents a command (`cmd: FORK_LAST3=1
        # python -m torch.distributed.launch ...`): it runs nothing, so it is never unsafe.
        if _LAUNCH_COMMAND.search(text) and not isinstance(facts.parents.get(node), cst.Expr):
            plan.diagnostics.append(Diagnostic(PYTHON_LAUNCH_UNSAFE.code, line, col, PYTHON_LAUNCH_UNSAFE.summary))
        return
    prefix, quote = _prefix_and_quote(node)
    if fields and "f" not in prefix.lower():
        prefix += "f"  # a concatenation with f-string parts becomes one f-string
    body = _PLACEHOLDER_RE.sub(lambda match: fields[int(match.group(1))], new_text)
    new = cst.parse_expression(f"{prefix}{quote}{body}{quote}").with_changes(lpar=node.lpar, rpar=node.rpar)
    plan.replace(node, lambda _: new)
    plan.changes.append(Change(RULE.code, line, col, "launch command rewritten for torchrun"))


def _string_text(node: cst.BaseExpression):
    """The literal's source text between its quotes, with f-string fields as placeholders.

    An implicit concatenation (`"python -m torch.distributed.launch ... " "train.py --local_rank=0"`)
    is one command: its parts are read as one text, and written back as one literal.
    """
    if isinstance(node, cst.ConcatenatedString):
        parts = _concatenated_parts(node)
        if parts is None:
            return None, []
        texts, fields = [], []
        any_f = any(isinstance(p, cst.FormattedString) for p in parts)
        for part in parts:
            text, part_fields = _string_text(part)
            if text is None:
                return None, []
            if any_f and isinstance(part, cst.SimpleString):
                text = text.replace("{", "{{").replace("}", "}}")
            text = _PLACEHOLDER_RE.sub(lambda match: _PLACEHOLDER.format(int(match.group(1)) + len(fields)), text)
            texts.append(text)
            fields += part_fields
        return "".join(texts), fields
    if isinstance(node, cst.SimpleString):
        return node.raw_value, []
    if isinstance(node, cst.FormattedString):
        parts, fields = [], []
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                parts.append(part.value)
            else:
                fields.append(code_of(part))
                parts.append(_PLACEHOLDER.format(len(fields) - 1))
        return "".join(parts), fields
    return None, []


def _concatenated_parts(node: cst.ConcatenatedString):
    """The parts of a concatenation, when they share one quote style and no prefix but f."""
    parts, current = [], node
    while isinstance(current, cst.ConcatenatedString):
        parts.append(current.left)
        current = current.right
    parts.append(current)
    quotes = {_prefix_and_quote(p)[1] for p in parts if isinstance(p, (cst.SimpleString, cst.FormattedString))}
    prefixes = {_prefix_and_quote(p)[0].lower().replace("f", "") for p in parts if isinstance(p, (cst.SimpleString, cst.FormattedString))}
    if len(quotes) != 1 or prefixes - {""} or not all(isinstance(p, (cst.SimpleString, cst.FormattedString)) for p in parts):
        return None
    return parts


def _prefix_and_quote(node: cst.BaseExpression):
    if isinstance(node, cst.ConcatenatedString):
        first = _concatenated_parts(node)[0]  # type: ignore[index]
        return _prefix_and_quote(first)
    if isinstance(node, cst.SimpleString):
        return node.prefix, node.quote
    return node.start[:-len(node.end)], node.end  # type: ignore[attr-defined]


# -- argv lists ------------------------------------------------------------------------------


def _plan_argv(facts: ScriptFacts, plan: Plan, node) -> None:
    words = [_word(i, element.value) for i, element in enumerate(node.elements)]
    line, col = facts.line_col(node)
    new_words = rewrite_command_words(words)
    if new_words is None:
        if launch_problem(words) is not None:
            plan.diagnostics.append(Diagnostic(PYTHON_LAUNCH_UNSAFE.code, line, col, PYTHON_LAUNCH_UNSAFE.summary))
        return
    plan.replace(node, lambda updated: _rebuilt(updated, words, new_words))
    plan.changes.append(Change(RULE.code, line, col, "launch command rewritten for torchrun"))


def _word(index: int, value: cst.BaseExpression) -> str:
    if isinstance(value, cst.SimpleString):
        return str(value.evaluated_value)
    # `{...}` is how the launcher sees a Python-provided word (`{sys.executable}`): an interpreter
    # or an argument it keeps as it is.
    return "{__ddp_migrate_%d}" % index


def _rebuilt(node, words: Sequence[str], new_words: Sequence[str]):
    """Keep the elements the launcher kept (with their formatting), replace the renamed ones."""
    elements: List[cst.Element] = []
    j = 0
    for element, word in zip(node.elements, words):
        if j < len(new_words) and new_words[j] == word:
            elements.append(element)
            j += 1
        elif j < len(new_words) and new_words[j] in ("torchrun", "torch.distributed.run"):
            quote = element.value.quote if isinstance(element.value, cst.SimpleString) else '"'
            elements.append(element.with_changes(value=cst.SimpleString(f"{quote}{new_words[j]}{quote}")))
            j += 1
    if elements and isinstance(node.elements[-1].comma, cst.MaybeSentinel):
        elements[-1] = elements[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(elements=elements)


def launch_literals(facts: ScriptFacts) -> List[cst.BaseExpression]:
    """Argv lists holding the launcher module, and strings (not inside such lists) holding a launch."""
    lists = []
    for node in facts.index.launch_strings:
        parent = facts.parents.get(facts.parents.get(node))
        if isinstance(facts.parents.get(node), cst.Element) and isinstance(parent, (cst.List, cst.Tuple)):
            if parent not in lists:
                lists.append(parent)
    strings = []
    for node in facts.index.launch_strings:
        if isinstance(facts.parents.get(node), cst.Element) and facts.parents.get(facts.parents.get(node)) in lists:
            continue
        while isinstance(facts.parents.get(node), cst.ConcatenatedString):
            node = facts.parents.get(node)  # the whole implicit concatenation is one command
        if " " in _raw_text(node) and node not in strings:
            strings.append(node)
    return lists + strings
