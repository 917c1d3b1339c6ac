"""Property tests (hypothesis), fast: no torch, no subprocess but two.

1. Composed training scripts (tests/script_blocks.py: real-world building blocks in every
   combination, plus noise). migrate() never raises; the output parses; a second run changes
   nothing; it sets up and tears down one process group and wraps one DDP model, with no
   DataParallel left; class/def lines, comments and lines far from any change survive.
2. Mutated fixtures (truncated, junk bytes incl. NUL and invalid UTF-8, broken indentation,
   a deleted colon/bracket). The CLI (`ddp-migrate --in-place`) never shows a traceback, exits
   0/1/2, leaves the file byte-identical when it fails and writes only code that parses;
   migrate() returns or raises a MigrateError (SourceParseError with line >= 0), nothing else.

Every test is derandomized (a fixed sequence of examples), so CI sees the same inputs each run.
"""
from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Set, Tuple

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fixture_cases
import script_blocks
from migrator import MigrateError, SourceParseError, migrate
from migrator.api import check
from migrator.cli import cli

PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

NEAR = 4  # lines either side of a change that the engine may legitimately rewrite or drop


# --------------------------------------------------------------------------- helpers
def _call_names(tree: ast.AST) -> List[str]:
    """The called name of every call: `f(...)` -> "f", `a.b.f(...)` -> "f"."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name):
                names.append(func.id)
            elif isinstance(func, ast.Attribute):
                names.append(func.attr)
    return names


def _stripped_lines(text: str) -> Set[str]:
    return {line.strip() for line in text.splitlines() if line.strip()}


def _dp_names(source: str) -> Set[str]:
    """Names the script calls DataParallel by."""
    names = {"DataParallel"}
    if "DataParallel as DP" in source:
        names.add("DP")
    return names


# --------------------------------------------------------------------------- property 1
@PROPERTY_SETTINGS
@given(script=script_blocks.scripts())
def test_composed_script_migrates_cleanly(script: script_blocks.Script) -> None:
    source = script.source
    compile(source, "<composed>", "exec")  # the generator's own invariant

    result = migrate(source)  # must not raise: composed scripts are valid Python 3
    out = result.code
    try:
        tree = ast.parse(out)
    except SyntaxError as exc:  # pragma: no cover - reported with the output
        pytest.fail(f"the migrated script does not parse: {exc}\n----- output -----\n{out}")

    checked = check(source)  # what --check reports: the same verdict, no code generated
    assert (checked.changed, checked.changes, checked.diagnostics) == (result.changed, result.changes, result.diagnostics)

    assert not check(out).changed, "--check after a migration would still report changes"
    again = migrate(out)
    assert again.code == out, (
        "a second run changed the migrated script (not idempotent); changes: "
        f"{[(c.code, c.line, c.message) for c in again.changes]}\n----- first output -----\n{out}"
        f"\n----- second output -----\n{again.code}")

    calls = _call_names(tree)
    # One setup: init_process_group for torchrun, and its world-of-one twin on an in-process store.
    assert calls.count("init_process_group") == 2 and calls.count("HashStore") == 1, (
        f"init_process_group calls: {calls.count('init_process_group')}\n{out}")
    wraps = calls.count("DDP") + calls.count("DistributedDataParallel")
    assert wraps == 1, f"DDP(...) wraps: {wraps}\n{out}"
    assert calls.count("destroy_process_group") >= 1, f"no destroy_process_group call\n{out}"
    untraced = any(d.code == "DDP108" for d in result.diagnostics)
    assert calls.count("DistributedSampler") >= 1 or untraced, (
        f"the training loader is neither sharded nor reported (DDP108)\n{out}")
    left = [name for name in calls if name in _dp_names(source)]
    assert not left, f"DataParallel still called ({left})\n{out}"

    kept = _stripped_lines(out)
    for line in source.splitlines():
        s = line.strip()
        if s.startswith(("class ", "def ")):
            assert s in kept, f"{s!r} is gone from the output\n{out}"
    for comment in script.comments:
        assert any(comment in k for k in kept), f"comment {comment!r} is gone from the output\n{out}"

    near: Set[int] = set()
    for change in result.changes:
        near.update(range(change.line - NEAR, change.line + NEAR + 1))
    lost = [(n, line.strip()) for n, line in enumerate(source.splitlines(), 1)
            if n not in near and len(line.strip()) > 3 and line.strip() not in kept
            # an import of DataParallel goes once nothing calls it any more
            and not (line.lstrip().startswith(("import ", "from ")) and "DataParallel" in line)]
    assert not lost, (f"lines far from every change are gone from the output: {lost}\n"
                      f"changes at lines {sorted(c.line for c in result.changes)}\n----- output -----\n{out}")


# --------------------------------------------------------------------------- property 2
FIXTURE_INPUTS: List[Tuple[str, bytes]] = [
    (case.name, case.input_path.read_bytes()) for case in fixture_cases.discover()
]

JUNK = st.one_of(
    st.sampled_from([b"\x00", b"\xff", b"\xc3\x28", b"\x80\x80", b"\xef\xbb\xbf", b"\r", b"\t", b"\\",
                     b"'''", b'"', b"\x1a", b"\xe2\x82", b"\x0c", b"\xed\xa0\x80", b"# -*- coding: latin-1 -*-\n"]),
    st.binary(min_size=1, max_size=8),
)


@st.composite
def mutated_fixtures(draw) -> Tuple[str, bytes, List[str]]:
    name, data = draw(st.sampled_from(FIXTURE_INPUTS))
    log: List[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "junk", "indent", "delete"]))
        if kind == "truncate":
            pos = draw(st.integers(0, len(data)))
            data = data[:pos]
            log.append(f"truncate at {pos}")
        elif kind == "junk":
            pos = draw(st.integers(0, len(data)))
            junk = draw(JUNK)
            data = data[:pos] + junk + data[pos:]
            log.append(f"insert {junk!r} at {pos}")
        elif kind == "indent":
            lines = data.split(b"\n")
            i = draw(st.integers(0, max(len(lines) - 1, 0)))
            how = draw(st.sampled_from(["space", "tab", "dedent", "indent4"]))
            line = lines[i]
            lines[i] = {"space": b" " + line, "tab": b"\t" + line, "dedent": line.lstrip(b" \t"),
                        "indent4": b"    " + line}[how]
            data = b"\n".join(lines)
            log.append(f"{how} line {i + 1}")
        else:
            spots = [i for i, b in enumerate(data) if b in b":()[]{}"]
            if spots:
                pos = draw(st.sampled_from(spots))
                log.append(f"delete {data[pos:pos + 1]!r} at {pos}")
                data = data[:pos] + data[pos + 1:]
    return name, data, log


def _check_cli_outcome(code: int, output: str, before: bytes, after: bytes, what: str) -> None:
    assert "Traceback" not in output, f"{what}: traceback in the output:\n{output}"
    assert code in (0, 1, 2), f"{what}: exit status {code}\n{output}"
    if code & 2:
        assert after == before, f"{what}: exit status {code} (failed) but the file was rewritten\n{output}"
    if after != before:
        try:
            ast.parse(after)
        except (SyntaxError, ValueError) as exc:
            pytest.fail(f"{what}: the tool wrote a file that does not parse ({exc})\n{output}")


def _describe(name: str, log: List[str]) -> str:
    return f"fixture {name} mutated by {log}"


@PROPERTY_SETTINGS
@given(case=mutated_fixtures())
def test_mutated_fixture_cli_fails_cleanly(case: Tuple[str, bytes, List[str]]) -> None:
    name, data, log = case
    with tempfile.TemporaryDirectory(prefix="ddp_prop_") as tmp:
        path = Path(tmp) / "train.py"
        path.write_bytes(data)
        result = CliRunner().invoke(cli, ["--in-place", str(path)], catch_exceptions=True)
        output = result.output
        try:  # click >= 8.2 keeps stderr apart as well; older versions mix it into output
            output += result.stderr
        except ValueError:
            pass
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            pytest.fail(f"{_describe(name, log)}: the CLI raised {result.exception!r}\n{output}")
        _check_cli_outcome(result.exit_code, output, data, path.read_bytes(), _describe(name, log))


@PROPERTY_SETTINGS
@given(case=mutated_fixtures())
def test_mutated_fixture_api_raises_only_migrate_errors(case: Tuple[str, bytes, List[str]]) -> None:
    name, data, log = case
    text = data.decode("utf-8", errors="replace")
    try:
        result = migrate(text)
    except SourceParseError as exc:
        assert exc.line >= 0 and exc.col >= 0, f"{_describe(name, log)}: {exc!r} at line {exc.line}"
        return
    except MigrateError as exc:
        assert getattr(exc, "line", 0) >= 0, f"{_describe(name, log)}: {exc!r}"
        return
    if result.changed:
        try:
            ast.parse(result.code)
        except (SyntaxError, ValueError) as exc:
            pytest.fail(f"{_describe(name, log)}: migrate() returned code that does not parse ({exc})")


def _cli_command() -> Optional[List[str]]:
    exe = shutil.which("ddp-migrate", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                            os.environ.get("PATH", "")]))
    return [exe] if exe else [sys.executable, "-m", "migrator"]


@settings(PROPERTY_SETTINGS, max_examples=3)
@given(case=mutated_fixtures())
def test_mutated_fixture_cli_subprocess(case: Tuple[str, bytes, List[str]]) -> None:
    """The same as the CliRunner property, through a real process (entry point, exit status)."""
    name, data, log = case
    with tempfile.TemporaryDirectory(prefix="ddp_prop_") as tmp:
        path = Path(tmp) / "train.py"
        path.write_bytes(data)
        proc = subprocess.run(_cli_command() + ["--in-place", str(path)], capture_output=True, text=True,
                              errors="replace", timeout=120, stdin=subprocess.DEVNULL)
        _check_cli_outcome(proc.returncode, proc.stdout + proc.stderr, data, path.read_bytes(),
                           _describe(name, log))
