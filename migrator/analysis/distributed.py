"""Is this file already distributed? The evidence, or None.

A file is already distributed when it, or a function it calls (in the file, or imported from a
module of the project), initialises a process group, wraps a model in DDP/FSDP or starts
workers with mp.spawn, or when it trains through a framework that does (Accelerate,
Lightning/Fabric, DeepSpeed, Horovod, Ignite's idist, torch.distributed.elastic). Such a file
runs under a launcher already: a second `init_process_group` kills every rank, a second wrap
syncs gradients twice. The migration then changes only what torchrun needs and reports only
genuine bugs (rules/distributed_bugs.py).

Imported helpers are looked into by migrator/graph/distributing.py; the checkpoints every rank
writes are found by analysis/rank_saves.py; what keeps a torch.distributed.launch script off the
CPU (DDP005) is collected here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Iterator, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.graph.distributing import what_it_does
from migrator.graph.modules import absolute
from migrator.analysis.rank_saves import WRAPPERS, every_rank_saves
from migrator.graph.bindings import dotted_name
from migrator.context import FileContext
from migrator.relevance import FRAMEWORKS, TRANSFORMERS_TRAINERS as _TRANSFORMERS_TRAINERS
from migrator.tree import descendants

SPAWN = frozenset({"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", "torch.multiprocessing.spawn.spawn"})


@dataclass(frozen=True)
class LegacySetup:
    """What keeps a script written for `python -m torch.distributed.launch` (its `--local_rank`
    picks the device or rank) off the CPU: the places issue 12's fix edits, and nothing else."""

    set_device: Tuple[cst.SimpleStatementLine, ...] = ()  # `torch.cuda.set_device(x)` with no CUDA check around
    nccl: Tuple[cst.SimpleString, ...] = ()  # the "nccl" literal given to init_process_group as its backend
    device_args: Tuple[cst.BaseExpression, ...] = ()  # DDP's device_ids=/output_device= values, unconditional
    cuda_devices: Tuple[cst.Call, ...] = ()  # torch.device("cuda", args.local_rank) with no CPU fallback


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
        saves = () if found.framework else every_rank_saves(analysis, found.node if found.helper else None)
        return replace(found, sets_epoch=sets_epoch, every_rank_saves=saves, legacy=legacy)
    return None


# -- scripts written for torch.distributed.launch -----------------------------------------------
def _legacy_setup(analysis) -> Optional[LegacySetup]:
    """Only for a script whose `--local_rank` still matters (DDP020 fires: it is required, or read
    to pick the device or rank with nothing reading LOCAL_RANK). One that declares it and never
    reads it (DINO, ConvNeXt, timm) sets up from the environment: a torchrun-era script, untouched."""
    if not analysis.local_rank_arguments():
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
    cuda_devices = [call for call in analysis.calls(N.TORCH_DEVICE) if _cuda_only(analysis, call)]
    return LegacySetup(tuple(set_device), tuple(nccl), tuple(device_args), tuple(cuda_devices))


def _cuda_only(analysis, call: cst.Call) -> bool:
    """`torch.device("cuda", n)`, `torch.device(f"cuda:{n}")`, `torch.device("cuda:%d" % n)`: a CUDA
    device with nothing choosing the CPU around it (an `... if ... else` or an `if` on CUDA)."""
    if not call.args or call.args[0].keyword is not None:
        return False
    first = call.args[0].value
    if isinstance(first, cst.BinaryOperation):
        first = first.left
    if isinstance(first, cst.SimpleString):
        text = str(first.evaluated_value)
    elif isinstance(first, cst.FormattedString):
        text = "".join(part.value for part in first.parts if isinstance(part, cst.FormattedStringText))
    else:
        return False
    if text != "cuda" and not text.startswith("cuda:"):
        return False
    return not any(
        isinstance(node, cst.IfExp) or isinstance(node, cst.If) and N.mentions_cuda(node.test)
        for node in analysis.ancestors(call)
    )


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
        why = what_it_does(modules.roots, qualified)
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
            base = absolute(len(node.relative), dotted_name(node.module) if node.module is not None else "", package)
            if base is None:
                continue
            for alias in node.names:
                name = dotted_name(alias.name) or ""
                local = alias.asname.name.value if alias.asname is not None else name  # type: ignore[attr-defined]
                found.setdefault(local, f"{base}.{name}" if base else name)
    return found
