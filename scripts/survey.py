"""Survey: measure the engine on a corpus of real files and classify what it does with each.

    python scripts/survey.py CORPUS_DIR [--category NAME ...] [--show FILE_SUBSTRING] [--json] [--strict]

CORPUS_DIR holds manifest.tsv (tab-separated: local_file, category, repo, path, commit, shape)
and the files at CORPUS_DIR/<local_file> (e.g. /work/shared/realworld/py). Outcomes:

  single, dataparallel (training scripts)
    CRASH     migrate() raised something other than MigrateError
    WRONG     the output is broken: does not parse, a second run changes it, a model wrapped twice
              on a path or moved after its wrap, DataParallel left in training code (survey_checks)
    FULL      changed, and every property of a DDP migration holds (survey_checks.PROPERTY_CHECKS)
    PARTIAL   changed, a property missing, and a diagnostic explains each missing one (EXPLAINED_BY)
    GAP       changed, a property missing, and nothing said about it
    DECLINED  unchanged, with a DDP1xx diagnostic (or a MigrateError such as a parse error)
    SILENT    unchanged, and nothing said
  legacy_launch: OK or WRONG (parse, idempotence, double wrap, move after wrap, and no more
    init_process_group calls than before), or CRASH; the detail says CHANGED or UNCHANGED.
  spawn, negative: OK (byte-identical, nothing reported), NOISE (unchanged, something reported),
    CHANGED, CRASH.
  spawn with --spawn (every file is then migrated with Options(spawn=True)):
    MIGRATED  changed into a torchrun script: parses, idempotent, no mp.spawn call and no
              init_method/rank/world_size rendezvous of its own left (survey_checks.spawn_problems)
    DECLINED  unchanged, with DDP117 and its reason
    WRONG     changed, and one of those does not hold; SILENT unchanged, nothing said; CRASH

A launcher corpus (realworld/launch: manifest.tsv with a `kind` column instead of `category`)
is surveyed by kind, each file read as the kind its upstream path has (a Dockerfile, a Makefile,
Markdown, a Python launcher):
  shell, markdown, other
    FULL      changed, nothing declined, no `torch.distributed.launch` command left
    PARTIAL   changed, and a launch declined (DDP204/DDP113) or left
    DECLINED  unchanged, with the reason reported
    SILENT    unchanged, and nothing said
    FAILED    the file could not be read as its kind (the detail says why); CRASH as above
  negative: OK, NOISE, CHANGED, CRASH as for Python.

Nothing here edits the corpus or the engine; `survey()` and `classify()` are importable for tests.
"""
from __future__ import annotations

import argparse
import ast
import csv
import dataclasses
import difflib
import json
import re
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "scripts"):  # runnable as `python scripts/survey.py` from anywhere
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import survey_checks as checks  # noqa: E402
from migrator import files  # noqa: E402
from migrator.api import migrate  # noqa: E402
from migrator.launcher import migrate_launcher  # noqa: E402
from migrator.errors import IntroducedSyntaxError, MigrateError  # noqa: E402
from migrator.options import Options  # noqa: E402
from migrator.types import Result  # noqa: E402

TRAINING = ("single", "dataparallel")
LAUNCHERS = ("shell", "markdown", "other")
LEGACY = ("legacy_launch",)
QUIET = ("spawn", "negative")
# Outcomes that fail --strict, per category family.
STRICT_FAILURES = {
    **{c: ("CRASH", "WRONG", "SILENT", "GAP") for c in TRAINING},
    **{c: ("CRASH", "WRONG") for c in LEGACY},
    **{c: ("CRASH", "CHANGED", "NOISE") for c in QUIET},
    **{c: ("CRASH", "SILENT") for c in LAUNCHERS},
}
# With --spawn the spawn category is migrated or declined (_classify_spawn).
SPAWN_STRICT_FAILURES = ("CRASH", "WRONG", "SILENT", "NOISE")
# A diagnostic whose message says one of these tells us the training loop is in another file
# (DDP114 words it "trains through `net` from module `models`" or "runs the training in module `x`").
ELSEWHERE_PHRASES = ("another module", "other module", "from module `", "in module `")

HEURISTIC = (
    "'training here' rate: a file counts as training elsewhere when a diagnostic says so "
    f"(message mentions {' / '.join(repr(p) for p in ELSEWHERE_PHRASES)}) or when the input has no .backward( "
    "and no .step( call at all."
)


@dataclasses.dataclass(frozen=True)
class Row:
    """One file's verdict. `detail` says what is missing or why; `codes` are the diagnostics."""

    outcome: str
    category: str
    file: str = ""
    detail: str = ""
    codes: Tuple[str, ...] = ()
    changes: Tuple[str, ...] = ()
    training_here: Optional[bool] = None


