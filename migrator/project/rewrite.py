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

Each concern plans in its own module, on the common ground of migrator.project.planner:
samplers (DDP030), epochs (DDP031), checkpoints (DDP032-DDP034), outputs (DDP035, DDP036),
devices (DDP037, DDP038). _Finder here walks the module once and hands each site to them.
"""
from __future__ import annotations

import functools
from typing import Optional, Set, Tuple

import libcst as cst

from migrator import edits, suppress
from migrator.codegen import check_parses, with_imports
from migrator.analysis.facts import LazyPositions
from migrator.bindings import dotted_name
from migrator.options import Options
from migrator.project.devices import device_list, factory_dataparallel
from migrator.project.rules import (
    MODULE_CHECKPOINT_KEYS, MODULE_DEVICE_LIST, MODULE_NETWORK_FACTORY, MODULE_MODEL_API,
    MODULE_RANK_ZERO_OUTPUT, MODULE_SHARED_FOLDERS, MODULE_RANK_ZERO_SAVE, MODULE_SAMPLER, MODULE_SET_EPOCH,
)
from migrator.types import Result
from migrator.project.shapes import ModuleNames, main_guards, parents_in_visit_order, walk
from migrator.project.planner import ModuleRole
from migrator.project.samplers import Samplers
from migrator.project.epochs import Epochs
from migrator.project.checkpoints import Checkpoints
from migrator.project.outputs import Outputs

DATAPARALLEL_IN_MODULE = "DataParallel in a module a training script imports"  # planning blocks on it


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


class _Finder(Samplers, Epochs, Checkpoints, Outputs):
    """Walks the module once and writes what it finds into an edits.Plan."""

    def __init__(self, module: cst.Module, source: str, positions: LazyPositions, role: ModuleRole, options: Options) -> None:
        self.role = role
        self.options = options
        self.positions = positions
        self.parents = parents_in_visit_order(module)
        self.module = module
        self.plan = edits.Plan()
        self.names = ModuleNames.of(self.module)
        self.guarded_functions = set()
        self.saved_paths = set()
        self._graph = None
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


