"""DDP032-DDP034 in a module a migrated script imports: checkpoints written by rank 0 (and read
back after it), the model's keys and its own API through `.module` when it is wrapped in DDP."""
from __future__ import annotations

import libcst as cst

from migrator.bindings import dotted_name
from migrator.project.rules import MODULE_CHECKPOINT_KEYS, MODULE_MODEL_API, MODULE_RANK_ZERO_SAVE
from migrator.project.shapes import (
    MODULE_API, first_statement, looks_like_checkpoint, path_used_after, save_function, source_of, walk,
)
from migrator.project.planner import Planner

# What a module's `.cpu()`, `.to(device)`, `.float()` return: the module itself.
_RETURNS_ITSELF = frozenset({"cpu", "cuda", "to", "float", "half", "double", "bfloat16"})


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

