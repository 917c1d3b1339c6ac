"""DDP012 / DDP013: one writer per checkpoint, one voice in the log: rank 0 only.

Guards go around statements, never around code every rank must run: a checkpoint helper
(`save_checkpoint(state, is_best)`) is guarded at its call sites only when it holds no loop,
no backward/step and no collective; otherwise the `torch.save` inside it is guarded.
"""
from __future__ import annotations


import libcst as cst

from migrator import names as N
from migrator.analysis import ScriptFacts
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.process_group import needs_setup
from migrator.rules.advisories import SAVE_AFTER_TEARDOWN, SHARED_WORK_IN_SAVE
from migrator.types import Change, Diagnostic
from migrator.tree import descendants, on_rank_zero_only

CHECKPOINT = Rule(
    code="DDP012",
    name="rank-zero-checkpoint",
    summary="write checkpoints on rank 0 only",
    what="""
Guards every `torch.save(...)` (and `np.save`, `json.dump`, `pickle.dump` of results, sample
images written with `torchvision.utils.save_image` or `plt.savefig`, `torch.onnx.export`) with
`if dist.get_rank() == 0:`; a checkpoint helper such as
`save_checkpoint(state, is_best)` is guarded at its call sites (so its `shutil.copyfile` of the
best model runs with it), a `with open(path, "wb") as f: torch.save(model, f)` as a whole.
A save in the main guard after the training call returns (`model = main(); torch.save(...)`),
when the process group is already destroyed, takes the rest of the guard with it: everything after
training runs under `if int(os.environ.get("RANK", 0)) == 0:`, so the file is written once and
read back only by the rank that wrote it.""",
    why="""
Every rank holds the same weights after DDP's gradient sync, so N writers produce N concurrent
writes of one file: at best wasted I/O, at worst a truncated or interleaved checkpoint.""",
    fix="Wrap the write in `if dist.get_rank() == 0:` (neighbouring guarded statements share one).",
    fix_safety="Safe: no collective runs inside the guarded code.",
    requires=('DDP001',),
    per_site=True,
    fixable=True,
    examples=(
        Example(
            id="checkpoint-helper",
            before='''import shutil

import torch


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        save_checkpoint({"epoch": epoch, "state_dict": model.state_dict()}, is_best=True)


if __name__ == "__main__":
    main()
''',
            after='''import shutil

import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        if dist.get_rank() == 0:
            save_checkpoint({"epoch": epoch, "state_dict": model.module.state_dict()}, is_best=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
    ),
)

LOGGING = Rule(
    code="DDP013",
    name="rank-zero-logging",
    summary="print per-step and per-epoch progress on rank 0 only",
    what="""
Guards `print(...)`/`logger.info(...)`/`writer.add_scalar(...)` statements, and `with open(log,
"a")` blocks that only write values at hand to the file (`log.write(...)`, a csv writer's
`writerow`), in epoch loops and in the functions that loop over loaders with
`if dist.get_rank() == 0:`, and gives tqdm progress bars
`disable=dist.get_rank() != 0` (the loop itself must still run on every rank). An experiment
tracker's run, `wandb.init(...)`, gets `mode=None if dist.get_rank() == 0 else "disabled"`: one run
on the dashboard, rank 0's, with the mode it had; the other ranks get a disabled run, whose `log()`
and `config.update()` do nothing, so the code that uses it needs no guard (a call that takes
`**kwargs`, which may hold a mode of its own, is left as it is). A print whose
arguments run the model or a collective (`print("accuracy", test(model, loader))`) has those calls
computed first, on every rank, into a name of their own (`test_result = test(model, loader)`), and
rank 0 prints it; one whose shared call runs lazily or only sometimes (in a lambda, a
comprehension, `a if c else b`) stays unguarded (every rank must take part).""",
    why="""N ranks print N interleaved copies of every line, and the log stops being readable; every
rank's `wandb.init()` is a run of its own on the dashboard, N - 1 of them copies.""",
    fix="Wrap the print in `if dist.get_rank() == 0:`.",
    fix_safety="Safe; rank 0's numbers describe its own shard until metrics are all-reduced (see the summary).",
    requires=('DDP001',),
    per_site=True,
    fixable=True,
    examples=(
        Example(
            id="experiment-run-on-rank-zero",
            before='''import torch
import wandb
from torch.utils.data import DataLoader, TensorDataset


def main():
    run = wandb.init(project="demo", config={"lr": 0.1})
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)
    for epoch in range(2):
        for (x,) in loader:
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
        run.log({"epoch": epoch, "loss": loss.item()})
    run.finish()


if __name__ == "__main__":
    main()
''',
            after='''import torch
import wandb
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
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    run = wandb.init(project="demo", config={"lr": 0.1}, mode=None if dist.get_rank() == 0 else "disabled")
    model = torch.nn.Linear(4, 2)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    dataset = TensorDataset(torch.randn(16, 4))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
        if dist.get_rank() == 0:
            run.log({"epoch": epoch, "loss": loss.item()})
    run.finish()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="score-printed-from-the-call",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def test(model, loader):
    with torch.no_grad():
        return sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in loader)


def main():
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        print("epoch", epoch, "loss", test(model, loader))


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def test(model, loader):
    with torch.no_grad():
        return sum(torch.nn.functional.mse_loss(model(x), y).item() for x, y in loader)


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        test_result = test(model, loader)
        if dist.get_rank() == 0:
            print("epoch", epoch, "loss", test_result)


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="csv-log-file",
            before='''import csv

import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with open("log.csv", "w") as log_file:
        csv.writer(log_file).writerow(["epoch", "loss"])
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        with open("log.csv", "a") as log_file:
            writer = csv.writer(log_file)
            writer.writerow([epoch, loss.item()])


if __name__ == "__main__":
    main()
''',
            after='''import csv

import torch
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
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    dataset = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    is_main = dist.get_rank() == 0
    if is_main:
        with open("log.csv", "w") as log_file:
            csv.writer(log_file).writerow(["epoch", "loss"])
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        if is_main:
            with open("log.csv", "a") as log_file:
                writer = csv.writer(log_file)
                writer.writerow([epoch, loss.item()])


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP120",),
        ),
        Example(
            id="epoch-print",
            before='''import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters())
    for epoch in range(3):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}")
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

