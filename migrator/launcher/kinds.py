"""Kinds of launcher files: which one a file is, from its name or, failing that, its shebang."""
from __future__ import annotations

import re
from typing import Optional

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
