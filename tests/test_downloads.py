"""DDP018 on downloads the entry point makes itself: one pair of barriers per download, around
its outermost statement (nested pairs would pair rank 0's inner barrier with the others' outer one)."""
import ast
import textwrap

from migrator import migrate
from migrator.options import Options

NESTED = textwrap.dedent('''\
    import tarfile

    import requests
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    def main(url="https://example.com/cora.tgz"):
        with requests.get(url, stream=True) as response:
            with tarfile.open(fileobj=response.raw, mode="r:gz") as archive:
                archive.extractall()
        loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()


    if __name__ == "__main__":
        main()
''')


def _barriers(code: str) -> int:
    return sum(isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "barrier" for node in ast.walk(ast.parse(code)))


def test_a_nested_download_gets_one_pair_of_barriers_around_the_outer_statement():
    result = migrate(NESTED, Options())
    assert _barriers(result.code) == 2, result.code
    lines = result.code.splitlines()
    outer = next(i for i, line in enumerate(lines) if "with requests.get" in line)
    assert lines[outer - 1].strip() == "dist.barrier()  # rank 0 downloads the data set first"
    assert [c.code for c in result.changes].count("DDP018") == 1


def test_a_download_in_a_loop_is_not_barriered():
    looped = NESTED.replace(
        '    with requests.get(url, stream=True) as response:\n'
        '        with tarfile.open(fileobj=response.raw, mode="r:gz") as archive:\n'
        '            archive.extractall()\n',
        '    for part in range(2):\n'
        '        with requests.get(f"{url}.{part}", stream=True) as response:\n'
        '            with tarfile.open(fileobj=response.raw, mode="r:gz") as archive:\n'
        '                archive.extractall()\n')
    assert looped != NESTED
    assert _barriers(migrate(looped, Options()).code) == 0
