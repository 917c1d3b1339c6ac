"""The command line, tested against a fake engine so the CLI is what is under test.

Where the real engine is used, the expectation is computed from `migrator.api.migrate` itself, so
these tests hold while the engine grows. Engine-specific CLI tests live with the engine's tests.
"""
from __future__ import annotations

import ast
import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
from click.testing import CliRunner

import migrator
from migrator import cli as cli_module
from migrator.api import migrate as real_migrate
from migrator.diff import unified_diff
from migrator.errors import IntroducedSyntaxError, SourceParseError
from migrator.options import Options
from migrator.report import Report, WriteBack
from migrator.types import Change, Diagnostic, Result

MARKER = "single_gpu"
MIGRATED = "MIGRATED"

SCRIPT = """\
import torch
import torch.nn as nn

model = nn.DataParallel(nn.Linear(4, 4))
device = "single_gpu"
"""
CLEAN = "import torch\n\nprint(torch.__version__)\n"
PY2 = 'import torch\n\nprint "hello"\n'
# Python 2 that the real engine must parse (it builds an optimizer, so the relevance prefilter reads it).
PY2_TRAINING = 'import torch\nimport torch.optim as optim\n\nopt = optim.SGD(model.parameters(), lr=0.1)\nprint "hello"\n'

# --------------------------------------------------------------------------- harness


def fake_migrate(source: str, options: Optional[Options] = None, context=None) -> Result:
    """Parses like the engine (raising SourceParseError), replaces MARKER, reports each replacement.

    `ADVISE` anywhere adds a fixable diagnostic; `NOTE` a non-fixable one.
    """
    try:
        ast.parse(source)
    except SyntaxError as exc:
        raise SourceParseError(exc.msg, exc.lineno or 0, (exc.offset or 1) - 1) from None
    changes = []
    for number, line in enumerate(source.split("\n"), start=1):
        col = line.find(MARKER)
        if col >= 0:
            changes.append(Change("DDP001", number, col, f"replaced {MARKER}"))
    diagnostics = []
    if "ADVISE" in source:
        diagnostics.append(Diagnostic("DDP101", 1, 0, "fake advisory", fixable=True))
    if "NOTE" in source:
        diagnostics.append(Diagnostic("DDP102", 1, 0, "fake note"))
    return Result(source.replace(MARKER, MIGRATED), tuple(changes), tuple(diagnostics), original=source)


def fake_check(source: str, options: Optional[Options] = None, context=None) -> Result:
    """The fake's api.check(): its verdict without the new code."""
    result = fake_migrate(source, options)
    return dataclasses.replace(result, code=source, pending=result.changed)


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setattr(cli_module, "migrate", fake_migrate)
    monkeypatch.setattr(cli_module, "check", fake_check)
    monkeypatch.setattr(cli_module, "_verdict", lambda source, context, spawn=False: "engine")
    monkeypatch.setattr(cli_module, "_may_need_a_look", lambda source, name: True)  # the fake decides
    # The CLI skips files the real engine would leave alone; the fake's words are its own.
    monkeypatch.setattr(cli_module, "PYTHON_RELEVANT", (*cli_module.PYTHON_RELEVANT, MARKER, "ADVISE", "NOTE"))
    return fake_migrate


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty working directory; paths in output are relative to it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click 8.1
    except TypeError:
        return CliRunner()  # click >= 8.2 always keeps stderr apart


# Keep rich's colour detection out of the tests' environment.
PLAIN_ENV = {"FORCE_COLOR": None, "NO_COLOR": None, "TTY_COMPATIBLE": None, "TERM": "xterm", "COLUMNS": "80"}


def invoke(*args: str):
    return _runner().invoke(cli_module.cli, list(args), env=PLAIN_ENV, catch_exceptions=False)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    return path


def lines(text: str) -> List[str]:
    return text.splitlines()


def stream_lines(stderr: str) -> List[str]:
    """stderr without the end-of-run block of per-file summaries (blank line .. before the last line)."""
    rows = stderr.splitlines()
    if "" in rows:
        start = rows.index("")
        rows = rows[:start] + rows[-1:]
    return rows


def summary_block(stderr: str) -> List[str]:
    """Only the end-of-run block of per-file summaries (between the first blank line and the last line)."""
    rows = stderr.splitlines()
    return rows[rows.index("") + 1 : -1] if "" in rows else []


# --------------------------------------------------------------------------- print mode


def test_one_file_no_flag_prints_the_migrated_source(project, fake_engine):
    write(project / "train.py", SCRIPT)
    result = invoke("train.py")
    assert result.exit_code == 0
    assert result.stdout == SCRIPT.replace(MARKER, MIGRATED)
    assert (project / "train.py").read_text() == SCRIPT  # nothing written
    assert stream_lines(result.stderr) == [
        "train.py:5:10: DDP001 [*] replaced single_gpu",
        "1 file would be migrated",
    ]


def test_print_mode_with_the_real_engine_equals_migrate(project):
    write(project / "train.py", SCRIPT)
    result = invoke("train.py")
    assert result.exit_code == 0
    assert result.stdout == real_migrate(SCRIPT).code


@pytest.mark.parametrize(
    "data",
    [
        b"\xef\xbb\xbfx = 'single_gpu'\r\n",
        b"# coding: latin-1\r\nx = 'single_gpu'  # caf\xe9",
        b"x = 1\r\ny = 'single_gpu'\nif x:\n\tz = 3\r",
    ],
    ids=["bom-crlf", "latin1-no-final-newline", "mixed-endings"],
)
def test_print_mode_writes_the_files_own_bytes(project, fake_engine, data):
    (project / "odd.py").write_bytes(data)
    result = invoke("odd.py")
    assert result.stdout_bytes == data.replace(b"single_gpu", b"MIGRATED")


def test_print_mode_prints_an_unchanged_file_unchanged(project, fake_engine):
    write(project / "clean.py", CLEAN)
    result = invoke("clean.py")
    assert result.exit_code == 0
    assert result.stdout == CLEAN
    assert lines(result.stderr) == ["1 file left unchanged"]


