"""--output-format json / github / sarif: the documented shapes, nothing else on stdout, same exit status."""
from __future__ import annotations

import json
from typing import Any, Dict

import pytest
from click.testing import CliRunner

from migrator import cli as cli_module
from migrator.api import migrate
from migrator.codes import NAMES
from migrator.output import JSON_VERSION
from migrator.rules import RULES, RULES_BY_CODE

WRAP_EXAMPLE = RULES_BY_CODE["DDP003"].examples[0].before
ADVISORY = next(rule for rule in RULES if rule.code.startswith("DDP1") and rule.examples)
LAUNCH = "#!/bin/bash\npython -m torch.distributed.launch --nproc_per_node=2 --use_env train.py\n"
PY2 = 'import torch\nimport torch.optim as optim\n\nopt = optim.SGD(model.parameters(), lr=0.1)\nprint "hello"\n'

PLAIN_ENV = {"FORCE_COLOR": None, "NO_COLOR": None, "TTY_COMPATIBLE": None, "TERM": "xterm", "COLUMNS": "80"}


def invoke(*args: str):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(cli_module.cli, list(args), env=PLAIN_ENV, catch_exceptions=False)


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(WRAP_EXAMPLE)
    (tmp_path / "advice.py").write_text(ADVISORY.examples[0].before)
    (tmp_path / "clean.py").write_text("import torch\n\nprint(torch.__version__)\n")
    (tmp_path / "old.py").write_text(PY2)
    (tmp_path / "run.sh").write_text(LAUNCH)
    return tmp_path


PATHS = ("advice.py", "clean.py", "old.py", "run.sh", "train.py")

# --------------------------------------------------------------------------- json

FILE_KEYS = {"path", "changed", "error", "findings", "changes_by_rule", "needs_human", "launch", "notes"}
BY_RULE_KEYS = {"code", "name", "count"}
HUMAN_KEYS = {"code", "line", "column", "message", "summary", "hint"}
FINDING_KEYS = {"code", "name", "line", "column", "message", "fixable", "kind"}
ERROR_KEYS = {"kind", "message", "line", "column"}
SUMMARY_KEYS = {"files", "changed", "unchanged", "needs_human", "failed", "skipped", "findings", "fixable", "in_place",
                "exit_code"}


def _validate(document: Dict[str, Any]) -> None:
    """The schema documented in docs/cli.md ("Output formats")."""
    assert set(document) == {"version", "files", "skipped", "notes", "summary"}
    assert document["version"] == JSON_VERSION == 1
    for entry in document["files"]:
        assert set(entry) == FILE_KEYS
        assert isinstance(entry["path"], str) and isinstance(entry["changed"], bool)
        if entry["error"] is not None:
            assert set(entry["error"]) == ERROR_KEYS
            assert entry["error"]["kind"] in ("parse", "file", "internal")
            assert isinstance(entry["error"]["message"], str)
        for row in entry["changes_by_rule"]:
            assert set(row) == BY_RULE_KEYS and isinstance(row["count"], int) and row["name"] == NAMES[row["code"]]
        for row in entry["needs_human"]:
            assert set(row) == HUMAN_KEYS and isinstance(row["hint"], str)
        assert all(isinstance(command, str) and command.startswith("torchrun ") for command in entry["launch"])
        for finding in entry["findings"]:
            assert set(finding) == FINDING_KEYS
            assert finding["kind"] in ("change", "diagnostic")
            assert finding["name"] == NAMES[finding["code"]]
            assert isinstance(finding["line"], int) and isinstance(finding["column"], int)
            assert isinstance(finding["fixable"], bool)
            if finding["kind"] == "change":
                assert finding["fixable"]
    assert set(document["summary"]) == SUMMARY_KEYS


def test_json_is_the_documented_schema_and_all_of_stdout(project):
    result = invoke("--check", "--output-format", "json", *PATHS)
    assert result.exit_code == 3  # something would change, and old.py does not parse
    document = json.loads(result.stdout)  # stdout is the document and nothing else
    _validate(document)
    assert result.stderr == ""
    by_path = {entry["path"]: entry for entry in document["files"]}
    assert list(by_path) == list(PATHS)

    expected = migrate(WRAP_EXAMPLE)
    train = by_path["train.py"]
    assert train["changed"] and train["error"] is None
    assert [(f["code"], f["line"], f["column"]) for f in train["findings"] if f["kind"] == "change"] == [
        (c.code, c.line, c.col) for c in expected.changes
    ]
    assert {row["code"]: row["count"] for row in train["changes_by_rule"]} == {
        code: sum(c.code == code for c in expected.changes) for code in {c.code for c in expected.changes}
    }
    assert train["launch"] == list(expected.torchrun_commands("train.py"))
    advice = by_path["advice.py"]
    assert [row["code"] for row in advice["needs_human"]] == [
        f["code"] for f in advice["findings"] if f["kind"] == "diagnostic"
    ]
    assert all(row["hint"] for row in advice["needs_human"])
    assert any(f["kind"] == "diagnostic" and f["code"] == ADVISORY.code and not f["fixable"] for f in advice["findings"])
    assert by_path["clean.py"] == {
        "path": "clean.py",
        "changed": False,
        "error": None,
        "findings": [],
        "changes_by_rule": [],
        "needs_human": [],
        "launch": [],
        "notes": [],
    }
    assert by_path["old.py"]["error"]["kind"] == "parse"
    assert by_path["old.py"]["error"]["line"] == 5
    assert by_path["old.py"]["error"]["message"].startswith("cannot parse: ")
    assert [f["code"] for f in by_path["run.sh"]["findings"]] == ["DDP201", "DDP202"]

    summary = document["summary"]
    assert summary["files"] == 5 and summary["failed"] == 1
    assert summary["changed"] == sum(entry["changed"] for entry in document["files"])
    assert summary["findings"] == sum(len(entry["findings"]) for entry in document["files"])
    assert summary["exit_code"] == 3 and summary["in_place"] is False


