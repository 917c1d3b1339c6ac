"""DDP114: a training file the engine leaves unchanged is reported, with where the training is."""
from migrator import migrate
from migrator.rules.unmigrated import RULE


def _ddp114(source):
    return [d.message for d in migrate(source).diagnostics if d.code == "DDP114"]


def test_training_in_an_imported_module_names_that_module():
    (message,) = _ddp114(RULE.examples[0].before)
    assert "agent.learn(step)" in message and "module `agent`" in message


def test_a_library_trainer_says_there_is_no_entry_point():
    (message,) = _ddp114(RULE.examples[1].before)
    assert "line 14" in message and "no entry point" in message


def test_inference_with_dataparallel_is_not_reported():
    source = '''import torch

if __name__ == "__main__":
    model = torch.nn.DataParallel(torch.nn.Linear(4, 2))
    model.eval()
    with torch.no_grad():
        for _ in range(3):
            print(model(torch.randn(2, 4)))
'''
    result = migrate(source)
    assert result.code == source and not result.diagnostics


def test_already_distributed_scripts_are_not_reported():
    source = '''import argparse

import torch
import utils
from engine import train_one_epoch

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist_url", default="env://")
    args = parser.parse_args()
    utils.init_distributed_mode(args)
    for epoch in range(3):
        train_one_epoch(args, epoch)
'''
    result = migrate(source)
    assert result.code == source and not result.diagnostics


def test_stdlib_and_third_party_receivers_are_never_named():
    source = '''import torch
from tqdm import tqdm
from models import Net

if __name__ == "__main__":
    net = Net()
    progress = tqdm(total=10)
    for step in range(10):
        net.train()
        progress.update(1)
'''
    (message,) = _ddp114(source)
    assert "tqdm" not in message.split("nothing was migrated:")[1] and "module `models`" in message
