"""The pure core: migrate(source, options) -> Result. No I/O, no printing.

parse -> analyze (one read-only pass) -> rules plan edits in registry order -> one transformer
applies them -> imports added/removed once -> the output is parsed again before it is returned.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, FrozenSet, List, Optional, Sequence, Tuple, Union

import libcst as cst

from migrator import edits, launch_comments, suppress
from migrator.analysis import ScriptFacts, analyze
from migrator.codegen import check_parses, with_imports
from migrator.context import FileContext
from migrator.errors import SourceParseError
from migrator.parsing import parse
from migrator.legacy_syntax import RULE as ASYNC_KEYWORD, rename_async_keywords
from migrator.options import Options
from migrator.triage import DISTRIBUTED, ENGINE, verdict
from migrator.rules import FIXERS, REPORTERS, rules_in_scope
from migrator.rules.launch_calls import RULE as LAUNCH_IN_PYTHON
from migrator.rules.rank_names import name_rank_checks
from migrator.rules.advisories.soundness import UNSOUND_MIGRATION
from migrator.soundness import later_binding_line, new_unbound_reads, original_line
from migrator.types import Change, Diagnostic, Result


def migrate(source: str, options: Optional[Options] = None, context: Optional[FileContext] = None,
            first_look: bool = True) -> Result:
    """Return the DDP version of `source` (unchanged when there is nothing to do).

    Raises SourceParseError when `source` is not valid Python 3, IntroducedSyntaxError
    if the engine would produce code that does not parse (a bug; nothing is written).
    A `# ddp-migrate: ignore[CODE]` comment suppresses what is reported on its line (see
    migrator.suppress: a suppressed fix turns its rule off for the file, its edits dropped from the plan).
    `context` says where the source comes from (its path, the project's modules); see
    migrator.context. Without it the file is judged by its text alone. `first_look=False` parses
    the file whatever its text (project mode, on a script it knows trains: check() says more).
    """
    return _suppressed(source, options or Options(), functools.partial(_plan, context=context, first_look=first_look))


def check(source: str, options: Optional[Options] = None, context: Optional[FileContext] = None,
          first_look: bool = True) -> Result:
    """What migrate() would change and report, without producing the new code.

    The same changes and diagnostics as migrate(); `code` is `source` itself and `pending`
    says whether migrate() would change it. For `--check` without `--diff`: it skips the edit
    pass, the import insertion, code generation and the re-parse, about 40% of the engine's time
    on a training script, plus the 0.2 s import of libcst.codemod (scripts/bench.py).
    tests/test_fixtures.py holds it to migrate()'s verdict on every fixture, input and expected.
    `first_look=False` parses every file, and reads what the engine knows of one that is
    distributed already (its required arguments): `ddp-migrate launch` needs that of any script.
    """
    engine = functools.partial(_plan, rewrite=False, context=context, first_look=first_look)
    return _suppressed(source, options or Options(), engine)


def _suppressed(source: str, options: Options, engine: Callable[..., Union[Result, "_Planned"]]) -> Result:
    """The engine's result with the suppressed findings gone. A suppressed fix's edits are dropped
    from the plan (`_Planned.without`); the file is planned again only where another fix read them."""
    return suppress.apply_planned(engine, source, options, suppress.python_suppressions(source))


def _migrate(source: str, options: Options, rewrite: bool = True, context: Optional[FileContext] = None,
             first_look: bool = True) -> Result:
    planned = _plan(source, options, rewrite, context, first_look)
    return planned if isinstance(planned, Result) else planned.result(options)


def _plan(source: str, options: Options, rewrite: bool = True, context: Optional[FileContext] = None,
          first_look: bool = True) -> Union[Result, "_Planned"]:
    """Parse, analyse and plan the fixes, each into a plan of its own; a Result when there is
    nothing for any rule."""
    seen = verdict(source, context, options.spawn) if first_look else ENGINE
    if seen != ENGINE:  # nothing for any rule; or distributed already, with nothing to report
        return Result(code=source, original=source, distributed=seen == DISTRIBUTED)
    module, parsed, renamed = _parse_renaming_async(source, options)
    facts = analyze(module, context, parsed)
    scope = rules_in_scope(facts, context is not None and context.tests(source))
    fixes = frozenset(rule.code for rule, _ in FIXERS if options.fix_enabled(rule.code) and (scope is None or rule.code in scope))
    settings = edits.Plan(batch=options.batch, eval=options.eval, spawn=options.spawn, fixes=fixes)
    parts: List[edits.Plan] = []
    for rule, planner in FIXERS:
        if rule.code in fixes:
            part = settings.for_fix(rule.code, parts)
            planner(facts, part)
            parts.append(part)
    return _Planned(source, module, parsed, renamed, facts, scope, context, rewrite, tuple(parts))


@dataclass(frozen=True)
class _Planned:
    """A file parsed, analysed and planned: each fix's plan (its edits, Changes and diagnostics),
    from which the Result is made, with every fix or with some of them dropped."""

    source: str
    module: cst.Module
    parsed: str  # the text parsed (`async=` renamed, when DDP017 made it parse)
    renamed: List[Tuple[int, int]]
    facts: ScriptFacts
    scope: Optional[FrozenSet[str]]
    context: Optional[FileContext]
    rewrite: bool
    parts: Tuple[edits.Plan, ...]

    def without(self, options: Options, changes: FrozenSet[Change] = frozenset()) -> Optional[Result]:
        """The Result with the fixes that `options` turns off dropped, and the sites of `changes`
        (edits.Plan.site), or None where that is not the same as planning the file again without
        them: a fix that stays read what a dropped one planned (edits.Plan.guarded), a Change is not
        a site of its own, or the `async=` rename the parse needed is turned off."""
        off = {part.owner for part in self.parts if not options.fix_enabled(part.owner)}
        sites = [site for part in self.parts if part.owner not in off for site in part.sites
                 if any(change in changes for change in site.changes)]
        if not all(any(change in site.changes for site in sites) for change in changes):
            return None
        kept = [part for part in self.parts if part.owner not in off]
        if any(part.reads & off for part in kept) or any(part.sites_read & {id(site) for site in sites} for part in kept):
            return None
        if self.renamed and not options.enabled(ASYNC_KEYWORD.code, ASYNC_KEYWORD.name):
            return None
        return self.result(options, sites)

    def result(self, options: Options, dropped: Sequence[edits.Plan] = ()) -> Result:
        """The migrated file, with the fixes `options` leaves on but the sites in `dropped`: the
        finishing step, the reporters (which read what the fixes planned), then the code."""
        source, module, facts, scope, context = self.source, self.module, self.facts, self.scope, self.context
        kept = [part for part in self.parts if options.fix_enabled(part.owner)]
        plan = edits.merged(kept, frozenset(part.owner for part in kept), dropped)
        name_rank_checks(facts, plan, source)
        for _, reporter in REPORTERS:
            reporter(facts, plan)  # what it reports is filtered by code below, like every diagnostic
        diagnostics = tuple(d for d in plan.diagnostics if options.enabled(d.code) and (scope is None or d.code in scope))
        diagnostics += _library_hint(source, facts, diagnostics, options, (module, facts.positions) if not self.renamed else None, context)
        test_module = context is not None and context.tests(source)
        trains = (facts.trains or facts.already_distributed) and not test_module
        # `models`: how the script spells the models it wraps, for project mode to follow into its modules.
        known = dict(launch_args=facts.required_arguments if trains else None,
                     distributed=facts.already_distributed and not test_module,
                     models=tuple((m.expr, _where(facts, m)) for m in facts.models if not m.already_ddp and m.wrap_after is not None))
        plan.changes += [Change(ASYNC_KEYWORD.code, line, col + 1, "async= renamed non_blocking= (PyTorch 0.4)") for line, col in self.renamed]
        documented = _documented_launches(source, options, scope)
        plan.changes += [Change(LAUNCH_IN_PYTHON.code, line, col + 1, "launch command in a comment rewritten for torchrun") for line, col, _, _ in documented]
        if plan.empty and not self.renamed and not documented:
            return Result(code=source, diagnostics=diagnostics, original=source, **known)
        changes = tuple(sorted(plan.changes, key=lambda c: (c.line, c.col)))
        if plan.empty:
            if not self.rewrite:
                return Result(source, changes, diagnostics, original=source, pending=True, **known)
            parsed = self.parsed
            code = launch_comments.apply(parsed, launch_comments.rewrites(parsed)) if documented else parsed
            return Result(code=code, changes=changes, diagnostics=diagnostics, original=source, **known)
        # The code is written in check mode too: what it reads is checked before any verdict.
        applied = edits.apply(module, plan, facts.parents, continuations="\\\n" in source or "\\\r\n" in source)
        if self.rewrite:
            code = with_imports(applied, plan).code
            if documented:  # found again on the new text: the edits above moved the lines
                code = launch_comments.apply(code, launch_comments.rewrites(code))
            check_parses(code)
        else:  # only read: the names the imports bind, not where isort would put them (no libcst.codemod)
            code = _binding_imports(plan) + applied.code
        unsound = _unsound(self.parsed, code)
        if unsound:  # a fix relied on something that did not happen: nothing is written
            kept = tuple(d for d in diagnostics if not d.fixable)
            return Result(code=source, diagnostics=kept + (unsound,), original=source, **known)
        if not self.rewrite:
            return Result(source, changes, diagnostics, original=source, pending=True, **known)
        return Result(code=code, changes=changes, diagnostics=diagnostics, original=source, **known)


def _binding_imports(plan: edits.Plan) -> str:
    """The import lines a plan adds, as plain text above the code: what `check()` reads instead of
    placing them (codegen.with_imports) to know which names they bind."""
    lines = []
    for mod, obj, asname in (*plan.imports, *plan.imports_if_used):
        alias = f" as {asname}" if asname else ""
        lines.append(f"from {mod} import {obj}{alias}\n" if obj else f"import {mod}{alias}\n")
    return "".join(lines)


def _unsound(before: str, after: str) -> Optional[Diagnostic]:
    """DDP125 when the migrated code reads a name where nothing binds it and the input did not
    (migrator.soundness), at the input line the first such read stands for; else None."""
    try:
        reads = new_unbound_reads(before, after)
    except SyntaxError:  # input that only LibCST parses (Python 2 leftovers): the check cannot compare
        return None
    if not reads:
        return None
    first = reads[0]
    line = original_line(before, after, first.line)
    bound = later_binding_line(before, first.name)
    where = f"the input binds it at line {bound}" if bound is not None else "nothing in the input binds it"
    names = sorted({read.name for read in reads})
    others = f" (also: {', '.join(f'`{n}`' for n in names if n != first.name)})" if len(names) > 1 else ""
    return Diagnostic(UNSOUND_MIGRATION.code, line, 1,
                      f"the migration would read `{first.name}` in `{first.scope}` before it is bound ({where}){others}: "
                      "a fix relied on something that did not happen, so the file is left unchanged")


def _where(facts: ScriptFacts, model) -> str:
    """Where a model is wrapped, as project mode names scopes (migrator.project.values): its
    top-level function (`main`), `Class.method`, the class for `self.x`, or `<module>`."""
    scope = facts.owner_of(model.wrap_after)
    named = [n for n in (scope, *_ancestors(facts, scope)) if isinstance(n, (cst.FunctionDef, cst.ClassDef))]
    named.reverse()
    if not named:
        return "<module>"
    if isinstance(named[0], cst.ClassDef):
        return named[0].name.value if model.expr.startswith("self.") or len(named) == 1 else f"{named[0].name.value}.{named[1].name.value}"
    return named[0].name.value


def _ancestors(facts: ScriptFacts, node):
    current = facts.parents.get(node)
    while current is not None:
        yield current
        current = facts.parents.get(current)


def _library_hint(source: str, facts, diagnostics, options: Options, parsed, context: Optional[FileContext] = None) -> tuple:
    """A training module with no entry point of its own is declined; DDP140 says how project mode
    migrates it with its caller, and what it would change (migrator.project.hints). For a module
    that builds its models itself, that is the engine's own migration with the script setting up
    the process group (FileContext.set_up_by, migrator.project.trainers)."""
    if facts.entry is not None or facts.has_main_guard or facts.already_distributed:
        return ()  # a script (a main guard) builds its own model: its decline says what to do
    from migrator.project.hints import LIBRARY_DECLINES, library_hint
    from migrator.rules.unmigrated import is_script

    if is_script(facts.module):
        return ()  # module-level training loop: a flat script, not a module its caller trains through

    declines = [d for d in diagnostics if d.code in LIBRARY_DECLINES]
    with_its_script = None
    if facts.models and (context is None or context.set_up_by is None):
        told = (context or FileContext())._replace(set_up_by="the script that uses it")
        with_its_script = functools.partial(_migrate, source, options, rewrite=False, context=told, first_look=False)
    hint = library_hint(source, declines, options, parsed, with_its_script)
    return (hint,) if hint is not None else ()


def _documented_launches(source: str, options: Options, scope) -> list:
    """Launch commands in comments (migrator.launch_comments), when DDP021 may run on this file."""
    if not options.enabled(LAUNCH_IN_PYTHON.code, LAUNCH_IN_PYTHON.name) or (scope is not None and LAUNCH_IN_PYTHON.code not in scope):
        return []
    return launch_comments.rewrites(source)


def _parse_renaming_async(source: str, options: Options) -> Tuple[cst.Module, str, List[Tuple[int, int]]]:
    """Parse `source`; a file that fails only because of PyTorch 0.3's `async=` keyword (DDP017) is
    parsed with that keyword renamed. Returns the module, the text it was parsed from, and where
    the renames were. Any other syntax error is raised as it is."""
    try:
        return parse(source), source, []
    except SourceParseError:
        renamed_source, renamed = rename_async_keywords(source)
        if not renamed or not options.enabled(ASYNC_KEYWORD.code, ASYNC_KEYWORD.name):
            raise
        try:
            return parse(renamed_source), renamed_source, renamed
        except SourceParseError:
            pass
        raise
