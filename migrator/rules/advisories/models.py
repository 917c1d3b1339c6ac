"""DDP104 model-not-traced: a trained model the wrap rule cannot trace to where it is built. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

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
then `seg(x)` in the loop): a DDP around `enc` would never see that forward. A module training
reads out of a container (`modules.append(student)`, then `modules[0](x)`) is wrapped before it
enters the first container; the file is left unchanged when that cannot be told: the optimizer
reads a container training never calls (`trainable.parameters()`) holding a module training does
not call either, or the module is still moved or changed after it enters the container.""",
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
        Example(
            id="container-holds-a-module-never-called",
            before='''import torch
import torch.nn as nn


def main():
    student, embed = nn.Linear(4, 2), nn.Linear(2, 2)
    modules = nn.ModuleList([])
    modules.append(student)
    trainable = nn.ModuleList([])
    trainable.append(student)
    trainable.append(embed)  # trained by a loss this file cannot read
    optimizer = torch.optim.SGD(trainable.parameters(), lr=0.1)
    for step in range(3):
        modules[0](torch.randn(2, 4)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            diagnostics=("DDP104",),
        ),
        Example(
            id="accelerate-prepares-the-model",
            before='''import torch
from accelerate import Accelerator


def train(model, dataset, epochs=2):
    # Accelerate wraps the model itself (in DDP, under torchrun or `accelerate launch`):
    # wrapping it again where it is built would wrap it twice.
    accelerator = Accelerator()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(dataset, batch_size=16, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    return accelerator.unwrap_model(model)


if __name__ == "__main__":
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    train(torch.nn.Linear(4, 1), data)
''',
            fires=False,
        ),
        Example(
            id="model-from-a-pytest-fixture",
            before='''import pytest
import torch


@pytest.fixture
def model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


# The fixture builds the model; the test trains it in one process under pytest.
def test_adam_lowers_the_loss(model):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    first = torch.nn.functional.mse_loss(model(x), y).item()
    for step in range(20):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    assert torch.nn.functional.mse_loss(model(x), y).item() < first
''',
            fires=False,
            path="tests/test_optim.py",
        ),
    ),
)
