"""YAML as PyYAML reads it: the scalars and lists that hold launch commands, at their exact spans.

`yaml.compose_all` gives the documents' nodes (each scalar's style, each list's flow style) with
start and end marks; `yaml.scan` gives each scalar's own start (a node's start mark is at its
anchor or tag, if it has one) and, between the tokens, where the comments are. Edits are still
made to the original text at those offsets, so every byte outside a rewritten command stays as it
was. Each scalar is read as its style holds it: plain and block scalars as the text they are
written in (they have no escapes), a quoted scalar as its value (escapes decoded, see
`yaml_quoted`). Each rewrite is read back with PyYAML before it is kept (`_YamlCut.keep`): one
that would not read as the same document with only the command rewritten is declined instead.

PyYAML is imported here, when a YAML file with a launcher in it is cut, not when the CLI starts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from migrator.launcher.command import _find_module
from migrator.launcher.lexer import _Item, _Word
from migrator.launcher.rules import LAUNCHER_UNSAFE
from migrator.launcher.scanner import _HAND_HINT, _LEGACY_MENTION, _MENTION, _Finding, _Scanner
from migrator.launcher.sequences import _apply_edits, _Edit, _LineSeq, _ListSeq, _Seq
from migrator.launcher.virtual import _scan_virtual
from migrator.launcher.yaml_quoted import _quoted_virtual

_Node = Any  # a yaml.Node: ScalarNode, SequenceNode or MappingNode (yaml is imported lazily)
_FLOW_SCALAR_STYLES = (None, "'", '"')
_ITEM_BEFORE = re.compile(r"[ \t]*-[ \t]+")  # a block sequence item alone on its line: `  - value`
_ITEM_AFTER = re.compile(r"[ \t]*(?:#[^\n]*)?\r?")  # ... and after it, blanks and maybe a comment


@dataclass
class _Tree:
    documents: List[_Node]
    scalar_starts: Dict[int, int] = field(default_factory=dict)  # a scalar token's end -> its start
    spans: List[Tuple[int, int]] = field(default_factory=list)  # every token's span, in order


def _read(source: str, *, tokens: bool = True) -> Optional[_Tree]:
    """The YAML in `source` as PyYAML reads it, or None when it cannot. `tokens`: also where each
    scalar starts (after any anchor or tag) and every token's span, from a scan of its own."""
    import yaml  # lazily: only a YAML file with a launcher in it pays for the import

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it: ten times faster
    try:
        documents = [d for d in yaml.compose_all(source, Loader=loader) if d is not None]
        scanned = list(yaml.scan(source, Loader=loader)) if tokens else []
    except Exception:  # the library must never fail a file: invalid YAML, templates, deep nesting ...
        return None
    starts = {t.end_mark.index: t.start_mark.index for t in scanned if isinstance(t, yaml.ScalarToken)}
    return _Tree(documents, starts, [(t.start_mark.index, t.end_mark.index) for t in scanned])


def _cut_yaml_tree(scanner: _Scanner, start: int, end: int) -> bool:
    """Cut text[start:end] as the YAML PyYAML reads; False (and nothing done) when it cannot read it."""
    region = start
    if scanner.text.startswith("\ufeff", start):
        start += 1  # libyaml does not count a byte order mark in its offsets; it is no part of the YAML
    tree = _read(scanner.text[start:end])
    if tree is None:
        return False
    scanner.regions.append((region, end, "in this YAML"))
    scanner.comments.extend((start + a, start + b) for a, b in _comments(scanner.text[start:end], tree.spans))
    cut = _YamlCut(scanner, start, end, tree)
    cut.walk()
    cut.keep()
    return True


def _style(node: _Node) -> Optional[str]:
    """A scalar's style: None (plain), `'`, `"`, `|` or `>` (libyaml says "" for plain)."""
    return node.style or None


def _comments(source: str, spans: Sequence[Tuple[int, int]]) -> Iterator[Tuple[int, int]]:
    """The comments: all that is not a token is blanks and comments, so a `#` between two tokens
    starts a comment, which runs to the end of its line."""
    at = 0
    for a, b in sorted(spans) + [(len(source), len(source))]:
        i = source.find("#", at, a)
        while i >= 0:
            eol = source.find("\n", i, a)
            eol = a if eol < 0 else eol
            yield i, eol - 1 if source[eol - 1 : eol] == "\r" else eol
            i = source.find("#", eol, a)
        at = max(at, b)


@dataclass
class _Unit:
    """One rewritten scalar or list: its edits and findings in the scanner, and what it must read back as."""

    node: _Node
    edits: range
    findings: range
    value: Optional[Callable[[str], bool]] = None  # a scalar: whether its new value is the one intended
    items: Optional[List[Tuple[int, Optional[str]]]] = None  # a list: the items kept, new value if replaced


