"""The import graph of a project, from the files' raw text.

Project mode (migrator.project) needs to know which of the walked files a training script
reaches through its imports: `from trainer import Trainer`, `import utils`, relative imports,
package `__init__`s that re-export (`from .base_trainer import *`). The import lines are found
with a regular expression over the text, not by parsing: a 300-file repository is scanned in
milliseconds, and only the modules a script reaches are ever parsed (by the rewrite, later).
A line the expression misreads costs an edge, never a rewrite: every edit is decided on the
syntax tree of the module it is in.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from migrator.graph.modules import ImportLine, ModuleSummary, absolute, import_lines, modules_chosen_by
from migrator.context import ProjectModules, package_of

_MAX_DEPTH = 6  # train.py -> trainer/__init__ -> trainer.trainer -> base/__init__ -> base.base_trainer: 4


@dataclass
class ProjectGraph:
    """The walked Python files (real path -> text) and the project modules each one imports.

    A module resolves as `python script.py` would resolve it: from the importing file's folder,
    from the folders above it up to the project's top (migrator.context), and relative imports
    from the file's package. Files outside the walked set resolve too, when they exist: project
    mode reports what they need instead of changing them.
    """

    texts: Mapping[str, str]
    _edges: Dict[str, Tuple[str, ...]] = field(default_factory=dict, repr=False)
    _lines: Dict[Tuple[str, str], int] = field(default_factory=dict, repr=False)  # (importer, module) -> line
    _exists: Dict[str, bool] = field(default_factory=dict, repr=False)
    _summaries: Dict[str, Optional[ModuleSummary]] = field(default_factory=dict, repr=False)
    _chosen: Dict[str, Tuple[str, ...]] = field(default_factory=dict, repr=False)

    def walked(self, path: str) -> bool:
        return path in self.texts

    def text(self, path: str) -> Optional[str]:
        if path in self.texts:
            return self.texts[path]
        try:
            with open(path, "rb") as handle:
                return handle.read().decode("utf-8", errors="replace")
        except OSError:
            return None

    def imports(self, path: str) -> Tuple[str, ...]:
        """The project modules `path` imports (real paths), in the order of its import lines."""
        if path not in self._edges:
            text = self.text(path)
            found = list(self._resolve_all(path, import_lines(text))) if text else []
            modules = tuple(module for module, _ in found)
            # and what its factory imports by a name chosen at run time: each is run through it
            self._edges[path] = modules + tuple(m for m in self.chosen_modules(path) if m not in modules)
            self._lines.update(((path, module), line) for module, line in found)
        return self._edges[path]

    def imported_through(self, importer: str, module: str, via: str) -> None:
        """`module` reaches `importer` through the import of `via` (a factory that imports it by
        name): findings about it go on that import line."""
        self._lines.setdefault((importer, module), self.import_line(importer, via))

    def import_line(self, importer: str, module: str) -> int:
        """The line of `importer` that imports `module` (1 when not known)."""
        self.imports(importer)
        return self._lines.get((importer, module), 1)

    def imported_names(self, importer: str, module: str) -> Optional[Tuple[str, ...]]:
        """The names `importer` takes from `module` (`validation` in `from test import validation`),
        or None when it takes the module itself (`import test`, `from . import test`, a star)."""
        text = self.text(importer)
        if not text:
            return None
        here = Path(importer)
        roots = ProjectModules.for_script(here).roots
        package = package_of(here)
        names: List[str] = []
        for line in import_lines(text):
            base = absolute(line.level, line.module, package)
            if base is None:
                continue
            if self._find(roots, base) == module:
                if not line.names or "*" in line.names:
                    return None
                names += line.names
            elif any(self._find(roots, f"{base}.{name}") == module for name in line.names):
                return None  # `from pkg import module`
            elif any(self._find(roots, ".".join(base.split(".")[: i + 1])) == module for i in range(base.count("."))):
                return None  # `import pkg.sub` runs pkg/__init__.py whole
        return tuple(names) if names else None

    def summary(self, path: str) -> Optional[ModuleSummary]:
        """The module's text, headers and syntax tree, each read once (None when it cannot be read)."""
        if path not in self._summaries:
            text = self.text(path)
            self._summaries[path] = ModuleSummary(path, text, None) if text is not None else None
        return self._summaries[path]

    def chosen_modules(self, path: str) -> Tuple[str, ...]:
        """The project modules a factory of `path` can import by a name chosen at run time
        (`importlib.import_module("models." + name + "_model")`: every `models/*_model.py`)."""
        if path not in self._chosen:
            summary = self.summary(path)
            roots = ProjectModules.for_script(Path(path)).roots
            self._chosen[path] = tuple(modules_chosen_by(summary, roots)) if summary is not None else ()
        return self._chosen[path]

    def defines_functions(self, path: str, names: Tuple[str, ...]) -> bool:
        """Are `names` top-level functions of the module (`create_model`), not its submodules?"""
        summary = self.summary(path)
        return summary is not None and all(summary.defines(name) == "def" for name in names)

    def reachable(self, entry: str) -> Iterator[Tuple[str, Tuple[str, ...]]]:
        """Project modules imported by `entry`, directly or through others, breadth first, each
        with the chain of modules that leads to it (entry first)."""
        seen: Set[str] = {entry}
        frontier: List[Tuple[str, Tuple[str, ...]]] = [(entry, (entry,))]
        for _ in range(_MAX_DEPTH):
            following = []
            for path, chain in frontier:
                for module in self.imports(path):
                    if module not in seen:
                        seen.add(module)
                        yield module, chain + (module,)
                        following.append((module, chain + (module,)))
            frontier = following

    def _resolve_all(self, path: str, lines: Iterable[ImportLine]) -> Iterator[Tuple[str, int]]:
        here = Path(path)
        roots = ProjectModules.for_script(here).roots
        package = package_of(here)
        seen: Set[str] = set()
        for line in lines:
            base = absolute(line.level, line.module, package)
            if base is None:
                continue
            # `import a.b.c` runs a/__init__.py and a/b/__init__.py too; `from a import b` may name a module.
            wanted = [".".join(base.split(".")[: i + 1]) for i in range(base.count(".") + 1)]
            wanted += [f"{base}.{name}" for name in line.names]
            for dotted in wanted:
                found = self._find(roots, dotted)
                if found is not None and found != path and found not in seen:
                    seen.add(found)
                    yield found, line.line

    def _find(self, roots: Tuple[str, ...], dotted: str) -> Optional[str]:
        parts = dotted.split(".")
        for root in roots:
            base = os.path.join(root, *parts)
            for candidate in (base + ".py", os.path.join(base, "__init__.py")):
                if self._is_file(candidate):
                    return os.path.realpath(candidate)
        return None

    def _is_file(self, candidate: str) -> bool:
        if candidate not in self._exists:
            self._exists[candidate] = os.path.realpath(candidate) in self.texts or os.path.isfile(candidate)
        return self._exists[candidate]
