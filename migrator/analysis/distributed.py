"""Is this file already distributed? The evidence, or None.

A file is already distributed when it, or a function it calls (in the file, or imported from a
module of the project), initialises a process group, wraps a model in DDP/FSDP or starts
workers with mp.spawn, or when it trains through a framework that does (Accelerate,
Lightning/Fabric, DeepSpeed, Horovod, Ignite's idist, torch.distributed.elastic). Such a file
runs under a launcher already: a second `init_process_group` kills every rank, a second wrap
syncs gradients twice. The migration then changes only what torchrun needs and reports only
genuine bugs (rules/distributed_bugs.py).

Imported helpers are looked into with the standard `ast` module, on the text the FileContext
hands over: only the modules a file calls into are read, each once per process.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass, replace
from typing import Dict, Iterator, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis.helpers import _is_local_rank_argument, code_of
from migrator.bindings import dotted_name
from migrator.context import FileContext, ProjectModules
from migrator.tree import descendants

# Frameworks that set up the processes and wrap the model themselves.
FRAMEWORKS: Tuple[Tuple[str, str], ...] = (
    ("accelerate", "Hugging Face Accelerate"),
    ("lightning_fabric", "Lightning Fabric"),
    ("lightning", "Lightning"),
    ("pytorch_lightning", "PyTorch Lightning"),
    ("deepspeed", "DeepSpeed"),
    ("horovod", "Horovod"),
    ("ignite.distributed", "Ignite's idist"),
    ("torch.distributed.elastic", "torch.distributed.elastic"),
    ("torch.distributed.fsdp", "FSDP"),
    ("torch.distributed._composable", "FSDP"),
    ("fairscale", "FairScale"),
    ("colossalai", "ColossalAI"),
    ("torch_xla", "PyTorch/XLA"),
    ("trl", "TRL"),
)
# From transformers, only its Trainer distributes (it reads torchrun's environment itself).
_TRANSFORMERS_TRAINERS = ("Trainer", "Seq2SeqTrainer", "TrainingArguments", "Seq2SeqTrainingArguments")
WRAPPERS = N.DDP | frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
        "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard",
    }
)
SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", "torch.multiprocessing.spawn.spawn"})
# What a helper in another module calls when it sets up distribution (read from its text, so
# by the last name of the call: `dist.init_process_group`, `DistributedDataParallel(...)`).
_SETUP_CALLS = {
    "init_process_group": "calls init_process_group",
    "DistributedDataParallel": "wraps the model in DistributedDataParallel",
    "FullyShardedDataParallel": "wraps the model in FSDP",
    "fully_shard": "wraps the model in FSDP",
    "start_processes": "starts the workers (mp.start_processes)",
    "init_distributed": "sets up the process group (init_distributed)",
}
_MAX_HOPS = 3  # re-exports and helpers calling helpers followed this deep


@dataclass(frozen=True)
class LegacySetup:
    """What keeps a script written for `python -m torch.distributed.launch` (its `--local_rank`
    picks the device or rank) off the CPU: the places issue 12's fix edits, and nothing else."""

    set_device: Tuple[cst.SimpleStatementLine, ...] = ()  # `torch.cuda.set_device(x)` with no CUDA check around
    nccl: Tuple[cst.SimpleString, ...] = ()  # the "nccl" literal given to init_process_group as its backend
    device_args: Tuple[cst.BaseExpression, ...] = ()  # DDP's device_ids=/output_device= values, unconditional


@dataclass(frozen=True)
class Distributed:
    """Why the file counts as already distributed, where that shows, and what its genuine bugs
    can be judged from."""

    what: str
    node: cst.CSTNode
    framework: bool = False  # a framework (Accelerate, Lightning, DeepSpeed...) runs the processes
    helper: bool = False  # `node` calls a helper of the project that sets up: training runs after it
    sets_epoch: bool = False  # something in the file calls `.set_epoch(...)`
    # torch.save calls that every rank runs once the processes are set up: (the save, the
    # unguarded call of the function holding it that leads there, or None when it is in place)
    every_rank_saves: Tuple[Tuple[cst.Call, Optional[cst.Call]], ...] = ()
    legacy: Optional[LegacySetup] = None  # written for torch.distributed.launch (its --local_rank matters)


def evidence(analysis, context: Optional[FileContext]) -> Optional[Distributed]:
    """The first sign, in order of certainty, that the file is already distributed."""
    for found in _signs(analysis, context):
        sets_epoch = any(N.attribute_name(call.func) == "set_epoch" for call in analysis.c.calls)
        legacy = None if found.framework else _legacy_setup(analysis)
        saves = () if found.framework else _every_rank_saves(analysis, found)
        return replace(found, sets_epoch=sets_epoch, every_rank_saves=saves, legacy=legacy)
    return None


