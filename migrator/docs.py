"""Documents generated from the rule registry: `docs/rules.md` and `migrator/codes.py`.

    python -m migrator.docs            # print docs/rules.md (Markdown)
    python -m migrator.docs --write    # rewrite docs/rules.md and migrator/codes.py
    python -m migrator.docs --check    # exit 1 when either is out of date

`docs/rules.md` is every rule's reference: a summary table by code family, then one section per
rule with its `--explain` text (what it does, why, the fix, its safety) and all its examples.
`codes.py` is the registry's (code, name) pairs as plain data, so the CLI can check `--select`
and name findings without importing the rules (and LibCST). tests/test_readme.py fails when
either file no longer matches the registry: add or change a rule, then run `--write`.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from migrator.rule import Example, Rule

ROOT = Path(__file__).resolve().parent.parent
RULES_MD = ROOT / "docs" / "rules.md"
CODES = Path(__file__).resolve().parent / "codes.py"

REGENERATE = "python -m migrator.docs --write"

#: (code prefix, heading, what the family is) in the order docs/rules.md shows them.
FAMILIES = (
    ("DDP0", "DDP0xx: rewrites", "Changes ddp-migrate makes to Python code."),
    ("DDP1", "DDP1xx: advisories that need a human",
     "Reported and left as they are: the message says what to do by hand. Informational ones never "
     "fail `--check`."),
    ("DDP2", "DDP2xx: launch commands",
     "Rewrites of `python -m torch.distributed.launch` commands in shell and Slurm scripts, "
     "Makefiles, Dockerfiles, YAML, Markdown, reST and notebooks."),
)


def _rules() -> List["Rule"]:
    from migrator.rules import RULES

    return list(RULES)


def _by_family(rules: Iterable["Rule"], prefix: str) -> List["Rule"]:
    return sorted((r for r in rules if r.code.startswith(prefix)), key=lambda r: r.code)


def anchor(rule: "Rule") -> str:
    """The rule's anchor in docs/rules.md (`docs/rules.md#ddp003`)."""
    return rule.code.lower()


