"""Project mode: a script that trains through a class of another module building its own models
(migrator.project.trainers). The golden tree and its torchrun run are fixtures/projects/
solver_builds_its_models; here, the edges: what the engine does when told the caller sets up the
process group, when the pair is declined, and what a run on the script alone says."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from migrator.api import migrate
from migrator.cli import cli
from migrator.context import FileContext

SOLVER = '''import torch
import torch.nn as nn


class Solver:
    def __init__(self, loader):
        self.loader = loader
        self.model = nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def train(self):
        print("training")
        for epoch in range(2):
            for x, y in self.loader:
                loss = nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
        torch.save(self.model.state_dict(), "model.pt")
'''
LOADERS = '''import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader(mode="train"):
    dataset = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    return DataLoader(dataset, batch_size=4, shuffle=(mode == "train"))
'''
MAIN = '''import torch

from loaders import make_loader
from solver import Solver


def main():
    torch.manual_seed(0)
    Solver(make_loader()).train()


if __name__ == "__main__":
    main()
'''


def _tree(root: Path, files: dict) -> Path:
    (root / ".git").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def _run(*args: str):
    result = CliRunner().invoke(cli, [*args, "--color", "never", "--output-format", "json"], catch_exceptions=False)
    return result, {Path(f["path"]).name: f for f in json.loads(result.output)["files"]}


def test_a_module_set_up_by_its_caller_gets_everything_but_the_setup(tmp_path):
    path = _tree(tmp_path, {"solver.py": SOLVER}) / "solver.py"
    alone = migrate(SOLVER, context=FileContext.for_file(path, "solver.py"))
    assert alone.code == SOLVER and "DDP101" in {d.code for d in alone.diagnostics}
    told = migrate(SOLVER, context=FileContext.for_file(path, "solver.py")._replace(set_up_by="main.py"))
    codes = {c.code for c in told.changes}
    assert "DDP003" in codes and "DDP012" in codes and "DDP013" in codes
    assert not codes & {"DDP001", "DDP004"}, "the caller sets the process group up and tears it down"
    assert "init_process_group" not in told.code and "destroy_process_group" not in told.code
    assert "import torch.distributed as dist" in told.code  # the rank checks need it
    assert "torch.save(self.model.module.state_dict()" in told.code


def test_a_script_told_it_trains_through_a_module_gets_the_setup_before_the_loaders(tmp_path):
    path = _tree(tmp_path, {"main.py": MAIN, "solver.py": SOLVER, "loaders.py": LOADERS}) / "main.py"
    told = migrate(MAIN, context=FileContext.for_file(path, "main.py")._replace(trains_through=frozenset({"Solver"})))
    assert {"DDP001", "DDP004"} <= {c.code for c in told.changes}
    # the loader handed to the Solver is built after the setup: its DistributedSampler needs the group
    assert told.code.index("init_process_group") < told.code.index("Solver(make_loader())")


def test_the_project_is_migrated_together(tmp_path):
    root = _tree(tmp_path, {"main.py": MAIN, "solver.py": SOLVER, "loaders.py": LOADERS})
    result, files = _run("--in-place", str(root))
    assert result.exit_code == 0, result.output
    assert "init_process_group" in (root / "main.py").read_text()
    assert "self.model = DDP(self.model" in (root / "solver.py").read_text()
    assert "DistributedSampler(dataset" in (root / "loaders.py").read_text()
    assert "self.loader.sampler.set_epoch(epoch)" in (root / "solver.py").read_text()
    assert not any(f["code"] in ("DDP101", "DDP114", "DDP140") for f in files["solver.py"]["findings"])
    _, again = _run("--check", str(root))
    assert not any(item["findings"] for item in again.values()), "a second run changes nothing"


def test_every_script_that_builds_the_module_s_class_is_set_up(tmp_path):
    """evaluate.py prints a Solver's model: it builds DDP models too, so it gets the setup; the
    Solver is built on every rank (its DDP wraps are collectives), only the print is rank 0's."""
    evaluate = "from solver import Solver\n\n\nif __name__ == '__main__':\n    print(Solver(None).model)\n"
    root = _tree(tmp_path, {"main.py": MAIN, "solver.py": SOLVER, "loaders.py": LOADERS, "evaluate.py": evaluate})
    result, _ = _run("--in-place", str(root))
    assert result.exit_code == 0, result.output
    migrated = (root / "evaluate.py").read_text()
    assert "init_process_group" in migrated
    assert "        solver_result = Solver(None)\n        if dist.get_rank() == 0:\n            print(solver_result.model)\n" in migrated
    assert "init_process_group" in (root / "main.py").read_text()


