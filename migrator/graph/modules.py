"""The project's own modules, each read, parsed and summarised at most once per process.

Questions about another module of the project ("does `utils.init_distributed_mode` set up a
process group?", "does `Trainer(model, ...)` build an optimizer from `model`?") are asked by every
candidate file that imports it. A repository of several hundred files asks them thousands of
times, from scripts in many folders, so everything here is keyed by the module's *file*, never by
the asking file: the text is read once, parsed once with the standard `ast` module (about ten
times faster than LibCST; these modules are read, never rewritten here), and each top-level
definition's calls are collected once, on first use, only for the names actually asked about.

Where a dotted name lives depends on the asking script's folder (`python script.py` resolves
imports from there, and from the folders above it up to the project's top: migrator.context);
that lookup is a few `stat` calls, cached by (folder, name).
"""
from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple, Union

from migrator.context import ProjectModules

_MAX_MODULE_BYTES = 1_000_000  # a generated or vendored giant is not read for a helper

#: Top-level packages that are never the project's own (the standard library, well-known libraries).
NOT_PROJECT_PACKAGES = frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset(
    {
        "torch", "torchvision", "torchaudio", "torchtext", "numpy", "scipy", "pandas", "sklearn", "tqdm", "hydra",
        "omegaconf", "wandb", "tensorboardX", "mlflow", "gym", "gymnasium", "PIL", "cv2", "yaml", "timm",
        "transformers", "datasets", "apex", "matplotlib", "collections", "logging", "time", "os", "sys", "math",
    }
)


Definition = Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]

# -- import lines, read from the raw text ----------------------------------------------------
# Which modules a file imports is asked of every file of a walked repository (project mode) and of
# every candidate file (is it handed a model by a project module that trains it?); reading the
# import lines with a regular expression costs microseconds, parsing the file milliseconds. A line
# the expression misreads costs an edge, never a rewrite: every edit is decided on a syntax tree.
_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<base>\.*[\w.]*)[ \t]+import[ \t]+(?P<names>\([^)]*\)|[^\n#;]*)"
    r"|import[ \t]+(?P<modules>[^\n#;]*))",
    re.M,
)


@dataclass(frozen=True)
class ImportLine:
    level: int  # leading dots of a relative import
    module: Optional[str]  # `a.b` in `from a.b import c` / `import a.b`
    names: Tuple[str, ...]  # `c` in `from a.b import c` (empty for `import a.b`)
    line: int = 0  # 1-based
    bound: Tuple[str, ...] = ()  # the local names, in the order of `names` (`d` in `from a import c as d`)


def import_lines(text: str) -> List[ImportLine]:
    """Every `import` / `from ... import` line of `text`, read as written."""
    found = []
    line, counted = 1, 0
    for match in _IMPORT.finditer(text):
        line += text.count("\n", counted, match.start())
        counted = match.start()
        if match.group("modules") is not None:
            for part in match.group("modules").split(","):
                words = part.split()
                if words and _is_dotted(words[0]):
                    local = words[2] if len(words) == 3 and words[1] == "as" else words[0].split(".")[0]
                    found.append(ImportLine(0, words[0], (), line, (local,)))
            continue
        base = match.group("base")
        level = len(base) - len(base.lstrip("."))
        module = base[level:] or None
        if module is not None and not _is_dotted(module):
            continue
        listed = re.sub(r"#[^\n]*", "", match.group("names")).strip("() \t\\\n")
        aliases = [words for words in (part.split() for part in listed.split(",")) if words and words[0].isidentifier()]
        names = tuple(words[0] for words in aliases)
        bound = tuple(words[2] if len(words) == 3 and words[1] == "as" else words[0] for words in aliases)
        found.append(ImportLine(level, module, names, line, bound))
    return found


def _is_dotted(name: str) -> bool:
    return all(part.isidentifier() for part in name.split("."))



