"""A statement an edit removes takes none of the user's comments with it."""
from __future__ import annotations

from migrator.api import migrate

_DATAPARALLEL_SCRIPT = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main(opt):
    # every GPU gets its workers and its share of the batch (see issue 1)
    opt.workers = opt.workers * opt.num_gpu
    opt.batch_size = opt.batch_size * opt.num_gpu
    model = nn.Linear(4, 1)
    # use every GPU
    if opt.num_gpu > 1:
        model = nn.DataParallel(model)
    model.load_state_dict(torch.load(opt.weights))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
    loader = DataLoader(data, batch_size=opt.batch_size, shuffle=True, num_workers=opt.workers)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--weights", default="init.pt")
    opt = parser.parse_args()
    opt.num_gpu = torch.cuda.device_count()
    main(opt)
'''


def _lines(code: str):
    return [line.strip() for line in code.splitlines()]


def test_a_removed_statements_comment_stays_above_the_next_statement():
    code = migrate(_DATAPARALLEL_SCRIPT).code
    lines = _lines(code)
    assert "opt.workers = opt.workers * opt.num_gpu" not in lines  # DDP025 removed it
    comment = lines.index("# every GPU gets its workers and its share of the batch (see issue 1)")
    assert lines[comment + 1] == "opt.batch_size = opt.batch_size * opt.num_gpu"


def test_a_moved_dataparallel_wrap_keeps_its_comment_above_the_ddp_wrap():
    code = migrate(_DATAPARALLEL_SCRIPT).code
    lines = _lines(code)
    assert lines.count("# use every GPU") == 1
    assert lines[lines.index("# use every GPU") + 1].startswith("model = DDP(model")
    assert migrate(code).code == code  # and a second run changes nothing