def rule_table(rules: Optional[Sequence["Rule"]] = None) -> str:
    """The Markdown summary table of `rules` (default: every rule), each code linking to its section."""
    rows = ["| Code | Name | Fixable | Summary |", "| --- | --- | --- | --- |"]
    for rule in rules if rules is not None else _rules():
        fixable = "yes" if rule.fixable else ""
        rows.append(f"| [{rule.code}](#{anchor(rule)}) | `{rule.name}` | {fixable} | {_cell(rule.summary)} |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def rule_documentation(rule: "Rule") -> str:
    """The rule's own documentation, as `--explain` prints it without the title and the examples
    (What it does, Why is this bad?, Fix, Fix safety), its headings one level down."""
    text = dataclasses.replace(rule, examples=()).explain()
    body = text.split("\n", 2)[2]  # drop "CODE (name)" and the blank line after it
    lines: List[str] = []
    for line in body.splitlines():
        lines += ["#" + line, ""] if line.startswith("## ") else [line]
    return "\n".join(lines) + "\n"


def _caption(example: "Example") -> str:
    """An example's caption: its id in words, the file it is checked under, the flags it runs with
    (as `--explain` names them)."""
    caption = example.id.replace("-", " ")
    if example.path:
        caption += f" (in `{example.path}`)"
    if example.options:
        caption += f" (with `{example.flags}`)"
    caption += example.handed_caption
    return caption[:1].upper() + caption[1:]


def _block(language: str, code: str) -> List[str]:
    return [f"```{language}", code.rstrip(), "```"]


def _example(rule: "Rule", example: "Example") -> List[str]:
    """An example as a caption and code blocks: before, and after when the script changes."""
    language = rule.example_language
    lines = ["", f"**{_caption(example)}**", ""] + _block(language, example.before)
    changed = example.after is not None and example.after != example.before
    if changed and example.fires:
        lines += ["", "Use instead:", ""] + _block(language, example.after or "")
    elif changed:
        lines += ["", f"The other rules migrate it; {rule.code} changes nothing:", ""] + _block(language, example.after or "")
    reported = ", ".join(example.diagnostics)
    if not changed:
        lines += ["", f"Left unchanged; reported: {reported}." if reported else "Left unchanged."]
    elif reported:
        lines += ["", f"Also reported: {reported}."]
    return lines


def rule_section(rule: "Rule") -> str:
    """One rule's section of docs/rules.md."""
    fixable = "yes" if rule.fixable else "no: it needs a human"
    if rule.informational:
        fixable = "no; informational, it never fails `--check`"
    lines = [
        f'<a id="{anchor(rule)}"></a>',
        "",
        f"## {rule.code} `{rule.name}`",
        "",
        f"- **Fixable:** {fixable}",
        f"- **Summary:** {' '.join(rule.summary.split())}",
    ]
    lines += ["", rule_documentation(rule).rstrip()]
    applies = [e for e in rule.examples if e.fires]
    quiet = [e for e in rule.examples if not e.fires]
    if applies:
        lines += ["", "### Examples" if len(applies) > 1 else "### Example"]
        for example in applies:
            lines += _example(rule, example)
    if quiet:
        lines += ["", "### Where it does not apply"]
        for example in quiet:
            lines += _example(rule, example)
    return "\n".join(lines) + "\n"


def rules_document() -> str:
    """The text of docs/rules.md."""
    rules = _rules()
    lines = [
        "<!-- Generated from the rule registry (migrator/rules) by `python -m migrator.docs --write`. -->",
        "<!-- Do not edit: tests/test_readme.py fails when this file no longer matches the registry. -->",
        "",
        "# Rules",
        "",
        "Every finding `ddp-migrate` reports carries one of these codes: `path:line:col: CODE [*] message`,",
        "where `[*]` marks what it fixes. `--select` and `--ignore` take a code, a code prefix",
        "(`DDP0`) or a rule's name; `ddp-migrate --list-rules` prints the table below and",
        "`ddp-migrate --explain CODE` one rule's documentation.",
        "",
        f"This file is generated from the rule registry: run `{REGENERATE}` after changing a rule.",
        "Every example below is also a test (tests/test_rule_examples.py).",
    ]
    for prefix, heading, blurb in FAMILIES:
        lines += ["", f"## {heading}", "", blurb, "", rule_table(_by_family(rules, prefix)).rstrip()]
    known = tuple(prefix for prefix, _, _ in FAMILIES)
    others = sorted((r for r in rules if not r.code.startswith(known)), key=lambda r: r.code)
    if others:
        lines += ["", "## Other rules", "", rule_table(others).rstrip()]
    for prefix, _, _ in FAMILIES:
        for rule in _by_family(rules, prefix):
            lines += ["", rule_section(rule).rstrip()]
    for rule in others:
        lines += ["", rule_section(rule).rstrip()]
    return "\n".join(lines) + "\n"


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
        "#: Fixes whose sites stand alone (Rule.per_site): a suppression drops one site, not the fix.",
        "PER_SITE: FrozenSet[str] = frozenset({" + ", ".join(f'"{r.code}"' for r in RULES if r.per_site) + "})",
        "",
        "#: Advisories that ask for no action: they never fail --check (every other finding does).",
        "INFORMATIONAL: FrozenSet[str] = frozenset({" + ", ".join(f'"{r.code}"' for r in RULES if r.informational) + "})",
        "",
    ]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m migrator.docs", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="rewrite docs/rules.md and migrator/codes.py")
    group.add_argument("--check", action="store_true", help="exit 1 when docs/rules.md or migrator/codes.py is stale")
    args = parser.parse_args(argv)

    document = rules_document()
    if not (args.write or args.check):
        sys.stdout.write(document)
        return 0
    targets = [(RULES_MD, _read(RULES_MD), document), (CODES, _read(CODES), codes_module())]
    stale: List[Path] = [path for path, old, new in targets if old != new]
    if args.check:
        for path in stale:
            print(f"{_shown(path)} is out of date: run {REGENERATE}", file=sys.stderr)
        return 1 if stale else 0
    for path, old, new in targets:
        if old != new:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new, encoding="utf-8", newline="\n")
            print(f"rewrote {_shown(path)}", file=sys.stderr)
    return 0


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
