"""Project mode on multi-file projects (fixtures/projects/<name>/): golden trees, idempotency,
what a run on the script alone reports, and the pure planner's edge cases.

`pytest --update-fixtures tests/test_projects.py` rewrites expected/ from the engine; review it.
The runtime tests (tests/test_projects_runtime.py) run expected/ under torchrun.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import fixture_cases
from migrator.cli import cli
from migrator.project.graph import ProjectGraph, import_lines
from migrator.project.plan import ProjectFile, plan_project
from migrator.rules.modules.base import Receivers

CASES = fixture_cases.discover_projects()
IDS = [case.name for case in CASES]


def _copy(case: fixture_cases.ProjectCase, tmp_path: Path) -> Path:
    root = tmp_path / case.name
    shutil.copytree(case.input_dir, root)
    (root / ".git").mkdir()  # the project's top, as in a clone: imports are not looked for above it
    return root


def _run(*args: str):
    return CliRunner().invoke(cli, [*args, "--color", "never"], catch_exceptions=False)


def _sources(root: Path):
    return {name: data for name, data in fixture_cases.tree_files(root).items() if not name.startswith(".git")}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_project_migrates_to_expected_tree(case, tmp_path, update_fixtures):
    root = _copy(case, tmp_path)
    result = _run("--in-place", str(root))
    assert result.exit_code == 0, result.output
    migrated = _sources(root)
    if update_fixtures and not case.unchanged:
        shutil.rmtree(case.expected_dir, ignore_errors=True)
        shutil.copytree(root, case.expected_dir, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    expected = _sources(case.migrated_dir)
    assert sorted(migrated) == sorted(expected)
    for name in expected:
        assert migrated[name].decode() == expected[name].decode(), f"{case.name}: {name} differs from expected"
    if case.unchanged:
        assert migrated == _sources(case.input_dir), "an already-distributed project must stay byte-identical"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_project_second_run_changes_nothing_and_check_passes(case, tmp_path):
    root = _copy(case, tmp_path)
    _run("--in-place", str(root))
    once = _sources(root)
    result = _run("--check", "--output-format", "json", str(root))
    report = json.loads(result.output)
    assert report["summary"]["changed"] == 0, result.output
    assert result.exit_code == (1 if report["summary"]["needs_human"] else 0)
    assert _run("--in-place", str(root)).exit_code == 0
    assert _sources(root) == once


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_project_findings(case, tmp_path):
    root = _copy(case, tmp_path)
    result = _run("--check", "--output-format", "json", str(root))
    report = json.loads(result.output)
    codes = {f["code"] for item in report["files"] for f in item["findings"] if f["kind"] == "diagnostic"}
    assert codes == set(case.diagnostics), result.output
    assert result.exit_code == (0 if case.unchanged else 1)


@pytest.mark.parametrize("case", [c for c in CASES if not c.unchanged], ids=[c.name for c in CASES if not c.unchanged])
def test_script_alone_names_the_modules_it_needs(case, tmp_path):
    """`ddp-migrate train.py`: the modules are not among the files given, so they stay as they are
    and the script's findings say which module needs what (DDP140)."""
    root = _copy(case, tmp_path)
    result = _run("--in-place", "--output-format", "json", str(root / case.entry))
    report = json.loads(result.output)
    changed_modules = {
        name for name, data in _sources(root).items()
        if name != case.entry and data != (case.input_dir / name).read_bytes()
    }
    assert not changed_modules, "a module not named on the command line was changed"
    needs = [f["message"] for item in report["files"] for f in item["findings"] if f["code"] == "DDP140"]
    expected_modules = {name for name, data in _sources(case.expected_dir).items()
                        if name != case.entry and data != (case.input_dir / name).read_bytes()}
    for module in expected_modules:
        assert any(message.startswith(module + ":") for message in needs), (module, needs)


def test_check_and_diff_report_the_same_findings_at_the_same_places(tmp_path):
    """A flat script whose loop the engine re-indents (try/finally around the training) gets its
    set_epoch from project mode: every mode reports it at the loop's line in the file as read."""
    _tree(tmp_path, {
        "loaders.py": _LOADERS,
        "train.py": (
            "import torch\nimport torch.nn as nn\nfrom loaders import make_loader\n\n"
            "model = nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "loader = make_loader()\nfor epoch in range(2):\n    for x, y in loader:\n"
            "        optimizer.zero_grad()\n        nn.functional.mse_loss(model(x), y).backward()\n"
            "        optimizer.step()\n"
        ),
    })

    def findings(*flags):
        report = json.loads(_run(*flags, "--output-format", "json", str(tmp_path)).output)
        return sorted((item["path"], f["code"], f["line"], f["column"], f["message"])
                      for item in report["files"] for f in item["findings"])

    checked, diffed = findings("--check"), findings()
    assert checked == diffed
    assert any(code == "DDP031" and path.endswith("train.py") and line == 9 for path, code, line, _, _ in checked), checked


