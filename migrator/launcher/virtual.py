"""Text that is read somewhere other than where it is written: a quoted YAML scalar's value (escapes
decoded, lines folded), a code block inside a Markdown blockquote (its `>` markers left out).

Such text is cut by a scanner of its own; its edits and findings go back to the file through
`raw_at`, where each of its characters starts in the file.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

from migrator.launcher.scanner import _Scanner
from migrator.launcher.sequences import _Edit


def _as_written(new: str) -> str:
    return new


@dataclass(frozen=True)
class _Virtual:
    """A text and, for each of its characters, where it starts in the file (one more for its end).

    `encode` writes a replacement the way the file spells it there (a quoted scalar's escapes).
    """

    text: str
    raw_at: Sequence[int]
    encode: Callable[[str], str] = _as_written


def _scan_virtual(scanner: _Scanner, virtual: _Virtual, cut: Callable[[_Scanner], None]) -> str:
    """Cut `virtual` with a scanner of its own and move what it found into `scanner`, in the file's
    offsets; returns the virtual text as rewritten (what the file will read as there)."""
    inner = _Scanner(virtual.text, scanner.options)
    inner.docs = scanner.docs
    cut(inner)
    at = virtual.raw_at
    # A deletion maps to whole escapes and folds: raw_at of the character after it is where the next one starts.
    scanner.edits.extend(_Edit(at[e.start], at[e.end], virtual.encode(e.new)) for e in inner.edits)
    scanner.findings.extend(dataclasses.replace(f, offset=at[f.offset]) for f in inner.findings)
    scanner.accounted.update(at[offset] for offset in inner.accounted)
    scanner.regions.extend((at[a], at[b], where) for a, b, where in inner.regions)
    scanner.comments.extend((at[a], at[b]) for a, b in inner.comments)
    return inner.apply()