# -- scripts written for torch.distributed.launch -----------------------------------------------
def _legacy_setup(analysis) -> Optional[LegacySetup]:
    """Only for a script whose `--local_rank` still matters (DDP020 fires: it is required, or read
    to pick the device or rank with nothing reading LOCAL_RANK). One that declares it and never
    reads it (DINO, ConvNeXt, timm) sets up from the environment: a torchrun-era script, untouched."""
    if not any(_is_local_rank_argument(call) for call in analysis.c.calls) or not analysis.local_rank_arguments():
        return None
    set_device = []
    for call in analysis.calls(N.SET_DEVICE):
        statement = analysis.statement_of(call)
        alone = isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and getattr(statement.body[0], "value", None) is call
        if alone and not any(isinstance(anc, cst.If) and N.mentions_cuda(anc.test) for anc in analysis.ancestors(call)):
            set_device.append(statement)
    nccl = []
    for call in analysis.calls(N.INIT_PROCESS_GROUP):
        backend = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "backend"), None)
        if backend is None and call.args and call.args[0].keyword is None:
            backend = call.args[0].value
        if isinstance(backend, cst.SimpleString) and backend.evaluated_value == "nccl":
            nccl.append(backend)
    device_args = [
        arg.value for call in analysis.calls(N.DDP) for arg in call.args
        if arg.keyword is not None and arg.keyword.value in ("device_ids", "output_device")
        and not isinstance(arg.value, cst.IfExp) and not N.is_name(arg.value, "None")
    ]
    return LegacySetup(tuple(set_device), tuple(nccl), tuple(device_args))


# -- checkpoints every rank writes ----------------------------------------------------------
_SAVE_DEPTH = 2  # callers of the function holding a save followed this far up


def _every_rank_saves(analysis, found: Distributed) -> Tuple[Tuple[cst.Call, Optional[cst.Call]], ...]:
    """`torch.save` calls that run on every rank after the setup, with nothing choosing one rank.

    Precision first: a save counts only when the function holding it (or an unguarded call of
    that function, two levels up) runs after the setup in a function of this file that sets up
    or wraps; a save whose path names the rank is a deliberate per-rank file.
    """
    anchors = _setup_points(analysis, found)
    found_saves = []
    for save in analysis.calls(N.TORCH_SAVE):
        if _guarded(analysis, save) or _per_rank_path(save):
            continue
        via = _reached_after_setup(analysis, save, anchors, _SAVE_DEPTH)
        if via is not False:
            found_saves.append((save, via))
    return tuple(found_saves)


def _setup_points(analysis, found: Distributed) -> Dict[Optional[cst.CSTNode], int]:
    """Function (None: the module) -> source position of its first setup or wrap call."""
    calls = [*analysis.calls(N.INIT_PROCESS_GROUP), *analysis.calls(WRAPPERS)]
    if found.helper:
        calls.append(found.node)  # `dist_utils.bootstrap(args)`, seen in the project's own module
    calls += [
        call for call in analysis.c.calls
        if N.is_distributed_setup_name((call.func.value if isinstance(call.func, cst.Name) else N.attribute_name(call.func)) or "")
    ]
    points: Dict[Optional[cst.CSTNode], int] = {}
    for call in calls:
        fn = analysis.enclosing_function(call)
        position = analysis.c.order.get(call, 0)
        points[fn] = min(points.get(fn, position), position)
    return points


def _reached_after_setup(analysis, node: cst.CSTNode, anchors, depth: int):
    """The unguarded call that leads to `node` after a setup (None: `node` itself runs after it),
    or False when no such path is seen."""
    fn = analysis.enclosing_function(node)
    if fn in anchors and analysis.c.order.get(node, 0) > anchors[fn]:
        return None
    if fn is None or depth == 0:
        return False
    for call in analysis.c.calls:
        name = call.func.value if isinstance(call.func, cst.Name) else N.attribute_name(call.func)
        if name != fn.name.value or call is node or _guarded(analysis, call):
            continue
        if isinstance(call.func, cst.Attribute) and not N.is_name(call.func.value, "self"):
            continue  # `other.save(...)` is not this function
        if _reached_after_setup(analysis, call, anchors, depth - 1) is not False:
            return call
    return False


def _guarded(analysis, node: cst.CSTNode) -> bool:
    """Under a check of the rank (`if rank == 0:`, `if is_main_process():`), or after an early
    `if <not rank 0>: return` in its function."""
    previous = node
    for anc in analysis.ancestors(node):
        if isinstance(anc, cst.If) and previous is not anc.test and _rank_test(anc.test):
            return True
        if isinstance(anc, cst.IndentedBlock):
            for statement in anc.body:
                if statement is previous:
                    break
                if isinstance(statement, cst.If) and _rank_test(statement.test) and _exits(statement.body):
                    return True
        previous = anc
    return False


