"""Cutting documentation into code regions: Markdown and reST code blocks, command lines and inline code.

Markdown's code blocks are found by markdown-it (markdown_blocks); reST's literal blocks and
directives by their indentation, here (markdown-it knows no reST).
"""
from __future__ import annotations

import difflib
import re
from contextlib import contextmanager
from typing import Sequence, Tuple

from migrator.launcher.formats import _CODE_CUTTERS, _indent, _indented_block_end
from migrator.launcher.markdown_blocks import _code_blocks, _CodeBlock, _markdown_lines, _quoted_code
from migrator.launcher.scanner import _lines, _Scanner
from migrator.launcher.virtual import _scan_virtual

# ---- Markdown and reST

_SHELL_LANGUAGES = frozenset(
    "bash sh shell zsh ksh fish console shell-session shellsession session terminal sbatch slurm text txt none "
    "plain plaintext powershell ps1 pwsh ps psm1 posh cmd bat batch dos doscon bash-session sh-session "
    "shellscript shell-script".split()
)
_LANGUAGE_KINDS = {
    "yaml": "yaml", "yml": "yaml", "dockerfile": "docker", "docker": "docker", "make": "make", "makefile": "make"
}  # fmt: skip
_COMMAND_LINE = re.compile(  # `[$ ][VAR=value ...] python|path/python|$PYTHON [-opts] -m torch.distributed.launch`
    r"[ \t]*(?:[$#>][ \t]+)?(?=(?:[A-Za-z_]\w*=\S*[ \t]+)*(?:\S*/)?(?:python[\d.]*|\$\S+)(?:[ \t]+-\S+)*"
    r"[ \t]+-m[ \t]+torch\.distributed\.(?:launch|run)\b)"
)
_INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_INLINE_COMMAND = re.compile(r"-m[ \t]+torch\.distributed\.(?:launch|run)[ \t]+\S")  # more than a mention


def _cut_block(scanner: _Scanner, start: int, end: int, language: str, where: str) -> None:
    language = language.lower().lstrip(".")
    kind = "shell" if _is_shell_language(language) else _LANGUAGE_KINDS.get(language)
    if kind is None:
        scanner.regions.append((start, end, f"in this {language} block"))
    elif kind == "shell":
        _cut_shell_block(scanner, start, end, where)
    else:
        _CODE_CUTTERS[kind](scanner, start, end)


def _is_shell_language(language: str) -> bool:
    """A fence language that holds commands: the usual names, and near misses (`shel`, `bash2`)."""
    if not language or language in _SHELL_LANGUAGES:
        return True
    if language in _LANGUAGE_KINDS or len(language) < 3:
        return False
    return bool(difflib.get_close_matches(language, _SHELL_LANGUAGES, n=1, cutoff=0.8))


# A prompt before a command in a session transcript: `$ `, `> `, `% `, `PS> `, `PS C:\src> `, `(venv) $ `.
_PROMPT = re.compile(r"[ \t]*(?:\([\w.-]+\)[ \t]*)?(?:PS(?:[ \t][^>\n]*)?>|[$>%])[ \t]+")


def _cut_shell_block(scanner: _Scanner, start: int, end: int, where: str) -> None:
    """A block of commands. In a session transcript (prompted lines) each prompted command, with its
    continuation lines, is a command of its own; the other lines are the output it printed."""
    t = scanner.text
    lines = list(_lines(t, start, end))
    if not any(_PROMPT.match(t, a, b) for a, b, _ in lines):
        scanner.shell(start, end, where=where)
        return
    scanner.regions.append((start, end, where))
    n = 0
    while n < len(lines):
        a, b, _ = lines[n]
        prompt = _PROMPT.match(t, a, b)
        used = 1
        if prompt:
            c_end = b
            while _continues(t[a:c_end] if used == 1 else t[lines[n + used - 1][0]:c_end]) and n + used < len(lines):
                c_end = lines[n + used][1]
                used += 1
            scanner.shell(prompt.end(), c_end)
        n += used


def _continues(line: str) -> bool:
    return line.rstrip(" \t\r").endswith("\\")


