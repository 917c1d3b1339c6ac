"""A device that a helper the script cannot see into picks (`device, ids = prepare_device(n_gpu)`,
which in the popular pytorch-template returns `torch.device("cuda:0")` on every rank).

The migration must give each rank its own GPU, keep a CPU device the helper picks, and hand DDP
the `device_ids` that match where the model then is (DDP refuses `device_ids` for a CPU module and
a module on another GPU than its ids). There is no GPU here: the statements the migration writes
run with the real torch on device *values*, which `torch.device` builds without CUDA.
"""
import ast

import pytest

from migrator.api import migrate

torch = pytest.importorskip("torch")

SCRIPT = '''import torch
from utils import prepare_device

if __name__ == "__main__":
    device, device_ids = prepare_device(2)
    model = torch.nn.Linear(4, 2).to(device)
    if len(device_ids) > 1:
        model = torch.nn.DataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4).to(device)).sum().backward()
    optimizer.step()
'''


def _rebinding(tree: ast.Module) -> ast.If:
    """The statement the migration adds after `device, device_ids = prepare_device(2)`."""
    found = [node for node in ast.walk(tree) if isinstance(node, ast.If) and "startswith" in ast.unparse(node.test)]
    assert len(found) == 1, ast.unparse(tree)
    return found[0]


def _device_ids(tree: ast.Module) -> ast.expr:
    wraps = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == "DDP"]
    assert len(wraps) == 1, ast.unparse(tree)
    return next(k.value for k in wraps[0].keywords if k.arg == "device_ids")


@pytest.mark.parametrize("picked, rank, expected_device, expected_ids", [
    ("cuda:0", 1, torch.device("cuda", 1), [1]),
    (torch.device("cuda:0"), 1, torch.device("cuda", 1), [1]),
    (torch.device("cuda"), 0, torch.device("cuda", 0), [0]),
    ("cpu", 1, "cpu", None),
    (torch.device("cpu"), 1, torch.device("cpu"), None),
])
def test_a_gpu_a_helper_picks_becomes_this_ranks_and_ddp_follows_the_device(picked, rank, expected_device, expected_ids):
    tree = ast.parse(migrate(SCRIPT).code)
    scope = {"torch": torch, "device": picked, "local_rank": rank}
    exec(compile(ast.Module([_rebinding(tree)], type_ignores=[]), "<migrated>", "exec"), scope)
    assert scope["device"] == expected_device
    assert eval(compile(ast.Expression(_device_ids(tree)), "<migrated>", "eval"), scope) == expected_ids


def test_the_device_is_rebound_right_after_the_helper_and_before_the_model_moves():
    code = migrate(SCRIPT).code
    lines = [line.strip() for line in code.splitlines()]
    bound = lines.index("device, device_ids = prepare_device(2)")
    assert lines[bound + 1].startswith('if str(device).startswith("cuda"):')
    assert lines[bound + 2] == 'device = torch.device("cuda", local_rank)'
    assert lines[bound + 3] == "model = torch.nn.Linear(4, 2).to(device)"
    assert migrate(code).code == code


def test_a_helper_of_the_same_file_is_rewritten_where_it_is_and_ddp_still_follows_its_device():
    script = SCRIPT.replace("from utils import prepare_device\n", '''

def prepare_device(n_gpu):
    return torch.device("cuda:0" if n_gpu > 0 and torch.cuda.is_available() else "cpu"), list(range(n_gpu))
''')
    code = migrate(script).code
    tree = ast.parse(code)
    assert not [node for node in ast.walk(tree) if isinstance(node, ast.If) and "startswith" in ast.unparse(node.test)]
    assert 'torch.device(f"cuda:{local_rank}" if n_gpu > 0' in code
    for picked, expected_ids in (("cpu", None), (torch.device("cuda", 1), [1])):
        scope = {"device": picked, "local_rank": 1}
        assert eval(compile(ast.Expression(_device_ids(tree)), "<migrated>", "eval"), scope) == expected_ids


@pytest.mark.parametrize("binding", [
    'device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")',  # DDP002 rewrites the string itself
    "device = args.device",  # not a call: nothing a helper picks
])
def test_a_device_the_script_spells_out_gets_no_rebinding(binding):
    script = SCRIPT.replace("device, device_ids = prepare_device(2)", f"{binding}\n    device_ids = [0, 1]")
    code = migrate(script).code
    assert 'device = torch.device("cuda", local_rank)' not in code
