"""files.py: byte-exact reading and writing, atomic and safe write-back, discovery."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from migrator import files
from migrator.errors import MigrateError, SourceParseError
from migrator.files import FileError, StaleFileError, discover, read_source, write_atomic, write_back

# (id, bytes on disk): each must survive read -> write unchanged, byte for byte.
ROUND_TRIP = [
    ("utf8-lf", b"import torch\nmodel = torch.nn.Linear(2, 2)\n"),
    ("utf8-bom", b"\xef\xbb\xbfimport torch\nname = '\xc3\xa9t\xc3\xa9'\n"),
    ("utf8-bom-crlf", b"\xef\xbb\xbfimport torch\r\nx = 1\r\n"),
    ("latin1-cookie", b"# -*- coding: latin-1 -*-\nname = '\xe9t\xe9'  # caf\xe9\n"),
    ("cp1252-cookie-line2", b"#!/usr/bin/env python\n# coding: cp1252\ns = '\x80 \x93q\x94'\n"),
    ("crlf", b"import torch\r\n\r\ndef main():\r\n    pass\r\n"),
    ("mixed-endings", b"import torch\r\nx = 1\ny = 2\r\nz = 3\n"),
    ("lone-cr", b"x = 1\ry = 2\r"),
    ("no-final-newline", b"import torch\nx = 1"),
    ("crlf-no-final-newline", b"import torch\r\nx = 1"),
    ("tabs", b"def f():\n\tif True:\n\t\treturn 1\t# tab\n"),
    ("form-feed", b"x = 1\n\x0c\ndef f():\n    pass\n"),
    ("empty", b""),
    ("only-newline", b"\n"),
    ("trailing-whitespace", b"x = 1   \n\n\n"),
]


@pytest.mark.parametrize("data", [case[1] for case in ROUND_TRIP], ids=[case[0] for case in ROUND_TRIP])
def test_read_then_write_is_byte_identical(tmp_path, data):
    path = tmp_path / "script.py"
    path.write_bytes(data)

    source = read_source(path)
    assert source.encode(source.text) == data
    write_atomic(path, source.text, source.encoding, source.bom)

    assert path.read_bytes() == data


def test_newlines_are_not_translated(tmp_path):
    path = tmp_path / "crlf.py"
    path.write_bytes(b"a = 1\r\nb = 2\nc = 3\r")
    assert read_source(path).text == "a = 1\r\nb = 2\nc = 3\r"


def test_bom_is_stripped_from_text_and_remembered(tmp_path):
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbfx = 1\n")
    source = read_source(path)
    assert source.text == "x = 1\n"
    assert source.bom is True
    assert source.encoding == "utf-8"
    assert source.as_on_disk(source.text) == "\ufeffx = 1\n"


def test_latin1_cookie_decodes_with_the_declared_encoding(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\ns = '\xe9'\n")
    source = read_source(path)
    assert source.text == "# -*- coding: latin-1 -*-\ns = '\xe9'\n"
    assert source.encoding == "iso-8859-1"
    assert source.bom is False


def test_new_text_is_written_in_the_original_encoding_with_bom(tmp_path):
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# coding: latin-1\ns = '\xe9'\n")
    source = read_source(latin)
    write_back(source, source.text + "t = '\xe8'\n")
    assert latin.read_bytes() == b"# coding: latin-1\ns = '\xe9'\nt = '\xe8'\n"

    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbfx = 1\r\n")
    source = read_source(bom)
    write_back(source, source.text + "y = 2\r\n")
    assert bom.read_bytes() == b"\xef\xbb\xbfx = 1\r\ny = 2\r\n"


def test_text_the_encoding_cannot_hold_is_refused_and_the_file_kept(tmp_path):
    path = tmp_path / "latin.py"
    data = b"# coding: latin-1\ns = '\xe9'\n"
    path.write_bytes(data)
    source = read_source(path)
    with pytest.raises(FileError, match=r"latin\.py: cannot encode .*iso-8859-1 \(line 3, col 5\)"):
        write_back(source, source.text + "t = '\u20ac'\n")
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latin.py"]


def test_undecodable_bytes_are_a_parse_error_with_line_and_col(tmp_path):
    path = tmp_path / "bad.py"
    path.write_bytes(b"x = 1\ny = 2\nname = '\xe9t\xe9'\n")  # latin-1 bytes, no cookie
    with pytest.raises(SourceParseError) as info:
        read_source(path)
    err = info.value
    assert (err.line, err.col) == (3, 8)
    assert str(err).startswith(f"{path}:3:8: cannot parse: ")
    assert "\n" not in str(err)


def test_undecodable_first_line_points_at_the_byte(tmp_path):
    path = tmp_path / "bad.py"
    path.write_bytes(b"s = '\xff'\n")
    with pytest.raises(SourceParseError) as info:
        read_source(path)
    assert (info.value.line, info.value.col) == (1, 5)


def test_unknown_cookie_is_a_parse_error(tmp_path):
    path = tmp_path / "cookie.py"
    path.write_bytes(b"#!/usr/bin/env python\n# -*- coding: klingon -*-\nx = 1\n")
    with pytest.raises(SourceParseError) as info:
        read_source(path)
    assert info.value.line == 2
    assert "klingon" in str(info.value)
    assert str(info.value).startswith(f"{path}:2:0: cannot parse:")


def test_unreadable_file_is_a_file_error_naming_the_path(tmp_path):
    with pytest.raises(FileError, match=r"missing\.py: cannot read"):
        read_source(tmp_path / "missing.py")
    assert issubclass(FileError, MigrateError)


# --------------------------------------------------------------------------- atomic write


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o644, 0o600, 0o755, 0o640])
def test_atomic_write_keeps_permission_bits(tmp_path, mode):
    path = tmp_path / "script.py"
    path.write_text("x = 1\n")
    path.chmod(mode)
    source = read_source(path)
    write_back(source, "x = 2\n")
    assert path.read_text() == "x = 2\n"
    assert stat.S_IMODE(path.stat().st_mode) == mode


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
@pytest.mark.parametrize("mode, expected", [(0o644, 0o755), (0o600, 0o700), (0o640, 0o750), (0o755, 0o755)])
def test_atomic_write_executable_adds_x_where_r_is(tmp_path, mode, expected):
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n")
    path.chmod(mode)
    write_atomic(path, "#!/bin/bash\ntrue\n", "utf-8", False, executable=True)
    assert stat.S_IMODE(path.stat().st_mode) == expected
    fresh = tmp_path / "new.sbatch"
    write_atomic(fresh, "#!/bin/bash\n", "utf-8", False, executable=True)
    assert stat.S_IMODE(fresh.stat().st_mode) & 0o100


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "script.py"
    path.write_text("x = 1\n")
    write_back(read_source(path), "x = 2\n")
    assert [p.name for p in tmp_path.iterdir()] == ["script.py"]


def test_atomic_write_replaces_the_inode(tmp_path):
    """A reader holding the old file sees the old bytes: the new file is renamed into place."""
    path = tmp_path / "script.py"
    path.write_text("x = 1\n")
    with open(path) as old:
        write_back(read_source(path), "x = 2\n")
        assert old.read() == "x = 1\n"
    assert path.read_text() == "x = 2\n"


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_atomic_write_through_a_symlink_keeps_the_link(tmp_path):
    real = tmp_path / "real.py"
    real.write_text("x = 1\n")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    write_back(read_source(link), "x = 2\n")
    assert link.is_symlink()
    assert real.read_text() == "x = 2\n"


def test_file_changed_on_disk_after_read_is_not_overwritten(tmp_path):
    path = tmp_path / "script.py"
    path.write_text("x = 1\n")
    source = read_source(path)
    path.write_text("x = 1  # edited meanwhile\n")

    with pytest.raises(StaleFileError, match=r"script\.py: changed on disk since it was read; not overwritten"):
        write_back(source, "x = 2\n")
    assert path.read_text() == "x = 1  # edited meanwhile\n"
    assert [p.name for p in tmp_path.iterdir()] == ["script.py"]


def test_same_size_same_mtime_edit_is_still_detected(tmp_path):
    """A content hash, not mtime+size: an edit within the mtime granularity is caught."""
    path = tmp_path / "script.py"
    path.write_text("x = 1\n")
    source = read_source(path)
    before = path.stat()
    path.write_text("x = 9\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(StaleFileError):
        write_back(source, "x = 2\n")
    assert path.read_text() == "x = 9\n"


def test_file_deleted_after_read_is_not_recreated(tmp_path):
    path = tmp_path / "script.py"
    path.write_text("x = 1\n")
    source = read_source(path)
    path.unlink()
    with pytest.raises(StaleFileError):
        write_back(source, "x = 2\n")
    assert not path.exists()


# --------------------------------------------------------------------------- discovery


def _tree(root: Path, spec: dict) -> None:
    for name, content in spec.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)


def _names(paths, root: Path):
    return [p.relative_to(root).as_posix() for p in paths]


def test_discover_walks_for_python_files_in_sorted_order(tmp_path):
    _tree(tmp_path, {"b.py": "", "a.py": "", "notes.txt": "", "pkg/__init__.py": "", "pkg/z.py": "", "pkg/m.pyc": ""})
    assert _names(discover([tmp_path]), tmp_path) == ["a.py", "b.py", "pkg/__init__.py", "pkg/z.py"]


def test_discover_skips_tool_and_environment_directories(tmp_path):
    skipped = [".git", ".venv", "venv", "__pycache__", "node_modules", "build", "dist", ".tox"]
    _tree(tmp_path, {"train.py": "", **{f"{name}/x.py": "" for name in skipped}, "src/build/y.py": ""})
    assert _names(discover([tmp_path]), tmp_path) == ["train.py"]


def test_discover_walks_an_excluded_name_when_it_is_the_argument(tmp_path):
    _tree(tmp_path, {"build/x.py": ""})
    assert _names(discover([tmp_path / "build"]), tmp_path) == ["build/x.py"]


def test_discover_honours_gitignore(tmp_path):
    _tree(
        tmp_path,
        {
            ".gitignore": "# generated\n*_pb2.py\n!keep_pb2.py\ngenerated/\n/top_only.py\n",
            "train.py": "",
            "model_pb2.py": "",
            "keep_pb2.py": "",
            "top_only.py": "",
            "generated/out.py": "",
            "sub/top_only.py": "",
            "sub/api_pb2.py": "",
            "sub/.gitignore": "local.py\n",
            "sub/local.py": "",
            "other/local.py": "",
        },
    )
    assert _names(discover([tmp_path]), tmp_path) == ["keep_pb2.py", "other/local.py", "sub/top_only.py", "train.py"]


def test_nested_gitignore_can_reinclude(tmp_path):
    _tree(tmp_path, {".gitignore": "*.py\n", "a.py": "", "sub/.gitignore": "!b.py\n", "sub/b.py": "", "sub/c.py": ""})
    assert _names(discover([tmp_path]), tmp_path) == ["sub/b.py"]


def test_gitignore_of_the_enclosing_repository_applies_to_a_subdirectory(tmp_path):
    _tree(
        tmp_path,
        {
            ".git/HEAD": "ref: refs/heads/main\n",
            ".git/info/exclude": "secret.py\n",
            ".gitignore": "scratch/\n",
            "src/train.py": "",
            "src/secret.py": "",
            "src/scratch/tmp.py": "",
        },
    )
    assert _names(discover([tmp_path / "src"]), tmp_path) == ["src/train.py"]


def test_gitignore_above_an_unrelated_folder_is_not_read(tmp_path):
    """Without a .git, only ignore files in and below the walked folder count."""
    _tree(tmp_path, {".gitignore": "*.py\n", "proj/train.py": ""})
    assert _names(discover([tmp_path / "proj"]), tmp_path) == ["proj/train.py"]


def test_explicit_files_are_always_taken(tmp_path):
    _tree(tmp_path, {".gitignore": "ignored.py\nbuild/\n", "ignored.py": "", "build/gen.py": "", "script": ""})
    paths = [tmp_path / "ignored.py", tmp_path / "build/gen.py", tmp_path / "script"]
    assert discover(paths) == paths


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_directories_are_not_followed(tmp_path):
    _tree(tmp_path, {"proj/train.py": "", "elsewhere/other.py": ""})
    (tmp_path / "proj" / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "proj" / "loop").symlink_to(tmp_path / "proj", target_is_directory=True)
    assert _names(discover([tmp_path / "proj"]), tmp_path) == ["proj/train.py"]


def test_discover_removes_duplicates_keeping_first_order(tmp_path):
    _tree(tmp_path, {"a.py": "", "b.py": ""})
    found = discover([tmp_path / "b.py", tmp_path, tmp_path / "a.py"])
    assert _names(found, tmp_path) == ["b.py", "a.py"]


def test_discover_keeps_the_path_as_given(tmp_path, monkeypatch):
    _tree(tmp_path, {"proj/train.py": ""})
    monkeypatch.chdir(tmp_path)
    assert discover(["proj"]) == [Path("proj/train.py")]


def test_discover_nonexistent_path_is_a_file_error(tmp_path):
    with pytest.raises(FileError, match=r"nope\.py: no such file or directory"):
        discover([tmp_path / "nope.py"])


def test_display_path_is_relative_to_cwd_and_slash_separated(tmp_path):
    assert files.display_path(tmp_path / "a" / "b.py", cwd=tmp_path) == "a/b.py"
    assert files.display_path(Path("x") / "y.py") == "x/y.py"
    outside = Path("/elsewhere/z.py")
    assert files.display_path(outside, cwd=tmp_path) == outside.as_posix()
