"""The scanner: collects the edits and findings for one text, fed code regions by each kind's cutter."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Set, Tuple

from migrator.launcher.command import _LEGACY, _find_module, _plan, _shown
from migrator.launcher.lexer import _Item, _Lexer, _Redirect, _Word
from migrator.launcher.rules import (
    _RULE_NAMES,
    DROP_LOCAL_RANK_ARG,
    DROP_USE_ENV,
    LAUNCH_TO_TORCHRUN,
    LAUNCHER_UNSAFE,
)
from migrator.launcher.sequences import _apply_edits, _Edit, _Seq, _TextSeq
from migrator.options import Options
from migrator.rule import Rule
from migrator.types import Change, Diagnostic, Result

# --------------------------------------------------------------------------- the scanner

_LEGACY_MENTION = re.compile(r"(?<!\.)torch\.distributed\.launch(?![\w.])")
_MENTION = re.compile(r"torch\.distributed\.(?:launch|run)(?![\w])|torch/distributed/launch\.py")

_HAND_HINT = "rewrite it by hand: torchrun ..., without --use_env, and no --local_rank for the script"


@dataclass(frozen=True)
class _Finding:
    code: str
    offset: int
    message: str
    change: bool


class _Scanner:
    """Collects the edits and findings for one text; each kind's cutter feeds it code regions."""

    def __init__(self, text: str, options: Optional[Options] = None) -> None:
        self.text = text
        self.options = options or Options()
        self.edits: List[_Edit] = []
        self.findings: List[_Finding] = []
        self.accounted: Set[int] = set()  # offsets of launcher mentions already dealt with
        self.regions: List[Tuple[int, int, str]] = []  # code regions: (start, end, what they are)
        self.comments: List[Tuple[int, int]] = []
        self.docs = False  # documentation (Markdown, reST): commands written for people (see _Lexer)

    def enabled(self, rule: Rule) -> bool:
        return self.options.enabled(rule.code, rule.name)

    # ---- shell text

    def shell(self, start: int, end: int, *, folded: bool = False, where: str = "", quiet: bool = False) -> None:
        """Rewrite the launch commands in the shell text text[start:end].

        `where` names a code region: a mention of the launcher left in it is a DDP204. `quiet`
        (inline code in prose) rewrites complete commands only and reports nothing it declines.
        """
        if start >= end:
            return
        if where:
            self.regions.append((start, end, where))
        if not _MENTION.search(self.text, start, end):
            return
        lexed = _Lexer(self.text, start, end, folded, self.docs).lex()
        self.comments.extend(lexed.comments)
        for command in lexed.commands:
            module = _find_module(command)
            if module is not None:
                self._command(command, module, _TextSeq(self.text, start, end, command, folded), quiet=quiet)
            skip = range(module - 1, module + 1) if module is not None else range(0)
            for index, item in enumerate(command):
                word = item.target if isinstance(item, _Redirect) else item
                if word is None or index in skip:
                    continue
                for a, b in word.inner:
                    self.shell(a, b, quiet=quiet)
        for a, b in lexed.heredocs:
            self.shell(a, b, quiet=quiet)

    # ---- one command, in text or in a list

    def _command(self, items: Sequence[_Item], module: int, seq: "_Seq", *, quiet: bool = False) -> None:
        word = items[module]
        assert isinstance(word, _Word)
        for match in _LEGACY_MENTION.finditer(self.text, word.start, word.end):
            self.accounted.add(match.start())
        plan = _plan(items, module, self.text)
        if plan.legacy and not self.enabled(LAUNCH_TO_TORCHRUN):
            return
        if plan.problem is None and plan.legacy and not self.enabled(DROP_USE_ENV):
            if any(code == DROP_USE_ENV.code for _, _, code, _ in plan.drops):
                plan.problem = f"--use_env is kept ({DROP_USE_ENV.code} is not selected) and torchrun rejects it"
        if plan.problem is not None:
            if plan.legacy and not quiet and self.enabled(LAUNCHER_UNSAFE):
                message = f"launch left as it is: {plan.problem}; {_HAND_HINT}"
                self.findings.append(_Finding(LAUNCHER_UNSAFE.code, word.start, message, False))
            return
        interpreter = items[plan.interpreter]
        drops = [d for d in plan.drops if self.options.enabled(d[2], _RULE_NAMES[d[2]])]
        if plan.to_torchrun:
            shown = _shown(items, plan.interpreter, module, self.text)
            self.edits.extend(seq.replace(plan.interpreter, "torchrun"))
            drops.append((plan.interpreter + 1, module, "", ""))
            self._change(LAUNCH_TO_TORCHRUN, interpreter.start, f"`{_one_line(shown)}` becomes `torchrun`")
        elif plan.rename_module:
            raw = self.text[word.start : word.end]
            at = raw.find(_LEGACY)
            if at < 0:
                kept = self.text[interpreter.start : interpreter.end]
                message = (
                    f"launch left as it is: the launcher is named by its path ({raw}) after `{kept}`, which is not "
                    "plain python; run the torchrun of that environment instead"
                )
                self.findings.append(_Finding(LAUNCHER_UNSAFE.code, word.start, message, False))
                return
            start = word.start + at + len("torch.distributed.")
            self.edits.append(_Edit(start, start + len("launch"), "run"))
            kept = self.text[interpreter.start : interpreter.end]
            self._change(
                LAUNCH_TO_TORCHRUN, word.start, f"torch.distributed.launch becomes torch.distributed.run (keeps {kept})"
            )
        for first, last, code, shown in drops:
            if code == DROP_USE_ENV.code:
                self._change(DROP_USE_ENV, items[first].start, f"`{shown}` dropped: torchrun always sets LOCAL_RANK")
            elif code == DROP_LOCAL_RANK_ARG.code:
                self._change(
                    DROP_LOCAL_RANK_ARG,
                    items[first].start,
                    f"`{_one_line(shown)}` dropped: torchrun sets LOCAL_RANK for each worker",
                )
        self.edits.extend(seq.remove_groups([(first, last) for first, last, _, _ in drops]))

    def _change(self, rule: Rule, offset: int, message: str) -> None:
        self.findings.append(_Finding(rule.code, offset, message, True))

    # ---- lists of words: Docker exec form, YAML sequences

    def words(self, seq: "_Seq", *, nested: bool = True) -> None:
        """Rewrite the launch command a list of words is. `nested`: scan each other element's text as
        shell too (`["sh", "-c", "python -m ..."]`); the YAML cutter scans its elements itself, each as
        a scalar of its own style."""
        module = _find_module(seq.items)
        if module is not None:
            self._command(seq.items, module, seq)
        if not nested:
            return
        for index, item in enumerate(seq.items):
            if isinstance(item, _Word) and item.content is not None and index != module and not seq.escaped(item):
                self.shell(*item.content)

    # ---- what is left

    def report_leftovers(self) -> None:
        """Every mention of torch.distributed.launch in code that no command accounted for is a DDP204."""
        if not self.enabled(LAUNCHER_UNSAFE):
            return
        seen: Set[int] = set()
        for start, end, where in self.regions:
            for match in _LEGACY_MENTION.finditer(self.text, start, end):
                offset = match.start()
                if offset in self.accounted or offset in seen:
                    continue
                seen.add(offset)
                if any(a <= offset < b for a, b in self.comments):
                    message = "torch.distributed.launch in a comment is not rewritten; update it by hand"
                else:
                    message = f"torch.distributed.launch {where} is not a command ddp-migrate can rewrite; {_HAND_HINT}"
                self.findings.append(_Finding(LAUNCHER_UNSAFE.code, offset, message, False))

    def apply(self) -> str:
        return _apply_edits(self.text, self.edits)


