"""DDP032-DDP034 in a module a migrated script imports: checkpoints written by rank 0 (and read
back after it), the model's keys and its own API through `.module` when it is wrapped in DDP."""
from __future__ import annotations

import builtins
from typing import Iterator, List, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import dotted_name
from migrator.project.rules import MODULE_CHECKPOINT_KEYS, MODULE_MODEL_API, MODULE_RANK_ZERO_SAVE
from migrator.project.shapes import (
    MODULE_API, first_statement, path_used_after, short, source_of, walk,
)
from migrator.project.planner import Planner
from migrator.tree import parameter_names

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
    for node in walk(function.body):
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


class Checkpoints(Planner):
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
        its calls, migrator.graph.values), itself or through a local of the function it is built in
        (`state = {...}`, `save_dict["model"] = ...`). Anything else (a parameter no caller is known
        to fill, a tensor, a dataset) is reported, not guarded."""
        for node in walk(value):
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
        for node in walk(function.body):
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