def test_json_keeps_code_off_stdout_in_every_mode(project):
    single = invoke("--output-format", "json", "train.py")  # print mode would print the source
    assert single.exit_code == 0
    _validate(json.loads(single.stdout))
    several = invoke("--output-format", "json", "train.py", "run.sh")  # diff mode would print diffs
    _validate(json.loads(several.stdout))
    assert "--- a/" not in several.stdout


def test_json_with_in_place_writes_and_says_so(project):
    result = invoke("--in-place", "--output-format", "json", "train.py")
    document = json.loads(result.stdout)
    assert document["summary"]["in_place"] is True and document["files"][0]["changed"]
    assert (project / "train.py").read_text() == migrate(WRAP_EXAMPLE).code


@pytest.mark.parametrize("fmt", ["json", "sarif", "github"])
def test_diff_with_a_machine_format_is_a_usage_error(project, fmt):
    result = invoke("--diff", "--output-format", fmt, "train.py")
    assert result.exit_code == 2


# --------------------------------------------------------------------------- github


def test_github_annotations(project):
    result = invoke("--check", "--output-format", "github", "train.py", "old.py", "run.sh")
    assert result.exit_code == 3
    out = result.stdout.splitlines()
    assert all(line.startswith(("::warning ", "::error ")) for line in out)
    assert ("::warning title=ddp-migrate (DDP201),file=run.sh,line=2,col=1::run.sh:2:1: DDP201 [*] "
            "`python -m torch.distributed.launch` becomes `torchrun`") in out
    (error,) = [line for line in out if line.startswith("::error ")]
    assert error.startswith("::error file=old.py,line=5,col=")
    assert ",title=ddp-migrate::cannot parse: " in error
    expected = migrate(WRAP_EXAMPLE)
    assert len([line for line in out if "file=train.py," in line]) == len(expected.changes) + len(expected.diagnostics)
    assert result.stderr.splitlines()[-1] == "2 files would be migrated, 1 failed"


def test_github_escapes_what_would_break_a_command():
    from migrator.output import FileOutcome, to_github
    from migrator.types import Diagnostic

    outcome = FileOutcome("a,b:c.py", diagnostics=(Diagnostic("DDP101", 1, 2, "50% done\nnext"),))
    assert to_github(outcome) == (
        "::warning title=ddp-migrate (DDP101),file=a%2Cb%3Ac.py,line=1,col=2::a,b:c.py:1:2: DDP101 50%25 done%0Anext\n"
    )


# --------------------------------------------------------------------------- sarif


def test_sarif_has_the_required_fields_and_known_rule_ids(project):
    result = invoke("--check", "--output-format", "sarif", *PATHS)
    assert result.exit_code == 3
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "ddp-migrate"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert rule_ids == [rule.code for rule in RULES]
    for rule, doc in zip(RULES, driver["rules"]):
        assert doc["name"] == rule.name
        assert doc["shortDescription"]["text"] == rule.summary
        assert doc["fullDescription"]["text"] == " ".join(rule.what.split())
        assert doc["help"]["text"] == rule.explain()

    assert run["results"], "expected findings"
    for res in run["results"]:
        assert res["ruleId"] in rule_ids
        assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("warning", "note", "error", "none")
        assert res["message"]["text"]
        (location,) = res["locations"]
        physical = location["physicalLocation"]
        assert physical["artifactLocation"]["uri"] in PATHS
        assert physical["region"]["startLine"] >= 1 and physical["region"]["startColumn"] >= 1

    (invocation,) = run["invocations"]
    assert invocation["executionSuccessful"] is False
    (notification,) = invocation["toolExecutionNotifications"]
    assert notification["level"] == "error"
    assert notification["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "old.py"
    assert result.stderr == ""

