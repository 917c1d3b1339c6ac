"""The rules of project mode: DDP030-DDP038, and DDP140 for what they cannot change.

They run on modules that a migrated training script imports (its trainer class, its loader
helper, its checkpoint saver), never on a file alone: `ddp-migrate train.py` reports what such a
module needs (DDP140), `ddp-migrate .` (or naming the module too) changes it. A module is read by
the same analysis as a script (migrator.analysis), and each concern plans from what it collected:

  samplers     DDP030  a shuffled DataLoader built here gets a DistributedSampler
  epochs       DDP031  a training loop over a loader gets `set_epoch` in reach of its epoch number
  checkpoints  DDP032  checkpoints (`torch.save`) are written by rank 0
               DDP033  the model's `state_dict()` / `load_state_dict()` go through `.module` when wrapped
               DDP034  the model's own methods and submodules go through `.module` when wrapped
  outputs      DDP035  prints and progress bars show on rank 0
               DDP036  folders every rank creates tolerate the others' copy under torchrun
  devices      DDP037  a network factory's DataParallel runs only without a process group
               DDP038  the GPU list an option parser sets the device from becomes the process's own GPU

Every edit is conditional on a process group being there (`dist.is_initialized()`,
`isinstance(model, DDP)`): the module may have other callers (an evaluation script, a notebook)
that never set one up, and they keep running as before. `plan_module` plans each fix into a plan
of its own (edits.Plan.for_fix), so that a suppressed fix is dropped from what was planned.
"""
from __future__ import annotations

from typing import List

import libcst as cst

from migrator import edits
from migrator.options import Options
from migrator.rule import Example, Rule
from migrator.rules.modules.base import ModulePlanner, ModuleRole
from migrator.rules.modules.checkpoints import MODULE_CHECKPOINT_KEYS, MODULE_MODEL_API, MODULE_RANK_ZERO_SAVE, Checkpoints
from migrator.rules.modules.devices import DATAPARALLEL_IN_MODULE, MODULE_DEVICE_LIST, MODULE_NETWORK_FACTORY, Devices
from migrator.rules.modules.epochs import MODULE_SET_EPOCH, Epochs
from migrator.rules.modules.outputs import MODULE_RANK_ZERO_OUTPUT, MODULE_SHARED_FOLDERS, Outputs
from migrator.rules.modules.samplers import MODULE_SAMPLER, Samplers

MODULE_NEEDS_MIGRATION = Rule(
    code="DDP140",
    name="project-module-needs-migration",
    summary="a module the training script imports needs a change that project mode could not make",
    what="""
A migrated training script imports a module of its project that needs a DDP change: a shuffled
DataLoader without a DistributedSampler, a training loop with no `set_epoch`, a checkpoint every
rank writes. Either the module is not among the files ddp-migrate was given (the finding, on the
script, names the module, the line and the change), or the change could not be made safely
there (the finding is on the module, with the reason).""",
    why="A half-migrated project trains silently wrong: the script runs DDP, the loader in the other file does not shard.",
    fix="""
Run ddp-migrate on the project's folder (`ddp-migrate --diff .`) or name the module too; make
the change by hand where the finding says it cannot be made.""",
    fix_safety="Report only.",
    fixable=False,
    examples=(
        Example(
            id="dataset-built-inline",
            before='''from torch.utils.data import DataLoader


def make_loader(args):
    return DataLoader(build_dataset(args), batch_size=8, shuffle=True)
''',
            diagnostics=("DDP140",),
        ),
    ),
)

RULES = (MODULE_SAMPLER, MODULE_SET_EPOCH, MODULE_RANK_ZERO_SAVE, MODULE_CHECKPOINT_KEYS, MODULE_MODEL_API,
         MODULE_NEEDS_MIGRATION, MODULE_RANK_ZERO_OUTPUT, MODULE_SHARED_FOLDERS, MODULE_NETWORK_FACTORY, MODULE_DEVICE_LIST)


class _ModuleRules(Samplers, Epochs, Checkpoints, Outputs, Devices):
    """Every module rule, on one module's analysis."""


def plan_module(analysis, source: str, role: ModuleRole, options: Options) -> List[edits.Plan]:
    """Each fix's plan for the module (`analysis`: migrator.analysis' _Analysis of it), in planning
    order, the reports no fix owns in plans of their own. The module's own `if __name__ ==
    "__main__":` block runs only when it is run as a script (a demo, a self-test), never for the
    training script that imports it: nothing in it is planned."""
    rules = _ModuleRules(analysis, role, options)
    guards = analysis.c.main_guards
    demo = (lambda node: any(analysis.is_inside(node, guard) for guard in guards)) if guards else (lambda node: False)
    calls = [call for call in analysis.c.calls if not demo(call)]
    loops = [loop for loop in analysis.c.loops if isinstance(loop, cst.For) and not demo(loop)]
    source_has_module = ".module." in source  # written for a wrapper (DataParallel): it unwraps the model itself
    rules._fix("")
    if rules._fix(MODULE_SAMPLER.code):
        for call in calls:
            rules._sampler(call)
    if rules._fix(MODULE_SET_EPOCH.code):
        for loop in loops:
            rules._set_epoch(loop)
        for handler in (h for h in analysis.c.handlers if not demo(h)):
            rules._restart_epoch(handler)
    wrapping = rules._wrapping(calls) if MODULE_SAMPLER.code in role.pieces else ()  # not in the migrated script itself
    factories = [call for call in wrapping if rules._factory(call)] if wrapping and rules._fix(MODULE_NETWORK_FACTORY.code) else []
    rules._fix("")  # the reports: what no fix takes on
    for call in wrapping:
        if call not in factories:
            rules._report(call, DATAPARALLEL_IN_MODULE + ": the script wraps its model "
                                "in DDP, and a DataParallel around that breaks it; wrap here in DDP by hand, or drop it")
    if factories:
        rules.plan.read_from.add(MODULE_NETWORK_FACTORY.code)  # without DDP037, they are reported too
    if rules._fix(MODULE_DEVICE_LIST.code):
        for call in calls:
            rules._device_list(call)
    if rules._fix(MODULE_RANK_ZERO_SAVE.code):
        for call in calls:
            rules._save(call)
        for call in calls:
            rules._read_back(call)
    if rules._fix(MODULE_CHECKPOINT_KEYS.code):
        for call in calls:
            rules._wrapper_test(call)
            rules._pickled(call)
            if role.unwrap_keys:
                rules._keys(call, handed=not source_has_module)
    if rules._fix(MODULE_MODEL_API.code) and role.unwrap_keys and not source_has_module:
        for attribute in analysis.c.attributes:
            if not demo(attribute):
                rules._model_api(attribute)
        for call in calls:
            rules._model_type(call)
    if rules._fix(MODULE_RANK_ZERO_OUTPUT.code):
        for call in calls:
            rules._output(call)
    if rules._fix(MODULE_SHARED_FOLDERS.code):
        for call in calls:
            rules._folder(call)
    return rules.parts


__all__ = ["DATAPARALLEL_IN_MODULE", "Example", "ModulePlanner", "ModuleRole", "RULES", "plan_module"]