def _rank_test(test: cst.BaseExpression) -> bool:
    """`rank == 0`, `is_main_process()`, `args.gpu == 0` (one process per GPU: the first GPU's)."""
    words = {n.value.lower() for n in descendants(test, cst.Name)} | {a.attr.value.lower() for a in descendants(test, cst.Attribute)}
    if N.mentions_rank(test) or any(
        word.startswith(("is_main", "main_proc", "master", "is_master", "is_primary", "primary", "rank0", "is_rank0"))
        for word in words
    ):
        return True
    return any(
        isinstance(comparison.comparisons[0].comparator, cst.Integer) and "gpu" in code_of(comparison.left).lower()
        for comparison in descendants(test, cst.Comparison)
    )


def _exits(body: cst.BaseSuite) -> bool:
    return any(isinstance(node, (cst.Return, cst.Continue)) for node in descendants(body, (cst.Return, cst.Continue)))


def _per_rank_path(save: cst.Call) -> bool:
    """`torch.save(state, f"shard_{rank}.pt")`: each rank writes its own file on purpose."""
    if len(save.args) < 2:
        return False
    path = save.args[1].value
    words = [n.value.lower() for n in descendants(path, cst.Name)] + [a.attr.value.lower() for a in descendants(path, cst.Attribute)]
    words += [s.value.lower() for s in descendants(path, (cst.SimpleString, cst.FormattedStringText))]
    return any("rank" in word or "shard" in word for word in words)


def _signs(analysis, context: Optional[FileContext]) -> Iterator[Distributed]:
    for call in analysis.calls(N.INIT_PROCESS_GROUP):
        yield Distributed("it calls init_process_group", call)
    for call in analysis.calls(WRAPPERS):
        yield Distributed("it wraps a model in DistributedDataParallel/FSDP", call)
    for call in analysis.calls(SPAWN):
        yield Distributed("it starts its workers with mp.spawn", call)
    for node, framework in _framework_imports(analysis.c.import_statements):
        yield Distributed(f"it trains through {framework}", node, framework=True)
    for call in analysis.c.calls:
        name = call.func.value if isinstance(call.func, cst.Name) else N.attribute_name(call.func)
        if name and N.is_distributed_setup_name(name):
            yield Distributed(f"`{name}(...)` sets up the process group", call)
        elif N.declares_distributed_option(call):
            yield Distributed("its parser declares a distributed option (--dist_url, --world_size, --launcher)", call)
        elif N.is_name(call.func, "getattr") and any(
            isinstance(s, cst.SimpleString) and N.is_distributed_setup_name(s.raw_value)
            for arg in call.args for s in descendants(arg.value, cst.SimpleString)
        ):
            yield Distributed("a setup helper chosen by name (`getattr(..., 'init_dist_...')`) sets up the process group", call)
    if context is not None and context.modules is not None:
        yield from _project_helpers(analysis, context)
    for call in analysis.calls(N.DISTRIBUTED_SAMPLER):
        # Sharding by rank: the setup is elsewhere (a loader builder, a trainer module).
        yield Distributed("it shards its data with DistributedSampler", call)


def _framework_imports(statements) -> Iterator[Tuple[cst.CSTNode, str]]:
    for node in statements:
        if isinstance(node, cst.Import):
            sources = [dotted_name(alias.name) or "" for alias in node.names]
        elif node.relative or node.module is None:
            continue
        else:
            sources = [dotted_name(node.module) or ""]
            if sources[0] == "transformers" and not isinstance(node.names, cst.ImportStar) and any(
                (dotted_name(alias.name) or "") in _TRANSFORMERS_TRAINERS for alias in node.names
            ):
                yield node, "the Hugging Face Trainer"
                continue
        for source in sources:
            for prefix, framework in FRAMEWORKS:
                if source == prefix or source.startswith(prefix + "."):
                    yield node, framework
                    break


# -- helpers in the project's own modules ------------------------------------------------------
def _project_helpers(analysis, context: FileContext) -> Iterator[Distributed]:
    imported = _imported_names(analysis.c.import_statements, context.package)
    modules = context.modules
    assert modules is not None
    for call in analysis.c.calls:
        dotted = dotted_name(call.func)
        if not dotted:
            continue
        head, _, rest = dotted.partition(".")
        source = imported.get(head)
        owner = analysis.c.owner_of(call)
        if source is None or (owner is not analysis.module and head in analysis.c.bound.get(owner, ())):
            continue  # not imported, or a local variable of that name
        if source.split(".")[0] in N.NOT_PROJECT_PACKAGES:
            continue
        qualified = f"{source}.{rest}" if rest else source
        why = _what_it_does(modules, qualified)
        if why:
            yield Distributed(f"`{dotted}(...)` ({qualified}) {why}", call, helper=True)


