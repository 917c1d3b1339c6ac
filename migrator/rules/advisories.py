"""DDP1xx: what the tool declines to rewrite, each with a place and a hint. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

NO_ENTRY_POINT = Rule(
    code="DDP101",
    name="no-entry-point",
    summary="training found but no entry point to set up the process group in; migrate by hand",
    what="""
The script trains a model (an optimizer gets its parameters) but the tool cannot tell where
training starts: no `if __name__ == "__main__":` guard calling the function that builds the
model, and no module-level training code. Nothing in the file is changed.""",
    why="""
The process group must be set up once per process, before the model is wrapped, and never at
import time of a library module. Guessing the place could set it up twice or not at all.""",
    fix="Call the training function from `if __name__ == \"__main__\":`, or run ddp-migrate on the script that does.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="library-module",
            before='''import torch


class Trainer:
    def __init__(self, model):
        self.model = model.cuda()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
''',
            diagnostics=("DDP101",),
        ),
    ),
)

CUDA_CALL_LEFT = Rule(
    code="DDP102",
    name="cuda-call-without-device",
    summary=".cuda() with no device variable in reach: left as is; pass the device and use .to(device)",
    what="""
An unconditional `.cuda()` (or a `.cuda(0)` that pins one GPU) in a function where no device
variable is in reach. After `torch.cuda.set_device(local_rank)` a bare `.cuda()` lands on the
right GPU, so it is left alone, but it cannot run on a CPU-only machine, and `.cuda(0)` puts
every process on GPU 0.""",
    why="Every process must use its own device; tests on CPU runners need a CPU fallback.",
    fix="Pass the device into the function and call `.to(device)`.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="helper-without-device",
            before='''import torch


def evaluate(model, x):
    return model(x.cuda(0))


def main():
    device = torch.device("cuda")
    model = torch.nn.Linear(4, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    evaluate(model, torch.randn(2, 4))


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model, x):
    return model(x.cuda(0))


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 2).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    evaluate(model, torch.randn(2, 4))


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP102",),
        ),
    ),
)

DATAPARALLEL_SHAPE = Rule(
    code="DDP103",
    name="dataparallel-unsupported",
    summary="DataParallel used in a way the tool cannot rewrite safely; wrap the model in DDP by hand",
    what="""
A `DataParallel(...)` call that is not the value of a plain assignment (`model = DataParallel(model)`),
possibly chained with `.to(device)` / `.cuda()`, or that wraps a model no optimizer trains.""",
    why="DDP must wrap the trained module once, after it is on its device; other shapes need a human.",
    fix="Assign the wrapped model to a variable, or wrap it in DistributedDataParallel by hand.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="returned-from-helper",
            before='''import torch
import torch.nn as nn


def build():
    return nn.DataParallel(nn.Linear(4, 2))


if __name__ == "__main__":
    model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
''',
            diagnostics=("DDP103",),
        ),
    ),
)

MODEL_NOT_TRACED = Rule(
    code="DDP104",
    name="model-not-traced",
    summary="an optimizer trains a model built elsewhere (a function argument); wrap it in DDP where it is built",
    what="""
