"""Cutting code files into code regions: shell scripts, Makefiles, Dockerfiles and YAML.

Each cutter feeds a `_Scanner` the shell text it finds (the whole of a shell script; recipe lines
and variables of a Makefile; RUN/CMD/ENTRYPOINT of a Dockerfile; scalars and lists of YAML, found
by PyYAML in yaml_tree, or line by line here where PyYAML cannot read the file).
"""
from __future__ import annotations

import json
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from migrator.launcher.command import _find_module
from migrator.launcher.lexer import _Item, _Word
from migrator.launcher.scanner import _lines, _logical_lines, _Scanner
from migrator.launcher.sequences import _LineSeq, _ListSeq
from migrator.launcher.yaml_tree import _cut_yaml_tree

# --------------------------------------------------------------------------- kinds: cutting text into code regions


def _cut_shell(scanner: _Scanner, start: int, end: int) -> None:
    scanner.shell(start, end, where="in this script")


_MAKE_ASSIGNMENT = re.compile(
    r"[ \t]*(?:(?:export|override|private)[ \t]+)*[A-Za-z_][\w.-]*[ \t]*(?:::?=|:::=|[+?!]?=)[ \t]*"
)


def _cut_make(scanner: _Scanner, start: int, end: int) -> None:
    t = scanner.text
    for a, b in _logical_lines(t, start, end):
        if t.startswith("\t", a):
            i = a + 1
            while i < b and t[i] in "@+- \t":
                i += 1
            scanner.shell(i, b, where="in this recipe")
            continue
        match = _MAKE_ASSIGNMENT.match(t, a, b)
        if match:
            scanner.shell(match.end(), b, where="in this variable")
        else:
            scanner.shell(a, b, where="in this Makefile line")


_DOCKER_INSTRUCTION = re.compile(r"[ \t]*(RUN|CMD|ENTRYPOINT)(?=[ \t\\]|$)", re.IGNORECASE)
_DOCKER_ESCAPE = re.compile(r"#[ \t]*escape[ \t]*=[ \t]*([\\`])", re.IGNORECASE)


def _cut_docker(scanner: _Scanner, start: int, end: int) -> None:
    t = scanner.text
    escape = "\\"
    for line_start, content_end, _ in _lines(t, start, end):
        match = _DOCKER_ESCAPE.match(t, line_start, content_end)
        if match:
            escape = match.group(1)
        if not t.startswith("#", line_start):
            break
    scanner.regions.append((start, end, "in this Dockerfile"))
    for a, b in _logical_lines(t, start, end, escape):
        stripped = t[a:b].lstrip()
        if stripped.startswith("#"):
            scanner.comments.append((a, b))
            continue
        match = _DOCKER_INSTRUCTION.match(t, a, b)
        if not match:
            continue
        i = match.end()
        while i < b and t[i] in " \t":
            i += 1
        if t.startswith("[", i):
            parsed = _parse_flow_list(t, i, b)
            if parsed is not None:
                scanner.words(_ListSeq(t, parsed[0]))
                continue
        if escape == "\\":
            scanner.shell(i, b)


# ---- YAML

_YAML_BLOCK_SCALAR = re.compile(r"(?:[^#\n]*?[:-][ \t]+)?([|>])[-+0-9]*[ \t]*(?:#.*)?$")
_YAML_KEY_LIST = re.compile(r"[ \t]*(?:-[ \t]+)?[\w.\"'-]+[ \t]*:[ \t]*(?=\[)")
_YAML_ITEM = re.compile(r"([ \t]*)-[ \t]+(?=\S)")


def _indent(text: str, a: int, b: int) -> int:
    i = a
    while i < b and text[i] in " \t":
        i += 1
    return i - a


def _indented_block_end(t: str, lines: Sequence[Tuple[int, int, int]], m: int, parent: int) -> int:
    """The index of the first line from `m` on that is not blank and not indented deeper than `parent`."""
    while m < len(lines) and (t[lines[m][0] : lines[m][1]].strip() == "" or _indent(t, *lines[m][:2]) > parent):
        m += 1
    return m


def _cut_yaml(scanner: _Scanner, start: int, end: int) -> None:
    """YAML as PyYAML reads it (yaml_tree); where PyYAML cannot read it (invalid YAML, a Helm template
    with `{{ }}` outside strings, tabs in indentation), line by line as written below."""
    if not _cut_yaml_tree(scanner, start, end):
        _cut_yaml_lines(scanner, start, end)


