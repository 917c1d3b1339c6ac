"""DDP026: which random draws decide a loader's samples (the draw table, followed through the value
flow's `derived` edges) and whether their family is seeded on every path before them
(migrator.dataflow.draws). Each case: a data block in one training script, and the draw's line as
migrated, or None where the draw must stay as it is."""
from __future__ import annotations

import textwrap

import pytest

from migrator import Options, migrate

SCRIPT = '''import random

import numpy as np
import torch
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Subset, TensorDataset, random_split
{top}

def main(seed=0, local_rank=0):
    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))
{body}
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''

SPLIT = "train_set, _ = random_split(full, [64, 16])\ntrain_loader = DataLoader(train_set, batch_size=8, shuffle=True)"
SEEDED_SPLIT = "train_set, _ = random_split(full, [64, 16], generator=torch.Generator().manual_seed(0))"

CASES = [
    ("random-split-unseeded", "", SPLIT, SEEDED_SPLIT),
    ("seeded-first", "", "torch.manual_seed(seed)\n" + SPLIT, None),
    ("seeded-at-module-top", "torch.manual_seed(0)\n", SPLIT, None),
    ("seeded-by-a-helper-of-the-file",
     "def set_seed(seed):\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n",
     "set_seed(seed)\n" + SPLIT, None),
    ("numpy-seed-does-not-seed-torch", "", "np.random.seed(seed)\n" + SPLIT, SEEDED_SPLIT),
    ("seed-under-a-condition", "", "if seed:\n    torch.manual_seed(seed)\n" + SPLIT, SEEDED_SPLIT),
    ("seed-after-the-draw", "", SPLIT + "\ntorch.manual_seed(seed)", SEEDED_SPLIT),
    ("seed-of-each-rank", "", "torch.manual_seed(seed + local_rank)\n" + SPLIT, SEEDED_SPLIT),
    ("own-generator", "", "g = torch.Generator()\ng.manual_seed(seed)\n"
     "train_set, _ = random_split(full, [64, 16], generator=g)\n"
     "train_loader = DataLoader(train_set, batch_size=8, shuffle=True)", None),
    ("randperm-not-a-split", "",
     "noise = torch.randn(80, 4)[torch.randperm(80)]\ntrain_loader = DataLoader(full, batch_size=8, shuffle=True)", None),
    ("randperm-indexes-tensors", "",
     "perm = torch.randperm(80)\ntrain_loader = DataLoader(TensorDataset(full.tensors[0][perm[:64]], full.tensors[1][perm[:64]]), batch_size=8, shuffle=True)",
     "perm = torch.randperm(80, generator=torch.Generator().manual_seed(0))"),
    ("numpy-permutation", "",
     "idx = np.random.permutation(80)\ntrain_loader = DataLoader(Subset(full, idx[:64].tolist()), batch_size=8, shuffle=True)",
     "idx = np.random.RandomState(0).permutation(80)"),
    ("random-shuffle-seeded-at-import", "random.seed(1)\n",
     "indices = list(range(80))\nrandom.shuffle(indices)\ntrain_loader = DataLoader(Subset(full, indices[:64]), batch_size=8, shuffle=True)",
     None),
    ("random-shuffle-unseeded", "",
     "indices = list(range(80))\nrandom.shuffle(indices)\ntrain_loader = DataLoader(Subset(full, indices[:64]), batch_size=8, shuffle=True)",
     "random.Random(0).shuffle(indices)"),
    ("random-sample-in-a-comprehension", "",
     "picked = random.sample(range(80), 64)\ntrain_loader = DataLoader([full[i] for i in picked], batch_size=8, shuffle=True)",
     "picked = random.Random(0).sample(range(80), 64)"),
    ("train-test-split", "",
     "x_train, x_val = train_test_split(full.tensors[0], test_size=0.2)\ntrain_loader = DataLoader(TensorDataset(x_train, x_train), batch_size=8, shuffle=True)",
     "x_train, x_val = train_test_split(full.tensors[0], test_size=0.2, random_state=0)"),
    ("split-in-a-helper-called-unseeded",
     "def make(full):\n    return random_split(full, [64, 16])\n",
     "train_set, _ = make(full)\ntrain_loader = DataLoader(train_set, batch_size=8, shuffle=True)",
     "    return random_split(full, [64, 16], generator=torch.Generator().manual_seed(0))"),
    ("split-returned-into-the-loader-call",
     "def make(full):\n    return random_split(full, [64, 16])\n",
     "train_loader = DataLoader(make(full)[0], batch_size=8, shuffle=True)",
     "    return random_split(full, [64, 16], generator=torch.Generator().manual_seed(0))"),
    ("split-in-a-helper-called-after-the-seed",
     "def make(full):\n    return random_split(full, [64, 16])\n",
     "torch.manual_seed(seed)\ntrain_set, _ = make(full)\ntrain_loader = DataLoader(train_set, batch_size=8, shuffle=True)",
     None),
]


def _script(top: str, body: str) -> str:
    return SCRIPT.format(top=top, body=textwrap.indent(body, "    "))


@pytest.mark.parametrize("top, body, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_split_draw(top: str, body: str, expected) -> None:
    source = _script(top, body)
    result = migrate(source, Options())
    fired = [change for change in result.changes if change.code == "DDP026"]
    assert result.changed  # the script is migrated either way
    if expected is None:
        assert not fired, result.code
        return
    assert len(fired) == 1, [c.message for c in result.changes]
    assert expected.strip() in [line.strip() for line in result.code.splitlines()], result.code
    assert migrate(result.code, Options()).code == result.code  # seeded now: a second run changes nothing


def test_a_draw_imported_by_its_bare_name_is_reported() -> None:
    body = ("from numpy.random import shuffle\nindices = list(range(80))\nshuffle(indices)\n"
            "train_loader = DataLoader(Subset(full, indices[:64]), batch_size=8, shuffle=True)")
    result = migrate(_script("", body), Options())
    (found,) = [d for d in result.diagnostics if d.code == "DDP126"]
    assert found.message.startswith("shuffle(...) decides what train_loader reads and is drawn apart on each rank"), found
    assert "shuffle(indices)" in result.code and not any(c.code == "DDP026" for c in result.changes)
