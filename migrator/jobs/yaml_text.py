"""A small deterministic YAML writer for the manifests ddp-migrate writes.

Block style, keys in the order given, two-space indent, lists under their key. A string is
written plain when YAML (1.1, as PyYAML reads it, and 1.2) can only read it back as that same
string, and double-quoted with escapes otherwise, so `yaml.safe_load(dump(data)) == data` for
dicts, lists, strings, ints, bools and None. Written here rather than with PyYAML so that the
tool needs no YAML library at run time and the output does not change with one's version.
"""
from __future__ import annotations

import re
from typing import Any, Iterator, List, Mapping, Sequence

#: Plain scalars that are strings in every YAML reader: a letter, `_` or `/` first (or `-` and
#: then a letter or `-`, as in `--nnodes=2`), then word characters, `.`, `/`, `=` and `-`.
#: Numbers, `.inf`, `~`, timestamps and `key: value` cannot match.
_PLAIN = re.compile(r"(?:[A-Za-z_/]|-[A-Za-z_-])[A-Za-z0-9_./=-]*")
#: YAML 1.1's booleans and null, which PyYAML reads as such whatever their case.
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def dump(data: Mapping[str, Any]) -> str:
    """`data` as a YAML document (a mapping at the top), ending in a newline."""
    return "".join(line + "\n" for line in _mapping(data, 0))


def _mapping(data: Mapping[str, Any], indent: int) -> Iterator[str]:
    pad = " " * indent
    for key, value in data.items():
        if _nested(value):
            yield f"{pad}{scalar(key)}:"
            yield from _block(value, indent + 2)
        else:
            yield f"{pad}{scalar(key)}: {scalar(value)}"


def _sequence(items: Sequence[Any], indent: int) -> Iterator[str]:
    pad = " " * indent
    for item in items:
        if _nested(item):
            first, *rest = _block(item, indent + 2)
            yield f"{pad}- {first.lstrip()}"  # the item's first line shares the dash's line
            yield from rest
        else:
            yield f"{pad}- {scalar(item)}"


def _block(value: Any, indent: int) -> List[str]:
    return list(_mapping(value, indent) if isinstance(value, Mapping) else _sequence(value, indent))


def _nested(value: Any) -> bool:
    """A non-empty mapping or list, written as a block under its key (empty ones as `{}`, `[]`)."""
    return isinstance(value, (Mapping, list, tuple)) and len(value) > 0


def scalar(value: Any) -> str:
    """One value on its line: a plain or double-quoted string, a number, true/false, null, {} or []."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    if not isinstance(value, str):
        raise TypeError(f"cannot write {type(value).__name__} as YAML")
    if _PLAIN.fullmatch(value) and value.lower() not in _RESERVED:
        return value
    return _quoted(value)


def _quoted(text: str) -> str:
    """A double-quoted scalar: printable ASCII as it is, everything else as a \\x, \\u or \\U escape
    (so a line break, a tab or a non-ASCII letter survives any editor and any reader)."""
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'
