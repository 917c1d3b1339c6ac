"""Launcher files: `python -m torch.distributed.launch ...` becomes `torchrun ...` wherever it is written.

Shell scripts, Slurm batch files, Makefiles, Dockerfiles, YAML (CI workflows, Kubernetes
manifests), Markdown, reST and notebooks keep launch commands. This module rewrites them as text,
edit by edit, so every byte that is not part of a launch command stays as it was (CRLF included).
It is pure: `migrate_launcher(text, kind)` takes a string and returns a `Result`, like
`api.migrate`. Regexes belong here, on shell text, and nowhere in Python rewriting.

How it works: each kind is cut into code regions (the whole of a shell script; recipe lines of a
Makefile; RUN/CMD/ENTRYPOINT of a Dockerfile; the scalars and lists of YAML, as PyYAML reads them;
Markdown's code blocks, as markdown-it finds them ...). A small shell lexer
turns a region into simple commands of words that know their spans, quoting and expansions. A
command with `-m torch.distributed.launch` (or `.run`) is planned once (`_plan`): what the
interpreter becomes, which words go. The plan is applied either to text (shell words) or to
list elements (Docker exec form, YAML lists, Python argv lists). A command that cannot be planned
safely is left whole and reported as DDP204; so is any other mention of the launcher in code.

The package, by concern: `rules` (DDP201-DDP204), `kinds` (which kind a file is), `lexer` (shell
words), `command` (planning one command), `sequences` (where words live, and edits to them),
`scanner` (edits and findings for one text), `formats` (shell, Make, Docker, YAML), `yaml_tree`
(YAML's nodes from PyYAML) and `yaml_quoted` (where a quoted scalar's characters are), `docs`
(Markdown, reST) and `markdown_blocks` (Markdown's code blocks from markdown-it), `virtual` (text
read apart from where it is written: a quoted scalar's value, a code block in a blockquote),
`notebook` (.ipynb JSON) and `api` (the entry points re-exported here).
"""
from __future__ import annotations

from migrator.launcher.api import (
    launch_problem,
    migrate_launcher,
    rewrite_command_string,
    rewrite_command_words,
    rewrite_documented_command,
)
from migrator.launcher.kinds import KINDS, detect_kind
from migrator.launcher.rules import (
    DROP_LOCAL_RANK_ARG,
    DROP_USE_ENV,
    EXAMPLE_KIND,
    LAUNCH_TO_TORCHRUN,
    LAUNCHER_RULES,
    LAUNCHER_UNSAFE,
)

__all__ = [
    "DROP_LOCAL_RANK_ARG",
    "DROP_USE_ENV",
    "EXAMPLE_KIND",
    "KINDS",
    "LAUNCHER_RULES",
    "LAUNCHER_UNSAFE",
    "LAUNCH_TO_TORCHRUN",
    "detect_kind",
    "launch_problem",
    "rewrite_documented_command",
    "migrate_launcher",
    "rewrite_command_string",
    "rewrite_command_words",
]
