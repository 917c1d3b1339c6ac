"""DDP023: `--eval sharded`: each rank evaluates its own part of an evaluation loader, and the
sums the metric is computed from are all-reduced, so the printed metric is the single-process one.

By default (`--eval replicated`) evaluation loaders stay whole: every rank evaluates the full set
(N times the work) and the metrics are right without a change. `--eval sharded` splits the work:
the loader reads `range(rank, len(dataset), world_size)` (disjoint, covering, and unlike a
DistributedSampler never padded with repeated samples), and right after the evaluation loop the
accumulated sums (`test_loss += ....item()`, `correct += ....item()`, `total += y.size(0)`) are
all-reduced, so everything computed from them afterwards (an average, an accuracy, a best-so-far
comparison) is the whole set's, on every rank.
"""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from migrator.analysis import LoaderFact, ScriptFacts, code_of
from migrator.edits import Plan
from migrator.names import attribute_name
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules import sampler as _sampler_rule
from migrator.rules.process_group import needs_setup
from migrator.rules.sampler import RULE as SAMPLER
from migrator.tree import descendants
from migrator.types import Change, Diagnostic

SHARDED = "sharded"

RULE = Rule(
    code="DDP023",
    name="eval-sharded-reduce",
    summary="--eval sharded: an evaluation loader is split over the ranks and its metric sums are all-reduced",
    what="""
With `--eval sharded` (or `eval = "sharded"` in [tool.ddp-migrate]), an evaluation DataLoader (one
that no backward pass or optimizer step reads) iterated in a loop under `torch.no_grad()` gets
`sampler=range(dist.get_rank(), len(dataset), dist.get_world_size())`, and the numbers that loop
adds up (`name += <...>.item()`, `name += x.size(0)`, `len(...)`, a constant) are all-reduced
right after it. A data set built inside the call (`DataLoader(make_set(72), batch_size=36)`) is
built once before the loader, so the range and the loader read the same one. The default,
`--eval replicated`, leaves evaluation loaders whole.""",
    why="""
Replicated evaluation repeats the whole validation set on every rank: N times the work for the
same numbers. Sharded evaluation without the all-reduce would print each rank's partial metric;
with a DistributedSampler it would also count the samples it repeats to pad the last shard.""",
    fix="""
`sampler=range(rank, len(ds), world_size)`, then after the loop
`reduced = torch.tensor([float(a), float(b)], dtype=torch.float64); dist.all_reduce(reduced)` and
each sum read back with its own type.""",
    fix_safety="""
Safe where it applies: the sums are exact (float64), the shards neither overlap nor pad, and the
forward passes run under no_grad, where DDP does no collective (the ranks may run a different
number of them). Left whole, and reported, when the loop keeps per-sample outputs
(`preds.append(...)`, a metric object), adds up something that is not a number (`x.sum()` without
`.item()`), or does not run under no_grad.""",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="sharded-metric",
            before='''import json

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    model.eval()
    total_loss = 0.0
    correct = 0
    seen = 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total_loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(dim=1) == y).sum().item()
            seen += y.size(0)
    return total_loss / seen, correct / seen


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    train_set = TensorDataset(torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g))
    val_set = TensorDataset(torch.randn(37, 6, generator=g), torch.randint(0, 3, (37,), generator=g))
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=8)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss, accuracy = evaluate(model, val_loader)
    with open("metrics.json", "w") as f:
        json.dump({"loss": loss, "accuracy": accuracy}, f)
    for epoch in range(1):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    print("after training:", evaluate(model, val_loader))


if __name__ == "__main__":
    main()
''',
            after='''import json

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def evaluate(model, loader):
    model.eval()
    total_loss = 0.0
    correct = 0
    seen = 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total_loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(dim=1) == y).sum().item()
            seen += y.size(0)
        reduced = torch.tensor([float(total_loss), float(correct), float(seen)], dtype=torch.float64)
        dist.all_reduce(reduced)  # every rank's shard summed: the metric covers the whole set
        total_loss, correct, seen = (int(r) if isinstance(v, int) and r.is_integer() else r for v, r in zip((total_loss, correct, seen), reduced.tolist()))
    return total_loss / seen, correct / seen


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
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    train_set = TensorDataset(torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g))
    val_set = TensorDataset(torch.randn(37, 6, generator=g), torch.randint(0, 3, (37,), generator=g))
    train_sampler = DistributedSampler(train_set, shuffle=True)
    train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=8, sampler=range(dist.get_rank(), len(val_set), dist.get_world_size()))
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss, accuracy = evaluate(model, val_loader)
    is_main = dist.get_rank() == 0
    if is_main:
        with open("metrics.json", "w") as f:
            json.dump({"loss": loss, "accuracy": accuracy}, f)
    for epoch in range(1):
        train_sampler.set_epoch(epoch)
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    evaluate_result = evaluate(model, val_loader)
    if is_main:
        print("after training:", evaluate_result)


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            options=(("eval", "sharded"),),
        ),
        Example(
            id="replicated-by-default",
            before=SAMPLER.examples[0].before,  # without --eval sharded, the evaluation loader stays whole
            after=SAMPLER.examples[0].after,
            fires=False,
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if plan.eval != SHARDED or not needs_setup(facts):
        return
    for loader in facts.loaders:
        if loader.training or loader.problem is not None or loader.target is None or not facts.after_setup(loader.call):
            continue
        found = _evaluation(facts, loader)
        if isinstance(found, str):
            line, col = facts.line_col(loader.call)
            plan.diagnostics.append(Diagnostic(RULE.code, line, col, (
                f"{loader.target}: left whole (every rank evaluates all of it) under --eval sharded: {found}")))
            continue
        loop, sums = found
        _shard(facts, plan, loader, loop, sums)


def _evaluation(facts: ScriptFacts, loader: LoaderFact):
    """(the loop, the sums it accumulates), or why the loader is left whole."""
    if any(arg.keyword is not None and arg.keyword.value in ("sampler", "batch_sampler") for arg in loader.call.args):
        return "it has its own sampler"
    if loader.shuffle is not None and not (isinstance(loader.shuffle.value, cst.Name) and loader.shuffle.value.value == "False"):
        return "it shuffles"
    if loader.dataset is None:
        return "its data set is not given as the first argument or `dataset=`"
    loops = _loops_over(facts, loader.target)
    if len(loops) != 1:
        return "it is not iterated by exactly one loop of this file"
    loop = loops[0]
    if not _under_no_grad(facts, loop):
        return "its loop does not run under torch.no_grad() (DDP could wait for the other ranks in the forward)"
    sums: List[str] = []
    for node in descendants(loop.body, (cst.AugAssign, cst.Call)):
        if isinstance(node, cst.Call) and attribute_name(node.func) in ("append", "extend", "update", "add_batch", "add"):
            return f"the loop keeps per-sample results (`{code_of(node.func)}(...)`), which an all-reduce of sums cannot combine"
        if isinstance(node, cst.AugAssign):
            if not isinstance(node.target, cst.Name) or not isinstance(node.operator, cst.AddAssign) or not _a_number(node.value):
                return f"`{code_of(node)}` is not a sum of numbers the tool can all-reduce"
            if node.target.value not in sums:
                sums.append(node.target.value)
    if not sums:
        return "its loop adds nothing up (no `name += ....item()`) that an all-reduce could combine"
    assigned_before = _assigned_before(facts, loop)
    if not set(sums) <= assigned_before:
        return "a sum is not set before the loop in the same function"
    return loop, sums


def _shard(facts: ScriptFacts, plan: Plan, loader: LoaderFact, loop: cst.For, sums: List[str]) -> None:
    dist = facts.names.dist
    dataset = code_of(loader.dataset)
    if not isinstance(loader.dataset, (cst.Name, cst.Attribute)):
        # `DataLoader(make_set(72), batch_size=36)`: built once, before the loader, so the shard's
        # range and the loader read the same data set (as the training loaders' sampler does).
        base = (loader.target or "loader").split(".")[-1]
        stem = next((base[: -len(s)] for s in ("dataloader", "loader", "dl") if base.endswith(s) and base != s), f"{base}_")
        dataset = _sampler_rule.free_name(f"{stem}dataset", facts, loader)
        statements = _build.statements(facts, f"{dataset} = {code_of(loader.dataset)}\n".replace("{", "{{").replace("}", "}}"))
        statements[0] = statements[0].with_changes(leading_lines=loader.statement.leading_lines)
        plan.insert_before(loader.statement, statements)
        plan.replace(loader.statement, lambda statement: statement.with_changes(leading_lines=()))
        plan.replace(loader.dataset, lambda _, name=dataset: cst.Name(name))
    sampler = f"range({dist}.get_rank(), len({dataset}), {dist}.get_world_size())"
    plan.replace(loader.call, lambda call: _with_range_sampler(call, sampler))
    if loader.kwargs_dict is not None:
        # `test_kwargs.update(cuda_kwargs)` may bring `"shuffle": True`, which DataLoader refuses next to a sampler.
        pop = f'{loader.kwargs_dict}.pop("shuffle", None)  # the shard decides the order\n'
        plan.insert_before(loader.statement, _build.statements(facts, pop.replace("{", "{{").replace("}", "}}")))
    taken = facts.local_names.get(facts.owner_of(loop), frozenset())
    reduced = next(n for n in ("reduced", "reduced_sums", "ddp_reduced") if n not in taken)
    values = ", ".join(f"float({s})" for s in sums)
    targets = ", ".join(sums) + ("," if len(sums) == 1 else "")
    text = (
        f"{reduced} = {facts.names.torch}.tensor([{values}], dtype={facts.names.torch}.float64)\n"
        f"{dist}.all_reduce({reduced})  # every rank's shard summed: the metric covers the whole set\n"
        f"{targets} = (int(r) if isinstance(v, int) and r.is_integer() else r for v, r in zip(({targets}), {reduced}.tolist()))\n"
    )
    plan.insert_after(loop, _build.statements(facts, text.replace("{", "{{").replace("}", "}}")))
    line, col = facts.line_col(loader.call)
    plan.changes.append(Change(RULE.code, line, col, (
        f"{loader.target} evaluated in shards (--eval sharded), {', '.join(sums)} all-reduced after its loop")))


def _with_range_sampler(call: cst.Call, sampler: str) -> cst.Call:
    args = [arg for arg in call.args if not (arg.keyword is not None and arg.keyword.value == "shuffle")]
    new = _build.keyword_arg("sampler", cst.parse_expression(sampler))
    star = next((i for i, arg in enumerate(args) if arg.star == "**"), None)
    if star is not None:
        args.insert(star, new.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))))
    else:
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(new)
    return call.with_changes(args=args)


def _loops_over(facts: ScriptFacts, target: str) -> List[cst.For]:
    """Loops over the loader: by its name, and in this file's functions it is passed to
    (`evaluate(model, val_loader)` loops over its parameter `loader`)."""
    loops = [loop for loop in facts.loops if isinstance(loop, cst.For)]
    names = {target, target.split(".")[-1]}
    found = [loop for loop in loops if _iterated(loop.iter) in names]
    functions = {fn.name.value: fn for fn in facts.functions}
    for call in facts.calls:
        fn = functions.get(call.func.value) if isinstance(call.func, cst.Name) else None
        if fn is None:
            continue
        params = [p.name.value for p in fn.params.params]
        for index, arg in enumerate(call.args):
            if code_of(arg.value) not in names:
                continue
            param = arg.keyword.value if arg.keyword is not None else (params[index] if index < len(params) else None)
            found += [loop for loop in loops if param is not None and _iterated(loop.iter) == param and facts.inside(loop, fn)]
    unique: List[cst.For] = []
    for loop in found:
        if not any(loop is seen for seen in unique):
            unique.append(loop)
    return unique


def _iterated(node: cst.BaseExpression) -> Optional[str]:
    while isinstance(node, cst.Call) and code_of(node.func) in ("enumerate", "tqdm", "tqdm.tqdm") and node.args:
        node = node.args[0].value
    return code_of(node) if isinstance(node, (cst.Name, cst.Attribute)) else None


def _under_no_grad(facts: ScriptFacts, loop: cst.For) -> bool:
    for node in _ancestors(facts, loop):
        if isinstance(node, cst.With) and any(
            (code_of(item.item.func) if isinstance(item.item, cst.Call) else code_of(item.item)).endswith(("no_grad", "inference_mode"))
            for item in node.items
        ):
            return True
        if isinstance(node, cst.FunctionDef) and any(code_of(d.decorator).split("(")[0].endswith(("no_grad", "inference_mode")) for d in node.decorators):
            return True
    return False


def _ancestors(facts: ScriptFacts, node: cst.CSTNode):
    current = facts.parents.get(node)
    while current is not None:
        yield current
        current = facts.parents.get(current)


def _a_number(value: cst.BaseExpression) -> bool:
    """`....item()`, `x.size(0)`, `x.shape[0]`, `len(...)`, a constant, and sums/products of those."""
    if isinstance(value, (cst.Integer, cst.Float)):
        return True
    if isinstance(value, cst.BinaryOperation):
        return _a_number(value.left) and _a_number(value.right)
    if isinstance(value, cst.Call):
        name = attribute_name(value.func) or (value.func.value if isinstance(value.func, cst.Name) else "")
        return name in ("item", "size", "len", "numel", "float", "int")
    if isinstance(value, cst.Subscript):
        return code_of(value.value).endswith(".shape")
    return False


def _assigned_before(facts: ScriptFacts, loop: cst.For) -> Set[str]:
    """Names given a value in the loop's block (and the blocks around it) before the loop."""
    names: Set[str] = set()
    node: cst.CSTNode = loop
    for parent in _ancestors(facts, loop):
        if isinstance(parent, (cst.IndentedBlock, cst.Module)):
            for statement in parent.body:
                if statement is node:
                    break
                for assign in descendants(statement, cst.AssignTarget):
                    names |= {n.value for n in descendants(assign.target, cst.Name)}
        if isinstance(parent, cst.FunctionDef):
            break
        node = parent
    return names
