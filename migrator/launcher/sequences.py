"""Where a command's words live (shell text, a JSON/YAML list, YAML lines, an argv list), and the
edits that replace or remove them there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

from migrator.launcher.lexer import _SPACE, _Item, _Word

# --------------------------------------------------------------------------- sequences: where words live


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    new: str


def _apply_edits(text: str, edits: Sequence[_Edit]) -> str:
    """`text` with `edits` made, each once, in order of position."""
    out: List[str] = []
    at = 0
    for edit in sorted(set(edits), key=lambda e: (e.start, e.end)):
        if edit.start < at:  # overlapping edits: a bug; keep the first
            continue
        out.append(text[at : edit.start])
        out.append(edit.new)
        at = edit.end
    out.append(text[at:])
    return "".join(out)


class _Seq:
    """A command's words and how to replace or remove them in the text."""

    def __init__(self, text: str, items: Sequence[_Item]) -> None:
        self.text = text
        self.items = list(items)

    def replace(self, index: int, new: str) -> List[_Edit]:
        word = self.items[index]
        assert isinstance(word, _Word)
        a, b = word.content or (word.start, word.end)
        return [_Edit(a, b, new)]

    def remove_groups(self, groups: Sequence[Tuple[int, int]]) -> List[_Edit]:
        """Remove runs of items; adjacent runs are merged so each removal sees its kept neighbours."""
        merged: List[List[int]] = []
        for first, last in sorted(groups):
            if merged and first <= merged[-1][1] + 1 and self.joinable(merged[-1][1], first):
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        return [edit for first, last in merged for edit in self.remove(first, last)]

    def remove(self, first: int, last: int) -> List[_Edit]:
        raise NotImplementedError

    def joinable(self, last: int, first: int) -> bool:
        """Whether adjacent runs ending at `last` and starting at `first` are removed as one."""
        return True

    def escaped(self, item: _Word) -> bool:
        return False


class _TextSeq(_Seq):
    """Words of a shell command within text[start:end]."""

    def __init__(self, text: str, start: int, end: int, items: Sequence[_Item], folded: bool) -> None:
        super().__init__(text, items)
        self.lo, self.hi, self.folded = start, end, folded

    def joinable(self, last: int, first: int) -> bool:
        """Runs on different lines are removed line by line (a notebook keeps one string per line)."""
        return "\n" not in self.text[self.items[last].end : self.items[first].start]

    def remove(self, first: int, last: int) -> List[_Edit]:
        t = self.text
        a, b = self.items[first].start, self.items[last].end
        j = b
        while j < self.hi and t[j] in _SPACE:
            j += 1
        if j > b and j < self.hi and t[j] not in "\r\n" and not _continuation_at(t, j):
            return [_Edit(a, j, "")]  # a word follows on the same line: take the blanks after
        line = a
        while line > self.lo and t[line - 1] in _SPACE:
            line -= 1
        if _continuation_at(t, j) and line > self.lo and t[line - 1] == "\n" and _continuation_before(t, line - 1):
            # alone on a continued line, with more to come: take the whole line
            return [_Edit(line, t.index("\n", j) + 1, "")]
        if j == self.hi or t[j] in "\r\n":
            b = j  # the last word on its line: its trailing blanks go too
        i = a
        while i > self.lo:
            if t[i - 1] in _SPACE:
                i -= 1
            elif t[i - 1] == "\n" and (self.folded or _continuation_before(t, i - 1)):
                i = _start_of_newline(t, i - 1)
                if not self.folded:
                    i -= 1  # the backslash
            else:
                break
        return [_Edit(i, b, "")]


def _continuation_at(t: str, j: int) -> bool:
    return t.startswith("\\\n", j) or t.startswith("\\\r\n", j)


def _start_of_newline(t: str, nl: int) -> int:
    return nl - 1 if nl > 0 and t[nl - 1] == "\r" else nl


def _continuation_before(t: str, nl: int) -> bool:
    i = _start_of_newline(t, nl)
    return i > 0 and t[i - 1] == "\\"


class _ListSeq(_Seq):
    """Elements of a JSON / YAML flow list (`[a, "b"]`): removing one takes its comma too."""

    def remove(self, first: int, last: int) -> List[_Edit]:
        if last + 1 < len(self.items):
            return [_Edit(self.items[first].start, self.items[last + 1].start, "")]
        if first > 0:
            return [_Edit(self.items[first - 1].end, self.items[last].end, "")]
        return [_Edit(self.items[first].start, self.items[last].end, "")]

    def escaped(self, item: _Word) -> bool:
        a, b = item.content or (item.start, item.end)
        return "\\" in self.text[a:b] and self.text[item.start] == '"'


class _LineSeq(_Seq):
    """Items of a YAML block sequence, one `- item` per line: removing one takes its line."""

    def __init__(self, text: str, items: Sequence[_Item], lines: Sequence[Tuple[int, int]]) -> None:
        super().__init__(text, items)
        self.lines = list(lines)

    def remove(self, first: int, last: int) -> List[_Edit]:
        return [_Edit(self.lines[first][0], self.lines[last][1], "")]


class _ArgvSeq(_Seq):
    """A Python argv list: edits address elements (start = index)."""

    def replace(self, index: int, new: str) -> List[_Edit]:
        return [_Edit(index, index + 1, new)]

    def remove(self, first: int, last: int) -> List[_Edit]:
        return [_Edit(first, last + 1, "")]
