"""The same input gives the same output, whatever the interpreter's hash seed: a finding that names
"the first" of several sites must not take it from a set's order (str hashes change per process)."""
from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 6 * 6, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))

    def forward(self, x):
        return self.head(self.features(x))


def main():
    data = TensorDataset(torch.randn(32, 1, 8, 8), torch.randint(0, 2, (32,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def _diff(path, seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    done = subprocess.run([sys.executable, "-m", "migrator", str(path), "--diff", "--color", "never"],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout + done.stderr


def test_findings_and_diff_do_not_depend_on_the_hash_seed(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    outputs = {seed: _diff(path, seed) for seed in range(6)}
    reported = next(line for line in outputs[0].splitlines() if "DDP123" in line)
    assert "train.py:9:" in reported, "the first BatchNorm in the source is the one named"
    assert len(set(outputs.values())) == 1, "the output changed with PYTHONHASHSEED"