if __name__ == "__main__":
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.Adam(model.parameters())
    try:
        for epoch in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            if dist.get_rank() == 0:
                print(f"epoch {epoch}: loss {loss.item():.4f}")
    finally:
        dist.destroy_process_group()
''',
        ),
    ),
)


def condition(facts: ScriptFacts) -> str:
    return f"{facts.names.dist}.get_rank() == 0"


def plan_checkpoints(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    after_teardown: list = []
    for site in facts.saves:
        if site.in_lambda is not None and site.shared is None:
            _lambda_on_rank_zero(facts, plan.site(), site.in_lambda)
            continue
        if site.shared is not None:
            line, col = facts.line_col(site.shared)
            plan.diagnostics.append(Diagnostic(SHARED_WORK_IN_SAVE.code, line, col, SHARED_WORK_IN_SAVE.summary))
            continue
        guard = site.guard
        if site.inner is not None and not all(facts.after_setup(s) for s in guard):
            guard = (site.inner,)  # the helper is called before the setup too: guard the write inside it
        tail = _teardown_tail(facts)
        for statement in guard:
            if any(statement is top or _inside(facts, statement, top) for top in tail):
                after_teardown.append(statement)
                continue
            if plan.guarded(statement) or not facts.after_setup(statement):
                continue
            # Each statement stands alone: suppressing one (a file each rank writes for itself)
            # leaves the others on rank 0.
            alone = plan.site()
            alone.guard(statement, condition(facts))
            line, col = facts.line_col(statement)
            writes = any(call is site.call for call in descendants(statement, cst.Call))
            what = "checkpoint written" if writes or site.inner is not None else "checkpoint files managed (removed, copied)"
            alone.changes.append(Change(CHECKPOINT.code, line, col, f"{what} on rank 0 only"))
    if after_teardown:
        _post_training_on_rank_zero(facts, plan.site(), after_teardown)
    for statement in facts.reads_after_write:
        if not facts.after_setup(statement):
            continue
        # The file is rank 0's now: nobody reads it back before rank 0 has finished writing it.
        alone = plan.site()
        alone.insert_before(statement, _build.statements(facts, f"{facts.names.dist}.barrier()\n"))
        line, col = facts.line_col(statement)
        alone.changes.append(Change(CHECKPOINT.code, line, col, "barrier before reading back rank 0's checkpoint"))


def _lambda_on_rank_zero(facts: ScriptFacts, plan: Plan, holder: cst.Lambda) -> None:
    """`save = lambda epoch: torch.save(...)`: the lambda stays defined on every rank (it is called
    on every rank), its body writes on rank 0 only."""
    test = f"{facts.names.dist}.get_rank() == 0" if facts.after_setup(holder) else ENV_RANK_ZERO
    plan.replace(holder.body, lambda updated: _build.expression(facts, f"(_ if {test} else None)").with_changes(
        body=updated))
    line, col = facts.line_col(holder)
    plan.changes.append(Change(CHECKPOINT.code, line, col, "checkpoint written on rank 0 only (in the lambda's body)"))


def _teardown_tail(facts: ScriptFacts) -> list:
    """The launch block's statements after the entry call (which destroys the process group on return)."""
    entry = facts.entry
    if entry is None or entry.kind != "function" or entry.call_statement is None:
        return []
    launch = facts.parents.get(entry.call_statement)
    body = list(getattr(launch, "body", ()))
    return body[body.index(entry.call_statement) + 1 :] if entry.call_statement in body else []


def _inside(facts: ScriptFacts, node, container) -> bool:
    parent = facts.parents.get(node)
    while parent is not None:
        if parent is container:
            return True
        parent = facts.parents.get(parent)
    return False


# The process group is gone after the entry call: torchrun's RANK says who is rank 0 (unset: one process).
ENV_RANK_ZERO = 'int(os.environ.get("RANK", 0)) == 0'


def _post_training_on_rank_zero(facts: ScriptFacts, plan: Plan, saves: list) -> None:
    """`model = main(); torch.save(model.state_dict(), path); check = torch.load(path)`: what follows
    training in the launch block (saving, reloading, plotting) runs on rank 0 only. With no process
    group left there is no barrier to order a write and a read, so the whole tail moves together.
    A tail that trains again (calls the entry point) is reported instead (DDP115)."""
    tail = _teardown_tail(facts)
    entry_name = getattr(facts.entry.scope, "name", None)  # type: ignore[union-attr]
    trains_again = entry_name is not None and any(
        isinstance(call.func, cst.Name) and call.func.value == entry_name.value
        for top in tail for call in descendants(top, cst.Call)
    )
    if trains_again:
        for statement in saves:
            line, col = facts.line_col(statement)
            plan.diagnostics.append(Diagnostic(SAVE_AFTER_TEARDOWN.code, line, col, SAVE_AFTER_TEARDOWN.summary))
        return
    for statement in tail:
        plan.guard(statement, ENV_RANK_ZERO)
    line, col = facts.line_col(tail[0])
    plan.changes.append(Change(CHECKPOINT.code, line, col, "what runs after training (saves included) runs on rank 0 only"))


def _in_guarded_helper(facts: ScriptFacts, plan: Plan, statement: cst.CSTNode) -> bool:
    """Is `statement` in a checkpoint helper whose calls run on rank 0 already (plan_checkpoints)?"""
    owner = facts.owner_of(statement)
    return any(
        facts.owner_of(site.inner) is owner and all(plan.guarded(guarded) for guarded in site.guard)
        for site in facts.saves if site.inner is not None and site.guard
    )


def plan_logging(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for statement in facts.log_statements:
        if plan.guarded(statement) or _in_guarded_helper(facts, plan, statement):
            continue
        # Before the setup there is no process group to ask (and after the entry point returns it
        # is gone): torchrun's RANK says who is rank 0 there.
        site = plan.site()  # each print stands alone: suppressing one leaves the others guarded
        site.guard(statement, condition(facts) if facts.after_setup(statement) else ENV_RANK_ZERO)
        line, col = facts.line_col(statement)
        what = "log file written on rank 0 only" if isinstance(statement, cst.With) else "progress printed on rank 0 only"
        site.changes.append(Change(LOGGING.code, line, col, what))
    for statement, values in facts.hoisted_prints:
        if plan.guarded(statement) or _in_guarded_helper(facts, plan, statement):
            continue
        _print_computed_first(facts, plan.site(), statement, values)
    for call in facts.calls_of(N.PROGRESS_BARS):
        if any(arg.keyword is not None and arg.keyword.value == "disable" for arg in call.args) or not facts.after_setup(call):
            continue
        site = plan.site()
        disable = f"{facts.names.dist}.get_rank() != 0"
        site.replace(call, lambda c, disable=disable: _build.with_keyword(c, "disable", disable))
        line, col = facts.line_col(call)
        site.changes.append(Change(LOGGING.code, line, col, "progress bar shown on rank 0 only"))
    for call in facts.calls_of(N.TRACKER_RUNS):
        if not facts.flow.under_rank_check(call):
            _tracker_on_rank_zero(facts, plan.site(), call)


def _tracker_on_rank_zero(facts: ScriptFacts, plan: Plan, call: cst.Call) -> None:
    """`run = wandb.init(...)`: one run on the dashboard, rank 0's; the others get a disabled run
    (their `run.log(...)` does nothing), so the code that uses it needs no guard."""
    on_rank_zero = condition(facts) if facts.after_setup(call) else ENV_RANK_ZERO
    if on_rank_zero_only(call, on_rank_zero) is None:
        return  # `wandb.init(**config)`: its mode may be in there
    plan.replace(call, lambda updated: on_rank_zero_only(updated, on_rank_zero) or updated)
    line, col = facts.line_col(call)
    plan.changes.append(Change(LOGGING.code, line, col, "experiment run started on rank 0 only (the other ranks get a disabled run)"))


def _print_computed_first(facts: ScriptFacts, plan: Plan, statement, values) -> None:
    """`print("accuracy", test(model, val_loader))`: every rank runs `test` (its forward passes
    are collectives under DDP), into a name of its own; rank 0 prints it."""
    taken = set(facts.local_names.get(facts.owner_of(statement), ())) | set(facts.local_names.get(facts.module, ()))
    shown = []
    for value in values:
        name = _build.unbound(_result_name(value), taken)
        taken.add(name)
        plan.compute_first(statement, value, name)
        shown.append(f"`{name}`")
    plan.guard(statement, condition(facts) if facts.after_setup(statement) else ENV_RANK_ZERO)
    line, col = facts.line_col(statement)
    plan.changes.append(Change(LOGGING.code, line, col, (
        f"progress printed on rank 0 only; what it shows is computed first, on every rank ({', '.join(shown)})")))


def _result_name(call: cst.Call) -> str:
    """`test(model, loader)` -> "test_result", `self.evaluate(x)` -> "evaluate_result",
    `model(x).mean().item()` -> "model_result" (named by the call the chain starts with)."""
    while isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Call):
        call = call.func.value
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else "value"
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in name).strip("_")  # `Solver` -> "solver"
    return f"{snake or 'value'}_result"
