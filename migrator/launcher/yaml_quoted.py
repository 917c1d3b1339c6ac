"""The value of a quoted YAML scalar, with where each of its characters is written in the file.

PyYAML gives a scalar's value and where the scalar starts and ends, not where each character of the
value comes from; a rewrite of the value needs that to become an edit of the text. This decodes
the scalar the way PyYAML's scanner does (`''`, backslash escapes, folded line breaks); the caller
compares the result with PyYAML's own value and leaves the scalar alone when they differ.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from migrator.launcher.virtual import _Virtual

_BREAKS = "\r\n\x85\u2028\u2029"
_ESCAPES = {
    "0": "\0", "a": "\x07", "b": "\x08", "t": "\t", "\t": "\t", "n": "\n", "v": "\x0b", "f": "\x0c", "r": "\r",
    "e": "\x1b", " ": " ", '"': '"', "\\": "\\", "/": "/", "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029",
}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_HEX = frozenset("0123456789abcdefABCDEF")


def _quoted_virtual(text: str, start: int, end: int, value: str) -> Optional[_Virtual]:
    """The quoted scalar text[start:end] (quotes included) as a virtual text, or None when decoding
    it here does not give `value`, the value PyYAML read."""
    decoded = _decode(text, start, end)
    if decoded is None or decoded[0] != value:
        return None
    encode = _double_quoted if text[start] == '"' else _single_quoted
    return _Virtual(decoded[0], decoded[1], encode)


def _double_quoted(new: str) -> str:
    return "".join(_WRITTEN.get(c, c) for c in new)


_WRITTEN = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _single_quoted(new: str) -> str:
    return new.replace("'", "''")


def _decode(text: str, start: int, end: int) -> Optional[Tuple[str, List[int]]]:
    double = text[start] == '"'
    chars: List[str] = []
    at: List[int] = []
    i, stop = start + 1, end - 1
    while i < stop:
        c = text[i]
        if c in " \t" or c in _BREAKS:
            i = _fold(text, i, stop, chars, at)
        elif c == "'" and not double:
            if not text.startswith("''", i):
                return None
            chars.append("'")
            at.append(i)
            i += 2
        elif c == "\\" and double:
            escaped = _escape(text, i, stop, chars, at)
            if escaped is None:
                return None
            i = escaped
        else:
            chars.append(c)
            at.append(i)
            i += 1
    at.append(stop)
    return "".join(chars), at


def _escape(text: str, i: int, stop: int, chars: List[str], at: List[int]) -> Optional[int]:
    """A backslash escape at text[i]; returns where the text after it starts, or None if it is not one."""
    nxt = text[i + 1] if i + 1 < stop else ""
    if nxt in _ESCAPES:
        chars.append(_ESCAPES[nxt])
        at.append(i)
        return i + 2
    if nxt in _HEX_ESCAPES:
        digits = text[i + 2 : i + 2 + _HEX_ESCAPES[nxt]]
        if len(digits) != _HEX_ESCAPES[nxt] or not set(digits) <= _HEX:
            return None
        chars.append(chr(int(digits, 16)))
        at.append(i)
        return i + 2 + len(digits)
    if nxt and nxt in _BREAKS:  # an escaped line break: the lines join with nothing between them
        _, j = _line_break(text, i + 1)
        return _blank_lines(text, j, stop, chars, at)
    return None


def _fold(text: str, i: int, stop: int, chars: List[str], at: List[int]) -> int:
    """Blanks at text[i]: kept as they are inside a line; before a line break, the break folds to one
    space (or to the newlines of the blank lines after it), written where the blanks start."""
    j = i
    while j < stop and text[j] in " \t":
        j += 1
    if j >= stop or text[j] not in _BREAKS:
        chars.extend(text[i:j])
        at.extend(range(i, j))
        return j
    first, k = _line_break(text, j)
    folded: List[str] = []
    folded_at: List[int] = []
    k = _blank_lines(text, k, stop, folded, folded_at)
    if first != "\n":
        chars.append(first)
        at.append(j)
    elif not folded:
        chars.append(" ")
        at.append(i)
    chars.extend(folded)
    at.extend(folded_at)
    return k


def _blank_lines(text: str, i: int, stop: int, chars: List[str], at: List[int]) -> int:
    """After a line break: each blank line is a newline of the value; the next line's indentation goes."""
    while True:
        while i < stop and text[i] in " \t":
            i += 1
        if i >= stop or text[i] not in _BREAKS:
            return i
        brk, nxt = _line_break(text, i)
        chars.append(brk)
        at.append(i)
        i = nxt


def _line_break(text: str, i: int) -> Tuple[str, int]:
    """The line break at text[i] as the value holds it, and where the next line starts."""
    if text.startswith("\r\n", i):
        return "\n", i + 2
    c = text[i]
    return ("\n" if c in "\r\n\x85" else c), i + 1
