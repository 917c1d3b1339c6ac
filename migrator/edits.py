"""The plan rules write into, and the one transformer that carries it out.

Rules never transform the tree themselves: they say *what* to change, keyed by nodes of the
original tree (replace this node, insert these statements before/after that one, wrap the
tail of that block in try/finally). `apply` does it all in a single traversal, so rules
compose without seeing each other's intermediate trees.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from migrator import names as N

from migrator.types import Change, Diagnostic

Replacer = Callable[[cst.CSTNode], Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]]


@dataclass
class Plan:
    """Everything one migrate() call decided. Created per call; never shared."""

    replacements: Dict[cst.CSTNode, List[Replacer]] = field(default_factory=dict)
    before: Dict[cst.CSTNode, List[cst.BaseStatement]] = field(default_factory=dict)
    after: Dict[cst.CSTNode, List[cst.BaseStatement]] = field(default_factory=dict)
    wrap_tail: Dict[cst.CSTNode, Tuple[cst.CSTNode, List[cst.BaseStatement]]] = field(default_factory=dict)
    # block -> [(first, last, `with` header, node it is written from)]: statements first..last of the
    # block run under the `with`; the header is a function of that node as the other edits left it
    wrap_with: Dict[cst.CSTNode, List[Tuple[cst.CSTNode, cst.CSTNode, Callable[[cst.CSTNode], str], cst.CSTNode]]] = field(default_factory=dict)
    guards: Dict[cst.CSTNode, str] = field(default_factory=dict)  # statement -> condition it runs under
    # statement -> [(expression in it, name)]: each expression is computed into its name just before
    # the statement (as the other edits left it), and the statement reads the name instead
    computed: Dict[cst.CSTNode, List[Tuple[cst.CSTNode, str]]] = field(default_factory=dict)
    # main guard -> first statement: the module's statements from that one to the guard (with what
    # is inserted before it, definitions and imports aside) move to the top of the guard's body
    hoists: Dict[cst.CSTNode, cst.CSTNode] = field(default_factory=dict)
    imports: List[Tuple[str, Optional[str], Optional[str]]] = field(default_factory=list)  # module, obj, asname
    # imports added only when the new code reads the name they bind (codegen.with_imports)
    imports_if_used: List[Tuple[str, Optional[str], Optional[str]]] = field(default_factory=list)
    unused_imports: List[Tuple[str, str, Optional[str]]] = field(default_factory=list)
    # removed statements whose comment lines the edit put elsewhere itself (above the code that
    # replaces them); any other removed statement's comments go to the statement after it
    comments_moved: Set[cst.CSTNode] = field(default_factory=set)
    changes: List[Change] = field(default_factory=list)
    diagnostics: List[Diagnostic] = field(default_factory=list)
    batch: Optional[str] = None  # Options.batch: what a sharded loader's batch_size means (rules.global_batch)
    eval: Optional[str] = None  # Options.eval: whether evaluation loaders are sharded (rules.sharded_eval)
    spawn: bool = False  # Options.spawn: mp.spawn scripts become torchrun scripts (rules.spawn)
    # The fixes that run on this file (Options.fix_enabled): reporters say what a migration changes
    # in meaning only where the fix that changes it runs.
    fixes: FrozenSet[str] = frozenset()
    # Each fix plans into a plan of its own (`for_fix`), so that its edits and Changes are its own:
    # suppressing the fix drops them (`merged`) without planning the file again. `owner` is the
    # fix's code, `earlier` the plans of the fixes before it, which it may read (`guarded`), and
    # `read_from` the fixes whose edits it read: dropping one of those would change its plan.
    owner: str = ""
    earlier: Tuple["Plan", ...] = ()
    read_from: Set[str] = field(default_factory=set)
    read_sites: Set[int] = field(default_factory=set)  # id() of the earlier fixes' sites it read
    # A fix whose sites stand alone (Rule.per_site: a print it guards) plans each into a site of
    # its own (`site`), with its Change: suppressing that Change drops the one site.
    sites: List["Plan"] = field(default_factory=list)

    def for_fix(self, code: str, earlier: Sequence["Plan"]) -> "Plan":
        """An empty plan for fix `code`, with this plan's settings, after the plans in `earlier`."""
        return Plan(batch=self.batch, eval=self.eval, spawn=self.spawn, fixes=self.fixes, owner=code,
                    earlier=tuple(earlier))

    def site(self) -> "Plan":
        """A plan for one site of this fix, with the site's Change (see `sites`)."""
        site = Plan(batch=self.batch, eval=self.eval, spawn=self.spawn, fixes=self.fixes, owner=self.owner,
                    earlier=(*self.earlier, self))
        self.sites.append(site)
        return site

    def guarded(self, statement: cst.CSTNode) -> bool:
        """Does `statement` already run under a guard, this fix's own or an earlier fix's?"""
        if _guard_of(self, statement) is not None:
            return True
        for plan in self.earlier:
            holder = _guard_of(plan, statement)
            if holder is not None:
                if holder.owner != self.owner:
                    self.read_from.add(holder.owner)
                    self.read_sites.add(id(holder))
                return True
        return False

    @property
    def reads(self) -> Set[str]:
        """The other fixes whose edits this fix read (`read_from`), its sites' included."""
        return self.read_from.union(*(site.read_from for site in self.sites))

    @property
    def sites_read(self) -> Set[int]:
        """id() of the other fixes' sites whose edits this fix read, its sites' included."""
        return self.read_sites.union(*(site.read_sites for site in self.sites))

    def replace(self, node: cst.CSTNode, replacer: Replacer) -> None:
        self.replacements.setdefault(node, []).append(replacer)

    def insert_before(self, statement: cst.CSTNode, statements: Sequence[cst.BaseStatement]) -> None:
        self.before.setdefault(statement, []).extend(statements)

    def insert_after(self, statement: cst.CSTNode, statements: Sequence[cst.BaseStatement]) -> None:
        self.after.setdefault(statement, []).extend(statements)

    def try_finally_from(self, block: cst.CSTNode, first: cst.CSTNode, final: Sequence[cst.BaseStatement]) -> None:
        """Run `block` from `first` to its end in `try:`, with `final` in `finally:`."""
        self.wrap_tail[block] = (first, list(final))

    def with_block(self, block: cst.CSTNode, first: cst.CSTNode, last: cst.CSTNode,
                   header: Callable[[cst.CSTNode], str], source: cst.CSTNode) -> None:
        """Run statements `first` to `last` of `block` inside `with <header(source)>:`, where `source` is
        a statement of the block as the other edits left it (`model.x` already `model.module.x`)."""
        self.wrap_with.setdefault(block, []).append((first, last, header, source))

    def guard(self, statement: cst.CSTNode, condition: str) -> None:
        """Run `statement` only when `condition` holds; neighbours with the same condition share one `if`."""
        self.guards.setdefault(statement, condition)

    def compute_first(self, statement: cst.CSTNode, value: cst.CSTNode, name: str) -> None:
        """Compute `value` (an expression of `statement`) into `name` just before `statement`, which
        then reads `name`: `print(test(model))` under a guard, with `test(model)` run by every rank."""
        self.computed.setdefault(statement, []).append((value, name))

    def hoist_into(self, guard: cst.CSTNode, first: cst.CSTNode) -> None:
        self.hoists[guard] = first

    def need_import(self, module: str, obj: Optional[str] = None, asname: Optional[str] = None) -> None:
        if (module, obj, asname) not in self.imports:
            self.imports.append((module, obj, asname))

    def need_import_if_used(self, module: str, obj: Optional[str] = None, asname: Optional[str] = None) -> None:
        """`import torch.distributed as dist` for a module whose caller sets up the process group:
        only when one of the edits wrote a rank check."""
        if (module, obj, asname) not in self.imports_if_used:
            self.imports_if_used.append((module, obj, asname))

    @property
    def empty(self) -> bool:
        return not (self.replacements or self.before or self.after or self.wrap_tail or self.guards or self.wrap_with
                    or self.hoists or self.computed)


