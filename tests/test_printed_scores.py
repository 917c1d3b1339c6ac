"""A print whose arguments run the model (`print("accuracy", test(model, loader))`): every rank
runs the call, rank 0 prints it (rules.rank_zero, Plan.compute_first). The torchrun run of the
shape is fixtures/printed_evaluation_score."""
from __future__ import annotations

import pytest

from migrator.api import migrate

SCRIPT = '''import torch
from torch.utils.data import DataLoader, TensorDataset


def test(model, loader):
    with torch.no_grad():
        return sum(model(x).sum().item() for x, _ in loader)


def main():
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        {PRINT}


if __name__ == "__main__":
    main()
'''


def _migrated(line: str) -> str:
    return migrate(SCRIPT.replace("{PRINT}", line)).code


def test_the_call_runs_on_every_rank_and_rank_zero_prints_it():
    code = _migrated('print("epoch", epoch, "score", test(model, loader), f"({test(model, loader):.2f})")')
    assert ('        test_result = test(model, loader)\n        test_result2 = test(model, loader)\n'
            '        if dist.get_rank() == 0:\n'
            '            print("epoch", epoch, "score", test_result, f"({test_result2:.2f})")\n') in code


def test_a_name_of_the_script_is_never_taken():
    script = SCRIPT.replace("    for epoch in range(2):", "    test_result = None\n    for epoch in range(2):")
    code = migrate(script.replace("{PRINT}", "print(test(model, loader))")).code
    assert "        test_result2 = test(model, loader)\n" in code and "print(test_result2)" in code


@pytest.mark.parametrize("line", [
    'print("score", [test(model, loader) for _ in range(1)])',
    'print("score", test(model, loader) if epoch else None)',
    'print("score", epoch and test(model, loader))',
])
def test_a_call_that_runs_lazily_or_sometimes_stays_where_it_is_on_every_rank(line):
    code = _migrated(line)
    assert f"        {line}\n" in code, "computing it ahead would change when (or whether) it runs"