REPORTED = [case for case in CASES if (case.folder / "report.json").exists()]


@pytest.mark.parametrize("case", REPORTED, ids=[case.name for case in REPORTED])
def test_project_report_does_not_depend_on_how_modules_are_read(case, tmp_path, monkeypatch, update_fixtures):
    """report.json is the `--check` report of the project: the same files, findings and messages
    whether the project's modules are read fresh, from a warm per-process index, by worker
    processes, or by a new process."""
    from migrator.graph import distributing as project_modules, training as project_training
    from migrator.graph.modules import INDEX

    root = _copy(case, tmp_path)
    monkeypatch.chdir(root)
    golden = case.folder / "report.json"
    check = ["--check", "--output-format", "json", "."]

    def cold() -> str:
        INDEX.clear()
        project_modules._ANSWERS.clear()
        project_modules._REACH.clear()
        project_training._ANSWERS.clear()
        return _run(*check, "--jobs", "1").output

    runs = {"cold caches, one process": cold()}
    if update_fixtures:
        golden.write_text(runs["cold caches, one process"])
    runs["warm caches"] = _run(*check, "--jobs", "1").output
    runs["two worker processes"] = _run(*check, "--jobs", "2").output
    fresh = subprocess.run([sys.executable, "-m", "migrator", *check], capture_output=True, text=True, cwd=root)
    runs["a new process"] = fresh.stdout
    for how, output in runs.items():
        assert json.loads(output) == json.loads(golden.read_text()), how


# --------------------------------------------------------------------------- the import graph


def test_import_lines_read_every_spelling():
    text = (
        "import os, utils.misc as misc\n"
        "from .saver import Saver\n"
        "from ..data import (\n    make_loader,  # the loaders\n    Batch as B,\n)\n"
        "from trainer import *\n"
        "x = 1  # import nothing\n"
        "    from base import BaseTrainer  # indented: inside a function\n"
    )
    lines = import_lines(text)
    assert [(l.level, l.module, l.names) for l in lines] == [
        (0, "os", ()), (0, "utils.misc", ()), (1, "saver", ("Saver",)), (2, "data", ("make_loader", "Batch")),
        (0, "trainer", ()), (0, "base", ("BaseTrainer",)),
    ]


def _tree(root: Path, files: dict) -> None:
    (root / ".git").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_graph_follows_packages_star_reexports_and_relative_imports(tmp_path):
    _tree(tmp_path, {
        "train.py": "from trainer import Trainer\nimport data_loader.loaders as module_data\n",
        "trainer/__init__.py": "from .trainer import *\n",
        "trainer/trainer.py": "from base import BaseTrainer\n",
        "base/__init__.py": "from .base_trainer import BaseTrainer\n",
        "base/base_trainer.py": "import torch\n",
        "data_loader/__init__.py": "",
        "data_loader/loaders.py": "from .transforms import *\n",
        "data_loader/transforms.py": "import torch\n",
        "unrelated.py": "import torch\n",
    })
    texts = {str((tmp_path / n).resolve()): (tmp_path / n).read_text() for n in ("train.py", "trainer/__init__.py")}
    graph = ProjectGraph(texts)
    reached = {Path(p).relative_to(tmp_path.resolve()).as_posix(): chain for p, chain in graph.reachable(str((tmp_path / "train.py").resolve()))}
    assert set(reached) == {"trainer/__init__.py", "trainer/trainer.py", "base/__init__.py", "base/base_trainer.py",
                            "data_loader/__init__.py", "data_loader/loaders.py", "data_loader/transforms.py"}
    assert len(reached["base/base_trainer.py"]) == 5  # train -> trainer/__init__ -> trainer.trainer -> base/__init__ -> it
    assert graph.walked(str((tmp_path / "trainer/__init__.py").resolve()))
    assert not graph.walked(str((tmp_path / "base/base_trainer.py").resolve()))


# --------------------------------------------------------------------------- the planner