# --------------------------------------------------------------------------- diff mode


def test_several_paths_default_to_diff_mode(project, fake_engine):
    write(project / "a.py", SCRIPT)
    write(project / "b.py", CLEAN)
    result = invoke("a.py", "b.py")
    assert result.exit_code == 0
    assert result.stdout == unified_diff(SCRIPT, SCRIPT.replace(MARKER, MIGRATED), "a.py")
    assert result.stdout.startswith("--- a/a.py\n+++ b/a.py\n@@ ")
    assert (project / "a.py").read_text() == SCRIPT
    assert "would migrate a.py" in lines(result.stderr)
    assert lines(result.stderr)[-1] == "1 file would be migrated, 1 left unchanged"


def test_a_directory_defaults_to_diff_mode(project, fake_engine):
    write(project / "pkg" / "a.py", SCRIPT)
    result = invoke("pkg")
    assert result.stdout.startswith("--- a/pkg/a.py\n+++ b/pkg/a.py\n")
    assert (project / "pkg" / "a.py").read_text() == SCRIPT


def test_diff_of_an_unchanged_file_is_empty(project, fake_engine):
    write(project / "clean.py", CLEAN)
    result = invoke("--diff", "clean.py")
    assert result.exit_code == 0
    assert result.stdout == ""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=True)


DIFF_CASES = {
    "lf.py": SCRIPT.encode(),
    "crlf.py": SCRIPT.replace("\n", "\r\n").encode(),
    "mixed.py": b"import torch\r\nx = 'single_gpu'\ny = 2\r\n",
    "no_newline.py": b"import torch\n\nx = 'single_gpu'",
    "last_line_unchanged_no_newline.py": b"x = 'single_gpu'\ny = 1\nz = 2\nw = 3\nv = 4",
    "bom.py": b"\xef\xbb\xbfx = 'single_gpu'\nname = '\xc3\xa9'\n",
    "latin1.py": b"# -*- coding: latin-1 -*-\nx = 'single_gpu'  # caf\xe9\n",
    "tabs.py": b"def f():\n\treturn 'single_gpu'\t# tab\n",
    "clean.py": CLEAN.encode(),
}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_diff_output_applies_with_git_apply(project, fake_engine):
    _git(project, "init", "-q")
    _git(project, "config", "core.autocrlf", "false")
    for name, data in DIFF_CASES.items():
        (project / "src" / name).parent.mkdir(exist_ok=True)
        (project / "src" / name).write_bytes(data)

    result = invoke("--diff", "--color", "never", "src")
    assert result.exit_code == 0, result.stderr
    patch = project / "migration.patch"
    patch.write_bytes(result.stdout_bytes)
    _git(project, "apply", "--check", "migration.patch")
    _git(project, "apply", "migration.patch")

    for name, data in DIFF_CASES.items():
        assert (project / "src" / name).read_bytes() == data.replace(b"single_gpu", b"MIGRATED"), name


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch")
def test_diff_output_applies_with_patch_p1(project, fake_engine):
    for name, data in DIFF_CASES.items():
        (project / name).write_bytes(data)
    result = invoke(*DIFF_CASES)
    (project / "migration.patch").write_bytes(result.stdout_bytes)
    subprocess.run(["patch", "-p1", "-i", "migration.patch"], cwd=project, capture_output=True, check=True)
    for name, data in DIFF_CASES.items():
        assert (project / name).read_bytes() == data.replace(b"single_gpu", b"MIGRATED"), name


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_diff_with_the_real_engine_applies_to_give_migrate_output(project):
    _git(project, "init", "-q")
    write(project / "a.py", SCRIPT)
    write(project / "b.py", CLEAN)
    result = invoke("a.py", "b.py")
    assert result.exit_code == 0
    if result.stdout:
        (project / "p.patch").write_bytes(result.stdout_bytes)
        _git(project, "apply", "p.patch")
    assert (project / "a.py").read_text() == real_migrate(SCRIPT).code
    assert (project / "b.py").read_text() == real_migrate(CLEAN).code


def test_color_always_highlights_and_never_is_plain(project, fake_engine):
    write(project / "a.py", SCRIPT)
    coloured = invoke("--diff", "--color", "always", "a.py")
    plain = invoke("--diff", "--color", "never", "a.py")
    assert "\x1b[" in coloured.stdout
    assert "\x1b[" not in plain.stdout
    assert "\x1b[" not in plain.stderr
    assert plain.stdout == unified_diff(SCRIPT, SCRIPT.replace(MARKER, MIGRATED), "a.py")


def test_auto_colour_is_plain_when_piped(project, fake_engine):
    write(project / "a.py", SCRIPT)
    result = invoke("--diff", "a.py")
    assert "\x1b[" not in result.stdout + result.stderr


# --------------------------------------------------------------------------- in-place


def test_in_place_writes_changed_files_only(project, fake_engine):
    write(project / "a.py", SCRIPT)
    clean = write(project / "b.py", CLEAN)
    before = clean.stat().st_mtime_ns
    result = invoke("--in-place", "a.py", "b.py")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert (project / "a.py").read_text() == SCRIPT.replace(MARKER, MIGRATED)
    assert clean.read_text() == CLEAN and clean.stat().st_mtime_ns == before
    assert stream_lines(result.stderr) == [
        "a.py:5:10: DDP001 [*] replaced single_gpu",
        "migrated a.py",
        "1 file migrated, 1 left unchanged",
    ]


def test_in_place_keeps_encoding_bom_and_newlines(project, fake_engine):
    data = b"\xef\xbb\xbf# x\r\nx = 'single_gpu'\r\ny = '\xc3\xa9'"
    (project / "a.py").write_bytes(data)
    assert invoke("--in-place", "a.py").exit_code == 0
    assert (project / "a.py").read_bytes() == data.replace(b"single_gpu", b"MIGRATED")


def test_in_place_second_run_is_a_no_op(project, fake_engine):
    write(project / "a.py", SCRIPT)
    invoke("--in-place", "a.py")
    again = invoke("--in-place", "a.py")
    assert again.exit_code == 0
    assert lines(again.stderr) == ["1 file left unchanged"]