The parameters given to an optimizer belong to a model the tool cannot trace to the statement
that builds it, typically a function parameter (`def fit(model): opt = SGD(model.parameters())`).
Also a model the script builds on the CPU and hands to a function or class that moves it
(`Trainer.__init__` doing `self.model = model.to(gpu_id)`): DDP must wrap it after that move, and
the file is left unchanged rather than wrapped before it. Likewise models that training reaches
only through a container built from them before their wrap point (`seg = nn.Sequential(enc, dec)`,
then `seg(x)` in the loop): a DDP around `enc` would never see that forward.""",
    why="DDP must wrap the model once, where it is built; wrapping a function argument would wrap it at every call.",
    fix="Wrap the model in DistributedDataParallel where it is created.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="model-argument",
            before='''import torch


def fit(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    fit(torch.nn.Linear(4, 2))
''',
            diagnostics=("DDP104",),
        ),
        Example(
            id="moved-by-the-trainer",
            before='''import torch


class Trainer:
    def __init__(self, model: torch.nn.Module, optimizer, gpu_id: int):
        self.model = model.to(gpu_id)
        self.optimizer = optimizer

    def train(self, steps):
        for _ in range(steps):
            self.model(torch.randn(2, 4)).sum().backward()
            self.optimizer.step()


def load_objects():
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


if __name__ == "__main__":
    model, optimizer = load_objects()
    Trainer(model, optimizer, 0).train(3)
''',
            diagnostics=("DDP104",),
        ),
        Example(
            id="trained-through-a-container",
            before='''import torch
import torch.nn as nn


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    encoder, decoder = nn.Linear(4, 8), nn.Linear(8, 1)
    net = nn.Sequential(encoder, decoder)
    encoder.to(device)
    decoder.to(device)
    optimizers = [torch.optim.SGD(encoder.parameters(), lr=0.1), torch.optim.SGD(decoder.parameters(), lr=0.1)]
    for step in range(3):
        net(torch.randn(2, 4, device=device)).sum().backward()
        for optimizer in optimizers:
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            diagnostics=("DDP104",),
        ),
    ),
)

IMPORT_TIME_MODEL = Rule(
    code="DDP105",
    name="import-time-model",
    summary="model built at import time in a module with a main guard; move it into a main() called from the guard",
    what="""
The model (and usually its optimizer and loaders) is built at module level, while the training
loop runs under `if __name__ == "__main__":`. The process group would have to be set up at
import time, so the file is left unchanged.""",
    why="""
DataLoader workers started with spawn or forkserver (the default on macOS and Windows, and the
safe choice with CUDA) re-import the main module: module-level setup would run again in every
worker, which would try to join the process group and hang.""",
    fix="Move the module-level construction into a `main()` function called from the guard, then run ddp-migrate again.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="globals-and-guard",
            before='''import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

if __name__ == "__main__":
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
''',
            diagnostics=("DDP105",),
        ),
    ),
)

CUSTOM_SAMPLER = Rule(
    code="DDP106",
    name="loader-has-sampler",
    summary="training loader has its own sampler/batch_sampler: left unsharded; shard it by rank yourself",
    what="""
A training DataLoader that already passes `sampler=` or `batch_sampler=` (a WeightedRandomSampler,
a bucketing batch sampler). The tool cannot combine it with a DistributedSampler, so it leaves it.""",
    why="Every rank would draw from the whole dataset: duplicated work, no speed-up.",
    fix="Give each rank its own slice (e.g. weights[rank::world_size]) or use a distributed version of the sampler.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="weighted-sampler",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    weights = torch.where(data.tensors[1] == 1, 4.0, 1.0)
    loader = DataLoader(data, batch_size=8, sampler=WeightedRandomSampler(weights, len(weights)))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    weights = torch.where(data.tensors[1] == 1, 4.0, 1.0)
    loader = DataLoader(data, batch_size=8, sampler=WeightedRandomSampler(weights, len(weights)))
    model = torch.nn.Linear(4, 2)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=('DDP106',),
        ),
    ),
)

ITERABLE_DATASET = Rule(
    code="DDP107",
    name="iterable-dataset",
    summary="training loader reads an IterableDataset: shard it by rank inside __iter__",
    what="A training DataLoader over an `IterableDataset`, which a DistributedSampler cannot index.",
    why="Every rank would stream the same samples.",
    fix="Split the stream in `__iter__` with torch.distributed.get_rank() / get_world_size() (and the worker info).",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="iterable-dataset",
            before='''import torch
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        for _ in range(64):
            yield torch.randn(4), torch.randn(1)


def main():
    loader = DataLoader(Stream(), batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, IterableDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Stream(IterableDataset):
    def __iter__(self):
        for _ in range(64):
            yield torch.randn(4), torch.randn(1)


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    loader = DataLoader(Stream(), batch_size=8)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
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
            diagnostics=('DDP107',),
        ),
    ),
)

UNTRACED_LOADER = Rule(
    code="DDP108",
    name="untraced-loader",
    summary="training loader the tool cannot trace (built in an expression, a lambda, or elsewhere): shard it by hand",
    what="""
