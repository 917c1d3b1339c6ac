"""Launch commands in Python comments: `# Usage: python -m torch.distributed.launch ...` (DDP021).

A comment documents a command the way a README does, so it is rewritten like a Markdown line
(migrator.launcher.rewrite_documented_command): the launcher prefix becomes torchrun, `--use_env`
and a passed `--local_rank` go, every other character stays; one it cannot rewrite is left alone
and never called unsafe. Comments are trivia the syntax-tree pass does not visit: they are found
with `tokenize` (never inside a string) and edited in place, on the text the engine produced.
"""
from __future__ import annotations

import io
import tokenize
from typing import List, Tuple

from migrator.launcher import rewrite_documented_command

_MENTION = "torch.distributed.launch"

Rewrite = Tuple[int, int, int, str]  # (line, start column, end column, new comment text)


def rewrites(text: str) -> List[Rewrite]:
    """The comments of `text` whose launch command changes, with their new text."""
    if _MENTION not in text:
        return []
    found: List[Rewrite] = []
    try:
        comments = [t for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []  # the engine parsed it, this Python's tokenizer cannot: the comments stay
    by_line = {token.start[0]: token.string for token in comments}
    for token in comments:
        if _MENTION not in token.string or _continued_with_flags(token.start[0], by_line):
            continue
        new = rewrite_documented_command(token.string)
        if new is not None and new != token.string:
            found.append((token.start[0], token.start[1], token.end[1], new))
    return found


def _continued_with_flags(line: int, by_line: dict) -> bool:
    """`# python -m torch.distributed.launch ... \\` continued on the next comment lines: only the
    first line is rewritten, so a `--use_env` or `--local_rank` further down leaves it as it is."""
    while by_line.get(line, "").rstrip().endswith("\\"):
        line += 1
        following = by_line.get(line, "")
        if any(flag in following for flag in ("--use_env", "--use-env", "--local_rank", "--local-rank")):
            return True
    return False


def apply(text: str, edits: List[Rewrite]) -> str:
    if not edits:
        return text
    lines = text.splitlines(keepends=True)
    for line, start, end, new in sorted(edits, reverse=True):
        row = lines[line - 1]
        lines[line - 1] = row[:start] + new + row[end:]
    return "".join(lines)
