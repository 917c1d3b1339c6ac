"""DDP026: a random split of the data is drawn the same on every rank."""
from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from migrator.analysis import ScriptFacts, SplitDraw, code_of
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.advisories import SPLIT_NOT_SHARED
from migrator.rules.process_group import needs_setup
from migrator.types import Change, Diagnostic

RULE = Rule(
    code="DDP026",
    name="shared-split",
    summary="a random split of the data is drawn apart on each rank: seed that one draw with a value every rank shares",
    what="""
A random draw that decides which samples a DataLoader reads (`random_split(ds, [n1, n2])`,
`torch.randperm(n)` then `Subset`, `np.random.permutation(n)`, `np.random.shuffle(idx)`,
`random.shuffle(indices)`, sklearn's `train_test_split`), when nothing seeds its generator on
every path to it (`torch.manual_seed(args.seed)`, `np.random.seed(...)`, `random.seed(...)`, or a
function of the file that calls one, before it), gets a generator of its own with a fixed seed:
`random_split(ds, lens, generator=torch.Generator().manual_seed(0))`,
`torch.randperm(n, generator=torch.Generator().manual_seed(0))`,
`np.random.RandomState(0).permutation(n)`, `random.Random(0).shuffle(indices)`,
`train_test_split(..., random_state=0)`. The draw counts when its result reaches a loader's
dataset: through names, slices, `.tolist()`, `Subset(...)`, the file's functions' arguments and
returns. A draw whose generator is seeded first, or handed its own, is left as it is.""",
    why="""
Under torchrun every rank runs the script in a process of its own, and an unseeded generator
starts from a different state in each: each rank draws its own split. The DistributedSampler then
shards a different training set on every rank, so some samples are trained on twice an epoch and
others never, and one rank's validation samples are another rank's training samples. Nothing
fails; the metrics are quietly wrong.""",
    fix="Give that one draw a generator (or a seed) of its own, seeded with 0: the same split on every rank.",
    fix_safety="""
Safe for DDP, and nothing else in the script draws differently: the global generators are left
alone, so weights, dropout and augmentation stay as random as before. The split itself is now the
same from run to run (seed 0), where it changed with every run before; change the 0 to draw
another. A draw the tool cannot give a generator of its own (a function imported by its bare name,
`from numpy.random import permutation`) is reported (DDP126).""",
    requires=("DDP001",),  # a seed for the ranks of a migrated script: alone, it would change a script that stays one process
    fixable=True,
    per_site=True,
    examples=(
        Example(
            id="random-split-unseeded",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset, random_split


def main():
    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
    train_set, val_set = random_split(full, [64, 16])
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            val = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in val_loader)


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset, random_split
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
    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
    train_set, val_set = random_split(full, [64, 16], generator=torch.Generator().manual_seed(0))
    train_sampler = DistributedSampler(train_set, shuffle=True)
    train_loader = DataLoader(train_set, batch_size=8, sampler=train_sampler)
    val_loader = DataLoader(val_set, batch_size=8)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        train_sampler.set_epoch(epoch)
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            val = sum(torch.nn.functional.mse_loss(model(x), y) for x, y in val_loader)


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="seeded-first-in-main",
            before='''import argparse

import torch
from torch.utils.data import DataLoader, Subset, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)  # every rank draws the same permutation below
    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
    order = torch.randperm(len(full))
    loader = DataLoader(Subset(full, order[:64]), batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import argparse

import torch
from torch.utils.data import DataLoader, Subset, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(args.seed)  # every rank draws the same permutation below
    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
    order = torch.randperm(len(full))
    dataset = Subset(full, order[:64])
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            fires=False,
            diagnostics=("DDP120",),
        ),
        Example(
            id="numpy-shuffle-torch-seeded",
            before='''import numpy as np
import torch
from torch.utils.data import DataLoader, Subset, TensorDataset


def split(dataset, n_train):
    indices = list(range(len(dataset)))
    np.random.shuffle(indices)  # torch.manual_seed does not seed numpy's generator
    return Subset(dataset, indices[:n_train])


def main():
    torch.manual_seed(0)
    loader = DataLoader(split(TensorDataset(torch.randn(80, 4), torch.randn(80, 1)), 64), batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import numpy as np
import torch
from torch.utils.data import DataLoader, Subset, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def split(dataset, n_train):
    indices = list(range(len(dataset)))
    np.random.RandomState(0).shuffle(indices)  # torch.manual_seed does not seed numpy's generator
    return Subset(dataset, indices[:n_train])


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
    dataset = split(TensorDataset(torch.randn(80, 4), torch.randn(80, 1)), 64)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP120",),
        ),
    ),
)


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    for draw in facts.split_draws:
        line, col = facts.line_col(draw.call)
        spelled = code_of(draw.call.func)
        loaders = ", ".join(loader.target or "a loader" for loader in draw.loaders)
        rewrite = _seeded(facts, draw)
        if rewrite is None:
            plan.diagnostics.append(Diagnostic(SPLIT_NOT_SHARED.code, line, col, (
                f"{spelled}(...) decides what {loaders} read{'s' if len(draw.loaders) == 1 else ''} and is drawn "
                f"apart on each rank; {SPLIT_NOT_SHARED.summary}")))
            continue
        plan.replace(draw.call, rewrite)
        if facts.names.torch_import_needed and draw.draw.keyword == "generator":
            plan.need_import("torch")
        plan.changes.append(Change(RULE.code, line, col, (
            f"{spelled}(...) drawn from a generator of its own seeded with 0: the same split of {loaders} on every rank")))


def _seeded(facts: ScriptFacts, draw: SplitDraw) -> Optional[Callable[[cst.Call], cst.Call]]:
    """How the draw's call becomes one from a generator of its own, or None where it cannot."""
    if any(loader.dataset is not None and not isinstance(loader.dataset, (cst.Name, cst.Attribute))
           and facts.inside(draw.call, loader.dataset) and loader.training for loader in facts.loaders):
        return None  # built inside the loader's call: the sampler rule builds that dataset anew
    row = draw.draw
    if row.keyword == "generator":
        value = f"{facts.names.torch}.Generator().manual_seed(0)"
        return lambda call: _build.with_keyword(call, row.keyword, value)  # type: ignore[arg-type]
    if row.keyword is not None:
        return lambda call: _build.with_keyword(call, row.keyword, "0")  # type: ignore[arg-type]
    func = draw.call.func
    module = draw.qname.rpartition(".")[0]
    if row.instance is None or not isinstance(func, cst.Attribute) or facts.resolve(func.value) != module:
        return None  # `from numpy.random import permutation`: no module spelled to build a generator from
    seeded = cst.Call(cst.Attribute(func.value, cst.Name(row.instance)), [cst.Arg(cst.Integer("0"))])
    return lambda call: call.with_changes(func=call.func.with_changes(value=seeded))
