"""Where the script's setup goes: the entry point, and models built at import time.

The methods of a mixin of `_Analysis` (passes.py).
"""
from __future__ import annotations

from typing import Optional, Set, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis.facts import EntryPoint, ModelFact
from migrator.graph.bindings import dotted_name
from migrator.analysis.helpers import Block, Statement, _called_names, _referenced_names
from migrator.tree import descendants, parameters


def caller_entry() -> EntryPoint:
    """The entry point of a module whose caller sets up the process group (FileContext.set_up_by):
    placeholders outside the module, so no scope of it holds `local_rank` and every function of it
    runs after the setup (the module-level code, at import time, before it)."""
    placeholder = cst.SimpleStatementLine(body=[cst.Pass()])
    outside = cst.Module(body=[placeholder])
    return EntryPoint("caller", outside, placeholder, placeholder, outside, None)


def _handed_over_names(statement: cst.CSTNode) -> list:
    """`fire.Fire(demo)`, `typer.run(main)`: a function handed to a CLI runner, which calls it."""
    return [
        arg.value.value
        for call in descendants(statement, cst.Call)
        for arg in call.args
        if isinstance(arg.value, cst.Name) and arg.keyword is None
    ]


def _is_import(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _assigned_names(statements) -> Set[str]:
    """Every name in the statements' targets (`a, b.x, d[k] = ...` gives a, b, d, k): more than
    they bind, which only makes a move rarer."""
    found: Set[str] = set()
    for statement in statements:
        for node in descendants(statement, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.WithItem, cst.NamedExpr, cst.CompFor)):
            target = node.asname.name if isinstance(node, cst.WithItem) and node.asname else getattr(node, "target", None)
            if isinstance(node, cst.WithItem) and not node.asname:
                continue
            if target is not None:
                found.update(n.value for n in descendants(target, cst.Name))
                if isinstance(target, cst.Name):
                    found.add(target.value)
    return found


def _definition_time_names(statement: cst.CSTNode) -> Set[str]:
    """The names a def or class reads when it is defined, not when it is called."""
    found: Set[str] = set()
    if isinstance(statement, cst.FunctionDef):
        parts = [d.decorator for d in statement.decorators]
        parts += [p.default for p in parameters(statement) if p.default is not None]
        parts += [p.annotation for p in parameters(statement) if p.annotation is not None]
        if statement.returns is not None:
            parts.append(statement.returns)
        for part in parts:
            found |= _referenced_names(part)
    elif isinstance(statement, cst.ClassDef):
        for part in [*(d.decorator for d in statement.decorators), *(a.value for a in statement.bases), *(a.value for a in statement.keywords)]:
            found |= _referenced_names(part)
        for inner in getattr(statement.body, "body", ()):
            if isinstance(inner, (cst.FunctionDef, cst.ClassDef)):
                found |= _definition_time_names(inner)
            else:
                found |= _referenced_names(inner)
    return found


# How scripts read their command line: `parser.parse_args()`, and the helpers around it.
_PARSERS = frozenset({"parse_args", "parse_known_args", "parse_opt", "get_args", "parse_arguments", "get_arguments"})
# What may run before the process group exists: seeding, torch's global switches.
_TORCH_BEFORE_SETUP = ("torch.manual_seed", "torch.backends.", "torch.set_", "torch.use_deterministic_algorithms")


def _parses_arguments(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        N.attribute_name(call.func) in _PARSERS or (isinstance(call.func, cst.Name) and call.func.value in _PARSERS)
        for call in descendants(statement, cst.Call)
    )


def _runs_something(statement: cst.CSTNode) -> bool:
    """A module-level statement that does work when the file runs: a loop, a block, a bare call."""
    if isinstance(statement, (cst.For, cst.While, cst.With, cst.Try, cst.If)):
        return True
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) for small in statement.body
    )


