"""Loaders built in a dict comprehension, one per key (`{x: DataLoader(data[x], ...) for x in
['train', 'val']}`, the PyTorch transfer-learning tutorial's shape): the key the training loop
reads is sharded inside the comprehension, the others stay whole. Where the key that trains, or
the sampler's dataset, is not clear, the loaders are reported (DDP108) and left as they are. The
torchrun run of the shape is fixtures/loaders_keyed_by_phase."""
from __future__ import annotations

import textwrap

from migrator.api import migrate

HEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

data = {'train': TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), 'val': TensorDataset(torch.randn(8, 4), torch.randn(8, 1))}
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def _migrated(loaders: str, loop: str):
    result = migrate(HEAD + textwrap.dedent(loaders) + textwrap.dedent(loop))
    return result.code, {d.code for d in result.diagnostics}


PHASES = """\
for epoch in range(2):
    for phase in ['train', 'val']:
        for x, y in loaders[phase]:
            loss = torch.nn.functional.mse_loss(model(x), y)
            if phase == 'train':
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""


def test_only_the_key_that_trains_is_sharded():
    out, codes = _migrated("loaders = {x: DataLoader(data[x], batch_size=4, shuffle=True) for x in ['train', 'val']}\n", PHASES)
    assert ("loaders = {x: DataLoader(data[x], batch_size=4, shuffle=True if x != 'train' else None, "
            "sampler=DistributedSampler(data[x], shuffle=True) if x == 'train' else None) for x in ['train', 'val']}") in out
    assert "        loaders['train'].sampler.set_epoch(epoch)\n        for phase in ['train', 'val']:" in out
    assert "DDP108" not in codes
    assert migrate(out).code == out  # a second run changes nothing


def test_a_loop_over_a_literal_key_trains_that_key():
    loop = """\
for epoch in range(2):
    for x, y in loaders['train']:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        for x, y in loaders['val']:
            model(x)
"""
    out, codes = _migrated("loaders = {k: DataLoader(data[k], batch_size=4) for k in ('train', 'val')}\n", loop)
    assert "sampler=DistributedSampler(data[k], shuffle=False) if k == 'train' else None" in out
    assert "DDP108" not in codes


def test_a_loop_whose_training_key_cannot_be_told_is_reported():
    # The step is not under a test of the key: 'val' may train as well as 'train'.
    loop = PHASES.replace("            if phase == 'train':\n", "            if epoch >= 0:\n")
    out, codes = _migrated("loaders = {x: DataLoader(data[x], batch_size=4, shuffle=True) for x in ['train', 'val']}\n", loop)
    assert "DistributedSampler(data[x]" not in out
    assert "DDP108" in codes


def test_a_dataset_built_in_the_comprehension_is_reported():
    # The sampler would build it a second time.
    loaders = "loaders = {x: DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 1)), shuffle=True) for x in ['train', 'val']}\n"
    out, codes = _migrated(loaders, PHASES)
    assert "DistributedSampler(TensorDataset" not in out
    assert "DDP108" in codes
