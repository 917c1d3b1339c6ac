"""A small shell lexer: simple commands of words that know their spans, quoting and expansions."""
from __future__ import annotations

import re

from dataclasses import dataclass, field
from typing import List, Optional, Tuple, Union

# --------------------------------------------------------------------------- shell lexer

_SPACE = " \t"
_CONTROL = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_REDIRECT = ("<<<", "<<-", "&>>", ">>", "<<", ">&", "<&", "&>", ">|", "<>", ">", "<")
_OPERATORS = tuple(sorted(_CONTROL + _REDIRECT, key=len, reverse=True))
_OPERATOR_START = frozenset("".join(_OPERATORS))
# In documentation: `<num-of-gpus-to-use>`, `<path/to/config.yaml>` (a word, not a redirection),
# and `\ ` with blanks after the backslash at a line end (a continuation all the same).
_PLACEHOLDER = re.compile(r"<[A-Za-z_{][^<>\s]*>")
_STRAY_CONTINUATION = re.compile(r"\\[ \t]+\r?\n")
_SPECIAL_PARAMS = frozenset("@*#?$!-")


@dataclass(frozen=True)
class _Word:
    """A shell word (or a list element) and what is known of its value.

    `value` is the word as the shell would pass it, when it holds no expansion; otherwise None, and
    `prefix` / `suffix` are the literal text before the first / after the last expansion.
    `inner` are the spans of quoted strings and substitutions inside it, scanned in turn;
    `content` is the span to replace when the word gets a new value (inside quotes for list elements).
    """

    start: int
    end: int
    value: Optional[str]
    prefix: str = ""
    suffix: str = ""
    literal: bool = True
    expansions: Tuple[str, ...] = ()
    inner: Tuple[Tuple[int, int], ...] = ()
    content: Optional[Tuple[int, int]] = None
    closed: bool = True  # False when a quote or substitution in it runs to the end of the region

    @property
    def text(self) -> str:
        """The literal text known at the start of the word: its value, or the prefix."""
        return self.value if self.value is not None else self.prefix


@dataclass(frozen=True)
class _Redirect:
    start: int
    end: int
    op: str
    target: Optional[_Word]


_Item = Union[_Word, _Redirect]


@dataclass
class _Lexed:
    commands: List[List[_Item]] = field(default_factory=list)
    comments: List[Tuple[int, int]] = field(default_factory=list)
    heredocs: List[Tuple[int, int]] = field(default_factory=list)


