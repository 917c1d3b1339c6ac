"""Planning the rewrite of one launch command: what the interpreter becomes, which words go.

`_plan` works on items (shell words or list elements) and returns a `_Plan`; applying it to text
or to a list is the caller's business (`scanner._Scanner`, `api.rewrite_command_words`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from migrator.launcher.lexer import _Item, _Redirect, _Word
from migrator.launcher.rules import DROP_LOCAL_RANK_ARG, DROP_USE_ENV

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
    """`-m torch.distributed.launch|run` words, and launchers named by their path right after an
    interpreter (`python /opt/conda/.../torch/distributed/launch.py`, `python $(python -c "import
    torch.distributed.launch as l; print(l.__file__)")`): the same launcher, run as a file."""
    found = []
    for index in range(1, len(items)):
        word, before = items[index], items[index - 1]
        if not isinstance(word, _Word) or not isinstance(before, _Word):
            continue
        if before.value == "-m" and word.value in _MODULES:
            found.append(index)
        elif _located(word) and _is_interpreter(before):
            found.append(index)
    return found


_LOCATED_PATH = re.compile(r"(?:.*/)?torch/distributed/launch\.py")
_LOCATED_SUBSTITUTION = re.compile(r"\$\(\s*python[\w.]*\s+-c\s+.*\btorch\.distributed\.launch\b.*__file__.*\)", re.S)


def _located(word: _Word) -> bool:
    """A word that names the launcher's file: its path, or a `$(python -c ...)` that prints it."""
    if word.value is not None:
        return bool(_LOCATED_PATH.fullmatch(word.value))
    return len(word.expansions) == 1 and not word.prefix and not word.suffix and bool(
        _LOCATED_SUBSTITUTION.fullmatch(word.expansions[0])
    )


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
    located = _located(items[module])  # type: ignore[arg-type]
    plan = _Plan(module=module, legacy=located or items[module].value == _LEGACY)  # type: ignore[union-attr]
    if len(_find_modules(items)) > 1:
        plan.problem = "this command starts the launcher more than once"
        return plan
    if not all(item.closed for item in items if isinstance(item, _Word)) or not all(
        item.target is None or item.target.closed for item in items if isinstance(item, _Redirect)
    ):
        plan.problem = "a quote or a $( ... ) in it is not closed"
        return plan

    # Back from `-m` (or from the launcher's path): interpreter options, then the interpreter.
    k = module - (1 if located else 2)
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
