"""The syntax the project rewrite reads: how a module spells torch's names, which loop trains over
which loader, what a checkpoint-writing function looks like. Pure functions of libcst nodes;
migrator.project.rewrite decides what to change with them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set

import libcst as cst

from migrator import edits
from migrator.graph.bindings import dotted_name
from migrator.names import PROGRESS_BARS, TRACKER_RUNS
from migrator.tree import children

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

SAMPLER_KEYWORDS = ("sampler", "batch_sampler")


@dataclass
class ModuleNames:
    """How the module spells torch, torch.distributed, DataLoader, DistributedSampler and DDP."""

    torch_like: Set[str]
    dataloaders: Set[str]
    torch_saves: Set[str]
    torch_loads: Set[str]
    dist: str
    dist_needed: bool
    sampler: str
    sampler_needed: bool
    ddp: str
    ddp_needed: bool
    progress_bars: Set[str] = frozenset()  # how the module calls tqdm: `tqdm`, `tqdm.tqdm`, `trange`
    tracker_runs: Set[str] = frozenset()  # how it starts an experiment tracker's run: `wandb.init`

    @classmethod
    def of(cls, module: cst.Module) -> "ModuleNames":
        imported: Dict[str, str] = {}  # local name -> what it is
        for node in module.body:
            for small in node.body if isinstance(node, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        full = dotted_name(alias.name) or ""
                        local = alias.asname.name.value if alias.asname else full.split(".")[0]  # type: ignore[union-attr]
                        imported[local] = full if alias.asname else local
                elif isinstance(small, cst.ImportFrom) and small.module is not None and not isinstance(small.names, cst.ImportStar):
                    base = dotted_name(small.module) or ""
                    for alias in small.names:
                        name = alias.name.value if isinstance(alias.name, cst.Name) else ""
                        local = alias.asname.name.value if alias.asname else name  # type: ignore[union-attr]
                        imported[local] = f"{base}.{name}"
        torch_like = {local for local, full in imported.items() if full == "torch" or full.startswith("torch.")} | {"torch"}
        dataloaders = {local for local, full in imported.items() if full.endswith(".DataLoader") and full.startswith("torch")}
        torch_saves = {f"{local}.save" for local, full in imported.items() if full == "torch"} | {
            local for local, full in imported.items() if full == "torch.save"}
        torch_loads = {f"{local}.load" for local, full in imported.items() if full == "torch"} | {
            local for local, full in imported.items() if full == "torch.load"}
        dist = next((local for local, full in imported.items() if full == "torch.distributed"), None)
        sampler = next((local for local, full in imported.items() if full.endswith(".DistributedSampler")), None)
        ddp = next((local for local, full in imported.items() if full.endswith(".DistributedDataParallel")), None)
        bars = {local for local, full in imported.items() if full in PROGRESS_BARS} | {
            f"{local}.{name}" for local, full in imported.items() if full in ("tqdm", "tqdm.auto") for name in ("tqdm", "trange")}
        runs = {local for local, full in imported.items() if full in TRACKER_RUNS} | {
            f"{local}.{run.rpartition('.')[2]}" for local, full in imported.items() for run in TRACKER_RUNS
            if full == run.rpartition(".")[0]}
        return cls(torch_like, dataloaders, torch_saves, torch_loads, dist or "dist", dist is None, sampler or "DistributedSampler",
                   sampler is None, ddp or "DDP", ddp is None, frozenset(bars), frozenset(runs))

    def need(self, plan: edits.Plan, dist: bool = False, sampler: bool = False, ddp: bool = False) -> None:
        if dist and self.dist_needed:
            plan.need_import("torch.distributed", None, "dist")
        if sampler and self.sampler_needed:
            plan.need_import("torch.utils.data.distributed", "DistributedSampler", None)
        if ddp and self.ddp_needed:
            plan.need_import("torch.nn.parallel", "DistributedDataParallel", "DDP")

def with_sampler(shuffle: cst.Arg, new_shuffle: str, name: str):
    def replace(updated: cst.Call) -> cst.Call:
        args = list(updated.args)
        index = next(i for i, arg in enumerate(args) if arg.deep_equals(shuffle))
        args[index] = args[index].with_changes(value=cst.parse_expression(new_shuffle))
        sampler = cst.Arg(value=cst.Name(name), keyword=cst.Name("sampler"),
                          equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        stars = [i for i, arg in enumerate(args) if arg.star == "**"]
        at = stars[0] if stars else len(args)
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        last_comma = args[-1].comma if args else cst.MaybeSentinel.DEFAULT
        if at == len(args) and isinstance(last_comma, cst.Comma) and len(args) > 1:
            # One argument per line with a trailing comma: the new one gets a line of its own, like them.
            args[-1] = args[-1].with_changes(comma=args[-2].comma)
            args.append(sampler.with_changes(comma=last_comma))
        elif at == len(args):  # after the last argument: it gets the comma, the new one keeps its (none)
            args[-1] = args[-1].with_changes(comma=comma)
            args.append(sampler)
        else:
            args.insert(at, sampler.with_changes(comma=comma))
        return updated.with_changes(args=args)

    return replace

def main_guards(module: cst.Module) -> List[cst.If]:
    return [
        statement for statement in module.body
        if isinstance(statement, cst.If) and "__name__" in source_of(statement.test) and "__main__" in source_of(statement.test)
    ]

def shuffles_or_samples(node: cst.BaseExpression) -> bool:
    """A random or weighted sampler, not a sequential one (evaluation order) or a None."""
    text = source_of(node)
    return not is_false(node) and "Sequential" not in text

def short(node: cst.CSTNode, limit: int = 60) -> str:
    text = " ".join(source_of(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."

ITERATION_WRAPPERS = ("enumerate", "tqdm", "tqdm.tqdm", "iter", "trange")

def iterated_loader(node: cst.BaseExpression, wrapped: Dict[str, cst.BaseExpression]) -> Optional[str]:
    """`loader`, `enumerate(self.train_loader)`, `tqdm(enumerate(loader), ...)`, or `tbar` after
    `tbar = tqdm(self.train_loader)` -> what the loop walks over, as spelled (a loader or not)."""
    for _ in range(4):
        while isinstance(node, cst.Call) and dotted_name(node.func) in ITERATION_WRAPPERS and node.args:
            node = node.args[0].value
        if isinstance(node, cst.Name) and node.value in wrapped:
            node = wrapped[node.value]
        else:
            break
    return dotted_name(node)

def wrappers(scope: cst.CSTNode) -> Dict[str, cst.BaseExpression]:
    """`tbar = tqdm(self.train_loader, ...)` in the function: name -> the wrapping call."""
    found: Dict[str, cst.BaseExpression] = {}
    for node in walk(scope):
        if (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                and isinstance(node.value, cst.Call) and dotted_name(node.value.func) in ITERATION_WRAPPERS):
            found[node.targets[0].target.value] = node.value
    return found

def path_used_after(call: cst.Call, statement: cst.SimpleStatementLine, function: cst.FunctionDef) -> Optional[str]:
    """The saved file's variable, when the function uses it again after the save (to copy it)."""
    if len(call.args) < 2 or not isinstance(call.args[1].value, cst.Name):
        return None
    path = call.args[1].value.value
    seen = False
    for node in walk_in_order(function.body):
        if node is statement:
            seen = True
            continue
        if seen and isinstance(node, cst.Name) and node.value == path and not inside(node, statement):
            return path
    return None

