"""DDP102 cuda-call-without-device: a `.cuda()` the device rule leaves as it is. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

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
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
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
        Example(
            id="cuda-calls-in-main",
            before='''import torch


# A single-GPU script: .cuda() everywhere and no device variable.
def main():
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        x, y = torch.randn(8, 4).cuda(), torch.randn(8, 1).cuda()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


# A single-GPU script: .cuda() everywhere and no device variable.
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
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        x, y = torch.randn(8, 4).to(device), torch.randn(8, 1).to(device)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            fires=False,
        ),
        Example(
            id="bare-cuda-in-a-helper",
            before='''import torch


def batch():
    # A bare .cuda(): after torch.cuda.set_device(local_rank) it lands on this process's GPU.
    return torch.randn(8, 4).cuda(), torch.randn(8, 1).cuda()


def main():
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        x, y = batch()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
''',
            after='''import torch
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def batch():
    # A bare .cuda(): after torch.cuda.set_device(local_rank) it lands on this process's GPU.
    return torch.randn(8, 4).cuda(), torch.randn(8, 1).cuda()


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
    device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Linear(4, 1).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        x, y = batch()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    try:
        main()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
''',
            fires=False,
        ),
    ),
)
