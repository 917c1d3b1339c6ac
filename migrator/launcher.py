"""Launcher files: `python -m torch.distributed.launch ...` becomes `torchrun ...` wherever it is written.

Shell scripts, Slurm batch files, Makefiles, Dockerfiles, YAML (CI workflows, Kubernetes
manifests), Markdown, reST and notebooks keep launch commands. This module rewrites them as text,
edit by edit, so every byte that is not part of a launch command stays as it was (CRLF included).
It is pure: `migrate_launcher(text, kind)` takes a string and returns a `Result`, like
`api.migrate`. Regexes belong here, on shell text, and nowhere in Python rewriting.

How it works: each kind is cut into code regions (the whole of a shell script; recipe lines of a
Makefile; RUN/CMD/ENTRYPOINT of a Dockerfile; fenced blocks of Markdown ...). A small shell lexer
turns a region into simple commands of words that know their spans, quoting and expansions. A
command with `-m torch.distributed.launch` (or `.run`) is planned once (`_plan`): what the
interpreter becomes, which words go. The plan is applied either to text (shell words) or to
list elements (Docker exec form, YAML lists, Python argv lists). A command that cannot be planned
safely is left whole and reported as DDP204; so is any other mention of the launcher in code.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from migrator.options import Options
from migrator.rule import Example, Rule
from migrator.types import Change, Diagnostic, Result

# --------------------------------------------------------------------------- rules

LAUNCH_TO_TORCHRUN = Rule(
    code="DDP201",
    name="launch-to-torchrun",
    summary="launch with torchrun instead of the deprecated torch.distributed.launch",
    what="""
Rewrites `python -m torch.distributed.launch` to `torchrun` in shell scripts, Slurm scripts,
Makefiles, Dockerfiles, YAML, Markdown, reST and notebooks. A plain `python` or `python3`
becomes `torchrun`; an interpreter given as a variable or a path (`$PYTHON`,
`${PYTHON:-python}`, `$(PYTHON)`, `/opt/conda/bin/python`, `python3.10`) is kept and only the
module changes, to `torch.distributed.run`, so the command still runs in the environment the
script chose. `-u` is dropped with a plain interpreter: torchrun already starts every worker with
`python -u`, so training output stays unbuffered; any other interpreter option (`-O`, `-W ...`)
keeps the interpreter. All launcher options (`--nproc_per_node`, `--nnodes`, `--node_rank`,
`--master_addr`, `--master_port`, `--rdzv_*` ...) keep their values, spellings and quoting, so a
multi-node command stays multi-node (static rendezvous).""",
    why="""
`torch.distributed.launch` is deprecated. Unless given `--use_env`, it passes `--local-rank`
(dashed since torch 2.0, `--local_rank` before) to the training script, which then has to parse
it; torchrun passes nothing and sets `LOCAL_RANK` in each worker's environment.""",
    fix="""
Replace the interpreter and `-m torch.distributed.launch` with `torchrun`, or rename the module to
`torch.distributed.run` after a kept interpreter. Run `ddp-migrate` on the training script too:
it reads `LOCAL_RANK` from the environment.""",
    fix_safety="""
Safe for the launcher. A training script that only reads `args.local_rank` (set by the old
launcher without `--use_env`) must read `os.environ["LOCAL_RANK"]` instead, which is what
`ddp-migrate` does to Python scripts. `torchrun` must be on the PATH wherever `python` was; a kept
interpreter has no such requirement.""",
    fixable=True,
    examples=(
        Example(
            id="plain-python",
            before="python -m torch.distributed.launch --nproc_per_node=4 train.py --epochs 10\n",
            after="torchrun --nproc_per_node=4 train.py --epochs 10\n",
        ),
        Example(
            id="unbuffered",
            before="python3 -u -m torch.distributed.launch --nproc_per_node $GPUS train.py\n",
            after="torchrun --nproc_per_node $GPUS train.py\n",
        ),
        Example(
            id="interpreter-variable-kept",
            before='${PYTHON:-python} -m torch.distributed.launch --nproc_per_node=8 tools/train.py "$@"\n',
            after='${PYTHON:-python} -m torch.distributed.run --nproc_per_node=8 tools/train.py "$@"\n',
        ),
    ),
)

