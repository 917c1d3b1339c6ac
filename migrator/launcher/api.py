"""The launcher's entry points: a file's text of one kind, one argv list, or one command line."""
from __future__ import annotations

import re

from typing import Callable, Dict, List, Optional, Sequence

from migrator.launcher.command import _LEGACY, _find_module, _plan
from migrator.launcher.docs import _cut_markdown, _cut_rst
from migrator.launcher.formats import _CODE_CUTTERS
from migrator.launcher.kinds import KINDS
from migrator.launcher.lexer import _Item, _Word
from migrator.launcher.notebook import _notebook
from migrator.launcher.scanner import _result, _Scanner
from migrator.launcher.sequences import _ArgvSeq, _Edit
from migrator.options import Options
from migrator.types import Result

_CUTTERS: Dict[str, Callable[[_Scanner, int, int], None]] = {
    **_CODE_CUTTERS,
    "markdown": _cut_markdown,
    "rst": _cut_rst,
}


# --------------------------------------------------------------------------- public API


def migrate_launcher(text: str, kind: str, options: Optional[Options] = None) -> Result:
    """Rewrite the launch commands in `text`, a file of `kind` (one of KINDS).

    Returns the new text with one Change per rewrite (DDP201-203) and one Diagnostic per launch it
    declined (DDP204), located in `text` (1-based line and column). Never raises for "nothing to
    do"; raises ValueError for an unknown kind.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown launcher kind {kind!r}; expected one of {', '.join(KINDS)}")
    scanner = _Scanner(text, options)
    if "torch.distributed." in text or "torch/distributed/launch" in text:
        if kind == "notebook":
            _notebook(scanner)
        else:
            _CUTTERS[kind](scanner, 0, len(text))
            scanner.report_leftovers()
    return _result(scanner)


def rewrite_command_words(words: Sequence[str]) -> Optional[List[str]]:
    """Rewrite one launch command given as an argv list; None when there is nothing to rewrite.

    `["python", "-m", "torch.distributed.launch", "--nproc_per_node", "2", "train.py", "--local_rank=0"]`
    becomes `["torchrun", "--nproc_per_node", "2", "train.py"]`. Also None for a launch that cannot
    be rewritten safely (see `launch_problem`).
    """
    items: List[_Item] = [_Word(n, n + 1, word, word, word, True) for n, word in enumerate(words)]
    module = _find_module(items)
    if module is None:
        return None
    seq = _ArgvSeq("", items)
    plan = _plan(items, module, _ArgvText(words))
    if plan.problem is not None:
        return None
    edits: List[_Edit] = []
    drops = [(first, last) for first, last, _, _ in plan.drops]
    if plan.to_torchrun:
        edits.extend(seq.replace(plan.interpreter, "torchrun"))
        drops.append((plan.interpreter + 1, module))
    elif plan.rename_module:
        edits.extend(seq.replace(module, "torch.distributed.run"))
    edits.extend(seq.remove_groups(drops))
    if not edits:
        return None
    out = list(words)
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        out[edit.start : edit.end] = [edit.new] if edit.new else []
    return out


def launch_problem(words: Sequence[str]) -> Optional[str]:
    """Why the launch command in `words` cannot be rewritten safely (DDP204's reason), or None."""
    items: List[_Item] = [_Word(n, n + 1, word, word, word, True) for n, word in enumerate(words)]
    module = _find_module(items)
    if module is None or items[module].value != _LEGACY:  # type: ignore[union-attr]
        return None
    return _plan(items, module, _ArgvText(words)).problem


class _ArgvText:
    """Lets `_plan` show argv elements the way it shows text spans (`text[start:end]`)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)

    def __getitem__(self, span: slice) -> str:
        return " ".join(self.words[span.start : span.stop])


def rewrite_command_string(command: str) -> Optional[str]:
    """Rewrite the launch command(s) in one shell command line; None when nothing changes or it is unsafe."""
    result = migrate_launcher(command, "shell")
    if not result.changed or result.diagnostics:
        return None
    return result.code


# Where a command starts in a line of documentation: `Usage: python -m torch.distributed.launch ...`.
_DOC_COMMAND = re.compile(r"(?:\S*/)?python[\d.]*(?:[ \t]+-\S+)*[ \t]+-m[ \t]+torch\.distributed\.launch\b")


def rewrite_documented_command(line: str) -> Optional[str]:
    """A line of documentation (a comment's text) with a launch command in it, rewritten as docs are:
    the prose before the command stays, placeholders (`<ngpus>`) are words; None when nothing
    changes or the command cannot be rewritten safely (it is documentation: left, never reported)."""
    match = _DOC_COMMAND.search(line)
    if match is None:
        return None
    scanner = _Scanner(line[match.start():])
    scanner.docs = True
    scanner.shell(0, len(scanner.text))
    result = _result(scanner)
    if not result.changed or result.diagnostics:
        return None
    return line[: match.start()] + result.code
