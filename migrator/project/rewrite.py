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
devices (DDP037, DDP038). _Finder here walks the module once and hands each site to them, each
fix planning into a plan of its own, so that a suppressed fix is dropped from what was planned
(`_Planned.without`, as in the per-file engine).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from migrator import edits, suppress
from migrator.codegen import check_parses, with_imports
from migrator.analysis.facts import LazyPositions
from migrator.graph.bindings import dotted_name
from migrator.options import Options
from migrator.parsing import parse
from migrator.project.devices import device_list, factory_dataparallel
from migrator.project.rules import (
    MODULE_CHECKPOINT_KEYS, MODULE_DEVICE_LIST, MODULE_NETWORK_FACTORY, MODULE_MODEL_API,
    MODULE_RANK_ZERO_OUTPUT, MODULE_SHARED_FOLDERS, MODULE_RANK_ZERO_SAVE, MODULE_SAMPLER, MODULE_SET_EPOCH,
)
from migrator.types import Change, Result
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

    `# ddp-migrate: ignore[DDP032]` comments work as in a script (migrator.suppress): each fix
    plans into a plan of its own, and a suppressed one is dropped from them."""
    options = options or Options()
    engine = functools.partial(_plan_module, role=role, rewrite=rewrite, parsed=(source, parsed) if parsed else None)
    return suppress.apply_planned(engine, source, options, suppress.python_suppressions(source))


def _plan_module(
    source: str, options: Options, role: ModuleRole, rewrite: bool,
    parsed: Optional[Tuple[str, Tuple[cst.Module, LazyPositions]]] = None,
) -> Union[Result, "_Planned"]:
    if not any(word in source for word in ("DataLoader", "loader", "save", "state_dict", "model", "net", "iter", "data", "print", "tqdm",
                                             "mkdir", "makedirs", "set_device")):
        return Result(code=source, original=source)
    if parsed is not None and parsed[0] == source:  # a suppression's rerun gets other text, parsed anew
        module, positions = parsed[1]
    else:
        module = parse(source)  # a SourceParseError where it is not Python 3
        positions = LazyPositions(module)
    finder = _Finder(module, source, positions, role, options)
    return _Planned(source, module, finder.parents, tuple(finder.parts), rewrite)


@dataclass(frozen=True)
class _Planned:
    """A module planned: each fix's plan, from which the Result is made (as api._Planned)."""

    source: str
    module: cst.Module
    parents: Dict[cst.CSTNode, cst.CSTNode]
    parts: Tuple[edits.Plan, ...]
    rewrite: bool

    def without(self, options: Options, changes: FrozenSet[Change] = frozenset()) -> Optional[Result]:
        """The Result with the fixes `options` turns off dropped; None where a part that stays read
        what one of them planned (the DataParallel report, which a network factory's fix takes on).
        Project mode's fixes go whole: none has sites of its own (`changes` is for those)."""
        if changes:
            return None
        dropped = {part.owner for part in self.parts if part.owner and not options.fix_enabled(part.owner)}
        if any(part.read_from & dropped for part in self.parts if part.owner not in dropped):
            return None
        return self.result(options)

    def result(self, options: Options) -> Result:
        source = self.source
        kept = [part for part in self.parts if not part.owner or options.fix_enabled(part.owner)]
        plan = edits.merged(kept, frozenset(part.owner for part in kept if part.owner))
        if plan.empty:
            return Result(code=source, diagnostics=tuple(plan.diagnostics), original=source)
        changes = tuple(sorted(plan.changes, key=lambda c: (c.line, c.col)))
        if not self.rewrite:
            return Result(source, changes, tuple(plan.diagnostics), original=source, pending=True)
        new = with_imports(edits.apply(self.module, plan, self.parents), plan)
        check_parses(new.code)
        return Result(new.code, changes, tuple(plan.diagnostics), original=source)


