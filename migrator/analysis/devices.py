"""Device strings, device variables and `.cuda()` calls.

The methods of a mixin of `_Analysis` (passes.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst

from migrator import names as N
from migrator.names import attribute_name
from migrator.tree import descendants
from migrator.analysis.facts import CudaCall, DeviceLiteral, EntryPoint, GpuIndex, HelperDevice, ModelFact
from migrator.analysis.helpers import Statement, _strings_in, code_of


def _moved_to(call: cst.Call, model: str, definition: cst.CSTNode) -> Optional[cst.Name]:
    """The device variable of `model.to(device)` (or of the move in the model's own definition,
    `model = Net().to(device)`), if `call` is such a move."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "to" or not call.args:
        return None
    if code_of(func.value) != model and not any(node is call for node in descendants(definition, cst.Call)):
        return None
    first = call.args[0]
    if first.keyword is not None and first.keyword.value != "device":
        return None
    return first.value if isinstance(first.value, cst.Name) else None


class DeviceAnalysis:
    """Devices: the script's device variables, CUDA strings and calls, the GPUs it picks."""

    # -- devices -----------------------------------------------------------------------
    def device_literal(self, node: cst.SimpleString) -> Optional[DeviceLiteral]:
        parent = self.parent(node)
        conditional = isinstance(parent, cst.IfExp) and parent.body is node and N.is_cpu_string(parent.orelse)
        holder = parent if conditional else node
        arg = self.parent(holder)
        scope = self.scope_of(node)
        if isinstance(arg, cst.Arg) and arg.keyword is None:
            call = self.parent(arg)
            if isinstance(call, cst.Call) and call.args and call.args[0] is arg:
                qnames = self.c.qnames(call.func)
                if qnames & N.TORCH_DEVICE:
                    indexed = len(call.args) > 1 and call.args[1].keyword is None
                    return DeviceLiteral(node, conditional, scope, call if indexed else None)  # type: ignore[arg-type]
                if N.attribute_name(call.func) == "to":
                    device = None if conditional else self.device_expr_at(call)
                    return DeviceLiteral(node, conditional, scope, device_expr=device)  # type: ignore[arg-type]
            return None
        if isinstance(arg, cst.Assign) and any("device" in code_of(t.target) for t in arg.targets):
            compared = any(code_of(t.target) in self.compared_with_cuda() for t in arg.targets)
            return DeviceLiteral(node, conditional, scope, compared=compared)  # type: ignore[arg-type]
        return None

    def compared_with_cuda(self) -> frozenset:
        """Names compared with a "cuda" string (`if device == "cuda":`): their value must stay "cuda".

        Rewriting such a device to `f"cuda:{local_rank}"` would turn the comparison false on every rank
        (cudnn.benchmark off, a DataParallel branch skipped, a pin_memory flag lost)."""
        cached = getattr(self, "_compared_with_cuda", None)
        if cached is not None:
            return cached
        found = set()
        for string in self.c.device_strings:
            holder = self.parent(string)
            if isinstance(holder, cst.ComparisonTarget):  # device == "cuda"
                comparison = self.parent(holder)
                if isinstance(comparison, cst.Comparison):
                    found.add(code_of(comparison.left))
            elif isinstance(holder, cst.Comparison) and holder.left is string:  # "cuda" == device
                found.update(code_of(target.comparator) for target in holder.comparisons)
        self._compared_with_cuda = frozenset(found)
        return self._compared_with_cuda

    def gpu_indexes(self) -> Tuple[GpuIndex, ...]:
        """Where the script picks a GPU by index: set_device calls and "cuda:<index>" strings."""
        found = []
        for call in self.calls(N.SET_DEVICE):
            if call.args and not N.is_name(call.args[0].value, "local_rank"):
                found.append(GpuIndex(call.args[0].value, self.scope_of(call), set_device=True))  # type: ignore[arg-type]
        for template in self.c.cuda_templates:
            whole = self._formatted_device(template)
            if whole is not None:
                found.append(GpuIndex(whole, self.scope_of(template), set_device=False))  # type: ignore[arg-type]
        return tuple(found)

    def helper_devices(self, models: Sequence[ModelFact], entry: Optional[EntryPoint]) -> Tuple[HelperDevice, ...]:
        """The devices a trained model is moved to that a function this file cannot see into picks:
        `device, device_ids = prepare_device(n_gpu)` ... `model = model.to(device)` in the entry scope.

        Such a helper often returns `torch.device("cuda:0")`: every rank would put its model on the
        first GPU while DDP is told `device_ids=[local_rank]`; or a CPU device on a GPU machine, where
        DDP refuses device_ids. Only a variable bound once in the entry scope, before the move, by a
        call that is not torch's. A function of this file is `seen`: DDP002 rewrites its device
        strings where they are."""
        if entry is None:
            return ()
        scope = entry.scope
        own = {fn.name.value for fn in self.c.functions}
        found: Dict[str, HelperDevice] = {}
        for model in models:
            if model.already_ddp or model.definition is None or model.scope is not scope:
                continue
            for call in self.c.calls:
                device = _moved_to(call, model.expr, model.definition)
                if device is None or self.scope_of(call) is not scope:
                    continue
                if device.value in found:
                    known = found[device.value]
                    found[device.value] = replace(known, models=known.models | {model.expr})
                    continue
                if device.value in self.c.params.get(scope, ()):
                    continue
                bindings = [s for target, s in self.c.assignments if target == device.value and self.scope_of(s) is scope]
                value = getattr(bindings[0].body[0], "value", None) if len(bindings) == 1 else None
                if not isinstance(value, cst.Call) or self.c.order.get(bindings[0], 0) > self.c.order.get(call, 0):
                    continue
                helper = value.func.value if isinstance(value.func, cst.Name) else attribute_name(value.func)
                qname = self.c.resolve(value.func) or ""
                if not helper or qname.split(".")[0] == "torch":
                    continue
                if any(string in self.c.device_strings for string in _strings_in(value)):
                    continue
                found[device.value] = HelperDevice(
                    bindings[0], device.value, code_of(value.func), frozenset({model.expr}), seen=helper in own,
                )
        return tuple(found.values())

    def visible_devices(self) -> Tuple[Tuple[cst.SimpleStatementLine, str], ...]:
        """`os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu_id`: the script picks the GPUs itself."""
        found = []
        for target, statement in self.c.assignments:
            small = statement.body[0]
            if len(statement.body) != 1 or not isinstance(small, cst.Assign) or len(small.targets) != 1:
                continue
            subscript = small.targets[0].target
            if not isinstance(subscript, cst.Subscript) or len(subscript.slice) != 1:
                continue
            key = getattr(subscript.slice[0].slice, "value", None)
            environ = subscript.value
            if (
                isinstance(key, cst.SimpleString)
                and key.evaluated_value == "CUDA_VISIBLE_DEVICES"
                and isinstance(environ, cst.Attribute)
                and environ.attr.value == "environ"
            ):
                found.append((statement, code_of(environ)))
        return tuple(found)

    def _formatted_device(self, template: cst.CSTNode) -> Optional[cst.BaseExpression]:
        """The expression that formats the index into `template`, or None for a template that is
        only stored (a format string kept for later use is left alone)."""
        if isinstance(template, cst.FormattedString):
            return template
        parent = self.parent(template)
        if isinstance(parent, cst.Attribute) and parent.attr.value == "format":
            call = self.parent(parent)
            if isinstance(call, cst.Call) and call.func is parent and len(call.args) == 1:
                return call
        if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, cst.Modulo) and parent.left is template:
            return parent
        return None

    def is_torch_device_call(self, value: Optional[cst.CSTNode]) -> bool:
        return isinstance(value, cst.Call) and bool(self.c.qnames(value.func) & N.TORCH_DEVICE)

    def device_assignments(self) -> List[Tuple[str, cst.SimpleStatementLine]]:
        """Assignments of the script's device variables: `device = torch.device(...)` or a "cuda" string."""
        found = []
        for target, statement in self.c.assignments:
            small = statement.body[0]
            value = getattr(small, "value", None)
            if value is None:
                continue
            if self.is_torch_device_call(value) or (
                "device" in target and any(s in self.c.device_strings for s in _strings_in(value))
            ):
                found.append((target, statement))
        return found

    def entry_device_var(self, entry: Optional[EntryPoint]) -> Optional[str]:
        if entry is None:
            return None
        for target, statement in self.device_assignments():
            scope = self.scope_of(statement)
            if "." not in target and scope is not None and (scope is entry.scope or scope is self.module):
                return target
        return None

    def module_level_device_statement(self, entry: Optional[EntryPoint]) -> Optional[Statement]:
        """A module-level device assignment in a script whose setup runs in a function.

        The device then needs `local_rank` at import time: reading an environment variable
        there is harmless, unlike setting up the process group.
        """
        if entry is None or entry.kind == "module":
            return None
        for target, statement in self.device_assignments():
            if self.parent(statement) is self.module and any(
                literal in self.c.device_strings for literal in _strings_in(statement)
            ):
                if self.scope_of(entry.anchor) is self.module and self.c.order.get(statement, 0) >= self.c.order.get(entry.anchor, 0):
                    return None  # after the setup, which defines local_rank (module-level work moved into the guard)
                return statement
        return None

    def device_expr_at(self, node: cst.CSTNode, typed: bool = False) -> Optional[str]:
        """A device variable that code at `node` can use (`typed`: a torch.device, which has `.type`)."""
        scope = self.scope_of(node)
        if scope is None:
            return None
        for target, statement in self.device_assignments():
            if typed and not self.is_torch_device_call(getattr(statement.body[0], "value", None)):
                continue
            if "." in target:
                # self.device: usable in the methods of the class that assigns it.
                cls = self.enclosing_class(statement)
                if target.startswith("self.") and cls is not None and cls is self.enclosing_class(node):
                    return target
                continue
            owner = self.scope_of(statement)
            if owner is scope or (owner is self.module and target not in self.c.bound.get(scope, ())):
                return target
        if not typed and "device" in self.c.params.get(scope, ()):
            return "device"
        return None

    def cuda_call(self, call: cst.Call) -> CudaCall:
        guarded = any(
            (isinstance(anc, cst.If) and N.mentions_cuda(anc.test) and not self.in_orelse(call, anc))
            or (isinstance(anc, cst.IfExp) and N.mentions_cuda(anc.test))
            for anc in self.ancestors(call)
        )
        pinned = bool(call.args) and call.args[0].keyword is None
        return CudaCall(call, self.scope_of(call), guarded, self.device_expr_at(call), pinned)  # type: ignore[arg-type]

    def with_entry_device(self, cuda_call: CudaCall, entry: EntryPoint) -> CudaCall:
        """Once the setup defines `device`, code in the entry scope can use it."""
        visible = cuda_call.scope is entry.scope or entry.scope is self.module
        if cuda_call.device_expr is None and visible:
            return CudaCall(cuda_call.call, cuda_call.scope, cuda_call.guarded, "device", cuda_call.pinned)
        return cuda_call

    def in_orelse(self, node: cst.CSTNode, if_node: cst.If) -> bool:
        return if_node.orelse is not None and any(a is if_node.orelse for a in self.ancestors(node))
