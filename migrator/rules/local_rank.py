"""DDP020: a `--local_rank` argument that works under torchrun and the old launcher alike."""
from __future__ import annotations

from typing import List

import libcst as cst

from migrator.analysis import ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.types import Change

RULE = Rule(
    code="DDP020",
    name="local-rank-argument",
    summary="--local_rank falls back to torchrun's LOCAL_RANK and accepts both spellings",
    what="""
`parser.add_argument("--local_rank", type=int, default=...)` (either spelling, `required=True`
too, `dest=` respected) becomes an argument that accepts `--local_rank` and `--local-rank`,
defaults to `int(os.environ.get("LOCAL_RANK", <old default>))` (0 for a required argument; `None`
stays `None` outside torchrun) and is no longer required. When a parser declares the two
spellings in two calls, no spelling is added (argparse would reject the duplicate).
Reads of `args.local_rank` keep working.""",
    why="""
torchrun passes no `--local_rank`: it sets the LOCAL_RANK environment variable, so a required
argument fails and a default of -1 or 0 puts every process on the same GPU. Since torch 2.0 the
old launcher passes `--local-rank` (dashed), which a parser that only knows `--local_rank` rejects.""",
    fix="Add the missing spelling, read the default from LOCAL_RANK, drop `required=True`.",
    fix_safety="Safe: an explicit --local_rank on the command line still wins.",
    fixable=True,
    examples=(
        Example(
            id="swin-style-parser",
            before='''import argparse

parser = argparse.ArgumentParser("Swin Transformer training and evaluation script")
parser.add_argument("--local_rank", type=int, required=True, help="local rank for DistributedDataParallel")
args = parser.parse_args()
''',
            after='''import argparse
import os

parser = argparse.ArgumentParser("Swin Transformer training and evaluation script")
parser.add_argument("--local_rank", "--local-rank", type=int, help="local rank for DistributedDataParallel", default=int(os.environ.get("LOCAL_RANK", 0)))
args = parser.parse_args()
''',
        ),
    ),
)

SPELLINGS = ("--local_rank", "--local-rank")


def plan(facts: ScriptFacts, plan: Plan) -> None:
    # Both spellings declared by separate calls: adding the other one to each would make
    # argparse fail with "conflicting option strings".
    declared = {name for call in facts.local_rank_arguments for name in _option_strings(call)}
    add_spelling = not set(SPELLINGS) <= declared
    for call in facts.local_rank_arguments:
        if any("LOCAL_RANK" in code_of(arg.value) for arg in call.args if arg.keyword and arg.keyword.value == "default"):
            continue  # already falls back to the environment
        plan.replace(call, lambda c: _fixed_argument(c, add_spelling))
        if facts.names.os_import_needed:
            plan.need_import("os")
        line, col = facts.line_col(call)
        plan.changes.append(Change(RULE.code, line, col, "--local_rank defaults to LOCAL_RANK and accepts --local-rank"))


def _fixed_argument(call: cst.Call, add_spelling: bool = True) -> cst.Call:
    args: List[cst.Arg] = list(call.args)
    # 1. default: read LOCAL_RANK, falling back to the old default (in place, keeping the layout).
    default_at = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == "default"), None)
    required = any(a.keyword is not None and a.keyword.value == "required" for a in args)
    old = code_of(args[default_at].value) if default_at is not None else ("0" if required else "None")
    if old == "None":
        # int(None) would fail outside torchrun: keep None when LOCAL_RANK is not set.
        value = cst.parse_expression('int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else None')
    else:
        value = cst.parse_expression(f'int(os.environ.get("LOCAL_RANK", {old}))')
    if default_at is not None:
        args[default_at] = args[default_at].with_changes(value=value)
    else:
        args.append(_build.keyword_arg("default", value))
    # 2. required=True goes: torchrun passes no such argument.
    for index, arg in enumerate(args):
        if arg.keyword is not None and arg.keyword.value == "required":
            if index == len(args) - 1 and index > 0:
                args[index - 1] = args[index - 1].with_changes(comma=arg.comma)
            del args[index]
            break
    # 3. both spellings, the new one right after the existing option strings.
    names = [_string(arg) for arg in args if arg.keyword is None]
    missing = [spelling for spelling in SPELLINGS if spelling not in names]
    positional = [i for i, arg in enumerate(args) if arg.keyword is None and arg.star == ""]
    if missing and positional and add_spelling:
        last = positional[-1]
        quote = _quote(args[last])
        args.insert(last + 1, cst.Arg(cst.SimpleString(f"{quote}{missing[0]}{quote}"), comma=args[last].comma))
        args[last] = args[last].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=args)


def _option_strings(call: cst.Call) -> List[str]:
    return [_string(arg) for arg in call.args if arg.keyword is None]


def _string(arg: cst.Arg) -> str:
    value = arg.value
    return value.evaluated_value if isinstance(value, cst.SimpleString) else ""  # type: ignore[return-value]


def _quote(arg: cst.Arg) -> str:
    value = arg.value
    return value.quote if isinstance(value, cst.SimpleString) else '"'