def test_in_place_refuses_a_file_edited_during_the_run(project, monkeypatch):
    path = write(project / "a.py", SCRIPT)
    write(project / "b.py", SCRIPT)

    def racing_engine(source, options=None, context=None):
        path.write_text(SCRIPT + "# edited by someone else\n")
        return fake_migrate(source, options)

    monkeypatch.setattr(cli_module, "migrate", racing_engine)
    result = invoke("--in-place", "a.py", "b.py")
    assert result.exit_code == 2
    assert "a.py: changed on disk since it was read; not overwritten" in lines(result.stderr)
    assert path.read_text() == SCRIPT + "# edited by someone else\n"
    assert (project / "b.py").read_text() == SCRIPT.replace(MARKER, MIGRATED)


# --------------------------------------------------------------------------- check


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"clean.py": CLEAN}, 0),
        ({"a.py": SCRIPT, "clean.py": CLEAN}, 1),
        ({"py2.py": PY2, "clean.py": CLEAN}, 2),
        ({"a.py": SCRIPT, "py2.py": PY2}, 3),
    ],
    ids=["clean-0", "would-change-1", "parse-error-2", "both-3"],
)
def test_check_exit_codes(project, fake_engine, files, expected):
    for name, text in files.items():
        write(project / name, text)
    result = invoke("--check", *files)
    assert result.exit_code == expected, result.stderr
    assert result.stdout == ""  # no diff without --diff
    for name, text in files.items():
        assert (project / name).read_text() == text


def test_check_shows_changes_and_status_but_no_diff(project, fake_engine):
    write(project / "a.py", SCRIPT)
    result = invoke("--check", "a.py")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert stream_lines(result.stderr) == [
        "a.py:5:10: DDP001 [*] replaced single_gpu",
        "would migrate a.py",
        "1 file would be migrated",
    ]


def test_check_with_diff_prints_the_diff_and_exits_1(project, fake_engine):
    write(project / "a.py", SCRIPT)
    result = invoke("--check", "--diff", "a.py")
    assert result.exit_code == 1
    assert result.stdout == unified_diff(SCRIPT, SCRIPT.replace(MARKER, MIGRATED), "a.py")
    assert (project / "a.py").read_text() == SCRIPT


def test_plain_check_reports_what_check_diff_does(project):
    """Plain --check skips code generation (api.check); its report and status must not differ."""
    root = Path(__file__).resolve().parent.parent / "fixtures"
    for case in sorted(root.iterdir()):
        for name in ("input.py", "expected.py"):
            if (case / name).exists():
                shutil.copy(case / name, project / f"{case.name}_{name}")
    plain = invoke("--check", "--jobs", "1", ".")
    with_diff = invoke("--check", "--diff", "--jobs", "1", ".")
    assert plain.exit_code == with_diff.exit_code == 3  # something to migrate (1), a Python 2 file (2)
    assert plain.stderr == with_diff.stderr
    assert "would be migrated" in plain.stderr.splitlines()[-1]


def test_check_of_a_directory(project, fake_engine):
    write(project / "pkg" / "a.py", SCRIPT)
    write(project / "pkg" / "b.py", CLEAN)
    write(project / "pkg" / "c.py", CLEAN)
    result = invoke("--check", "pkg")
    assert result.exit_code == 1
    assert lines(result.stderr)[-1] == "1 file would be migrated, 2 left unchanged"


# --------------------------------------------------------------------------- failures


def test_python2_file_is_reported_and_left_identical_while_others_proceed(project, fake_engine):
    py2 = project / "old.py"
    py2.write_bytes(PY2.replace("\n", "\r\n").encode())
    before = py2.read_bytes()
    write(project / "a.py", SCRIPT)

    result = invoke("--in-place", "old.py", "a.py")

    assert result.exit_code == 2
    assert py2.read_bytes() == before
    assert (project / "a.py").read_text() == SCRIPT.replace(MARKER, MIGRATED)
    err = lines(result.stderr)
    parse_errors = [line for line in err if line.startswith("old.py:")]
    assert len(parse_errors) == 1
    assert parse_errors[0].startswith("old.py:3:0: cannot parse: ")
    assert "Traceback" not in result.stderr
    assert err[-1] == "1 file migrated, 1 failed"


def test_python2_file_with_the_real_engine(project):
    """Whatever the engine makes of it, the CLI never rewrites a file the engine cannot parse."""
    write(project / "old.py", PY2)
    write(project / "a.py", SCRIPT)
    result = invoke("--in-place", "old.py", "a.py")
    try:
        expected_old = real_migrate(PY2).code
    except SourceParseError as exc:
        assert result.exit_code == 2
        assert f"old.py:{exc.line}:{exc.col}: cannot parse: " in result.stderr
        expected_old = PY2
    assert (project / "old.py").read_text() == expected_old
    assert (project / "a.py").read_text() == real_migrate(SCRIPT).code


def test_undecodable_file_is_a_parse_error_with_position(project, fake_engine):
    (project / "latin.py").write_bytes(b"x = 1\ns = '\xe9'\n")
    write(project / "a.py", SCRIPT)
    result = invoke("--check", "latin.py", "a.py")
    assert result.exit_code == 3
    assert any(line.startswith("latin.py:2:5: cannot parse: ") for line in lines(result.stderr))


def test_internal_error_is_one_line_and_the_run_continues(project, monkeypatch):
    def flaky(source, options=None, context=None):
        if "boom" in source:
            raise RuntimeError("boom\nsecond line")
        return fake_migrate(source, options)

    def flaky_check(source, options=None, context=None):
        flaky(source, options)
        return fake_check(source, options)

    monkeypatch.setattr(cli_module, "migrate", flaky)
    monkeypatch.setattr(cli_module, "check", flaky_check)
    monkeypatch.setattr(cli_module, "_verdict", lambda source, context, spawn=False: "engine")
    monkeypatch.setattr(cli_module, "_may_need_a_look", lambda source, name: True)
    write(project / "bad.py", "import torch\nboom = 1\n")
    write(project / "a.py", SCRIPT)
    result = invoke("--in-place", "bad.py", "a.py")
    assert result.exit_code == 2
    assert "bad.py: internal error: RuntimeError: boom second line" in lines(result.stderr)
    assert "Traceback" not in result.stderr
    assert (project / "a.py").read_text() == SCRIPT.replace(MARKER, MIGRATED)

    verbose = invoke("-v", "--check", "bad.py")
    assert "Traceback (most recent call last)" in verbose.stderr


