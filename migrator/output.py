"""What each file came to (FileOutcome), and the machine-readable reports: json, github, sarif.

The text format is render.py's; these formats are plain functions from outcomes to a string that
the CLI prints on stdout (nothing else goes there with them). The JSON document is versioned and
documented in the README ("Output formats"); a change to its shape bumps JSON_VERSION.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from migrator.codes import NAMES

if TYPE_CHECKING:  # pragma: no cover
    from migrator.report import Report
    from migrator.types import Change, Diagnostic

FORMATS = ("text", "json", "github", "sarif")
JSON_VERSION = 1
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/ddp-migrate/ddp-migrate"


class Failure(NamedTuple):
    """Why a file could not be migrated.

    `kind` is "parse" (the file's own code does not parse or decode), "file" (it cannot be read,
    written or encoded) or "internal" (a bug in ddp-migrate). `message` is one line without the
    path; `line` and `col` are set for "parse" only.
    """

    kind: str
    message: str
    line: Optional[int] = None
    col: Optional[int] = None
    traceback: Optional[str] = None

    def text(self, path: str) -> str:
        """The line the text format shows: `path:line:col: message` or `path: message`."""
        if self.line is not None:
            return f"{path}:{self.line}:{self.col or 0}: {self.message}"
        return f"{path}: {self.message}"


class FileOutcome(NamedTuple):
    """One file's migration, as plain data (it crosses process boundaries with --jobs)."""

    path: str  # as shown: relative to cwd when under it, '/'-separated
    changed: bool = False
    changes: Tuple["Change", ...] = ()
    diagnostics: Tuple["Diagnostic", ...] = ()
    error: Optional[Failure] = None
    # How to run the migrated script (Result.torchrun_commands): one machine, then several.
    launch: Tuple[str, ...] = ()
    notes: Tuple[str, ...] = ()  # Result.notes: about the run on this file, no finding

    def findings(self) -> List[Tuple[str, Any]]:
        """("change" | "diagnostic", finding), in source order (changes first on a tie)."""
        rows: List[Tuple[str, Any]] = [("change", c) for c in self.changes]
        rows += [("diagnostic", d) for d in self.diagnostics]
        return sorted(rows, key=lambda row: (row[1].line, row[1].col, row[0] != "change"))


class Attention(NamedTuple):
    """A diagnostic that needs a human, with its rule's summary and `fix` text as the hint."""

    line: int
    col: int
    code: str
    message: str
    summary: str
    hint: str


class FileSummary(NamedTuple):
    """The end-of-run block for one file: changes by rule, what needs a human, how to run it."""

    path: str
    changed: bool
    changes: Tuple[Tuple[str, str, int], ...]  # (code, name, count) in code order
    attention: Tuple[Attention, ...]
    launch: Tuple[str, ...]


def summarize(outcomes: Sequence[FileOutcome]) -> List[FileSummary]:
    """A FileSummary for each file that changed or needs a human (failed files have their error line)."""
    out = []
    for outcome in outcomes:
        if outcome.error is not None or not (outcome.changed or outcome.diagnostics):
            continue
        counts: Dict[str, int] = {}
        for change in outcome.changes:
            counts[change.code] = counts.get(change.code, 0) + 1
        changes = tuple((code, NAMES.get(code, ""), counts[code]) for code in sorted(counts))
        attention = tuple(
            Attention(d.line, d.col, d.code, d.message, *_rule_text(d.code))
            for d in sorted(outcome.diagnostics, key=lambda d: (d.line, d.col, d.code))
        )
        out.append(FileSummary(outcome.path, outcome.changed, changes, attention, outcome.launch))
    return out


def statistics(outcomes: Sequence[FileOutcome]) -> List[Tuple[int, str, bool, str]]:
    """(count, code, fixable, name) per finding code over all files, most frequent first."""
    counts: Dict[str, int] = {}
    fixable: Dict[str, bool] = {}
    for outcome in outcomes:
        for kind, finding in outcome.findings():
            counts[finding.code] = counts.get(finding.code, 0) + 1
            fixable[finding.code] = fixable.get(finding.code, False) or _fixable(kind, finding)
    return [(counts[code], code, fixable[code], NAMES.get(code, "")) for code in sorted(counts, key=lambda c: (-counts[c], c))]


def _rule_text(code: str) -> Tuple[str, str]:
    """(summary, fix) of a rule, one line each; the registry (and LibCST) is loaded only here."""
    from migrator.rules import RULES_BY_CODE

    rule = RULES_BY_CODE.get(code)
    if rule is None:
        return "", ""
    return _flat(rule.summary), _flat(rule.fix)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _fixable(kind: str, finding: Any) -> bool:
    return kind == "change" or bool(getattr(finding, "fixable", False))


# --------------------------------------------------------------------------- json