class _Lexer:
    """Just enough of the POSIX shell grammar to find simple commands and their words' spans.

    Tolerant: an unterminated quote or substitution runs to the end of the region. `folded` treats
    newlines as blanks (a YAML `>` block scalar folds its lines into one). `docs` reads commands as
    documentation writes them for people: `<num-of-gpus>` is a placeholder word, not a redirection,
    and a backslash followed by stray blanks at a line end still continues the line.
    """

    def __init__(self, text: str, start: int, end: int, folded: bool = False, docs: bool = False) -> None:
        self.t = text
        self.start = start
        self.end = end
        self.folded = folded
        self.docs = docs

    def lex(self) -> _Lexed:
        t, end = self.t, self.end
        out = _Lexed()
        command: List[_Item] = []
        pending_op: Optional[Tuple[int, str]] = None
        heredocs: List[Tuple[str, bool]] = []
        want_delimiter: Optional[bool] = None
        i = self.start
        while i < end:
            c = t[i]
            if c in _SPACE:
                i += 1
                continue
            if c == "\\" and t.startswith("\n", i + 1):
                i += 2
                continue
            if c == "\\" and t.startswith("\r\n", i + 1):
                i += 3
                continue
            if c == "\\" and self.docs:
                stray = _STRAY_CONTINUATION.match(t, i, end)
                if stray:
                    i = stray.end()
                    continue
            if c == "\n" or (c == "\r" and t.startswith("\n", i + 1)):
                after = i + (2 if c == "\r" else 1)
                if not self.folded:
                    pending_op = None
                    if command:
                        out.commands.append(command)
                        command = []
                    if heredocs:
                        after = self._heredoc_bodies(after, heredocs, out)
                        heredocs = []
                i = after
                continue
            if c == "\r":
                i += 1
                continue
            if c == "#":
                j = t.find("\n", i, end)
                j = end if j < 0 else j
                if j > i and t[j - 1] == "\r":
                    j -= 1
                out.comments.append((i, j))
                i = j
                continue
            if c in _OPERATOR_START and not (self.docs and _PLACEHOLDER.match(t, i, end)):
                op = next((op for op in _OPERATORS if t.startswith(op, i)), None)
                if op is not None:
                    if op in _REDIRECT:
                        pending_op = (i, op)
                        if op in ("<<", "<<-"):
                            want_delimiter = op == "<<-"
                    else:
                        pending_op = None
                        if command:
                            out.commands.append(command)
                            command = []
                    i += len(op)
                    continue
            word = self.word(i)
            if word.end == i:  # a character no rule takes: skip it
                i += 1
                continue
            if pending_op is not None:
                command.append(_Redirect(pending_op[0], word.end, pending_op[1], word))
                pending_op = None
                if want_delimiter is not None:
                    delimiter = word.value if word.value is not None else t[word.start : word.end]
                    heredocs.append((delimiter, want_delimiter))
                    want_delimiter = None
            else:
                command.append(word)
            i = word.end
        if command:
            out.commands.append(command)
        return out

    def _heredoc_bodies(self, i: int, heredocs: List[Tuple[str, bool]], out: _Lexed) -> int:
        t, end = self.t, self.end
        for delimiter, strip_tabs in heredocs:
            body = i
            while i < end:
                j = t.find("\n", i, end)
                nxt = end if j < 0 else j + 1
                line = t[i : (end if j < 0 else j)].rstrip("\r")
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    out.heredocs.append((body, i))
                    i = nxt
                    break
                i = nxt
            else:
                out.heredocs.append((body, end))
        return i

    def word(self, i: int) -> _Word:
        t, end = self.t, self.end
        start = i
        parts: List[Tuple[bool, str]] = []  # (is_expansion, text)
        inner: List[Tuple[int, int]] = []
        closed = True
        while i < end:
            c = t[i]
            if c == "<" and self.docs:
                placeholder = _PLACEHOLDER.match(t, i, end)
                if placeholder:
                    parts.append((False, placeholder.group()))
                    i = placeholder.end()
                    continue
            if c in _SPACE or c in "\r\n" or c in ";&|()<>":
                break
            if c == "\\":
                if i + 1 >= end:
                    parts.append((False, "\\"))
                    i += 1
                elif t.startswith(("\n", "\r\n"), i + 1):
                    break
                else:
                    parts.append((False, t[i + 1]))
                    i += 2
            elif c == "'":
                j = t.find("'", i + 1, end)
                close = end if j < 0 else j
                closed = closed and j >= 0
                parts.append((False, t[i + 1 : close]))
                inner.append((i + 1, close))
                i = end if j < 0 else j + 1
            elif c == '"':
                j, expands, literal = self._dquote(i)
                ends = t[j - 1 : j] == '"' and j - 1 > i
                closed = closed and ends
                inner.append((i + 1, j - 1 if ends else j))
                parts.append((True, t[i:j]) if expands else (False, literal))
                i = j
            elif c == "$":
                j = self._dollar(i)
                if j == i + 1:
                    parts.append((False, "$"))
                else:
                    if t.startswith(("$(", "${"), i):
                        ends = t[j - 1] in ")}" and j - 1 > i + 1
                        inner.append((i + 2, j - 1 if ends else j))
                        closed = closed and ends
                    elif t.startswith("$'", i):
                        ends = t[j - 1] == "'" and j - 1 > i + 1
                        inner.append((i + 2, j - 1 if ends else j))
                        closed = closed and ends
                    parts.append((True, t[i:j]))
                i = j
            elif c == "`":
                j = self._backtick(i)
                ends = t[j - 1] == "`" and j - 1 > i
                closed = closed and ends
                inner.append((i + 1, j - 1 if ends else j))
                parts.append((True, t[i:j]))
                i = j
            else:
                parts.append((False, c))
                i += 1
        expansions = tuple(text for is_exp, text in parts if is_exp)
        literal_parts = [text for is_exp, text in parts if not is_exp]
        prefix: List[str] = []
        for is_exp, text in parts:
            if is_exp:
                break
            prefix.append(text)
        suffix: List[str] = []
        for is_exp, text in reversed(parts):
            if is_exp:
                break
            suffix.insert(0, text)
        return _Word(
            start,
            i,
            None if expansions else "".join(literal_parts),
            "".join(prefix),
            "".join(suffix),
            any(literal_parts),
            expansions,
            tuple(inner),
            closed=closed,
        )

    def _dquote(self, i: int) -> Tuple[int, bool, str]:
        """From an opening `"`: (index after the closing quote, holds an expansion, literal value)."""
        t, end = self.t, self.end
        j = i + 1
        literal: List[str] = []
        expands = False
        while j < end:
            c = t[j]
            if c == '"':
                return j + 1, expands, "".join(literal)
            if c == "\\" and j + 1 < end:
                nxt = t[j + 1]
                if nxt == "\n":
                    pass
                elif nxt in '$`"\\':
                    literal.append(nxt)
                else:
                    literal.append(c + nxt)
                j += 2
            elif c == "$":
                k = self._dollar(j)
                if k == j + 1:
                    literal.append("$")
                else:
                    expands = True
                j = k
            elif c == "`":
                j = self._backtick(j)
                expands = True
            else:
                literal.append(c)
                j += 1
        return end, expands, "".join(literal)

    def _dollar(self, i: int) -> int:
        """From a `$`: the index after the expansion, or i + 1 for a literal dollar."""
        t, end = self.t, self.end
        nxt = t[i + 1] if i + 1 < end else ""
        if nxt == "(":
            return self._balanced(i + 1, "(", ")")
        if nxt == "{":
            return self._balanced(i + 1, "{", "}")
        if nxt == "'":
            j = i + 2
            while j < end and t[j] != "'":
                j += 2 if t[j] == "\\" else 1
            return min(j + 1, end)
        if nxt.isdigit() or nxt in _SPECIAL_PARAMS:
            return i + 2
        if nxt.isalpha() or nxt == "_":
            j = i + 1
            while j < end and (t[j].isalnum() or t[j] == "_"):
                j += 1
            return j
        return i + 1

    def _balanced(self, i: int, opening: str, closing: str) -> int:
        t, end = self.t, self.end
        depth = 0
        j = i
        while j < end:
            c = t[j]
            if c == opening:
                depth += 1
            elif c == closing:
                depth -= 1
                if depth == 0:
                    return j + 1
            elif c == "\\":
                j += 2
                continue
            elif c == "'":
                k = t.find("'", j + 1, end)
                j = end if k < 0 else k + 1
                continue
            elif c == '"':
                j = self._dquote(j)[0]
                continue
            elif c == "`":
                j = self._backtick(j)
                continue
            j += 1
        return end

    def _backtick(self, i: int) -> int:
        t, end = self.t, self.end
        j = i + 1
        while j < end and t[j] != "`":
            j += 2 if t[j] == "\\" else 1
        return min(j + 1, end)
