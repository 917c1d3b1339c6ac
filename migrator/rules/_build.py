"""Building the statements and expressions the rules insert.

Templates are *our* code, filled with names the analysis resolved (the script's own
aliases); they are parsed with the script's own config so indentation and newlines match.
"""
from __future__ import annotations

from typing import List

import libcst as cst

from migrator.analysis import ScriptFacts
from migrator.tree import keyword_arg, with_keyword  # noqa: F401 - the rules build calls with them here


def statements(facts: ScriptFacts, source: str, **names: str) -> List[cst.BaseStatement]:
    config = facts.module.config_for_parsing
    nl = facts.module.default_newline
    indent = facts.module.default_indent
    text = source.format(**names).replace("\t", indent).replace("\n", nl)
    module = cst.parse_module(text, config=config)
    body = list(module.body)
    if module.header and body:
        # A comment opening the template belongs to its first statement, not to a module header.
        body[0] = body[0].with_changes(leading_lines=[*module.header, *body[0].leading_lines])
    return body


def expression(facts: ScriptFacts, source: str, **names: str) -> cst.BaseExpression:
    text = source.format(**names) if names else source
    return cst.parse_expression(text, config=facts.module.config_for_parsing)


def device_ids(facts: ScriptFacts, scope, device_expr=None, cuda_condition=None) -> str:
    """`device_ids` for DDP: this process's GPU on CUDA, None on CPU (DDP requires None there).

    When the model's own device variable is known, its type decides: a script run with
    --no-cuda on a GPU machine keeps the model on the CPU, and DDP must then get None. When the
    model is moved by `if args.cuda: model.cuda()`, that test decides, for the same reason.
    """
    torch = facts.names.torch
    rank = "local_rank" if facts.local_rank_visible(scope) else f"{torch}.cuda.current_device()"
    if cuda_condition:
        # The move itself is conditional: it decides, even where a device variable exists (the tool
        # may have made one up for bare .cuda() calls, and it does not know the script's flag).
        nested = " if " in cuda_condition or "lambda" in cuda_condition
        on_cuda = f"({cuda_condition})" if nested else cuda_condition
    elif device_expr:
        on_cuda = f'{device_expr}.type == "cuda"'
    else:
        on_cuda = f"{torch}.cuda.is_available()"
    return f"[{rank}] if {on_cuda} else None"


def location(facts: ScriptFacts, node: cst.CSTNode):
    return facts.line_col(node)


def set_apart(statements: List[cst.BaseStatement], anchor: cst.BaseStatement) -> List[cst.BaseStatement]:
    """Give inserted statements the blank lines the anchor has above its own comments.

    The anchor keeps its lines too, so the inserted block stands apart instead of sticking
    to whatever came before it (the end of a function, say).
    """
    blanks = []
    for line in anchor.leading_lines:
        if line.comment is not None:
            break
        blanks.append(line)
    if not statements or not blanks:
        return statements
    first = statements[0]
    return [first.with_changes(leading_lines=[*blanks, *first.leading_lines]), *statements[1:]]


def unbound(name: str, taken) -> str:
    """`name`, or `name2`, `name3`... when `taken` (the names bound where it goes) has it."""
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{name}{number}", number + 1
    return candidate