DROP_USE_ENV = Rule(
    code="DDP202",
    name="drop-use-env",
    summary="drop --use_env: torchrun always sets LOCAL_RANK and rejects the flag",
    what="Removes `--use_env` / `--use-env` from a launch command.",
    why="""
`--use_env` told the old launcher to set `LOCAL_RANK` instead of passing `--local-rank`. torchrun
and `python -m torch.distributed.run` always do that and fail with "unrecognized arguments" on
the flag.""",
    fix="Remove the flag (and a line continuation left dangling by it).",
    fix_safety="Safe: the behaviour the flag asked for is torchrun's only behaviour.",
    fixable=True,
    examples=(
        Example(
            id="use-env",
            before="python -m torch.distributed.launch --nproc_per_node=2 --use_env train.py\n",
            after="torchrun --nproc_per_node=2 train.py\n",
        ),
        Example(
            id="continued-lines",
            before=(
                "python -m torch.distributed.launch \\\n"
                "    --nproc_per_node=2 \\\n"
                "    --use-env \\\n"
                "    train.py\n"
            ),
            after="torchrun \\\n    --nproc_per_node=2 \\\n    train.py\n",
        ),
    ),
)

DROP_LOCAL_RANK_ARG = Rule(
    code="DDP203",
    name="drop-local-rank-arg",
    summary="drop the explicit --local_rank passed to the training script",
    what="""
Removes an explicit `--local_rank=...`, `--local_rank ...`, `--local-rank=...` or
`--local-rank ...` written after the training script of a launch command.""",
    why="""
Every worker gets the same explicit value, so all of them would claim the same GPU; torchrun
sets the right `LOCAL_RANK` in each worker's environment.""",
    fix="Remove the argument and its value.",
    fix_safety="""
Safe once the script reads `LOCAL_RANK` from the environment (what `ddp-migrate` makes of a Python
script). A script that declares `--local_rank` with `required=True` needs that requirement
dropped.""",
    fixable=True,
    examples=(
        Example(
            id="local-rank",
            before="python -m torch.distributed.launch --nproc_per_node=2 train.py --local_rank=0 --epochs 5\n",
            after="torchrun --nproc_per_node=2 train.py --epochs 5\n",
        ),
    ),
)

LAUNCHER_UNSAFE = Rule(
    code="DDP204",
    name="launcher-unsafe",
    summary="a torch.distributed.launch command ddp-migrate cannot rewrite safely",
    what="""
Reports a use of `torch.distributed.launch` that is left as it is: launcher options that come
from a variable (`$DIST_ARGS`, `"$@"`) and may hold `--use_env`, a command split across a
variable and its use (`LAUNCH="python -m torch.distributed.launch ..."`; `$LAUNCH train.py`),
an option the launcher does not know, a command in a comment or in a code block of another
language.""",
    why="""
Half a rewrite is worse than none: `torchrun` with a `--use_env` hidden in a variable fails, and
a launch command without its training script cannot be checked for `--local_rank`.""",
    fix="""
None: rewrite the command by hand to `torchrun ...` (drop `--use_env`, drop `--local_rank`
passed to the script).""",
    fix_safety="Nothing is changed.",
    fixable=False,
    examples=(
        Example(
            id="split-across-a-variable",
            before='LAUNCH="python -m torch.distributed.launch --nproc_per_node=2"\n$LAUNCH --use_env train.py\n',
            after=None,
            diagnostics=("DDP204",),
        ),
    ),
)

LAUNCHER_RULES: Tuple[Rule, ...] = (LAUNCH_TO_TORCHRUN, DROP_USE_ENV, DROP_LOCAL_RANK_ARG, LAUNCHER_UNSAFE)
_RULE_NAMES = {rule.code: rule.name for rule in LAUNCHER_RULES}

