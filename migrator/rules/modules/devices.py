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
"""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from migrator import edits
from migrator.graph.bindings import dotted_name
from migrator.rule import Example, Rule
from migrator.rules.modules.base import ModuleNames, ModulePlanner, source_of
from migrator.tree import descendants, parameter_names

DATAPARALLEL_IN_MODULE = "DataParallel in a module a training script imports"  # planning blocks on it

MODULE_NETWORK_FACTORY = Rule(
    code="DDP037",
    name="module-network-factory",
    summary="a network factory's DataParallel, in a module the training script imports, runs only without a process group",
    what="""
In project mode, a function of a module that a migrated training script imports is handed a
network, wraps it in DataParallel (`net = torch.nn.DataParallel(net, gpu_ids)`) and returns it:
the factory every network of an image-to-image framework goes through (`init_net`). The
DataParallel runs only when no process group is set up; the caller, migrated with it, wraps the
network it gets back in DDP.""",
    why="""
DDP around a DataParallel (or a DataParallel around DDP) breaks: under torchrun each process
drives one GPU, and DDP replaces the DataParallel. The factory goes on to initialise the weights,
which it did after the wrap; DDP's wrap comes after the factory returns, so rank 0's initial
weights are what every rank starts from.""",
    fix="`if not dist.is_initialized():` around the DataParallel assignment.",
    fix_safety="""
Safe: without a process group (a plain evaluation script that imports the factory) the network is
wrapped as before. Any other DataParallel in such a module (one that is not handed in and
returned) is reported (DDP140) and blocks the script's migration.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="init-net",
            before='''import torch


def init_net(net, gpu_ids=()):
    if len(gpu_ids) > 0:
        net.to(gpu_ids[0])
        net = torch.nn.DataParallel(net, gpu_ids)
    return net
''',
            after='''import torch
import torch.distributed as dist


def init_net(net, gpu_ids=()):
    if len(gpu_ids) > 0:
        net.to(gpu_ids[0])
        if not dist.is_initialized():
            net = torch.nn.DataParallel(net, gpu_ids)
    return net
''',
        ),
        Example(
            id="trainer-keeps-its-dataparallel",
            before='''import torch


class Trainer:
    def __init__(self, model):
        self.model = torch.nn.DataParallel(model)
''',
            fires=False,
            diagnostics=('DDP140',),
        ),
    ),
)

MODULE_DEVICE_LIST = Rule(
    code="DDP038",
    name="module-device-list",
    summary="the GPU list an option parser sets the device from is the process's own GPU under torchrun",
    what="""
In project mode, a module that a migrated training script imports sets the device from the first
GPU of a list (`torch.cuda.set_device(opt.gpu_ids[0])` after `--gpu_ids 0,1` was parsed into
`opt.gpu_ids`). Under torchrun the list becomes the process's own GPU (`[LOCAL_RANK]`) before the
call, so every use of it later (the models' device, the network factory's `gpu_ids`) is that GPU.""",
    why="""
The script's setup gives each process its GPU; the parser would set every process back to the
first GPU of the list, and the models would all be built there.""",
    fix='`if "LOCAL_RANK" in os.environ: opt.gpu_ids = [int(os.environ["LOCAL_RANK"])]` before the call.',
    fix_safety="""
Safe: as a plain process (no LOCAL_RANK) the list stays as parsed, and under torchrun a CPU run
(an empty list) never reaches the call. `--gpu_ids 2,3` under torchrun becomes GPUs 0 and 1 of
what the process sees: choose the GPUs with CUDA_VISIBLE_DEVICES.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="gpu-ids-option",
            before='''import torch


def parse(parser):
    opt = parser.parse_args()
    opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",") if int(i) >= 0]
    if len(opt.gpu_ids) > 0:
        torch.cuda.set_device(opt.gpu_ids[0])
    return opt
''',
            after='''import torch
import os


def parse(parser):
    opt = parser.parse_args()
    opt.gpu_ids = [int(i) for i in opt.gpu_ids.split(",") if int(i) >= 0]
    if len(opt.gpu_ids) > 0:
        if "LOCAL_RANK" in os.environ:  # torchrun: each process drives its own GPU
            opt.gpu_ids = [int(os.environ["LOCAL_RANK"])]
        torch.cuda.set_device(opt.gpu_ids[0])
    return opt
''',
        ),
        Example(
            id="device-from-an-integer",
            before='''import torch


def setup(args):
    torch.cuda.set_device(args.gpu)
''',
            fires=False,
        ),
    ),
)


class Devices(ModulePlanner):
    """DDP037, DDP038, and the DataParallel no rule takes on (reported: it blocks the script)."""

    def _wrapping(self, calls: List[cst.Call]) -> List[cst.Call]:
        """The DataParallel calls in what the script reaches from what it imports."""
        reached = self._reached_from(self.role.used) if self.role.used is not None else None
        return [call for call in calls
                if (reached is None or self._top_level_owner(call) in reached)
                and (dotted_name(call.func) or "").split(".")[-1] == "DataParallel"]

    def _reached_from(self, names: Tuple[str, ...]) -> Set[Optional[cst.CSTNode]]:
        """The module-level defs and classes that `names` lead to through the module-level defs
        their bodies read (the binding index), and None (module-level code runs at import)."""
        top = {name: found[0].node for name, found in self.c.bindings[self.module].items()
               if found[0].kind in ("function", "class")}
        reads = {}  # def -> the module-level defs it reads
        for node in top.values():
            for binding in self.c.bindings[self.module][node.name.value]:
                for reference in binding.references:
                    reads.setdefault(self._top_level_owner(reference), set()).add(node)
        reached: Set[Optional[cst.CSTNode]] = {None}
        pending = [top[name] for name in names if name in top]
        while pending:
            node = pending.pop()
            if node not in reached:
                reached.add(node)
                pending += [read for read in reads.get(node, ()) if read not in reached]
        return reached

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
    returned = any(isinstance(node.value, cst.Name) and node.value.value == net
                   for node in descendants(function.body, cst.Return))
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