_ENTRY = '''import torch
import torch.nn as nn
from loaders import make_loader
from saver import save_checkpoint


def main():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = make_loader()
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        save_checkpoint(model, epoch)


if __name__ == "__main__":
    main()
'''
_LOADERS = '''import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader():
    dataset = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    return DataLoader(dataset, batch_size=4, shuffle=True)
'''
_SAVER = '''import torch


def save_checkpoint(model, epoch):
    torch.save({"model": model.state_dict(), "epoch": epoch}, f"epoch{epoch}.pt")
'''


def _project(tmp_path: Path, files: dict, given=None):
    from migrator.api import migrate
    from migrator.context import FileContext

    _tree(tmp_path, files)
    project = []
    for name in given or files:
        path = tmp_path / name
        text = path.read_text()
        result = migrate(text, context=FileContext.for_file(path, name))
        project.append(ProjectFile(str(path.resolve()), name, text, result.code, result.changes, result.diagnostics,
                                   models=result.models))
    return project, {Path(p).name: u for p, u in plan_project(project).items()}


def test_plan_migrates_the_modules_a_script_trains_through(tmp_path):
    _, updates = _project(tmp_path, {"train.py": _ENTRY, "loaders.py": _LOADERS, "saver.py": _SAVER})
    assert {c.code for c in updates["loaders.py"].changes} == {"DDP030"}
    assert {c.code for c in updates["saver.py"].changes} == {"DDP032", "DDP033"}
    assert "DDP108" in updates["train.py"].dropped  # the script's "no loader here" is answered by loaders.py
    assert "sampler=sampler" in updates["loaders.py"].code


def test_plan_names_the_modules_that_were_not_given(tmp_path):
    _, updates = _project(tmp_path, {"train.py": _ENTRY, "loaders.py": _LOADERS, "saver.py": _SAVER}, given=["train.py"])
    assert set(updates) == {"train.py"}
    messages = [d.message for d in updates["train.py"].diagnostics if d.code == "DDP140"]
    assert any(m.startswith("loaders.py:7 needs DDP030") for m in messages), messages
    assert any(m.startswith("saver.py:5 needs DDP032") for m in messages), messages
    assert "DDP108" not in updates["train.py"].dropped  # the loader is still unsharded: the finding stays


_EVALUATE = '''import torch


def evaluate(net, batches):
    with torch.no_grad():
        return sum(float(net(x).mean()) for x in batches) / net.n_outputs
'''
_HANDS_OVER = _ENTRY.replace("from saver import save_checkpoint", "from evaluate import evaluate").replace(
    "    model = nn.Linear(4, 1)\n", "    model = nn.Linear(4, 1)\n    model.n_outputs = 1\n").replace(
    "        save_checkpoint(model, epoch)\n", "        print(evaluate(model, [torch.randn(2, 4)]))\n")


def test_script_whose_module_reads_the_models_attributes_stays_unchanged_without_it(tmp_path):
    """evaluate.py reads `net.n_outputs`: handed the DDP wrapper it raises AttributeError. Alone,
    the script is left as it was (a script that crashes is worse than a reported decline)."""
    files = {"train.py": _HANDS_OVER, "loaders.py": _LOADERS, "evaluate.py": _EVALUATE}
    _, updates = _project(tmp_path, files, given=["train.py"])
    assert updates["train.py"].revert
    messages = [d.message for d in updates["train.py"].diagnostics if d.code == "DDP140"]
    assert messages[0].startswith("left unchanged: evaluate.py:6 reads the model's own attributes"), messages
    assert any(m.startswith("evaluate.py:6 needs DDP034") for m in messages), messages


def test_script_and_the_module_reading_the_models_attributes_migrate_together(tmp_path):
    files = {"train.py": _HANDS_OVER, "loaders.py": _LOADERS, "evaluate.py": _EVALUATE}
    _, updates = _project(tmp_path, files)
    assert not updates["train.py"].revert
    assert {c.code for c in updates["evaluate.py"].changes} == {"DDP034"}
    assert "(net.module if isinstance(net, DDP) else net).n_outputs" in updates["evaluate.py"].code


def test_plan_leaves_distributed_and_test_modules_alone(tmp_path):
    sharded_elsewhere = _LOADERS.replace("from torch.utils.data import", "from torch.utils.data.distributed import DistributedSampler\nfrom torch.utils.data import")
    _, updates = _project(tmp_path, {
        "train.py": _ENTRY.replace("from saver import save_checkpoint", "from tests.helpers import save_checkpoint"),
        "loaders.py": sharded_elsewhere,
        "tests/__init__.py": "",
        "tests/helpers.py": _SAVER,
    })
    assert set(updates) == {"train.py"}
    # The script's own loop over the helper's loader sets the epoch, guarded: harmless, and right for
    # a loader that has a DistributedSampler.
    assert [c.code for c in updates["train.py"].changes] == ["DDP031"] and not updates["train.py"].diagnostics


