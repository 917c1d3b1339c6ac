"""The edits project mode makes in a module that a migrated training script imports.

Such a module is called by the script's training but has no entry point of its own: the
trainer class, the `make_data_loader(args)` helper, the checkpoint `Saver`. The per-file engine
leaves it alone (it cannot know who calls it); project mode knows the caller sets up the process
group, and plans here (rules in migrator.project.rules):

  DDP030  a shuffled DataLoader built here gets a DistributedSampler,
  DDP031  a training loop over a loader gets `set_epoch` in reach of its epoch number,
  DDP032  checkpoints (`torch.save`) are written by rank 0,
  DDP033  a model's `state_dict()` / `load_state_dict()` go through `.module` when it is wrapped.

Every edit is conditional on a process group being there (`dist.is_initialized()`,
`isinstance(model, DDP)`): the module may have other callers (an evaluation script, a notebook)
that never set one up, and they keep running as before.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from migrator import edits, suppress
from migrator.bindings import dotted_name
from migrator.options import Options
from migrator.project.rules import (
    MODULE_CHECKPOINT_KEYS,
    MODULE_MODEL_API,
    MODULE_NEEDS_MIGRATION,
    MODULE_RANK_ZERO_SAVE,
    MODULE_SAMPLER,
    MODULE_SET_EPOCH,
)
from migrator.types import Change, Diagnostic, Result

DATAPARALLEL_IN_MODULE = "DataParallel in a module a training script imports"  # planning blocks on it
# What a DDP wrapper answers itself: nn.Module's API (and DDP's). Anything else a module asks of
# the model it was handed (`model.configure_optimizers`, `model.encoder`) is the user's class's.
_MODULE_API = frozenset({
    "module", "no_sync", "training", "train", "eval", "forward", "parameters", "named_parameters", "buffers",
    "named_buffers", "children", "named_children", "modules", "named_modules", "state_dict", "load_state_dict",
    "zero_grad", "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "apply", "requires_grad_",
    "register_buffer", "register_parameter", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_backward_hook", "add_module", "get_submodule", "get_parameter",
    "share_memory", "extra_repr", "device_ids", "output_device",
})
_EPOCH_NAMES = ("epoch", "ep", "cur_epoch", "current_epoch", "epoch_idx", "i_epoch", "epoch_num", "n_epoch")
_RANK_WORDS = ("rank", "main_process", "is_master", "master", "is_main", "primary")
_CHECKPOINT_WORDS = ("state", "checkpoint", "ckpt", "model", "net", "weights")
_SAVE_FUNCTION_WORDS = ("save", "checkpoint", "ckpt")
_SAMPLER_KEYWORDS = ("sampler", "batch_sampler")


@dataclass(frozen=True)
class ModuleRole:
    """What project mode knows about a module a migrated training script imports.

    `entries`: the scripts (as displayed) that reach it through their imports.
    `pieces`: the codes planned here (default: all); a migrated script itself only gets DDP031,
    the rest of it is the per-file engine's.
    `unwrap_keys`: the script's model was not wrapped in DataParallel unconditionally, so the
    checkpoints it wrote had the bare module's keys: the DDP-wrapped model saves through `.module`.
    """

    entries: Tuple[str, ...]
    pieces: Tuple[str, ...] = ("DDP030", "DDP031", "DDP032", "DDP033", "DDP034")
    unwrap_keys: bool = True
    batch: str = "per-process"  # Options.batch as it applies to the scripts (rules.global_batch)
    batch_why: str = ""


def migrate_module(source: str, role: ModuleRole, options: Optional[Options] = None, rewrite: bool = True) -> Result:
    """The module's source with the project edits made (or, `rewrite=False`, only what they
    would be: `code` stays `source` and `pending` says whether anything would change).

    `# ddp-migrate: ignore[DDP032]` comments work as in a script (migrator.suppress)."""
    options = options or Options()
    engine = functools.partial(_migrate_module, role=role, rewrite=rewrite)
    return suppress.apply(engine(source, options), source, options, engine, suppress.python_suppressions(source))


def _migrate_module(source: str, options: Options, role: ModuleRole, rewrite: bool) -> Result:
    if not any(word in source for word in ("DataLoader", "loader", "save", "state_dict", "model", "net", "iter", "data")):
        return Result(code=source, original=source)
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    finder = _Finder(wrapper, role, options)
    plan = finder.plan
    if plan.empty:
        return Result(code=source, diagnostics=tuple(plan.diagnostics), original=source)
    changes = tuple(sorted(plan.changes, key=lambda c: (c.line, c.col)))
    if not rewrite:
        return Result(source, changes, tuple(plan.diagnostics), original=source, pending=True)
    from migrator.api import check_parses, with_imports

    new = with_imports(edits.apply(module, plan, finder.parents), plan)
    check_parses(new.code)
    return Result(new.code, changes, tuple(plan.diagnostics), original=source)


class _Finder:
    """Walks the module once and writes what it finds into an edits.Plan."""

    def __init__(self, wrapper: MetadataWrapper, role: ModuleRole, options: Options) -> None:
        self.role = role
        self.options = options
        self.positions = wrapper.resolve(PositionProvider)
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = dict(wrapper.resolve(ParentNodeProvider))
        self.module = wrapper.module
        self.plan = edits.Plan()
        self.names = _Names.of(self.module)
        self.guarded_functions: Set[cst.FunctionDef] = set()
        # Code under the module's own `if __name__ == "__main__":` runs only when it is run as a
        # script (a demo, a self-test), never for the training script that imports it.
        demo = {n for guard in _main_guards(self.module) for n in _walk(guard)}
        calls = [n for n in self.parents if isinstance(n, cst.Call) and n not in demo]
        loops = [n for n in self.parents if isinstance(n, cst.For) and n not in demo]
        if self._on(MODULE_SAMPLER.code):
            for call in calls:
                self._sampler(call)
        if self._on(MODULE_SET_EPOCH.code):
            for loop in loops:
                self._set_epoch(loop)
        for call in calls if MODULE_SAMPLER.code in role.pieces else ():  # not in the migrated script itself
            if (dotted_name(call.func) or "").split(".")[-1] == "DataParallel":
                self._report(call, DATAPARALLEL_IN_MODULE + ": the script wraps its model "
                                   "in DDP, and a DataParallel around that breaks it; wrap here in DDP by hand, or drop it")
        if self._on(MODULE_RANK_ZERO_SAVE.code):
            self.saved_paths: Set[str] = set()
            for call in calls:
                self._save(call)
            for call in calls:
                self._read_back(call)
        if self._on(MODULE_CHECKPOINT_KEYS.code) and role.unwrap_keys and ".module." not in self.module.code:
            for call in calls:
                self._keys(call)
        if self._on(MODULE_MODEL_API.code) and role.unwrap_keys and ".module." not in self.module.code:
            for node in list(self.parents):
                if isinstance(node, cst.Attribute) and node not in demo:
                    self._model_api(node)
            for call in calls:
                self._model_type(call)

    def _on(self, code: str) -> bool:
        rule = {r.code: r for r in (MODULE_SAMPLER, MODULE_SET_EPOCH, MODULE_RANK_ZERO_SAVE, MODULE_CHECKPOINT_KEYS, MODULE_MODEL_API)}[code]
        return code in self.role.pieces and self.options.enabled(code, rule.name)

    # ----------------------------------------------------------------- DDP030
    def _sampler(self, call: cst.Call) -> None:
        if not (self._is_dataloader(call) or self._is_dataloader_super_init(call)):
            return
        own = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value in _SAMPLER_KEYWORDS), None)
        if own is not None:
            if "distributed" not in _code(own.value).lower() and _shuffles_or_samples(own.value):
                self._report(call, f"a DataLoader with its own {own.keyword.value} (`{_short(own.value)}`) in a module a "
                                   "training script imports: under DDP every rank would draw from the whole data set; "
                                   "shard it by hand (a DistributedSampler, or the sampler over this rank's indices)")
            return
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        shuffle = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "shuffle"), None)
        if shuffle is None and len(positional) >= 3:
            shuffle = positional[2]
        if shuffle is None or _is_false(shuffle.value):
            return  # read in order: an evaluation loader, left whole (each rank evaluates all of it)
        dataset = positional[0].value if positional else next(
            (arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "dataset"), None)
        statement = self._statement(call)
        why = None
        if len(positional) > 3:
            why = "it passes the sampler's place positionally"
        elif dataset is None or not _is_plain_reference(dataset):
            why = "its data set is not a name (it would be built twice)"
        elif not _is_true(shuffle.value) and not _is_plain_reference(shuffle.value):
            why = "its shuffle argument is an expression"
        elif statement is None:
            why = "it is built inside an expression with no statement of its own"
        if why is not None:
            self._report(call, f"a shuffled DataLoader is built here for a training script, but {why}: give it "
                               "`sampler=DistributedSampler(dataset)` (and shuffle=False) by hand")
            return
        name = self._sampler_name(statement, call)
        dist = self.names.dist
        condition = f"{dist}.is_initialized()" if _is_true(shuffle.value) else f"{_code(shuffle.value)} and {dist}.is_initialized()"
        sampler_line = cst.parse_statement(
            f"{name} = {self.names.sampler}({_code(dataset)}, shuffle=True) if {condition} else None\n")
        self.plan.insert_before(statement, [sampler_line])
        new_shuffle = f"{name} is None" if _is_true(shuffle.value) else f"{_code(shuffle.value)} and {name} is None"
        self.plan.replace(call, _with_sampler(shuffle, new_shuffle, name))
        self.names.need(self.plan, dist=True, sampler=True)
        split = (self._split_batch(call, statement, name) if self.role.batch == "global" else
                 f"; its batch size stays per process, the global batch grows with the processes ({self.role.batch_why}; "
                 "--batch global keeps it)" if self.role.batch_why else "")
        self._change(MODULE_SAMPLER.code, call, f"DistributedSampler for the shuffled DataLoader (`{name}`), when a process group is set up{split}")

    def _split_batch(self, call: cst.Call, statement: cst.SimpleStatementLine, sampler: str) -> str:
        """--batch global (migrator.rules.global_batch) in a module: the sharded loader's batch_size
        becomes this process's part of the global batch, under a process group only."""
        from migrator.rules.global_batch import _plain, batch_argument

        argument = batch_argument(call)
        if argument is None or not _plain(argument.value):
            self._report(call, "--batch global: this loader's batch size is "
                               f"{'an expression' if argument is not None else 'DataLoader default of 1'}, so it stays per "
                               "process and the global batch grows with the number of processes; split it by hand")
            return ""
        size, world = _code(argument.value), f"{self.names.dist}.get_world_size()"
        check = cst.parse_statement(
            f"if {sampler} is not None and {size} % {world}:  # the global batch is split over the processes\n"
            f"    raise SystemExit(\"batch size %d does not split evenly over %d processes: pick one that divides it\" % ({size}, {world}))\n")
        self.plan.insert_before(statement, [check])
        self.plan.replace(argument, lambda updated: updated.with_changes(
            value=cst.parse_expression(f"{_code(updated.value)} // {world} if {sampler} is not None else {_code(updated.value)}")))
        return f"; batch size {size} kept as the global batch ({self.role.batch_why})"

    def _is_dataloader(self, call: cst.Call) -> bool:
        dotted = dotted_name(call.func) or ""
        return dotted in self.names.dataloaders or (dotted.endswith(".DataLoader") and dotted.split(".")[0] in self.names.torch_like)

    def _is_dataloader_super_init(self, call: cst.Call) -> bool:
        """`super().__init__(dataset, ...)` in a class that subclasses DataLoader."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "__init__" and isinstance(func.value, cst.Call)
                and dotted_name(func.value.func) == "super"):
            return False
        owner = self._enclosing(call, cst.ClassDef)
        return owner is not None and any(
            (dotted_name(base.value) or "") in self.names.dataloaders or (dotted_name(base.value) or "").endswith(".DataLoader")
            for base in owner.bases
        )

    def _sampler_name(self, statement: cst.SimpleStatementLine, call: cst.Call) -> str:
        target = _assigned_target(statement)
        stem = ""
        if target:
            last = target.split(".")[-1]
            stem = last[: -len("loader")] if last.lower().endswith("loader") else ""
            stem = stem if stem.endswith("_") or not stem else stem + "_"
        taken = _bound_names(self._enclosing(call, cst.FunctionDef) or self.module)
        for candidate in (f"{stem}sampler", "dist_sampler", "distributed_sampler"):
            if candidate not in taken:
                return candidate
        return "ddp_sampler"

    # ----------------------------------------------------------------- DDP031
    def _set_epoch(self, loop: cst.For) -> None:
        function = self._enclosing(loop, cst.FunctionDef)
        loader = _iterated_loader(loop.iter, _wrappers(function or self.module))
        if loader is None or not _trains(loop):
            return
        scope = function or self.module
        if any(isinstance(n, cst.Attribute) and n.attr.value == "set_epoch" for n in _walk(scope)):
            return  # the epoch is set already (maybe by the per-file engine, for its own loaders)
        epoch = self._epoch_in_reach(loop, function)
        if epoch is None:
            self._report(loop, f"a training loop over `{loader}`, but no epoch number is in reach here: call "
                               f"`{loader}.sampler.set_epoch(epoch)` where the epoch loop is, or every epoch repeats one order")
            return
        statement = cst.parse_statement(
            f"if isinstance(getattr({loader}, \"sampler\", None), {self.names.sampler}):  # a new order each epoch\n"
            f"    {loader}.sampler.set_epoch({epoch})\n")
        self.plan.insert_before(loop, [statement])
        self.names.need(self.plan, sampler=True)
        self._change(MODULE_SET_EPOCH.code, loop, f"`{loader}.sampler.set_epoch({epoch})` before the training loop")

    def _epoch_in_reach(self, loop: cst.For, function: Optional[cst.FunctionDef]) -> Optional[str]:
        node = self.parents.get(loop)
        while node is not None and node is not function:
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and "epoch" in node.target.value.lower():
                return node.target.value
            node = self.parents.get(node)
        if function is not None:
            for param in function.params.params:
                if param.name.value in _EPOCH_NAMES:
                    return param.name.value
        return None

    # ----------------------------------------------------------------- DDP032
    def _save(self, call: cst.Call) -> None:
        if dotted_name(call.func) not in self.names.torch_saves or not call.args:
            return
        statement = self._statement(call)
        function = self._enclosing(call, cst.FunctionDef)
        if function is None or statement is None or self._rank_checked(call, function):
            return
        if not _looks_like_checkpoint(call, function):
            self._report(call, "torch.save runs on every rank of the training script that calls this module; "
                               "if it writes a checkpoint, write it on rank 0 only (if it caches data, every rank may need it)")
            return
        dist = self.names.dist
        reused = _path_used_after(call, statement, function)
        if reused is not None and not _save_function(function):
            self._report(call, f"a checkpoint every rank writes, and `{function.name.value}()` goes on to use `{reused}` "
                               "after saving it: a rank check around the save alone would leave the other ranks reading "
                               "a file rank 0 may not have written yet; guard the save and what follows it by hand")
            return
        if _save_function(function):
            if function not in self.guarded_functions:
                self.guarded_functions.add(function)
                guard = cst.parse_statement(
                    f"if {dist}.is_initialized() and {dist}.get_rank() != 0:\n    return  # one copy of each checkpoint: rank 0 writes it\n")
                self.plan.insert_before(_first_statement(function), [guard])
                self._change(MODULE_RANK_ZERO_SAVE.code, call,
                             f"`{function.name.value}()` writes checkpoints on rank 0 only (the other ranks return)")
        else:
            self.plan.guard(statement, f"not {dist}.is_initialized() or {dist}.get_rank() == 0")
            self._change(MODULE_RANK_ZERO_SAVE.code, call, "checkpoint written on rank 0 only")
        if len(call.args) > 1:
            self.saved_paths.add(_code(call.args[1].value))
        self.names.need(self.plan, dist=True)

    def _read_back(self, call: cst.Call) -> None:
        """`torch.load(config.save_path)` of a file only rank 0 now writes: every rank waits for it."""
        if dotted_name(call.func) not in self.names.torch_loads or not call.args:
            return
        if _code(call.args[0].value) not in self.saved_paths:
            return
        statement = self._statement(call)
        function = self._enclosing(call, cst.FunctionDef)
        if statement is None or (function is not None and self._rank_checked(call, function)):
            return
        dist = self.names.dist
        barrier = cst.parse_statement(f"if {dist}.is_initialized():\n    {dist}.barrier()  # rank 0 writes it: wait until it has\n")
        self.plan.insert_before(statement, [barrier])
        self._change(MODULE_RANK_ZERO_SAVE.code, call, "every rank waits for rank 0's checkpoint before reading it back")

    def _rank_checked(self, call: cst.CSTNode, function: cst.FunctionDef) -> bool:
        node = self.parents.get(call)
        while node is not None and node is not function:
            if isinstance(node, cst.If) and any(word in _code(node.test).lower() for word in _RANK_WORDS):
                return True
            node = self.parents.get(node)
        return any(  # an early return for the other ranks at the top of the function
            isinstance(s, cst.If) and any(w in _code(s.test).lower() for w in _RANK_WORDS)
            and any(isinstance(n, cst.Return) for n in _walk(s.body))
            for s in function.body.body
        )

    # ----------------------------------------------------------------- DDP033
    def _keys(self, call: cst.Call) -> None:
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("state_dict", "load_state_dict")):
            return
        receiver = dotted_name(func.value)
        if receiver is None or not _model_like(receiver) or not self._handed_over(call, receiver):
            return
        bare = f"({receiver}.module if isinstance({receiver}, {self.names.ddp}) else {receiver})"
        self.plan.replace(call, lambda updated: updated.with_changes(
            func=updated.func.with_changes(value=cst.parse_expression(bare))))
        self.names.need(self.plan, ddp=True)
        self._change(MODULE_CHECKPOINT_KEYS.code, call,
                     f"`{receiver}.{func.attr.value}()` through `.module` when it is wrapped in DDP (the original keys)")

    # ----------------------------------------------------------------- DDP034
    def _model_api(self, attribute: cst.Attribute) -> None:
        """`self.model.encoder`, `model.configure_optimizers(cfg)`: what the user's class defines is
        not on the DDP wrapper (only nn.Module's own API is)."""
        name = attribute.attr.value
        if name in _MODULE_API or name.startswith("__"):
            return
        receiver = dotted_name(attribute.value)
        if receiver is None or not _model_like(receiver) or not self._handed_over(attribute, receiver):
            return
        if isinstance(self.parents.get(attribute), (cst.AssignTarget, cst.AugAssign)):
            return  # `self.model.tag = x`: set on whatever it is, read back the same way
        bare = f"({receiver}.module if isinstance({receiver}, {self.names.ddp}) else {receiver})"
        self.plan.replace(attribute, lambda updated: updated.with_changes(value=cst.parse_expression(bare)))
        self.names.need(self.plan, ddp=True)
        self._change(MODULE_MODEL_API.code, attribute,
                     f"`{receiver}.{name}` through `.module` when it is wrapped in DDP (DDP does not forward it)")

    def _model_type(self, call: cst.Call) -> None:
        """`type(self.model).__name__` (a checkpoint's "arch"), `isinstance(model, MyNet)`: the
        user's class, not DistributedDataParallel."""
        if not (isinstance(call.func, cst.Name) and call.func.value in ("type", "isinstance") and call.args):
            return
        receiver = dotted_name(call.args[0].value)
        if receiver is None or not _model_like(receiver) or not self._handed_over(call, receiver):
            return
        if call.func.value == "isinstance" and len(call.args) > 1 and (
            "DataParallel" in _code(call.args[1].value) or _code(call.args[1].value) in (self.names.ddp, "DDP")
        ):
            return  # asks about the wrapper itself (ours included: `x.module if isinstance(x, DDP) else x`)
        bare = f"{receiver}.module if isinstance({receiver}, {self.names.ddp}) else {receiver}"
        first = call.args[0]
        self.plan.replace(call, lambda updated: updated.with_changes(
            args=[updated.args[0].with_changes(value=cst.parse_expression(bare)), *updated.args[1:]]))
        self.names.need(self.plan, ddp=True)
        self._change(MODULE_MODEL_API.code, first, f"`{call.func.value}({receiver})` asks about the model's class, not DDP's")

    def _handed_over(self, call: cst.CSTNode, receiver: str) -> bool:
        """`self.model` or a parameter of the function: a model that may come from the training
        script (wrapped in DDP). A model the function builds itself (`model = ResNet(); model.load_state_dict(...)`)
        never is."""
        root = receiver.split(".")[0]
        if root == "self":
            return True
        function = self._enclosing(call, cst.FunctionDef)
        if function is None:
            return False
        if root in {p.name.value for p in (*function.params.params, *function.params.kwonly_params)}:
            return True
        return root in _aliases_of_self(function)

    # ----------------------------------------------------------------- helpers
    def _statement(self, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
        current = self.parents.get(node)
        while current is not None and not isinstance(current, cst.SimpleStatementLine):
            if isinstance(current, (cst.BaseCompoundStatement, cst.Lambda, cst.BaseComp)):
                return None
            current = self.parents.get(current)
        return current

    def _enclosing(self, node: cst.CSTNode, kind):
        current = self.parents.get(node)
        while current is not None and not isinstance(current, kind):
            current = self.parents.get(current)
        return current

    def _line_col(self, node: cst.CSTNode) -> Tuple[int, int]:
        start = self.positions[node].start
        return start.line, start.column + 1

    def _change(self, code: str, node: cst.CSTNode, message: str) -> None:
        line, col = self._line_col(node)
        self.plan.changes.append(Change(code, line, col, message))

    def _report(self, node: cst.CSTNode, message: str) -> None:
        if self.options.enabled(MODULE_NEEDS_MIGRATION.code, MODULE_NEEDS_MIGRATION.name):
            line, col = self._line_col(node)
            self.plan.diagnostics.append(Diagnostic(MODULE_NEEDS_MIGRATION.code, line, col, message))


@dataclass
class _Names:
    """How the module spells torch, torch.distributed, DataLoader, DistributedSampler and DDP."""

    torch_like: Set[str]
    dataloaders: Set[str]
    torch_saves: Set[str]
    torch_loads: Set[str]
    dist: str
    dist_needed: bool
    sampler: str
    sampler_needed: bool
    ddp: str
    ddp_needed: bool

    @classmethod
    def of(cls, module: cst.Module) -> "_Names":
        imported: Dict[str, str] = {}  # local name -> what it is
        for node in module.body:
            for small in node.body if isinstance(node, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        full = dotted_name(alias.name) or ""
                        local = alias.asname.name.value if alias.asname else full.split(".")[0]  # type: ignore[union-attr]
                        imported[local] = full if alias.asname else local
                elif isinstance(small, cst.ImportFrom) and small.module is not None and not isinstance(small.names, cst.ImportStar):
                    base = dotted_name(small.module) or ""
                    for alias in small.names:
                        name = alias.name.value if isinstance(alias.name, cst.Name) else ""
                        local = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
                        imported[local] = f"{base}.{name}"
        torch_like = {local for local, full in imported.items() if full == "torch" or full.startswith("torch.")} | {"torch"}
        dataloaders = {local for local, full in imported.items() if full.endswith(".DataLoader") and full.startswith("torch")}
        torch_saves = {f"{local}.save" for local, full in imported.items() if full == "torch"} | {
            local for local, full in imported.items() if full == "torch.save"}
        torch_loads = {f"{local}.load" for local, full in imported.items() if full == "torch"} | {
            local for local, full in imported.items() if full == "torch.load"}
        dist = next((local for local, full in imported.items() if full == "torch.distributed"), None)
        sampler = next((local for local, full in imported.items() if full.endswith(".DistributedSampler")), None)
        ddp = next((local for local, full in imported.items() if full.endswith(".DistributedDataParallel")), None)
        return cls(torch_like, dataloaders, torch_saves, torch_loads, dist or "dist", dist is None, sampler or "DistributedSampler",
                   sampler is None, ddp or "DDP", ddp is None)

    def need(self, plan: edits.Plan, dist: bool = False, sampler: bool = False, ddp: bool = False) -> None:
        if dist and self.dist_needed:
            plan.need_import("torch.distributed", None, "dist")
        if sampler and self.sampler_needed:
            plan.need_import("torch.utils.data.distributed", "DistributedSampler", None)
        if ddp and self.ddp_needed:
            plan.need_import("torch.nn.parallel", "DistributedDataParallel", "DDP")


def _with_sampler(shuffle: cst.Arg, new_shuffle: str, name: str):
    def replace(updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        index = next(i for i, arg in enumerate(args) if arg.deep_equals(shuffle))
        args[index] = args[index].with_changes(value=cst.parse_expression(new_shuffle))
        sampler = cst.Arg(value=cst.Name(name), keyword=cst.Name("sampler"),
                          equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        stars = [i for i, arg in enumerate(args) if arg.star == "**"]
        at = stars[0] if stars else len(args)
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        last_comma = args[-1].comma if args else cst.MaybeSentinel.DEFAULT
        if at == len(args) and isinstance(last_comma, cst.Comma) and len(args) > 1:
            # One argument per line with a trailing comma: the new one gets a line of its own, like them.
            args[-1] = args[-1].with_changes(comma=args[-2].comma)
            args.append(sampler.with_changes(comma=last_comma))
        elif at == len(args):  # after the last argument: it gets the comma, the new one keeps its (none)
            args[-1] = args[-1].with_changes(comma=comma)
            args.append(sampler)
        else:
            args.insert(at, sampler.with_changes(comma=comma))
        return updated.with_changes(args=args)

    return replace


def _aliases_of_self(function: cst.FunctionDef) -> Set[str]:
    """Locals bound to an attribute of `self`: `model = self.model`, `model, config = self.model, self.config`."""
    found: Set[str] = set()
    for node in _walk(function.body):
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0].target, node.value
        pairs = []
        if isinstance(target, cst.Name):
            pairs = [(target, value)]
        elif isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(target.elements) == len(value.elements):
            pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
        for name, bound in pairs:
            if isinstance(name, cst.Name) and (dotted_name(bound) or "").startswith("self."):
                found.add(name.value)
    return found


def _main_guards(module: cst.Module) -> List[cst.If]:
    return [
        statement for statement in module.body
        if isinstance(statement, cst.If) and "__name__" in _code(statement.test) and "__main__" in _code(statement.test)
    ]


def _shuffles_or_samples(node: cst.BaseExpression) -> bool:
    """A random or weighted sampler, not a sequential one (evaluation order) or a None."""
    text = _code(node)
    return not _is_false(node) and "Sequential" not in text


def _short(node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(_code(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Names a training loop's loader goes by (`train_loader`, `train_iter`, `dataloader`, `train_data`);
# the set_epoch written for it is guarded by an isinstance check, so a list or a custom iterator
# under such a name is left as it is at run time.
_LOADER_WORDS = ("loader", "iter", "data", "batches")
_ITERATION_WRAPPERS = ("enumerate", "tqdm", "tqdm.tqdm", "iter", "trange")


def _iterated_loader(node: cst.BaseExpression, wrapped: Dict[str, cst.BaseExpression]) -> Optional[str]:
    """`loader`, `enumerate(self.train_loader)`, `tqdm(enumerate(loader), ...)`, or `tbar` after
    `tbar = tqdm(self.train_loader)` -> the loader's name, when it is named like one."""
    for _ in range(4):
        while isinstance(node, cst.Call) and dotted_name(node.func) in _ITERATION_WRAPPERS and node.args:
            node = node.args[0].value
        if isinstance(node, cst.Name) and node.value in wrapped:
            node = wrapped[node.value]
        else:
            break
    name = dotted_name(node)
    if name is None:
        return None
    last = name.split(".")[-1].lower()
    return name if any(word in last for word in _LOADER_WORDS) or last in ("dl", "train_dl") else None


def _wrappers(scope: cst.CSTNode) -> Dict[str, cst.BaseExpression]:
    """`tbar = tqdm(self.train_loader, ...)` in the function: name -> the wrapping call."""
    found: Dict[str, cst.BaseExpression] = {}
    for node in _walk(scope):
        if (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and isinstance(node.value, cst.Call) and dotted_name(node.value.func) in _ITERATION_WRAPPERS):
            found[node.targets[0].target.value] = node.value
    return found


def _trains(loop: cst.For) -> bool:
    return any(isinstance(n, cst.Attribute) and n.attr.value in ("backward", "step") for n in _walk(loop.body))


def _looks_like_checkpoint(call: cst.Call, function: cst.FunctionDef) -> bool:
    """A model's or trainer's state, not a cache of data every rank may read back."""
    name = function.name.value.lower()
    if any(word in name for word in ("checkpoint", "ckpt", "model", "weights", "snapshot")):
        return True
    saved = _code(call.args[0].value).lower()
    return any(word in saved for word in _CHECKPOINT_WORDS)


def _path_used_after(call: cst.Call, statement: cst.SimpleStatementLine, function: cst.FunctionDef) -> Optional[str]:
    """The saved file's variable, when the function uses it again after the save (to copy it)."""
    if len(call.args) < 2 or not isinstance(call.args[1].value, cst.Name):
        return None
    path = call.args[1].value.value
    seen = False
    for node in _walk_in_order(function.body):
        if node is statement:
            seen = True
            continue
        if seen and isinstance(node, cst.Name) and node.value == path and not _inside(node, statement):
            return path
    return None


def _save_function(function: cst.FunctionDef) -> bool:
    """A function that only writes: named for it, returns nothing, trains nothing, loads nothing."""
    if not any(word in function.name.value.lower() for word in _SAVE_FUNCTION_WORDS):
        return False
    for node in _walk(function.body):
        if isinstance(node, cst.Return) and node.value is not None:
            return False
        if isinstance(node, (cst.Global, cst.Nonlocal)):
            return False
        if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and not isinstance(node.target, cst.Name):
            return False  # state the other ranks keep too (`self.best = ...`): they must not skip it
        if isinstance(node, cst.Assign) and any(not isinstance(t.target, (cst.Name, cst.Tuple)) for t in node.targets):
            return False
        if isinstance(node, (cst.Yield, cst.FunctionDef)):
            return False
        if isinstance(node, cst.Attribute) and node.attr.value in ("backward", "step", "load", "barrier", "all_reduce"):
            return False
    return True


def _first_statement(function: cst.FunctionDef) -> cst.BaseStatement:
    """The guard goes after the docstring."""
    body = list(function.body.body)  # type: ignore[union-attr]
    first = body[0]
    if (len(body) > 1 and isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1
            and isinstance(first.body[0], cst.Expr) and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))):
        return body[1]
    return first


def _model_like(receiver: str) -> bool:
    last = receiver.split(".")[-1].lower()
    return ("model" in last or last in ("net", "network", "netg", "netd")) and "optim" not in last and "ema" not in last


def _assigned_target(statement: cst.SimpleStatementLine) -> Optional[str]:
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return dotted_name(small.targets[0].target)
    return None


def _bound_names(scope: cst.CSTNode) -> Set[str]:
    names: Set[str] = set()
    for node in _walk(scope):
        if isinstance(node, cst.Name):
            names.add(node.value)
    return names


def _is_plain_reference(node: cst.BaseExpression) -> bool:
    return dotted_name(node) is not None


def _is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value in ("False", "None")


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _walk_in_order(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk_in_order(child)


def _inside(node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return any(n is node for n in _walk(container))


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack: List[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children)

