"""Issue 6: stdin, files the walk must pass over, write failures, round trips through the real
engine, the end-of-run summary and the progress bar. Fast; no torch."""
from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

from migrator import files, render
from migrator.api import migrate as real_migrate
from migrator.output import FileOutcome, summarize
from migrator.types import Change, Diagnostic
from tests.test_cli import (  # noqa: F401 - fixtures
    MARKER,
    MIGRATED,
    SCRIPT,
    fake_engine,
    invoke,
    project,
    stream_lines,
    summary_block,
    write,
)

TRAIN = """\
# -*- coding: {cookie} -*-
import torch
import torch.nn as nn


def main():
    # caf\u00e9: a comment the migration leaves alone
    model = nn.DataParallel(nn.Linear(4, 4)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        loss = model(torch.randn(8, 4)).sum()
{indent}opt.zero_grad()
{indent}loss.backward()
{indent}opt.step()
    torch.save(model.state_dict(), "ckpt.pt")


if __name__ == "__main__":
    main()
"""


def _train(cookie: str = "utf-8", indent: str = "        ") -> str:
    return TRAIN.format(cookie=cookie, indent=indent)


def _untouched(before: bytes, after: bytes, newline: bytes) -> Tuple[List[bytes], List[bytes]]:
    """The lines of `before` that are not part of any diff hunk, and those lines as found in `after`."""
    import difflib

    old = before.split(newline)
    new = after.split(newline)
    kept_old: List[bytes] = []
    kept_new: List[bytes] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
        if tag == "equal":
            kept_old += old[i1:i2]
            kept_new += new[j1:j2]
    return kept_old, kept_new


# --------------------------------------------------------------------------- round trips, real engine


ROUND_TRIPS = {
    "crlf": (_train().replace("\n", "\r\n").encode("utf-8"), b"\r\n", "utf-8"),
    "bom": (b"\xef\xbb\xbf" + _train().encode("utf-8"), b"\n", "utf-8"),
    "latin-1 cookie": (_train("latin-1").encode("latin-1"), b"\n", "latin-1"),
    "tabs": (_train(indent="\t\t").replace("    ", "\t").encode("utf-8"), b"\n", "utf-8"),
    "no final newline": (_train().rstrip("\n").encode("utf-8"), b"\n", "utf-8"),
}


@pytest.mark.parametrize("data, newline, encoding", list(ROUND_TRIPS.values()), ids=list(ROUND_TRIPS))
def test_real_engine_in_place_keeps_untouched_lines_newlines_and_encoding(project, data, newline, encoding):
    path = project / "train.py"
    path.write_bytes(data)
    path.chmod(0o640)
    result = invoke("--in-place", "train.py")
    assert result.exit_code == 0, result.stderr
    after = path.read_bytes()
    assert after != data  # it was migrated
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert after.startswith(b"\xef\xbb\xbf") == data.startswith(b"\xef\xbb\xbf")
    text = after.decode(encoding)  # still the file's encoding
    if encoding == "latin-1":
        assert "caf\u00e9" in text
    if newline == b"\r\n":
        assert after.count(b"\r\n") == after.count(b"\n")  # every new line is CRLF too
    else:
        assert b"\r" not in after
    assert after.endswith(newline) == data.endswith(newline)
    old, new = _untouched(data, after, newline)
    assert old == new and len(old) >= 5  # the lines the diff does not touch are byte-identical
    # Equal to the engine's own output on the decoded text; and a second run is a no-op.
    source = files.read_source(path)
    assert real_migrate(source.text).code == source.text
    assert invoke("--check", "train.py").exit_code == 0


@pytest.mark.parametrize("data", [b"", b"\n", b"# just a comment"], ids=["empty", "newline", "no-newline"])
def test_trivial_files_round_trip(project, data):
    path = project / "a.py"
    path.write_bytes(data)
    assert invoke("--in-place", "a.py").exit_code == 0
    assert path.read_bytes() == data


def test_a_large_file_round_trips_byte_for_byte(project):
    body = "".join(f"x_{i} = {i}  # torch\r\n" for i in range(20000))
    path = project / "big.py"
    path.write_bytes(body.encode())
    result = invoke("--check", "big.py")
    assert result.exit_code == 0
    assert path.read_bytes() == body.encode()