def test_plan_needs_a_migrated_script(tmp_path):
    evaluate = _ENTRY.replace("    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n", "").replace(
        "            optimizer.zero_grad()\n", "").replace("nn.functional.mse_loss(model(x), y).backward()", "model(x)").replace(
        "            optimizer.step()\n", "")
    _, updates = _project(tmp_path, {"evaluate.py": evaluate, "loaders.py": _LOADERS, "saver.py": _SAVER})
    assert updates == {}


def test_plan_keeps_prefixed_keys_for_an_unconditional_dataparallel_script(tmp_path):
    entry = _ENTRY.replace("    optimizer =", "    model = nn.DataParallel(model)\n    optimizer =")
    _, updates = _project(tmp_path, {"train.py": entry, "loaders.py": _LOADERS, "saver.py": _SAVER})
    assert {c.code for c in updates["saver.py"].changes} == {"DDP032"}


def test_cli_changes_a_module_named_beside_the_script(tmp_path):
    _tree(tmp_path, {"train.py": _ENTRY, "loaders.py": _LOADERS, "saver.py": _SAVER})
    result = _run("--in-place", "--output-format", "json", str(tmp_path / "train.py"), str(tmp_path / "saver.py"))
    assert result.exit_code == 0, result.output
    assert "dist.get_rank() != 0" in (tmp_path / "saver.py").read_text()
    assert (tmp_path / "loaders.py").read_text() == _LOADERS
    messages = [f["message"] for item in json.loads(result.output)["files"] for f in item["findings"]]
    assert any(m.startswith("loaders.py:7 needs DDP030") for m in messages), messages
    assert not any(m.startswith("saver.py") for m in messages)  # named, so migrated: nothing said of it


def test_save_that_goes_on_with_its_file_is_reported_not_guarded():
    from migrator.project import ModuleRole, migrate_module

    source = '''import shutil
import torch


class Saver:
    def save(self, state, best):
        self.count = best
        path = "last.pt"
        torch.save(state, path)
        shutil.copyfile(path, "best.pt")
'''
    states = Receivers({"Saver.save": {"state"}})  # the script calls saver.save({"model": model.state_dict()}, ...)
    result = migrate_module(source, ModuleRole(("train.py",), states=states))
    assert result.code == source
    assert [d.code for d in result.diagnostics] == ["DDP140"]
    assert "goes on to use `path`" in result.diagnostics[0].message


def test_a_checkpoint_is_told_by_what_it_saves_not_by_its_names():
    """The same helper: a checkpoint where the script hands it a model's state, reported (not
    guarded) where no call is seen to fill the parameter; a cache named like a checkpoint stays."""
    from migrator.project import ModuleRole, migrate_module

    source = '''import torch


def save_checkpoint(state, path):
    torch.save(state, path)


def cache_model_inputs(dataset, model_path):
    torch.save(dataset.tensors, model_path)
'''
    handed = migrate_module(source, ModuleRole(("train.py",), states=Receivers({"save_checkpoint": {"state"}})))
    assert [(c.code, c.line) for c in handed.changes] == [("DDP032", 5)]
    assert [(d.code, d.line) for d in handed.diagnostics] == [("DDP140", 9)]
    unknown = migrate_module(source, ModuleRole(("train.py",)))
    assert unknown.code == source
    assert [(d.code, d.line) for d in unknown.diagnostics] == [("DDP140", 5), ("DDP140", 9)]
    assert "a parameter of `save_checkpoint()` that no call seen fills with a model's state" in unknown.diagnostics[0].message


def test_a_module_that_wraps_dataparallel_itself_keeps_the_script_unchanged(tmp_path):
    """yassouali/pytorch-segmentation's BaseTrainer wraps the model it is handed in DataParallel: a
    DDP wrap in the script would end up inside a DataParallel. The script stays as it was, and says why."""
    trainer = '''import torch


class Trainer:
    def __init__(self, model, loader):
        self.model = torch.nn.DataParallel(model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loader = loader

    def train(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
'''
    entry = '''import torch
import torch.nn as nn
from trainer import Trainer
from loaders import make_loader


def main():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in make_loader():
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    Trainer(model, make_loader()).train(1)


if __name__ == "__main__":
    main()
'''
    _tree(tmp_path, {"train.py": entry, "trainer.py": trainer, "loaders.py": _LOADERS})
    result = _run("--in-place", "--output-format", "json", str(tmp_path))
    assert (tmp_path / "train.py").read_text() == entry
    assert (tmp_path / "loaders.py").read_text() == _LOADERS
    report = json.loads(result.output)
    messages = [f["message"] for item in report["files"] if item["path"].endswith("train.py") for f in item["findings"]]
    assert any("left unchanged: trainer.py:6" in m and "DataParallel" in m for m in messages), messages