def to_json(
    outcomes: Sequence[FileOutcome], report: "Report", skipped: Sequence[Tuple[str, str]] = (), notes: Sequence[str] = ()
) -> str:
    """The JSON report (schema version JSON_VERSION; see README "Output formats")."""
    import json

    files = []
    findings = fixable = 0
    summaries = {summary.path: summary for summary in summarize(outcomes)}
    for outcome in outcomes:
        rows = []
        for kind, finding in outcome.findings():
            rows.append(
                {
                    "code": finding.code,
                    "name": NAMES.get(finding.code, ""),
                    "line": finding.line,
                    "column": finding.col,
                    "message": finding.message,
                    "fixable": _fixable(kind, finding),
                    "kind": kind,
                }
            )
            findings += 1
            fixable += _fixable(kind, finding)
        error = None
        if outcome.error is not None:
            error = {
                "kind": outcome.error.kind,
                "message": outcome.error.message,
                "line": outcome.error.line,
                "column": outcome.error.col,
            }
        entry: Dict[str, Any] = {"path": outcome.path, "changed": outcome.changed, "error": error, "findings": rows}
        summary = summaries.get(outcome.path)
        entry["changes_by_rule"] = [
            {"code": code, "name": name, "count": count} for code, name, count in (summary.changes if summary else ())
        ]
        entry["needs_human"] = [
            {"code": a.code, "line": a.line, "column": a.col, "message": a.message, "summary": a.summary, "hint": a.hint}
            for a in (summary.attention if summary else ())
        ]
        entry["launch"] = list(outcome.launch)
        entry["notes"] = list(outcome.notes)
        files.append(entry)
    document = {
        "version": JSON_VERSION,
        "files": files,
        "skipped": [{"path": path, "reason": why} for path, why in skipped],
        "notes": list(notes),
        "summary": {
            "files": report.total,
            "changed": report.change_count,
            "unchanged": report.same_count,
            "needs_human": report.attention_count,
            "failed": report.failure_count,
            "skipped": report.skip_count,
            "findings": findings,
            "fixable": fixable,
            "in_place": report.mode.writes,
            "exit_code": report.return_code,
        },
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- github


def to_github(outcome: FileOutcome) -> str:
    """GitHub Actions workflow commands: `::warning` per finding, `::error` for a file that failed."""
    out = []
    for kind, finding in outcome.findings():
        props = _props(title=f"ddp-migrate ({finding.code})", file=outcome.path, line=finding.line, col=finding.col)
        star = "[*] " if _fixable(kind, finding) else ""
        text = f"{outcome.path}:{finding.line}:{finding.col}: {finding.code} {star}{finding.message}"  # as ruff writes it
        out.append(f"::warning {props}::{_escape_data(text)}\n")
    if outcome.error is not None:
        error = outcome.error
        props = _props(file=outcome.path, line=error.line, col=error.col, title="ddp-migrate")
        out.append(f"::error {props}::{_escape_data(error.message)}\n")
    return "".join(out)


def _props(**values: Any) -> str:
    return ",".join(f"{key}={_escape_property(str(value))}" for key, value in values.items() if value is not None)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


# --------------------------------------------------------------------------- sarif


def to_sarif(outcomes: Sequence[FileOutcome], version: str) -> str:
    """A SARIF 2.1.0 log: one run, the registry's rules in tool.driver.rules, a result per finding,
    and a tool execution notification per file that could not be migrated."""
    import json

    from migrator.rules import RULES  # the full rule docs; only this format needs them

    index = {rule.code: n for n, rule in enumerate(RULES)}
    rules = [
        {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": " ".join(rule.what.split())},
            "help": {"text": rule.explain(), "markdown": rule.explain()},
            "defaultConfiguration": {"level": "warning" if rule.fixable else "note"},
            "properties": {"fixable": rule.fixable},
        }
        for rule in RULES
    ]
    results: List[Dict[str, Any]] = []
    notifications: List[Dict[str, Any]] = []
    for outcome in outcomes:
        for kind, finding in outcome.findings():
            result: Dict[str, Any] = {
                "ruleId": finding.code,
                "level": "warning" if _fixable(kind, finding) else "note",
                "message": {"text": finding.message},
                "locations": [_location(outcome.path, finding.line, finding.col)],
                "properties": {"fixable": _fixable(kind, finding), "kind": kind},
            }
            if finding.code in index:
                result["ruleIndex"] = index[finding.code]
            results.append(result)
        if outcome.error is not None:
            notifications.append(
                {
                    "level": "error",
                    "message": {"text": outcome.error.message},
                    "locations": [_location(outcome.path, outcome.error.line, outcome.error.col)],
                    "properties": {"kind": outcome.error.kind},
                }
            )
    run = {
        "tool": {
            "driver": {
                "name": "ddp-migrate",
                "version": version,
                "semanticVersion": version,
                "informationUri": INFORMATION_URI,
                "rules": rules,
            }
        },
        "invocations": [{"executionSuccessful": not notifications, "toolExecutionNotifications": notifications}],
        "originalUriBaseIds": {"%SRCROOT%": {"uri": _cwd_uri()}},
        "results": results,
    }
    log = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def _location(path: str, line: Optional[int], col: Optional[int]) -> Dict[str, Any]:
    physical: Dict[str, Any] = {"artifactLocation": _artifact(path)}
    if line is not None and line >= 1:
        region: Dict[str, Any] = {"startLine": line}
        if col is not None:
            region["startColumn"] = max(col, 1)  # SARIF columns are 1-based
        physical["region"] = region
    return {"physicalLocation": physical}


def _artifact(path: str) -> Dict[str, str]:
    """Relative to the working directory (%SRCROOT%) when the path is; else an absolute file: URI."""
    from pathlib import PurePath
    from urllib.parse import quote

    if PurePath(path).is_absolute():
        from pathlib import Path

        return {"uri": Path(path).as_uri()}
    return {"uri": quote(path), "uriBaseId": "%SRCROOT%"}


def _cwd_uri() -> str:
    from pathlib import Path

    return Path.cwd().as_uri() + "/"
