"""The edits project mode makes in a module that a migrated training script imports.

Such a module is called by the script's training but has no entry point of its own: the
trainer class, the `make_data_loader(args)` helper, the checkpoint `Saver`. The per-file engine
leaves it alone (it cannot know who calls it); project mode knows the caller sets up the process
group, and plans here (rules in migrator.project.rules):

  DDP030  a shuffled DataLoader built here gets a DistributedSampler,
  DDP031  a training loop over a loader gets `set_epoch` in reach of its epoch number,
  DDP032  checkpoints (`torch.save`) are written by rank 0,
  DDP033  a model's `state_dict()` / `load_state_dict()` go through `.module` when it is wrapped,
  DDP034  the model's own methods and submodules go through `.module` when it is wrapped,
  DDP035  prints and progress bars show on rank 0,
  DDP036  folders every rank creates tolerate the others' copy under torchrun,
  DDP037  a network factory's DataParallel runs only without a process group (migrator.project.devices),
  DDP038  the GPU list an option parser sets the device from becomes the process's own GPU.

Every edit is conditional on a process group being there (`dist.is_initialized()`,
`isinstance(model, DDP)`): the module may have other callers (an evaluation script, a notebook)
that never set one up, and they keep running as before.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, Optional, Set, Tuple

import libcst as cst

from migrator import edits, suppress
from migrator import names as N
from migrator.codegen import check_parses, with_imports
from migrator.analysis.facts import LazyPositions
from migrator.analysis.passes import call_graph
from migrator.dataflow.calls import CallGraph
from migrator.graph.values import Receivers
from migrator.bindings import dotted_name
from migrator.tree import with_keyword
from migrator.options import Options
from migrator.project.devices import device_list, factory_dataparallel
from migrator.project.rules import (
    MODULE_CHECKPOINT_KEYS,
    MODULE_DEVICE_LIST,
    MODULE_NETWORK_FACTORY,
    MODULE_MODEL_API,
    MODULE_NEEDS_MIGRATION,
    MODULE_RANK_ZERO_OUTPUT,
    MODULE_SHARED_FOLDERS,
    MODULE_RANK_ZERO_SAVE,
    MODULE_SAMPLER,
    MODULE_SET_EPOCH,
)
from migrator.types import Change, Diagnostic, Result
from migrator.project.shapes import (
    MODULE_API,
    ModuleNames,
    SAMPLER_KEYWORDS,
    assigned_target,
    bound_names,
    first_statement,
    is_false,
    is_plain_reference,
    is_true,
    iterated_loader,
    looks_like_checkpoint,
    main_guards,
    path_used_after,
    save_function,
    short,
    shuffles_or_samples,
    source_of,
    parents_in_visit_order,
    walk,
    with_sampler,
    wrappers,
)

# What a module's `.cpu()`, `.to(device)`, `.float()` return: the module itself.
_RETURNS_ITSELF = frozenset({"cpu", "cuda", "to", "float", "half", "double", "bfloat16"})

# Rank 0 by torchrun's environment (unset: one plain process), with or without a process group.
ENV_RANK_ZERO = 'int(os.environ.get("RANK", 0)) == 0'
ENV_NOT_RANK_ZERO = 'int(os.environ.get("RANK", 0)) != 0'

DATAPARALLEL_IN_MODULE = "DataParallel in a module a training script imports"  # planning blocks on it


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
    pieces: Tuple[str, ...] = ("DDP030", "DDP031", "DDP032", "DDP033", "DDP034", "DDP035", "DDP036", "DDP037",
                               "DDP038")
    unwrap_keys: bool = True
    batch: str = "per-process"  # Options.batch as it applies to the scripts (rules.global_batch)
    batch_why: str = ""
    used: Optional[Tuple[str, ...]] = None  # the names the script imports from it (None: the whole module)
    # Where the scripts' model and epoch number are read here (migrator.graph.values; None: no caller known).
    models: Optional[Receivers] = None
    epochs: Optional[Receivers] = None


def migrate_module(
    source: str, role: ModuleRole, options: Optional[Options] = None, rewrite: bool = True,
    parsed: Optional[Tuple[cst.Module, LazyPositions]] = None,
) -> Result:
    """The module's source with the project edits made (or, `rewrite=False`, only what they
    would be: `code` stays `source` and `pending` says whether anything would change).
    `parsed`: `source` already parsed, with its positions (the per-file engine has both), so
    neither is computed again.

    `# ddp-migrate: ignore[DDP032]` comments work as in a script (migrator.suppress)."""
    options = options or Options()
    engine = functools.partial(_migrate_module, role=role, rewrite=rewrite, parsed=(source, parsed) if parsed else None)
    return suppress.apply(engine(source, options), source, options, engine, suppress.python_suppressions(source))




def _migrate_module(
    source: str, options: Options, role: ModuleRole, rewrite: bool,
    parsed: Optional[Tuple[str, Tuple[cst.Module, LazyPositions]]] = None,
) -> Result:
    if not any(word in source for word in ("DataLoader", "loader", "save", "state_dict", "model", "net", "iter", "data", "print", "tqdm",
                                             "mkdir", "makedirs", "set_device")):
        return Result(code=source, original=source)
    if parsed is not None and parsed[0] == source:  # a suppression's rerun gets other text, parsed anew
        module, positions = parsed[1]
    else:
        module = cst.parse_module(source)
        positions = LazyPositions(module)
    finder = _Finder(module, source, positions, role, options)
    plan = finder.plan
    if plan.empty:
        return Result(code=source, diagnostics=tuple(plan.diagnostics), original=source)
    changes = tuple(sorted(plan.changes, key=lambda c: (c.line, c.col)))
    if not rewrite:
        return Result(source, changes, tuple(plan.diagnostics), original=source, pending=True)

    new = with_imports(edits.apply(module, plan, finder.parents), plan)
    check_parses(new.code)
    return Result(new.code, changes, tuple(plan.diagnostics), original=source)


class _Finder:
    """Walks the module once and writes what it finds into an edits.Plan."""

    def __init__(self, module: cst.Module, source: str, positions: LazyPositions, role: ModuleRole, options: Options) -> None:
        self.role = role
        self.options = options
        self.positions = positions
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = parents_in_visit_order(module)
        self.module = module
        self.plan = edits.Plan()
        self.names = ModuleNames.of(self.module)
        self.guarded_functions: Set[cst.FunctionDef] = set()
        self._graph: Optional[CallGraph] = None
        # Code under the module's own `if __name__ == "__main__":` runs only when it is run as a
        # script (a demo, a self-test), never for the training script that imports it.
        demo = {n for guard in main_guards(self.module) for n in walk(guard)}
        calls = [n for n in self.parents if isinstance(n, cst.Call) and n not in demo]
        loops = [n for n in self.parents if isinstance(n, cst.For) and n not in demo]
        if self._on(MODULE_SAMPLER.code):
            for call in calls:
                self._sampler(call)
        if self._on(MODULE_SET_EPOCH.code):
            for loop in loops:
                self._set_epoch(loop)
            for handler in (n for n in self.parents if isinstance(n, cst.ExceptHandler) and n not in demo):
                self._restart_epoch(handler)
        reached = reached_from(self.module, role.used) if role.used is not None else None
        for call in calls if MODULE_SAMPLER.code in role.pieces else ():  # not in the migrated script itself
            if reached is not None and self._top_level_owner(call) not in reached:
                continue  # in a function the script never reaches from what it imports
            if (dotted_name(call.func) or "").split(".")[-1] == "DataParallel" and not self._factory(call):
                self._report(call, DATAPARALLEL_IN_MODULE + ": the script wraps its model "
                                   "in DDP, and a DataParallel around that breaks it; wrap here in DDP by hand, or drop it")
        if self._on(MODULE_DEVICE_LIST.code):
            for call in calls:
                self._device_list(call)
        if self._on(MODULE_RANK_ZERO_SAVE.code):
            self.saved_paths: Set[str] = set()
            for call in calls:
                self._save(call)
            for call in calls:
                self._read_back(call)
        if self._on(MODULE_CHECKPOINT_KEYS.code):
            for call in calls:
                self._wrapper_test(call)
                if role.unwrap_keys:
                    self._keys(call, handed=".module." not in source)
        if self._on(MODULE_MODEL_API.code) and role.unwrap_keys and ".module." not in source:
            for node in list(self.parents):
                if isinstance(node, cst.Attribute) and node not in demo:
                    self._model_api(node)
            for call in calls:
                self._model_type(call)
        if self._on(MODULE_RANK_ZERO_OUTPUT.code):
            for call in calls:
                self._output(call)
        if self._on(MODULE_SHARED_FOLDERS.code):
            for call in calls:
                self._folder(call)

    # ----------------------------------------------------------------- DDP037, DDP038
    def _factory(self, call: cst.Call) -> bool:
        """A network factory's `net = DataParallel(net, gpu_ids)`: planned (True), or left to report."""
        if not self._on(MODULE_NETWORK_FACTORY.code) or not factory_dataparallel(
                call, self._statement(call), self._enclosing(call, cst.FunctionDef), self.plan, self.names):
            return False
        self._change(MODULE_NETWORK_FACTORY.code, call, "DataParallel only without a process group: under torchrun "
                                                         "the caller wraps the network it returns in DDP")
        return True

    def _device_list(self, call: cst.Call) -> None:
        spelled = dotted_name(call.func) or ""
        if not any(spelled == f"{torch}.cuda.set_device" for torch in self.names.torch_like):
            return
        listed = device_list(call, self._statement(call), self._enclosing(call, cst.FunctionDef), self.plan)
        if listed is not None:
            self._change(MODULE_DEVICE_LIST.code, call, f"`{listed}` is the process's own GPU (LOCAL_RANK) under torchrun")

    def _trains(self, loop: cst.For) -> bool:
        """The engine's one answer (migrator.dataflow.calls), on this module read alone."""
        if self._graph is None:
            self._graph = call_graph(self.module)
        return self._graph.trains(loop)

    def _top_level_owner(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The module-level def or class holding `node` (None: module-level code)."""
        owner = None
        current = self.parents.get(node)
        while current is not None and current is not self.module:
            if isinstance(current, (cst.FunctionDef, cst.ClassDef)):
                owner = current
            current = self.parents.get(current)
        return owner

    def _on(self, code: str) -> bool:
        return code in self.role.pieces and self.options.fix_enabled(code)

    # ----------------------------------------------------------------- DDP030
    def _sampler(self, call: cst.Call) -> None:
        if not (self._is_dataloader(call) or self._is_dataloader_super_init(call)):
            return
        own = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value in SAMPLER_KEYWORDS), None)
        if own is not None:
            if self._random_sampler(call, own) or self._sampler_chosen_at_run_time(call, own):
                return
            if any(arg.star == "**" and isinstance(arg.value, cst.IfExp) for arg in call.args):
                return  # `**(dict(kwargs, shuffle=False) if sampler is not chosen else kwargs)`: migrated already
            if "distributed" not in source_of(own.value).lower() and shuffles_or_samples(own.value):
                self._report(call, f"a DataLoader with its own {own.keyword.value} (`{short(own.value)}`) in a module a "
                                   "training script imports: under DDP every rank would draw from the whole data set; "
                                   "shard it by hand (a DistributedSampler, or the sampler over this rank's indices)")
            return
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        shuffle = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "shuffle"), None)
        if shuffle is None and len(positional) >= 3:
            shuffle = positional[2]
        if shuffle is None or is_false(shuffle.value):
            return  # read in order: an evaluation loader, left whole (each rank evaluates all of it)
        dataset = positional[0].value if positional else next(
            (arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "dataset"), None)
        statement = self._statement(call)
        why = None
        if len(positional) > 3:
            why = "it passes the sampler's place positionally"
        elif dataset is None or not is_plain_reference(dataset):
            why = "its data set is not a name (it would be built twice)"
        elif not is_true(shuffle.value) and not is_plain_reference(shuffle.value) and any(True for _ in walk_calls(shuffle.value)):
            why = "its shuffle argument calls something (it would run twice)"
        elif statement is None:
            why = "it is built inside an expression with no statement of its own"
        if why is not None:
            self._report(call, f"a shuffled DataLoader is built here for a training script, but {why}: give it "
                               "`sampler=DistributedSampler(dataset)` (and shuffle=False) by hand")
            return
        name = self._sampler_name(statement, call)
        dist = self.names.dist
        shuffled = _operand(shuffle.value)  # `shuffle=(mode == "train")`: read again, it is the same
        condition = f"{dist}.is_initialized()" if is_true(shuffle.value) else f"{shuffled} and {dist}.is_initialized()"
        sampler_line = cst.parse_statement(
            f"{name} = {self.names.sampler}({source_of(dataset)}, shuffle=True) if {condition} else None\n")
        self.plan.insert_before(statement, [sampler_line])
        new_shuffle = f"{name} is None" if is_true(shuffle.value) else f"{shuffled} and {name} is None"
        self.plan.replace(call, with_sampler(shuffle, new_shuffle, name))
        self.names.need(self.plan, dist=True, sampler=True)
        split = (self._split_batch(call, statement, name) if self.role.batch == "global" else
                 f"; its batch size stays per process, the global batch grows with the processes ({self.role.batch_why}; "
                 "--batch global keeps it)" if self.role.batch_why else "")
        self._change(MODULE_SAMPLER.code, call, f"DistributedSampler for the shuffled DataLoader (`{name}`), when a process group is set up{split}")

    def _random_sampler(self, call: cst.Call, own: cst.Arg) -> bool:
        """`sampler=RandomSampler(dataset, replacement=True, num_samples=...)`: under a process
        group, a DistributedSampler over the same data set instead (this rank's shard, in a new
        order each pass: DDP031 sets the epoch where the loader is iterated again)."""
        value = own.value
        if not (own.keyword is not None and own.keyword.value == "sampler" and isinstance(value, cst.Call)
                and (dotted_name(value.func) or "").split(".")[-1] == "RandomSampler"):
            return False
        dataset = next((arg.value for arg in value.args if arg.keyword is None and not arg.star), None) or next(
            (arg.value for arg in value.args if arg.keyword is not None and arg.keyword.value == "data_source"), None)
        if dataset is None or not is_plain_reference(dataset):
            return False
        dist = self.names.dist
        self.plan.replace(value, lambda updated: cst.parse_expression(
            f"{self.names.sampler}({source_of(dataset)}, shuffle=True) if {dist}.is_initialized() else {source_of(updated)}"))
        self.names.need(self.plan, dist=True, sampler=True)
        self._change(MODULE_SAMPLER.code, call, (
            f"DistributedSampler in place of `{short(value)}` when a process group is set up (each rank its own shard)"))
        return True

    def _sampler_chosen_at_run_time(self, call: cst.Call, own: cst.Arg) -> bool:
        """`super().__init__(sampler=self.sampler, **self.init_kwargs)` in a DataLoader subclass
        whose sampler is None unless it splits off a validation set (pytorch-template's
        BaseDataLoader): under a process group, a shuffled loader without a sampler of its own
        gets this rank's DistributedSampler, and the keyword arguments lose their shuffle."""
        stars = [arg for arg in call.args if arg.star == "**"]
        if not (self._is_dataloader_super_init(call) and own.keyword.value == "sampler" and is_plain_reference(own.value)
                and len(stars) == 1 and is_plain_reference(stars[0].value)
                and not any(arg.keyword is None and not arg.star for arg in call.args)
                and not any(arg.star == "*" for arg in call.args)):
            return False
        statement = self._statement(call)
        if statement is None or len(statement.body) != 1:
            return False
        kwargs, chosen = source_of(stars[0].value), source_of(own.value)
        dataset_arg = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "dataset"), None)
        dataset = source_of(dataset_arg.value) if dataset_arg is not None else f'{kwargs}["dataset"]'
        name, dist = self._sampler_name(statement, call), self.names.dist
        self.plan.insert_before(statement, [cst.parse_statement(f"{name} = {chosen}\n"), cst.parse_statement(
            f"if {name} is None and {dist}.is_initialized() and {kwargs}.get(\"shuffle\"):  # shuffled, no sampler of its own\n"
            f"    {name} = {self.names.sampler}({dataset}, shuffle=True)  # this rank's shard\n")])

        def rewrite(updated: cst.Call) -> cst.Call:
            args = []
            for arg in updated.args:
                if arg.keyword is not None and arg.keyword.value == "sampler":
                    arg = arg.with_changes(value=cst.Name(name))
                elif arg.star == "**":
                    arg = arg.with_changes(value=cst.parse_expression(
                        f"(dict({kwargs}, shuffle=False) if {name} is not {chosen} else {kwargs})"))
                args.append(arg)
            return updated.with_changes(args=args)

        self.plan.replace(call, rewrite)
        self.names.need(self.plan, dist=True, sampler=True)
        self._change(MODULE_SAMPLER.code, call, f"DistributedSampler when `{chosen}` is None and the loader shuffles, "
                                                "under a process group")
        self._report(call, f"when `{chosen}` is set (a sampler of its own, e.g. a validation split's "
                           "SubsetRandomSampler) every rank draws from all of it under DDP: shard those indices by hand")
        return True

    def _split_batch(self, call: cst.Call, statement: cst.SimpleStatementLine, sampler: str) -> str:
        """--batch global (migrator.rules.global_batch) in a module: the sharded loader's batch_size
        becomes this process's part of the global batch, under a process group only."""
        from migrator.rules.global_batch import batch_argument, plain_value

        argument = batch_argument(call)
        if argument is None or not plain_value(argument.value):
            self._report(call, "--batch global: this loader's batch size is "
                               f"{'an expression' if argument is not None else 'DataLoader default of 1'}, so it stays per "
                               "process and the global batch grows with the number of processes; split it by hand")
            return ""
        size, world = source_of(argument.value), f"{self.names.dist}.get_world_size()"
        per_process = f"max(1, {size} // {world})"
        # Never refused (see migrator.rules.global_batch): rounded down, and rank 0 says so.
        check = cst.parse_statement(
            f"if {sampler} is not None and {size} % {world} and {self.names.dist}.get_rank() == 0:  # the global batch is split over the processes\n"
            f"    print(\"batch size %d does not split evenly over %d processes: each loads %d, a global batch of %d\""
            f" % ({size}, {world}, {per_process}, {per_process} * {world}))\n")
        self.plan.insert_before(statement, [check])
        self.plan.replace(argument, lambda updated: updated.with_changes(
            value=cst.parse_expression(f"max(1, {source_of(updated.value)} // {world}) if {sampler} is not None else {source_of(updated.value)}")))
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
        target = assigned_target(statement)
        stem = ""
        if target:
            last = target.split(".")[-1]
            stem = last[: -len("loader")] if last.lower().endswith("loader") else ""
            stem = stem if stem.endswith("_") or not stem else stem + "_"
        taken = bound_names(self._enclosing(call, cst.FunctionDef) or self.module)
        for candidate in (f"{stem}sampler", "dist_sampler", "distributed_sampler"):
            if candidate not in taken:
                return candidate
        return "ddp_sampler"

    # ----------------------------------------------------------------- DDP031
    def _set_epoch(self, loop: cst.For) -> None:
        function = self._enclosing(loop, cst.FunctionDef)
        loader = iterated_loader(loop.iter, wrappers(function or self.module))
        # What a training loop walks over is its data, whatever it is called: the set_epoch below
        # is guarded by the sampler's type, so a list or an iterator of the caller's runs as before.
        passes = loader is not None and _one_pass(loop, function, loader)
        if loader is None or not (passes or self._trains(loop)):
            return
        scope = function or self.module
        if any(isinstance(n, cst.Attribute) and n.attr.value == "set_epoch" for n in walk(scope)):
            return  # the epoch is set already (maybe by the per-file engine, for its own loaders)
        # The epoch number where it is known; else the sampler's own count of passes moves on by one
        # (each run of this loop is one pass over the loader: all ranks count alike).
        epoch = self._epoch_in_reach(loop, function) or f"{loader}.sampler.epoch + 1"
        statement = cst.parse_statement(
            f"if isinstance(getattr({loader}, \"sampler\", None), {self.names.sampler}):  # a new order each epoch\n"
            f"    {loader}.sampler.set_epoch({epoch})\n")
        self.plan.insert_before(loop, [statement])
        self.names.need(self.plan, sampler=True)
        where = "each pass over the wrapped loader" if passes else "before the training loop"
        self._change(MODULE_SET_EPOCH.code, loop, f"`{loader}.sampler.set_epoch({epoch})` {where}")

    def _restart_epoch(self, handler: cst.ExceptHandler) -> None:
        """`except StopIteration: data_iter = iter(train_loader)`: a loop over steps that starts the
        loader again when it runs out. Each restart is a new pass: the sampler's epoch moves on."""
        if not self._ends_iteration(handler):
            return
        function = self._enclosing(handler, cst.FunctionDef)
        scope = function or self.module
        if any(isinstance(n, cst.Attribute) and n.attr.value == "set_epoch" for n in walk(scope)):
            return
        # `except StopIteration:` with the restart in it, or under an `if` there (one of several loaders)
        for statement in (n for n in walk(handler.body) if isinstance(n, cst.SimpleStatementLine)):
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            value = getattr(small, "value", None)
            if not (isinstance(small, cst.Assign) and isinstance(value, cst.Call) and dotted_name(value.func) == "iter"
                    and len(value.args) == 1 and not any(True for _ in walk_calls(value.args[0].value))):
                continue  # `iter(loader)`, `iter(self.loaders[i])`: no call to run twice
            loader = source_of(value.args[0].value)
            epoch = cst.parse_statement(
                f"if isinstance(getattr({loader}, \"sampler\", None), {self.names.sampler}):  # a new order each pass\n"
                f"    {loader}.sampler.set_epoch({loader}.sampler.epoch + 1)\n")
            self.plan.insert_before(statement, [epoch])
            self.names.need(self.plan, sampler=True)
            self._change(MODULE_SET_EPOCH.code, statement, f"`{loader}.sampler.set_epoch(...)` each time the loader starts again")

    def _ends_iteration(self, handler: cst.ExceptHandler) -> bool:
        """`except StopIteration:`, or a bare `except:` / `except Exception:` around a `next(it)`:
        the handler runs when the iterator runs dry (StarGAN's solver catches everything there)."""
        caught = dotted_name(handler.type) if handler.type is not None else None
        if caught == "StopIteration":
            return True
        attempt = self.parents.get(handler)
        return caught in (None, "Exception", "BaseException") and isinstance(attempt, cst.Try) and any(
            isinstance(n, cst.Call) and dotted_name(n.func) == "next" for n in walk(attempt.body))

    def _epoch_in_reach(self, loop: cst.For, function: Optional[cst.FunctionDef]) -> Optional[str]:
        """The variable of a counting loop around `loop` (`for epoch in range(n)`: one pass of the
        data each), or the epoch the scripts pass in (`trainer.train_epoch(epoch)`)."""
        node = self.parents.get(loop)
        while node is not None and node is not function:
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and _counts(node.iter):
                return node.target.value
            node = self.parents.get(node)
        if function is not None and self.role.epochs is not None:
            cls, method = self._top_level_scope(function.body)
            for param in function.params.params:
                if self.role.epochs.holds(method, cls, param.name.value):
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
        if not looks_like_checkpoint(call, function):
            self._report(call, "torch.save runs on every rank of the training script that calls this module; "
                               "if it writes a checkpoint, write it on rank 0 only (if it caches data, every rank may need it)")
            return
        dist = self.names.dist
        reused = path_used_after(call, statement, function)
        if reused is not None and not save_function(function):
            self._report(call, f"a checkpoint every rank writes, and `{function.name.value}()` goes on to use `{reused}` "
                               "after saving it: a rank check around the save alone would leave the other ranks reading "
                               "a file rank 0 may not have written yet; guard the save and what follows it by hand")
            return
        if save_function(function):
            if function not in self.guarded_functions:
                self.guarded_functions.add(function)
                guard = cst.parse_statement(
                    f"if {dist}.is_initialized() and {dist}.get_rank() != 0:\n    return  # one copy of each checkpoint: rank 0 writes it\n")
                self.plan.insert_before(first_statement(function), [guard])
                self._change(MODULE_RANK_ZERO_SAVE.code, call,
                             f"`{function.name.value}()` writes checkpoints on rank 0 only (the other ranks return)")
        else:
            self.plan.guard(statement, f"not {dist}.is_initialized() or {dist}.get_rank() == 0")
            self._change(MODULE_RANK_ZERO_SAVE.code, call, "checkpoint written on rank 0 only")
        if len(call.args) > 1:
            self.saved_paths.add(source_of(call.args[1].value))
        self.names.need(self.plan, dist=True)

    def _read_back(self, call: cst.Call) -> None:
        """`torch.load(config.save_path)` of a file only rank 0 now writes: every rank waits for it."""
        if dotted_name(call.func) not in self.names.torch_loads or not call.args:
            return
        if source_of(call.args[0].value) not in self.saved_paths:
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
            if isinstance(node, cst.If) and N.mentions_rank(node.test):  # the engine's one reading of a rank check
                return True
            node = self.parents.get(node)
        return any(  # an early return for the other ranks at the top of the function
            isinstance(s, cst.If) and N.mentions_rank(s.test)
            and any(isinstance(n, cst.Return) for n in walk(s.body))
            for s in function.body.body
        )

    # ----------------------------------------------------------------- DDP033
    def _keys(self, call: cst.Call, handed: bool) -> None:
        """`handed`: the scripts' models are looked for (a module that writes `.module.` itself
        unwraps them already); a network the module picks by name always is."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in ("state_dict", "load_state_dict")):
            return
        moved = func.value  # `net.cpu().state_dict()`: the keys are the network's
        while (isinstance(moved, cst.Call) and isinstance(moved.func, cst.Attribute)
               and moved.func.attr.value in _RETURNS_ITSELF):
            moved = moved.func.value
        receiver = dotted_name(moved)
        if receiver is None or receiver.endswith(".module") or not (
                handed and self._handed_over(call, receiver) or self._chosen_by_name(call, moved)):
            return
        bare = f"({receiver}.module if isinstance({receiver}, {self.names.ddp}) else {receiver})"
        self.plan.replace(moved, lambda updated: cst.parse_expression(bare))
        self.names.need(self.plan, ddp=True)
        self._change(MODULE_CHECKPOINT_KEYS.code, call,
                     f"`{receiver}.{func.attr.value}()` through `.module` when it is wrapped in DDP (the original keys)")

    def _chosen_by_name(self, call: cst.Call, receiver: cst.BaseExpression) -> bool:
        """`net = getattr(self, "net" + name)` in the function: one of the networks a subclass
        keeps (`self.netG`, `self.netD`), found by its name at run time."""
        function = self._enclosing(call, cst.FunctionDef)
        if function is None or not isinstance(receiver, cst.Name):
            return False
        for node in walk(function.body):
            if (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                    and node.targets[0].target.value == receiver.value and isinstance(node.value, cst.Call)
                    and dotted_name(node.value.func) == "getattr" and len(node.value.args) >= 2
                    and dotted_name(node.value.args[0].value) == "self"
                    and not isinstance(node.value.args[1].value, cst.SimpleString)):
                return True
        return False

    def _wrapper_test(self, call: cst.Call) -> None:
        """`isinstance(net, torch.nn.DataParallel)` (to unwrap it before loading its keys): DDP is
        such a wrapper too."""
        if not (isinstance(call.func, cst.Name) and call.func.value == "isinstance" and len(call.args) == 2):
            return
        test = self.parents.get(call)
        if not (isinstance(test, (cst.If, cst.IfExp)) and test.test is call):
            return  # `if isinstance(net, DataParallel): net = net.module`, not an assertion of DataParallel's own code
        kind = dotted_name(call.args[1].value) or ""
        if kind.split(".")[-1] != "DataParallel":
            return
        both = f"({kind}, {self.names.ddp})"
        self.plan.replace(call, lambda updated: updated.with_changes(
            args=[updated.args[0], updated.args[1].with_changes(value=cst.parse_expression(both))]))
        self.names.need(self.plan, ddp=True)
        self._change(MODULE_CHECKPOINT_KEYS.code, call, f"`isinstance(..., {kind})` is true of a DDP model too")

    # ----------------------------------------------------------------- DDP034
    def _model_api(self, attribute: cst.Attribute) -> None:
        """`self.model.encoder`, `model.configure_optimizers(cfg)`: what the user's class defines is
        not on the DDP wrapper (only nn.Module's own API is)."""
        name = attribute.attr.value
        if name in MODULE_API or name.startswith("__"):
            return
        receiver = dotted_name(attribute.value)
        if receiver is None or not self._handed_over(attribute, receiver):
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
        if receiver is None or not self._handed_over(call, receiver):
            return
        if call.func.value == "isinstance" and len(call.args) > 1 and (
            "DataParallel" in source_of(call.args[1].value) or source_of(call.args[1].value) in (self.names.ddp, "DDP")
        ):
            return  # asks about the wrapper itself (ours included: `x.module if isinstance(x, DDP) else x`)
        bare = f"{receiver}.module if isinstance({receiver}, {self.names.ddp}) else {receiver}"
        first = call.args[0]
        self.plan.replace(call, lambda updated: updated.with_changes(
            args=[updated.args[0].with_changes(value=cst.parse_expression(bare)), *updated.args[1:]]))
        self.names.need(self.plan, ddp=True)
        self._change(MODULE_MODEL_API.code, first, f"`{call.func.value}({receiver})` asks about the model's class, not DDP's")

    # ----------------------------------------------------------------- DDP035
    def _output(self, call: cst.Call) -> None:
        """A `print(...)` statement or a tqdm bar in a function: every rank that calls it shows it.
        torchrun's RANK decides, not the process group: a config parser or a data set prints
        before the script sets the group up."""
        function = self._enclosing(call, cst.FunctionDef)
        if function is None or self._rank_checked(call, function):
            return
        spelled = dotted_name(call.func)
        if spelled in self.names.progress_bars:
            if any(arg.keyword is not None and arg.keyword.value == "disable" for arg in call.args) or any(
                    arg.star for arg in call.args):
                return
            self.plan.replace(call, lambda updated: with_keyword(updated, "disable", ENV_NOT_RANK_ZERO))
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "progress bar drawn on rank 0 only")
        elif spelled == "print":
            statement = self._statement(call)
            if statement is None or len(statement.body) != 1 or not (
                    isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call):
                return
            self.plan.guard(statement, ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "printed on rank 0 only")
        elif spelled == "open" and self._log_append(call) is not None:
            self.plan.guard(self._log_append(call), ENV_RANK_ZERO)
            self._change(MODULE_RANK_ZERO_OUTPUT.code, call, "log lines appended on rank 0 only")
        else:
            return
        self.plan.need_import("os")

    def _log_append(self, call: cst.Call) -> Optional[cst.With]:
        """`with open(log_name, "a") as log_file: log_file.write(message)`: a log every rank
        appends the same lines to. The `with` statement, when writing (or printing) is all it does."""
        item = self.parents.get(call)
        block = self.parents.get(item)
        if not (isinstance(item, cst.WithItem) and isinstance(block, cst.With) and len(block.items) == 1
                and item.asname is not None and isinstance(item.asname.name, cst.Name)):
            return None
        mode = next((arg.value for arg in call.args[1:2] if arg.keyword is None), None) or next(
            (arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "mode"), None)
        if not (isinstance(mode, cst.SimpleString) and mode.evaluated_value in ("a", "at")):
            return None
        handle = item.asname.name.value
        made: Set[str] = set()  # locals the lines are made of (`now = time.strftime("%c")`)
        for statement in block.body.body:
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
            if isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) for t in small.targets):
                made |= {t.target.value for t in small.targets}
                continue
            written = small.value if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) else None
            if written is None or dotted_name(written.func) not in (f"{handle}.write", "print"):
                return None
        function = self._enclosing(block, cst.FunctionDef)
        inside = set(walk(block))
        if made and (function is None or any(isinstance(n, cst.Name) and n.value in made and n not in inside
                                             for n in walk(function.body))):
            return None  # read after the `with`: every rank needs it
        return block

    # ----------------------------------------------------------------- DDP036
    def _folder(self, call: cst.Call) -> None:
        """`path.mkdir(parents=True, exist_ok=False)`, `os.makedirs(d)`, `os.mkdir(d)`: raises on
        every rank but the first that gets there."""
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in ("mkdir", "makedirs") or any(arg.star for arg in call.args):
            return
        spelled = dotted_name(func) or ""
        is_os = spelled in ("os.mkdir", "os.makedirs")
        positional = [arg for arg in call.args if arg.keyword is None]
        if is_os and (not positional or len(positional) > 2 or (spelled == "os.mkdir" and len(positional) > 1)):
            return  # `os.makedirs(d, mode, exist_ok)` positionally, or nothing to create
        if not is_os and (len(positional) > 2 or self._enclosing(call, cst.FunctionDef) is None):
            return
        if not is_os and not any(arg.keyword is not None and arg.keyword.value in ("parents", "exist_ok") for arg in call.args):
            return  # `x.mkdir()` alone: too common a name to be sure it is a Path
        current = next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == "exist_ok"), None)
        if current is not None and (is_true(current.value) or "os.environ" in source_of(current.value)):
            return  # exist_ok already, or decided by the environment (ours, on a second run)
        before = source_of(current.value) if current is not None else None
        value = f'{before} or "RANK" in os.environ' if before and not is_false(current.value) else '"RANK" in os.environ'

        def rewrite(updated: cst.Call) -> cst.Call:
            args = [arg for arg in updated.args if not (arg.keyword is not None and arg.keyword.value == "exist_ok")]
            if args:
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            new = updated.with_changes(args=args)
            if spelled == "os.mkdir":
                new = new.with_changes(func=new.func.with_changes(attr=cst.Name("makedirs")))
            return with_keyword(new, "exist_ok", value)

        self.plan.replace(call, rewrite)
        self.plan.need_import("os")
        self._change(MODULE_SHARED_FOLDERS.code, call, "folder created with exist_ok under torchrun (every rank creates it)")

    def _handed_over(self, node: cst.CSTNode, receiver: str) -> bool:
        """Is `receiver` the script's model where `node` is? Followed from the script's calls into
        the project (migrator.graph.values), whatever it is called: `self.model`, `net`, `self.G`,
        a local `model = self.model`; never a name that only looks like one (`self.model_dir`)."""
        if self.role.models is None:
            return False
        cls, method = self._top_level_scope(node)
        return self.role.models.holds(method, cls, receiver)

    def _top_level_scope(self, node: cst.CSTNode) -> Tuple[Optional[str], Optional[str]]:
        """(the module-level class around `node`, the method of it, or the module-level function)."""
        chain = []
        current = self.parents.get(node)
        while current is not None and current is not self.module:
            if isinstance(current, (cst.FunctionDef, cst.ClassDef)):
                chain.append(current)
            current = self.parents.get(current)
        chain.reverse()  # outermost first
        if not chain:
            return None, None
        if isinstance(chain[0], cst.ClassDef):
            method = chain[1].name.value if len(chain) > 1 and isinstance(chain[1], cst.FunctionDef) else None
            return chain[0].name.value, method
        return None, chain[0].name.value

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
        line, column = self.positions.start(node) or (1, 0)
        return line, column + 1

    def _change(self, code: str, node: cst.CSTNode, message: str) -> None:
        line, col = self._line_col(node)
        self.plan.changes.append(Change(code, line, col, message))

    def _report(self, node: cst.CSTNode, message: str) -> None:
        if self.options.enabled(MODULE_NEEDS_MIGRATION.code, MODULE_NEEDS_MIGRATION.name):
            line, col = self._line_col(node)
            self.plan.diagnostics.append(Diagnostic(MODULE_NEEDS_MIGRATION.code, line, col, message))