class EngineCrash(Exception):
    """migrate() raised something it should not have (anything but MigrateError)."""


def run_engine(source: str, options: Optional[Options] = None) -> Result:
    """migrate(source), with an unexpected exception turned into EngineCrash."""
    try:
        return migrate(source) if options is None else migrate(source, options)
    except MigrateError:
        raise
    except Exception as err:  # the point of the survey is to catch these
        raise EngineCrash(f"{type(err).__name__}: {err}") from err


def codes_of(items: Iterable) -> Tuple[str, ...]:
    return tuple(sorted({item.code for item in items}))


# ---------------------------------------------------------------- classifying one file


def classify(category: str, source: str, options: Optional[Options] = None) -> Row:
    """Run the engine on `source` and say what it did, as the module docstring defines."""
    try:
        result = run_engine(source, options)
    except EngineCrash as err:
        return Row("CRASH", category, detail=str(err))
    except MigrateError as err:
        return _classify_error(category, source, err)
    if options is not None and options.spawn and category == "spawn":
        return _classify_spawn(category, result, options)
    if category in TRAINING:
        return _classify_training(category, source, result)
    if category in LEGACY:
        return _classify_legacy(category, source, result)
    return _classify_quiet(category, result)


def classify_launcher(category: str, text: str, kind: Optional[str]) -> Row:
    """A file of a launcher corpus, read as `kind` (from its upstream name; PYTHON for a .py launcher)."""
    if kind is None:
        return Row("FAILED", category, detail="ddp-migrate takes no file of this name")
    try:
        result = run_engine(text) if kind == files.PYTHON else migrate_launcher(text, kind)
    except EngineCrash as err:
        return Row("CRASH", category, detail=str(err))
    except (MigrateError, ValueError) as err:
        return Row("FAILED", category, detail=f"as {kind}: {type(err).__name__}: {err}")
    codes = codes_of(result.diagnostics)
    if category not in LAUNCHERS:
        return _classify_quiet(category, result)
    declined = [c for c in codes if c in ("DDP113", "DDP204")]
    left = _LEFT_LAUNCH.search(result.code) is not None
    if not result.changed:
        outcome = "DECLINED" if declined else "SILENT"
    else:
        outcome = "PARTIAL" if declined or left else "FULL"
    detail = f"as {kind}" + ("; a torch.distributed.launch command is left" if left and result.changed else "")
    return Row(outcome, category, detail=detail, codes=codes, changes=codes_of(result.changes))


# A launch left in the output: the module run with -m, or its launch.py named by path.
_LEFT_LAUNCH = re.compile(r"-m\s+torch\.distributed\.launch\b|python[\d.]*\s+\S*torch/distributed/launch\.py")


def _classify_error(category: str, source: str, err: MigrateError) -> Row:
    """The engine refused the file. Producing invalid code is a bug; anything else is a decline."""
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, IntroducedSyntaxError):
        outcome = "CHANGED" if category in QUIET else "WRONG"
        return Row(outcome, category, detail=f"engine produced invalid code: {message}")
    outcome = {**{c: "DECLINED" for c in TRAINING}, **{c: "OK" for c in LEGACY}}.get(category, "NOISE")
    here = training_here(source, ()) if category in TRAINING else None
    return Row(outcome, category, detail=f"{type(err).__name__}: {message}", training_here=here)


def _classify_training(category: str, source: str, result: Result) -> Row:
    codes = codes_of(result.diagnostics)
    row = Row("", category, codes=codes, changes=codes_of(result.changes),
              training_here=training_here(source, result.diagnostics))
    if not result.changed:
        declines = [d for d in result.diagnostics if d.code.startswith("DDP1")]
        detail = f"line {declines[0].line}: {declines[0].message}" if declines else ""
        return dataclasses.replace(row, outcome="DECLINED" if declines else "SILENT", detail=detail)
    try:
        original_tree = ast.parse(source)
    except SyntaxError:  # `x.cuda(async=True)`: Python 3 cannot read it; the engine repaired it (DDP017)
        original_tree = ast.Module(body=[], type_ignores=[])
    exempt = enclosing_functions(original_tree, [d.line for d in result.diagnostics if d.code == "DDP111"])
    wrong = broken_output(result.code, exempt_functions=exempt)
    if wrong:
        return dataclasses.replace(row, outcome="WRONG", detail="; ".join(wrong))
    tree = ast.parse(result.code)
    missing = {name: found for name, check in checks.PROPERTY_CHECKS.items() if (found := check(tree))}
    if not missing:
        return dataclasses.replace(row, outcome="FULL")
    unexplained = [name for name in missing if not set(checks.EXPLAINED_BY[name]) & set(codes)]
    detail = "; ".join(f"{name}{'' if name in unexplained else ' (explained)'}: {found[0]}"
                       for name, found in missing.items())
    return dataclasses.replace(row, outcome="GAP" if unexplained else "PARTIAL", detail=detail)