def test_a_trainer_whose_base_class_builds_the_optimizer_is_followed(tmp_path):
    """`Trainer(model, loader)` from trainer/, whose BaseTrainer (base/, re-exported by a star
    import) builds the optimizer from the model it is handed: the script's model is the trained one."""
    from migrator.api import migrate
    from migrator.context import FileContext

    _tree(tmp_path, {
        "train.py": (
            "import torch.nn as nn\nfrom trainer import Trainer\nfrom loaders import make_loader\n\n\n"
            "def main():\n    model = nn.Linear(4, 1)\n    trainer = Trainer(model, make_loader())\n    trainer.train()\n\n\n"
            "if __name__ == \"__main__\":\n    main()\n"
        ),
        "trainer/__init__.py": "from .trainer import Trainer\n",
        "trainer/trainer.py": (
            "from base import BaseTrainer\n\n\nclass Trainer(BaseTrainer):\n"
            "    def __init__(self, model, loader):\n        super().__init__(model)\n        self.loader = loader\n"
        ),
        "base/__init__.py": "from .base_trainer import *\n",
        "base/base_trainer.py": (
            "import torch\n\n\nclass BaseTrainer:\n    def __init__(self, model):\n        self.model = model\n"
            "        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)\n"
        ),
        "loaders.py": _LOADERS,
    })
    path = tmp_path / "train.py"
    result = migrate(path.read_text(), context=FileContext.for_file(path, "train.py"))
    assert "model = DDP(model" in result.code
    assert result.code.index("model = DDP(model") < result.code.index("trainer = Trainer(model")


def test_a_planner_failure_leaves_the_script_unchanged_and_says_so(tmp_path, monkeypatch):
    import migrator.project.plan as plan

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(plan, "plan_project", broken)
    _tree(tmp_path, {"train.py": _ENTRY, "loaders.py": _LOADERS, "saver.py": _SAVER})
    result = _run("--check", str(tmp_path))
    assert result.exit_code == 1
    assert "internal error in project mode" in result.output and "RuntimeError: boom" in result.output
    assert "Traceback" not in result.output
    result = _run("--in-place", str(tmp_path))
    assert "this script is left unchanged" in result.output
    assert (tmp_path / "train.py").read_text() == _ENTRY


def test_a_bug_in_a_module_planner_is_reported_not_skipped(tmp_path, monkeypatch):
    """An engine bug while planning a module is a reported decline of the script, never a module
    silently left out of the migration (a missed DataParallel would break the DDP script)."""
    from migrator.project import rewrite

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(rewrite, "_plan_module", broken)
    _tree(tmp_path, {"train.py": _ENTRY, "loaders.py": _LOADERS, "saver.py": _SAVER})
    result = _run("--in-place", str(tmp_path))
    assert "internal error in project mode" in result.output and "RuntimeError: boom" in result.output
    assert (tmp_path / "train.py").read_text() == _ENTRY


def test_a_suppression_comment_in_a_module_is_honoured():
    from migrator.project import ModuleRole, migrate_module

    from migrator.rules.modules.base import Receivers

    source = _SAVER.replace('f"epoch{epoch}.pt")', 'f"epoch{epoch}.pt")  # ddp-migrate: ignore[DDP032]')
    handed = Receivers({"save_checkpoint": {"model"}})  # train.py calls save_checkpoint(model, epoch)
    result = migrate_module(source, ModuleRole(("train.py",), models=handed))
    assert {c.code for c in result.changes} == {"DDP033"}
    assert "get_rank" not in result.code


def test_only_the_loader_the_imported_train_loops_over_is_sharded(tmp_path):
    """cnn-text-classification: `train.train(train_iter, dev_iter, cnn, args)` builds the optimizer
    and trains on train_iter; dev_iter only feeds its evaluation (early stopping on every rank)."""
    from migrator.api import migrate
    from migrator.context import FileContext

    script = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import train