# --------------------------------------------------------------------------- stdin


def _invoke_stdin(data: bytes, *args: str):
    from click.testing import CliRunner

    from migrator import cli as cli_module
    from tests.test_cli import PLAIN_ENV

    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(cli_module.cli, list(args), input=data, env=PLAIN_ENV, catch_exceptions=False)


def test_dash_reads_stdin_and_prints_the_migration(project, fake_engine):
    result = _invoke_stdin(SCRIPT.encode(), "-")
    assert result.exit_code == 0
    assert result.stdout == SCRIPT.replace(MARKER, MIGRATED)
    assert stream_lines(result.stderr)[0] == "-:5:10: DDP001 [*] replaced single_gpu"


def test_stdin_filename_names_the_messages(project, fake_engine):
    result = _invoke_stdin(SCRIPT.encode(), "--check", "--stdin-filename", "src/train.py", "-")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert stream_lines(result.stderr)[0] == "src/train.py:5:10: DDP001 [*] replaced single_gpu"
    assert not (project / "src").exists()


def test_stdin_keeps_crlf_and_bom(project, fake_engine):
    data = b"\xef\xbb\xbf" + SCRIPT.replace("\n", "\r\n").encode()
    result = _invoke_stdin(data, "-")
    assert result.stdout_bytes == b"\xef\xbb\xbf" + SCRIPT.replace(MARKER, MIGRATED).replace("\n", "\r\n").encode()


def test_stdin_filename_picks_the_launcher(project):
    result = _invoke_stdin(b"python -m torch.distributed.launch --use_env train.py\n", "--stdin-filename", "run.sh", "-")
    assert result.exit_code == 0
    assert result.stdout.startswith("torchrun ")


def test_stdin_diff(project, fake_engine):
    result = _invoke_stdin(SCRIPT.encode(), "--diff", "--stdin-filename", "t.py", "-")
    assert "--- a/t.py" in result.stdout and f"+device = \"{MIGRATED}\"" in result.stdout


def test_stdin_parse_error_is_one_line(project, fake_engine):
    result = _invoke_stdin(b'import torch\nprint "x"\n', "-")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert stream_lines(result.stderr)[0].startswith("-:2:")


@pytest.mark.parametrize(
    "args", [("-", "a.py"), ("--in-place", "-"), ("--stdin-filename", "x.py", "a.py")], ids=["mixed", "in-place", "no-dash"]
)
def test_stdin_usage_errors(project, fake_engine, args):
    write(project / "a.py", SCRIPT)
    result = _invoke_stdin(b"", *args)
    assert result.exit_code == 2
    assert (project / "a.py").read_text() == SCRIPT


