"""DDP032-DDP034 in a module a migrated script imports: checkpoints written by rank 0 (and read
back after it), the model's keys and its own API through `.module` when it is wrapped in DDP."""
from __future__ import annotations

import builtins
from typing import Iterator, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import dotted_name
from migrator.rule import Example, Rule
from migrator.rules.modules.base import ModulePlanner, first_statement, short, source_of
from migrator.tree import descendants, parameter_names

MODULE_RANK_ZERO_SAVE = Rule(
    code="DDP032",
    name="module-rank-zero-checkpoint",
    summary="checkpoints written in a module the training script imports are written by rank 0 only",
    what="""
In project mode, a `torch.save` of a checkpoint in a module that a migrated training script
imports runs on rank 0 only: a function that only writes (`save_checkpoint`, an `on_epoch_end`
hook: it returns nothing, keeps no state the ranks share, and runs nothing every rank must run,
neither the model's forward nor a method of its class, a load, a training step or a collective)
returns early on the other ranks, so what it does after the save (copying the best model, writing
a score file) is rank 0's too; any other `torch.save` is put under `if not dist.is_initialized() or dist.get_rank() == 0:`.

A save is a checkpoint by what it writes, whatever it is called: a value that carries a
`state_dict()`, the script's model, or a state the script hands over (`save_checkpoint({"state_dict":
model.state_dict()}, is_best)` fills the helper's `state`), itself or through a local the function
builds (`state = {...}`, `save_dict["model"] = ...`). Project mode follows the model and such
states from the script's calls into the modules.""",
    why="""
Every rank reaching the save writes the same file at the same time: wasted I/O at best, a
truncated or interleaved checkpoint at worst, and a copy of a file another rank is still writing.""",
    fix="The rank check, conditional on a process group: a caller without one still saves.",
    fix_safety="""
Safe for checkpoints. A `torch.save` of anything else (a cache of processed data that every rank
reads back, or a parameter no caller is seen to fill with a model's state) is reported (DDP140),
not guarded; a save under a rank check already is left alone.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="saver-class",
            before='''import shutil

import torch


class Saver:
    def save_checkpoint(self, state, is_best, filename="checkpoint.pth.tar"):
        torch.save(state, filename)
        if is_best:
            shutil.copyfile(filename, "model_best.pth.tar")
''',
            after='''import shutil

import torch
import torch.distributed as dist


class Saver:
    def save_checkpoint(self, state, is_best, filename="checkpoint.pth.tar"):
        if dist.is_initialized() and dist.get_rank() != 0:
            return  # one copy of each checkpoint: rank 0 writes it
        torch.save(state, filename)
        if is_best:
            shutil.copyfile(filename, "model_best.pth.tar")
''',
            handed=(("state", "Saver.save_checkpoint", "state"),),
        ),
        Example(
            id="state-built-here",
            before='''import torch


def save_model(model, epoch, path):
    state = {"epoch": epoch}
    state["model"] = model.state_dict()
    torch.save(state, path)
''',
            after='''import torch
import torch.distributed as dist


def save_model(model, epoch, path):
    state = {"epoch": epoch}
    state["model"] = model.state_dict()
    if not dist.is_initialized() or dist.get_rank() == 0:
        torch.save(state, path)
''',
        ),
        Example(
            id="a-hook-that-only-writes",
            before='''import shutil

import torch


def on_epoch_end(epoch, state, path):
    torch.save(state, path)
    shutil.copyfile(path, "last.pt")
''',
            after='''import shutil

import torch
import torch.distributed as dist


def on_epoch_end(epoch, state, path):
    if dist.is_initialized() and dist.get_rank() != 0:
        return  # one copy of each checkpoint: rank 0 writes it
    torch.save(state, path)
    shutil.copyfile(path, "last.pt")
''',
            handed=(("state", "on_epoch_end", "state"),),
        ),
        Example(
            id="evaluates-before-it-saves",
            before='''import shutil

import torch


class Trainer:
    def save_best(self, loader, state, path):
        self.evaluate(loader)
        torch.save(state, path)
        shutil.copyfile(path, "best.pt")
''',
            fires=False,
            diagnostics=("DDP140",),
            handed=(("state", "Trainer.save_best", "state"),),
        ),
        Example(
            id="data-cache",
            before='''import os

import torch


def load_features(dataset, path):
    if not os.path.exists(path):
        features = torch.stack([sample for sample, _ in dataset])
        torch.save(features, path)
    return torch.load(path)
''',
            fires=False,
            diagnostics=("DDP140",),
        ),
        Example(
            id="already-on-rank-zero",
            before='''import torch


def save_on_master(state, path, rank):
    if rank == 0:
        torch.save(state, path)
''',
            fires=False,
        ),
    ),
)

MODULE_CHECKPOINT_KEYS = Rule(
    code="DDP033",
    name="module-checkpoint-keys",
    summary="a model saved or loaded in a module the training script imports keeps its original keys",
    what="""
In project mode, when the training script's model was not wrapped in DataParallel for good (its
checkpoints had the bare module's keys), `model.state_dict()` and `model.load_state_dict(...)` on
the script's model in an imported module go through `.module` when the model is wrapped in DDP.
The model is followed from the script's calls into the module (`Trainer(model, ...)`,
`save_checkpoint(model, epoch)`): through parameters, `self.x = model`, a local `net = self.x`, the
functions it is passed on to and base classes, whatever it is called there; an object that is only
named like a model (`self.model_dir`) is left alone.

