"""The file edge: find scripts, read them without losing a byte, write them back atomically.

Nothing here knows about DDP. `read_source` decodes the way Python itself does (BOM, PEP 263
cookie) and never translates newlines, so `encode_source(read_source(p).text, ...)` is the file's
exact bytes; `read_text` does the same for launcher files (UTF-8). `write_atomic` replaces a file
only if it still holds the bytes that were read. `source_kind` tells Python scripts from launcher
files (shell, Make, Docker, YAML, Markdown, reST, notebooks) and from files ddp-migrate does not take.
"""
from __future__ import annotations

import io
import os
import re
import stat
import tokenize
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from migrator.errors import MigrateError, SourceParseError

PathLike = Union[str, "os.PathLike[str]"]

UTF8_BOM = b"\xef\xbb\xbf"

#: The kind of a Python script; launcher files have one of launcher.KINDS.
PYTHON = "python"

#: How much of an extension-less file is read to find its shebang.
HEAD_BYTES = 256

#: Directory names not walked into by default (an explicitly named directory is still walked).
EXCLUDED_DIRS = frozenset({".git", ".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".tox"})

#: The default `exclude` patterns (gitignore-style). `.git` is never walked, whatever `exclude` says.
DEFAULT_EXCLUDE: Tuple[str, ...] = tuple(f"{name}/" for name in sorted(EXCLUDED_DIRS - {".git"}))

if TYPE_CHECKING:  # pragma: no cover
    import pathspec


class FileError(MigrateError):
    """A file could not be found, read or written. The message names the path."""

    def __init__(self, path: PathLike, message: str) -> None:
        self.path = os.fspath(path)
        self.message = message
        super().__init__(f"{self.path}: {message}")


class StaleFileError(FileError):
    """The file changed on disk after it was read; it is not overwritten."""


class UndecodableError(SourceParseError):
    """The file's bytes are not text in the encoding it declares (or UTF-8): likely a binary file."""


class SourceFile(NamedTuple):
    """A decoded script plus what it takes to write it back byte-for-byte.

    `text` has the BOM stripped and newlines untranslated. `digest` is the sha256 of the bytes
    read, so a write-back can refuse to clobber a concurrent edit.
    """

    path: Path
    text: str
    encoding: str
    bom: bool
    digest: Optional[str] = None

    def encode(self, text: str) -> bytes:
        """`text` as this file's bytes (same encoding, same BOM)."""
        return encode_source(text, self.encoding, self.bom, self.path)

    def as_on_disk(self, text: str) -> str:
        """`text` with the BOM put back as U+FEFF, for diffs that must match the file's first line."""
        return "\ufeff" + text if self.bom else text


# --------------------------------------------------------------------------- reading


def read_source(path: PathLike) -> SourceFile:
    """Read `path` and decode it as Python would, keeping BOM, encoding and newlines.

    Raises FileError when the file cannot be read and SourceParseError (with line and column)
    when its bytes are not valid in the encoding Python would use.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FileError(path, f"cannot read: {exc.strerror or exc}") from None
    text, encoding, bom = decode_source(data, path)
    return SourceFile(path, text, encoding, bom, _digest(data))


def read_text(path: PathLike) -> SourceFile:
    """Read a launcher file (a shell script, Makefile, YAML ...): UTF-8 with or without a BOM, newlines kept.

    Raises FileError when the file cannot be read and SourceParseError (with line and column)
    when it is not UTF-8.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FileError(path, f"cannot read: {exc.strerror or exc}") from None
    text, bom = _decode_utf8(data, path)
    return SourceFile(path, text, "utf-8", bom, _digest(data))


def read_data(data: bytes, path: PathLike, kind: str = PYTHON) -> SourceFile:
    """Bytes read elsewhere (stdin) as the file `path` would be: decoded as Python, or as UTF-8
    for a launcher kind. Nothing can be written back to it (no digest)."""
    path = Path(path)
    if kind == PYTHON:
        text, encoding, bom = decode_source(data, path)
        return SourceFile(path, text, encoding, bom)
    text, bom = _decode_utf8(data, path)
    return SourceFile(path, text, "utf-8", bom)


def _decode_utf8(data: bytes, path: Path):
    """Launcher files are UTF-8 (a BOM is kept aside); anything else is a place-named error."""
    bom = data.startswith(UTF8_BOM)
    body = data[len(UTF8_BOM):] if bom else data
    try:
        return body.decode("utf-8"), bom
    except UnicodeDecodeError as exc:
        line, col = _line_col(body, exc.start)
        bad = " ".join(f"{byte:02x}" for byte in body[exc.start : exc.end])
        raise UndecodableError(f"byte(s) {bad} are not valid utf-8", line, col, os.fspath(path)) from None


def source_kind(path: PathLike) -> Optional[str]:
    """PYTHON, a launcher kind (launcher.detect_kind: by name, else by a shell shebang), or None.

    A file without a suffix is Python when its first line is a python shebang (`#!/usr/bin/env
    python3`: a script such as `train`), as pre-commit's `identify` tags it; any other file is None:
    ddp-migrate does not take it (a LICENSE named on the command line is an error, not Python).
    """
    path = Path(path)
    if path.suffix in (".py", ".pyw"):
        return PYTHON
    detect_kind = _detect_kind()
    kind = detect_kind(path.name, "")
    if kind is not None or path.suffix:
        return kind
    head = _head(path)
    if is_python_shebang(head):
        return PYTHON
    return detect_kind(path.name, head)


#: `#!/usr/bin/env python3`, `#!/usr/bin/python`, `#!/usr/bin/env -S python3 -u`, `#! /opt/conda/bin/python3.10`
_PYTHON_SHEBANG = re.compile(r"#![ \t]*(?:\S*/)?(?:env[ \t]+(?:-\S+[ \t]+)*)?(?:\S*/)?python[\d.]*(?:[ \t\r]|$)")


def is_python_shebang(head: str) -> bool:
    """Is the first line of `head` a shebang that runs Python?"""
    return _PYTHON_SHEBANG.match(head.lstrip("\ufeff").split("\n", 1)[0]) is not None


def _head(path: Path) -> str:
    """The first bytes of a file, as text, or "" when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read(HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def decode_source(data: bytes, path: Optional[PathLike] = None) -> Tuple[str, str, bool]:
    """Return (text, encoding, bom) for the bytes of a Python file. Newlines are kept as they are."""
    where = os.fspath(path) if path is not None else None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        # An unknown cookie, a cookie contradicting the BOM, or bytes in the first two lines that
        # are not UTF-8 while no cookie says otherwise. Point at the bad byte when there is one.
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise _undecodable(data, bad, "utf-8", where) from None
        raise SourceParseError(exc.msg, _cookie_line(data), 0, where) from None
    bom = encoding == "utf-8-sig"
    if bom:
        encoding = "utf-8"
        data = data[len(UTF8_BOM):]
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise _undecodable(data, exc, encoding, where) from None
    return text, encoding, bom


def _undecodable(data: bytes, exc: UnicodeDecodeError, encoding: str, where: Optional[str]) -> SourceParseError:
    line, col = _line_col(data, exc.start)
    bad = " ".join(f"{byte:02x}" for byte in data[exc.start : exc.end])
    return UndecodableError(
        f"byte(s) {bad} are not valid {encoding}; declare the file's encoding with a '# -*- coding: ... -*-' line",
        line,
        col,
        where,
    )


def _cookie_line(data: bytes) -> int:
    """The line a PEP 263 cookie sits on (it may only be on line 1 or 2)."""
    first = data.split(b"\n", 1)[0]
    return 1 if b"coding" in first else 2


def _line_col(data: bytes, offset: int) -> Tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1)
    return line, col


def _digest(data: bytes) -> str:
    import hashlib  # loads OpenSSL: about 6 ms of a start-up that a clean file should barely pay

    return hashlib.sha256(data).hexdigest()


def file_digest(path: PathLike) -> str:
    """sha256 of the file's current bytes."""
    return _digest(Path(path).read_bytes())


# --------------------------------------------------------------------------- writing


def encode_source(text: str, encoding: str, bom: bool, path: Optional[PathLike] = None) -> bytes:
    """Encode `text` for disk: no newline translation, BOM prepended when the original had one."""
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError as exc:
        where = path if path is not None else "<source>"
        line = text.count("\n", 0, exc.start) + 1
        col = exc.start - (text.rfind("\n", 0, exc.start) + 1)
        raise FileError(
            where, f"cannot encode the migrated source as {encoding} (line {line}, col {col}): {exc.reason}"
        ) from None
    return UTF8_BOM + data if bom else data


def write_atomic(
    path: PathLike,
    text: str,
    encoding: str,
    bom: bool,
    *,
    expected_digest: Optional[str] = None,
    executable: bool = False,
) -> None:
    """Replace the file at `path` with `text`, atomically, keeping its permission bits.

    The bytes go to a temporary file in the same directory, are fsynced, and the temporary file
    is renamed over the target with os.replace. A symlink is written through (the link stays a
    link). When `expected_digest` is given and the file on disk no longer has that sha256, nothing
    is written and StaleFileError is raised. `executable` adds the execute bits wherever the read
    bits are (a script written this way runs as `./job.sh` for whoever may read it).
    """
    path = Path(path)
    data = encode_source(text, encoding, bom, path)
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = _default_mode()
    except OSError as exc:
        raise FileError(path, f"cannot write: {exc.strerror or exc}") from None
    if executable:
        mode |= (mode & 0o444) >> 2
    if target.exists() and _read_only(target, mode):
        raise FileError(path, "cannot write: the file is read-only")

    import tempfile  # only when writing

    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".ddp-migrate.tmp", dir=target.parent)
    except OSError as exc:
        raise FileError(path, f"cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        if expected_digest is not None:
            try:
                current = file_digest(target)
            except OSError:
                current = None
            if current != expected_digest:
                raise StaleFileError(path, "changed on disk since it was read; not overwritten")
        os.replace(tmp_name, target)
    except BaseException as exc:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise FileError(path, f"cannot write: {exc.strerror or exc}") from None
        raise
    _fsync_directory(target.parent)


def _read_only(target: Path, mode: int) -> bool:
    """No write bit at all, or none for this user. The atomic rename would replace such a file
    anyway (it needs only the directory), so the file's own bits are honoured here; root, whom
    os.access lets write anything, still keeps off a file nobody may write."""
    return not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(target, os.W_OK)


def _default_mode() -> int:
    """What a new file would get from open(): 0o666 minus the umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_back(source: SourceFile, text: str) -> None:
    """Write `text` over the file `source` was read from, if that file is unchanged since."""
    write_atomic(source.path, text, source.encoding, source.bom, expected_digest=source.digest)


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable. Best effort: not every platform can open a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- discovery

_Ignore = Tuple[Path, "pathspec.PathSpec"]  # (absolute directory the patterns are relative to, patterns)


class Exclude(NamedTuple):
    """Gitignore-style `patterns` relative to `root` (the folder of the config file that gave them, or cwd).

    A pattern without a `/` before its end (`build/`, `*_pb2.py`) matches at any depth, also in a
    walk outside `root`; an anchored one (`/data`, `src/gen/`) only under `root`.
    """

    patterns: Tuple[str, ...]
    root: Optional[Path] = None  # None: the working directory when the walk starts


def discover(
    paths: Iterable[PathLike],
    exclude: Optional[Sequence[Exclude]] = None,
    *,
    force_exclude: bool = False,
    skipped: Optional[List[Tuple[Path, str]]] = None,
) -> List[Path]:
    """Expand `paths` into the files to migrate, in a stable order, without duplicates.

    A file argument is always taken, whatever its name and whatever .gitignore says (unless
    `force_exclude` and an `exclude` pattern matches it). A directory is walked for `*.py` and
    launcher files and extension-less scripts (`_is_walked_script`), skipping `.git`, whatever `exclude` matches (default:
    DEFAULT_EXCLUDE relative to cwd), whatever the enclosing repository's .gitignore files (and
    .git/info/exclude) ignore, symlinks to directories, and symlinked files that point outside
    the walked directory (each of the latter appended to `skipped` with why, for -v). Raises
    FileError for a path that does not exist or a directory that cannot be listed.
    """
    excluder = _Excluder(exclude if exclude is not None else (Exclude(DEFAULT_EXCLUDE),))
    found: List[Path] = []
    seen: Set[str] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            if force_exclude and excluder.excluded(Path(os.path.realpath(path)), is_dir=True):
                continue
            candidates: Iterable[Path] = _walk(path, excluder, skipped)
        elif path.exists():
            if force_exclude and excluder.excluded(Path(os.path.realpath(path)), is_dir=False):
                continue
            candidates = (path,)
        else:
            raise FileError(path, "no such file or directory")
        for candidate in candidates:
            key = os.path.realpath(candidate)
            if key not in seen:
                seen.add(key)
                found.append(candidate)
    return found


class _Excluder:
    """Matches paths against sets of `exclude` patterns.

    Plain names (`venv/`, `node_modules`) are compared with path components directly; only other
    patterns are compiled with pathspec, on first use, so a run on named files never imports it.
    """

    _GLOB = frozenset("*?[\\!")

    def __init__(self, excludes: Sequence[Exclude]) -> None:
        self.sets: List[Tuple[Path, Set[str], Set[str], List[str]]] = []
        self._specs: List[Optional["pathspec.PathSpec"]] = []
        self._roots: Dict[Tuple[int, Path], bool] = {}
        for exclude in excludes:
            names: Set[str] = set()  # match a file or a directory of that name, at any depth
            dir_names: Set[str] = set()  # match a directory of that name, at any depth
            rest: List[str] = []
            patterns = [p.strip() for p in exclude.patterns if p.strip() and not p.strip().startswith("#")]
            negated = any(p.startswith("!") for p in patterns)
            for pattern in patterns:
                core = pattern[:-1] if pattern.endswith("/") else pattern
                if not negated and core and "/" not in core and not (set(core) & self._GLOB):
                    (dir_names if pattern.endswith("/") else names).add(core)
                else:
                    rest.append(pattern)
            root = exclude.root if exclude.root is not None else Path.cwd()
            self.sets.append((Path(os.path.realpath(root)), names, dir_names, rest))
            self._specs.append(None)

    def excluded(self, real: Path, *, is_dir: bool, walk_root: Optional[Path] = None) -> bool:
        """Whether `real` (a resolved path) is excluded.

        In a walk of `walk_root` (a directory named on the command line, walked even when it is
        excluded itself), only what lies below `walk_root` is compared; a named file is compared
        whole (`--force-exclude`).
        """
        for index, (root, names, dir_names, rest) in enumerate(self.sets):
            rel = _relative_to(real, root)
            below = _relative_to(real, walk_root) if walk_root is not None else rel
            parts = (below if below is not None else real.name).split("/")
            dirs = parts if is_dir else parts[:-1]
            if names.intersection(parts) or dir_names.intersection(dirs):
                return True
            if rest and rel is not None:
                spec = self._spec(index)
                if walk_root is not None and self._root_matched(index, walk_root):
                    continue  # everything under an excluded directory matches: it was named, so walk it
                if spec.match_file(rel + "/" if is_dir else rel):
                    return True
        return False

    def _spec(self, index: int) -> "pathspec.PathSpec":
        spec = self._specs[index]
        if spec is None:
            spec = self._specs[index] = _gitignore_spec(self.sets[index][3])
        return spec

    def _root_matched(self, index: int, walk_root: Path) -> bool:
        key = (index, walk_root)
        if key not in self._roots:
            rel = _relative_to(walk_root, self.sets[index][0])
            self._roots[key] = bool(rel) and self._spec(index).match_file(rel + "/")
        return self._roots[key]


def _relative_to(real: Path, root: Path) -> Optional[str]:
    """`real` relative to `root`, '/'-separated, or None when it is not under it ('' is root itself).

    Both are resolved paths (realpath), so this is a prefix test: os.path.relpath, which makes both
    absolute again on every call, was half of a walk's time on a 800-file repository."""
    path, base = os.fspath(real), os.fspath(root)
    if path == base:
        return ""
    prefix = base if base.endswith(os.sep) else base + os.sep
    if not path.startswith(prefix):
        return None
    rel = path[len(prefix):]
    return rel.replace(os.sep, "/") if os.sep != "/" else rel


def display_path(path: PathLike, cwd: Optional[PathLike] = None) -> str:
    """How a path is shown in messages and diff headers: relative to cwd when under it, '/'-separated."""
    path = Path(path)
    if path.is_absolute():
        base = Path(cwd) if cwd is not None else Path.cwd()
        try:
            path = path.relative_to(base)
        except ValueError:
            pass
    return path.as_posix()


def _walk(root: Path, excluder: _Excluder, skipped: Optional[List[Tuple[Path, str]]] = None) -> Iterator[Path]:
    real_root = Path(os.path.realpath(root))
    notes: List[Tuple[Path, str]] = skipped if skipped is not None else []
    yield from _walk_dir(root, real_root, _enclosing_ignores(real_root), excluder, real_root, notes)


def _walk_dir(
    directory: Path,
    real_dir: Path,
    ignores: Sequence[_Ignore],
    excluder: _Excluder,
    real_root: Path,
    skipped: List[Tuple[Path, str]],
) -> Iterator[Path]:
    own = _load_ignore_file(real_dir / ".gitignore")
    if own is not None:
        ignores = (*ignores, (real_dir, own))
    try:
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda entry: entry.name)
    except OSError as exc:
        raise FileError(directory, f"cannot list directory: {exc.strerror or exc}") from None
    for entry in entries:
        path = directory / entry.name
        real = real_dir / entry.name
        if entry.is_dir(follow_symlinks=False):
            why = "the repository's own folder" if entry.name == ".git" else _left_out(real, True, excluder, real_root, ignores)
            if why is None:
                yield from _walk_dir(path, real, ignores, excluder, real_root, skipped)
            else:
                skipped.append((path, why))
        elif entry.is_symlink() and entry.is_dir():
            skipped.append((path, "symlink to a directory, not followed"))
        elif (entry.name.endswith(".py") or _is_walked_script(entry)) and entry.is_file():
            why = _left_out(real, False, excluder, real_root, ignores)
            if why is not None:
                skipped.append((path, why))
            elif entry.is_symlink() and _relative_to(Path(os.path.realpath(path)), real_root) is None:
                skipped.append((path, "symlink to a file outside the walked directory, not followed"))
            else:
                yield path


