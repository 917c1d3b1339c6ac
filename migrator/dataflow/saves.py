"""Checkpoints and the code only rank 0 should run: saves, prints and logs, rank checks and barriers."""
from __future__ import annotations

import itertools
import re
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from migrator import names as N
from migrator.names import attribute_name
from migrator.dataflow.core import FlowBase, LoaderFact, SaveSite, Statement, _iterated, code_of
from migrator.tree import class_methods, descendants


# Folders and files each process makes for itself (a new name in every process)
_PRIVATE_FOLDERS = frozenset({"tempfile.TemporaryDirectory", "tempfile.mkdtemp", "tempfile.mkstemp", "tempfile.NamedTemporaryFile"})


class SaveFlow(FlowBase):
    """Checkpoint writes, per-step prints, reads after a write, rank-divergent checks."""

    def saves(self) -> Tuple[SaveSite, ...]:
        sites = []
        for call in [*self.a.calls(N.RESULT_WRITES), *self.imported_checkpoint_helpers()]:
            if self.under_rank_check(call) or any(self.private_path(arg.value) for arg in call.args[1:]):
                continue
            holder = self.enclosing_lambda(call)
            if holder is not None:
                if isinstance(holder.body, cst.IfExp) and N.mentions_rank(holder.body.test):
                    continue  # `lambda: (torch.save(...) if rank == 0 else None)`: decided already
                shared = self.a.statement_of(holder) if self.runs_shared_code(holder.body) else None
                sites.append(SaveSite(call, (), shared, None, holder))
                continue
            fn = self.a.enclosing_function(call)
            helper_calls = self.save_helper_calls(fn) if fn is not None else None
            inner = self.save_statement(call)
            if helper_calls:
                guard = tuple(self.a.statement_of(c) for c in helper_calls if not self.under_rank_check(c))
            else:
                guard = (inner, *self.housekeeping_near(inner))
            statements = tuple(s for s in guard if s is not None)
            shared = next((s for s in statements if self.runs_shared_code(s, saving=call)), None)
            sites.append(SaveSite(call, statements, shared, inner if helper_calls else None))
        return tuple(sites)

    def private_path(self, node: cst.BaseExpression) -> bool:
        return private_path(self.c, node)

    def enclosing_lambda(self, call: cst.Call) -> Optional[cst.Lambda]:
        """The lambda the write is in (`lambda epoch: torch.save(state, path)`), if any."""
        for anc in self.a.ancestors(call):
            if isinstance(anc, cst.Lambda):
                return anc
            if isinstance(anc, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return None
        return None

    def imported_checkpoint_helpers(self) -> List[cst.Call]:
        """`save_checkpoint({...}, path)` imported from the project (`from model.utils.net_utils import
        save_checkpoint`): a checkpoint write we cannot see into, called as a statement of its own."""
        found = []
        for call in self.c.calls:
            name = call.func.value if isinstance(call.func, cst.Name) else attribute_name(call.func)
            if not name or not _CHECKPOINT_HELPER.match(name) or self.callee(call) is not None:
                continue
            qname = self.c.resolve(call.func) or ""
            statement = self.a.statement_of(call)
            if qname.startswith(("torch.", "numpy.")) or not isinstance(statement, cst.SimpleStatementLine):
                continue
            # A plain name, or an attribute of an imported module (`utils.save_checkpoint`): never a
            # method of some object (`trainer.save_model()` may coordinate the ranks itself).
            if _bare_call(statement, call) and (isinstance(call.func, cst.Name) or qname):
                found.append(call)
        return found

    def housekeeping_near(self, save: Optional[Statement]) -> Tuple[Statement, ...]:
        """Statements beside `save` that only manage checkpoint files (`for f in glob.glob(prefix + "*"):
        if f != path: os.remove(f)`, `shutil.copyfile(path, best)`): on every rank they would delete or
        copy files that only rank 0 writes, racing it."""
        block = self.a.block_of(save) if save is not None else None
        if block is None:
            return ()
        return tuple(
            statement for statement in block.body  # type: ignore[union-attr]
            if statement is not save and self.only_manages_files(statement)
        )

    def only_manages_files(self, statement: cst.CSTNode) -> bool:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)) or self.runs_shared_code(statement):
            return False
        calls = list(descendants(statement, cst.Call))
        if not any(self.c.resolve(call.func) in N.FILE_MUTATIONS for call in calls):
            return False
        # State every rank keeps (`if loss < best: best = loss; shutil.copyfile(...)`), control flow
        # or training must stay on every rank: ranks that disagree on it would diverge or hang.
        changes_state = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Break, cst.Continue, cst.Return)
        return not any(True for _ in descendants(statement, changes_state)) and not self.trains(statement)

    def runs_shared_code(self, node: cst.CSTNode, depth: int = 0, saving: Optional[cst.Call] = None) -> bool:
        """Does `node` run something every rank must run: the model's forward, a collective?

        Such code must never sit behind a rank-0 guard: the other ranks would wait for it forever.
        `saving` is the checkpoint write the statement is about: an imported helper that writes the
        checkpoint (`save_checkpoint(epoch, model, optimizer)`) is handed the model to save it, not
        to run it; what its arguments compute still counts.
        """
        for call in descendants(node, cst.Call):
            func = call.func
            if self.is_model(func) or self.c.resolve(func) in N.COLLECTIVES:
                return True
            if code_of(func).split(".")[0] in self.trained_through:
                return True  # `print(Solver(loader).train())`: the DDP models are built and trained in there
            target = self.callee(call)  # type: ignore[arg-type]
            if target is not None and depth < 3 and self.runs_shared_code(target.body, depth + 1):
                return True
            if target is None and call is not saving and not N.is_builtin(func) and not self._library_call(func) and any(
                    self.is_model(arg.value) for arg in call.args):
                return True  # `print(validation(model, loader))`: a function we cannot see runs the model
        return False

    def _library_call(self, func: cst.BaseExpression) -> bool:
        """torch's, the standard library's or numpy's (`torch.save(model, f)`, `copy.deepcopy`): they
        never run a model's forward. A method call (`trainer.evaluate(model)`) is not."""
        qname = self.c.resolve(func) or ""
        return qname.split(".")[0] in N.LIBRARIES

    def save_helper_calls(self, fn: cst.FunctionDef) -> Optional[List[cst.Call]]:
        """Call sites of a checkpoint helper such as save_checkpoint(state, is_best).

        Only a helper that does nothing every rank must do (no loops, no backward/step, no
        collectives, no forward of the model) is guarded at its call sites; anything else gets the
        guard inside: `def sample_image(n): imgs = generator(z); save_image(imgs, path)` keeps the
        forward on every rank and writes on rank 0.
        """
        if fn is self.entry_function or any(self.a.is_inside(loop, fn) for loop in self.c.loops) or self.trains(fn):
            return None
        if self.runs_shared_code(fn.body):
            return None
        if any(self.c.resolve(call.func) and self.c.resolve(call.func).startswith("torch.distributed.") for call in self.calls_within(fn)):  # type: ignore[union-attr]
            return None
        calls = [call for call in self.c.calls if self.callee(call) is fn]
        statements = [self.a.statement_of(call) for call in calls]
        if not calls or any(not isinstance(s, cst.SimpleStatementLine) for s in statements):
            return None
        if any(not _bare_call(s, c) for s, c in zip(statements, calls)):
            # `train_set = CachedDataset(root)` (its __init__ caches to disk), `path = save(...)`:
            # the result is needed on every rank, so the write is guarded inside instead.
            return None
        return calls

    def save_statement(self, call: cst.Call) -> Optional[Statement]:
        """The statement to guard: the save itself, or the `with open(...)` that only serves it."""
        statement = self.a.statement_of(call)
        block = self.a.block_of(statement) if statement is not None else None
        owner = self.a.parent(block) if block is not None else None
        if isinstance(owner, cst.With) and len(owner.body.body) == 1:  # type: ignore[union-attr]
            return owner
        return statement

    def under_rank_check(self, node: cst.CSTNode) -> bool:
        return any(isinstance(anc, cst.If) and N.mentions_rank(anc.test) for anc in self.a.ancestors(node))

    def hoisted_prints(self, logged: List[Tuple[Statement, bool]]) -> Tuple[Tuple[Statement, Tuple[cst.Call, ...]], ...]:
        """Of the `logged` statements, the prints whose arguments run what every rank must run
        (`print("accuracy", test(model, val_loader))`: the model's forward), with those calls, to
        compute before the print on every rank. A print whose shared call runs lazily or
        conditionally (in a lambda, a comprehension, `a if c else b`, `a or b`) stays as it is."""
        found = []
        for statement, shared in logged:
            values = self.shared_values(statement) if shared else None
            if values:
                found.append((statement, values))
        return tuple(found)

    def shared_values(self, statement: Statement) -> Optional[Tuple[cst.Call, ...]]:
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        printed = getattr(small, "value", None)
        if not (isinstance(printed, cst.Call) and _bare_call(statement, printed)):  # type: ignore[arg-type]
            return None
        values: List[cst.Call] = []
        for call in descendants(printed, cst.Call):
            if call is printed or any(self.a.is_inside(call, value) for value in values):
                continue
            if not self.runs_shared_code(call):
                continue
            if any(isinstance(anc, _LAZY) for anc in itertools.takewhile(lambda a: a is not statement, self.a.ancestors(call))):
                return None
            values.append(call)
        return tuple(values) or None

    def logged_statements(self, loaders: Tuple[LoaderFact, ...]) -> List[Tuple[Statement, bool]]:
        """Prints and logs to show once: per step and per epoch (inside epoch loops and loops over
        loaders, and in the functions that run them), and the one-off ones of the entry point;
        each with whether it runs what every rank must run (runs_shared_code)."""
        loops: Set[cst.CSTNode] = {loop for loop in self.c.loops if self.trains(loop)}
        for loader in loaders:
            loops.update(h.loop for h in loader.hooks)
        for loop in self.c.loops:
            if isinstance(loop, cst.For) and any(_iterated(loop) == (l.target or "") for l in loaders):
                loops.add(loop)
        per_epoch = self.called_in(loops)
        called = {call.func.value if isinstance(call.func, cst.Name) else call.func.attr.value
                  for call in self.c.calls if isinstance(call.func, (cst.Name, cst.Attribute))}
        # guarded where they are called; a callback only handed over is guarded inside
        log_helpers = {fn for fn in self.c.functions if _only_logs(fn) and fn.name.value in called}
        found = []
        blocks = [s for s in self.c.log_statements if isinstance(s, cst.With)]  # a log file's block, guarded whole
        for statement in [*self.c.log_statements, *self.log_helper_calls()]:
            if self.under_rank_check(statement) or self.a.enclosing_function(statement) in log_helpers:
                continue
            if any(block is not statement and self.a.is_inside(statement, block) for block in blocks):
                continue
            if (
                any(self.a.is_inside(statement, loop) for loop in loops)
                or self.in_loader_function(statement, loaders)
                or any(fn in per_epoch for fn in self.a.ancestors(statement))
            ):
                found.append((statement, self.runs_shared_code(statement)))
            elif self.entry_scope is not None and self.a.scope_of(statement) in (self.entry_scope, self.a.module) and not _per_rank(statement):
                # One-off messages where training runs ("Resuming from ...", "Using device cuda", the
                # final score) and at module level (run at import, in every worker): once, not once
                # per rank. Before the setup (or after its teardown) torchrun's RANK says who is rank 0.
                found.append((statement, self.runs_shared_code(statement)))
            elif self.set_up_by_caller and self.a.scope_of(statement) is not self.a.module and not _per_rank(statement):
                # `print_network(G)` called once by the script: once, not once per rank
                found.append((statement, self.runs_shared_code(statement)))
        return found

    def called_in(self, loops: Set[cst.CSTNode]) -> Set[cst.CSTNode]:
        """The file's functions a training loop calls by name (`train_iter(epoch, model, ...)`, a
        full-batch step with no loader: what they print, they print every epoch), and those the
        entry point calls (`test(model, ...)` after the loop: its score, once); the `__init__` of
        the file's classes it instantiates (`CharDataset(text)` printing its size); and the
        functions it hands over by name (`trainer.set_callback("on_batch_end", log_batch)`: a
        trainer calls them while it trains)."""
        if self.entry_scope is None:
            return set()
        methods = class_methods(self.a.module)
        found: Set[cst.CSTNode] = set()
        callers: Set[cst.CSTNode] = {self.entry_scope, self.a.module}
        for _ in range(3):  # what the entry calls, what those call, and once more
            before = len(found)
            for call in self.c.calls:
                scope = self.a.scope_of(call)
                if scope not in callers and not any(self.a.is_inside(call, loop) for loop in loops):
                    continue
                if isinstance(call.func, cst.Name):
                    # the def the name reads (one in the `if __name__ == "__main__":` block too), or a class's __init__
                    target = self.callee(call)
                    if target is not None:
                        found.add(target)
                elif isinstance(call.func, cst.Attribute):  # `progress.display(i)`: a method of the file's class
                    found.update(methods.get(call.func.attr.value, ()))
                for arg in call.args:
                    if isinstance(arg.value, cst.Name):
                        found.update(self.handed_over(arg.value))
            if len(found) == before:
                break
            callers |= found
        return found

    def handed_over(self, name: cst.Name) -> List[cst.FunctionDef]:
        """The function of this file that `name` reads where it is passed (a callback defined at
        module level, or beside the call in the entry point)."""
        return [b.node for b in self.c.refers.get(name, ()) if b.kind == "function"]  # type: ignore[misc]

    def log_helper_calls(self) -> List[cst.SimpleStatementLine]:
        """`log_string("epoch %d" % epoch)`, a function of this file that only logs and prints: its
        calls are log statements too (PointNet's `def log_string(str): logger.info(str); print(str)`)."""
        helpers = {fn.name.value for fn in self.c.functions if _only_logs(fn)}  # nested ones too
        logging_methods = {name for name, fns in class_methods(self.a.module).items() if all(_only_logs(fn) for fn in fns)}
        found = []
        for call in self.c.calls:
            func = call.func
            if not (isinstance(func, cst.Name) and func.value in helpers
                    or isinstance(func, cst.Attribute) and func.attr.value in logging_methods):
                continue
            statement = self.a.statement_of(call)
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                small = statement.body[0]
                if isinstance(small, cst.Expr) and small.value is call:
                    found.append(statement)
        return found

    def in_loader_function(self, statement: cst.CSTNode, loaders: Tuple[LoaderFact, ...]) -> bool:
        """A print in train()/test(): a function that loops over a loader passed to it."""
        fn = self.a.enclosing_function(statement)
        if fn is None:
            return False
        return any(
            isinstance(loop, cst.For) and self.a.is_inside(loop, fn) and self.is_loader_loop(loop, loaders)
            for loop in self.c.loops
        )

    def is_loader_loop(self, loop: cst.For, loaders: Tuple[LoaderFact, ...]) -> bool:
        """A loop over a loader handed to this function (a parameter, or self.x): train()/test()/validate()."""
        iterated = _iterated(loop)
        if iterated is None:
            return False
        fn = self.a.enclosing_function(loop)
        params = {p.name.value for p in fn.params.params} if fn is not None else set()
        if iterated in params or iterated.startswith("self."):
            return True
        # A flat script's module-level loader, iterated by its train()/test() helpers as a global.
        return any(
            loader.target == iterated and loader.owner is self.a.module for loader in loaders
        ) and (fn is None or iterated not in self.c.bound.get(fn, ()))

    def reads_after_write(self, saves: Tuple[SaveSite, ...]) -> Tuple[Statement, ...]:
        """Top-level statements that load a checkpoint this script wrote earlier in the same function
        (itself, or by a call of the helper that writes it: `model_save(path)` ... `model_load(path)`).

        Rank 0 alone writes it now, so every rank waits at a barrier before reading it back; only
        at the top of a function body, where every rank is sure to arrive.
        """
        found = []
        for call in self.loading_calls():
            fn = self.a.enclosing_function(call) or self.a.module
            block = fn.body if isinstance(fn, cst.FunctionDef) else fn
            top = self.a.top_statement_in(call, block)
            if top is None or top in found or self.a.holds_loop(top):
                continue
            if any(
                self.a.enclosing_function(written) is self.a.enclosing_function(call) and self.a.comes_after(call, written)
                for site in saves for written in (site.call, *(site.guard if site.inner is not None else ()))  # or its helper's calls
            ):
                found.append(top)
        return tuple(found)

    def loading_calls(self) -> List[cst.Call]:
        """torch.load calls, and calls of this file's functions that (transitively) torch.load."""
        loads = list(self.a.calls(N.TORCH_LOAD))
        loaders = {self.a.enclosing_function(call) for call in loads} - {None}
        for _ in range(2):  # helpers of helpers
            callers = [call for call in self.c.calls if self.callee(call) in loaders]
            loads += [call for call in callers if call not in loads]
            loaders |= {self.a.enclosing_function(call) for call in callers} - {None}
        return loads

    def rank_divergent(self) -> List[cst.If]:
        """Rank checks around code every rank must run."""
        paired = self.paired_barrier_checks()
        return [
            node for node in self.c.rank_checks
            if node not in paired
            and N.mentions_rank(node.test)
            and not _holds_on_every_rank(node.test)
            and self.runs_shared_code(node.body)
            and not self.every_branch_runs_it(node)
        ]

    def every_branch_runs_it(self, node: cst.If) -> bool:
        """`if rank == 0: f(log=True) else: f(log=False)`: every rank runs the shared code, one way or the other."""
        orelse = node.orelse
        if orelse is None:
            return False
        branch = orelse.body if isinstance(orelse, cst.Else) else orelse
        return self.runs_shared_code(branch)

    def paired_barrier_checks(self) -> Set[cst.If]:
        """The "first process does it, the others wait" idiom: two rank checks around barriers, in one function."""
        by_function: Dict[Optional[cst.CSTNode], List[cst.If]] = {}
        for node in self.c.rank_checks:
            tested = set(descendants(node.test, cst.Call))  # `dist.get_rank()` in the check itself
            calls = [call for call in self.calls_within(node) if call not in tested]
            if calls and all(self.c.resolve(call.func) == "torch.distributed.barrier" for call in calls):
                by_function.setdefault(self.a.enclosing_function(node), []).append(node)
        return {node for nodes in by_function.values() if len(nodes) >= 2 for node in nodes}