class _Finder(Samplers, Epochs, Checkpoints, Outputs):
    """Walks the module once and writes what it finds into an edits.Plan per fix (`parts`)."""

    def __init__(self, module: cst.Module, source: str, positions: LazyPositions, role: ModuleRole, options: Options) -> None:
        self.role = role
        self.options = options
        self.positions = positions
        self.parents = parents_in_visit_order(module)
        self.module = module
        self.parts: List[edits.Plan] = []  # one per fix that runs (`_fix`), in planning order
        self._fix("")
        self.names = ModuleNames.of(self.module)
        self.guarded_functions = set()
        self.saved_paths = set()
        self.pickled = set()
        self.writers = {}
        self._graph = None
        # Code under the module's own `if __name__ == "__main__":` runs only when it is run as a
        # script (a demo, a self-test), never for the training script that imports it.
        demo = {n for guard in main_guards(self.module) for n in walk(guard)}
        calls = [n for n in self.parents if isinstance(n, cst.Call) and n not in demo]
        loops = [n for n in self.parents if isinstance(n, cst.For) and n not in demo]
        if self._fix(MODULE_SAMPLER.code):
            for call in calls:
                self._sampler(call)
        if self._fix(MODULE_SET_EPOCH.code):
            for loop in loops:
                self._set_epoch(loop)
            for handler in (n for n in self.parents if isinstance(n, cst.ExceptHandler) and n not in demo):
                self._restart_epoch(handler)
        wrapping = self._wrapping(calls, role) if MODULE_SAMPLER.code in role.pieces else ()  # not in the migrated script itself
        factories = [call for call in wrapping if self._factory(call)] if wrapping and self._fix(MODULE_NETWORK_FACTORY.code) else []
        self._fix("")  # the reports: what no fix takes on
        for call in wrapping:
            if call not in factories:
                self._report(call, DATAPARALLEL_IN_MODULE + ": the script wraps its model "
                                   "in DDP, and a DataParallel around that breaks it; wrap here in DDP by hand, or drop it")
        if factories:
            self.plan.read_from.add(MODULE_NETWORK_FACTORY.code)  # without DDP037, they are reported too
        if self._fix(MODULE_DEVICE_LIST.code):
            for call in calls:
                self._device_list(call)
        if self._fix(MODULE_RANK_ZERO_SAVE.code):
            for call in calls:
                self._save(call)
            for call in calls:
                self._read_back(call)
        if self._fix(MODULE_CHECKPOINT_KEYS.code):
            for call in calls:
                self._wrapper_test(call)
                self._pickled(call)
                if role.unwrap_keys:
                    self._keys(call, handed=".module." not in source)
        if self._fix(MODULE_MODEL_API.code) and role.unwrap_keys and ".module." not in source:
            for node in list(self.parents):
                if isinstance(node, cst.Attribute) and node not in demo:
                    self._model_api(node)
            for call in calls:
                self._model_type(call)
        if self._fix(MODULE_RANK_ZERO_OUTPUT.code):
            for call in calls:
                self._output(call)
        if self._fix(MODULE_SHARED_FOLDERS.code):
            for call in calls:
                self._folder(call)

    def _fix(self, code: str) -> bool:
        """Whether fix `code` runs here; if it does, what follows plans into a plan of its own
        (edits.Plan.for_fix; "": the reports no fix owns, which always run)."""
        if code and not self._on(code):
            return False
        self.plan = edits.Plan().for_fix(code, self.parts)
        self.parts.append(self.plan)
        return True

    def _wrapping(self, calls: List[cst.Call], role: ModuleRole) -> List[cst.Call]:
        """The DataParallel calls in what the script reaches from what it imports."""
        reached = reached_from(self.module, role.used) if role.used is not None else None
        return [call for call in calls
                if (reached is None or self._top_level_owner(call) in reached)
                and (dotted_name(call.func) or "").split(".")[-1] == "DataParallel"]

    # ----------------------------------------------------------------- DDP037, DDP038
    def _factory(self, call: cst.Call) -> bool:
        """A network factory's `net = DataParallel(net, gpu_ids)`: planned (True), or left to report."""
        if not factory_dataparallel(
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