def test_an_importer_that_cannot_be_set_up_declines_the_pair(tmp_path):
    """report.py builds a Solver when it is imported, before any setup could run: with DDP models
    in it and no process group, it would break; nothing is changed, and the script says why."""
    report = "from solver import Solver\n\nMODEL = Solver(None).model\n\nif __name__ == '__main__':\n    print(MODEL)\n"
    root = _tree(tmp_path, {"main.py": MAIN, "solver.py": SOLVER, "loaders.py": LOADERS, "report.py": report})
    before = {name: (root / name).read_text() for name in ("main.py", "solver.py", "report.py")}
    result, files = _run("--in-place", str(root))
    assert {name: (root / name).read_text() for name in before} == before
    messages = [f["message"] for f in files["main.py"]["findings"] if f["code"] == "DDP140"]
    assert any("before report.py calls Solver" in m for m in messages), messages


def test_the_script_alone_stays_as_it_is_and_names_what_the_module_needs(tmp_path):
    root = _tree(tmp_path, {"main.py": MAIN, "solver.py": SOLVER, "loaders.py": LOADERS})
    result, files = _run("--in-place", str(root / "main.py"))
    assert (root / "main.py").read_text() == MAIN, "its setup alone would have each rank train its own copy"
    messages = [f["message"] for f in files["main.py"]["findings"] if f["code"] == "DDP140"]
    assert any(m.startswith("left unchanged: this script trains through solver.py") for m in messages), messages
    assert any(m.startswith("solver.py:") and "DDP003" in m for m in messages), messages
    assert any(m.startswith("loaders.py:") and "DDP030" in m for m in messages), messages


def test_a_module_that_subclasses_the_class_is_no_script_to_set_up(tmp_path):
    subclass = "from solver import Solver\n\n\nclass FastSolver(Solver):\n    pass\n"
    root = _tree(tmp_path, {"main.py": MAIN, "solver.py": SOLVER, "loaders.py": LOADERS, "fast.py": subclass})
    result, files = _run("--in-place", str(root))
    assert "init_process_group" in (root / "main.py").read_text()
    assert (root / "fast.py").read_text() == subclass and not files["fast.py"]["findings"]


def test_the_module_alone_says_what_migrating_it_with_its_script_changes(tmp_path):
    root = _tree(tmp_path, {"solver.py": SOLVER})
    result, files = _run("--check", str(root / "solver.py"))
    hints = [f["message"] for f in files["solver.py"]["findings"] if f["code"] == "DDP140"]
    assert len(hints) == 1 and hints[0].startswith("this module builds and trains its models"), hints
    assert "DDP003: self.model wrapped in DistributedDataParallel" in hints[0]
    # what project mode adds in the module's own loops is listed too, as a run on the project makes it
    assert "DDP031: `self.loader.sampler.set_epoch(epoch)` before the training loop" in hints[0], hints[0]


def test_a_module_no_script_builds_by_name_says_so_in_project_mode(tmp_path):
    """main.py gets its Solver from a factory that picks the class at run time: nothing is
    migrated, the module says why (not "run project mode"), and the script reports its training."""
    registry = ("import importlib\n\n\ndef create(name, loader):\n"
                "    return getattr(importlib.import_module(name), 'Solver')(loader)\n")
    main = MAIN.replace("from solver import Solver\n", "from registry import create\n").replace(
        "Solver(make_loader()).train()", "create('solver', make_loader()).train()")
    root = _tree(tmp_path, {"main.py": main, "solver.py": SOLVER, "loaders.py": LOADERS, "registry.py": registry})
    result, files = _run("--check", str(root))
    solver = [f["message"] for f in files["solver.py"]["findings"] if f["code"] == "DDP140"]
    assert len(solver) == 1 and "no script among the files given builds its classes by name" in solver[0], solver
    assert any(f["code"] == "DDP114" for f in files["main.py"]["findings"])


def test_a_module_with_no_rank_check_gets_no_unused_import(tmp_path):
    quiet = "\n".join(line for line in SOLVER.splitlines() if "print(" not in line and "torch.save" not in line) + "\n"
    path = _tree(tmp_path, {"solver.py": quiet}) / "solver.py"
    told = migrate(quiet, context=FileContext.for_file(path, "solver.py")._replace(set_up_by="main.py"))
    assert "self.model = DDP(self.model" in told.code
    assert "torch.distributed" not in told.code and "dist." not in told.code
