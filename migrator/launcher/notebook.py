"""Notebooks: the code and Markdown cells of a .ipynb, rewritten in place in its JSON text."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from migrator.launcher.docs import _cut_markdown
from migrator.launcher.rules import LAUNCHER_UNSAFE
from migrator.launcher.scanner import _LEGACY_MENTION, _Finding, _lines, _Scanner
from migrator.launcher.sequences import _Edit


@dataclass
class _JsonString:
    start: int  # the opening quote
    end: int  # after the closing quote
    value: str
    raw_at: List[int]  # raw offset of each decoded character, plus one for the end


def _notebook(scanner: _Scanner) -> None:
    """Rewrite `!` lines and %%bash cells of a notebook's code cells, and the Markdown cells."""
    t = scanner.text
    try:
        root = _JsonReader(t).document()
    except ValueError:
        if _LEGACY_MENTION.search(t):
            message = "this notebook is not valid JSON; its launch commands are not rewritten"
            scanner.findings.append(_Finding(LAUNCHER_UNSAFE.code, 0, message, False))
        return
    cells = root.get("cells") if isinstance(root, dict) else None
    if not isinstance(cells, list):
        return
    for cell in cells:
        if not isinstance(cell, dict):
            continue
        cell_type = cell.get("cell_type")
        source = cell.get("source")
        strings = [s for s in (source if isinstance(source, list) else [source]) if isinstance(s, _JsonString)]
        if not strings or not any("torch.distributed." in s.value for s in strings):
            continue
        virtual = "".join(s.value for s in strings)
        inner = _Scanner(virtual, scanner.options)
        if cell_type == "markdown":
            _cut_markdown(inner, 0, len(virtual))
        elif cell_type == "code":
            _cut_code_cell(inner)
        else:
            continue
        inner.report_leftovers()
        _map_back(scanner, inner, strings, isinstance(source, list))


_CELL_MAGIC = re.compile(r"[ \t]*%%(?:bash|sh|script[ \t]+(?:ba|z)?sh)\b[^\n]*\n")
_BANG = re.compile(r"[ \t]*!!?")


def _cut_code_cell(inner: _Scanner) -> None:
    v = inner.text
    magic = _CELL_MAGIC.match(v)
    if magic:
        inner.shell(magic.end(), len(v), where="in this %%bash cell")
        return
    inner.regions.append((0, len(v), "in this code cell"))
    lines = list(_lines(v))
    n = 0
    while n < len(lines):
        a, b, _ = lines[n]
        bang = _BANG.match(v, a, b)
        used = 1
        if bang:
            c_end = b
            while c_end > a and v[c_end - 1] == "\\" and n + used < len(lines):
                c_end = lines[n + used][1]
                used += 1
            inner.shell(bang.end(), c_end)
        n += used


def _map_back(scanner: _Scanner, inner: _Scanner, strings: Sequence[_JsonString], in_list: bool) -> None:
    """Turn the edits and findings made on a cell's joined source into edits of the JSON file."""
    bounds: List[Tuple[int, int, _JsonString]] = []
    at = 0
    for s in strings:
        bounds.append((at, at + len(s.value), s))
        at += len(s.value)

    def raw(offset: int, *, end: bool = False) -> int:
        for lo, hi, s in bounds:
            if lo <= offset < hi or (end and lo < offset <= hi):
                return s.raw_at[offset - lo]
        return bounds[-1][2].raw_at[-1]

    for edit in inner.edits:
        first = True
        for n, (lo, hi, s) in enumerate(bounds):
            a, b = max(edit.start, lo), min(edit.end, hi)
            if a >= b:
                continue
            new = json.dumps(edit.new, ensure_ascii=False)[1:-1] if first else ""
            if not new and (a, b) == (lo, hi) and in_list and n + 1 < len(bounds):
                scanner.edits.append(_Edit(s.start, bounds[n + 1][2].start, ""))  # the whole line goes
            else:
                scanner.edits.append(_Edit(s.raw_at[a - lo], s.raw_at[b - lo], new))
            first = False
    for finding in inner.findings:
        scanner.findings.append(_Finding(finding.code, raw(finding.offset), finding.message, finding.change))


class _JsonReader:
    """A JSON reader that keeps where every string is (json.loads forgets)."""

    def __init__(self, text: str) -> None:
        self.t = text
        self.i = 0

    def document(self):
        value = self.value()
        self.blank()
        if self.i != len(self.t):
            raise ValueError("trailing data")
        return value

    def blank(self) -> None:
        while self.i < len(self.t) and self.t[self.i] in " \t\r\n":
            self.i += 1

    def value(self):
        self.blank()
        if self.i >= len(self.t):
            raise ValueError("unexpected end")
        c = self.t[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"':
            return self.string()
        match = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null").match(self.t, self.i)
        if not match:
            raise ValueError(f"unexpected {c!r}")
        self.i = match.end()
        return match.group()

    def obj(self) -> Dict[str, object]:
        out: Dict[str, object] = {}
        self.i += 1
        self.blank()
        if self.t.startswith("}", self.i):
            self.i += 1
            return out
        while True:
            self.blank()
            key = self.string()
            self.blank()
            if not self.t.startswith(":", self.i):
                raise ValueError("expected ':'")
            self.i += 1
            value = self.value()
            out[key.value] = value.value if key.value == "cell_type" and isinstance(value, _JsonString) else value
            self.blank()
            if self.t.startswith(",", self.i):
                self.i += 1
            elif self.t.startswith("}", self.i):
                self.i += 1
                return out
            else:
                raise ValueError("expected ',' or '}'")

    def arr(self) -> List[object]:
        out: List[object] = []
        self.i += 1
        self.blank()
        if self.t.startswith("]", self.i):
            self.i += 1
            return out
        while True:
            out.append(self.value())
            self.blank()
            if self.t.startswith(",", self.i):
                self.i += 1
            elif self.t.startswith("]", self.i):
                self.i += 1
                return out
            else:
                raise ValueError("expected ',' or ']'")

    def string(self) -> _JsonString:
        t = self.t
        if not t.startswith('"', self.i):
            raise ValueError("expected a string")
        start = self.i
        i = start + 1
        chars: List[str] = []
        raw_at: List[int] = []
        while i < len(t) and t[i] != '"':
            if t[i] == "\\":
                if t.startswith("\\u", i):
                    code = int(t[i + 2 : i + 6], 16)
                    step = 6
                    if 0xD800 <= code < 0xDC00 and t.startswith("\\u", i + 6):
                        low = int(t[i + 8 : i + 12], 16)
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        step = 12
                    chars.append(chr(code))
                    raw_at.append(i)
                    i += step
                    continue
                escaped = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\", '"': '"'}
                if i + 1 >= len(t) or t[i + 1] not in escaped:
                    raise ValueError("bad escape")
                chars.append(escaped[t[i + 1]])
                raw_at.append(i)
                i += 2
                continue
            chars.append(t[i])
            raw_at.append(i)
            i += 1
        if i >= len(t):
            raise ValueError("unterminated string")
        raw_at.append(i)
        self.i = i + 1
        return _JsonString(start, i + 1, "".join(chars), raw_at)