A DataLoader the tool cannot follow from where it is built to the loop that trains on it; also a
migrated script whose training no DataLoader of the file feeds at all (`get_batch()` slices of a
tensor, a custom iterator, full-batch training): every rank then trains on the same data.""",
    why="A loader that trains but is not sharded makes every rank repeat the same work.",
    fix="Assign the loader to a variable, or add `sampler=DistributedSampler(dataset)` yourself.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="loader-in-a-dict",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loaders = {"train": DataLoader(data, batch_size=8, shuffle=True)}
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loaders["train"]:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
from torch.utils.data import DataLoader, TensorDataset
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loaders = {"train": DataLoader(data, batch_size=8, shuffle=True)}
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loaders["train"]:
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=('DDP108',),
        ),
    ),
)

NO_EPOCH_LOOP = Rule(
    code="DDP109",
    name="no-epoch-loop",
    summary="no epoch loop drives this sharded loader: call sampler.set_epoch(...) whenever a new pass starts",
    what="""
The loader was sharded but no pass over it could be tied to an epoch: it is not iterated inside a
`for epoch in ...` loop, a `while` loop (whose turns, or `cur_epochs += 1` counter, are the
epochs), or restarted with `iter(loader)` on `StopIteration` (each restart is a pass): a single
pass, an iterator drawn from by a step loop, or a loop in another function called from a `while`.""",
    why="Without set_epoch the DistributedSampler repeats the same order on every pass.",
    fix="Count passes over the loader and call `loader.sampler.set_epoch(pass_index)` before each one.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="one-pass-iterator",
            before='''import torch
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = iter(loader)
    for step in range(20):
        x, y = next(batches)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''import torch
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
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = iter(loader)
    for step in range(min(20, len(loader))):
        x, y = next(batches)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=('DDP109',),
        ),
    ),
)

SHARED_WORK_IN_SAVE = Rule(
    code="DDP110",
    name="save-runs-shared-code",
    summary="this checkpoint save also runs the model or a collective: left for every rank; compute first, then save on rank 0",
    what="""
A `torch.save(...)` (or checkpoint helper call) whose arguments run the wrapped model's forward
or a torch.distributed collective, e.g. `save_checkpoint({"acc": evaluate(model, loader)}, ...)`.""",
    why="""
Behind a rank-0 guard the other ranks would skip that forward or collective while rank 0 waits
for them in it: the job hangs. Left unguarded, every rank writes the file.""",
    fix="Compute the value into a variable on every rank, then save it under `if dist.get_rank() == 0:`.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="evaluate-inside-save",
            before='''import torch


def evaluate(model):
    with torch.no_grad():
        return model(torch.randn(4, 4)).mean().item()


def main():
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        torch.save({"state": model.state_dict(), "score": evaluate(model)}, "ckpt.pt")


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model):
    with torch.no_grad():
        return model(torch.randn(4, 4)).mean().item()


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    model = torch.nn.Linear(4, 4)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        torch.save({"state": model.module.state_dict(), "score": evaluate(model)}, "ckpt.pt")


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP110",),
        ),
    ),
)

DATAPARALLEL_LEFT = Rule(
    code="DDP111",
    name="dataparallel-outside-training",
    summary="DataParallel outside the training code (inference, export) left as is; under torchrun every process would use every GPU",
    what="""
