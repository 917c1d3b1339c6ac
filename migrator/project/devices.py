"""Project mode: a module that picks the devices and the multi-GPU wrapper for its networks.

An image-to-image framework builds every network through one factory (`init_net(net, init_type,
gpu_ids)`: move it to `gpu_ids[0]`, wrap it in DataParallel over `gpu_ids`, initialise its
weights) and its option parser turns `--gpu_ids 0,1` into the list and calls
`torch.cuda.set_device(opt.gpu_ids[0])`. Under torchrun each process drives one GPU and the
caller wraps the network it gets back in DDP; so, in a module a migrated script imports:

  DDP037  the factory's DataParallel runs only without a process group (the caller's DDP
          replaces it), after which the factory still initialises the weights, before the
          wrap, so DDP's broadcast from rank 0 makes every rank start alike;
  DDP038  the device list chosen for `set_device` becomes the process's own GPU under torchrun
          (else every rank would take the first GPU of the list).

Both change nothing for a caller that sets up no process group (a plain evaluation script).
Functions of the module planner (migrator.project.rewrite), given its plan and names.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from migrator import edits
from migrator.graph.bindings import dotted_name
from migrator.project.shapes import ModuleNames, source_of, walk
from migrator.tree import parameter_names


def factory_dataparallel(call: cst.Call, statement: Optional[cst.SimpleStatementLine],
                         function: Optional[cst.FunctionDef], plan: edits.Plan, names: ModuleNames) -> bool:
    """`net = torch.nn.DataParallel(net, gpu_ids)` in a function that is handed `net` and returns
    it: run only without a process group. False (nothing planned) for any other DataParallel."""
    if statement is None or function is None or len(statement.body) != 1 or not call.args:
        return False
    assign = statement.body[0]
    if not (isinstance(assign, cst.Assign) and assign.value is call and len(assign.targets) == 1):
        return False
    target = assign.targets[0].target
    first = call.args[0]
    if not (isinstance(target, cst.Name) and first.keyword is None and isinstance(first.value, cst.Name)
            and first.value.value == target.value):
        return False
    net = target.value
    handed = parameter_names(function)
    returned = any(isinstance(node, cst.Return) and isinstance(node.value, cst.Name) and node.value.value == net
                   for node in walk(function.body))
    if net not in handed or not returned or "is_initialized" in source_of(function):
        return False  # not a factory, or one that already asks about a process group (a second run)
    plan.guard(statement, f"not {names.dist}.is_initialized()")
    names.need(plan, dist=True)
    return True


def device_list(call: cst.Call, statement: Optional[cst.SimpleStatementLine], function: Optional[cst.FunctionDef],
                plan: edits.Plan) -> Optional[str]:
    """`torch.cuda.set_device(opt.gpu_ids[0])`: under torchrun the list becomes the process's own
    GPU first (LOCAL_RANK), read before the call. The list as spelled, or None (nothing planned)."""
    if statement is None or function is None or len(call.args) != 1 or call.args[0].keyword is not None:
        return None
    if "LOCAL_RANK" in source_of(function):
        return None  # the function knows torchrun's ranks already (or this ran before)
    chosen = call.args[0].value
    if not (isinstance(chosen, cst.Subscript) and len(chosen.slice) == 1):
        return None
    index = chosen.slice[0].slice
    listed = dotted_name(chosen.value)
    if not (isinstance(index, cst.Index) and source_of(index.value) == "0" and listed):
        return None  # `ids[0]` of a name or attribute only: something the new list can be assigned to
    remap = cst.parse_statement(
        'if "LOCAL_RANK" in os.environ:  # torchrun: each process drives its own GPU\n'
        f'    {listed} = [int(os.environ["LOCAL_RANK"])]\n')
    plan.insert_before(statement, [remap])
    plan.need_import("os")
    return listed
