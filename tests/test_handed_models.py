"""Where a training script's model goes in its project's modules (migrator.project.values): followed
from the script's calls over parameters, `self.x`, locals, calls and base classes, never by name."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

from migrator.context import ProjectModules, package_of
from migrator.graph.modules import INDEX, ModuleSummary
from migrator.project.values import Family, handed_values


def _tree(root: Path, files: dict) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _handed(root: Path, files: dict, models=("model",), script="train.py") -> dict:
    _tree(root, files)
    INDEX.clear()
    path = (root / script).resolve()
    summary = ModuleSummary(str(path), path.read_text(), package_of(path))
    found = handed_values(ProjectModules.for_script(path).roots, summary, models)
    return {os.path.relpath(os.path.realpath(p), root.resolve()): h.models.scopes for p, h in found.items() if h.models.scopes}


def test_a_parameter_and_the_functions_it_is_passed_on_to(tmp_path):
    found = _handed(tmp_path, {
        "train.py": """
            from train_eval import train
            model = Net()
            train(config, model, loader)
        """,
        "train_eval.py": """
            def train(config, net, loader):
                for x in loader:
                    net(x).sum().backward()
                evaluate(config, model=net)

            def evaluate(config, model):
                model.eval()

            def unrelated(model):
                return model
        """,
    })
    assert found == {"train_eval.py": {"train": {"net"}, "evaluate": {"model"}}}


def test_self_attributes_of_a_class_and_a_local_alias(tmp_path):
    found = _handed(tmp_path, {
        "train.py": """
            from engine import Trainer
            classifier = Net()
            trainer = Trainer(classifier, model_dir="runs")
            trainer.fit(epochs=2)
        """,
        "engine.py": """
            class Trainer:
                def __init__(self, backbone, model_dir):
                    self.backbone = backbone.to("cpu")
                    self.model_dir = model_dir

                def fit(self, epochs):
                    net = self.backbone
                    return net
        """,
    }, models=("classifier",))
    assert found == {"engine.py": {"Trainer.__init__": {"backbone"}, "Trainer": {"self.backbone"}, "Trainer.fit": {"net"}}}


def test_a_base_class_in_another_package_through_a_star_reexport(tmp_path):
    found = _handed(tmp_path, {
        "train.py": """
            from trainer import Trainer
            model = Net()
            Trainer(model, criterion, optimizer).train()
        """,
        "trainer/__init__.py": "from .trainer import *\n",
        "trainer/trainer.py": """
            from base import BaseTrainer

            class Trainer(BaseTrainer):
                def __init__(self, model, criterion, optimizer):
                    super().__init__(model, criterion, optimizer)

                def _train_epoch(self, epoch):
                    self.model.train()
        """,
        "base/__init__.py": "from .base_trainer import *\n",
        "base/base_trainer.py": """
            class BaseTrainer:
                def __init__(self, model, criterion, optimizer):
                    self.model = model
                    self.criterion = criterion
        """,
    })
    assert found["base/base_trainer.py"] == {"BaseTrainer.__init__": {"model"}, "BaseTrainer": {"self.model"}}
    assert found["trainer/trainer.py"]["Trainer"] == {"self.model"}


def test_a_method_of_an_instance_and_an_inherited_init(tmp_path):
    found = _handed(tmp_path, {
        "train.py": """
            from lib import Runner, save_checkpoint
            model = Net()
            runner = Runner()
            runner.fit(model, loader)
            save_checkpoint(model=model, epoch=3)
        """,
        "lib.py": """
            class Base:
                def fit(self, network, loader):
                    self.network = network

            class Runner(Base):
                pass

            def save_checkpoint(model, epoch):
                return model.state_dict()
        """,
    })
    # the subclass reads what its inherited method kept, in its own methods too
    assert found == {"lib.py": {"Base.fit": {"network"}, "Base": {"self.network"}, "Runner": {"self.network"},
                                "save_checkpoint": {"model"}}}


def test_nothing_that_is_not_handed_the_model(tmp_path):
    found = _handed(tmp_path, {
        "train.py": """
            from helpers import build, log
            model = build(config)
            log(config, "started")
        """,
        "helpers.py": """
            def build(config):
                model = Net(config)
                return model

            def log(config, message):
                print(message)
        """,
    })
    assert found == {}


def _values(root: Path, files: dict, script: str, family=()) -> dict:
    _tree(root, files)
    INDEX.clear()
    path = (root / script).resolve()
    summary = ModuleSummary(str(path), path.read_text(), package_of(path))
    found = handed_values(ProjectModules.for_script(path).roots, summary, (), family)
    return {os.path.relpath(os.path.realpath(p), root.resolve()): h.epochs.scopes for p, h in found.items() if h.epochs.scopes}


def test_the_epoch_is_the_variable_of_a_counting_loop_around_the_call(tmp_path):
    found = _values(tmp_path, {
        "train.py": """
            from engine import Trainer, evaluate

            def train(epoch):
                pass

            trainer = Trainer()
            for epoch in range(1, 10):
                trainer.train_epoch(epoch)
                train(epoch)
            for batch in loader:  # a loop over data, not a count
                evaluate(batch)
            steps = [1, 2]
            for step in steps:
                evaluate(step)
        """,
        "engine.py": """
            class Trainer:
                def train_epoch(self, current):
                    pass

            def evaluate(x):
                pass
        """,
    }, "train.py")
    assert found == {"engine.py": {"Trainer.train_epoch": {"current"}}, "train.py": {"train": {"epoch"}}}


def test_a_base_class_loop_reaches_the_subclass_override(tmp_path):
    files = {
        "base.py": """
            class BaseTrainer:
                def train(self):
                    for epoch in range(self.start, self.epochs + 1):
                        self._train_epoch(epoch)

                def _train_epoch(self, epoch):
                    raise NotImplementedError
        """,
        "trainer.py": """
            from base import BaseTrainer

            class Trainer(BaseTrainer):
                def _train_epoch(self, n):
                    pass
        """,
    }
    _tree(tmp_path, files)
    INDEX.clear()
    summaries = [ModuleSummary(str((tmp_path / name).resolve()), (tmp_path / name).read_text(), None) for name in files]
    family = [Family(s.path, node.name) for s in summaries for node in s.tree.body if node.__class__.__name__ == "ClassDef"]
    found = _values(tmp_path, files, "base.py", family)
    assert found == {"base.py": {"BaseTrainer._train_epoch": {"epoch"}}, "trainer.py": {"Trainer._train_epoch": {"n"}}}
    assert _values(tmp_path, files, "base.py") == {"base.py": {"BaseTrainer._train_epoch": {"epoch"}}}  # no family, no override


def _states(root: Path, files: dict, models=("model",)) -> dict:
    _tree(root, files)
    INDEX.clear()
    path = (root / "train.py").resolve()
    summary = ModuleSummary(str(path), path.read_text(), package_of(path))
    found = handed_values(ProjectModules.for_script(path).roots, summary, models)
    return {os.path.relpath(os.path.realpath(p), root.resolve()): h.states.scopes for p, h in found.items() if h.states.scopes}


def test_a_state_built_from_the_model_is_followed_into_a_saver_kept_on_self(tmp_path):
    """`self.saver = Saver(args)` in the script's own trainer, then
    `self.saver.save_checkpoint({"state_dict": ...}, is_best)`: the helper's `state` is a checkpoint."""
    found = _states(tmp_path, {
        "train.py": """
            from utils.saver import Saver

            class Trainer:
                def __init__(self, args):
                    self.saver = Saver(args)

                def validation(self, epoch, model):
                    self.saver.save_checkpoint({"epoch": epoch, "state_dict": model.state_dict()}, True)
                    self.saver.save_experiment_config(epoch)
        """,
        "utils/__init__.py": "",
        "utils/saver.py": """
            class Saver:
                def save_checkpoint(self, state, is_best):
                    kept = state
                    return kept

                def save_experiment_config(self, epoch):
                    return epoch
        """,
    })
    assert found == {"utils/saver.py": {"Saver.save_checkpoint": {"state", "kept"}}}


