"""Where a source comes from: what the engine may know beyond its text.

The engine stays pure: it never opens a file. The CLI describes each Python file with a
FileContext, its display path (a pytest module is no training script) and a ProjectModules that
hands over the text of the project's own modules by dotted name, so that `utils.init_dist(args)`
can be looked into when `utils.py` is part of the project (migrator.analysis.distributed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Dict, Optional, Tuple

# Files that mark the top of a project: imports are not looked for above it.
_PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_MAX_LEVELS = 6  # directories above a script searched for its project's top
_MAX_MODULE_BYTES = 1_000_000  # a generated or vendored giant is not read for a helper


@dataclass(frozen=True)
class ProjectModules:
    """The text of the project's own modules, by dotted name (`utils.dist` -> utils/dist.py).

    `roots` are the directories imports resolve from, as `python script.py` resolves them from
    the script's directory (and, for a package layout, from the project's top). Reads are
    cached per process; a module that is not there, not text or too large is None.
    """

    roots: Tuple[str, ...]
    _cache: Dict[str, Optional[str]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def for_script(cls, path: Path) -> "ProjectModules":
        here = path.resolve().parent
        roots = [here]
        for parent in list(here.parents)[:_MAX_LEVELS]:
            if any((roots[-1] / marker).exists() for marker in _PROJECT_MARKERS):
                break
            roots.append(parent)
        return cls(tuple(str(root) for root in roots))

    def source(self, dotted: str) -> Optional[str]:
        if dotted in self._cache:
            return self._cache[dotted]
        text = None
        parts = dotted.split(".")
        if all(part.isidentifier() for part in parts):
            for root in self.roots:
                base = os.path.join(root, *parts)
                for candidate in (base + ".py", os.path.join(base, "__init__.py")):
                    text = _read(candidate)
                    if text is not None:
                        break
                if text is not None:
                    break
        self._cache[dotted] = text
        return text

    def __getstate__(self) -> dict:  # worker processes get the roots, not this process's cache
        return {"roots": self.roots}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "roots", state["roots"])
        object.__setattr__(self, "_cache", {})


def _read(path: str) -> Optional[str]:
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > _MAX_MODULE_BYTES:
            return None
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None


@dataclass(frozen=True)
class FileContext:
    """What the engine is told about a source besides its text (all optional)."""

    path: Optional[str] = None  # as the user named it; decides whether it is a test module
    package: Optional[str] = None  # the dotted package the file is in, for `from .comm import x`
    modules: Optional[ProjectModules] = None

    @classmethod
    def for_file(cls, path: Path, display: Optional[str] = None) -> "FileContext":
        return cls(display or str(path), package_of(path), ProjectModules.for_script(path))

    @property
    def is_test_module(self) -> bool:
        """pytest's and unittest's files: `tests/`, `test_*.py`, `*_test.py`, `conftest.py`."""
        if not self.path:
            return False
        pure = PurePath(self.path.replace("\\", "/"))
        name = pure.name
        if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
            return True
        return any(part in ("tests", "test") for part in pure.parts[:-1])


def package_of(path: Path) -> Optional[str]:
    """`detectron2/engine/defaults.py` -> "detectron2.engine" (the directories holding __init__.py)."""
    parts = []
    folder = path.resolve().parent
    while (folder / "__init__.py").exists() and len(parts) < _MAX_LEVELS:
        parts.append(folder.name)
        folder = folder.parent
    return ".".join(reversed(parts)) or None