def absolute(level: int, module: Optional[str], package: Optional[str]) -> Optional[str]:
    """The absolute dotted name of `from <level dots><module> import ...` inside `package`."""
    if not level:
        return module or None
    if package is None:
        return module or None  # a script run from its folder: `from .x import y` cannot run; read as `x`
    parts = package.split(".")
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def dotted(node: ast.AST) -> Optional[str]:
    """`torch.nn.DataParallel` for a Name/Attribute chain; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


@dataclass
class ModuleSummary:
    """One module of the project as the others see it: its top-level definitions and imports.

    The text is parsed on first need only: many questions are answered from the text itself
    (`defines`: is `name` a top-level function or class here; does the module name an optimizer).
    """

    path: str
    text: str
    package: Optional[str]  # the package its relative imports resolve in
    _tree: Optional[ast.Module] = field(default=None, repr=False)
    _parsed: bool = field(default=False, repr=False)
    _imports: Optional[Dict[str, str]] = field(default=None, repr=False)
    _bound: Optional[FrozenSet[str]] = field(default=None, repr=False)
    _header_index: Optional[Tuple[Dict[str, str], Dict[str, Tuple[str, ...]]]] = field(default=None, repr=False)
    _stars: Optional[Tuple[str, ...]] = field(default=None, repr=False)
    _definitions: Optional[Dict[str, Definition]] = field(default=None, repr=False)
    _calls: Dict[str, Tuple[str, ...]] = field(default_factory=dict, repr=False)

    @property
    def tree(self) -> Optional[ast.Module]:
        """The module's syntax tree, parsed once, on first use; None when it does not parse."""
        if not self._parsed:
            self._parsed = True
            try:
                self._tree = ast.parse(self.text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                self._tree = None
        return self._tree

    def defines(self, name: str) -> Optional[str]:
        """"def" or "class" when `name` is defined at the top level (read from the text), else None."""
        return self._headers()[0].get(name)

    def class_bases(self, name: str) -> Tuple[str, ...]:
        """The base classes of top-level class `name` as written (`nn.Module`, `BaseTrainer`), from the text."""
        return self._headers()[1].get(name, ())

    def _headers(self) -> Tuple[Dict[str, str], Dict[str, Tuple[str, ...]]]:
        """The top-level `def`/`class` lines, read from the text in one pass: name -> kind, class -> bases."""
        if self._header_index is None:
            kinds: Dict[str, str] = {}
            bases: Dict[str, Tuple[str, ...]] = {}
            for match in _HEADER.finditer(self.text):
                kind, name, listed = match.group(1), match.group(2), match.group(3)
                kinds.setdefault(name, kind)
                if kind == "class" and listed:
                    bases.setdefault(name, tuple(p.split("=")[-1].strip() for p in listed.split(",") if p.strip()))
            self._header_index = (kinds, bases)
        return self._header_index

    @property
    def imported_names(self) -> FrozenSet[str]:
        """Every name an import line of the module binds (read from the text, any indentation)."""
        if self._bound is None:
            self._bound = frozenset(local for line in import_lines(self.text) for local in line.bound)
        return self._bound

    @property
    def definitions(self) -> Dict[str, Definition]:
        """Top-level functions and classes by name (the last definition of a name wins, as at run time)."""
        if self._definitions is None:
            body = self.tree.body if self.tree is not None else []
            self._definitions = {
                node.name: node for node in body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            }
        return self._definitions

    @property
    def imports(self) -> Dict[str, str]:
        """Local name -> absolute dotted source, for the module's top-level imports."""
        if self._imports is None:
            self._imports = {}
            for node in self.tree.body if self.tree is not None else ():
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        local = alias.asname or alias.name.split(".")[0]
                        self._imports.setdefault(local, alias.name if alias.asname else local)
                elif isinstance(node, ast.ImportFrom):
                    base = absolute(node.level, node.module, self.package)
                    if base is not None:
                        for alias in node.names:
                            if alias.name != "*":
                                self._imports.setdefault(alias.asname or alias.name, f"{base}.{alias.name}")
        return self._imports

    @property
    def star_imports(self) -> Tuple[str, ...]:
        """The modules `from x import *` pulls names from, in order."""
        if self._stars is None:
            found: List[str] = []
            for node in self.tree.body if self.tree is not None else ():
                if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
                    base = absolute(node.level, node.module, self.package)
                    if base:
                        found.append(base)
            self._stars = tuple(found)
        return self._stars

    def calls(self, name: str) -> Tuple[str, ...]:
        """The dotted names a top-level definition calls (its whole body, methods included), once."""
        found = self._calls.get(name)
        if found is None:
            node = self.definitions.get(name)
            found = self._calls[name] = tuple(_called_names(node)) if node is not None else ()
        return found


# A top-level function or class line: its kind, its name, and a class's bases as written.
_HEADER = re.compile(r"^(?:async[ \t]+)?(def|class)[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?", re.M)


def _called_names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            name = dotted(sub.func)
            if name:
                yield name


class ModuleIndex:
    """Files -> summaries, and (folder, dotted name) -> file. One per process (`INDEX`)."""

    def __init__(self) -> None:
        self._summaries: Dict[Tuple[str, str, int, int], Optional[ModuleSummary]] = {}
        self._found: Dict[Tuple[str, str], Optional[str]] = {}
        self._packages: Dict[str, bool] = {}

    def find(self, roots: Tuple[str, ...], name: str) -> Optional[str]:
        """The file of module `name` as seen from `roots` (`pkg/mod.py` or `pkg/mod/__init__.py`)."""
        parts = name.split(".")
        if not all(part.isidentifier() for part in parts):
            return None
        for root in roots:
            key = (root, name)
            if key not in self._found:
                base = os.path.join(root, *parts)
                self._found[key] = next(
                    (c for c in (base + ".py", os.path.join(base, "__init__.py")) if os.path.isfile(c)), None
                )
            if self._found[key] is not None:
                return self._found[key]
        return None

    def module(self, roots: Tuple[str, ...], name: str) -> Optional[ModuleSummary]:
        """The summary of module `name` as seen from `roots`; None when it is not in the project or not readable."""
        path = self.find(roots, name)
        if path is None:
            return None
        return self.summary(path, name)

    def summary(self, path: str, name: str) -> Optional[ModuleSummary]:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        # By the name it is asked as (its package decides its relative imports) and by its state:
        # an edited file is read again. The roots are resolved paths, so one file is one path here.
        key = (path, name, stat.st_mtime_ns, stat.st_size)
        if key not in self._summaries:
            self._summaries[key] = _summarise(path, name, stat.st_size)
        return self._summaries[key]

    def text(self, roots: Tuple[str, ...], name: str) -> Optional[str]:
        found = self.module(roots, name)
        return found.text if found is not None else None

    def clear(self) -> None:
        self._summaries.clear()
        self._found.clear()
        self._packages.clear()


def _summarise(path: str, name: str, size: int) -> Optional[ModuleSummary]:
    if size > _MAX_MODULE_BYTES:
        return None
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    is_package = os.path.basename(path) == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    return ModuleSummary(path, text, package or None)


#: The process's index. Worker processes (cli --jobs) each fill their own.
INDEX = ModuleIndex()


def lookup(roots: Tuple[str, ...], qualified: str) -> Optional[Tuple[ModuleSummary, Tuple[str, ...]]]:
    """`pkg.mod.func` -> (the summary of pkg/mod.py, ("func",)): the longest module prefix that is
    a file of the project, and the names after it (`Class.method` gives two)."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        found = INDEX.module(roots, ".".join(parts[:cut]))
        if found is not None:
            return found, tuple(parts[cut:])
    return None


# -- modules chosen by name at run time ----------------------------------------------------------
# `importlib.import_module("models." + name + "_model")`: a factory that picks the module from an
# option (an image-to-image framework's --model, a data set's --dataset_mode). Which modules it can
# pick is read from the constant parts around the one chosen at run time.
_IMPORT_MODULE = frozenset({"importlib.import_module", "import_module"})


def chosen_module_patterns(tree: ast.Module) -> Tuple[Tuple[str, str], ...]:
    """(prefix, suffix) of each `importlib.import_module(prefix + <name> + suffix)` in `tree`'s
    functions, with the argument spelled in the call, in a local assigned before it, or as an
    f-string: ("models.", "_model"). A call with no constant prefix or with more than one part
    chosen at run time gives nothing: it could name any module."""
    found: List[Tuple[str, str]] = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assigned = {target.id: node.value for node in ast.walk(function) if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}
        for call in ast.walk(function):
            if isinstance(call, ast.Call) and dotted(call.func) in _IMPORT_MODULE and len(call.args) == 1:
                argument = call.args[0]
                if isinstance(argument, ast.Name):
                    argument = assigned.get(argument.id, argument)
                pattern = _around_one_name(_string_parts(argument))
                if pattern is not None and pattern not in found:
                    found.append(pattern)
    return tuple(found)


def _string_parts(node: ast.AST) -> List[Optional[str]]:
    """`"a." + x + "_b"` -> ["a.", None, "_b"]: constant strings, None for what is chosen at run time."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _string_parts(node.left) + _string_parts(node.right)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [value.value if isinstance(value, ast.Constant) else None for value in node.values]
    return [None]


def _around_one_name(parts: List[Optional[str]]) -> Optional[Tuple[str, str]]:
    if parts.count(None) != 1:
        return None
    cut = parts.index(None)
    prefix, suffix = "".join(parts[:cut]), "".join(parts[cut + 1:])
    if not prefix.endswith(".") or "." in suffix or not all(p.isidentifier() for p in prefix[:-1].split(".")):
        return None
    return prefix, suffix


def chosen_files(roots: Tuple[str, ...], patterns: Tuple[Tuple[str, str], ...]) -> List[str]:
    """The files `patterns` can name (chosen_module_patterns), seen from `roots`: ("models.",
    "_model") is every `models/<name>_model.py` of the package `models`."""
    chosen: List[str] = []
    for prefix, suffix in patterns:
        package = INDEX.find(roots, prefix[:-1])
        if package is None or os.path.basename(package) != "__init__.py":
            continue
        folder = os.path.dirname(package)
        for name in sorted(os.listdir(folder)):
            stem = name[: -len(".py")]
            if name.endswith(".py") and stem.endswith(suffix) and stem != suffix and stem.isidentifier():
                found = os.path.realpath(os.path.join(folder, name))
                if found not in chosen:
                    chosen.append(found)
    return chosen


def modules_chosen_by(summary: ModuleSummary, roots: Tuple[str, ...]) -> List[str]:
    """The project files the functions of the module import by a name chosen at run time."""
    if "import_module" not in summary.text or summary.tree is None:
        return []
    real = os.path.realpath(summary.path)
    return [found for found in chosen_files(roots, chosen_module_patterns(summary.tree)) if found != real]


def calls_a_module_factory(path: str, text: str) -> bool:
    """Does a module `path` imports (by its import lines) import modules by a name chosen at run
    time (`from models import create_model`, and models/__init__.py's importlib)? Read without
    LibCST: the CLI and its fast path ask it of scripts they found nothing in."""
    roots = ProjectModules.for_script(Path(path)).roots
    package = None if os.path.basename(path) != "__init__.py" else os.path.basename(os.path.dirname(path))
    for line in import_lines(text):
        base = absolute(line.level, line.module, package)
        if base is None or base.split(".")[0] in NOT_PROJECT_PACKAGES:
            continue
        for dotted_module in (base, *(f"{base}.{name}" for name in line.names)):
            found = INDEX.find(roots, dotted_module)
            summary = INDEX.summary(found, dotted_module) if found is not None else None
            if summary is not None and modules_chosen_by(summary, roots):
                return True
    return False

