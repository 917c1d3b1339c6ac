"""Documents generated from the rule registry: the README's rule table and `migrator/codes.py`.

    python -m migrator.docs            # print the README rule table (Markdown)
    python -m migrator.docs --write    # rewrite it in README.md, and regenerate migrator/codes.py
    python -m migrator.docs --check    # exit 1 when either is out of date

`codes.py` is the registry's (code, name) pairs as plain data, so the CLI can check `--select`
and name findings without importing the rules (and LibCST). tests/test_readme.py fails when
either file no longer matches the registry: add a rule, then run `--write`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CODES = Path(__file__).resolve().parent / "codes.py"

START = "<!-- rules:start -->"
END = "<!-- rules:end -->"


def rule_table() -> str:
    """The Markdown table of every rule, in registry order."""
    from migrator.rules import RULES

    rows = ["| Code | Name | Fixable | Summary |", "| --- | --- | --- | --- |"]
    for rule in RULES:
        fixable = "yes" if rule.fixable else ""
        rows.append(f"| {rule.code} | `{rule.name}` | {fixable} | {_cell(rule.summary)} |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def codes_module() -> str:
    """The source of migrator/codes.py."""
    from migrator.rules import RULES

    lines = [
        '"""Every rule\'s code and name, generated from the registry by `python -m migrator.docs --write`.',
        "",
        "Plain data, so the CLI can check --select/--ignore and name findings without importing the",
        "rules (and LibCST). Do not edit: tests/test_readme.py fails when this no longer matches RULES.",
        '"""',
        "from __future__ import annotations",
        "",
        "from typing import Dict, FrozenSet, Tuple",
        "",
        "#: (code, name) of every rule, in registry order.",
        "CODES: Tuple[Tuple[str, str], ...] = (",
    ]
    lines += [f'    ("{rule.code}", "{rule.name}"),' for rule in RULES]
    lines += [
        ")",
        "",
        "NAMES: Dict[str, str] = dict(CODES)  # code -> name",
        "BY_NAME: Dict[str, str] = {name: code for code, name in CODES}  # name -> code",
        "",
        "#: code -> the fixes its edits rely on (Rule.requires); a selection pulls them in.",
        "REQUIRES: Dict[str, Tuple[str, ...]] = {",
        *(f'    "{r.code}": (' + ", ".join(f'"{c}"' for c in r.requires) + ",)," for r in RULES if r.requires),
        "}",
        "",
        "#: Advisories that ask for no action: they never fail --check (every other finding does).",
        "INFORMATIONAL: FrozenSet[str] = frozenset({" + ", ".join(f'"{r.code}"' for r in RULES if r.informational) + "})",
        "",
    ]
    return "\n".join(lines)


def readme_with_table(readme: str, table: str) -> str:
    """`readme` with the text between the rule markers replaced by `table`."""
    start = readme.find(START)
    end = readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {START} ... {END} markers")
    return readme[: start + len(START)] + "\n\n" + table + "\n" + readme[end:]


def readme_table(readme: str) -> str:
    """The table currently between the markers (what test_readme compares)."""
    start = readme.find(START)
    end = readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md has no {START} ... {END} markers")
    return readme[start + len(START) : end].strip("\n") + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m migrator.docs", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite README.md's rule table and migrator/codes.py")
    group.add_argument("--check", action="store_true", help="exit 1 when README.md or migrator/codes.py is stale")
    args = parser.parse_args(argv)

    table = rule_table()
    if not (args.write or args.check):
        sys.stdout.write(table)
        return 0
    readme = README.read_text(encoding="utf-8")
    targets = [(README, readme, readme_with_table(readme, table)), (CODES, _read(CODES), codes_module())]
    stale: List[Path] = [path for path, old, new in targets if old != new]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run python -m migrator.docs --write", file=sys.stderr)
        return 1 if stale else 0
    for path, old, new in targets:
        if old != new:
            path.write_text(new, encoding="utf-8", newline="\n")
            print(f"rewrote {path.relative_to(ROOT)}", file=sys.stderr)
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
