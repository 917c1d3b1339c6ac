"""DDP120-DDP124: what changes meaning under DDP and needs a human decision. Report only.

Unlike the other advisories these do not mark something the tool declined: the migration is
complete, but the training is now distributed, and these are the places where that changes
what the numbers mean or where a script can hang.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from migrator.analysis import ScriptFacts
from migrator.names import attribute_name
from migrator.tree import descendants
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules.process_group import needs_setup
from migrator.rules.sampler import shards
from migrator.types import Diagnostic

_TRAIN = '''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y) / 4
            loss.backward()
            if (step + 1) % 4 == 0:
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    main()
'''

_TRAIN_MIGRATED = '''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 1))
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y) / 4
            loss.backward()
            if (step + 1) % 4 == 0:
                optimizer.step()
                optimizer.zero_grad()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
'''

GLOBAL_BATCH = Rule(
    code="DDP120",
    name="global-batch-size",
    summary="the global batch is now batch_size x world_size: scale the learning rate or divide the batch",
    what="""
Reported at every training loader the migration shards, and where a DataParallel-era script
multiplies its batch size by the GPU count (`batch_size * torch.cuda.device_count()`), which under
DDP makes every process's batch that large.""",
    why="""
Each of N processes takes `batch_size` samples per step, so one optimizer step now sees N times
as many samples and an epoch has N times fewer steps. With the old learning rate and schedule
the model trains differently than before.""",
    fix="""Either keep the global batch (pass `batch_size // world_size`) or scale the learning rate
(linear scaling: `lr * world_size`, with warmup) and shorten step-based schedules.""",
    fix_safety="Not fixable automatically: it is a training decision.",
    fixable=False,
    examples=(
        Example(id="sharded-loader", before=_TRAIN, after=_TRAIN_MIGRATED, diagnostics=("DDP120",)),
        Example(
            id="batch-times-gpu-count",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    batch_size = 16
    num_gpu = torch.cuda.device_count()
    if num_gpu > 1:
        batch_size = batch_size * num_gpu
    model = torch.nn.DataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=batch_size, shuffle=True)
    for epoch in range(2):
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

if __name__ == "__main__":
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    batch_size = 16
    num_gpu = torch.cuda.device_count()
    if num_gpu > 1:
        batch_size = batch_size * num_gpu
    model = DDP(torch.nn.Linear(4, 1), device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = TensorDataset(torch.randn(64, 4))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    try:
        for epoch in range(2):
            sampler.set_epoch(epoch)
            for (x,) in loader:
                model(x).sum().backward()
                optimizer.step()
    finally:
        dist.destroy_process_group()
''',
            diagnostics=("DDP120",),
        ),
    ),
)

EVAL_SHARDED = Rule(
    code="DDP121",
    name="sharded-evaluation",
    summary="an evaluation loader reads a DistributedSampler: metrics cover one shard (all_reduce them) and padding repeats samples",
    what="A loader that does not train but gets its samples from a DistributedSampler.",
    why="""
Each rank then evaluates its own shard: rank 0's accuracy is not the accuracy of the whole set,
and DistributedSampler pads the last shard with repeated samples, which counts some twice.""",
    fix="""All-reduce the metric sums and counts (`dist.all_reduce(t, op=dist.ReduceOp.SUM)`), and
drop the padding (or evaluate unsharded, as the migration does for the loaders it rewrites).""",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="sharded-val-loader",
            before='''import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def evaluate(model, dataset):
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, shuffle=False))
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct / len(dataset)
''',
            diagnostics=("DDP121",),
        ),
    ),
)

ACCUMULATION = Rule(
    code="DDP122",
    name="gradient-accumulation-no-sync",
    summary="gradient accumulation: wrap the non-stepping backward passes in model.no_sync()",
    what="An optimizer step taken every N micro-batches (`if (step + 1) % accum_steps == 0:`).",
    why="""
DDP all-reduces gradients in every backward pass. When only every N-th pass is followed by a
step, the other N-1 all-reduces are wasted bandwidth: correct, but slower than it needs to be.""",
    fix="Run the backward passes that do not step under `with model.no_sync():`.",
    fix_safety="Not fixable automatically: the loop's structure decides where no_sync fits.",
    fixable=False,
    examples=(Example(id="every-fourth-step", before=_TRAIN, after=_TRAIN_MIGRATED, diagnostics=("DDP122",)),),
)

SYNC_BATCHNORM = Rule(
    code="DDP123",
    name="sync-batchnorm",
    summary="BatchNorm sees only this process's part of the batch: consider nn.SyncBatchNorm.convert_sync_batchnorm(model)",
    what="The model uses BatchNorm layers.",
    why="""
Under DDP each BatchNorm normalises with the statistics of its own process's samples. With a
small per-GPU batch those statistics get noisy; SyncBatchNorm computes them over all processes.""",
    fix="`model = nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping the model in DDP (CUDA only).",
    fix_safety="Not fixable automatically: SyncBatchNorm costs a collective per layer and only runs on CUDA.",
    fixable=False,
    examples=(Example(id="batchnorm1d", before=_TRAIN, after=_TRAIN_MIGRATED, diagnostics=("DDP123",)),),
)

RANK_DIVERGENCE = Rule(
    code="DDP124",
    name="rank-divergent-code",
    summary="code every rank must run (a forward, a collective) sits behind a rank check: the other ranks will hang",
    what="An `if` on the rank (`if rank == 0:`, `if dist.get_rank() == 0:`) whose body runs the wrapped model or a collective.",
    why="""
Collectives, and DDP's forward (which may sync buffers), wait for every rank. Run on rank 0
only, they wait forever for the others.""",
    fix="Compute on every rank; keep only the printing or saving of the result under the rank check.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="barrier-on-rank-zero",
            before='''import torch