class EntryAnalysis:
    """Where training starts: the entry point, the launch block, the setup hoisted into the guard."""

    # -- entry point -------------------------------------------------------------------
    def entry_point(self, guard: Optional[cst.If], models: Tuple[ModelFact, ...],
                    elsewhere: Tuple[cst.Call, ...] = ()) -> Optional[EntryPoint]:
        """Where the setup goes: before the statements that build the trained models, or that call
        into the modules that build and train them (`elsewhere`: `Solver(loader, config)`)."""
        sites = [m_.definition for m_ in models if m_.definition is not None]
        sites += [statement for statement in map(self.statement_of, elsewhere) if statement is not None]
        if not sites:
            return None
        launch_block: Block = guard.body if guard is not None else self.module  # type: ignore[assignment]
        # 1. Training written straight into the guard body (or, without a guard, at module level).
        direct = [s for s in sites if self.top_statement_in(s, launch_block) is not None]
        if direct:
            if guard is None and not any(_runs_something(s) for s in self.module.body):
                return None  # a module of definitions (`model = Net()`, `optimizer = SGD(...)`): a config, not a script
            kind = "guard" if guard is not None else "module"
            return self.entry_in_block(kind, launch_block, None, sites)
        # 2. A function called from the launch block that (transitively) builds the model.
        functions = {f.name.value: f for f in self.module.body if isinstance(f, (cst.FunctionDef, cst.ClassDef))}
        loaders = list(self.calls(N.DATALOADER))
        for position, statement in enumerate(launch_block.body):
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue
            for name in _called_names(statement) + _handed_over_names(statement):
                target = functions.get(name)
                if isinstance(target, cst.FunctionDef) and self.reaches(target, sites, functions, set()):
                    calls = sum(name in _called_names(s) for s in launch_block.body if not isinstance(s, (cst.FunctionDef, cst.ClassDef)))
                    if self.holds_loop(statement) or calls > 1 or self.builds_loaders(launch_block.body[:position], loaders, functions):
                        # `for fold in range(5): train_loop(fold)`, or `main(2)` then `main(10)`: one
                        # process group for all the calls (one set up again after a teardown can hang
                        # a rank), so the setup goes in the launch block, before the loop. Likewise
                        # `loader = load_data(); train(loader)`: the sampler needs the process group
                        # before the function that builds the model runs.
                        kind = "guard" if guard is not None else "module"
                        return self.entry_in_block(kind, launch_block, None, sites)
                    return self.entry_in_block("function", target.body, statement, sites)  # type: ignore[arg-type]
                if isinstance(target, cst.ClassDef) and self.reaches(target, sites, functions, set()):
                    # `Trainer(cfg).run()` in the guard: the class builds the model in a method, so
                    # the process group is set up in the guard, before the object exists.
                    return self.entry_in_block("guard" if guard is not None else "module", launch_block, None, sites)
        return None

    def trained_elsewhere(self) -> Tuple[cst.Call, ...]:
        """Calls of names the script imports from the modules migrated with it that train
        (FileContext.trains_through): `Solver(celeba_loader, rafd_loader, config)`, `solver.Solver(...)`."""
        names = self.context.trains_through if self.context is not None else frozenset()
        if not names:
            return ()
        return tuple(call for call in self.c.calls if (dotted_name(call.func) or "").split(".")[0] in names)

    def builds_loaders(self, statements, loaders, functions) -> bool:
        """Does one of `statements` build a DataLoader, itself or through a function of this file?"""
        if not loaders:
            return False
        for statement in statements:
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                continue
            if any(self.is_inside(loader, statement) for loader in loaders):
                return True
            for name in _called_names(statement):
                target = functions.get(name)
                if isinstance(target, cst.FunctionDef) and self.reaches(target, loaders, functions, set()):
                    return True
        return False

    def import_time_model(self, guard: Optional[cst.If], models: Tuple[ModelFact, ...]) -> Optional[Statement]:
        """A model built at module level although the module has a main guard.

        The setup cannot go there: DataLoader workers started with spawn/forkserver re-import the
        main module, and would each try to join the process group.
        """
        if guard is None:
            return None
        return next(
            (m_.definition for m_ in models if m_.definition is not None and self.parent(m_.definition) is self.module),
            None,
        )

    def hoist_into_guard(self, guard: Optional[cst.If], models: Tuple[ModelFact, ...]) -> Optional[Tuple[EntryPoint, Statement]]:
        """The entry point of a script whose module-level set-up moves into its main guard (see
        guard_hoist), and the first statement that moves."""
        module_level = [m_.definition for m_ in models if m_.definition is not None and self.parent(m_.definition) is self.module]
        if guard is None or not module_level:
            return None
        found = self.guard_hoist(guard, module_level[0])
        if found is None or any(definition not in found[1] for definition in module_level):
            return None
        first, _ = found
        body = list(guard.body.body)
        training = next((s for s in body if self.holds_loop(s)), body[0])
        return EntryPoint("guard", guard.body, first, training, self.module, None), first

    def guard_hoist(self, guard: Optional[cst.If], model_statement: Statement) -> Optional[Tuple[Statement, Tuple[Statement, ...]]]:
        """A script that parses its arguments at module level, builds its model (and loaders) there,
        and trains in its main guard (pytorch/examples' VAE): the module-level work after the parsing
        moves into the guard, after the setup, so DataLoader workers that re-import the script
        (spawn, forkserver) never join the process group or build a DDP model. Such a module cannot be
        imported without its command line anyway, so nothing that imports it loses a name it had.

        Returns the first statement that moves (the setup goes before it) and every statement that
        moves, or None when moving could change what runs: a definition after them that reads one
        of their names when it is defined (a decorator, a default, a base class, a class body), one
        they rebind, an import among them (a `sys.path` change before it must stay first), code after
        the guard, or no parsing at module level before the model."""
        body = list(self.module.body)
        if guard is None or guard not in body or model_statement not in body:
            return None
        parsed = next((i for i, statement in enumerate(body) if _parses_arguments(statement)), None)
        model_at, guard_at = body.index(model_statement), body.index(guard)
        if parsed is None or not parsed < model_at < guard_at:
            return None
        if any(not N.stays_at_module_level(statement) for statement in body[guard_at + 1:]):
            return None
        moved = tuple(s for s in body[parsed + 1:guard_at] if not N.stays_at_module_level(s))
        if not moved or any(_is_import(s) for s in moved):
            return None
        names = _assigned_names(moved)
        first = body.index(moved[0])
        for statement in body[first:guard_at]:
            if N.stays_at_module_level(statement) and not _is_import(statement):
                if getattr(statement, "name", None) is not None and statement.name.value in names:
                    return None
                if _definition_time_names(statement) & names:
                    return None
        return moved[0], moved

    def holds_loop(self, statement: cst.CSTNode) -> bool:
        """A loop, or a try/with/if around one (`try: for epoch ...: except KeyboardInterrupt:`)."""
        if isinstance(statement, (cst.For, cst.While)):
            return True
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef, cst.SimpleStatementLine)):
            return False
        return any(self.is_inside(loop, statement) and self.enclosing_function(loop) is self.enclosing_function(statement) for loop in self.c.loops)

    def top_statement_in(self, node: cst.CSTNode, block: Block) -> Optional[Statement]:
        """The statement of `block` that contains `node`, unless a def/class lies in between."""
        for anc in [node, *self.ancestors(node)]:
            if isinstance(anc, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if self.parent(anc) is block:
                return anc  # type: ignore[return-value]
        return None

    def reaches(self, fn: cst.CSTNode, sites, functions, seen: Set[str]) -> bool:
        if any(anc is fn for s in sites for anc in self.ancestors(s)):
            return True
        name = fn.name.value  # type: ignore[attr-defined]
        seen.add(name)
        return any(
            callee in functions and callee not in seen and self.reaches(functions[callee], sites, functions, seen)
            for callee in _referenced_names(fn)
        )

    def entry_in_block(self, kind: str, block: Block, call_statement: Optional[Statement], sites=()) -> EntryPoint:
        body = list(block.body)
        index = 0
        while index < len(body) - 1 and N.is_preamble(body[index], module_level=isinstance(block, cst.Module)):
            index += 1
        # After the arguments are parsed, so `--help` and a bad argument never start a process group,
        # when nothing before the parsing needs the group (the model, a loader, a device, a loop).
        parsed = next((i for i in range(len(body) - 2, index - 1, -1) if _parses_arguments(body[i])), None)
        if parsed is not None and all(self.needs_no_process_group(statement, sites) for statement in body[index:parsed]):
            index = parsed + 1
        scope = self.scope_of(body[index])
        training = next((s for s in body[index:] if self.holds_loop(s)), body[index])
        return EntryPoint(kind, block, body[index], training, scope, call_statement)  # type: ignore[arg-type]

    def needs_no_process_group(self, statement: cst.CSTNode, sites) -> bool:
        """A simple statement that can run before the setup: no model, loader, device or rank in it,
        and nothing of torch but seeding and global switches (`torch.manual_seed(0)`, `config = load(path)`)."""
        if not isinstance(statement, cst.SimpleStatementLine) or N.mentions_cuda(statement) or N.mentions_rank(statement):
            return False
        if any("device" in name.value.lower() for name in descendants(statement, cst.Name)):
            return False
        for call in descendants(statement, cst.Call):
            qualified = self.c.resolve(call.func) or ""
            if qualified.startswith("torch") and not qualified.startswith(_TORCH_BEFORE_SETUP):
                return False
            if call in self.c.optimizer_helpers or N.attribute_name(call.func) in ("cuda", "to"):
                return False
        # The statements that build the trained models: their wrap follows them, so the setup must too.
        return not any(site is statement or self.is_inside(site, statement) for site in sites)