def private_path(c, node: cst.BaseExpression, depth: int = 0) -> bool:
    """A path in a folder each process makes for itself (`with TemporaryDirectory() as tempdir:
    path = os.path.join(tempdir, "best.pt")`, the transfer-learning tutorial's best weights): every
    rank writes and reads back its own file; on rank 0 alone the others would find nothing. `c` is
    the analysis' collector (its `resolve` and `refers`): the rank-0 planner and DDP131's evidence
    ask this one question."""
    if depth > 3:
        return False
    if isinstance(node, cst.Call):
        if c.resolve(node.func) in _PRIVATE_FOLDERS:
            return True
        return any(private_path(c, arg.value, depth + 1) for arg in node.args)
    if isinstance(node, (cst.BinaryOperation, cst.FormattedString)):
        return any(private_path(c, part, depth + 1) for part in descendants(node, cst.Name))
    if not isinstance(node, cst.Name):
        return False
    read = c.refers.get(node, ())
    return bool(read) and all(b.value is not None and private_path(c, b.value, depth + 1) for b in read)


def _holds_on_every_rank(test: cst.BaseExpression) -> bool:
    """`rank != -1`, `args.local_rank >= 0`: "is this run distributed?", true on every rank of one."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    value = code_of(target.comparator).replace(" ", "")
    if isinstance(target.operator, (cst.NotEqual, cst.GreaterThan)) and value == "-1":
        return True
    return isinstance(target.operator, cst.GreaterThanEqual) and value == "0"


# Names projects give their checkpoint writers (save_checkpoint, save_model, save_network, save_ckpt).
_CHECKPOINT_HELPER = re.compile(r"^save_(checkpoint|model|network|net|ckpt|weights|state)s?$")


def _bare_call(statement: cst.SimpleStatementLine, call: cst.Call) -> bool:
    """Is `call` the whole statement (`save_checkpoint(state, is_best)`), its result unused?"""
    return len(statement.body) == 1 and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call


# Where a call runs later, or only sometimes: it cannot be computed ahead of the print.
_LAZY = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.IfExp, cst.BooleanOperation)


def _per_rank(statement: cst.CSTNode) -> bool:
    """A message about this process's rank (`print(f"rank {rank} ready")`): every rank says its own.
    Its device is not one: `Using device: cuda:1` on every rank is noise."""
    return any("rank" in name.value.lower() for name in descendants(statement, cst.Name))


def _only_logs(fn: cst.FunctionDef) -> bool:
    body = list(fn.body.body) if isinstance(fn.body, cst.IndentedBlock) else []
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) and isinstance(
        body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)
    ):
        body = body[1:]  # the docstring
    return bool(body) and all(N.is_log_statement(statement) for statement in body)


