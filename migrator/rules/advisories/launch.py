"""DDP112 legacy-launch-import and DDP113 python-launch-unsafe: torch.distributed.launch driven from Python. Report only."""
from __future__ import annotations

from migrator.rule import Example, Rule

LEGACY_LAUNCH_IMPORT = Rule(
    code="DDP112",
    name="legacy-launch-import",
    summary="torch.distributed.launch imported from Python: use torch.distributed.run (torchrun) instead",
    what="`import torch.distributed.launch` or `from torch.distributed import launch`: the deprecated launcher driven from code.",
    why="torch.distributed.launch is deprecated; it passes `--local-rank`, which scripts written for it may reject.",
    fix="Call `torch.distributed.run.main([...])` or run `torchrun` instead; drop `--use_env`.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="launch-main",
            before='''from torch.distributed import launch

if __name__ == "__main__":
    launch.main()
''',
            diagnostics=("DDP112",),
        ),
        Example(
            id="elastic-launch-api",
            before='''from torch.distributed.launcher.api import LaunchConfig, elastic_launch


def train():
    print("one of the workers")


if __name__ == "__main__":
    # The elastic API torchrun itself is built on, not the deprecated torch.distributed.launch.
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=2,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:29500",
    )
    elastic_launch(config, train)()
''',
            fires=False,
        ),
    ),
)

PYTHON_LAUNCH_UNSAFE = Rule(
    code="DDP113",
    name="python-launch-unsafe",
    summary="launch command in Python that cannot be rewritten safely; change it to torchrun by hand",
    what="A string or argv list that runs torch.distributed.launch in a shape the launcher rewriter declines (see DDP204).",
    why="A half-rewritten command would start the wrong number of processes or pass flags torchrun rejects.",
    fix="Write the command with `torchrun` yourself.",
    fix_safety="Not fixable automatically.",
    fixable=False,
    examples=(
        Example(
            id="options-from-a-variable",
            before='''import os

os.system("python -m torch.distributed.launch $LAUNCH_OPTS train.py")
''',
            diagnostics=("DDP113",),
        ),
        Example(
            id="command-in-a-docstring",
            before='''"""Fine-tune on every GPU of one machine.

Usage (the cluster's wrapper fills in $LAUNCH_OPTS):

    FORK_LAST3=1 python -m torch.distributed.launch $LAUNCH_OPTS finetune.py --epochs 3
"""
import argparse


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=3)
    # A bare string statement is a note as well: it documents a command and runs nothing.
    "to resume: FORK_LAST3=1 python -m torch.distributed.launch $LAUNCH_OPTS finetune.py --resume"
    parser.add_argument("--resume", action="store_true")
    return parser.parse_args()
''',
            fires=False,
        ),
    ),
)