def _guard_of(plan: Plan, statement: cst.CSTNode) -> Optional[Plan]:
    """The plan, `plan` or one of its sites, that guards `statement` (None: neither)."""
    return next((p for p in (plan, *plan.sites) if statement in p.guards), None)


def merged(parts: Sequence[Plan], fixes: FrozenSet[str], dropped: Sequence[Plan] = ()) -> Plan:
    """One plan holding the edits, Changes and diagnostics of `parts` (the fixes' plans, in planning
    order, each followed by its sites but those in `dropped`), as if each fix had planned into it
    in turn: lists keep the fixes' order, and the first guard of a statement wins (Plan.guard)."""
    settings = parts[0] if parts else Plan()
    plan = Plan(batch=settings.batch, eval=settings.eval, spawn=settings.spawn, fixes=fixes)
    left_out = {id(site) for site in dropped}
    for part in (p for whole in parts for p in (whole, *whole.sites) if id(p) not in left_out):
        for target, source in ((plan.replacements, part.replacements), (plan.before, part.before),
                               (plan.after, part.after), (plan.wrap_with, part.wrap_with),
                               (plan.computed, part.computed)):
            for node, items in source.items():
                target.setdefault(node, []).extend(items)  # type: ignore[attr-defined]
        plan.wrap_tail.update(part.wrap_tail)
        plan.hoists.update(part.hoists)
        for statement, condition in part.guards.items():
            plan.guard(statement, condition)
        for spec in part.imports:
            plan.need_import(*spec)
        for spec in part.imports_if_used:
            plan.need_import_if_used(*spec)
        plan.unused_imports.extend(part.unused_imports)
        plan.comments_moved.update(part.comments_moved)
        plan.changes.extend(part.changes)
        plan.diagnostics.extend(part.diagnostics)
    return plan


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: Plan, parents: Optional[Mapping[cst.CSTNode, cst.CSTNode]] = None, indent: Optional[str] = None) -> None:
        super().__init__()
        self.plan = plan
        self.indent = indent  # one level, as the file indents: moved backslash continuations shift by it
        self.paths = _paths_to_edits(plan, parents) if parents is not None else None
        self.produced: Dict[cst.CSTNode, cst.CSTNode] = {}  # original statement -> updated statement
        self.wrap_firsts: Set[cst.CSTNode] = {first for first, _ in plan.wrap_tail.values()} | {
            node for ranges in plan.wrap_with.values() for first, last, _, source in ranges for node in (first, last, source)
        } | {node for pair in plan.hoists.items() for node in pair}
        self.guarded: Dict[cst.CSTNode, str] = {}  # updated statement -> its condition
        self.guarded_in: Dict[cst.CSTNode, cst.If] = {}  # updated statement -> the `if` its guard put it in
        self.names: Dict[cst.CSTNode, str] = {value: name for pairs in plan.computed.values() for value, name in pairs}
        self.values: Dict[cst.CSTNode, cst.CSTNode] = {}  # original expression -> updated, computed first
        self.computations: Dict[cst.CSTNode, List[cst.BaseStatement]] = {}  # original statement -> its `name = value`s
        # The comment lines above a statement an edit removed, until its block is left (_keep_comments),
        # and what each statement of such a block became first (its updated self, or the first inserted before it).
        self.orphaned: Dict[cst.CSTNode, List[cst.EmptyLine]] = {}
        self.emitted: Dict[cst.CSTNode, cst.CSTNode] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Only walk down to the edited nodes: the rest of the tree is kept as it is.
        return self.paths is None or node in self.paths

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
        result = updated
        for replacer in self.plan.replacements.get(original, ()):
            result = replacer(result)  # type: ignore[assignment]
        if self.orphaned and isinstance(result, (cst.IndentedBlock, cst.Module)):
            result = self._keep_comments(original, result)
        if original in self.names:
            self.values[original] = result
            result = cst.Name(self.names[original])
        computed = self._computed(original, result)
        if computed:
            result = result.with_changes(leading_lines=())  # they go above the first computation
            self.computations[original] = computed
        if self.guarded and isinstance(result, (cst.IndentedBlock, cst.Module)):
            result = self._merge_guards(result)
        if self.plan.hoists and isinstance(result, cst.Module):
            result = self._hoist(result)
        if original in self.plan.wrap_with:
            result = self._wrap_with(original, result)
        if original in self.plan.wrap_tail:
            result = self._wrap_tail(original, result)
        if original in self.wrap_firsts:
            self.produced[original] = result
        if original in self.plan.guards and isinstance(result, cst.BaseStatement):
            self.guarded[result] = self.plan.guards[original]
        before = [*self.plan.before.get(original, []), *computed]  # the computations right before it
        after = self.plan.after.get(original, [])
        if isinstance(original, cst.BaseStatement):
            self._emitted(original, result, before, after)
        if before or after:
            if isinstance(result, cst.BaseStatement):
                return cst.FlattenSentinel([*before, result, *after])
            if isinstance(result, cst.RemovalSentinel):
                return cst.FlattenSentinel([*before, *after])
        return result

    def _emitted(self, original: cst.BaseStatement, result, before, after) -> None:
        made = [result] if isinstance(result, cst.BaseStatement) else list(result.nodes) if isinstance(result, cst.FlattenSentinel) else []
        kept = bool(made)  # replaced by other statements: the replacer chose what becomes of its comments
        first = next(iter([*before, *made, *after]), None)
        if first is not None:
            self.emitted[original] = first
        if kept or original in self.plan.comments_moved:
            return
        # An edit that put code in its place may have given that code the comment already.
        placed = {line.comment.value for s in (*before, *after) for line in getattr(s, "leading_lines", ()) if line.comment}
        orphans = [line for line in original.leading_lines if line.comment is not None and line.comment.value not in placed]
        if orphans:
            self.orphaned[original] = orphans

    def _renamed(self, old: cst.CSTNode, new: cst.CSTNode) -> cst.CSTNode:
        """`new` stands for `old` in what later steps look up by identity (guards, produced statements)."""
        if old in self.guarded:
            self.guarded[new] = self.guarded.pop(old)
        for key, value in self.produced.items():
            if value is old:
                self.produced[key] = new
        return new

    def _keep_comments(self, original, block):
        """A removed statement's comment lines go above the statement that follows it (`# see issue
        #1` above `opt.workers *= n_gpu` and `opt.batch_size *= n_gpu` stays when the first goes), or
        to the block's end: a user's comment is never lost."""
        body = list(block.body)
        carried: List[cst.EmptyLine] = []
        for statement in original.body:
            if statement in self.orphaned:
                carried += self.orphaned.pop(statement)
                continue  # what was inserted around it is the edit's own code: the comment goes below
            index = next((i for i, s in enumerate(body) if s is self.emitted.get(statement)), None) if carried else None
            if index is not None:
                body[index] = self._renamed(body[index], body[index].with_changes(
                    leading_lines=[*carried, *body[index].leading_lines]))
                carried = []
        if carried:
            return block.with_changes(body=body, footer=[*block.footer, *carried])
        return block.with_changes(body=body)

    def _computed(self, original: cst.CSTNode, result: cst.CSTNode) -> List[cst.BaseStatement]:
        """`name = <value>` for each value the statement computes first (Plan.compute_first)."""
        pairs = self.plan.computed.get(original, ())
        assigns: List[cst.BaseStatement] = [
            cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], self.values[value])])  # type: ignore[arg-type]
            for value, name in pairs if value in self.values
        ]
        if assigns:
            assigns[0] = assigns[0].with_changes(leading_lines=getattr(result, "leading_lines", ()))
        return assigns

    def _index_of(self, body: List[cst.CSTNode], node: Optional[cst.CSTNode]) -> Optional[int]:
        """Where `node` is in `body`: itself, or inside the `if` a guard put it in."""
        if node is None:
            return None
        holder = self.guarded_in.get(node)
        return next((index for index, statement in enumerate(body) if statement is node or statement is holder), None)

    def _merge_guards(self, block):
        body = list(block.body)
        if not any(statement in self.guarded for statement in body):
            return block
        merged: List[cst.BaseStatement] = []
        index = 0
        while index < len(body):
            condition = self.guarded.get(body[index])
            if condition is None:
                merged.append(body[index])
                index += 1
                continue
            run = [body[index]]
            index += 1
            while index < len(body) and self.guarded.get(body[index]) == condition and not _has_comment(body[index]):
                run.append(body[index])
                index += 1
            guarded = _if_block(condition, [_shift_continuations(s, self.indent) for s in run])
            self.guarded_in.update((statement, guarded) for statement in run)
            merged.append(guarded)
        return block.with_changes(body=merged)

    def _hoist(self, module: cst.Module) -> cst.Module:
        for guard, first in self.plan.hoists.items():
            body = list(module.body)
            at_guard = self._index_of(body, self.produced.get(guard))
            start = self._index_of(body, self.produced.get(first))
            if at_guard is None or start is None or start > at_guard:
                continue  # an edit replaced one of them: the set-up stays at module level, as for a flat script
            inserted = self.plan.before.get(first, [])
            while start > 0 and any(body[start - 1] is statement for statement in inserted):
                start -= 1  # the setup goes with the first statement it was put before
            moving = [s for s in body[start:at_guard] if not N.stays_at_module_level(s)]
            staying = [s for s in body[start:at_guard] if N.stays_at_module_level(s)]
            moved = [_shift_continuations(_one_blank_line(_unindent_blank_lines(s)), self.indent) for s in moving]
            if moved:
                moved[0] = moved[0].with_changes(leading_lines=[l for l in moved[0].leading_lines if l.comment is not None])
            target = body[at_guard]
            target = target.with_changes(body=target.body.with_changes(body=[*moved, *target.body.body]))
            module = module.with_changes(body=[*body[:start], *staying, target, *body[at_guard + 1:]])
        return module

    def _wrap_with(self, original: cst.CSTNode, updated):
        body = list(updated.body)
        for first, last, header, source in self.plan.wrap_with[original]:
            start = next((i for i, s in enumerate(body) if s is self.produced.get(first)), None)
            end = next((i for i, s in enumerate(body) if s is self.produced.get(last)), None)
            written = self.produced.get(source)
            if start is None or end is None or end < start or written is None:
                continue  # a statement of the range was removed or replaced by several: leave the block
            inner = [_shift_continuations(_unindent_blank_lines(s), self.indent) for s in body[start:end + 1]]
            leading = inner[0].leading_lines  # a comment above the first statement stays above the `with`
            inner[0] = inner[0].with_changes(leading_lines=())
            wrapped = cst.With(
                items=[cst.WithItem(item=cst.parse_expression(header(written)))],
                body=cst.IndentedBlock(body=inner),
                leading_lines=leading,
            )
            body[start:end + 1] = [wrapped]
        return updated.with_changes(body=body)

    def _wrap_tail(self, original: cst.CSTNode, updated):
        first, final = self.plan.wrap_tail[original]
        body = list(updated.body)
        start = self._index_of(body, self.produced[first])
        if start is None:  # an edit replaced the statement: say so, rather than lose the teardown
            raise ValueError("the first statement of the try/finally was replaced by another edit")
        computed = self.computations.get(first, [])
        while start > 0 and any(body[start - 1] is statement for statement in computed):
            start -= 1  # what the statement computes first is part of it
        tail = [_shift_continuations(_unindent_blank_lines(s), self.indent) for s in body[start:]]
        # A comment above the first wrapped statement stays above the `try:`.
        leading = tail[0].leading_lines
        tail[0] = tail[0].with_changes(leading_lines=())
        wrapped = cst.Try(
            body=cst.IndentedBlock(body=tail),
            finalbody=cst.Finally(body=cst.IndentedBlock(body=final)),
            leading_lines=leading,
        )
        return updated.with_changes(body=[*body[:start], wrapped])




