"""The project's modules are read and summarised once per process, by file (migrator.graph.modules)."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from migrator import migrate
from migrator.graph import distributing as project_modules, training as project_training
from migrator.context import FileContext
from migrator.graph import modules as index_module
from migrator.graph.modules import INDEX, lookup


def _write(root: Path, files: dict) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(autouse=True)
def fresh_index():
    INDEX.clear()
    project_modules._ANSWERS.clear()
    project_modules._REACH.clear()
    project_training._ANSWERS.clear()
    yield
    INDEX.clear()


@pytest.fixture
def parses(monkeypatch):
    """Counts ast.parse calls made by the module index, by file."""
    counted = {}
    real = ast.parse

    def counting(text, *args, **kwargs):
        counted[text] = counted.get(text, 0) + 1
        return real(text, *args, **kwargs)

    monkeypatch.setattr(index_module.ast, "parse", counting)
    return counted


HELPERS = {
    "setup.py": "",
    "lib/__init__.py": "from .dist import *\nfrom .engine import Trainer\n",
    "lib/dist.py": (
        "import torch.distributed as dist\n\n\n"
        "def _really_init(backend):\n    dist.init_process_group(backend)\n\n\n"
        "def init_distributed_mode(args):\n    _really_init('nccl')\n"
    ),
    "lib/engine.py": (
        "import torch\n\n\nclass Trainer:\n    def __init__(self, model, loader):\n"
        "        self.model = model\n        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "        self.loader = loader\n\n    def fit(self):\n        for x, y in self.loader:\n"
        "            self.opt.zero_grad()\n            self.model(x).sum().backward()\n            self.opt.step()\n"
    ),
}


def test_a_module_is_parsed_once_for_scripts_in_several_folders(tmp_path, parses):
    _write(tmp_path, HELPERS)
    for folder in ("tools", "projects/a", "projects/b"):
        (tmp_path / folder).mkdir(parents=True)
    roots_of = {folder: FileContext.for_file(tmp_path / folder / "train.py").modules.roots for folder in ("tools", "projects/a", "projects/b")}
    for roots in roots_of.values():
        assert project_modules.what_it_does(roots, "lib.init_distributed_mode") == (
            "calls `_really_init`, which calls init_process_group"
        )
        assert project_training.trained_parameters(roots, "lib.Trainer")[:2] == ("model", "#0")
    texts = {(tmp_path / name).read_text() for name in ("lib/__init__.py", "lib/dist.py", "lib/engine.py")}
    assert {text: parses.get(text) for text in texts} == {text: 1 for text in texts}


def test_an_edited_module_is_read_again(tmp_path):
    _write(tmp_path, {"helpers.py": "def f():\n    pass\n"})
    roots = (str(tmp_path),)
    first = lookup(roots, "helpers.f")[0]
    assert lookup(roots, "helpers.f")[0] is first
    stat = os.stat(tmp_path / "helpers.py")
    (tmp_path / "helpers.py").write_text("def g():\n    pass\n")
    os.utime(tmp_path / "helpers.py", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again = lookup(roots, "helpers.g")[0]
    assert again is not first and "g" in again.definitions


def test_lookup_and_resolution(tmp_path):
    _write(tmp_path, {"a/__init__.py": "", "a/b.py": "class C:\n    def m(self):\n        pass\n"})
    roots = (str(tmp_path),)
    module, names = lookup(roots, "a.b.C.m")
    assert module.path.endswith(os.path.join("a", "b.py")) and names == ("C", "m")
    assert lookup(roots, "a.missing")[1] == ("missing",)  # the package, asked for a name it may re-export
    assert lookup(roots, "nowhere.f") is None
    assert lookup(roots, "not-an.identifier") is None
    assert lookup(roots, "a.b.C")[0].package == "a" and lookup(roots, "a.x")[0].package == "a"


def test_a_module_that_does_not_parse_answers_nothing(tmp_path):
    _write(tmp_path, {"broken.py": "def f(:\n"})
    assert project_modules.what_it_does((str(tmp_path),), "broken.f") is None


def test_import_cycles_end(tmp_path):
    _write(tmp_path, {
        "a.py": "from b import g\n\n\ndef f():\n    g()\n",
        "b.py": "from a import f\n\n\ndef g():\n    f()\n",
    })
    assert project_modules.what_it_does((str(tmp_path),), "a.f") is None


def test_following_helpers_is_linear(tmp_path):
    """A chain of 300 helpers, each calling the next, the last setting up: every function's calls are
    collected once, and the whole chain answers in well under a second (quadratic took many)."""
    n = 300
    body = "import torch.distributed as dist\n\n\n" + "".join(
        f"def h{i}():\n    h{i + 1}()\n\n\n" for i in range(n)
    ) + f"def h{n}():\n    dist.init_process_group('gloo')\n"
    _write(tmp_path, {"chain.py": body})
    roots = (str(tmp_path),)
    module = lookup(roots, "chain.h0")[0]
    collected = []
    real = module.calls
    module.calls = lambda name: collected.append(name) or real(name)  # type: ignore[method-assign]
    assert project_modules.what_it_does(roots, "chain.h0").startswith("calls `h1`")
    assert sorted(collected) == sorted(f"h{i}" for i in range(n + 1))
    for i in range(n + 1):
        assert project_modules.what_it_does(roots, f"chain.h{i}")
    assert len(collected) == n + 1  # answers are kept: nothing is collected again


def test_a_script_in_a_subfolder_sees_a_helper_at_the_top(tmp_path):
    _write(tmp_path, HELPERS)
    script = tmp_path / "tools" / "train.py"
    _write(tmp_path, {"tools/train.py": (
        "import torch\nfrom lib import init_distributed_mode\n\n\ndef main(args):\n    init_distributed_mode(args)\n"
        "    model = torch.nn.Linear(2, 2)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for _ in range(3):\n        opt.zero_grad()\n        model(torch.ones(1, 2)).sum().backward()\n        opt.step()\n\n\n"
        "if __name__ == '__main__':\n    main(None)\n"
    )})
    result = migrate(script.read_text(), context=FileContext.for_file(script))
    assert not result.changed  # already distributed through the helper: nothing to set up
