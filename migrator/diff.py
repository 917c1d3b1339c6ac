"""Unified diffs that `git apply` and `patch -p1` accept.

Lines are split on "\\n" only, as git and patch do: a CRLF line keeps its "\\r" (so a CRLF file's
patch applies to the CRLF file), and form feeds or other characters str.splitlines() treats as
line breaks stay inside their line.
"""
from __future__ import annotations

import difflib
import os
from pathlib import PurePath
from typing import List, Union

NO_NEWLINE = "\\ No newline at end of file\n"


def unified_diff(old: str, new: str, path: Union[str, "os.PathLike[str]"], context: int = 3) -> str:
    """The patch that turns `old` into `new`, with `a/<path>` and `b/<path>` headers; "" when equal."""
    if old == new:
        return ""
    name = _header_path(path)
    out: List[str] = []
    for line in difflib.unified_diff(
        split_lines(old), split_lines(new), f"a/{name}", f"b/{name}", n=context, lineterm="\n"
    ):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n" + NO_NEWLINE)
    return "".join(out)


def split_lines(text: str) -> List[str]:
    """Split after each "\\n", keeping the terminators; the last line may lack one."""
    lines = text.split("\n")
    last = lines.pop()
    kept = [line + "\n" for line in lines]
    if last:
        kept.append(last)
    return kept


def _header_path(path: Union[str, "os.PathLike[str]"]) -> str:
    """'/'-separated, and never absolute: `a//tmp/x.py` would not survive `patch -p1`."""
    return PurePath(path).as_posix().lstrip("/")
