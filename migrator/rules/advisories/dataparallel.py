"""DDP103 dataparallel-unsupported and DDP111 dataparallel-outside-training: DataParallel the wrap rule leaves. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

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
    for step in range(3):
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
''',
            diagnostics=("DDP103",),
        ),
        Example(
            id="dataparallel-fallback-beside-ddp",
            before='''import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed", action="store_true")
    args = parser.parse_args()
    if args.distributed:
        dist.init_process_group(backend="nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
    model = nn.Linear(4, 1).cuda()
    if args.distributed:
        model = DDP(model, device_ids=[local_rank])
    elif torch.cuda.device_count() > 1:
        # The single-process fallback, when torchrun did not start the script: kept on purpose.
        model = nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(10):
        model(torch.randn(8, 4).cuda()).sum().backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
''',
            fires=False,
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
    informational=True,
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
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group(backend=backend)
    else:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
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
        Example(
            id="inference-only-script",
            before='''"""Batch prediction: one process, every visible GPU through DataParallel. Nothing trains."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def predict(checkpoint, inputs):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model.load_state_dict(torch.load(checkpoint, map_location="cpu"))
    model = nn.DataParallel(model.cuda()).eval()
    predictions = []
    with torch.no_grad():
        for (x,) in DataLoader(TensorDataset(inputs), batch_size=256):
            predictions.append(model(x.cuda()).argmax(dim=1).cpu())
    return torch.cat(predictions)


if __name__ == "__main__":
    labels = predict("model.pth", torch.randn(1000, 4))
    torch.save(labels, "predictions.pt")
''',
            fires=False,
        ),
    ),
)