def _imported_names(statements, package: Optional[str]) -> Dict[str, str]:
    """Local name -> absolute dotted source, relative imports resolved against `package`."""
    found: Dict[str, str] = {}
    for node in statements:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted_name(alias.name) or ""
                local = alias.asname.name.value if alias.asname is not None else full.split(".")[0]  # type: ignore[attr-defined]
                found.setdefault(local, full if alias.asname is not None else local)
        elif not isinstance(node.names, cst.ImportStar):
            base = _absolute(len(node.relative), dotted_name(node.module) if node.module is not None else "", package)
            if base is None:
                continue
            for alias in node.names:
                name = dotted_name(alias.name) or ""
                local = alias.asname.name.value if alias.asname is not None else name  # type: ignore[attr-defined]
                found.setdefault(local, f"{base}.{name}" if base else name)
    return found


def _absolute(level: int, module: Optional[str], package: Optional[str]) -> Optional[str]:
    if not level:
        return module or None
    if package is None:
        return module or None  # a script run from its folder: `from .x import y` cannot run; read as `x`
    parts = package.split(".")
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    return ".".join([*base, module] if module else base)


def _what_it_does(modules: ProjectModules, qualified: str, hops: int = 0) -> Optional[str]:
    """For `pkg.mod.func`: what `func` in the project's `pkg/mod.py` does to distribute, or None."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        text = modules.source(".".join(parts[:cut]))
        if text is None:
            continue
        summary = _module_summary(modules, ".".join(parts[:cut]), text, hops)
        return summary.get(parts[cut])
    return None


_SUMMARIES: Dict[Tuple[Tuple[str, ...], str], Dict[str, str]] = {}


def _module_summary(modules: ProjectModules, dotted: str, text: str, hops: int) -> Dict[str, str]:
    """Name -> what it does, for the functions and classes of a module that set up distribution
    (directly, through another function of the module, or through one it imports from the project)."""
    key = (modules.roots, dotted)
    if key in _SUMMARIES:
        return _SUMMARIES[key]
    _SUMMARIES[key] = {}  # a module importing itself (or a cycle) answers "nothing" meanwhile
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    package = dotted if text and _is_package(modules, dotted) else dotted.rpartition(".")[0]
    imported = _ast_imports(tree, package or None)
    summary: Dict[str, str] = {}
    bodies = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for name, node in bodies.items():
        why = _direct(node)
        if why:
            summary[name] = why
    changed = True
    while changed:  # helpers calling helpers of the same module
        changed = False
        for name, node in bodies.items():
            if name in summary:
                continue
            for called in _called_names(node):
                head = called.split(".")[0]
                if head in summary:
                    summary[name] = f"calls `{head}`, which {summary[head]}"
                elif hops < _MAX_HOPS and head in imported:
                    rest = called[len(head):]
                    why = _what_it_does(modules, imported[head] + rest, hops + 1)
                    if why:
                        summary[name] = f"calls `{called}`, which {why}"
                if name in summary:
                    changed = True
                    break
    # Re-exports: `from .launch import launch` or `from .launch import *` in a package's __init__.
    for local, source in imported.items():
        if local not in summary and local not in bodies and hops < _MAX_HOPS:
            why = _what_it_does(modules, source, hops + 1)
            if why:
                summary[local] = why
    for star in _star_imports(tree, package or None) if hops < _MAX_HOPS else ():
        star_text = modules.source(star)
        if star_text is not None:
            for name, why in _module_summary(modules, star, star_text, hops + 1).items():
                summary.setdefault(name, why)
    _SUMMARIES[key] = summary
    return summary


def _is_package(modules: ProjectModules, dotted: str) -> bool:
    return any(os.path.isfile(os.path.join(root, *dotted.split("."), "__init__.py")) for root in modules.roots)


def _direct(node: ast.AST) -> Optional[str]:
    for called in _called_names(node):
        last = called.split(".")[-1]
        if last in _SETUP_CALLS:
            return _SETUP_CALLS[last]
        if last == "spawn" and ("mp" in called.split(".") or "multiprocessing" in called):
            return "starts the workers (mp.spawn)"
    return None


def _called_names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            dotted = _ast_dotted(sub.func)
            if dotted:
                yield dotted


def _ast_dotted(node: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _star_imports(tree: ast.Module, package: Optional[str]) -> Iterator[str]:
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            base = _absolute(node.level, node.module, package)
            if base:
                yield base


def _ast_imports(tree: ast.Module, package: Optional[str]) -> Dict[str, str]:
    found: Dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                found.setdefault(local, alias.name if alias.asname else local)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.level, node.module, package)
            if base is None:
                continue
            for alias in node.names:
                if alias.name != "*":
                    found.setdefault(alias.asname or alias.name, f"{base}.{alias.name}")
    return found