def test_introduced_syntax_error_writes_nothing(project, monkeypatch):
    def broken(source, options=None, context=None):
        raise IntroducedSyntaxError("line 3: unexpected indent")

    monkeypatch.setattr(cli_module, "migrate", broken)
    write(project / "a.py", SCRIPT)
    result = invoke("--in-place", "a.py")
    assert result.exit_code == 2
    assert (project / "a.py").read_text() == SCRIPT
    (message,) = [line for line in lines(result.stderr) if line.startswith("a.py")]
    assert message.startswith("a.py: internal error: ")


def test_nonexistent_path_is_one_line_and_exit_2(project, fake_engine):
    write(project / "a.py", SCRIPT)
    result = invoke("--in-place", "a.py", "missing.py")
    assert result.exit_code == 2
    assert lines(result.stderr) == ["missing.py: no such file or directory"]
    assert (project / "a.py").read_text() == SCRIPT


# --------------------------------------------------------------------------- output details


def test_diagnostics_mark_fixable_with_star(project, fake_engine):
    write(project / "a.py", "x = 1  # ADVISE NOTE\n")
    result = invoke("--check", "a.py")
    assert lines(result.stderr)[:2] == [
        "a.py:1:0: DDP101 [*] fake advisory",
        "a.py:1:0: DDP102 fake note",
    ]


def test_quiet_keeps_errors_and_code_only(project, fake_engine):
    write(project / "a.py", SCRIPT + "# ADVISE\n")
    write(project / "py2.py", PY2)
    result = invoke("-q", "--diff", "a.py", "py2.py")
    assert result.exit_code == 2
    assert result.stdout.startswith("--- a/a.py\n")
    assert lines(result.stderr) == [line for line in lines(result.stderr) if line.startswith("py2.py:3:")]
    assert len(lines(result.stderr)) == 1


def test_quiet_check_prints_nothing_but_keeps_the_exit_code(project, fake_engine):
    write(project / "a.py", SCRIPT)
    result = invoke("--check", "-q", "a.py")
    assert result.exit_code == 1
    assert result.stdout == result.stderr == ""


def test_summary_is_last_and_pluralised(project, fake_engine):
    for name in ("a.py", "b.py"):
        write(project / name, SCRIPT)
    for name in ("c.py", "d.py", "e.py"):
        write(project / name, CLEAN)
    write(project / "f.py", PY2)
    result = invoke("--check", ".")
    assert lines(result.stderr)[-1] == "2 files would be migrated, 3 left unchanged, 1 failed"


def test_gitignored_files_are_not_migrated(project, fake_engine):
    write(project / ".gitignore", "generated/\n")
    write(project / "generated" / "a.py", SCRIPT)
    write(project / "b.py", SCRIPT)
    result = invoke("--check", ".")
    assert lines(result.stderr)[-1] == "1 file would be migrated"


def test_empty_directory(project, fake_engine):
    (project / "empty").mkdir()
    result = invoke("empty")
    assert result.exit_code == 0
    assert lines(result.stderr) == ["no Python files found"]


# --------------------------------------------------------------------------- usage


@pytest.mark.parametrize(
    "flags", [["--in-place", "--diff"], ["--in-place", "--check"], ["--color", "sometimes"], []], ids=str
)
def test_usage_errors_exit_2(project, fake_engine, flags):
    write(project / "a.py", SCRIPT)
    result = invoke(*flags, *(["a.py"] if flags else []))
    assert result.exit_code == 2
    assert (project / "a.py").read_text() == SCRIPT


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout == f"ddp-migrate {migrator.__version__}\n"


@pytest.mark.parametrize(
    "flags, single, mode",
    [
        ({}, True, WriteBack.PRINT),
        ({}, False, WriteBack.DIFF),
        ({"diff": True}, True, WriteBack.DIFF),
        ({"in_place": True}, True, WriteBack.IN_PLACE),
        ({"check": True}, True, WriteBack.CHECK),
        ({"check": True, "diff": True}, False, WriteBack.CHECK_DIFF),
    ],
)
def test_flags_collapse_into_one_write_back_mode(flags, single, mode):
    kwargs = {"diff": False, "in_place": False, "check": False, **flags}
    assert WriteBack.from_flags(single_file=single, **kwargs) is mode


@pytest.mark.parametrize(
    "mode, counts, summary, code",
    [
        (WriteBack.CHECK, (1, 0, 0), "1 file would be migrated", 1),
        (WriteBack.DIFF, (2, 5, 1), "2 files would be migrated, 5 left unchanged, 1 failed", 2),
        (WriteBack.IN_PLACE, (2, 1, 0), "2 files migrated, 1 left unchanged", 0),
        (WriteBack.IN_PLACE, (0, 1, 0), "1 file left unchanged", 0),
        (WriteBack.CHECK, (0, 0, 2), "2 files failed", 2),
        (WriteBack.CHECK_DIFF, (3, 0, 1), "3 files would be migrated, 1 failed", 3),
        (WriteBack.PRINT, (0, 0, 0), "no Python files found", 0),
    ],
)
def test_report_summary_and_exit_code(mode, counts, summary, code):
    report = Report(mode, *counts)
    assert str(report) == summary
    assert report.return_code == code


# --------------------------------------------------------------------------- diff.py


def test_unified_diff_no_newline_markers():
    patch = unified_diff("a\nb", "a\nc", "x.py")
    assert patch == (
        "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        "\\ No newline at end of file\n"
    )
    assert unified_diff("a\n", "a\n", "x.py") == ""
    assert unified_diff("a", "a\n", "x.py").endswith("-a\n\\ No newline at end of file\n+a\n")