def _one_blank_line(statement):
    """Module-level code moved into a block keeps at most one blank line above each statement (the
    two around top-level definitions read as a gap in a block)."""
    lines, blank = [], 0
    for line in statement.leading_lines:
        blank = blank + 1 if line.comment is None else 0
        if blank <= 1:
            lines.append(line)
    return statement.with_changes(leading_lines=lines)


def _unindent_blank_lines(statement):
    """Blank lines above a statement moved into a deeper block stay empty (no trailing spaces)."""
    lines = [
        line.with_changes(indent=False) if line.comment is None else line for line in statement.leading_lines
    ]
    return statement.with_changes(leading_lines=lines)


class _ContinuationShifter(cst.CSTTransformer):
    """Backslash continuation lines keep their place relative to the statement moved one level in.

    libcst re-indents lines inside brackets itself; a `\\` line break is plain whitespace to it.
    """

    def __init__(self, indent: str) -> None:
        super().__init__()
        self.indent = indent

    def leave_SimpleWhitespace(self, original, updated):
        if "\\" not in updated.value:
            return updated
        # A whitespace token's text, not Python source: `\` line breaks (LF or CRLF) get one more level.
        return updated.with_changes(value=_CONTINUATION.sub(lambda m: m.group(0) + self.indent, updated.value))


