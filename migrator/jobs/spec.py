"""What every job file runs, whatever the scheduler: torchrun, N machines, G processes each."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Optional, Sequence, Set, Tuple


class JobError(ValueError):
    """A value a job file cannot hold. The message names the option to change."""


@dataclass(frozen=True)
class Launch:
    """`torchrun SCRIPT ARGS...` on `nodes` machines with `gpus` processes on each.

    `script` is kept as the user wrote it: the job runs it from its working directory (the
    directory sbatch was called from; the container image's working directory).
    """

    script: str
    args: Tuple[str, ...] = ()
    nodes: int = 1
    gpus: int = 1
    name: Optional[str] = None  # the job's name; None: from the script's file name

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise JobError(f"--nodes must be at least 1, not {self.nodes}")
        if self.gpus < 1:
            raise JobError(f"--gpus must be at least 1, not {self.gpus}")

    @property
    def stem(self) -> str:
        """The script's file name without `.py`: the job's name unless one is given."""
        return PurePath(self.script).stem

    def describe(self) -> str:
        """`train.py on 2 nodes x 4 GPUs`, for the comment a job file starts with.

        A line break in the script's name is flattened: in a comment it would start a command.
        """
        script = " ".join(self.script.splitlines())
        return f"{script} on {_count(self.nodes, 'node')} x {_count(self.gpus, 'GPU')}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def missing_arguments(required: Sequence[str], given: Sequence[str]) -> Tuple[str, ...]:
    """Which of the script's required arguments (api.Result.launch_args: `DATA` for a
    positional, `--config CONFIG` for a required option) `given` lacks.

    Errs towards silence: a job that fails at once is better than refusing one that would run.
    An option counts when it is there as `--config x`, `--config=x` or an abbreviation argparse
    accepts (`--conf x`), and any short option (`-c x`) may be its alias. Positionals are only
    counted: a required option's value is not one, but a bare word after any other option may be
    that option's value or a positional, so it counts as one.
    """
    options = [spelled.split()[0] for spelled in required if spelled.startswith("-")]
    seen: Set[str] = set()
    bare = 0
    words = iter(given)
    for word in words:
        if word.startswith("--"):
            name, equals, _ = word.partition("=")
            matched = {option for option in options if _abbreviates(name, option)}
            seen |= matched
            if matched and not equals:
                next(words, None)  # its value
        elif _SHORT_OPTION.match(word):
            seen |= set(options)  # perhaps an alias: the parser's short names are not known here
        elif not word.startswith("-"):
            bare += 1
    positionals = [spelled for spelled in required if not spelled.startswith("-")]
    unseen = {spelled for spelled in required if spelled.startswith("-") and spelled.split()[0] not in seen}
    missing = set(positionals[bare:]) | unseen
    return tuple(spelled for spelled in required if spelled in missing)


_SHORT_OPTION = re.compile(r"-[A-Za-z]")


def _abbreviates(token: str, option: str) -> bool:
    return len(token) > 2 and option.startswith(token)


#: What a value on one line of a job file may hold: no spaces, quotes, comments or line breaks,
#: which the scheduler would read as the end of the value or as more of its own syntax.
_TOKEN = re.compile(r"[^\s\"'#\\]+")


def single_token(option: str, value: str) -> str:
    """`value` for a scheduler setting that is one word (a partition, an account), or JobError."""
    if not _TOKEN.fullmatch(value):
        raise JobError(f"{option} {value!r}: give one word, without spaces, quotes or '#'")
    return value