def test_unified_diff_splits_on_newline_only():
    patch = unified_diff("a\r\nb\x0cc\n", "a\r\nB\x0cc\n", "dir\\x.py" if os.sep == "\\" else "dir/x.py")
    assert " a\r\n-b\x0cc\n+B\x0cc\n" in patch
    assert patch.startswith("--- a/dir/x.py\n+++ b/dir/x.py\n")


# --------------------------------------------------------------------------- the installed entry point


def _entry_point() -> Optional[str]:
    scripts = Path(sys.executable).parent
    for name in ("ddp-migrate", "ddp-migrate.exe"):
        if (scripts / name).exists():
            return str(scripts / name)
    return shutil.which("ddp-migrate")


@pytest.mark.skipif(_entry_point() is None, reason="ddp-migrate is not installed")
def test_installed_entry_point_runs_as_a_subprocess(tmp_path):
    exe = _entry_point()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
    (tmp_path / "a.py").write_bytes(SCRIPT.replace("\n", "\r\n").encode())
    (tmp_path / "old.py").write_text(PY2)

    version = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and version.stdout.strip() == f"ddp-migrate {migrator.__version__}"

    printed = subprocess.run([exe, "a.py"], cwd=tmp_path, capture_output=True, env=env)
    assert printed.returncode == 0
    assert printed.stdout == real_migrate(SCRIPT.replace("\n", "\r\n")).code.encode()

    checked = subprocess.run([exe, "--check", "a.py", "old.py"], cwd=tmp_path, capture_output=True, text=True, env=env)
    expected = 0
    if real_migrate(SCRIPT.replace("\n", "\r\n")).changed:
        expected |= 1
    try:
        real_migrate(PY2)
    except SourceParseError as exc:
        expected |= 2
        assert f"old.py:{exc.line}:{exc.col}: cannot parse: " in checked.stderr
    assert checked.returncode == expected, checked.stderr
    assert "Traceback" not in checked.stderr
    assert (tmp_path / "old.py").read_text() == PY2

    missing = subprocess.run([exe, "nope.py"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert missing.returncode == 2
    assert missing.stderr == "nope.py: no such file or directory\n"


# --------------------------------------------------------------------------- launcher files

from migrator import files as files_module  # noqa: E402
from migrator.launcher import migrate_launcher  # noqa: E402

LAUNCH_SH = "#!/bin/bash\nset -e\npython -m torch.distributed.launch --nproc_per_node=2 --use_env train.py\n"
LAUNCH_SH_MIGRATED = "#!/bin/bash\nset -e\ntorchrun --nproc_per_node=2 train.py\n"
LAUNCH_TREE = {
    "train.py": SCRIPT,
    "scripts/dist_train.sh": LAUNCH_SH,
    "Makefile": "train:\n\tpython -m torch.distributed.launch --nproc_per_node=2 train.py\n",
    "Dockerfile": 'CMD ["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "train.py"]\n',
    ".github/workflows/ci.yml": "steps:\n  - run: python -m torch.distributed.launch --nproc_per_node=2 train.py\n",
    "README.md": "```bash\npython -m torch.distributed.launch --nproc_per_node=2 train.py\n```\n",
    "docs/index.rst": "Nothing to launch here.\n",
    "bin/launch": "#!/usr/bin/env bash\npython -m torch.distributed.launch --nproc_per_node=2 train.py\n",
    "bin/not_executable": "#!/usr/bin/env bash\npython -m torch.distributed.launch --nproc_per_node=2 train.py\n",
    "notes.txt": "python -m torch.distributed.launch --nproc_per_node=2 train.py\n",
    "generated/run.sh": LAUNCH_SH,
    ".gitignore": "generated/\n",
}


def _launch_tree(root: Path) -> None:
    for name, text in LAUNCH_TREE.items():
        write(root / name, text)
    (root / "bin" / "launch").chmod(0o755)
    (root / "bin" / "not_executable").chmod(0o644)


def test_a_directory_walk_takes_launcher_files(project):
    _launch_tree(project)
    found = [files_module.display_path(p) for p in files_module.discover([Path(".")])]
    assert found == [
        ".github/workflows/ci.yml",
        "Dockerfile",
        "Makefile",
        "README.md",
        "bin/launch",
        "docs/index.rst",
        "scripts/dist_train.sh",
        "train.py",
    ]
    assert [files_module.source_kind(Path(p)) for p in found] == [
        "yaml", "docker", "make", "markdown", "shell", "rst", "shell", "python"
    ]  # fmt: skip


def test_check_of_a_directory_routes_launcher_files_to_the_launcher(project, fake_engine):
    _launch_tree(project)
    result = invoke("--check", ".")
    assert result.exit_code == 1
    err = lines(result.stderr)
    assert "scripts/dist_train.sh:3:1: DDP201 [*] `python -m torch.distributed.launch` becomes `torchrun`" in err
    assert "scripts/dist_train.sh:3:55: DDP202 [*] `--use_env` dropped: torchrun always sets LOCAL_RANK" in err
    assert "would migrate bin/launch" in err and "would migrate Dockerfile" in err
    assert "train.py:5:10: DDP001 [*] replaced single_gpu" in err  # Python still goes to the Python engine
    assert err[-1] == "7 files would be migrated, 1 left unchanged"
    assert (project / "scripts" / "dist_train.sh").read_text() == LAUNCH_SH


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_launcher_diff_applies_with_git_apply(project, fake_engine):
    _git(project, "init", "-q")
    _git(project, "config", "core.autocrlf", "false")
    _launch_tree(project)
    crlf = project / "scripts" / "crlf.sh"
    crlf.write_bytes(LAUNCH_SH.replace("\n", "\r\n").encode())
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file() and ".git" not in p.parts}

    result = invoke("--diff", "--color", "never", ".")
    assert result.exit_code == 0, result.stderr
    sh_patch = unified_diff(LAUNCH_SH, LAUNCH_SH_MIGRATED, "scripts/dist_train.sh")
    assert sh_patch in result.stdout
    (project / "launch.patch").write_bytes(result.stdout_bytes)
    _git(project, "apply", "launch.patch")

    assert crlf.read_bytes() == LAUNCH_SH_MIGRATED.replace("\n", "\r\n").encode()
    for path, data in before.items():
        name = files_module.display_path(path.relative_to(project))
        kind = files_module.source_kind(path)
        if name in ("train.py", "scripts/crlf.sh") or kind in (None, "python") or name.startswith("generated/"):
            continue
        if name == "bin/not_executable":
            assert path.read_bytes() == data
            continue
        assert path.read_text() == migrate_launcher(data.decode(), kind).code, name


def test_in_place_rewrites_a_launcher_file_keeping_bom_crlf_and_mode(project):
    path = project / "run.sh"
    data = b"\xef\xbb\xbf" + LAUNCH_SH.replace("\n", "\r\n").encode() + "echo caf\u00e9\r\n".encode()
    path.write_bytes(data)
    path.chmod(0o750)
    result = invoke("--in-place", "run.sh")
    assert result.exit_code == 0
    migrated = b"\xef\xbb\xbf" + LAUNCH_SH_MIGRATED.replace("\n", "\r\n").encode() + "echo caf\u00e9\r\n".encode()
    assert path.read_bytes() == migrated
    assert path.stat().st_mode & 0o777 == 0o750
    assert stream_lines(result.stderr)[-2:] == ["migrated run.sh", "1 file migrated"]
    assert lines(invoke("--in-place", "run.sh").stderr) == ["1 file left unchanged"]


def test_print_mode_prints_the_migrated_launcher_file(project):
    write(project / "Makefile", LAUNCH_TREE["Makefile"])
    result = invoke("Makefile")
    assert result.exit_code == 0
    assert result.stdout == "train:\n\ttorchrun --nproc_per_node=2 train.py\n"


def test_launcher_decline_is_a_diagnostic_line(project):
    write(project / "run.sh", 'python -m torch.distributed.launch "$@"\n')
    result = invoke("--check", "run.sh")
    assert result.exit_code == 1  # nothing would change, but the launch command needs a human
    (finding, summary) = stream_lines(result.stderr)
    assert finding.startswith("run.sh:1:11: DDP204 launch left as it is: the launcher's arguments come from \"$@\"")
    assert summary == "1 file needs a human"
    assert invoke("--check", "--exit-zero", "run.sh").exit_code == 0


def test_explicit_file_of_no_known_kind_is_an_error(project, fake_engine):
    write(project / "notes.txt", LAUNCH_TREE["notes.txt"])
    write(project / "a.py", SCRIPT)
    result = invoke("--in-place", "notes.txt", "a.py")
    assert result.exit_code == 2
    assert lines(result.stderr)[0] == (
        "notes.txt: not a Python script (a .py file, or one whose first line is a python shebang) or a launcher file "
        "(shell, Makefile, Dockerfile, YAML, Markdown, reST, notebook)"
    )
    assert lines(result.stderr)[-1] == "1 file migrated, 1 failed"
    assert (project / "notes.txt").read_text() == LAUNCH_TREE["notes.txt"]
    assert (project / "a.py").read_text() == SCRIPT.replace(MARKER, MIGRATED)


def test_explicit_extensionless_file_is_python_with_a_python_shebang(project, fake_engine):
    write(project / "train", "#!/usr/bin/env python3\n" + SCRIPT)
    write(project / "launch", LAUNCH_SH)  # a shebang: shell, executable or not
    result = invoke("--check", "train", "launch")
    assert result.exit_code == 1
    err = lines(result.stderr)
    assert "train:6:10: DDP001 [*] replaced single_gpu" in err
    assert "launch:3:1: DDP201 [*] `python -m torch.distributed.launch` becomes `torchrun`" in err


@pytest.mark.parametrize("name, text", [("LICENSE", "MIT License\n\nCopyright (c) 2026\n"), ("train", SCRIPT)],
                         ids=["license", "python-without-shebang"])
def test_explicit_extensionless_file_without_a_shebang_is_one_line_and_exit_2(project, fake_engine, name, text):
    write(project / name, text)
    result = invoke("--check", name)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert lines(result.stderr) == [
        f"{name}: not a Python script (a .py file, or one whose first line is a python shebang) or a launcher file "
        "(shell, Makefile, Dockerfile, YAML, Markdown, reST, notebook)",
        "1 file failed",
    ]


def test_the_walk_takes_executable_scripts_with_a_python_shebang(project, fake_engine):
    import stat

    script = write(project / "tools" / "train", "#!/usr/bin/env python3\n" + SCRIPT)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    plain = write(project / "tools" / "notes", "#!/usr/bin/env python3\n" + SCRIPT)  # not executable: as identify
    write(project / "LICENSE", "MIT License\n")
    assert plain.stat().st_mode & stat.S_IXUSR == 0
    result = invoke("--check", ".")
    assert "tools/train:6:10: DDP001 [*] replaced single_gpu" in lines(result.stderr)
    assert not any(line.startswith(("tools/notes", "LICENSE")) for line in lines(result.stderr))
    shown = invoke("--show-files", ".").stdout.splitlines()
    assert "tools/train: python" in shown and not any(line.startswith(("tools/notes", "LICENSE")) for line in shown)


def test_launcher_file_that_is_not_utf8_is_a_parse_error(project):
    (project / "run.sh").write_bytes(b"echo hi\necho caf\xe9\n")
    write(project / "ok.sh", LAUNCH_SH)
    result = invoke("--check", "run.sh", "ok.sh")
    assert result.exit_code == 3
    assert "run.sh:2:8: cannot parse: byte(s) e9 are not valid utf-8" in lines(result.stderr)


# --------------------------------------------------------------------------- inline suppression (real engine)

from migrator.rules import RULES_BY_CODE  # noqa: E402

WRAP_EXAMPLE = RULES_BY_CODE["DDP003"].examples[0].before


def _line_of(source: str, code: str) -> int:
    return next(c.line for c in real_migrate(source).changes if c.code == code)


def _with_comment(source: str, line: int, comment: str) -> str:
    rows = source.split("\n")
    rows[line - 1] += "  " + comment
    return "\n".join(rows)


def test_a_suppressed_fix_turns_its_rule_off_for_the_file():
    line = _line_of(WRAP_EXAMPLE, "DDP003")
    source = _with_comment(WRAP_EXAMPLE, line, "# ddp-migrate: ignore[DDP003]")
    result = real_migrate(source)
    assert "DDP003" not in [c.code for c in result.changes]
    assert result.code == real_migrate(source, Options(ignore=("DDP003",))).code  # consistent: the engine's own output
    assert "DDP001" in [c.code for c in result.changes]  # other rules still apply
    ast.parse(result.code)


def test_check_honours_suppressions_like_migrate():
    """api.check (plain --check) reruns with the rule off, as migrate() does: same verdict."""
    from migrator.api import check

    line = _line_of(WRAP_EXAMPLE, "DDP003")
    for comment in ("# ddp-migrate: ignore[DDP003]", "# ddp-migrate: ignore"):
        source = _with_comment(WRAP_EXAMPLE, line, comment)
        checked, migrated = check(source), real_migrate(source)
        assert checked.code == source
        assert (checked.changed, checked.changes, checked.diagnostics) == (
            migrated.changed,
            migrated.changes,
            migrated.diagnostics,
        )
    assert "DDP003" not in [c.code for c in check(_with_comment(WRAP_EXAMPLE, line, "# ddp-migrate: ignore[DDP003]")).changes]


@pytest.mark.parametrize(
    "comment",
    ["# ddp-migrate: ignore[wrap-model]", "# ddp-migrate: ignore[DDP0]", "# ddp-migrate: ignore", "#ddp-migrate:ignore[ddp003, DDP999]"],
    ids=["name", "prefix", "bare", "spacing-case-unknown"],
)
def test_suppression_accepts_codes_prefixes_names_and_bare(comment):
    line = _line_of(WRAP_EXAMPLE, "DDP003")
    result = real_migrate(_with_comment(WRAP_EXAMPLE, line, comment))
    assert "DDP003" not in [c.code for c in result.changes]


def test_a_directive_elsewhere_or_in_a_string_suppresses_nothing():
    line = _line_of(WRAP_EXAMPLE, "DDP003")
    other_line = _with_comment(WRAP_EXAMPLE, line + 1, "# ddp-migrate: ignore[DDP003]")
    assert "DDP003" in [c.code for c in real_migrate(other_line).changes]
    from migrator import suppress

    in_strings = 'x = "# ddp-migrate: ignore"\ny = """\n# ddp-migrate: ignore\n"""  # ddp-migrate: ignore[DDP0, x]\n'
    assert suppress.python_suppressions(in_strings) == {4: frozenset({"DDP0", "x"})}
    other_code = _with_comment(WRAP_EXAMPLE, line, "# ddp-migrate: ignore[DDP010]")
    assert "DDP003" in [c.code for c in real_migrate(other_code).changes]


def test_a_suppressed_diagnostic_is_dropped_on_its_line_only():
    rule = next(r for r in migrator.RULES if r.code.startswith("DDP1") and r.examples and r.examples[0].diagnostics)
    source = rule.examples[0].before
    found = [d for d in real_migrate(source).diagnostics if d.code == rule.code]
    assert found
    silenced = _with_comment(source, found[0].line, f"# ddp-migrate: ignore[{rule.code}]")
    left = [d for d in real_migrate(silenced).diagnostics if d.code == rule.code]
    assert [d.line for d in left] == [d.line for d in found[1:]]


def test_suppression_in_a_launcher_file(project):
    script = "#!/bin/bash\npython -m torch.distributed.launch --nproc_per_node=2 train.py --local_rank=0  # ddp-migrate: ignore[DDP203]\n"
    write(project / "run.sh", script)
    result = invoke("--check", "run.sh")
    assert "DDP203" not in result.stderr and "DDP201" in result.stderr
    assert "--local_rank=0" in invoke("run.sh").stdout
    write(project / "all.sh", "python -m torch.distributed.launch --use_env train.py # ddp-migrate: ignore\n")
    assert invoke("--check", "all.sh").exit_code == 0


# --------------------------------------------------------------------------- --list-rules, --explain


def test_list_rules_plain_when_piped():
    result = invoke("--list-rules")
    assert result.exit_code == 0
    rows = lines(result.stdout)
    assert rows[0].split() == ["code", "name", "fixable", "summary"]
    assert len(rows) == 1 + len(migrator.RULES)
    for row, rule in zip(rows[1:], migrator.RULES):
        assert row.split()[:3] == [rule.code, rule.name, "yes" if rule.fixable else "no"]
        assert row.endswith(rule.summary)
    assert "\x1b[" not in result.stdout


def test_list_rules_is_a_table_on_a_terminal():
    result = invoke("--list-rules", "--color", "always")
    assert result.exit_code == 0
    assert "\x1b[" in result.stdout and "DDP003" in result.stdout


@pytest.mark.parametrize("wanted", ["DDP003", "ddp003", "wrap-model"])
def test_explain_prints_the_rules_own_text(wanted):
    result = invoke("--explain", wanted)
    assert result.exit_code == 0
    assert result.stdout == RULES_BY_CODE["DDP003"].explain()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--explain", "DDP999"], "Error: --explain: unknown rule code or name 'DDP999'"),
        (["--explain", "DDP0"], "Error: --explain: 'DDP0' is a prefix of several rules; give one code or name"),
    ],
)
def test_explain_unknown_is_a_one_line_usage_error(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    (line,) = lines(result.stderr)
    assert line.startswith(message)


def test_explain_fences_use_the_rules_example_language():
    rule = dataclasses.replace(RULES_BY_CODE["DDP003"], example_language="text")
    assert "```text\n" in rule.explain() and "```python" not in rule.explain()
    assert "```python\n" in RULES_BY_CODE["DDP003"].explain()
    assert "```bash\n" in RULES_BY_CODE["DDP201"].explain()  # launcher rules' examples are shell


@pytest.mark.parametrize("args", [["--list-rules", "a.py"], ["--explain", "DDP003", "a.py"], ["--list-rules", "--explain", "DDP003"]])
def test_list_rules_and_explain_go_alone(project, args):
    write(project / "a.py", SCRIPT)
    assert invoke(*args).exit_code == 2


def test_no_path_is_a_usage_error():
    result = invoke()
    assert result.exit_code == 2
    assert "Missing argument 'PATH...'" in result.stderr


# --------------------------------------------------------------------------- colour without rich


def test_findings_are_coloured_with_plain_ansi():
    import io

    from migrator import render

    stream = io.StringIO()
    console = render.make_console("always", file=stream)
    render.print_change(console, "a.py", Change("DDP003", 3, 5, "wrapped"))
    assert stream.getvalue() == "\x1b[1ma.py:3:5:\x1b[0m \x1b[1;31mDDP003\x1b[0m \x1b[36m[*]\x1b[0m wrapped\n"
    plain = io.StringIO()
    render.print_change(render.make_console("never", file=plain), "a.py", Change("DDP003", 3, 5, "wrapped"))
    assert plain.getvalue() == "a.py:3:5: DDP003 [*] wrapped\n"


@pytest.mark.parametrize(
    "env, tty, styled",
    [
        ({}, True, True),
        ({}, False, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"FORCE_COLOR": "1"}, False, True),
        ({"TERM": "dumb"}, True, False),
        ({"TTY_COMPATIBLE": "0"}, True, False),
        ({"TTY_COMPATIBLE": "1"}, False, True),
    ],
)
def test_auto_colour_follows_the_environment(monkeypatch, env, tty, styled):
    import io

    from migrator import render

    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    class Stream(io.StringIO):
        def isatty(self):
            return tty

    assert render.make_console("auto", file=Stream()).styled is styled


