"""DDP018: a data set that downloads itself (`download=True`) is downloaded by rank 0 alone."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis import ScriptFacts, Statement
from migrator.edits import Plan
from migrator.rule import Example, Rule
from migrator.rules import _build
from migrator.rules.process_group import needs_setup
from migrator.tree import descendants
from migrator.types import Change

RULE = Rule(
    code="DDP018",
    name="download-once",
    summary="let rank 0 download a data set first; the other ranks wait at a barrier, then read it",
    what="""
Statements that build a data set with `download=True` (torchvision's `CIFAR10(root, download=True)`
and friends) run on rank 0 first: the other ranks wait at `dist.barrier()` before them, rank 0
joins that barrier after them, and then every rank finds the files in place. Consecutive such
statements (train and test sets) share one pair of barriers.""",
    why="""
Under torchrun every rank runs the same code. On the first run each one starts downloading and
extracting the same archive into the same folder: partial files, "File not found or corrupted",
or an extraction that fails half-way on some ranks.""",
    fix="Barrier before the download on ranks other than 0, and after it on rank 0.",
    fix_safety="Safe: every rank passes exactly one barrier; only the order of the downloads changes.",
    requires=('DDP001',),
    fixable=True,
    examples=(
        Example(
            id="torchvision-download",
            before='''import torch
import torchvision
from torch.utils.data import DataLoader


def main():
    train_set = torchvision.datasets.MNIST("data", train=True, download=True)
    test_set = torchvision.datasets.MNIST("data", train=False, download=True)
    loader = DataLoader(train_set, batch_size=8, shuffle=True)
    model = torch.nn.Linear(784, 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x.flatten(1).float()), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
import torchvision
from torch.utils.data import DataLoader
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
    if dist.get_rank() != 0:
        dist.barrier()  # rank 0 downloads the data set first
    train_set = torchvision.datasets.MNIST("data", train=True, download=True)
    test_set = torchvision.datasets.MNIST("data", train=False, download=True)
    if dist.get_rank() == 0:
        dist.barrier()
    sampler = DistributedSampler(train_set, shuffle=True)
    loader = DataLoader(train_set, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(784, 10)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x.flatten(1).float()), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
        ),
        Example(
            id="download-helper",
            before='''import os
import tarfile
import urllib.request

import torch
from torch.utils.data import DataLoader, TensorDataset


def fetch(root):
    urllib.request.urlretrieve("https://example.com/data.tar", "data.tar")
    with tarfile.open("data.tar") as tar:
        tar.extractall(root)


def main(root="data"):
    if not os.path.isdir(root):
        fetch(root)
    loader = DataLoader(TensorDataset(*torch.load(os.path.join(root, "train.pt"))), batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import os
import tarfile
import urllib.request

import torch
from torch.utils.data import DataLoader, TensorDataset
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


def fetch(root):
    urllib.request.urlretrieve("https://example.com/data.tar", "data.tar")
    with tarfile.open("data.tar") as tar:
        tar.extractall(root)


def main(root="data"):
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    if dist.get_rank() != 0:
        dist.barrier()  # rank 0 downloads the data set first
    if not os.path.isdir(root):
        fetch(root)
    if dist.get_rank() == 0:
        dist.barrier()
    dataset = TensorDataset(*torch.load(os.path.join(root, "train.pt")))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
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
        Example(
            id="archive-read-by-the-data-set",
            fires=False,
            before='''import tarfile

import torch
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self, path):
        self.tar = tarfile.open(path)  # read in every process and worker: nothing is written
        self.names = self.tar.getnames()

    def __len__(self):
        return len(self.names)

    def __getitem__(self, index):
        return torch.load(self.tar.extractfile(self.names[index]))


def main():
    loader = DataLoader(Shards("shards.tar"), batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import tarfile

import torch
from torch.utils.data import DataLoader, Dataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler


class Shards(Dataset):
    def __init__(self, path):
        self.tar = tarfile.open(path)  # read in every process and worker: nothing is written
        self.names = self.tar.getnames()

    def __len__(self):
        return len(self.names)

    def __getitem__(self, index):
        return torch.load(self.tar.extractfile(self.names[index]), map_location="cpu")


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
    dataset = Shards("shards.tar")
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


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

BEFORE = "if {dist}.get_rank() != 0:\n\t{dist}.barrier()  # rank 0 downloads the data set first\n"
AFTER = "if {dist}.get_rank() == 0:\n\t{dist}.barrier()\n"


def plan(facts: ScriptFacts, plan: Plan) -> None:
    if not needs_setup(facts):
        return
    statements = [s for s in download_statements(facts) if _in_a_block(facts, s)]
    for run in _consecutive_runs(facts, statements):
        if not all(facts.after_setup(statement) for statement in run):
            continue  # before the process group exists there is no barrier to wait at
        plan.insert_before(run[0], _build.statements(facts, BEFORE, dist=facts.names.dist))
        plan.insert_after(run[-1], _build.statements(facts, AFTER, dist=facts.names.dist))
        line, col = facts.line_col(run[0])
        plan.changes.append(Change(RULE.code, line, col, "data set downloaded by rank 0 first, the others wait"))


def _in_a_block(facts: ScriptFacts, statement: cst.SimpleStatementLine) -> bool:
    return isinstance(facts.parents.get(statement), (cst.Module, cst.IndentedBlock))


def _consecutive_runs(facts: ScriptFacts, statements: List[cst.SimpleStatementLine]) -> List[List[cst.SimpleStatementLine]]:
    """Download statements grouped by runs of neighbours in the same block."""
    runs: List[List[cst.SimpleStatementLine]] = []
    for statement in statements:
        block = facts.parents.get(statement)
        body = list(block.body)  # type: ignore[union-attr]
        index = body.index(statement)
        if runs and facts.parents.get(runs[-1][-1]) is block and index > 0 and body[index - 1] is runs[-1][-1]:
            runs[-1].append(statement)
        else:
            runs.append([statement])
    return runs


def download_statements(facts: ScriptFacts) -> Tuple[Statement, ...]:
    """Statements that download or unpack a data set, which every rank would run at once: a
    data set built with `download=True` (torchvision's CIFAR10(..., download=True)); in a
    function, a call that fetches or extracts (`urllib.request.urlretrieve`, `tarfile.open`,
    `requests.get`) or a call of this file's own function that does (`download_data(root)`,
    the call site in the entry point, not the helper's body). An `if not os.path.exists(root):`
    around one is part of it: a rank that checks after rank 0 finished would skip the barrier."""
    found: List[Statement] = []
    for call in facts.calls:
        if any(arg.keyword is not None and arg.keyword.value == "download" and N.is_name(arg.value, "True") for arg in call.args):
            statement = facts.statement_of(call)
            if isinstance(statement, cst.SimpleStatementLine) and statement not in found:
                found.append(statement)
    entry = facts.entry
    if entry is None:
        return tuple(found)
    helpers = _downloading_functions(facts, entry.scope)
    fetches = set(facts.calls_of(N.DOWNLOADS))
    for call in facts.calls:
        if call not in fetches and not (isinstance(call.func, cst.Name) and call.func.value in helpers):
            continue
        if facts.owner_of(call) is not entry.scope:
            continue  # a helper's own body, a method (a Dataset's __getitem__): its caller decides
        statement = _download_unit(facts, call, entry.scope)
        if statement is not None and statement not in found:
            found.append(statement)
    # `with requests.get(url) as r: with tarfile.open(fileobj=r.raw) as t: ...`: one download,
    # barriered once, around the outermost statement (nested pairs would pair up wrongly).
    chosen = set(found)
    outermost = [s for s in found if not any(a in chosen for a in facts.ancestors(s))]
    return tuple(sorted(outermost, key=lambda node: facts.order.get(node, 0)))


def _downloading_functions(facts: ScriptFacts, entry: cst.CSTNode) -> Dict[str, cst.FunctionDef]:
    """This file's module-level functions that download or unpack, also through each other
    (the entry point aside)."""
    functions = {f.name.value: f for f in facts.module.body if isinstance(f, cst.FunctionDef) and f is not entry}
    fetches = set(facts.calls_of(N.DOWNLOADS))
    found: Dict[str, cst.FunctionDef] = {}
    changed = True
    while changed:
        changed = False
        for call in facts.calls:
            owner = facts.owner_of(call)
            if not isinstance(owner, cst.FunctionDef) or functions.get(owner.name.value) is not owner:
                continue
            if owner.name.value in found:
                continue
            if call in fetches or (isinstance(call.func, cst.Name) and call.func.value in found):
                found[owner.name.value] = owner
                changed = True
    return found


def _download_unit(facts: ScriptFacts, call: cst.Call, owner: cst.CSTNode) -> Optional[Statement]:
    """The statement the barriers go around: the call's own, or the outermost `if` checking the
    file system around it. None inside a loop (a barrier per iteration is not a download)."""
    statement = facts.statement_of(call)
    unit = statement
    for anc in facts.ancestors(call):
        if anc is owner:
            break
        if isinstance(anc, (cst.For, cst.While)):
            return None
        if isinstance(anc, cst.If) and any(
            N.attribute_name(c.func) in N.PATH_CHECKS for c in descendants(anc.test, cst.Call)
        ):
            unit = anc
    return unit if facts.block_of(unit) is not None else None