def _left_out(real: Path, is_dir: bool, excluder: "_Excluder", real_root: Path, ignores: Sequence[_Ignore]) -> Optional[str]:
    """Why a walk leaves `real` out (an exclude pattern, a .gitignore), or None when it takes it."""
    if excluder.excluded(real, is_dir=is_dir, walk_root=real_root):
        return "excluded (--exclude, the config's exclude, or the default)"
    if _ignored(real, ignores, is_dir=is_dir):
        return "ignored by .gitignore"
    return None


def _is_walked_script(entry: "os.DirEntry[str]") -> bool:
    """A launcher file by its name, or an extension-less executable with a shell or a python
    shebang: what pre-commit's `identify` tags shell or python (it reads the shebangs of
    executable files only), so a walk and the hooks take the same files."""
    detect_kind = _detect_kind()
    if detect_kind(entry.name, "") is not None:
        return True
    if "." in entry.name.lstrip(".") or not entry.is_file():
        return False
    try:
        executable = bool(entry.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    except OSError:
        return False
    if not executable:
        return False
    head = _head(Path(entry.path))
    return is_python_shebang(head) or detect_kind(entry.name, head) == "shell"


def _detect_kind():
    """launcher.detect_kind, imported when a file is not plainly Python (the launcher package
    compiles its regexes on import; a run on `.py` files never needs it)."""
    from migrator.launcher import detect_kind

    return detect_kind


def _ignored(real: Path, ignores: Sequence[_Ignore], *, is_dir: bool) -> bool:
    """Git's verdict: the deepest ignore file with a matching pattern wins (so `!pattern` works)."""
    verdict = False
    for base, spec in ignores:
        rel = _relative_to(real, base)
        if not rel:
            continue
        if is_dir:
            rel += "/"
        if hasattr(spec, "check_file"):  # pathspec >= 0.12
            include = spec.check_file(rel).include
            if include is not None:
                verdict = include
        elif spec.match_file(rel):
            verdict = True
    return verdict


def _enclosing_ignores(real_root: Path) -> Tuple[_Ignore, ...]:
    """Ignore files of the enclosing git repository that sit above `real_root`, outermost first."""
    chain = [real_root, *real_root.parents]
    for depth, directory in enumerate(chain):
        if (directory / ".git").exists():
            git_root = directory
            above = list(reversed(chain[1 : depth + 1]))  # git_root .. real_root's parent
            break
    else:
        return ()
    ignores: List[_Ignore] = []
    exclude = _load_ignore_file(git_root / ".git" / "info" / "exclude")
    if exclude is not None:
        ignores.append((git_root, exclude))
    for directory in above:
        spec = _load_ignore_file(directory / ".gitignore")
        if spec is not None:
            ignores.append((directory, spec))
    return tuple(ignores)


def _load_ignore_file(path: Path) -> Optional["pathspec.PathSpec"]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except OSError as exc:
        raise FileError(path, f"cannot read: {exc.strerror or exc}") from None
    return _gitignore_spec(lines)


def _gitignore_spec(lines: List[str]) -> "pathspec.PathSpec":
    import pathspec  # only for directory walks and exclude globs: a run on named files never loads it

    if hasattr(pathspec, "GitIgnoreSpec"):
        return pathspec.GitIgnoreSpec.from_lines(lines)
    return pathspec.PathSpec.from_lines("gitwildmatch", lines)  # pragma: no cover - pathspec < 0.10
