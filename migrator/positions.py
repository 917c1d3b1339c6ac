"""Where nodes start in the source, computed only for the nodes a migration reports (LazyPositions)."""
from __future__ import annotations

import bisect
from contextlib import contextmanager
from typing import Dict, List, Optional, Tuple

import libcst as cst
from libcst._nodes.internal import CodegenState


class _OffsetState(CodegenState):
    """Code generation that notes where nodes start, as character offsets only.

    libcst's PositionProvider tracks line and column for every token and node: about 0.3 s on
    a 1,000-line script, for the handful of places a migration reports. Offsets cost a length
    addition per token; lines and columns are derived for the nodes actually asked about.
    """

    def __init__(self, module: cst.Module) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.starts: Dict[cst.CSTNode, int] = {}

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    @contextmanager
    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        start = self.offset
        try:
            yield
        finally:
            self.starts[node] = self.starts[start_node] if start_node is not None else start


class LazyPositions:
    """Where nodes start (1-based line, 0-based column), computed on first use.

    `source`, the text the module was parsed from, makes most answers cheap: an expression whose
    code occurs exactly once in it starts where it occurs. Anything else generates the module's
    code once, noting every node's offset (a few tenths of a second on a large file)."""

    def __init__(self, module: cst.Module, source: Optional[str] = None) -> None:
        self._module = module
        self._source = source
        self._state: Optional[_OffsetState] = None
        self._newlines: List[int] = []

    def start(self, node: cst.CSTNode) -> Optional[Tuple[int, int]]:
        offset = self._unique_offset(node)
        if offset is None:
            if self._state is None:
                self._state = _OffsetState(self._module)
                self._module._codegen(self._state)
                code = "".join(self._state.tokens)
                self._newlines = [i for i, ch in enumerate(code) if ch == "\n"]
            offset = self._state.starts.get(node)
        if offset is None:
            return None
        if not self._newlines and self._source is not None and self._state is None:
            self._newlines = [i for i, ch in enumerate(self._source) if ch == "\n"]
        line = bisect.bisect_left(self._newlines, offset)
        line_start = self._newlines[line - 1] + 1 if line else 0
        return line + 1, offset - line_start

    def _unique_offset(self, node: cst.CSTNode) -> Optional[int]:
        """The offset of an unparenthesised expression whose code is found once in the source."""
        if self._source is None or not isinstance(node, cst.BaseExpression) or getattr(node, "lpar", ()):
            return None
        snippet = self._module.code_for_node(node)
        if len(snippet) < 4:  # `x`, `0`: found everywhere, and cheap to miss
            return None
        first = self._source.find(snippet)
        if first < 0 or self._source.find(snippet, first + 1) >= 0:
            return None
        return first
