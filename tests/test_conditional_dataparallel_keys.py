"""A DataParallel used on one branch only (`if device == "cuda": net = nn.DataParallel(net)`).

The original's checkpoints carry `module.`-prefixed keys when it ran on a GPU and bare ones on the
CPU, and its resume loaded them into the DataParallel wrapper (or the bare model). The migration
saves the bare module's keys and wraps the model after the resume block, so the load now runs on
the bare model: it drops the prefix as it reads, and the old checkpoints of either branch and the
new ones all load. An unconditional DataParallel keeps its prefixed keys and its load, untouched.
"""
import json

import pytest

from migrator.api import migrate

SCRIPT = '''import json
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
net = torch.nn.Linear(4, 1).to(device)
if device == "cuda":
    net = torch.nn.DataParallel(net)
start_epoch = 0
if os.path.isfile("ckpt.pth"):
    checkpoint = torch.load("ckpt.pth")
    net.load_state_dict(checkpoint["net"])
    start_epoch = checkpoint["epoch"] + 1
    with open("resumed_%s.json" % os.environ.get("RANK", "plain"), "w") as out:
        json.dump({"epoch": start_epoch, "bias": net.state_dict()[next(k for k in net.state_dict() if k.endswith("bias"))].item()}, out)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)
for epoch in range(start_epoch, start_epoch + 2):
    for (x,) in loader:
        optimizer.zero_grad()
        net(x.to(device)).sum().backward()
        optimizer.step()
    torch.save({"net": net.state_dict(), "epoch": epoch}, "ckpt.pth")
'''

PREFIXED_LOAD = 'net.load_state_dict({k.removeprefix("module."): v for k, v in checkpoint["net"].items()})'


def test_the_load_behind_a_dataparallel_on_one_branch_reads_both_kinds_of_keys():
    result = migrate(SCRIPT)
    assert PREFIXED_LOAD in result.code
    assert '"net": net.module.state_dict()' in result.code  # the saves write the bare module's keys
    # The load runs before the wrap now.
    assert result.code.index(PREFIXED_LOAD) < result.code.index("net = DDP(net")
    assert "load_state_dict() before the wrap accepts the module.-prefixed keys" in {c.message for c in result.changes}
    assert migrate(result.code).code == result.code


def test_an_unconditional_dataparallel_keeps_its_keys_and_its_load():
    script = SCRIPT.replace('if device == "cuda":\n    net = torch.nn.DataParallel(net)\n',
                            "net = torch.nn.DataParallel(net)\n")
    code = migrate(script).code
    assert "removeprefix" not in code
    assert 'net.load_state_dict(checkpoint["net"])' in code
    assert '"net": net.state_dict()' in code  # DDP's keys carry the same prefix


def test_a_load_before_the_dataparallel_is_left_as_it_was():
    # It read bare keys on both branches: nothing to drop.
    script = SCRIPT.replace('if device == "cuda":\n    net = torch.nn.DataParallel(net)\n', "")
    script = script.replace("optimizer = torch.optim.SGD", 'if device == "cuda":\n    net = torch.nn.DataParallel(net)\noptimizer = torch.optim.SGD')
    code = migrate(script).code
    assert "removeprefix" not in code
    assert 'net.load_state_dict(checkpoint["net"])' in code


@pytest.mark.runtime
def test_resumes_from_a_gpu_checkpoint_and_from_its_own(tmp_path):
    torch = pytest.importorskip("torch")
    from runtime_probe.checks import assert_trains_correctly_under_ddp
    from runtime_probe.harness import run_single, run_torchrun

    migrated = tmp_path / "migrated.py"
    migrated.write_text(migrate(SCRIPT).code)
    workdir = tmp_path / "run"
    workdir.mkdir()
    # What the original wrote on a GPU: DataParallel's keys.
    torch.save({"net": {"module.weight": torch.zeros(1, 4), "module.bias": torch.full((1,), 7.0)}, "epoch": 4},
               workdir / "ckpt.pth")
    report = run_torchrun(migrated, workdir, script_name="train.py", label="resume from DataParallel keys")
    assert_trains_correctly_under_ddp(report, nproc=2)
    # Rank 0 records what it loaded (the migration writes such files on rank 0 only); rank 1 read
    # the same file without "Missing key(s)", or the run would have failed.
    assert json.loads((workdir / "resumed_0.json").read_text()) == {"epoch": 5, "bias": 7.0}
    saved = torch.load(workdir / "ckpt.pth")
    assert sorted(saved["net"]) == ["bias", "weight"] and saved["epoch"] == 6  # bare keys, as on the CPU before
    # ... and `python train.py` resumes from that one.
    single = run_single(migrated, workdir, script_name="train.py", label="resume from its own checkpoint")
    assert single.returncode == 0, single.stderr[-2000:]
    assert json.loads((workdir / "resumed_plain.json").read_text())["epoch"] == 7