A `DataParallel(...)` that wraps no trained model, e.g. in an inference helper that loads a
checkpoint. The training part of the file is migrated; this one is left untouched so the
checkpoints it loads keep their `module.` keys.""",
    why="Under torchrun N processes each run it across all visible GPUs.",
    fix="Run inference in one process, or drop DataParallel there and use the process's own device.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="inference-helper",
            before='''import torch
import torch.nn as nn


def load_for_inference(path):
    net = nn.DataParallel(nn.Linear(4, 2))
    net.load_state_dict(torch.load(path))
    return net


def main():
    model = nn.DataParallel(nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
''',
            after='''import torch
import torch.nn as nn
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def load_for_inference(path):
    net = nn.DataParallel(nn.Linear(4, 2))
    net.load_state_dict(torch.load(path, map_location="cpu"))
    return net


def main():
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    model = DDP(nn.Linear(4, 2), device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            diagnostics=("DDP111",),
        ),
    ),
)

LEGACY_LAUNCH_IMPORT = Rule(
    code="DDP112",
    name="legacy-launch-import",
    summary="torch.distributed.launch imported from Python: use torch.distributed.run (torchrun) instead",
    what="`import torch.distributed.launch` or `from torch.distributed import launch`: the deprecated launcher driven from code.",
    why="torch.distributed.launch is deprecated; it passes `--local-rank`, which scripts written for it may reject.",
    fix="Call `torch.distributed.run.main([...])` or run `torchrun` instead; drop `--use_env`.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="launch-main",
            before='''from torch.distributed import launch

if __name__ == "__main__":
    launch.main()
''',
            diagnostics=("DDP112",),
        ),
    ),
)

PYTHON_LAUNCH_UNSAFE = Rule(
    code="DDP113",
    name="python-launch-unsafe",
    summary="launch command in Python that cannot be rewritten safely; change it to torchrun by hand",
    what="A string or argv list that runs torch.distributed.launch in a shape the launcher rewriter declines (see DDP204).",
    why="A half-rewritten command would start the wrong number of processes or pass flags torchrun rejects.",
    fix="Write the command with `torchrun` yourself.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="options-from-a-variable",
            before='''import os

os.system("python -m torch.distributed.launch $LAUNCH_OPTS train.py")
''',
            diagnostics=("DDP113",),
        ),
    ),
)

SAVE_AFTER_TEARDOWN = Rule(
    code="DDP115",
    name="save-after-teardown",
    summary="checkpoint written between training runs, after the process group of the first is gone: every rank writes it",
    what="""
A `torch.save(...)` in the launch block after the call that trains, when that block goes on to
train again (`model = main(2); torch.save(...); model = main(10)`). The process group is destroyed
each time the entry call returns, so the save cannot be guarded by `dist.get_rank()`, and the code
around it cannot move to rank 0 alone either: every rank must take part in the next run. (When
nothing trains after it, DDP012 runs the whole post-training tail on rank 0, by torchrun's RANK.)""",
    why="""
Every rank writes the same file at once (a corrupt or half-written checkpoint on shared
storage), and a rank reading it back may read it while another rank is writing it.""",
    fix="Guard the save with `if int(os.environ.get('RANK', 0)) == 0:`, or move it into the training function, where ddp-migrate guards it.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="save-between-runs",
            before='''import torch


def main(epochs):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    return model


if __name__ == "__main__":
    model = main(2)
    torch.save(model.state_dict(), "short.pth")
    model = main(10)
    torch.save(model.state_dict(), "long.pth")
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(epochs):
    # torchrun starts one process per device and sets LOCAL_RANK for each.
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    return model.module


if __name__ == "__main__":
    try:
        model = main(2)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    torch.save(model.state_dict(), "short.pth")
    model = main(10)
    torch.save(model.state_dict(), "long.pth")
''',
            diagnostics=("DDP115",),
        ),
    ),
)

RULES = (
    NO_ENTRY_POINT,
    CUDA_CALL_LEFT,
    DATAPARALLEL_SHAPE,
    MODEL_NOT_TRACED,
    IMPORT_TIME_MODEL,
    CUSTOM_SAMPLER,
    ITERABLE_DATASET,
    UNTRACED_LOADER,
    NO_EPOCH_LOOP,
    SHARED_WORK_IN_SAVE,
    DATAPARALLEL_LEFT,
    LEGACY_LAUNCH_IMPORT,
    PYTHON_LAUNCH_UNSAFE,
    SAVE_AFTER_TEARDOWN,
)