def _one_pass(loop: cst.For, function: Optional[cst.FunctionDef], loader: str) -> bool:
    """`def __iter__(self): for data in self.dataloader: yield data`: a class that wraps a loader,
    each pass over it one pass over the loader (one epoch of the loop that iterates it)."""
    return (function is not None and function.name.value == "__iter__" and loader.startswith("self.")
            and any(isinstance(node, cst.Yield) for node in walk(loop.body)))


def _counts(iterated: cst.BaseExpression) -> bool:
    """`range(...)`, `trange(...)`, `tqdm(range(...))`: a loop that counts (migrator.graph.values' twin)."""
    while isinstance(iterated, cst.Call):
        name = (dotted_name(iterated.func) or "").split(".")[-1]
        if name in ("range", "trange"):
            return True
        if name != "tqdm" or not iterated.args:
            return False
        iterated = iterated.args[0].value
    return False


def _operand(node: cst.BaseExpression) -> str:
    """`node`'s code, in parentheses when it needs them as the left side of an `and`."""
    text = source_of(node)
    return text if is_plain_reference(node) or getattr(node, "lpar", ()) else f"({text})"


def reached_from(module: cst.Module, names: Tuple[str, ...]) -> Set[Optional[cst.CSTNode]]:
    """The module-level defs and classes that `names` lead to through the names their bodies
    mention, and None (module-level code runs at import)."""
    top = {node.name.value: node for node in module.body if isinstance(node, (cst.FunctionDef, cst.ClassDef))}
    reached: Set[Optional[cst.CSTNode]] = {None}
    pending = [top[name] for name in names if name in top]
    while pending:
        node = pending.pop()
        if node in reached:
            continue
        reached.add(node)
        pending += [top[n.value] for n in walk(node) if isinstance(n, cst.Name) and n.value in top and top[n.value] not in reached]
    return reached


def walk_calls(node: cst.CSTNode):
    return (n for n in walk(node) if isinstance(n, cst.Call))