def first_statement(function: cst.FunctionDef) -> cst.BaseStatement:
    """The guard goes after the docstring."""
    body = list(function.body.body)  # type: ignore[union-attr]
    first = body[0]
    if (len(body) > 1 and isinstance(first, cst.SimpleStatementLine) and len(first.body) == 1
            and isinstance(first.body[0], cst.Expr) and isinstance(first.body[0].value, (cst.SimpleString, cst.ConcatenatedString))):
        return body[1]
    return first

def assigned_target(statement: cst.SimpleStatementLine) -> Optional[str]:
    small = statement.body[0]
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        return dotted_name(small.targets[0].target)
    return None

def bound_names(scope: cst.CSTNode) -> Set[str]:
    names: Set[str] = set()
    for node in walk(scope):
        if isinstance(node, cst.Name):
            names.add(node.value)
    return names

def is_plain_reference(node: cst.BaseExpression) -> bool:
    return dotted_name(node) is not None

def is_true(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"

def is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value in ("False", "None")

def source_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)

def walk_in_order(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in children(node):
        yield from walk_in_order(child)

def inside(node: cst.CSTNode, container: cst.CSTNode) -> bool:
    return any(n is node for n in walk(container))

def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every syntax node under `node` (itself included; LibCST's trivia left out), deepest-last first."""
    stack: List[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))


def parents_in_visit_order(module: cst.Module) -> Dict[cst.CSTNode, cst.CSTNode]:
    """child -> parent for every syntax node, in the order LibCST's ParentNodeProvider fills it
    (each node's children when the node is visited, pre-order), without its metadata machinery."""
    parents: Dict[cst.CSTNode, cst.CSTNode] = {}
    stack: List[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        kids = children(node)
        for child in kids:
            parents[child] = node
        stack.extend(reversed(kids))
    return parents