def test_stdin_through_a_subprocess(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")}
    source = "import torch\n\nprint(torch.__version__)\n"
    done = subprocess.run(
        [sys.executable, "-m", "migrator", "-"], input=source.encode(), capture_output=True, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == source.encode()


# --------------------------------------------------------------------------- the walk passes over


def test_walk_skips_binary_and_undecodable_files_with_a_note_under_verbose(project, fake_engine):
    write(project / "src" / "a.py", SCRIPT)
    (project / "src" / "blob.py").write_bytes(b"torch\x00\x01\x02" * 10)
    (project / "src" / "latin.py").write_bytes(b"import torch\nx = '\xe9'\n")  # no cookie: not UTF-8
    (project / "src" / "run.sh").write_bytes(b"python -m torch.distributed.launch \xff\n")
    quiet = invoke("--check", "src")
    assert quiet.exit_code == 1  # a.py would change; nothing failed
    assert "blob.py" not in quiet.stderr and "latin.py" not in quiet.stderr
    assert stream_lines(quiet.stderr)[-1] == "1 file would be migrated"
    verbose = invoke("--check", "-v", "src")
    assert verbose.exit_code == 1
    assert "src/blob.py: skipped: binary file (NUL bytes)" in verbose.stderr
    assert "src/latin.py: skipped: not text" in verbose.stderr
    assert "src/run.sh: skipped: not text" in verbose.stderr


def test_a_binary_file_named_on_the_command_line_is_still_an_error(project, fake_engine):
    (project / "bad.py").write_bytes(b"import torch\nx = '\xe9'\n")
    result = invoke("--check", "bad.py")
    assert result.exit_code == 2
    assert result.stderr.startswith("bad.py:2:")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_walk_does_not_follow_a_symlinked_file_out_of_the_tree(project, fake_engine):
    outside = write(project / "outside" / "secret.py", SCRIPT)
    write(project / "proj" / "a.py", SCRIPT)
    (project / "proj" / "link.py").symlink_to(outside)
    (project / "proj" / "inside.py").symlink_to(project / "proj" / "a.py")  # same file: deduplicated
    (project / "proj" / "linkdir").symlink_to(project / "outside", target_is_directory=True)
    skipped: List[Tuple[Path, str]] = []
    found = files.discover([Path("proj")], skipped=skipped)
    assert found == [Path("proj/a.py")]
    assert {path.name for path, _ in skipped} == {"link.py", "linkdir"}
    result = invoke("--in-place", "-v", "proj")
    assert outside.read_text() == SCRIPT
    assert "proj/link.py: skipped: symlink to a file outside the walked directory" in result.stderr


# --------------------------------------------------------------------------- writing fails


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
def test_a_read_only_file_is_one_line_and_the_run_continues(project, fake_engine):
    locked = write(project / "a.py", SCRIPT)
    locked.chmod(0o444)
    other = write(project / "b.py", SCRIPT)
    result = invoke("--in-place", "a.py", "b.py")
    assert result.exit_code == 2
    assert locked.read_text() == SCRIPT
    assert other.read_text() == SCRIPT.replace(MARKER, MIGRATED)
    assert "a.py: cannot write: the file is read-only" in stream_lines(result.stderr)
    assert "Traceback" not in result.stderr
    assert stat.S_IMODE(locked.stat().st_mode) == 0o444


def test_a_permission_error_on_write_is_one_line(project, fake_engine, monkeypatch):
    write(project / "a.py", SCRIPT)
    write(project / "b.py", SCRIPT)

    real_replace = os.replace

    def deny(src, dst, *args, **kwargs):
        if str(dst).endswith("a.py"):
            raise PermissionError(13, "Permission denied")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(files.os, "replace", deny)
    result = invoke("--in-place", "a.py", "b.py")
    assert result.exit_code == 2
    assert "a.py: cannot write: Permission denied" in stream_lines(result.stderr)
    assert (project / "a.py").read_text() == SCRIPT
    assert (project / "b.py").read_text() == SCRIPT.replace(MARKER, MIGRATED)
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- the end-of-run summary


def test_each_file_is_reported_once_by_default(project, fake_engine):
    """The finding lines, one line for a file that changes (how to run it), one summary line: no
    per-file block (that is -v)."""
    write(project / "a.py", SCRIPT + "# NOTE\n")
    write(project / "b.py", "import torch\n")
    result = invoke("--check", "a.py", "b.py")
    assert result.stderr.splitlines() == [
        "a.py:1:0: DDP102 fake note",
        "a.py:5:10: DDP001 [*] replaced single_gpu",
        "would migrate a.py",
        "1 file would be migrated, 1 left unchanged",
    ]


def test_verbose_adds_the_summary_block_per_file(project, fake_engine):
    write(project / "a.py", SCRIPT + "# NOTE\n")
    write(project / "b.py", "import torch\n")
    result = invoke("--check", "-v", "a.py", "b.py")
    rows = result.stderr.splitlines()
    assert rows[0] == "a.py:1:0: DDP102 fake note"  # the finding lines come first, as they were
    assert rows[-1] == "1 file would be migrated, 1 left unchanged"
    assert "would migrate a.py" not in rows  # the block says it
    block = summary_block(result.stderr)
    assert block[0] == "a.py: would be migrated"
    assert "    DDP001 process-group-setup x1" in block
    assert block[block.index("  needs a human:") + 1] == "    line 1: DDP102 fake note"
    assert block[block.index("  needs a human:") + 2].startswith("      hint: ")
    assert not any(line.startswith("b.py") for line in block)


@pytest.mark.parametrize("flags", [(), ("--diff",), ("--check",), ("--in-place",)], ids=["print", "diff", "check", "in-place"])
def test_summary_in_every_mode_with_the_real_engine(project, flags):
    write(project / "train.py", _train())
    expected = real_migrate(_train()).torchrun_commands("train.py")
    plain = stream_lines(invoke(*flags, "train.py").stderr)
    if flags:  # print mode shows the code on stdout, and no status line
        verb = "migrated" if flags == ("--in-place",) else "would migrate"
        assert f"{verb} train.py; check it: ddp-migrate verify train.py; run it: {expected[0]}" in plain
    write(project / "train.py", _train())  # --in-place wrote it
    result = invoke(*flags, "-v", "train.py")
    block = summary_block(result.stderr)
    verb = "migrated" if flags == ("--in-place",) else "would be migrated"
    assert block[0] == f"train.py: {verb}"
    assert "    DDP003 wrap-model x1" in block
    assert f"    one machine: {expected[0]}" in block
    assert f"    several machines: {expected[1]}" in block
    assert "    job file: ddp-migrate launch train.py --nodes <nodes> --gpus <gpus> --slurm" in block


def test_statistics_counts_findings_per_code(project, fake_engine):
    write(project / "a.py", SCRIPT + "# NOTE\n")
    write(project / "b.py", SCRIPT)
    result = invoke("--check", "--statistics", "a.py", "b.py")
    assert result.stderr.splitlines() == [
        "2\tDDP001\t[*] process-group-setup",
        "1\tDDP102\t    cuda-call-without-device",
        "2 files would be migrated",
    ]
    assert result.exit_code == 1
    assert invoke("--check", "--statistics", "--output-format", "json", "a.py").exit_code == 2


def test_quiet_has_no_summary_block(project, fake_engine):
    write(project / "a.py", SCRIPT)
    result = invoke("--check", "-q", "a.py")
    assert result.stderr == ""


def test_summary_is_a_rich_panel_on_colour(project, fake_engine):
    write(project / "a.py", SCRIPT + "# NOTE\n")
    result = invoke("--check", "-v", "--color", "always", "a.py")
    assert "╭" in result.stderr and "needs a human" in result.stderr
    assert "\x1b[" in result.stderr


def test_summarize_groups_changes_and_adds_hints():
    outcome = FileOutcome(
        "t.py",
        True,
        (Change("DDP012", 5, 0, "a"), Change("DDP003", 2, 0, "b"), Change("DDP012", 9, 0, "c")),
        (Diagnostic("DDP123", 3, 4, "batchnorm"),),
        launch=("torchrun x", "torchrun y"),
    )
    (summary,) = summarize([outcome, FileOutcome("same.py")])
    assert summary.changes == (("DDP003", "wrap-model", 1), ("DDP012", "rank-zero-checkpoint", 2))
    (item,) = summary.attention
    assert (item.line, item.code, item.message) == (3, "DDP123", "batchnorm")
    assert "SyncBatchNorm" in item.hint and item.summary
    assert summary.launch == ("torchrun x", "torchrun y")


# --------------------------------------------------------------------------- colour and progress


@pytest.mark.parametrize("value, styled", [("1", False), ("", True)], ids=["set", "empty"])
def test_no_color_in_auto_mode(monkeypatch, value, styled):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    for name in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setenv("NO_COLOR", value)
    assert render.make_console("auto", file=Tty()).styled is styled
    assert render.make_console("always", file=Tty()).styled  # an explicit flag wins


def test_progress_only_on_a_terminal_with_many_files(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    terminal = render.make_console("always", file=Tty(), stderr=True)
    piped = render.make_console("always", file=io.StringIO(), stderr=True)
    assert render.wants_progress(terminal, render.PROGRESS_MIN_FILES + 1)
    assert not render.wants_progress(terminal, render.PROGRESS_MIN_FILES)
    assert not render.wants_progress(piped, 100)
    bar = render.progress(terminal, 30)
    assert bar is not None
    for _ in range(30):
        bar.advance()
    bar.stop()


def test_many_files_piped_show_no_progress(project, fake_engine):
    for i in range(25):
        write(project / "src" / f"m{i:02}.py", SCRIPT)
    result = invoke("--check", "-q", "src")
    assert result.exit_code == 1 and result.stderr == ""