The script's model pickled whole (`state = {"epoch": epoch, "model": model}; torch.save(state,
path)`) is saved as the bare module, whatever DataParallel the script had.""",
    why="""
DDP's own `state_dict()` prefixes every key with `module.`: checkpoints written after the
migration would no longer load into the unwrapped model (an evaluation script, a resumed run).
A pickled DDP wrapper is worse: it cannot be loaded without a process group, and a run resumed
from it wraps it in DDP a second time.""",
    fix="`(model.module if isinstance(model, DDP) else model).state_dict()`; `(model.module if isinstance(model, DDP) else model)` where the model is saved whole.",
    fix_safety="Safe: a model that is not wrapped is used as before. A module that spells `.module.` itself is left alone.",
    requires=('DDP003',),
    fixable=True,
    examples=(
        Example(
            id="trainer-saves-model",
            before='''import torch


class BaseTrainer:
    def _save_checkpoint(self, epoch):
        torch.save({"epoch": epoch, "state_dict": self.model.state_dict()}, f"epoch{epoch}.pth")
''',
            after='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class BaseTrainer:
    def _save_checkpoint(self, epoch):
        if dist.is_initialized() and dist.get_rank() != 0:
            return  # one copy of each checkpoint: rank 0 writes it
        torch.save({"epoch": epoch, "state_dict": (self.model.module if isinstance(self.model, DDP) else self.model).state_dict()}, f"epoch{epoch}.pth")
''',
            handed=(("model", "BaseTrainer", "self.model"),),
        ),
        Example(
            id="model-pickled-in-a-dict",
            before='''import torch


def save_checkpoint(epoch, model, optimizer):
    state = {"epoch": epoch, "model": model, "optimizer": optimizer}
    torch.save(state, "checkpoint.pth.tar")
''',
            after='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(epoch, model, optimizer):
    if dist.is_initialized() and dist.get_rank() != 0:
        return  # one copy of each checkpoint: rank 0 writes it
    state = {"epoch": epoch, "model": (model.module if isinstance(model, DDP) else model), "optimizer": optimizer}
    torch.save(state, "checkpoint.pth.tar")
''',
            handed=(("model", "save_checkpoint", "model"),),
        ),
        Example(
            id="optimizer-state",
            before='''import torch


def save(optimizer, path):
    torch.save(optimizer.state_dict(), path)
''',
            after='''import torch
import torch.distributed as dist


def save(optimizer, path):
    if dist.is_initialized() and dist.get_rank() != 0:
        return  # one copy of each checkpoint: rank 0 writes it
    torch.save(optimizer.state_dict(), path)
''',
            fires=False,
        ),
    ),
)

MODULE_MODEL_API = Rule(
    code="DDP034",
    name="module-model-api",
    summary="a module the training script imports reaches the model's own methods and submodules through `.module`",
    what="""
In project mode, a module that a migrated training script imports uses what the user's model
class defines on the model it is handed (`self.model.encoder`, `model.configure_optimizers(cfg)`,
`self.model.get_1x_lr_params()`): it goes through `.module` when the model is wrapped in DDP. The
model is the one the script hands over, followed as for DDP033, whatever the module calls it.""",
    why="""
DistributedDataParallel forwards the forward pass and nn.Module's own API (parameters,
state_dict, train/eval, to), not the attributes of the class it wraps: `ddp.encoder` raises
AttributeError the first time the trainer runs on the migrated script.""",
    fix="`(model.module if isinstance(model, DDP) else model).encoder`.",
    fix_safety="""
Safe: a model that is not wrapped is used as before. Left alone in a module that spells
`.module.` itself (written for DataParallel, which has the same limits) and for a script whose
model was wrapped in DataParallel for good.""",
    requires=('DDP003',),
    fixable=True,
    examples=(
        Example(
            id="trainer-asks-the-model",
            before='''import torch


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.optimizer = self.model.configure_optimizers(config)
''',
            after='''import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, config):
        self.model = model
        self.optimizer = (self.model.module if isinstance(self.model, DDP) else self.model).configure_optimizers(config)
''',
            handed=(("model", "Trainer", "self.model"),),
        ),
        Example(
            id="named-like-the-model",
            before='''import torch


class Trainer:
    def __init__(self, model, model_dir):
        self.model = model
        self.model_dir = model_dir

    def checkpoint_path(self, epoch):
        return self.model_dir.joinpath(f"epoch{epoch}.pt")
''',
            handed=(("model", "Trainer", "self.model"),),
            fires=False,
        ),
        Example(
            id="module-api-is-forwarded",
            before='''import torch


class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
''',
            fires=False,
        ),
    ),
)

# What a DDP wrapper answers itself: nn.Module's API (and DDP's). Anything else a module asks of
# the model it was handed (`model.configure_optimizers`, `model.encoder`) is the user's class's.
MODULE_API = frozenset({
    "module", "no_sync", "training", "train", "eval", "forward", "parameters", "named_parameters", "buffers",
    "named_buffers", "children", "named_children", "modules", "named_modules", "state_dict", "load_state_dict",
    "zero_grad", "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "apply", "requires_grad_",
    "register_buffer", "register_parameter", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_backward_hook", "add_module", "get_submodule", "get_parameter",
    "share_memory", "extra_repr", "device_ids", "output_device",
})

# What every rank must do, so a function that does it is never skipped by the other ranks: train,
# load, or meet the others in a collective.
_EVERY_RANK = frozenset({"backward", "step", "zero_grad", "load", "load_state_dict", "train", "eval"}) | frozenset(
    name.rsplit(".", 1)[-1] for name in N.COLLECTIVES)
# What a function that only writes may ask of the model: its state, on the device it is copied to.
_STATE_OF_MODEL = frozenset({"state_dict", "cpu", "cuda", "to"})

# What a module's `.cpu()`, `.to(device)`, `.float()` return: the module itself.
_RETURNS_ITSELF = frozenset({"cpu", "cuda", "to", "float", "half", "double", "bfloat16"})


def _bindings(function: cst.FunctionDef, name: str) -> Iterator[Tuple[cst.BaseExpression, bool]]:
    """What `function` puts in the local `name`: (v, False) for `name = v` and `name.update(v)`,
    (v, True) for an item of it, `name[k] = v`."""
    for node in descendants(function.body, cst.CSTNode):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                bound = target.target
                if isinstance(bound, cst.Name) and bound.value == name:
                    yield node.value, False
                elif isinstance(bound, cst.Subscript) and isinstance(bound.value, cst.Name) and bound.value.value == name:
                    yield node.value, True
        elif (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "update"
              and isinstance(node.func.value, cst.Name) and node.func.value.value == name):
            yield from ((arg.value, False) for arg in node.args)


def _items(value: cst.BaseExpression) -> List[cst.BaseExpression]:
    """The values of a dict, list or tuple display; [value] for anything else."""
    if isinstance(value, cst.Dict):
        return [e.value for e in value.elements if isinstance(e, cst.DictElement)]
    if isinstance(value, (cst.List, cst.Tuple)):
        return [e.value for e in value.elements]
    return [value]


def _bound_in(function: cst.FunctionDef, name: str) -> bool:
    """A parameter of `function`, or a name it assigns."""
    return name in parameter_names(function) or any(True for _ in _bindings(function, name))


class Checkpoints(ModulePlanner):
    """DDP032, DDP033, DDP034: what the module saves and asks of the script's model."""

    # DDP032
    def _save(self, call: cst.Call) -> None:
        if dotted_name(call.func) not in self.names.torch_saves or not call.args:
            return
        statement = self._statement(call)
        function = self._enclosing(call, cst.FunctionDef)
        if function is None or statement is None or self._rank_checked(call, function):
            return
        saved = call.args[0].value
        if not self._saves_state(saved, call, function):
            what = (f"`{saved.value}`, a parameter of `{function.name.value}()` that no call seen fills with a model's state"
                    if isinstance(saved, cst.Name) and saved.value in parameter_names(function) else
                    f"`{short(saved)}`, which carries no model state seen here (a state_dict(), the script's model)")
            self._report(call, f"torch.save of {what}, runs on every rank of the training script that calls this "
                               "module: if it caches data, every rank may need it; if it writes a checkpoint, write it "
                               "on rank 0 only")
            return
        dist = self.names.dist
        reused = path_used_after(call, statement, function)
        only_writes = self._only_writes(function)
        if reused is not None and not only_writes:
            self._report(call, f"a checkpoint every rank writes, and `{function.name.value}()` goes on to use `{reused}` "
                               "after saving it: a rank check around the save alone would leave the other ranks reading "
                               "a file rank 0 may not have written yet; guard the save and what follows it by hand")
            return
        if only_writes:
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

    def _saves_state(self, value: cst.BaseExpression, at: cst.CSTNode, function: cst.FunctionDef,
                     seen: Tuple[str, ...] = ()) -> bool:
        """Is what `torch.save` writes a checkpoint: a module's state, not data every rank may read back?

        It is when the value carries a `state_dict()`, the script's model or a state the script
        hands over (`save_checkpoint({"state_dict": model.state_dict()}, ...)`: both followed from
        its calls, migrator.project.values), itself or through a local of the function it is built in
        (`state = {...}`, `save_dict["model"] = ...`). Anything else (a parameter no caller is known
        to fill, a tensor, a dataset) is reported, not guarded."""
        for node in descendants(value, cst.CSTNode):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "state_dict":
                return True
            spelled = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
            if spelled is None:
                continue
            if self._handed_over(at, spelled) or self._holds(self.role.states, at, spelled):
                return True
            if isinstance(node, cst.Name) and spelled not in seen and any(
                    self._saves_state(assigned, at, function, (*seen, spelled)) for assigned, _ in _bindings(function, spelled)):
                return True
        return False

    def _only_writes(self, function: cst.FunctionDef) -> bool:
        """Does `function` only write what rank 0 saves, so that the other ranks may return at once?

        It returns no value, keeps no state the ranks share (`self.best = ...`, a global), defines
        and yields nothing, and runs nothing every rank must run (`_every_rank`), whatever it is
        called. Asked once per function (a function may save several things)."""
        if function not in self.writers:
            self.writers[function] = self._writes_only(function)
        return self.writers[function]

    def _writes_only(self, function: cst.FunctionDef) -> bool:
        for node in descendants(function.body, cst.CSTNode):
            if isinstance(node, cst.Return) and node.value is not None:
                return False
            if isinstance(node, (cst.Global, cst.Nonlocal, cst.Yield, cst.FunctionDef, cst.Lambda)):
                return False
            if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and not isinstance(node.target, cst.Name):
                return False  # state the other ranks keep too (`self.best = ...`): they must not skip it
            if isinstance(node, cst.Assign) and any(not isinstance(t.target, (cst.Name, cst.Tuple)) for t in node.targets):
                return False
            if isinstance(node, cst.Attribute) and node.attr.value in _EVERY_RANK:
                return False
            if isinstance(node, cst.Call) and self._every_rank(node, function):
                return False
        return True

    def _every_rank(self, call: cst.Call, function: cst.FunctionDef) -> bool:
        """Might `call` run what every rank must: the model's forward (but for its state), a
        method of the class or a callable it keeps (`self.evaluate()`, `self.net(x)`), a callable
        bound in the function, a collective, or a function it hands the model to (which may run it)?"""
        func = call.func
        spelled = dotted_name(func)
        if isinstance(func, cst.Name):
            if func.value in _EVERY_RANK or _bound_in(function, func.value):
                return True
            if hasattr(builtins, func.value):
                return False  # `type(self.model)`, `str(epoch)`: never the model's forward
        elif spelled is not None and spelled.startswith("self.") and spelled.count(".") == 1:
            return True
        if spelled is not None and self._handed_over(call, spelled):
            return True
        if isinstance(func, cst.Attribute) and func.attr.value not in _STATE_OF_MODEL:
            receiver = dotted_name(func.value)
            if receiver is not None and self._handed_over(call, receiver):
                return True
        if spelled in self.names.torch_saves:
            return False
        return any(self._handed_over(call, name) for name in (dotted_name(arg.value) for arg in call.args) if name)

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

    def _pickled(self, call: cst.Call) -> None:
        """`torch.save({"epoch": epoch, "model": model}, path)`, itself or through the local it is
        built in (`state = {...}`): the script's model pickled whole. A pickled DDP wrapper cannot be
        loaded without a process group, and a run resumed from it would wrap it twice: the bare
        module is saved, as the script's own saves are, whatever the DataParallel the script had."""
        if dotted_name(call.func) not in self.names.torch_saves or not call.args:
            return
        function = self._enclosing(call, cst.FunctionDef)
        for node in self._saved_whole(call.args[0].value, function, ()):
            receiver = dotted_name(node)
            if node in self.pickled or receiver is None or not self._handed_over(call, receiver):
                continue
            self.pickled.add(node)
            bare = f"({receiver}.module if isinstance({receiver}, {self.names.ddp}) else {receiver})"
            self.plan.replace(node, lambda updated, bare=bare: cst.parse_expression(bare))
            self.names.need(self.plan, ddp=True)
            self._change(MODULE_CHECKPOINT_KEYS.code, node, f"`{receiver}` saved as the bare module, not its DDP wrapper "
                                                            "(which cannot be loaded without a process group)")

    def _saved_whole(self, value: cst.BaseExpression, function, seen: Tuple[str, ...]) -> Iterator[cst.BaseExpression]:
        """What a save writes as values of their own: the value, the items of a dict, list or tuple
        it is, and, for a local the function builds as one (`state = {...}`, `state["model"] = m`),
        what it puts in it. An alias (`net = self.model`) is not followed: unwrapping it there
        would change what the rest of the function runs."""
        for item in _items(value):
            if isinstance(item, (cst.Name, cst.Attribute)):
                yield item
            if isinstance(item, cst.Name) and function is not None and item.value not in seen:
                for put, item_of_it in _bindings(function, item.value):
                    if item_of_it or isinstance(put, (cst.Dict, cst.List, cst.Tuple)):
                        yield from self._saved_whole(put, function, (*seen, item.value))

    def _chosen_by_name(self, call: cst.Call, receiver: cst.BaseExpression) -> bool:
        """`net = getattr(self, "net" + name)` in the function: one of the networks a subclass
        keeps (`self.netG`, `self.netD`), found by its name at run time."""
        function = self._enclosing(call, cst.FunctionDef)
        if function is None or not isinstance(receiver, cst.Name):
            return False
        for node in descendants(function.body, cst.Assign):
            if (len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
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


def path_used_after(call: cst.Call, statement: cst.SimpleStatementLine, function: cst.FunctionDef) -> Optional[str]:
    """The saved file's variable, when the function uses it again after the save (to copy it)."""
    if len(call.args) < 2 or not isinstance(call.args[1].value, cst.Name):
        return None
    path = call.args[1].value.value
    seen = False
    for node in descendants(function.body, cst.CSTNode):
        if node is statement:
            seen = True
            continue
        if seen and isinstance(node, cst.Name) and node.value == path and not _inside(node, statement):
            return path
    return None


def _inside(node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return any(n is node for n in descendants(container, type(node)))
