"""The commonest run, answered before the CLI is loaded: Python files that mention no torch.

A pre-commit hook runs `ddp-migrate --check --diff FILE...` on every commit, mostly on files that
have nothing to do with training. Loading click, pathlib, dataclasses and the CLI costs about
twice Python's own start-up; reading a few files costs nothing. So when a run is nothing but
such files (named `.py` files, none mentioning torch, no configuration file that could change
what is taken, nothing that asks for more than the summary line), this module answers it the way
the full CLI would: the same summary line, styled the same way, the same exit status. Anything
else, and anything it is not sure of, goes to the full CLI (migrator.cli), which is the reference:
tests/test_fastpath.py runs both on the same inputs and compares what they print.

Only the standard library's start-up modules are imported here (os, sys).
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import List, Optional, Sequence

#: A Python file with none of these has nothing to migrate (api.RELEVANT; a test keeps them equal).
PYTHON_RELEVANT = ("torch", "local_rank", "local-rank")

#: The flags the fast path knows to mean nothing more than a summary line for such files.
_MODES = {"--check": "check", "--diff": "diff", "--in-place": "in_place"}
_HARMLESS = frozenset({"-q", "--quiet", "--force-exclude", "--exit-zero"})
#: Folders the default `exclude` names: a named file in one of them is excluded by --force-exclude.
_DEFAULT_EXCLUDED = frozenset({".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".tox"})
#: files.py's defaults, as plain numbers here (a test keeps them equal).
MAX_FILE_SIZE = 512 * 1024
PROGRESS_MIN_FILES = 20
_TABLE = "ddp-migrate"
_PYPROJECT = "pyproject.toml"


def run(argv: "Sequence[str]") -> "Optional[int]":
    """The exit status of `ddp-migrate ARGV` when this module can answer it exactly (having
    printed what the CLI would), else None: the caller runs the full CLI."""
    modes, quiet, paths = set(), False, []
    for arg in argv:
        if arg in _MODES:
            modes.add(_MODES[arg])
        elif arg in _HARMLESS:
            quiet = quiet or arg in ("-q", "--quiet")
        elif arg.startswith("-") or not arg.endswith(".py"):
            return None  # another flag, `--`, stdin, a folder, a launcher file: the CLI decides
        else:
            paths.append(arg)
    if not paths or not modes or ("in_place" in modes and len(modes) > 1):
        return None  # printing one migrated file, a usage error: the CLI's
    count = _unchanged_files(paths)
    if count is None:
        return None
    if not quiet:
        if count > PROGRESS_MIN_FILES and _isatty(sys.stderr):
            return None  # the CLI draws a progress bar on a terminal
        from migrator.terminal import BOLD, styled_line, wants_color  # as light as this module

        if wants_color(sys.stderr, "auto") and _is_windows_console():
            return None  # legacy consoles get their styles through rich: the CLI's
        summary = f"{count} {'file' if count == 1 else 'files'} left unchanged"
        sys.stderr.write(styled_line(summary, BOLD, wants_color(sys.stderr, "auto")))
        sys.stderr.flush()
    return 0


def _unchanged_files(paths: "List[str]") -> "Optional[int]":
    """How many distinct files `paths` name, when every one is a plain UTF-8 `.py` file with no
    word of PYTHON_RELEVANT, below the size limit, outside the default excludes, and no
    [tool.ddp-migrate] configuration applies; None otherwise."""
    seen = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            continue
        if not os.path.isfile(path) or _excluded_by_default(real) or os.path.getsize(path) > MAX_FILE_SIZE:
            return None
        if not _mentions_nothing_to_migrate(path):
            return None
        seen.add(real)
    if _configured(paths[0]):
        return None
    return len(seen)


def _mentions_nothing_to_migrate(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    if data.startswith(b"\xef\xbb\xbf") or b"coding" in b"\n".join(data.split(b"\n", 2)[:2]):
        return False  # a BOM or an encoding cookie: decoded as Python does, by the CLI
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    if any(word in text for word in PYTHON_RELEVANT):
        return False
    # A training script that never names torch: its model comes from a factory that imports the
    # model's module by name (`create_model(opt)`); the CLI follows it (migrator.project).
    if "__main__" not in text:
        return True
    from migrator.graph.modules import calls_a_module_factory  # rare: only a script's main guard reads it

    return not calls_a_module_factory(path, text)


def _excluded_by_default(real: str) -> bool:
    """Could --force-exclude's default patterns match this file (a folder of theirs above it)?"""
    return any(part in _DEFAULT_EXCLUDED for part in real.split(os.sep)[:-1])


def _configured(first: str) -> bool:
    """Is there a pyproject.toml mentioning the tool at or above the first path, before the
    repository's top (config.find_config's search)? Then the CLI reads it: it may say anything."""
    folder = os.path.dirname(os.path.abspath(first))
    while True:
        candidate = os.path.join(folder, _PYPROJECT)
        if os.path.isfile(candidate):
            try:
                with open(candidate, "rb") as handle:
                    if _TABLE.encode() in handle.read():
                        return True
            except OSError:
                return True
        if os.path.exists(os.path.join(folder, ".git")):
            return False
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _is_windows_console() -> bool:
    return sys.platform == "win32"