_CONTINUATION = re.compile(r"\\\r?\n")


def _shift_continuations(statement, indent: Optional[str]):
    if indent is None or not isinstance(statement, cst.CSTNode):
        return statement
    return statement.visit(_ContinuationShifter(indent))


def _has_comment(statement) -> bool:
    return any(line.comment is not None for line in statement.leading_lines)


def _if_block(condition: str, statements: List[cst.BaseStatement]) -> cst.If:
    first, rest = statements[0], statements[1:]
    body = [first.with_changes(leading_lines=()), *(_unindent_blank_lines(s) for s in rest)]
    return cst.If(
        test=cst.parse_expression(condition),
        body=cst.IndentedBlock(body=body),
        leading_lines=first.leading_lines,
    )


def _paths_to_edits(plan: Plan, parents: Mapping[cst.CSTNode, cst.CSTNode]) -> Set[cst.CSTNode]:
    """Every edited node and all its ancestors."""
    targets = [*plan.replacements, *plan.before, *plan.after, *plan.wrap_tail, *plan.guards, *plan.wrap_with,
               *(value for pairs in plan.computed.values() for value, _ in pairs),
               *(node for ranges in plan.wrap_with.values() for first, last, _, source in ranges for node in (first, last, source))]
    paths: Set[cst.CSTNode] = set()
    for node in targets:
        while node is not None and node not in paths:
            paths.add(node)
            node = parents.get(node)
    return paths


def apply(
    module: cst.Module,
    plan: Plan,
    parents: Optional[Mapping[cst.CSTNode, cst.CSTNode]] = None,
    continuations: bool = True,
) -> cst.Module:
    """Carry out the plan; with the parent map, only the paths down to the edits are visited.

    `continuations`: the source has backslash line breaks, which statements moved into a new block
    must shift (a walk over each moved statement; skipped when the source has none).
    """
    indent = module.default_indent if continuations else None
    return module.visit(_Applier(plan, parents, indent))  # type: ignore[return-value]