# --------------------------------------------------------------------------- start-up: nothing heavy for irrelevant files

HEAVY = (
    "libcst", "rich", "pathspec", "migrator.api", "migrator.rules", "migrator.launcher", "tomllib", "concurrent.futures",
    "yaml", "markdown_it",
)  # fmt: skip

PROBE = """
import sys
from migrator.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(code, [name for name in {heavy!r} if name in sys.modules], file=sys.stderr)
"""


def _heavy_imports(cwd: Path, *args: str):
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
    probe = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], cwd=cwd, capture_output=True, text=True, env=env
    )
    code, loaded = probe.stderr.strip().splitlines()[-1].split(" ", 1)
    return int(code), ast.literal_eval(loaded), probe.stderr


def test_a_commit_of_irrelevant_files_imports_no_engine(project):
    (project / ".git").mkdir()
    write(project / "pyproject.toml", '[project]\nname = "x"\n')
    write(project / "util.py", "import os\n\nprint(os.getcwd())\n")
    write(project / "notes.md", "# Notes\n\nRun `python train.py`.\n")
    write(project / "run.sh", "#!/bin/bash\npython train.py\n")
    code, loaded, stderr = _heavy_imports(project, "--check", "util.py")
    assert (code, loaded) == (0, []), stderr
    code, loaded, stderr = _heavy_imports(project, "--check", "--force-exclude", "util.py", "notes.md", "run.sh")
    assert code == 0 and not set(loaded) & {"libcst", "rich", "pathspec", "migrator.api", "migrator.rules", "yaml", "markdown_it"}, stderr


