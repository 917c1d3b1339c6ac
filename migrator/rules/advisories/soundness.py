"""DDP125 unsound-migration: the engine's own output check failed; the file is left unchanged.

Reported by the engine (migrator.api), not planned by a rule: after the fixes are planned and the
code is written, migrator.soundness compares what the output reads with what is bound there. A
read that nothing binds, which the input did not have, means a fix relied on something that did
not happen. The file is then left byte-identical and this finding says which name and where.
"""
from __future__ import annotations

from migrator.rule import Example, Rule

UNSOUND_MIGRATION = Rule(
    code="DDP125",
    name="unsound-migration",
    summary="the migration would read a name where nothing binds it; the file is left unchanged",
    what="""
After planning its fixes, ddp-migrate checks the code it would write: every name the new code
reads must be bound where it is read, by Python's scoping rules (a function's locals, the
module's names, a loop that may have run before). When a fix reads a name the script binds only
later (a `device` defined near the end of a flat script, read by the DDP wrap written after the
model's move) or never (a sampler the loader rule could not create), the output would raise
NameError or UnboundLocalError on every rank. Nothing in the file is changed.""",
    why="""
A migration that crashes at start-up, or half-way through the first epoch, is worse than none: it
is committed, launched on a cluster and fails there. A fix whose prerequisite did not happen is
never written; the finding names the name and the line where the migration needed it.""",
    fix="""
Bind the name before the line the finding names (define the device before the model is moved to
it, build the loader with a sampler the tool can see), then run ddp-migrate again; or migrate by
hand. Please report the file: the engine should have declined with a reason of its own.""",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        # Must not fire: the wrap is written where the model's parameters say where it is, since the
        # script binds `device` only at its end. (Before that mechanism, this is where DDP125 fired.)
        Example(
            id="device-defined-last",
            before='import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\nloader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)\nmodel = torch.nn.Linear(4, 1)\nif torch.cuda.is_available():\n    model = model.cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n\n\ndef train():\n    for x, y in loader:\n        optimizer.zero_grad()\n        torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()\n        optimizer.step()\n\n\n# The device is defined last: the DDP wrap, written below the model\'s move, cannot read it there.\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\nfor epoch in range(2):\n    train()\n',
            after='import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nimport os\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom torch.utils.data.distributed import DistributedSampler\n\n# torchrun starts one process per device and sets LOCAL_RANK for each.\nlocal_rank = int(os.environ.get("LOCAL_RANK", 0))\nif torch.cuda.is_available():\n    torch.cuda.set_device(local_rank)\nbackend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"\nif "RANK" in os.environ:  # started by torchrun\n    dist.init_process_group(backend=backend)\nelse:  # `python train.py`: one process, a world of one on an in-process store (no port to bind)\n    dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)\n\ndataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))\nsampler = DistributedSampler(dataset, shuffle=True)\nloader = DataLoader(dataset, batch_size=8, sampler=sampler)\nmodel = torch.nn.Linear(4, 1)\nif torch.cuda.is_available():\n    model = model.cuda()\nmodel = DDP(model, device_ids=[local_rank] if next(model.parameters()).is_cuda else None)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n\n\ndef train():\n    for x, y in loader:\n        optimizer.zero_grad()\n        torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()\n        optimizer.step()\n\n\n# The device is defined last: the DDP wrap, written below the model\'s move, cannot read it there.\ndevice = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")\ntry:\n    for epoch in range(2):\n        sampler.set_epoch(epoch)\n        train()\nfinally:\n    dist.destroy_process_group()\n',
            fires=False,
        ),
    ),
)