def _classify_legacy(category: str, source: str, result: Result) -> Row:
    wrong = broken_output(result.code, dataparallel=False)
    if not wrong:
        wrong = checks.extra_process_group_problems(ast.parse(source), ast.parse(result.code))
    state = "CHANGED" if result.changed else "UNCHANGED"
    return Row("WRONG" if wrong else "OK", category, detail="; ".join([state, *wrong]),
               codes=codes_of(result.diagnostics), changes=codes_of(result.changes))


def _classify_spawn(category: str, result: Result, options: Options) -> Row:
    """--spawn: a torchrun script now (MIGRATED), or left with DDP117's reason (DECLINED)."""
    codes, changes = codes_of(result.diagnostics), codes_of(result.changes)
    if not result.changed:
        declines = [d for d in result.diagnostics if d.code == "DDP117"]
        if declines:
            return Row("DECLINED", category, detail=f"line {declines[0].line}: {declines[0].message}", codes=codes)
        return Row("NOISE" if result.diagnostics else "SILENT", category, codes=codes)
    wrong = checks.parse_problems(result.code)
    if not wrong:
        try:
            wrong = checks.idempotence_problems(result.code, lambda text: run_engine(text, options).code)
        except MigrateError as err:
            wrong = [f"second run raised {type(err).__name__}: {err}"]
    if not wrong:
        wrong = checks.spawn_problems(ast.parse(result.code))
    if wrong:
        return Row("WRONG", category, detail="; ".join(wrong), codes=codes, changes=changes)
    found = [c.message for c in result.changes if "direct call" in c.message]
    return Row("MIGRATED", category, detail=found[0] if found else "", codes=codes, changes=changes)


def _classify_quiet(category: str, result: Result) -> Row:
    outcome = "CHANGED" if result.changed else "NOISE" if result.diagnostics else "OK"
    first = result.diagnostics[0] if result.diagnostics else None
    detail = f"line {first.line}: {first.message}" if first and outcome == "NOISE" else ""
    return Row(outcome, category, detail=detail, codes=codes_of(result.diagnostics),
               changes=codes_of(result.changes))


def broken_output(code: str, dataparallel: bool = True, exempt_functions: Sequence[str] = ()) -> List[str]:
    """Every "wrong" problem of the engine's output (empty when it is sound)."""
    problems = checks.parse_problems(code)
    if problems:
        return problems
    try:
        problems = checks.idempotence_problems(code, lambda text: run_engine(text).code)
    except MigrateError as err:
        problems = [f"second run raised {type(err).__name__}: {err}"]
    tree = ast.parse(code)
    problems += [p for check in checks.WRONG_CHECKS for p in check(tree)]
    if dataparallel:
        problems += checks.dataparallel_problems(tree, exempt_functions)
    return problems


def enclosing_functions(tree: ast.AST, lines: Sequence[int]) -> Tuple[str, ...]:
    """Names of the innermost functions that contain any of `lines` (for DDP111's exemption)."""
    names = []
    for line in lines:
        spans = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.lineno <= line <= (n.end_lineno or n.lineno)]
        if spans:
            names.append(max(spans, key=lambda n: n.lineno).name)
    return tuple(names)


def training_here(source: str, diagnostics: Sequence) -> bool:
    """Is the training loop in this file? See HEURISTIC."""
    if any(phrase in d.message.lower() for d in diagnostics for phrase in ELSEWHERE_PHRASES):
        return False
    try:
        tree = ast.parse(source)
    except SyntaxError:  # Python 2 and friends: fall back to the text
        return ".backward(" in source or ".step(" in source
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr in ("backward", "step") for n in ast.walk(tree))


# ---------------------------------------------------------------- the corpus


class ManifestError(Exception):
    """A corpus folder this survey cannot read (said in one line, not a traceback)."""


