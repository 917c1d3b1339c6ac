"""An experiment tracker's run (`wandb.init(...)`) on rank 0 only: the other ranks get a disabled run.

Started on every rank, `wandb.init()` is one run per process on the dashboard. The migration
gives it `mode=None if <rank 0> else "disabled"`: rank 0 keeps the mode it had (None: the
environment's WANDB_MODE), and a disabled run's `log()` and `config.update()` do nothing, so the
code that uses the run needs no guard. wandb is not a test dependency: the runtime test runs the
migration under torchrun with a stand-in `wandb` module that records what each rank asked for.
"""
import json

import libcst as cst
import pytest

from migrator.api import migrate
from migrator.context import FileContext
from migrator.project.plan import ProjectFile, plan_project
from migrator.tree import on_rank_zero_only

SCRIPT = '''import torch
import wandb
from torch.utils.data import DataLoader, TensorDataset


def main():
    run = wandb.init(project="demo", config={"lr": 0.1})
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)
    for epoch in range(2):
        for (x,) in loader:
            optimizer.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            optimizer.step()
        run.log({"epoch": epoch, "loss": loss.item()})
        wandb.log({"epoch": epoch})
    run.finish()


if __name__ == "__main__":
    main()
'''

# Records each rank's init(mode=...) and what it logs; a disabled run logs nothing, as wandb's does.
FAKE_WANDB = '''import json
import os

_run = None


class _Run:
    def __init__(self, mode):
        self.mode = mode
        self.logged = []

    def log(self, row):
        if self.mode != "disabled":
            self.logged.append(row)

    def finish(self):
        with open("wandb_rank%s.json" % os.environ.get("RANK", "plain"), "w") as out:
            json.dump({"mode": self.mode, "logged": self.logged}, out)


def init(project=None, config=None, mode=None):
    global _run
    _run = _Run(mode)
    return _run


def log(row):
    _run.log(row)
'''


def _call(code: str) -> cst.Call:
    return cst.ensure_type(cst.parse_expression(code), cst.Call)


@pytest.mark.parametrize("before, after", [
    ('wandb.init(project="p")', 'wandb.init(project="p", mode=None if RANK0 else "disabled")'),
    ('wandb.init(project="p", mode=args.mode)', 'wandb.init(project="p", mode=args.mode if RANK0 else "disabled")'),
    ('wandb.init(mode="offline" if a else "online")',
     'wandb.init(mode=("offline" if a else "online") if RANK0 else "disabled")'),
])
def test_the_mode_rank_zero_had_is_kept_and_the_others_are_disabled(before, after):
    made = on_rank_zero_only(_call(before), "RANK0")
    assert made is not None and cst.Module([]).code_for_node(made) == after
    assert on_rank_zero_only(made, "RANK0") is None  # a second run changes nothing


def test_a_run_built_from_keyword_arguments_is_left_alone():
    # `**settings` may hold a mode of its own: adding one would be a TypeError.
    assert on_rank_zero_only(_call("wandb.init(**settings)"), "RANK0") is None
    assert "disabled" not in migrate(SCRIPT.replace('project="demo", config={"lr": 0.1}', "**settings")).code


def test_a_run_already_started_on_rank_zero_only_is_left_alone():
    script = SCRIPT.replace('    run = wandb.init(project="demo", config={"lr": 0.1})\n',
                            '    if int(os.environ.get("RANK", 0)) == 0:\n        wandb.init(project="demo")\n    run = wandb\n')
    script = "import os\n" + script
    assert '"disabled"' not in migrate(script).code


def test_a_module_the_script_imports_starts_its_run_on_rank_zero_only(tmp_path):
    trainer = '''import torch
import wandb


class Trainer:
    def __init__(self, model, loader, config):
        self.model = model
        self.loader = loader
        self.run = wandb.init(project="demo", config=config)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def fit(self, epochs):
        for epoch in range(epochs):
            for (x,) in self.loader:
                self.optimizer.zero_grad()
                self.model(x).sum().backward()
                self.optimizer.step()
            self.run.log({"epoch": epoch})
'''
    train = '''import torch
from torch.utils.data import DataLoader, TensorDataset
from trainer import Trainer


def main():
    model = torch.nn.Linear(4, 2)
    loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2, shuffle=True)
    Trainer(model, loader, {}).fit(2)


if __name__ == "__main__":
    main()
'''
    project = []
    for name, text in (("train.py", train), ("trainer.py", trainer)):
        (tmp_path / name).write_text(text)
    for name, text in (("train.py", train), ("trainer.py", trainer)):
        path = tmp_path / name
        result = migrate(text, context=FileContext.for_file(path, name))
        project.append(ProjectFile(str(path.resolve()), name, text, result.code, result.changes, result.diagnostics,
                                   models=result.models))
    updates = {path.rpartition("/")[2]: update for path, update in plan_project(project).items()}
    code = updates["trainer.py"].code
    assert 'wandb.init(project="demo", config=config, mode=None if int(os.environ.get("RANK", 0)) == 0 else "disabled")' in code
    assert "\nimport os\n" in code
    assert {c.code for c in updates["trainer.py"].changes} >= {"DDP035"}


@pytest.mark.runtime
def test_one_run_on_the_dashboard_under_torchrun(tmp_path):
    pytest.importorskip("torch")
    from runtime_probe.checks import assert_trains_correctly_under_ddp
    from runtime_probe.harness import run_torchrun

    migrated = tmp_path / "migrated.py"
    migrated.write_text(migrate(SCRIPT).code)
    support = tmp_path / "support"
    support.mkdir()
    (support / "wandb.py").write_text(FAKE_WANDB)
    workdir = tmp_path / "run"
    report = run_torchrun(migrated, workdir, script_name="train.py", support=support, label="wandb run on rank 0")
    assert_trains_correctly_under_ddp(report, nproc=2)
    runs = {rank: json.loads((workdir / f"wandb_rank{rank}.json").read_text()) for rank in (0, 1)}
    assert runs[0] == {"mode": None, "logged": [{"epoch": 0, "loss": runs[0]["logged"][0]["loss"]}, {"epoch": 0},
                                                {"epoch": 1, "loss": runs[0]["logged"][2]["loss"]}, {"epoch": 1}]}
    assert runs[1] == {"mode": "disabled", "logged": []}