@dataclass
class _YamlCut:
    scanner: _Scanner
    start: int
    end: int
    tree: _Tree
    units: List[_Unit] = field(default_factory=list)

    # ---- finding the commands

    def walk(self) -> None:
        """Every scalar and list of the documents once (aliases share their anchor's node), in order."""
        seen = set()
        stack = list(reversed(self.tree.documents))
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.id == "scalar":
                self.scalar(node)
            elif node.id == "sequence":
                module = self.sequence(node)
                stack.extend(reversed([item for n, item in enumerate(node.value) if n != module]))
            else:  # a mapping: its values hold commands, its keys do not
                stack.extend(reversed([value for _, value in node.value]))

    def span(self, node: _Node) -> Tuple[int, int]:
        """Where a scalar is written in the file, without its anchor or tag."""
        end = node.end_mark.index
        return self.start + self.tree.scalar_starts.get(end, node.start_mark.index), self.start + end

    def scalar(self, node: _Node) -> None:
        text = self.scanner.text
        a, b = self.span(node)
        if not _MENTION.search(text, a, b):
            return
        edits, findings = len(self.scanner.edits), len(self.scanner.findings)
        style = _style(node)
        if style in ("'", '"'):
            virtual = _quoted_virtual(text, a, b, node.value)
            if virtual is None:  # not decoded as PyYAML does: left alone, and reported as a leftover
                return
            new = _scan_virtual(self.scanner, virtual, lambda inner: inner.shell(0, len(inner.text)))
            value: Callable[[str], bool] = new.__eq__
        else:
            # Plain and block scalars have no escapes: their text is the value, but for indentation
            # and line folding, which the shell reads as blanks too (a `|` scalar keeps its newlines).
            lo, hi = (a, b) if style is None else self.block_content(a, b)
            if text[lo:hi].split() != node.value.split():
                return
            self.scanner.shell(lo, hi, folded=style != "|")
            value = _words_of(text, lo, hi, self.scanner.edits[edits:])
        self.record(node, edits, findings, value=value)

    def block_content(self, a: int, b: int) -> Tuple[int, int]:
        """The lines of a block scalar (text[a] is its `|` or `>`) after its header, trailing blanks aside."""
        text = self.scanner.text
        header_end = text.find("\n", a, b)
        if header_end < 0:
            return b, b
        comment = re.search(r"[ \t]#", text[a:header_end])
        if comment:
            self.scanner.comments.append((a + comment.start() + 1, header_end - (text[header_end - 1] == "\r")))
        hi = b
        while hi > header_end and text[hi - 1] in " \t\r\n":
            hi -= 1
        return header_end + 1, max(hi, header_end + 1)

    def sequence(self, node: _Node) -> Optional[int]:
        """A list of scalars that is a launch command: rewritten as a list. Returns its launcher's index."""
        if not node.value or any(i.id != "scalar" or _style(i) not in _FLOW_SCALAR_STYLES for i in node.value):
            return None
        words = [self.word(item) for item in node.value]
        module = _find_module(words)
        if module is None:
            return None
        lo, hi = self.start + node.start_mark.index, self.start + node.end_mark.index
        if any(not lo <= word.start <= word.end <= hi for word in words):
            self.decline(lo, words[module], "an item of this list is an alias: an edit would change its anchor")
            return module
        edits, findings = len(self.scanner.edits), len(self.scanner.findings)
        self.scanner.words(self.list_seq(words, node.flow_style), nested=False)
        self.record(node, edits, findings, items=_kept_items(words, self.scanner.edits[edits:]))
        return module

    def decline(self, offset: int, module: _Word, reason: str) -> None:
        """A list that is a launch command but is not rewritten: one DDP204 for its launcher."""
        mentions = [m.start() for m in _LEGACY_MENTION.finditer(self.scanner.text, module.start, module.end)]
        if not mentions:
            return
        self.scanner.accounted.update(mentions)
        if self.scanner.enabled(LAUNCHER_UNSAFE):
            message = f"launch left as it is: {reason}; {_HAND_HINT}"
            self.scanner.findings.append(_Finding(LAUNCHER_UNSAFE.code, offset, message, False))

    def word(self, node: _Node) -> _Word:
        a, b = self.span(node)
        content = (a + 1, b - 1) if _style(node) in ("'", '"') else (a, b)
        return _Word(a, b, node.value, node.value, node.value, True, (), (), content)

    def list_seq(self, words: List[_Word], flow: bool) -> _Seq:
        """A block list with one item to a line loses an item's whole line (comments between items stay);
        a flow list, or items sharing lines, lose the item and its separator."""
        lines = None if flow else _item_lines(self.scanner.text, words)
        items: List[_Item] = list(words)
        return _ListSeq(self.scanner.text, items) if lines is None else _LineSeq(self.scanner.text, items, lines)

    def record(self, node: _Node, edits: int, findings: int, **intended: Any) -> None:
        """What the scanner added for `node` since it had `edits` edits and `findings` findings."""
        scanner = self.scanner
        unit = _Unit(node, range(edits, len(scanner.edits)), range(findings, len(scanner.findings)), **intended)
        if unit.edits or unit.findings:
            self.units.append(unit)

    # ---- reading the rewrites back

    def keep(self) -> None:
        """Keep the rewrites that read back as intended, first all together, else each one alone;
        a rewrite that does not is dropped and declined (DDP204)."""
        changed = [u for u in self.units if u.edits]
        if not changed or self.reads_back(changed):
            return
        kept = [u for u in changed if self.reads_back([u])]
        if not self.reads_back(kept):
            kept = []
        dropped = [u for u in changed if u not in kept]
        self.drop(dropped)

    def reads_back(self, units: Sequence[_Unit]) -> bool:
        if not units:
            return True
        edits = [self.scanner.edits[n] for u in units for n in u.edits]
        shifted = [_Edit(e.start - self.start, e.end - self.start, e.new) for e in edits]
        tree = _read(_apply_edits(self.scanner.text[self.start : self.end], shifted), tokens=False)
        if tree is None or len(tree.documents) != len(self.tree.documents):
            return False
        return _same_documents(self.tree.documents, tree.documents, {id(u.node): u for u in units})

    def drop(self, units: Sequence[_Unit]) -> None:
        scanner = self.scanner
        edits = {n for u in units for n in u.edits}
        findings = {n for u in units for n in u.findings}
        offsets = [scanner.findings[u.findings[0]].offset if u.findings else self.span(u.node)[0] for u in units]
        scanner.edits[:] = [e for n, e in enumerate(scanner.edits) if n not in edits]
        scanner.findings[:] = [f for n, f in enumerate(scanner.findings) if n not in findings]
        if scanner.enabled(LAUNCHER_UNSAFE):
            message = f"launch left as it is: the rewritten YAML would not read back as the same document; {_HAND_HINT}"
            scanner.findings.extend(_Finding(LAUNCHER_UNSAFE.code, offset, message, False) for offset in offsets)


