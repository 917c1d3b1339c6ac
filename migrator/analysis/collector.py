"""The single traversal that collects raw sites (analysis.passes.analyze() runs it, then _Analysis)."""
from __future__ import annotations

from typing import Dict, List, Set, Tuple, Union

import libcst as cst

from migrator import names as N
from migrator.graph.bindings import NameIndex
from migrator.analysis.helpers import code_of
from migrator.tree import descendants


# --------------------------------------------------------------------------- analysis


class _Collector(NameIndex):
    """The single traversal: bindings (from NameIndex) plus the raw sites the facts are made of."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(module)
        self.calls: List[cst.Call] = []
        self.calls_by_qname: Dict[str, List[cst.Call]] = {}
        self.optimizer_calls: List[Tuple[cst.Call, str]] = []
        self.manual_updates: List[cst.Call] = []  # `model.parameters()` of a hand-written SGD loop
        self._statement_of_call: Dict[cst.Call, List[cst.BaseAssignTargetExpression]] = {}  # value call -> targets
        self.optimizer_helpers: List[cst.Call] = []  # `get_optimizer(cfg, model)`: built by the project's code
        # `train(config, model, ...)` from a project module that builds the optimizer: call -> models passed
        self.trained_arguments: Dict[cst.Call, List[cst.BaseExpression]] = {}
        # ... and the loaders it trains on, where its loops say so: call -> their code
        self.trained_loaders: Dict[cst.Call, List[cst.BaseExpression]] = {}  # the loader arguments it trains on
        # ... and those that move the model to a device themselves (`self.model = model.to(device)`)
        self.trained_moves: Set[cst.Call] = set()
        self.cuda_calls: List[cst.Call] = []
        self.device_strings: List[cst.SimpleString] = []
        self.cuda_templates: List[cst.CSTNode] = []  # "cuda:{}".format(i), "cuda:%d" % i, f"cuda:{i}"
        self.main_guards: List[cst.If] = []
        self.assignments: List[Tuple[str, cst.SimpleStatementLine]] = []
        self.assign_nodes: List[cst.Assign] = []  # every `a = b` (any statement), in source order
        self.expr_calls: List[Tuple[cst.BaseExpression, str, cst.SimpleStatementLine]] = []  # (receiver, method, statement)
        self.loops: List[Union[cst.For, cst.While]] = []
        self.functions: List[cst.FunctionDef] = []
        self.attributes: List[cst.Attribute] = []
        self.classes: List[cst.ClassDef] = []
        self.log_statements: List[cst.BaseStatement] = []  # prints and logs, and `with open(log, "a")` blocks
        self.launch_strings: List[cst.BaseExpression] = []
        self.rank_checks: List[cst.If] = []
        self.legacy_launch_imports: List[cst.CSTNode] = []
        self.handlers: List[cst.ExceptHandler] = []

    def qnames(self, node: cst.CSTNode) -> Set[str]:
        qualified = self.resolve(node)
        return {qualified} if qualified else set()

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def resolve_calls(self) -> None:
        """After the traversal, when every import is known (scripts import late, too)."""
        self.resolve_references()
        self.call_order: Dict[cst.Call, int] = {node: index for index, node in enumerate(self.calls)}
        for node in self.calls:
            qualified = self.resolve(node.func)
            if qualified:
                self.calls_by_qname.setdefault(qualified, []).append(node)
                if N.is_optimizer(qualified):
                    self.optimizer_calls.append((node, qualified))
            if not (qualified or "").startswith("torch.") and (
                N.is_optimizer_helper(node.func) or self._builds_optimizer_from_parameters(node)
            ):
                self.optimizer_helpers.append(node)
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and self.resolve(func.value) != "torch":
                self.cuda_calls.append(node)
        self.manual_updates = [call for call in map(N.manual_update_parameters, self.loops) if call is not None]

    def _builds_optimizer_from_parameters(self, call: cst.Call) -> bool:
        """`optimizer = optimizer_cls(model.parameters(), **params)`, `args.optimizer_class([...])`: an
        optimizer class chosen at run time, recognised by what it is given and what it is called."""
        statement = self._statement_of_call.get(call)
        if statement is None or not call.args or N.is_optimizer_helper(call.func):
            return False
        if not any("optim" in code_of(target).lower() for target in statement):
            return False
        # pytorch-template: `trainable = filter(lambda p: p.requires_grad, model.parameters())`, then
        # `optimizer = config.init_obj('optimizer', torch.optim, trainable)`.
        return any(_holds_parameters(self.parameters_value(arg.value, call)) for arg in call.args)

    def assigned_value(self, value: cst.BaseExpression, user: cst.CSTNode) -> cst.BaseExpression:
        """`train_params` -> the value it was given where it is read, when one assignment gives it
        (a parameter-group list); anything else, or a name assigned more than once, as it is."""
        found = [b for b in self.refers.get(value, ()) if b.kind == "assignment"] if isinstance(value, cst.Name) else []
        return found[0].value if len(found) == 1 and found[0].value is not None else value

    def parameters_value(self, value: cst.BaseExpression, user: cst.CSTNode) -> cst.BaseExpression:
        """`trainable` -> what it was given (`filter(..., model.parameters())`), for a name that holds
        a model's parameters (not an optimizer built on them); else as it is."""
        if isinstance(value, cst.Name):
            for binding in self.refers.get(value, ()):
                if binding.kind == "assignment" and binding.value is not None and _whole_parameters(binding.value):
                    return binding.value
        return value

    def visit_For(self, node: cst.For) -> None:
        super().visit_For(node)
        self.loops.append(node)

    def visit_While(self, node: cst.While) -> None:
        self.loops.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.attributes.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if N.is_cuda_string(node):
            self.device_strings.append(node)
        elif N.is_cuda_template(node):
            self.cuda_templates.append(node)
        elif N.LAUNCH_MODULES_TEXT in node.value:
            self.launch_strings.append(node)

    def visit_FormattedString(self, node: cst.FormattedString) -> None:
        if N.is_cuda_fstring(node):
            self.cuda_templates.append(node)
        if any(N.LAUNCH_MODULES_TEXT in getattr(part, "value", "") for part in node.parts):
            self.launch_strings.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        super().visit_Import(node)
        if any(N.is_legacy_launch_module(code_of(alias.name)) for alias in node.names):
            self.legacy_launch_imports.append(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        super().visit_ImportFrom(node)
        module = code_of(node.module) if node.module is not None else ""
        names = [] if isinstance(node.names, cst.ImportStar) else [code_of(a.name) for a in node.names]
        if N.is_legacy_launch_module(module) or (module == "torch.distributed" and "launch" in names):
            self.legacy_launch_imports.append(node)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        super().visit_ExceptHandler(node)
        self.handlers.append(node)

    def visit_If(self, node: cst.If) -> None:
        if N.is_main_guard(node.test):
            self.main_guards.append(node)
        elif N.mentions_rank(node.test):
            self.rank_checks.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        super().visit_Assign(node)
        self.assign_nodes.append(node)

    def visit_With(self, node: cst.With) -> None:
        if N.is_log_block(node):
            self.log_statements.append(node)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if N.is_log_statement(node):
            self.log_statements.append(node)
        for small in node.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = (
                    [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                )
                for target in targets:
                    self.assignments.append((code_of(target), node))
                    # `g_model, ema_model, d_model = build_model(cfg)`, `self.model, self.opt = m, o`:
                    # each element is assigned here too.
                    for element in _unpacked(target):
                        self.assignments.append((code_of(element), node))
                if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call):
                    self._statement_of_call[small.value] = [t.target for t in small.targets]
            elif (
                isinstance(small, cst.Expr)
                and isinstance(small.value, cst.Call)
                and isinstance(small.value.func, cst.Attribute)
            ):
                func = small.value.func
                self.expr_calls.append((func.value, func.attr.value, node))


def _unpacked(target: cst.CSTNode) -> List[cst.BaseExpression]:
    """The names and attributes a tuple/list target assigns, nested ones included."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        return []
    found: List[cst.BaseExpression] = []
    for element in target.elements:
        value = element.value
        if isinstance(value, (cst.Name, cst.Attribute)):
            found.append(value)
        else:
            found += _unpacked(value)
    return found


def _whole_parameters(value: cst.BaseExpression) -> bool:
    """`model.parameters()`, `filter(lambda p: p.requires_grad, model.parameters())`,
    `list(model.parameters())`: all of a model's (trainable) parameters. A comprehension that picks
    some of them (`[p for p in model.parameters() if p.ndim == 4]`) is one optimizer of several,
    and an optimizer built on them (`optim.Adam(model.parameters())`) is not a parameter list."""
    if not isinstance(value, cst.Call):
        return False
    if N.attribute_name(value.func) in ("parameters", "named_parameters"):
        return True
    if isinstance(value.func, cst.Name) and value.func.value in ("filter", "list", "tuple") and value.args:
        return _whole_parameters(value.args[-1].value)
    return False


def _holds_parameters(value: cst.CSTNode) -> bool:
    return any(N.attribute_name(c.func) in ("parameters", "named_parameters") for c in descendants(value, cst.Call))