#: The kind the rules' own examples are written in (they are tested with migrate_launcher(before, EXAMPLE_KIND)).
EXAMPLE_KIND = "shell"

KINDS = ("shell", "make", "docker", "yaml", "markdown", "rst", "notebook")

# --------------------------------------------------------------------------- kinds of files

_SHELL_SUFFIXES = (".sh", ".bash", ".zsh", ".sbatch", ".slurm")
_SUFFIX_KINDS = {
    **{suffix: "shell" for suffix in _SHELL_SUFFIXES},
    ".mk": "make",
    ".dockerfile": "docker",
    ".yml": "yaml",
    ".yaml": "yaml",
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".ipynb": "notebook",
}
_NAME_KINDS = {
    "makefile": "make",
    "gnumakefile": "make",
    "dockerfile": "docker",
    "containerfile": "docker",
}
_SHEBANG = re.compile(r"#![ \t]*(?:/usr)?(?:/local)?/bin/(?:env[ \t]+(?:-\S+[ \t]+)*)?(?:ba|z|k|da)?sh(?:[ \t\r]|$)")


def detect_kind(path: str, head: str) -> Optional[str]:
    """The launcher kind of a file, from its name or, failing that, its shebang line; None otherwise.

    `head` is the start of the file (its first line is enough; "" when not read).
    """
    name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    lower = name.lower()
    if lower in _NAME_KINDS:
        return _NAME_KINDS[lower]
    if lower.startswith(("dockerfile.", "containerfile.")):
        return "docker"
    dot = lower.rfind(".")
    if dot > 0 and lower[dot:] in _SUFFIX_KINDS:
        return _SUFFIX_KINDS[lower[dot:]]
    if dot > 0 and lower[dot:] in (".py", ".pyw", ".pyi"):
        return None
    first = head.lstrip("\ufeff").split("\n", 1)[0]
    if _SHEBANG.match(first):
        return "shell"
    return None


# --------------------------------------------------------------------------- shell lexer