def _cut_prose_line(scanner: _Scanner, a: int, b: int, nxt_lines: Sequence[Tuple[int, int, int]]) -> int:
    """A prose line: inline code spans with a launch, or a line that is a command. Returns lines used."""
    t = scanner.text
    if "torch.distributed." not in t[a:b]:
        return 1
    command = _COMMAND_LINE.match(t, a, b)
    if command:
        used = 1
        c_end = b
        while c_end > a and t[c_end - 1] == "\\" and used < len(nxt_lines):
            c_end = nxt_lines[used][1]
            used += 1
        scanner.shell(command.end(), c_end, where="in this command line")
        return used
    for match in _INLINE_CODE.finditer(t, a, b):
        if _INLINE_COMMAND.search(match.group(2)):
            scanner.shell(match.start(2), match.end(2), quiet=True)
    return 1


def _cut_markdown(scanner: _Scanner, start: int, end: int) -> None:
    with _documentation(scanner):
        _cut_markdown_lines(scanner, start, end)


def _cut_markdown_lines(scanner: _Scanner, start: int, end: int) -> None:
    """Code blocks where markdown-it finds them; every other line is prose."""
    lines = _markdown_lines(scanner.text, start, end)
    at = 0
    for block in _code_blocks(scanner.text[start:end]):
        _cut_prose(scanner, lines[at : block.start])
        if not _cut_code_block(scanner, lines, block):
            _cut_prose(scanner, lines[block.start : block.end])
        at = max(at, block.end)
    _cut_prose(scanner, lines[at:])


def _cut_prose(scanner: _Scanner, lines: Sequence[Tuple[int, int, int]]) -> None:
    n = 0
    while n < len(lines):
        n += _cut_prose_line(scanner, lines[n][0], lines[n][1], lines[n:])


def _cut_code_block(scanner: _Scanner, lines: Sequence[Tuple[int, int, int]], block: _CodeBlock) -> bool:
    """Cut a code block as its language says. In a blockquote, its code is read without the `>`
    markers (a virtual text); False when that cannot be done (the block is then read as prose)."""
    if not block.body:
        return True
    language = _fence_language(block.info)
    if not block.quoted:
        _cut_block(scanner, lines[block.body[0]][0], lines[block.body[-1]][1], language, "in this code block")
        return True
    code = _quoted_code(scanner.text, lines, block)
    if code is None:
        return False
    _scan_virtual(scanner, code, lambda inner: _cut_block(inner, 0, len(code.text), language, "in this code block"))
    return True


_INFO_LANGUAGE = re.compile(r"[^\s`{]*")


def _fence_language(info: str) -> str:
    """The language a fence's info string names: its first word (`bash` of `bash title="run"`; "" for `{.bash}`)."""
    match = _INFO_LANGUAGE.match(info.strip())
    return match.group() if match else ""


_RST_DIRECTIVE = re.compile(r"[ \t]*\.\.[ \t]+(?:code-block|code|sourcecode|prompt)::[ \t]*(\S*)")


def _cut_rst(scanner: _Scanner, start: int, end: int) -> None:
    with _documentation(scanner):
        _cut_rst_lines(scanner, start, end)


@contextmanager
def _documentation(scanner: _Scanner):
    """Commands read as written for people (placeholders, stray continuation blanks) while cutting
    documentation; a notebook's code cells, cut by the same scanner, are read as shell again."""
    before, scanner.docs = scanner.docs, True
    try:
        yield
    finally:
        scanner.docs = before


def _cut_rst_lines(scanner: _Scanner, start: int, end: int) -> None:
    t = scanner.text
    lines = list(_lines(t, start, end))
    n = 0
    while n < len(lines):
        a, b, _ = lines[n]
        content = t[a:b]
        directive = _RST_DIRECTIVE.match(t, a, b)
        if directive or (content.rstrip().endswith("::") and not content.lstrip().startswith("..")):
            m = _indented_block_end(t, lines, n + 1, _indent(t, a, b))
            body = [line for line in lines[n + 1 : m] if t[line[0] : line[1]].strip()]
            if body:
                language = directive.group(1) if directive else ""
                _cut_block(scanner, body[0][0], body[-1][1], language, "in this literal block")
            n = max(m, n + 1)
            continue
        n += _cut_prose_line(scanner, a, b, lines[n:])
