"""Markdown's code blocks as markdown-it-py (CommonMark) finds them: fenced with ``` or ~~~ of any
length, and indented, at any depth of lists and blockquotes, with their lines and info strings.

markdown-it is imported when a Markdown text with a launcher in it is cut, not when the CLI starts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, List, Optional, Sequence, Tuple

from migrator.launcher.virtual import _Virtual

_Line = Tuple[int, int, int]  # (line start, content end without the line break, next line start)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class _CodeBlock:
    """One code block; lines are numbered as markdown-it numbers them (see `_markdown_lines`)."""

    start: int  # its first line (an opening fence's)
    end: int  # the line after it (after the closing fence, when there is one)
    body: range  # the lines of its code
    info: str  # a fence's info string (`bash`, `console title="x"`); "" for an indented block
    quoted: bool  # inside a blockquote: its lines begin with `>` markers
    code: Tuple[str, ...]  # each body line as markdown-it reads it: markers and indentation left out


def _markdown_lines(text: str, start: int, end: int) -> List[_Line]:
    """The lines of text[start:end] as markdown-it counts them: \\r\\n, \\r and \\n each end one."""
    lines: List[_Line] = []
    at = start
    for match in _LINE_BREAK.finditer(text, start, end):
        lines.append((at, match.start(), match.end()))
        at = match.end()
    if at < end:
        lines.append((at, end, end))
    return lines


def _code_blocks(source: str) -> List[_CodeBlock]:
    """The fenced and indented code blocks of the Markdown in `source`, in order."""
    blocks: List[_CodeBlock] = []
    quotes = 0
    for token in _parser().parse(source):
        if token.type == "blockquote_open":
            quotes += 1
        elif token.type == "blockquote_close":
            quotes -= 1
        elif token.type in ("fence", "code_block") and token.map:
            blocks.append(_block(token, quotes > 0))
    return blocks


def _block(token: Any, quoted: bool) -> _CodeBlock:
    start, end = token.map
    code = token.content.split("\n")
    if code[-1] == "":
        code.pop()  # each line ends with \n, but a last line at the end of a text without one
    if token.type == "fence":
        return _CodeBlock(start, end, range(start + 1, start + 1 + len(code)), token.info, quoted, tuple(code))
    return _CodeBlock(start, end, range(start, start + len(code)), "", quoted, tuple(code))


@lru_cache(maxsize=1)
def _parser() -> Any:
    """One CommonMark parser, built on first use; only its block structure is read (inline parsing off)."""
    from markdown_it import MarkdownIt  # lazily: only a Markdown text with a launcher in it pays for it

    return MarkdownIt("commonmark").disable("inline")


def _quoted_code(text: str, lines: Sequence[_Line], block: _CodeBlock) -> Optional[_Virtual]:
    """A code block's code without the blockquote's `>` markers and its indentation, each line with
    its line break; None when a line does not end with what markdown-it read there (a tab it expanded)."""
    pieces: List[str] = []
    raw_at: List[int] = []
    for number, code in zip(block.body, block.code):
        a, b, nxt = lines[number]
        if not text.endswith(code, a, b):
            return None
        end = b if number == block.body[-1] else nxt
        pieces.append(text[b - len(code) : end])
        raw_at.extend(range(b - len(code), end))
    raw_at.append(lines[block.body[-1]][1])
    return _Virtual("".join(pieces), raw_at)
