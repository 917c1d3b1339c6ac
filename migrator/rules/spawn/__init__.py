"""DDP024 (`--spawn`): a script that starts its own workers with mp.spawn becomes a torchrun script.

Opt-in: without `--spawn` such a script is distributed already and stays byte-identical. What
changes, and why each piece gives torchrun's numbers, is read by migrator.rules.spawn.reading; what
cannot be made right is reported there as a decline (DDP117) and nothing changes.
"""
from __future__ import annotations

import libcst as cst

from migrator.analysis import ScriptFacts, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories.spawn import SPAWN_NOT_MIGRATED
from migrator.rules.spawn.reading import spawn_facts
from migrator.rules.process_group import INIT, LOCAL_RANK, LOCAL_RANK_COMMENT, WORLD_OF_ONE
from migrator.rules.shutdown import DESTROY_IF_INITIALIZED, _try_finally
from migrator.types import Change, Diagnostic

_TUTORIAL = '''import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def train(rank, world_size):
    setup(rank, world_size)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = 2
    mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
'''

RULE = Rule(
    code="DDP024",
    name="spawn-to-torchrun",
    summary="with --spawn: mp.spawn's workers become torchrun's processes; rank and world size come from its environment",
    what="""
Only with `--spawn` (or `spawn = true` in `[tool.ddp-migrate]`). In a script that starts its own
workers with `torch.multiprocessing.spawn` (any spelling, `start_processes` too):

- `mp.spawn(fn, nprocs=N, args=(a, b))` becomes `fn(local_rank, a, b)`, with `local_rank` read
  from `LOCAL_RANK`: the worker's first parameter is its process index, which torchrun calls the
  local rank;
- the worker's `init_process_group(backend, init_method="tcp://...", world_size=..., rank=...)`
  reads torchrun's environment (`env://`), and without torchrun (no `RANK`) is a world of one on
  an in-process `dist.HashStore()`, as every migrated script's, so `python train.py` still trains;
- what fed its rendezvous gets torchrun's numbers where the script computes them: N where it is
  assigned (`ngpus_per_node = torch.cuda.device_count()`) becomes `LOCAL_WORLD_SIZE`, the rank the
  worker computes from its index (`args.rank = args.rank * ngpus_per_node + gpu`) becomes `RANK`,
  the world size (`args.world_size = ngpus_per_node * args.world_size`) `WORLD_SIZE`. So
  `args.batch_size // ngpus_per_node` still splits a machine's batch over its processes and
  `args.rank % ngpus_per_node == 0` still picks each machine's first one; `--dist-url`,
  `--world-size` and `--rank` are torchrun's business now (its `--rdzv_endpoint`, `--nnodes`,
  `--node_rank`);
- `os.environ["MASTER_ADDR"]` / `["MASTER_PORT"]` set by hand go (torchrun sets them, and a
  script's own port would override the rendezvous torchrun made);
- a worker that takes its process index as its rank (`init_process_group(rank=rank)`) or N as the
  world size was written for one machine: before the call, a check stops a run over several
  machines with a message instead of training every machine on the same shards;
- `destroy_process_group()` runs at the end when the script never calls it, and a
  `torch.multiprocessing` import left unused goes.

What it cannot make right is left byte-for-byte as it is and reported as DDP117 with the reason.""",
    why="""
torchrun (elastic restarts, several machines, `ddp-migrate verify`, the job files `ddp-migrate
launch` writes) starts the processes itself and gives each its rank; a script that spawns its own
and rendezvouses on a fixed `tcp://127.0.0.1:23456` does neither under it. Its own numbers must
then be torchrun's, or the ranks join the wrong group.""",
    fix="The rewrites above; the rest of the script (its DDP wrap, its samplers, its rank-0 saves) stays as it was.",
    fix_safety="""
Safe for the shapes it accepts: under `torchrun --nproc_per_node=N` every rewritten number is
what `mp.spawn(..., nprocs=N)` gave (LOCAL_RANK is the process index, LOCAL_WORLD_SIZE is
nprocs), and a one-machine worker refuses to start on several. Two things change on purpose: a
plain `python train.py` now trains in one process (a world of one) instead of spawning one per GPU,
and the command-line options of the old rendezvous (`--dist-url`, `--world-size`, `--rank`) are
still parsed but no longer used.""",
    fixable=True,
    examples=(
        Example(
            id="tutorial-setup",
            options=(("spawn", True),),
            before=_TUTORIAL,
            after='''import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group("gloo")
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def train(rank, world_size):
    setup(rank, world_size)
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if int(os.environ.get("WORLD_SIZE", 1)) != int(os.environ.get("LOCAL_WORLD_SIZE", 1)):  # `train` takes its process index for its rank
        raise SystemExit("train() was written for one machine (its process index is its rank): run it with torchrun --standalone")
    train(local_rank, world_size)
''',
        ),
        Example(
            id="rank-from-the-process-index",
            options=(("spawn", True),),
            before='''import argparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group(backend="gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * args.world_size)
    model(torch.randn(args.batch_size // ngpus_per_node, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=1, help="number of machines")
    parser.add_argument("--rank", type=int, default=0, help="this machine's rank")
    parser.add_argument("--dist-url", default="tcp://127.0.0.1:23456")
    parser.add_argument("--batch-size", type=int, default=64, help="the batch of one machine")
    args = parser.parse_args()
    ngpus_per_node = torch.cuda.device_count()
    args.world_size = ngpus_per_node * args.world_size
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
''',
            after='''import argparse

import torch
import torch.distributed as dist
import os


def main_worker(gpu, ngpus_per_node, args):
    args.rank = int(os.environ.get("RANK", 0))
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend="gloo")
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend="gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * args.world_size)
    model(torch.randn(args.batch_size // ngpus_per_node, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=1, help="number of machines")
    parser.add_argument("--rank", type=int, default=0, help="this machine's rank")
    parser.add_argument("--dist-url", default="tcp://127.0.0.1:23456")
    parser.add_argument("--batch-size", type=int, default=64, help="the batch of one machine")
    args = parser.parse_args()
    ngpus_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    args.world_size = int(os.environ.get("WORLD_SIZE", 1))
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    try:
        main_worker(local_rank, ngpus_per_node, args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(id="without-the-flag", before=_TUTORIAL, fires=False),
    ),
)

# A worker written for one machine (its process index is its rank) stops on several.
ONE_MACHINE = """\
if int(os.environ.get("WORLD_SIZE", 1)) != int(os.environ.get("LOCAL_WORLD_SIZE", 1)):  # `{worker}` takes its process index for its rank
\traise SystemExit("{worker}() was written for one machine (its process index is its rank): run it with torchrun --standalone")
"""
_INDEX_NAMES = ("local_rank", "process_index", "torchrun_local_rank")


def plan(facts: ScriptFacts, plan: Plan) -> None:
    found = spawn_facts(facts) if plan.spawn else None
    if found is None:
        return
    for decline in found.declines:
        line, col = facts.line_col(decline.node)
        plan.diagnostics.append(Diagnostic(SPAWN_NOT_MIGRATED.code, line, col, f"mp.spawn script left as it is: {decline.reason}"))
    site = found.site
    if site is not None and facts.distributed is not None and facts.distributed.legacy is not None:
        # Its --local_rank still picks the device (DDP005/DDP020 edit the same setup): one owner.
        line, col = facts.line_col(site.call)
        plan.diagnostics.append(Diagnostic(SPAWN_NOT_MIGRATED.code, line, col, "mp.spawn script left as it is: it is "
                                           "written for torch.distributed.launch too (its --local_rank picks the device)"))
        return
    if site is None:
        return
    # First: a statement that becomes the first of its block loses its blank lines before the
    # other edits of this rule rewrite it.
    for statement in site.environment:
        _drop(facts, plan, statement, site.environment)
        _change(facts, plan, statement, "rendezvous variable set by hand dropped: torchrun sets it")
    _direct_call(facts, plan, site)
    _init_from_environment(facts, plan, site)
    for rebinding in site.rebindings:
        value = cst.parse_expression(rebinding.value)
        plan.replace(rebinding.statement, lambda statement, v=value: _assign(statement, v))
        _change(facts, plan, rebinding.statement,
                f"{rebinding.what} `{rebinding.target}` is torchrun's {rebinding.variable} now")
    if facts.names.os_import_needed:
        plan.need_import("os")
    plan.unused_imports.extend(site.imports)


def _direct_call(facts: ScriptFacts, plan: Plan, site) -> None:
    taken = facts.local_names.get(site.scope, frozenset())
    index = next(name for name in _INDEX_NAMES if name not in taken)
    text = LOCAL_RANK_COMMENT + LOCAL_RANK.replace("local_rank", index)
    if site.one_machine:
        text += ONE_MACHINE.format(worker=site.worker)
    setup = _build.statements(facts, text)
    call = _build.statements(facts, f"{site.worker}({', '.join((index, *site.arguments))})\n")[0]
    final = None if facts.has_destroy_process_group else _build.statements(facts, DESTROY_IF_INITIALIZED, dist=_dist(facts, plan, site))

    def replace(statement):
        direct = statement.with_changes(body=call.body, leading_lines=())
        if final is not None:
            direct = _try_finally(direct, final)
        first = setup[0].with_changes(leading_lines=[*statement.leading_lines, *setup[0].leading_lines])
        return cst.FlattenSentinel([first, *setup[1:], direct])

    plan.replace(site.statement, replace)
    where = " (one machine only: its process index is its rank)" if site.one_machine else ""
    _change(facts, plan, site.call, f"mp.spawn({site.worker}, ...) is a direct call: torchrun starts the processes, "
                                    f"this one is number LOCAL_RANK{where}")
    if final is not None:
        _change(facts, plan, site.call, "process group destroyed when the worker returns (try/finally)")


def _init_from_environment(facts: ScriptFacts, plan: Plan, site) -> None:
    arguments = ", ".join(site.init_arguments)
    world_of_one = ", ".join((*site.init_arguments, WORLD_OF_ONE.format(dist=_dist(facts, plan, site))))
    init = _build.statements(facts, INIT, init=code_of(site.init.func), arguments=arguments, world_of_one=world_of_one)

    def replace(statement):
        first = init[0].with_changes(leading_lines=[*statement.leading_lines, *init[0].leading_lines])
        return cst.FlattenSentinel([first, *init[1:]])

    plan.replace(site.init_statement, replace)
    dropped = f"; {site.init_method} is no longer used" if site.init_method and not site.init_method.startswith(("'", '"')) else ""
    _change(facts, plan, site.init, "init_process_group reads torchrun's RANK and WORLD_SIZE, a world of one without "
                                    f"torchrun{dropped}")


def _dist(facts: ScriptFacts, plan: Plan, site) -> str:
    """How to spell torch.distributed for HashStore: as the worker's own init_process_group does."""
    func = site.init.func
    if isinstance(func, cst.Attribute):
        return code_of(func.value)
    if facts.names.dist_import_needed:
        plan.need_import("torch.distributed", asname="dist")
    return facts.names.dist


def _assign(statement: cst.SimpleStatementLine, value: cst.BaseExpression) -> cst.SimpleStatementLine:
    small = statement.body[0]
    target = small.targets[0].target if isinstance(small, cst.Assign) else small.target
    return statement.with_changes(body=[cst.Assign(targets=[cst.AssignTarget(target=target)], value=value)])


def _drop(facts: ScriptFacts, plan: Plan, statement: cst.SimpleStatementLine, dropped) -> None:
    """Remove the statement; `if "MASTER_PORT" not in os.environ:` with nothing else in it goes too.
    The statement left first in its block loses the blank lines above it."""
    block = facts.parents.get(statement)
    holder = facts.parents.get(block)
    alone = isinstance(block, cst.IndentedBlock) and len(block.body) == 1
    if alone and isinstance(holder, cst.If) and holder.orelse is None:
        plan.replace(holder, lambda _: cst.RemovalSentinel.REMOVE)
        return
    if alone:
        plan.replace(statement, lambda s: s.with_changes(body=[cst.Pass()]))
        return
    plan.replace(statement, lambda _: cst.RemovalSentinel.REMOVE)
    body = list(block.body)
    position = body.index(statement)
    kept = [s for s in body if s not in dropped]
    if kept and all(s in dropped for s in body[:position]) and body.index(kept[0]) == position + 1:
        plan.replace(kept[0], _without_blank_lines)


def _without_blank_lines(statement):
    lines = list(statement.leading_lines)
    while lines and lines[0].comment is None:
        lines.pop(0)
    return statement.with_changes(leading_lines=lines)


def _change(facts: ScriptFacts, plan: Plan, node, message: str) -> None:
    line, col = facts.line_col(node)
    plan.changes.append(Change(RULE.code, line, col, message))