_SPACE = " \t"
_CONTROL = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
_REDIRECT = ("<<<", "<<-", "&>>", ">>", "<<", ">&", "<&", "&>", ">|", "<>", ">", "<")
_OPERATORS = tuple(sorted(_CONTROL + _REDIRECT, key=len, reverse=True))
_OPERATOR_START = frozenset("".join(_OPERATORS))
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
    newlines as blanks (a YAML `>` block scalar folds its lines into one).
    """

    def __init__(self, text: str, start: int, end: int, folded: bool = False) -> None:
        self.t = text
        self.start = start
        self.end = end
        self.folded = folded

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
            if c in _OPERATOR_START:
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


# --------------------------------------------------------------------------- planning one command

_LEGACY = "torch.distributed.launch"
_MODULES = (_LEGACY, "torch.distributed.run")
_PLAIN_PYTHONS = ("python", "python3")
_PYTHON_FLAGS = re.compile(r"-[bBdEiIOPqsSuvR]+")
_PYTHON_VALUE_FLAGS = ("-W", "-X")
_UNBUFFERED = re.compile(r"-u+")

# torch.distributed.run's options (torch 2.x; the old launcher's are a subset), '_' spelled '-'.
_LAUNCHER_VALUE_OPTIONS = (
    "--nnodes", "--nproc-per-node", "--rdzv-backend", "--rdzv-endpoint", "--rdzv-id", "--rdzv-conf",
    "--max-restarts", "--monitor-interval", "--start-method", "--event-log-handler", "--role",
    "--log-dir", "--redirects", "--tee", "--local-ranks-filter", "--duplicate-stdout-filters",
    "--duplicate-stderr-filters", "--node-rank", "--master-addr", "--master-port", "--local-addr",
    "--logs-specs", "--numa-binding", "--signals-to-handle", "--shutdown-timeout",
)  # fmt: skip
_LAUNCHER_FLAGS = ("--standalone", "--module", "--no-python", "--run-path", "--virtual-local-rank", "--help")
_USE_ENV = "--use-env"
_LAUNCHER_LONG = _LAUNCHER_VALUE_OPTIONS + _LAUNCHER_FLAGS + (_USE_ENV,)
_SHORT_VALUE = ("-r", "-t")
_SHORT_FLAGS = ("-m", "-h")
_LOCAL_RANK = ("--local_rank", "--local-rank")
_ALL_ARGS = re.compile(r'"?\$(?:[@*]|\{[@*][^}]*\})"?')

_PLACEHOLDERS = ("...", "\u2026")  # `python -m torch.distributed.launch ...` in prose is no command

_HAND_HINT = "rewrite it by hand: torchrun ..., without --use_env, and no --local_rank for the script"


@dataclass
class _Plan:
    """What to do to one launch command, in item indices. Empty when nothing needs to change."""

    module: int
    legacy: bool
    interpreter: int = -1
    to_torchrun: bool = False  # the interpreter word becomes `torchrun`, its options and `-m MODULE` go
    rename_module: bool = False  # torch.distributed.launch -> torch.distributed.run after a kept interpreter
    drops: List[Tuple[int, int, str, str]] = field(default_factory=list)  # (first, last, code, shown)
    problem: Optional[str] = None


def _find_module(items: Sequence[_Item]) -> Optional[int]:
    """The index of the first `torch.distributed.launch|run` word after a `-m`, or None."""
    found = _find_modules(items)
    return found[0] if found else None


def _find_modules(items: Sequence[_Item]) -> List[int]:
    return [
        index
        for index in range(1, len(items))
        if isinstance(items[index], _Word)
        and isinstance(items[index - 1], _Word)
        and items[index - 1].value == "-m"  # type: ignore[union-attr]
        and items[index].value in _MODULES  # type: ignore[union-attr]
    ]


def _long_option(name: str) -> Optional[str]:
    """The launcher option `name` stands for, as argparse would resolve it (unique prefixes too)."""
    normal = "--" + name[2:].replace("_", "-")
    if normal in _LAUNCHER_LONG:
        return normal
    matches = [option for option in _LAUNCHER_LONG if option.startswith(normal)]
    return matches[0] if len(matches) == 1 else None


def _shown(items: Sequence[_Item], first: int, last: int, text: str) -> str:
    """The items as the user wrote them; list elements by value (no quotes and commas)."""
    shown = []
    for item in items[first : last + 1]:
        by_value = isinstance(item, _Word) and item.content is not None and item.value is not None
        shown.append(item.value if by_value else text[item.start : item.end])  # type: ignore[union-attr]
    return " ".join(shown)  # type: ignore[arg-type]


def _plan(items: Sequence[_Item], module: int, text: str) -> _Plan:
    """Plan the rewrite of the command whose `-m` module word is items[module]."""
    plan = _Plan(module=module, legacy=items[module].value == _LEGACY)  # type: ignore[union-attr]
    if len(_find_modules(items)) > 1:
        plan.problem = "this command starts the launcher more than once"
        return plan
    if not all(item.closed for item in items if isinstance(item, _Word)) or not all(
        item.target is None or item.target.closed for item in items if isinstance(item, _Redirect)
    ):
        plan.problem = "a quote or a $( ... ) in it is not closed"
        return plan

    # Back from `-m`: interpreter options, then the interpreter.
    k = module - 2
    options: List[_Word] = []
    while k >= 0 and isinstance(items[k], _Word):
        word = items[k]
        assert isinstance(word, _Word)
        before = items[k - 1] if k >= 1 else None
        if word.value is not None and (_PYTHON_FLAGS.fullmatch(word.value) or word.value[:2] in _PYTHON_VALUE_FLAGS):
            options.insert(0, word)
            k -= 1
        elif isinstance(before, _Word) and before.value in _PYTHON_VALUE_FLAGS:
            options[0:0] = [before, word]
            k -= 2
        else:
            break
    interpreter = items[k] if k >= 0 else None
    if not isinstance(interpreter, _Word) or not _is_interpreter(interpreter):
        plan.problem = "no Python interpreter before -m"
        return plan
    plan.interpreter = k
    plain = interpreter.value in _PLAIN_PYTHONS
    if plan.legacy:
        if plain and all(o.value is not None and _UNBUFFERED.fullmatch(o.value) for o in options):
            plan.to_torchrun = True
        else:
            plan.rename_module = True

    # Launcher options, up to the training script.
    p = module + 1
    script: Optional[int] = None
    while p < len(items):
        item = items[p]
        if isinstance(item, _Redirect):
            p += 1
            continue
        lit = item.text
        if not lit.startswith("-") or lit == "-":
            if not item.literal and _ALL_ARGS.fullmatch(text[item.start : item.end]):
                plan.problem = f"the launcher's arguments come from {text[item.start:item.end]}"
                return plan
            if not item.literal and _script_follows(items, p):
                plan.problem = (
                    f"launcher options come from {text[item.start:item.end]}, which may hold --use_env"
                )
                return plan
            if item.value in _PLACEHOLDERS:
                break
            script = p
            break
        name, has_value = (lit.split("=", 1)[0], True) if "=" in lit else (lit, False)
        if item.value is None and not has_value:
            plan.problem = f"cannot read the launcher option {text[item.start:item.end]}"
            return plan
        if name.startswith("--"):
            option = _long_option(name)
            takes_value = option in _LAUNCHER_VALUE_OPTIONS
        elif name[:2] in _SHORT_VALUE:
            option, takes_value, has_value = name[:2], True, has_value or len(name) > 2
        elif name in _SHORT_FLAGS:
            option, takes_value = name, False
        else:
            option = None
        if option is None:
            plan.problem = f"unknown launcher option {name}"
            return plan
        last = p
        if takes_value and not has_value:
            last = p + 1
            if last >= len(items) or not isinstance(items[last], _Word):
                plan.problem = f"launcher option {name} has no value"
                return plan
        if option == _USE_ENV:
            plan.drops.append((p, last, DROP_USE_ENV.code, _shown(items, p, last, text)))
        if option == "--help":
            script = len(items)
        p = last + 1
    if script is None:
        plan.problem = "the training script is not part of this command (it may be added where the command is used)"
        return plan

    # The training script's own arguments: an explicit --local_rank goes.
    p = script + 1
    while p < len(items):
        item = items[p]
        if isinstance(item, _Word) and (
            item.value in _LOCAL_RANK or item.text.startswith(tuple(f"{flag}=" for flag in _LOCAL_RANK))
        ):
            last = p
            nxt = items[p + 1] if p + 1 < len(items) else None
            if item.value in _LOCAL_RANK and isinstance(nxt, _Word) and not nxt.text.startswith("--"):
                last = p + 1
            plan.drops.append((p, last, DROP_LOCAL_RANK_ARG.code, _shown(items, p, last, text)))
            p = last + 1
            continue
        p += 1
    return plan


_INTERPRETER = re.compile(r"(?:.*[/\\])?(?:python|pypy|ipython)[\w.-]*|\{[^{}]+\}")


def _is_interpreter(word: _Word) -> bool:
    """`python3`, `/opt/conda/bin/python`, `pypy3`; a variable (`$PYTHON`, `$(PYTHON)`); `{sys.executable}`."""
    return word.value is None or bool(_INTERPRETER.fullmatch(word.value))


def _script_follows(items: Sequence[_Item], p: int) -> bool:
    """Whether a word after items[p] looks like the training script (so items[p] holds options)."""
    for item in items[p + 1 :]:
        if isinstance(item, _Word):
            return (item.value if item.value is not None else item.suffix).endswith(".py")
    return False


# --------------------------------------------------------------------------- the scanner

_LEGACY_MENTION = re.compile(r"(?<!\.)torch\.distributed\.launch(?![\w.])")
_MENTION = re.compile(r"torch\.distributed\.(?:launch|run)(?![\w])")


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    new: str


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
        lexed = _Lexer(self.text, start, end, folded).lex()
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
                self.findings.append(
                    _Finding(LAUNCHER_UNSAFE.code, word.start, f"launch left as it is: cannot rename {raw}", False)
                )
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

    def words(self, seq: "_Seq") -> None:
        module = _find_module(seq.items)
        if module is not None:
            self._command(seq.items, module, seq)
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
        out: List[str] = []
        at = 0
        for edit in sorted(set(self.edits), key=lambda e: (e.start, e.end)):
            if edit.start < at:  # overlapping edits: a bug; keep the first
                continue
            out.append(self.text[at : edit.start])
            out.append(edit.new)
            at = edit.end
        out.append(self.text[at:])
        return "".join(out)


def _one_line(text: str) -> str:
    return " ".join(text.replace("\\\r\n", " ").replace("\\\n", " ").split())


# --------------------------------------------------------------------------- sequences: where words live


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


# --------------------------------------------------------------------------- kinds: cutting text into code regions


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


# ---- Markdown and reST

_SHELL_LANGUAGES = frozenset(
    "bash sh shell zsh ksh console shell-session shellsession session terminal sbatch slurm text txt none "
    "plain plaintext".split()
)
_LANGUAGE_KINDS = {
    "yaml": "yaml", "yml": "yaml", "dockerfile": "docker", "docker": "docker", "make": "make", "makefile": "make"
}  # fmt: skip
_FENCE = re.compile(r"( {0,3})(`{3,}|~{3,})[ \t]*([^\s`{]*)")
_COMMAND_LINE = re.compile(  # `[$ ][VAR=value ...] python|path/python|$PYTHON [-opts] -m torch.distributed.launch`
    r"[ \t]*(?:[$#>][ \t]+)?(?=(?:[A-Za-z_]\w*=\S*[ \t]+)*(?:\S*/)?(?:python[\d.]*|\$\S+)(?:[ \t]+-\S+)*"
    r"[ \t]+-m[ \t]+torch\.distributed\.(?:launch|run)\b)"
)
_INLINE_CODE = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)")
_INLINE_COMMAND = re.compile(r"-m[ \t]+torch\.distributed\.(?:launch|run)[ \t]+\S")  # more than a mention


def _cut_block(scanner: _Scanner, start: int, end: int, language: str, where: str) -> None:
    language = language.lower().lstrip(".")
    kind = "shell" if language in _SHELL_LANGUAGES or not language else _LANGUAGE_KINDS.get(language)
    if kind is None:
        scanner.regions.append((start, end, f"in this {language} block"))
    elif kind == "shell":
        scanner.shell(start, end, where=where)
    else:
        _CUTTERS[kind](scanner, start, end)


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
    t = scanner.text
    lines = list(_lines(t, start, end))
    n = 0
    while n < len(lines):
        a, b, _ = lines[n]
        fence = _FENCE.match(t, a, b)
        if fence:
            marker = fence.group(2)
            close = re.compile(rf" {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*$")
            m = n + 1
            while m < len(lines) and not close.match(t, lines[m][0], lines[m][1]):
                m += 1
            if m > n + 1:
                body_end = lines[m - 1][1] if m < len(lines) else lines[-1][1]
                _cut_block(scanner, lines[n + 1][0], body_end, fence.group(3), "in this code block")
            n = m + 1
            continue
        n += _cut_prose_line(scanner, a, b, lines[n:])


_RST_DIRECTIVE = re.compile(r"[ \t]*\.\.[ \t]+(?:code-block|code|sourcecode|prompt)::[ \t]*(\S*)")


def _cut_rst(scanner: _Scanner, start: int, end: int) -> None:
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


# ---- notebooks


_CUTTERS: Dict[str, Callable[[_Scanner, int, int], None]] = {
    "shell": _cut_shell,
    "make": _cut_make,
    "docker": _cut_docker,
    "yaml": _cut_yaml,
    "markdown": _cut_markdown,
    "rst": _cut_rst,
}


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
    if "torch.distributed." in text:
        if kind == "notebook":
            _notebook(scanner)
        else:
            _CUTTERS[kind](scanner, 0, len(text))
            scanner.report_leftovers()
    return _result(scanner)


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