def _words_of(text: str, lo: int, hi: int, edits: Sequence[_Edit]) -> Callable[[str], bool]:
    """What a plain or block scalar text[lo:hi] must read back as after `edits`: a value of the same
    words (its indentation and line folding aside)."""
    shifted = [_Edit(e.start - lo, e.end - lo, e.new) for e in edits]
    words = _apply_edits(text[lo:hi], shifted).split()
    return lambda new: new.split() == words


def _item_lines(text: str, words: Sequence[_Word]) -> Optional[List[Tuple[int, int]]]:
    """Each item's lines (from its line's start to the next line's), when every item has its lines to itself."""
    lines = []
    for word in words:
        line_start = text.rfind("\n", 0, word.start) + 1
        eol = text.find("\n", word.end)
        eol = len(text) if eol < 0 else eol
        if not _ITEM_BEFORE.fullmatch(text, line_start, word.start) or not _ITEM_AFTER.fullmatch(text, word.end, eol):
            return None
        lines.append((line_start, min(eol + 1, len(text))))
    return lines


def _kept_items(words: Sequence[_Word], edits: Sequence[_Edit]) -> List[Tuple[int, Optional[str]]]:
    """The items a list keeps after `edits`: (index, new value when replaced)."""
    kept: List[Tuple[int, Optional[str]]] = []
    for index, word in enumerate(words):
        if any(not e.new and e.start <= word.start and word.end <= e.end for e in edits):
            continue
        kept.append((index, next((e.new for e in edits if (e.start, e.end) == word.content), None)))
    return kept


def _same_documents(old: Sequence[_Node], new: Sequence[_Node], units: Dict[int, _Unit]) -> bool:
    """Whether `new` is `old` node for node (kinds, tags, styles, keys and values), but for what the
    rewritten units say they become."""
    seen = set()
    stack = list(zip(old, new))
    while stack:
        a, b = stack.pop()
        if id(a) in seen:
            continue
        seen.add(id(a))
        if a.id != b.id or a.tag != b.tag:
            return False
        unit = units.get(id(a))
        if a.id == "scalar":
            if a.style != b.style or not (unit.value(b.value) if unit and unit.value else a.value == b.value):
                return False
        elif a.id == "sequence" and unit is not None and unit.items is not None:
            if len(unit.items) != len(b.value):
                return False
            for (index, replaced), item in zip(unit.items, b.value):
                if replaced is None:
                    stack.append((a.value[index], item))
                elif item.id != "scalar" or item.value != replaced:
                    return False
        elif len(a.value) != len(b.value):
            return False
        elif a.id == "sequence":
            stack.extend(zip(a.value, b.value))
        else:
            stack.extend((x, y) for pair_a, pair_b in zip(a.value, b.value) for x, y in zip(pair_a, pair_b))
    return True
