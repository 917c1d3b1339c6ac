"""DDP101 no-entry-point and DDP105 import-time-model: no place to set up the process group. Report only."""
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

    def fit(self, batches):
        for x, y in batches:
            self.optimizer.zero_grad()
            torch.nn.functional.mse_loss(self.model(x.cuda()), y.cuda()).backward()
            self.optimizer.step()
''',
            diagnostics=("DDP101",),
        ),
        Example(
            id="pytest-module",
            before='''import torch


# A unit test builds a model and an optimizer to check that training lowers the loss.
# It runs under pytest, in one process: there is nothing to set up or migrate.
def test_training_lowers_the_loss():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    losses = []
    for step in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
''',
            fires=False,
            path="tests/test_train.py",
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
        Example(
            id="definition-module-for-torch-hub",
            before='''"""The entry points of `torch.hub.load("me/tiny-net", "tiny_net")`."""
import torch.nn as nn

dependencies = ["torch"]


class TinyNet(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))

    def forward(self, x):
        return self.body(x)


# Built at import time, but nothing in this module trains it and there is no main guard:
# a definition module, with no process group to set up.
model = TinyNet()


def tiny_net(width=8):
    return model if width == 8 else TinyNet(width)
''',
            fires=False,
            path="hubconf.py",
        ),
        Example(
            id="guard-that-only-exports",
            before='''import torch
import torch.nn as nn

# Built at import time, but nothing in the file trains it: the guard only exports it.
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
model.load_state_dict(torch.load("model.pth", map_location="cpu"))
model.eval()

if __name__ == "__main__":
    torch.onnx.export(model, torch.randn(1, 4), "model.onnx")
''',
            fires=False,
        ),
    ),
)