def read_manifest(corpus: Path) -> List[Dict[str, str]]:
    try:
        with open(corpus / "manifest.tsv", encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
    except OSError as err:
        raise ManifestError(f"{corpus}: cannot read manifest.tsv ({err.strerror})") from err
    if rows and "category" not in rows[0]:
        if "kind" not in rows[0]:
            raise ManifestError(f"{corpus}/manifest.tsv has neither a `category` nor a `kind` column")
        rows = [{**row, "category": row["kind"]} for row in rows]  # a launcher corpus: by kind
    return rows


def read_source(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError as err:
        raise ManifestError(f"{path}: cannot read ({err.strerror})") from err


def survey(corpus_dir, categories: Sequence[str] = (), options: Optional[Options] = None) -> List[Row]:
    """Classify every file of the corpus (only `categories`, when given), migrated with `options`."""
    corpus = Path(corpus_dir)
    rows = []
    for entry in read_manifest(corpus):
        if categories and entry["category"] not in categories:
            continue
        with warnings.catch_warnings():  # the corpus's own `invalid escape sequence` and such
            warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
            source = read_source(corpus / entry["local_file"])
            if "kind" in entry:
                row = classify_launcher(entry["category"], source, files.source_kind(Path(entry["path"])))
            else:
                row = classify(entry["category"], source, options)
        rows.append(dataclasses.replace(row, file=entry["local_file"]))
    return rows


# ---------------------------------------------------------------- output


def short(name: str, width: int = 56) -> str:
    """The file name without its category folder, cut in the middle to `width`."""
    name = name.split("/", 1)[-1]
    return name if len(name) <= width else f"{name[: width // 2 - 1]}..{name[-(width // 2 - 1):]}"


def render_table(rows: Sequence[Row]) -> str:
    lines = [HEURISTIC, "", f"{'outcome':9} {'category':13} {'file':56} {'codes':22} detail"]
    for row in rows:
        lines.append(f"{row.outcome:9} {row.category:13} {short(row.file):56} "
                     f"{','.join(row.codes) or '-':22} {row.detail}")
    return "\n".join(lines)


def render_totals(rows: Sequence[Row]) -> str:
    counts = Counter((row.category, row.outcome) for row in rows)
    per_category = Counter(row.category for row in rows)
    lines = ["", "totals:"]
    for category, total in per_category.items():
        parts = [f"{outcome} {n}" for (cat, outcome), n in sorted(counts.items()) if cat == category]
        lines.append(f"  {category:13} {total:3}: " + ", ".join(parts))
    training = [row for row in rows if row.category in TRAINING]
    here = [row for row in training if row.training_here]
    launchers = [row for row in rows if row.category in LAUNCHERS]
    lines.append("")
    if training:
        lines.append(f"FULL / training files:            {rate(training)}")
        lines.append(f"FULL / training files, loop here: {rate(here)}")
    if launchers:
        lines.append(f"FULL / launcher files (fully rewritten): {rate(launchers)}")
    return "\n".join(lines)


def rate(rows: Sequence[Row]) -> str:
    full = sum(row.outcome == "FULL" for row in rows)
    return f"{full}/{len(rows)} = {full / len(rows):.0%}" if rows else "0/0"


def show(corpus: Path, rows: Sequence[Row], needle: str) -> str:
    """The diff and the findings of each file whose name contains `needle`."""
    out = []
    for row in (r for r in rows if needle in r.file):
        source = read_source(corpus / row.file)
        out.append(f"==== {row.file}: {row.outcome} {row.detail}")
        try:
            result = migrate(source)
        except Exception as err:  # shown, not raised: this is a report
            out.append(f"{type(err).__name__}: {err}")
            continue
        diff = difflib.unified_diff(source.splitlines(), result.code.splitlines(),
                                    f"a/{row.file}", f"b/{row.file}", lineterm="")
        out.extend(list(diff) or ["(unchanged)"])
        out.extend(f"{i.line}:{i.col} {i.code} {i.message}" for i in (*result.changes, *result.diagnostics))
    return "\n".join(out)


def strict_failures(rows: Sequence[Row], spawn: bool = False) -> List[Row]:
    return [row for row in rows if row.outcome in (
        SPAWN_STRICT_FAILURES if spawn and row.category == "spawn" else STRICT_FAILURES.get(row.category, ()))]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="folder with manifest.tsv")
    parser.add_argument("--category", action="append", default=[], help="only this category (repeatable)")
    parser.add_argument("--show", metavar="FILE_SUBSTRING", help="print the diff and findings of matching files")
    parser.add_argument("--json", action="store_true", help="one JSON list of rows instead of the table")
    parser.add_argument("--strict", action="store_true", help="exit 1 on CRASH/WRONG/SILENT/GAP (training), CHANGED/NOISE (spawn, negative)")
    parser.add_argument("--spawn", action="store_true",
                        help="migrate with --spawn: spawn files are MIGRATED or DECLINED (the others must not notice)")
    args = parser.parse_args(argv)
    try:
        rows = survey(args.corpus, args.category, Options(spawn=True) if args.spawn else None)
    except ManifestError as err:
        print(f"survey: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([dataclasses.asdict(row) for row in rows], indent=1))
    else:
        print(render_table(rows))
        print(render_totals(rows))
    if args.show:  # on stderr under --json, so that stdout stays one JSON document
        print(show(args.corpus, rows, args.show), file=sys.stderr if args.json else sys.stdout)
    return 1 if args.strict and strict_failures(rows, args.spawn) else 0


if __name__ == "__main__":
    sys.exit(main())