data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
train_iter = DataLoader(data, batch_size=4, shuffle=True)
dev_iter = DataLoader(data, batch_size=32)
cnn = nn.Linear(4, 1)
train.train(train_iter, dev_iter, cnn, None)
'''
    module = '''import torch


def train(train_iter, dev_iter, model, args):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(2):
        for x, y in train_iter:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        evaluate(dev_iter, model)


def evaluate(loader, model):
    with torch.no_grad():
        for x, y in loader:
            model(x)
'''
    _tree(tmp_path, {"main.py": script, "train.py": module})
    path = tmp_path / "main.py"
    result = migrate(script, context=FileContext.for_file(path, "main.py"))
    assert "cnn = DDP(cnn" in result.code
    assert "sampler=train_iter_sampler" in result.code
    assert "dev_iter = DataLoader(data, batch_size=32)" in result.code


def test_the_cli_knows_the_declines_a_caller_answers():
    from migrator import cli as cli_module
    from migrator.project.hints import LIBRARY_DECLINES
    from migrator.rules.modules import MODULE_NEEDS_MIGRATION

    assert cli_module._LIBRARY_DECLINES == LIBRARY_DECLINES | {MODULE_NEEDS_MIGRATION.code}


_RETAINED_MODEL = '''import torch

from models import networks
from models.base_model import BaseModel


class RetainedModel(BaseModel):
    """Trains its generator twice through one forward: the second backward DDP never averages."""

    def __init__(self, opt):
        BaseModel.__init__(self, opt)
        self.loss_names = ["G"]
        self.model_names = ["G"]
        self.netG = networks.define_G(3, 3, opt.ngf, opt.init_type, opt.init_gain, self.gpu_ids)
        self.optimizer_G = torch.optim.Adam(self.netG.parameters(), lr=opt.lr)
        self.optimizers.append(self.optimizer_G)

    def set_input(self, input):
        self.real_A = input["A"].to(self.device)

    def optimize_parameters(self):
        fake = self.netG(self.real_A)
        self.optimizer_G.zero_grad()
        self.loss_G = fake.pow(2).mean()
        self.loss_G.backward(retain_graph=True)
        fake.abs().mean().backward()
        self.optimizer_G.step()
'''


def test_a_factory_that_may_choose_an_unmigratable_model_leaves_every_model_and_script_alone(tmp_path):
    """`create_model(opt)` may import models/retained_model.py, which DDP cannot train (DDP119): the
    script and every model module it chooses from stay byte-identical, each saying why."""
    case = next(c for c in CASES if c.name == "network_factory_gan")
    root = _copy(case, tmp_path)
    (root / "models" / "retained_model.py").write_text(_RETAINED_MODEL)
    before = _sources(root)
    report = json.loads(_run("--in-place", "--output-format", "json", str(root)).output)
    assert _sources(root) == before
    findings = {item["path"].replace("\\", "/").split(str(tmp_path.name) + "/")[-1]: [(f["code"], f["message"]) for f in item["findings"]]
                for item in report["files"]}
    by_file = {path.split("/", 1)[-1] if path.startswith(root.name) else path: found for path, found in findings.items()}

    def of(name):
        return next(found for path, found in by_file.items() if path.endswith(name))

    assert any(code == "DDP119" for code, _ in of("models/retained_model.py"))
    assert any(code == "DDP140" and "retained_model.py" in message and "DDP119" in message for code, message in of("train.py"))
    assert any(code == "DDP140" and "may choose retained_model.py" in message for code, message in of("models/pix2pix_model.py"))


def test_a_factory_is_followed_from_the_script_alone(tmp_path):
    """`ddp-migrate train.py` on a script that never names torch (the start-up fast path would
    call it unchanged): its factory's model module is found, and what each module needs is named."""
    case = next(c for c in CASES if c.name == "network_factory_gan")
    root = _copy(case, tmp_path)
    result = _run("--diff", str(root / "train.py"))
    assert "models/pix2pix_model.py:14 needs DDP003" in result.output
    assert "models/networks.py:34 needs DDP037" in result.output


def test_importlib_factory_patterns():
    import ast

    from migrator.graph.modules import chosen_module_patterns

    source = '''import importlib
def find(name):
    filename = "models." + name + "_model"
    return importlib.import_module(filename)
def find_data(name):
    return importlib.import_module(f"data.{name}_dataset")
def anything(name):
    return importlib.import_module(name)
def two(a, b):
    return importlib.import_module("x." + a + b)
'''
    assert chosen_module_patterns(ast.parse(source)) == (("models.", "_model"), ("data.", "_dataset"))