def _one_line(text: str) -> str:
    return " ".join(text.replace("\\\r\n", " ").replace("\\\n", " ").split())


# --------------------------------------------------------------------------- lines


def _lines(text: str, start: int = 0, end: Optional[int] = None) -> Iterator[Tuple[int, int, int]]:
    """(line start, content end without the newline, next line start) for each line in text[start:end]."""
    end = len(text) if end is None else end
    i = start
    while i < end:
        j = text.find("\n", i, end)
        if j < 0:
            yield i, end, end
            return
        content_end = j - 1 if j > i and text[j - 1] == "\r" else j
        yield i, content_end, j + 1
        i = j + 1


def _logical_lines(
    text: str, start: int = 0, end: Optional[int] = None, escape: str = "\\"
) -> Iterator[Tuple[int, int]]:
    """(start, end) of lines joined by a trailing escape character (Make, Dockerfile)."""
    begin: Optional[int] = None
    for line_start, content_end, _ in _lines(text, start, end):
        if begin is None:
            begin = line_start
        if content_end > line_start and text[content_end - 1] == escape:
            continue
        yield begin, content_end
        begin = None
    if begin is not None:
        yield begin, (len(text) if end is None else end)


# --------------------------------------------------------------------------- findings to a Result


def _result(scanner: _Scanner) -> Result:
    text = scanner.text
    changes: List[Change] = []
    diagnostics: List[Diagnostic] = []
    for finding in sorted(set(scanner.findings), key=lambda f: (f.offset, f.code)):
        line = text.count("\n", 0, finding.offset) + 1
        col = finding.offset - (text.rfind("\n", 0, finding.offset) + 1) + 1
        if finding.change:
            changes.append(Change(finding.code, line, col, finding.message))
        else:
            diagnostics.append(Diagnostic(finding.code, line, col, finding.message))
    return Result(scanner.apply(), tuple(changes), tuple(diagnostics), original=text)
