"""The engine's look at a file's text before it parses it (migrator.relevance, triage.may_need_engine).

Parsing with LibCST is most of what a run costs, so a file is parsed only when its text has the
shape of something a rule reads. These tests hold that look to the engine itself: every file it
passes over (fixtures, rule examples, the real-world corpus when present) gets the whole engine
here, and must come out with nothing changed and nothing reported.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Tuple

import pytest

from migrator import RULES, api, triage
from migrator.context import FileContext
from migrator.launcher import LAUNCHER_RULES
from migrator.rules.modules import RULES as PROJECT_RULES
from migrator.relevance import python_may_need_migration, python_may_train

ROOT = Path(__file__).resolve().parent.parent
REALWORLD = ROOT.parent / "shared" / "realworld" / "py"
_OTHER_ENGINES = {rule.code for rule in (*LAUNCHER_RULES, *PROJECT_RULES)}


def _sources() -> Iterator[Tuple[str, str, Optional[FileContext]]]:
    for path in sorted((ROOT / "fixtures").rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8", errors="replace"), FileContext.for_file(path)
    for rule in RULES:
        if rule.code in _OTHER_ENGINES:
            continue
        for example in rule.examples:
            context = FileContext(path=example.path) if example.path else None
            for side, text in (("before", example.before), ("after", example.after)):
                if text is not None:
                    yield f"{rule.code}-{example.id}-{side}", text, context
    for path in sorted(REALWORLD.rglob("*.py")) if REALWORLD.is_dir() else ():
        yield f"realworld/{path.relative_to(REALWORLD)}", path.read_text(encoding="utf-8", errors="replace"), None


def _full_engine(source: str, context: Optional[FileContext]):
    """api.check with the text look limited to the cheap word test it refines."""
    original = api.verdict
    api.verdict = lambda text, ctx: triage.ENGINE if python_may_need_migration(text) else triage.NOTHING
    try:
        return api.check(source, context=context)
    finally:
        api.verdict = original


def test_every_file_passed_over_has_nothing_for_the_engine():
    passed_over = 0
    for name, source, context in _sources():
        first_look = triage.verdict(source, context)
        if not python_may_need_migration(source) or first_look == triage.ENGINE:
            continue
        passed_over += 1
        try:
            result = _full_engine(source, context)
        except Exception:  # noqa: BLE001 - a file that does not parse has nothing to pass over
            continue
        found = [c.code for c in result.changes] + [d.code for d in result.diagnostics]
        assert not found and not result.changed, f"{name}: passed over, but the engine finds {found}"
        if first_look == triage.DISTRIBUTED:  # said only where the engine finds it too
            assert result.distributed, f"{name}: distributed by its first look, not by the engine"
    assert passed_over, "nothing was passed over: the test would prove nothing"


MODEL_FILE = '''"""A model zoo file: it mentions optimizers and training, and trains nothing."""
import torch
import torch.nn as nn


class Block(nn.Module):
    """Use with torch.optim.AdamW; under DataParallel the buffers are replicated."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def train(self, mode=True):
        super().train(mode)
        return self

    def forward(self, x):
        return self.fc(x)


def init_weights(model):
    for p in model.parameters():
        nn.init.normal_(p)
    model.__class__.__name__
