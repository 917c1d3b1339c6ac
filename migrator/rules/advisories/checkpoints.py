"""DDP110 save-runs-shared-code and DDP115 save-after-teardown: checkpoint saves the rank-0 rule cannot guard. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

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
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
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
        Example(
            id="evaluated-before-the-rank-check",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def evaluate(model):
    with torch.no_grad():
        loss = model(torch.randn(16, 4)).pow(2).mean()
    dist.all_reduce(loss)  # every rank takes part
    return loss.item() / dist.get_world_size()


def main():
    dist.init_process_group(backend="gloo")
    model = DDP(torch.nn.Linear(4, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        # The forward and the all_reduce run on every rank, before the check;
        # only the write is left to rank 0.
        score = evaluate(model)
        if dist.get_rank() == 0:
            torch.save({"state": model.module.state_dict(), "score": score}, "ckpt.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
''',
            fires=False,
        ),
        Example(
            id="a-project-helper-handed-the-model-to-save",
            before='''import torch
from utils import *


def main():
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        save_checkpoint(epoch, model, optimizer)  # a helper of the project: it saves what it is handed


if __name__ == "__main__":
    main()
''',
            after='''import torch
from utils import *
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


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
    model = torch.nn.Linear(4, 4)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if dist.get_rank() == 0:
            save_checkpoint(epoch, model, optimizer)  # a helper of the project: it saves what it is handed


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
            id="score-computed-before-the-save",
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
        score = evaluate(model)  # computed before the save, not inside it
        torch.save({"state": model.state_dict(), "score": score}, "ckpt.pt")


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
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    model = torch.nn.Linear(4, 4)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        score = evaluate(model)  # computed before the save, not inside it
        if dist.get_rank() == 0:
            torch.save({"state": model.module.state_dict(), "score": score}, "ckpt.pt")


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

SAVE_AFTER_TEARDOWN = Rule(
    code="DDP115",
    name="save-after-teardown",
    summary="checkpoint written between training runs, after the process group of the first is gone: every rank writes it",
    what="""
A `torch.save(...)` in the launch block after the call that trains, when that block goes on to
train again and the process group is destroyed each time the entry call returns: the save cannot be
guarded by `dist.get_rank()`, and the code around it cannot move to rank 0 alone either, since every
rank must take part in the next run. A safety net: a launch block that calls the training function
more than once (`model = main(2); torch.save(...); model = main(10)`) gets one process group around
all the runs (a group set up again after a teardown can hang a rank), so its saves are guarded by
DDP012 as usual (the example). (When nothing trains after it, DDP012 runs the whole post-training
tail on rank 0, by torchrun's RANK.)""",
    why="""
Every rank writes the same file at once (a corrupt or half-written checkpoint on shared
storage), and a rank reading it back may read it while another rank is writing it.""",
    fix="Guard the save with `if int(os.environ.get('RANK', 0)) == 0:`, or move it into the training function, where ddp-migrate guards it.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="save-between-runs",
            fires=False,
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
    model = torch.nn.Linear(4, 1)
    model = DDP(model, device_ids=None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
    return model


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
    try:
        model = main(2)
        is_main = dist.get_rank() == 0
        if is_main:
            torch.save(model.module.state_dict(), "short.pth")
        model = main(10)
        if is_main:
            torch.save(model.module.state_dict(), "long.pth")
    finally:
        dist.destroy_process_group()
''',
            ),
        Example(
            id="rank-kept-from-before-the-teardown",
            before='''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()  # kept: the process group is gone by the time the model is saved
    model = DDP(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
    # After the teardown, but still written by one process only.
    if rank == 0:
        torch.save(model.module.state_dict(), "model.pth")


if __name__ == "__main__":
    main()
''',
            fires=False,
        ),
    ),
)
