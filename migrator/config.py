"""Configuration: `[tool.ddp-migrate]` in pyproject.toml, merged with the command line.

    [tool.ddp-migrate]
    select = ["DDP0", "DDP2"]          # codes, code prefixes or rule names; default: every rule
    ignore = ["rank-zero-logging"]
    exclude = ["third_party/"]          # gitignore-style, relative to this file; replaces the default
    extend-exclude = ["*_pb2.py"]       # added to `exclude` (or to the default)
    batch = "global"                    # or "per-process": what a sharded training loader's batch_size means
    eval = "sharded"                    # or "replicated" (the default): evaluation loaders split over the ranks
    max-file-size = "2M"                # Python files above this are skipped (bytes, or K/M/G; 0: no limit)
    exit-zero = true                    # --check exits 0 even with something to act on (as --exit-zero)
    spawn = true                        # turn mp.spawn scripts into torchrun scripts (as --spawn)

The file is the nearest pyproject.toml with a `[tool.ddp-migrate]` table, searched upward from the
first PATH (or the working directory), stopping at a repository root (a folder holding `.git`) or
the filesystem root; `--config FILE` names one (a pyproject.toml, or a TOML file whose top level
holds the keys) and `--isolated` ignores every file. The command line wins: rules are resolved
in layers, the config's then the command line's (see `resolve_rules`).

Every error is a ConfigError with one line that starts with the file's path. Nothing here imports
the rules: codes and names come from `migrator.codes`, which a test keeps equal to the registry.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from migrator.codes import BY_NAME, CODES
from migrator.errors import ConfigError
from migrator.options import BATCH_MODES, EVAL_MODES, Options

TABLE = "ddp-migrate"
PYPROJECT = "pyproject.toml"

#: Keys of the table; `extend-select` / `extend-ignore` mean what they mean on the command line.
KEYS = ("select", "ignore", "extend-select", "extend-ignore", "exclude", "extend-exclude", "batch", "eval",
        "max-file-size", "exit-zero", "spawn")

#: Python files larger than this are skipped unread (`--max-file-size`, `max-file-size`): a generated
#: or vendored module of that size is no training script, and parsing one costs about a gigabyte per
#: megabyte (scripts/bench.py --repos measures it).
DEFAULT_MAX_FILE_SIZE = 512 * 1024
_SIZE_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
               "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}

ALL_CODES: Tuple[str, ...] = tuple(code for code, _ in CODES)


class SelectorError(ValueError):
    """A rule selector that names no rule."""


class RuleSelection(NamedTuple):
    """One layer of rule selection (the config's or the command line's), as canonical selectors.

    `select is None`: this layer does not choose the base set (it keeps the previous layer's).
    """

    select: Optional[Tuple[str, ...]] = None
    ignore: Tuple[str, ...] = ()
    extend_select: Tuple[str, ...] = ()
    extend_ignore: Tuple[str, ...] = ()


class Config(NamedTuple):
    """What a config file says (all empty when there is none)."""

    path: Optional[Path] = None
    rules: RuleSelection = RuleSelection()
    exclude: Optional[Tuple[str, ...]] = None
    extend_exclude: Tuple[str, ...] = ()
    batch: Optional[str] = None  # "global" | "per-process" (Options.batch)
    eval: Optional[str] = None  # "replicated" | "sharded" (Options.eval)
    max_file_size: Optional[int] = None  # bytes; 0: no limit; None: DEFAULT_MAX_FILE_SIZE
    exit_zero: bool = False  # `exit-zero = true`: --check exits 0 even with something to act on
    spawn: bool = False  # `spawn = true`: mp.spawn scripts become torchrun scripts (Options.spawn)

    @property
    def root(self) -> Optional[Path]:
        """The folder exclude patterns are relative to."""
        return self.path.parent if self.path is not None else None


# --------------------------------------------------------------------------- selectors


def canonical_selector(selector: str) -> str:
    """A code or prefix in upper case, a rule name as its code; SelectorError when it names no rule."""
    text = selector.strip()
    if text in BY_NAME:
        return BY_NAME[text]
    upper = text.upper()
    if upper and any(code.startswith(upper) for code in ALL_CODES):
        return upper
    import difflib  # only on the error path

    hint = difflib.get_close_matches(text, [*BY_NAME, *ALL_CODES], n=1)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else " (see ddp-migrate --list-rules)"
    raise SelectorError(f"unknown rule code or name {selector!r}{suggestion}")


def split_selectors(values: Iterable[str]) -> Tuple[str, ...]:
    """Command-line values, repeated or comma-separated, as canonical selectors (SelectorError)."""
    out: List[str] = []
    for value in values:
        for part in value.split(","):
            if part.strip():
                out.append(canonical_selector(part))
    return tuple(out)


def resolve_rules(*layers: RuleSelection) -> Options:
    """The Options for the rules the layers leave enabled, the later layers winning.

    Starting from every rule, each layer in turn: a `select` replaces the set so far; then its
    selectors apply from the least specific to the most (`DDP` < `DDP0` < `DDP003` = a name),
    `ignore` after `select` at equal specificity. So `select = ["DDP0"]` with `ignore = ["DDP003"]`
    is every DDP0 rule but DDP003, and a command-line `--select DDP105` enables DDP105 even
    though the config ignores `DDP1`.
    """
    enabled = set(ALL_CODES)
    ignored: set = set()  # removed by an ignore selector (not merely left out of a select)
    for layer in layers:
        if layer.select is not None:
            enabled = set()
            ignored = set()  # a select replaces the set, and what earlier layers ignored with it
        steps = [(len(s), False, s) for s in (*(layer.select or ()), *layer.extend_select)]
        steps += [(len(s), True, s) for s in (*layer.ignore, *layer.extend_ignore)]
        for _, ignore, selector in sorted(steps):
            codes = {code for code in ALL_CODES if code.startswith(selector)}
            if ignore:
                enabled -= codes
                ignored |= codes
            else:
                enabled |= codes
                ignored -= codes
    # Options keeps "not selected" apart from "ignored": a selected fix may pull in one that was not
    # selected, never one that was ignored (Options.fix_enabled).
    if not enabled:
        return Options(ignore=ALL_CODES)  # nothing selected: nothing to pull in either
    select = () if enabled == set(ALL_CODES) else tuple(code for code in ALL_CODES if code in enabled)
    return Options(select=select, ignore=tuple(code for code in ALL_CODES if code in ignored))


# --------------------------------------------------------------------------- finding and loading


def find_config(start: Path) -> Optional[Path]:
    """The nearest pyproject.toml with a [tool.ddp-migrate] table at or above `start`, or None."""
    directory = Path(os.path.abspath(start))
    if not directory.is_dir():
        directory = directory.parent
    for folder in (directory, *directory.parents):
        candidate = folder / PYPROJECT
        if candidate.is_file() and _has_table(candidate):
            return candidate
        if (folder / ".git").exists():
            return None
    return None


def _has_table(path: Path) -> bool:
    """Whether a pyproject.toml has our table. Read as text first: most have no mention of it."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    if TABLE not in text:  # any spelling of the table ([tool.ddp-migrate], tool."ddp-migrate") says it
        return False
    tool = _parse(path, text).get("tool", {})
    return isinstance(tool, dict) and TABLE in tool


def load_config(path: Path) -> Config:
    """Read `path`: a pyproject.toml's [tool.ddp-migrate] table, else a TOML file's top level."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{_shown(path)}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{_shown(path)}: not valid UTF-8") from None
    data = _parse(path, text)
    if path.name == PYPROJECT:
        tool = data.get("tool", {})
        table = tool.get(TABLE, {}) if isinstance(tool, dict) else {}
        where = f"[tool.{TABLE}]"
    else:
        table, where = data, ""
    if not isinstance(table, dict):
        raise ConfigError(f"{_shown(path)}: [tool.{TABLE}] must be a table")
    return _config(path, table, where)


def _parse(path: Path, text: str) -> Dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - 3.9/3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{_shown(path)}: invalid TOML: {exc}") from None


def _config(path: Path, table: Dict[str, Any], where: str) -> Config:
    prefix = f"{_shown(path)}: {where + ' ' if where else ''}"
    for key in table:
        if key not in KEYS:
            import difflib  # only on the error path

            hint = difflib.get_close_matches(key.replace("_", "-"), KEYS, n=1)
            suggestion = f"; did you mean {hint[0]!r}?" if hint else f" (known keys: {', '.join(KEYS)})"
            raise ConfigError(f"{prefix}unknown key {key!r}{suggestion}")

    def strings(key: str) -> Optional[Tuple[str, ...]]:
        if key not in table:
            return None
        value = table[key]
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{prefix}{key} must be a list of strings, not {_toml_type(value)}")
        return tuple(value)

    def selectors(key: str) -> Optional[Tuple[str, ...]]:
        values = strings(key)
        if values is None:
            return None
        try:
            return tuple(canonical_selector(value) for value in values)
        except SelectorError as exc:
            raise ConfigError(f"{prefix}{key}: {exc}") from None

    rules = RuleSelection(
        select=selectors("select"),
        ignore=selectors("ignore") or (),
        extend_select=selectors("extend-select") or (),
        extend_ignore=selectors("extend-ignore") or (),
    )
    batch = table.get("batch")
    if batch is not None and batch not in BATCH_MODES:
        shown = repr(batch) if isinstance(batch, str) else _toml_type(batch)
        raise ConfigError(f"{prefix}batch must be one of {', '.join(repr(m) for m in BATCH_MODES)}, not {shown}")
    evaluation = table.get("eval")
    if evaluation is not None and evaluation not in EVAL_MODES:
        shown = repr(evaluation) if isinstance(evaluation, str) else _toml_type(evaluation)
        raise ConfigError(f"{prefix}eval must be one of {', '.join(repr(m) for m in EVAL_MODES)}, not {shown}")
    size = table.get("max-file-size")
    max_file_size = None
    if size is not None:
        try:
            max_file_size = parse_size(size)
        except ValueError as exc:
            raise ConfigError(f"{prefix}max-file-size {exc}") from None
    exit_zero = table.get("exit-zero", False)
    if not isinstance(exit_zero, bool):
        raise ConfigError(f"{prefix}exit-zero must be true or false, not {_toml_type(exit_zero)}")
    spawn = table.get("spawn", False)
    if not isinstance(spawn, bool):
        raise ConfigError(f"{prefix}spawn must be true or false, not {_toml_type(spawn)}")
    return Config(path, rules, strings("exclude"), strings("extend-exclude") or (), batch, evaluation, max_file_size,
                  exit_zero, spawn)


def parse_size(value: Any) -> int:
    """`512K`, `2M`, `1.5MiB`, `1000000` or an integer -> bytes (0: no limit). ValueError says why."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be a size such as 512K or 2M, not {_toml_type(value)}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, not {value}")
        return value
    text = value.strip().upper().replace(" ", "")
    number = text.rstrip("KMGIB")
    unit = text[len(number):]
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if unit not in _SIZE_UNITS or amount < 0 or not number:
        raise ValueError(f"must be a size such as 512K, 2M or 1000000 (bytes), not {value!r}")
    return int(amount * _SIZE_UNITS[unit])


def format_size(size: int) -> str:
    """1048576 -> "1 MiB", 524288 -> "512 KiB", 1000 -> "1000 bytes"."""
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            amount = size / factor
            return f"{amount:.0f} {unit}" if amount == int(amount) else f"{amount:.1f} {unit}"
    return f"{size} bytes"


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list with a non-string item"
    return type(value).__name__


def _shown(path: Path) -> str:
    from migrator.files import display_path

    return display_path(path)


def discover_config(paths: Sequence[Path], config: Optional[Path], isolated: bool) -> Config:
    """The Config for this run: `--config`, else the nearest one above the first PATH (or cwd)."""
    if isolated:
        return Config()
    if config is not None:
        return load_config(config)
    found = find_config(paths[0] if paths else Path.cwd())
    return load_config(found) if found is not None else Config()