def test_a_relevant_file_loads_the_engine(project):
    write(project / "train.py", SCRIPT)
    code, loaded, stderr = _heavy_imports(project, "--check", "train.py")
    assert "libcst" in loaded and "rich" not in loaded, stderr


# --------------------------------------------------------------------------- --jobs

ROOT = Path(__file__).resolve().parent.parent


def _jobs_tree(root: Path) -> List[str]:
    """Real fixtures (enough to start a pool), a launcher file, a clean and a broken file."""
    names = []
    inputs = sorted((ROOT / "fixtures").glob("*/input.py"), key=lambda p: (p.stat().st_size, p.parent.name))
    for script in inputs[: cli_module.POOL_MIN_FILES + 1]:  # the smallest: the test is about order, not speed
        name = f"{script.parent.name}.py"
        (root / name).write_bytes(script.read_bytes())
        names.append(name)
    write(root / "run.sh", LAUNCH_SH)
    write(root / "clean.py", CLEAN)
    write(root / "old.py", PY2_TRAINING)  # fails to parse: the exit code adds 2
    return names


@pytest.mark.parametrize("flags", [["--check", "--diff"], ["--check", "--output-format", "json"]], ids=str)
def test_jobs_output_is_identical_to_one_job(project, monkeypatch, flags):
    assert len(_jobs_tree(project)) >= cli_module.POOL_MIN_FILES
    pools = []
    real_pool = cli_module._pool
    monkeypatch.setattr(cli_module, "_pool", lambda n, warm=False: pools.append(n) or real_pool(n, warm))
    one = invoke(*flags, "--jobs", "1", ".")
    assert pools == []
    many = invoke(*flags, "--jobs", "3", ".")
    assert pools == [3]
    assert (many.exit_code, many.stdout_bytes, many.stderr) == (one.exit_code, one.stdout_bytes, one.stderr)
    assert one.exit_code == 3
    assert one.stdout.count("--- a/" if "--diff" in flags else '"changed": true') >= 3


def test_jobs_in_place_writes_the_same_files(project, tmp_path_factory, monkeypatch):
    names = _jobs_tree(project)
    other = tmp_path_factory.mktemp("other")
    _jobs_tree(other)
    one = invoke("--in-place", "--jobs", "1", ".")
    monkeypatch.chdir(other)
    many = invoke("--in-place", "--jobs", "4", ".")
    assert (many.exit_code, many.stderr) == (one.exit_code, one.stderr)
    for name in [*names, "run.sh", "clean.py", "old.py"]:
        assert (other / name).read_bytes() == (project / name).read_bytes(), name