import torch.distributed as dist


def finish(rank):
    if rank == 0:
        dist.barrier()
        print("done")
''',
            diagnostics=("DDP124",),
        ),
    ),
)

RULES = (GLOBAL_BATCH, EVAL_SHARDED, ACCUMULATION, SYNC_BATCHNORM, RANK_DIVERGENCE)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    migrating = needs_setup(facts)
    if migrating:
        for loader in facts.loaders:
            if shards(loader):
                _report(facts, plan, GLOBAL_BATCH, loader.call)
        for node in facts.accumulation_steps:
            _report(facts, plan, ACCUMULATION, node)
        if facts.batchnorm_layers:
            _report(facts, plan, SYNC_BATCHNORM, facts.batchnorm_layers[0])
        for statement, scaled in facts.batch_scalings:
            line, col = facts.line_col(statement)
            plan.diagnostics.append(Diagnostic(GLOBAL_BATCH.code, line, col, (
                f"`{scaled}` is multiplied by the GPU count (a DataParallel habit: one process split it over the GPUs); "
                "under DDP every process loads that many samples: drop the multiplication to keep the global batch"
            )))
    # Code that is already distributed chose its sharded evaluation and its rank checks, and runs
    # as it is: there, a sharded evaluation loader is reported only when nothing in the file
    # combines the ranks' results, and rank checks are left alone (each is deliberate far more
    # often than it is a hang).
    for loader in facts.loaders:
        if not loader.training and loader.distributed_sampler:
            if migrating or (_iterated_here(facts.module, loader.target) and not _combines_ranks(facts.module)):
                _report(facts, plan, EVAL_SHARDED, loader.call)
    for node in facts.rank_divergent:
        # In code that already runs distributed, only a collective behind the check is evidence
        # of a hang; a forward there (sampling, logging on rank 0) usually runs on the bare module.
        if migrating or _runs_collective(node):
            _report(facts, plan, RANK_DIVERGENCE, node)


COLLECTIVE_NAMES = frozenset(
    {"barrier", "all_reduce", "all_gather", "all_gather_object", "broadcast", "broadcast_object_list", "reduce", "gather", "scatter"}
)

# Calls that combine per-rank results: torch.distributed's collectives and the helpers projects
# write around them (`torch_dist_sum`, `reduce_tensor`, `metric_logger.synchronize_between_processes()`).
_COMBINING_WORDS = ("reduce", "gather", "dist_sum", "synchron")


def _iterated_here(module: cst.Module, loader: Optional[str]) -> bool:
    """Is the loader looped over in this file (so its metric is computed, unreduced, here)?"""
    if loader is None:
        return False
    name = loader.split(".")[-1]
    return any(
        name in {n.value for n in descendants(loop.iter, cst.Name)} | {a.attr.value for a in descendants(loop.iter, cst.Attribute)}
        for loop in descendants(module, cst.For)
    )


def _runs_collective(node: cst.CSTNode) -> bool:
    return any(attribute_name(call.func) in COLLECTIVE_NAMES for call in descendants(node, cst.Call))


def _combines_ranks(module: cst.Module) -> bool:
    for call in descendants(module, cst.Call):
        name = (call.func.value if isinstance(call.func, cst.Name) else attribute_name(call.func) or "").lower()
        if any(word in name for word in _COMBINING_WORDS):
            return True
    return False


def _report(facts: ScriptFacts, plan: Plan, rule: Rule, node) -> None:
    line, col = facts.line_col(node)
    plan.diagnostics.append(Diagnostic(rule.code, line, col, rule.summary))
