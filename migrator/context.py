"""Where a source comes from: what the engine may know beyond its text.

The engine is given text and writes nothing. The CLI describes each Python file with a
FileContext: its display path (a pytest module is no training script) and a ProjectModules that
says where the project's own modules are, so that `utils.init_dist(args)` can be looked into when
`utils.py` is part of the project (migrator.analysis.distributed); those modules are read, once per
process, by migrator.graph.modules.
"""
from __future__ import annotations

import functools
from pathlib import Path, PurePath
from typing import FrozenSet, NamedTuple, Optional, Tuple

# Files that mark the top of a project: imports are not looked for above it.
_PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
_MAX_LEVELS = 6  # directories above a script searched for its project's top


class ProjectModules(NamedTuple):
    """Where the project's own modules are: the directories imports resolve from, as `python
    script.py` resolves them from the script's directory (and, for a package layout, from the
    project's top). The modules themselves are read once per process, by file
    (migrator.graph.modules)."""

    roots: Tuple[str, ...]

    @classmethod
    def for_script(cls, path: Path) -> "ProjectModules":
        return cls(_roots(str(path.resolve().parent)))


@functools.lru_cache(maxsize=4096)
def _roots(here: str) -> Tuple[str, ...]:
    """The script's folder and those above it, up to the first that marks the project's top."""
    folder = Path(here)
    roots = [folder]
    for parent in list(folder.parents)[:_MAX_LEVELS]:
        if any((roots[-1] / marker).exists() for marker in _PROJECT_MARKERS):
            break
        roots.append(parent)
    return tuple(str(root) for root in roots)


class FileContext(NamedTuple):
    """What the engine is told about a source besides its text (all optional)."""

    path: Optional[str] = None  # as the user named it; decides whether it is a test module
    package: Optional[str] = None  # the dotted package the file is in, for `from .comm import x`
    modules: Optional[ProjectModules] = None
    # Project mode migrates this module with the script named here, which sets up the process group
    # before any function of the module runs: the module trains (a Solver building its own models),
    # but gets no setup of its own.
    set_up_by: Optional[str] = None
    # Project mode migrates this script with the modules these names come from (`Solver`), which
    # build their models and train them: calling one is the script's training, set up here.
    trains_through: FrozenSet[str] = frozenset()

    @classmethod
    def for_file(cls, path: Path, display: Optional[str] = None) -> "FileContext":
        return cls(display or str(path), package_of(path), ProjectModules.for_script(path))

    def tests(self, source: str) -> bool:
        """Is this file a test module (pytest's, unittest's): named like one (`is_test_module`) and
        not a training script by its text (a main guard, a command line, an optimizer stepped: a
        repository that calls its training scripts `*_test.py`)? One answer for the engine, the
        first look and project mode."""
        from migrator.relevance import runs_as_a_script

        return self.is_test_module and not runs_as_a_script(source)

    @property
    def is_test_module(self) -> bool:
        """Named like pytest's and unittest's files: `tests/`, `test_*.py`, `*_test.py`, `conftest.py`
        (`tests(source)` also reads the text)."""
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