def test_a_module_handed_inside_a_dict_through_a_star_import(tmp_path):
    """`from utils import *`, then `save_checkpoint(epoch, {"encoder": encoder})`: the dict keeps a
    whole module, so it is a state; the epoch is not."""
    found = _states(tmp_path, {
        "train.py": """
            from utils import *
            encoder = Encoder()
            for epoch in range(3):
                save_checkpoint(epoch, {"encoder": encoder}, "data")
        """,
        "utils.py": """
            def save_checkpoint(epoch, modules, name):
                return modules
        """,
    }, models=("encoder",))
    assert found == {"utils.py": {"save_checkpoint": {"modules"}}}


def _loaders(root: Path, files: dict, script="train.py") -> dict:
    _tree(root, files)
    INDEX.clear()
    path = (root / script).resolve()
    summary = ModuleSummary(str(path), path.read_text(), package_of(path))
    found = handed_values(ProjectModules.for_script(path).roots, summary, ())
    return {os.path.relpath(os.path.realpath(p), root.resolve()): h.loaders for p, h in found.items() if h.loaders}


LOADER_FACTORIES = """
    from torch.utils.data import DataLoader

    def get_train_loader(data):
        return DataLoader(data, shuffle=True)

    def get_test_loader(data):
        return DataLoader(data, shuffle=True)
"""


def test_a_loader_factory_the_script_only_evaluates_with(tmp_path):
    found = _loaders(tmp_path, {
        "train.py": """
            from utils import get_test_loader, get_train_loader
            train_loader = get_train_loader(train_set)
            test_loader = get_test_loader(test_set)
            for epoch in range(2):
                for x, y in train_loader:
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                for x, y in test_loader:
                    model(x)
                print(len(test_loader.dataset))
        """,
        "utils.py": LOADER_FACTORIES,
    })
    assert found == {"utils.py": {"get_train_loader": True, "get_test_loader": False}}


def test_a_loader_handed_on_to_code_the_flow_does_not_follow_is_not_known(tmp_path):
    # A peek at one batch does not train, but the module's fit() may: the factory is not known to
    # be an evaluation loader's, and its loader stays sharded.
    found = _loaders(tmp_path, {
        "train.py": """
            from engine import fit
            from utils import get_train_loader
            train_loader = get_train_loader(train_set)
            for x, y in train_loader:
                print(x.shape)
                break
            fit(model, train_loader)
        """,
        "utils.py": LOADER_FACTORIES,
        "engine.py": "def fit(model, loader):\n    pass\n",
    })
    assert found == {}
