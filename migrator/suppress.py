"""Inline suppression: `# ddp-migrate: ignore[DDP003, DDP010]` (or a bare `# ddp-migrate: ignore`).

A directive in a comment at the end of a line suppresses what is reported on that line: the
diagnostics located there, and the fixes whose Change is located there. Codes may also be given as
a prefix (`DDP1`) or a rule name (`wrap-model`); a bare directive suppresses every code.

Diagnostics are simply dropped. A fix goes whole: one rule's edits depend on each other (the
`local_rank` that process-group setup defines is used by the device and wrap edits), so a
suppressed Change turns its rule off for the file, with the fixes that require it
(Options.fix_enabled), and the output is always what the engine produces for a consistent set of
rules. Each fix plans into a plan of its own, so the engine drops the turned-off fixes' edits and
Changes from what it planned (api._Planned.without) and finishes the file again, with no second
parse or analysis. Where a fix that stays read what a dropped one planned (a statement it left
because that fix already guarded it), dropping is not the same as never planning, and the file is
migrated again with the rule turned off (`rerun`); launcher files are always migrated again. Either
way the result may have another suppressed Change, and the loop goes on until none is left. The
price is granularity: suppressing one of a rule's fixes turns off that rule's other fixes in the
same file (say so in the README), except for a rule whose sites stand alone (Rule.per_site: each
print it guards), where each site plans into a plan of its own with its Change (edits.Plan.site)
and a suppression drops that site only.
"""
from __future__ import annotations

import io
import re
import tokenize
from dataclasses import replace
from typing import Any, Callable, Dict, FrozenSet, Optional

from migrator.options import Options
from migrator.types import Change, Result

#: Present in any text that has a directive; cheap to look for before tokenizing anything.
MARKER = "ddp-migrate:"

# Applied to comment text only (a COMMENT token of Python; a `#` comment of a launcher file).
_DIRECTIVE = re.compile(r"#\s*ddp-migrate:\s*ignore\b(?:\[([^\]]*)\])?", re.IGNORECASE)
_SHELL_COMMENT = re.compile(r"(?:^|\s)(#[^\n]*)$")

#: Line number -> the selectors suppressed on it (None: everything).
Suppressions = Dict[int, Optional[FrozenSet[str]]]

Rerun = Callable[[str, Options], Result]
#: The result with the fixes that the options turn off dropped, and the sites of the Changes given,
#: or None: migrate again (`Rerun`).
Without = Callable[[Options, FrozenSet[Change]], Optional[Result]]


def python_suppressions(source: str) -> Suppressions:
    """Directives in the comments of a Python source (found with tokenize, so never inside a string)."""
    if MARKER not in source:
        return {}
    found: Suppressions = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                _add(found, token.start[0], token.string)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        # Only for code tokenize of this Python cannot read but the engine could parse: fall
        # back to comments at the ends of lines (a string ending in a directive is not a concern).
        return text_suppressions(source)
    return found


def text_suppressions(text: str) -> Suppressions:
    """Directives in `#` comments at the ends of the lines of a launcher file (shell, Make, YAML, Docker)."""
    if MARKER not in text:
        return {}
    found: Suppressions = {}
    for number, line in enumerate(text.split("\n"), start=1):
        if MARKER in line:
            match = _SHELL_COMMENT.search(line.rstrip("\r"))
            if match:
                _add(found, number, match.group(1))
    return found


def _add(found: Suppressions, line: int, comment: str) -> None:
    match = _DIRECTIVE.search(comment)
    if match is None:
        return
    if match.group(1) is None:
        found[line] = None
        return
    selectors = frozenset(part.strip() for part in match.group(1).split(",") if part.strip())
    previous = found.get(line, frozenset())
    found[line] = None if previous is None else previous | selectors


def suppressed(suppressions: Suppressions, line: int, code: str, name: str = "") -> bool:
    """Whether a finding with `code` (and rule `name`) on `line` is suppressed."""
    if line not in suppressions:
        return False
    selectors = suppressions[line]
    if selectors is None:
        return True
    return any(code.startswith(s.upper()) or (name and s == name) for s in selectors)


def apply(result: Result, source: str, options: Options, rerun: Rerun, suppressions: Suppressions,
          without: Optional[Without] = None) -> Result:
    """`result` with the suppressed findings gone (see the module docstring for how fixes go).

    When a suppressed Change is found, the Change's rule is added to `options.ignore` and
    `without(options, changes)` drops it from what was planned; `rerun(source, options)` migrates
    `source` again where that gives None, or where there is no `without`. A Change of a fix whose
    sites stand alone (codes.PER_SITE) is handed to `without` in `changes` instead, and only its
    site is dropped; where that cannot be done, its fix goes whole like the others.
    """
    if not suppressions:
        return result
    from migrator.codes import PER_SITE

    turned_off: set = set()
    sites: set = set()  # the suppressed Changes of fixes whose sites stand alone
    rerun_options = options
    while True:
        hits = {c for c in result.changes if c.code not in turned_off and c not in sites
                and suppressed(suppressions, c.line, c.code, _name(c.code))}
        if not hits:
            break
        alone = {c for c in hits if c.code in PER_SITE and without is not None}
        turned_off |= {c.code for c in hits - alone}
        sites |= alone
        rerun_options = replace(options, ignore=(*options.ignore, *sorted(turned_off)))
        dropped = without(rerun_options, frozenset(sites)) if without is not None else None
        if dropped is None and sites:  # a site that does not stand alone here: its fix goes whole
            turned_off |= {c.code for c in sites}
            sites = set()
            rerun_options = replace(options, ignore=(*options.ignore, *sorted(turned_off)))
            dropped = without(rerun_options, frozenset()) if without is not None else None
        result = dropped if dropped is not None else rerun(source, rerun_options)
    diagnostics = tuple(
        d for d in result.diagnostics if not suppressed(suppressions, d.line, d.code, _name(d.code))
    )
    notes = _dropped_by_suppression(options, rerun_options, turned_off)
    if diagnostics == result.diagnostics and not notes:
        return result
    return replace(result, diagnostics=diagnostics, notes=(*result.notes, *notes))


def apply_planned(engine: Callable[[str, Options], Any], source: str, options: Options,
                  suppressions: Suppressions) -> Result:
    """`apply` for an engine that plans: `engine(source, options)` gives a Result (nothing to plan),
    or what was planned, with `result(options)` and `without(options, changes)` (api._Planned)."""
    def rerun(text: str, again: Options) -> Result:
        planned = engine(text, again)
        return planned if isinstance(planned, Result) else planned.result(again)

    planned = engine(source, options)
    if isinstance(planned, Result):
        return apply(planned, source, options, rerun, suppressions)
    return apply(planned.result(options), source, options, rerun, suppressions, planned.without)


def _dropped_by_suppression(options: Options, rerun_options: Options, turned_off: set) -> tuple:
    """What turning the suppressed fixes off took with it: the fixes that need them (they are off
    in this file too, as with --ignore), said in one sentence per suppressed fix."""
    from migrator.options import dropped_note

    newly = {code: cause for code, cause in rerun_options.dropped_fixes.items()
             if code not in options.dropped_fixes and cause in turned_off}
    return dropped_note(newly, why="is suppressed in this file (# ddp-migrate: ignore)")


def _name(code: str) -> str:
    from migrator.codes import NAMES

    return NAMES.get(code, "")