'''


@pytest.mark.parametrize("source", [
    pytest.param(MODEL_FILE, id="model-zoo-file"),
    pytest.param("import torch\n\nclass SGD(torch.optim.Optimizer):\n    def step(self): pass\n", id="optimizer-implementation"),
    pytest.param("import torch\n\n\nclass F(torch.autograd.Function):\n    @staticmethod\n    def backward(ctx, g):\n        return g\n",
                 id="autograd-function-backward-definition"),
    pytest.param("import torch\n# wrapped by DataParallel elsewhere; call optim.SGD there\nx = torch.ones(1)\n", id="comment-only"),
])
def test_a_file_without_training_shapes_is_not_parsed(source):
    assert python_may_need_migration(source) and not python_may_train(source)


@pytest.mark.parametrize("line", [
    pytest.param("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)", id="optimizer"),
    pytest.param("opt = Adam(model.parameters())", id="optimizer-imported"),
    pytest.param("optimizer = optimizer_cls(model.parameters())", id="optimizer-chosen-at-run-time"),
    pytest.param("optimizer = get_optimizer(cfg, model)", id="optimizer-helper"),
    pytest.param("model = nn.DataParallel(model)", id="dataparallel"),
    pytest.param("from torch.nn import DataParallel as DP", id="dataparallel-alias"),
    pytest.param("sampler = DistributedSampler(data)", id="sampler"),
    pytest.param("parser.add_argument('--local_rank', type=int)", id="local-rank"),
    pytest.param("os.system('python -m torch.distributed.launch train.py')", id="launch-command"),
    pytest.param("x = x.cuda(async=True)", id="async-keyword"),
])
def test_each_training_shape_is_parsed(line):
    assert python_may_train(f"import torch\n\n{line}\n")


@pytest.mark.parametrize("line", ["loss.backward()", "optimizer.step()", "self.opt_g.step()"])
def test_a_backward_or_a_step_counts_where_training_is_set_up(line):
    """Training through objects built elsewhere is reported in a file that runs or builds its loaders;
    a library's training step (d2's SimpleTrainer.run_step) is its caller's to migrate."""
    assert not python_may_train(f"import torch\n\n\ndef run_step(self):\n    {line}\n")
    assert python_may_train(f"import torch\n\n{line}\n\nif __name__ == '__main__':\n    pass\n")
    assert python_may_train(f"import torch\nloader = torch.utils.data.DataLoader(data)\n\n\ndef f():\n    {line}\n")
    assert not python_may_train("import torch\n\n\ndef f():\n    scheduler.step()\n    scaler.step(opt)\n\nfor x in y:\n    pass\n")


@pytest.mark.parametrize("line", ["mp.spawn(worker, nprocs=2)", "init_distributed_mode(args)"])
def test_code_set_up_for_several_processes_is_parsed_for_its_bugs(line):
    assert not python_may_train(f"import torch\n\n{line}\n")
    assert python_may_train(f"import torch\n\n{line}\ntorch.save(model.state_dict(), 'm.pt')\n")


def test_a_hand_written_update_is_parsed():
    loop = "import torch\nfor p in model.parameters():\n    p.data.add_(p.grad, alpha=-0.1)\n"
    assert python_may_train(loop)
    assert not python_may_train(loop.replace("p.grad", "p.data"))


def test_a_training_call_counts_in_a_file_that_runs():
    call = "import torch\nfrom agent import Agent\n\nagent = Agent()\nagent.learn(steps=10)\n"
    assert not python_may_train(call)  # a library module: its caller trains
    assert python_may_train(call + "\nif __name__ == '__main__':\n    pass\n")


def test_distributed_code_is_parsed_for_its_bugs():
    setup = "import torch\nimport torch.distributed as dist\n"
    assert not python_may_train(setup + "def world():\n    return dist.get_world_size()\n")
    assert python_may_train(setup + "torch.save(state, 'ckpt.pt')\n")
    assert python_may_train(setup + "if dist.get_rank() == 0:\n    evaluate(model)\n")


def test_test_modules_are_parsed_for_launch_usage_only():
    training = "import torch\nopt = torch.optim.SGD(m.parameters(), lr=1)\nloss.backward()\n"
    assert not python_may_train(training, test_module=True)
    assert python_may_train(training + "CMD = 'python -m torch.distributed.launch x.py'\n", test_module=True)


def test_a_model_handed_to_a_project_trainer_is_parsed(tmp_path):
    (tmp_path / "trainer.py").write_text(
        "import torch\n\n\nclass Trainer:\n    def __init__(self, model):\n"
        "        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    (tmp_path / "helpers.py").write_text("def seed(n):\n    pass\n")
    script = tmp_path / "train.py"
    text = "import torch\nfrom trainer import Trainer\n\nmodel = torch.nn.Linear(2, 2)\nt = Trainer(model)\nt.go()\n"
    script.write_text(text)
    assert not python_may_train(text)
    assert triage.may_need_engine(text, FileContext.for_file(script))
    other = text.replace("from trainer import Trainer", "from helpers import seed as Trainer")
    assert not triage.may_need_engine(other, FileContext.for_file(script))


def test_a_project_module_imported_whole_is_asked_about_the_names_called_on_it(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "engine.py").write_text(
        "import torch\n\n\ndef fit(model):\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    script = tmp_path / "train.py"
    context = FileContext.for_file(script)
    for text in ("import torch\nimport lib.engine\n\nlib.engine.fit(torch.nn.Linear(2, 2))\n",
                 "import torch\nimport lib.engine as engine\n\nengine.fit(torch.nn.Linear(2, 2))\n",
                 "import torch\nfrom lib import engine\n\nengine.fit(torch.nn.Linear(2, 2))\n"):
        assert triage.may_need_engine(text, context), text
    assert not triage.may_need_engine("import torch\nimport lib.engine as engine\n\nprint(engine)\n", context)