def _cut_yaml_lines(scanner: _Scanner, start: int, end: int) -> None:
    """The hand-written cutter, for YAML the library cannot read: block scalars by indentation, flow
    lists, runs of `- item` lines, and every other line as shell."""
    t = scanner.text
    scanner.regions.append((start, end, "in this YAML"))
    lines = list(_lines(t, start, end))
    n = 0
    while n < len(lines):
        a, b, nxt = lines[n]
        content = t[a:b]
        stripped = content.strip()
        if not stripped or stripped.startswith("#"):
            if stripped:
                scanner.comments.append((a, b))
            n += 1
            continue
        parent = _indent(t, a, b)
        block = _YAML_BLOCK_SCALAR.match(content.lstrip())
        if block and (":" in content or stripped.startswith("-")):
            m = _indented_block_end(t, lines, n + 1, parent)
            if m > n + 1:
                scanner.shell(lines[n + 1][0], lines[m - 1][1], folded=block.group(1) == ">")
            n = m
            continue
        key_list = _YAML_KEY_LIST.match(t, a, b)
        if key_list:
            parsed = _parse_flow_list(t, key_list.end(), end)
            if parsed is not None:
                items, list_end = parsed
                scanner.words(_ListSeq(t, items))
                while n < len(lines) and lines[n][0] < list_end:
                    n += 1
                continue
        item = _YAML_ITEM.match(t, a, b)
        if item:
            run = _yaml_item_run(t, lines, n, len(item.group(1)))
            if len(run) > 1:
                words = [w for w, _ in run]
                if _find_module(words) is not None:
                    scanner.words(_LineSeq(t, words, [span for _, span in run]))
                    n += len(run)
                    continue
        scanner.shell(a, b)
        n += 1


def _yaml_item_run(t: str, lines, n: int, indent: int) -> List[Tuple[_Word, Tuple[int, int]]]:
    """Consecutive one-scalar `- item` lines at one indentation, as words with their line spans."""
    run: List[Tuple[_Word, Tuple[int, int]]] = []
    while n < len(lines):
        a, b, nxt = lines[n]
        item = _YAML_ITEM.match(t, a, b)
        if not item or len(item.group(1)) != indent:
            break
        scalar = _yaml_scalar(t, item.end(), b)
        if scalar is None:
            break
        run.append((scalar, (a, nxt)))
        n += 1
    return run


def _yaml_scalar(t: str, a: int, b: int) -> Optional[_Word]:
    """One scalar filling t[a:b] (an optional trailing comment aside): quoted or plain, no spaces."""
    end = b
    comment = re.search(r"[ \t]+#", t[a:b])
    if comment:
        end = a + comment.start()
    raw = t[a:end].rstrip()
    end = a + len(raw)
    if not raw:
        return None
    if raw[0] in "\"'" and len(raw) >= 2 and raw[-1] == raw[0]:
        inner = raw[1:-1]
        value = inner.replace("''", "'") if raw[0] == "'" else _json_unescape(inner)
        if value is None:
            return None
        return _Word(a, end, value, value, value, True, (), (), (a + 1, end - 1))
    if any(c in raw for c in " \t[]{},\"'") or raw.startswith(("&", "*", "!", "|", ">")):
        return None
    return _Word(a, end, raw, raw, raw, True, (), (), (a, end))


def _json_unescape(inner: str) -> Optional[str]:
    try:
        value = json.loads(f'"{inner}"')
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _parse_flow_list(t: str, i: int, end: int) -> Optional[Tuple[List[_Item], int]]:
    """A `[...]` list of scalars starting at t[i] (JSON or YAML flow style): (elements, end)."""
    if not t.startswith("[", i):
        return None
    items: List[_Item] = []
    j = i + 1
    while j < end:
        while j < end and t[j] in " \t\r\n":
            j += 1
        if j >= end:
            return None
        c = t[j]
        if c == "]":
            return items, j + 1
        if c == ",":
            j += 1
            continue
        if c == "#":
            k = t.find("\n", j, end)
            j = end if k < 0 else k
            continue
        if c in "\"'":
            k = j + 1
            while k < end:
                if c == '"' and t[k] == "\\":
                    k += 2
                    continue
                if t[k] == c:
                    if c == "'" and t.startswith("''", k):
                        k += 2
                        continue
                    break
                k += 1
            if k >= end:
                return None
            word = _yaml_scalar(t, j, k + 1)
        else:
            k = j
            while k < end and t[k] not in ",]\r\n":
                k += 1
            raw_end = j + len(t[j:k].rstrip())
            word = _yaml_scalar(t, j, raw_end)
            k = raw_end - 1
        if word is None:
            return None
        items.append(word)
        j = k + 1
    return None


#: The cutters of code files, by kind; Markdown and reST (docs.py) use them for code blocks in these languages.
_CODE_CUTTERS: Dict[str, Callable[[_Scanner, int, int], None]] = {
    "shell": _cut_shell,
    "make": _cut_make,
    "docker": _cut_docker,
    "yaml": _cut_yaml,
}
