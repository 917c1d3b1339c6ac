"""scripts/survey.py and scripts/survey_checks.py: every check passes on one small snippet and
fails on another (so it can fail), classify() on tiny synthetic scripts run through the real
engine, and the survey of the real-world corpus when it is present."""
from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import survey  # noqa: E402
import survey_checks as checks  # noqa: E402
from migrator.types import Diagnostic, Result  # noqa: E402

CORPUS = ROOT.parent / "shared" / "realworld" / "py"


def tree(source: str) -> ast.AST:
    return ast.parse(textwrap.dedent(source))


def problems(check, source: str, *args):
    return check(tree(source), *args)


# ---------------------------------------------------------------- each check: passes, fails


def test_parse_problems():
    assert checks.parse_problems("x = 1\n") == []
    assert checks.parse_problems("x = (\n")


def test_idempotence_problems():
    assert checks.idempotence_problems("x = 1\n", lambda text: text) == []
    found = checks.idempotence_problems("x = 1\ny = 2\n", lambda text: text.replace("y", "z"))
    assert found == ["not idempotent: a second run changes line 2"]


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("model = DDP(model)\n", id="one-wrap"),
        pytest.param(
            """
            if cuda:
                model = DDP(model, device_ids=[0])
            else:
                model = DDP(model)
            """,
            id="if-else-arms",
        ),
        pytest.param(
            """
            if a:
                model = DDP(model)
            elif b:
                model = DistributedDataParallel(model)
            """,
            id="if-elif-arms",
        ),
        pytest.param(
            """
            def a():
                model = DDP(model)
            def b():
                model = DDP(model)
            """,
            id="two-functions",
        ),
        pytest.param("model = DDP(model)\nmodel = Net()\nmodel = DDP(model)\n", id="new-model-between"),
        pytest.param(
            """
            def model_load(fn):
                global model
                model = torch.load(fn)
            model = DDP(model)
            model_load(path)
            model = DDP(model)
            """,
            id="reloaded-by-a-global-helper",
        ),
    ],
)
def test_double_wrap_passes(source):
    assert problems(checks.double_wrap_problems, source) == []


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("model = DDP(model)\nmodel = DDP(model)\n", id="twice-in-a-row"),
        pytest.param(
            """
            if use_ddp:
                model = DDP(model)
            model = nn.parallel.DistributedDataParallel(model)
            """,
            id="in-if-then-after",
        ),
        pytest.param(
            """
            class T:
                def setup(self):
                    self.net = DDP(self.net)
                    for epoch in range(3):
                        self.net = DDP(self.net)
            """,
            id="self-attribute-in-loop",
        ),
        pytest.param("model = DDP(DDP(model))\n", id="ddp-of-ddp"),
        pytest.param("model = DDP(net)\nouter = DDP(model)\n", id="argument-already-wrapped"),
        pytest.param(
            """
            def show(fn):
                global model
                print(model)
            model = DDP(model)
            show(path)
            model = DDP(model)
            """,
            id="a-global-helper-that-only-reads",
        ),
    ],
)
def test_double_wrap_fails(source):
    assert problems(checks.double_wrap_problems, source)


def test_unbound_setup_name():
    good = "import os\nimport torch.distributed as dist\nlocal_rank = int(os.environ.get('LOCAL_RANK', 0))\n"
    assert problems(checks.unbound_setup_name_problems, good) == []
    bad = "local_rank = int(os.environ.get('LOCAL_RANK', 0))\ntry:\n    import os\nexcept ImportError:\n    raise\n"
    assert problems(checks.unbound_setup_name_problems, bad) == ["line 1: `os` used before it is imported or assigned"]


def test_move_after_wrap():
    assert problems(checks.move_after_wrap_problems, "model = model.to(dev)\nmodel = DDP(model)\n") == []
    assert problems(checks.move_after_wrap_problems, "model = DDP(model)\nmodel = model.to(dev)\n")
    assert problems(checks.move_after_wrap_problems, "model = DDP(model)\nmodel.cuda()\n")
    exclusive = """
        if a:
            model = DDP(model)
        else:
            model.cuda()
        """
    assert problems(checks.move_after_wrap_problems, exclusive) == []


def test_dataparallel_problems():
    assert problems(checks.dataparallel_problems, "model = DDP(model)\nm = DistributedDataParallel(m)\n") == []
    assert problems(checks.dataparallel_problems, "if isinstance(model, (nn.DataParallel, DDP)):\n    pass\n") == []
    assert problems(checks.dataparallel_problems, "model = nn.DataParallel(model)\n")
    aliased = "from torch.nn import DataParallel as DP\nmodel = DP(model)\n"
    assert problems(checks.dataparallel_problems, aliased)


def test_dataparallel_in_reported_inference_code_is_exempt():
    source = "def predict(model):\n    return nn.DataParallel(model)\n"
    assert problems(checks.dataparallel_problems, source)
    assert problems(checks.dataparallel_problems, source, ("predict",)) == []


def test_extra_process_group_problems():
    once = tree("dist.init_process_group('nccl')\n")
    twice = tree("dist.init_process_group('nccl')\ndist.init_process_group('gloo')\n")
    assert checks.extra_process_group_problems(once, once) == []
    assert checks.extra_process_group_problems(once, twice) == ["init_process_group calls went from 1 to 2"]


def test_process_group_problems():
    assert problems(checks.process_group_problems, "dist.init_process_group(backend='gloo')\n") == []
    assert problems(checks.process_group_problems, "x = 1\n")


def test_local_rank_problems():
    assert problems(checks.local_rank_problems, "r = int(os.environ.get('LOCAL_RANK', 0))\n") == []
    assert problems(checks.local_rank_problems, "r = int(os.environ['LOCAL_RANK'])\n") == []
    assert problems(checks.local_rank_problems, "NAME = 'LOCAL_RANK'\n")


def test_wrap_problems():
    assert problems(checks.wrap_problems, "model = DDP(model)\n") == []
    assert problems(checks.wrap_problems, "model = Net()\n")


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("loader = DataLoader(ds, sampler=s, batch_size=4)\n", id="sampler"),
        pytest.param("loader = DataLoader(ds, shuffle=False)\n", id="unshuffled"),
        pytest.param("loader = DataLoader(ds, batch_size=4)\n", id="no-shuffle-argument"),
        pytest.param("val_loader = DataLoader(ds, shuffle=True)\n", id="evaluation-loader"),
    ],
)
def test_sampler_passes(source):
    assert problems(checks.sampler_problems, source) == []


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("loader = DataLoader(ds, batch_size=4, shuffle=True)\n", id="shuffle-true"),
        pytest.param("train_loader = data.DataLoader(ds, shuffle=args.shuffle)\n", id="shuffle-expression"),
    ],
)
def test_sampler_fails(source):
    assert problems(checks.sampler_problems, source)


def test_set_epoch_problems():
    assert problems(checks.set_epoch_problems, "loader = DataLoader(ds)\n") == []
    with_set_epoch = "s = DistributedSampler(ds)\nfor epoch in range(3):\n    s.set_epoch(epoch)\n"
    assert problems(checks.set_epoch_problems, with_set_epoch) == []
    # A sampler that never shuffles has no order for set_epoch to change.
    assert problems(checks.set_epoch_problems, "s = DistributedSampler(ds, shuffle=False)\n") == []
    assert problems(checks.set_epoch_problems, "s = DistributedSampler(ds)\nfor epoch in range(3):\n    pass\n")


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("if dist.get_rank() == 0:\n    torch.save(sd, 'm.pt')\n", id="get-rank"),
        pytest.param("if args.local_rank in (-1, 0):\n    torch.save(sd, 'm.pt')\n", id="local-rank"),
        pytest.param(
            """
            def save_checkpoint(state):
                torch.save(state, 'ckpt.pt')
            if is_main_process():
                save_checkpoint(state)
            """,
            id="function-guarded-at-its-call-sites",
        ),
    ],
)
def test_rank_zero_save_passes(source):
    assert problems(checks.rank_zero_save_problems, source) == []


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("torch.save(sd, 'm.pt')\n", id="bare"),
        pytest.param("if epoch % 5 == 0:\n    torch.save(sd, 'm.pt')\n", id="guard-without-rank"),
        pytest.param(
            """
            def save_checkpoint(state):
                torch.save(state, 'ckpt.pt')
            if dist.get_rank() == 0:
                save_checkpoint(state)
            save_checkpoint(state)
            """,
            id="one-call-site-unguarded",
        ),
        pytest.param("def save(state):\n    torch.save(state, 'ckpt.pt')\n", id="function-never-called"),
    ],
)
def test_rank_zero_save_fails(source):
    assert problems(checks.rank_zero_save_problems, source)


def test_every_property_has_explaining_codes():
    assert checks.PROPERTY_CHECKS.keys() == checks.EXPLAINED_BY.keys()


# ---------------------------------------------------------------- classify() on the real engine

TIDY = '''\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
'''

# The model is built at import time of a module with a main guard: the engine declines (DDP105).
IMPORT_TIME_MODEL = '''\
import torch
import torch.nn as nn

model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train():
    for step in range(3):
        optimizer.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    train()
'''

MODEL_FILE = '''\
import torch.nn as nn


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)
'''


def test_classify_tidy_script_is_full():
    row = survey.classify("single", TIDY)
    assert (row.outcome, row.detail, row.training_here) == ("FULL", "", True)
    assert "DDP003" in row.changes


def test_classify_declined():
    row = survey.classify("dataparallel", IMPORT_TIME_MODEL)
    assert row.outcome == "DECLINED"
    assert "DDP105" in row.codes


def test_classify_parse_error_is_a_decline():
    row = survey.classify("single", "import torch\nloss.backward()\nprint 'python 2'\n")
    assert row.outcome == "DECLINED"
    assert "SourceParseError" in row.detail


def test_classify_silent():
    row = survey.classify("single", "print('nothing to train here')\n")
    assert (row.outcome, row.training_here) == ("SILENT", False)


@pytest.mark.parametrize(
    "category, source, outcome",
    [
        pytest.param("negative", MODEL_FILE, "OK", id="model-file-ok"),
        pytest.param("spawn", IMPORT_TIME_MODEL, "NOISE", id="reported-noise"),
        pytest.param("negative", TIDY, "CHANGED", id="training-script-changed"),
    ],
)
def test_classify_quiet_categories(category, source, outcome):
    assert survey.classify(category, source).outcome == outcome


def test_classify_legacy_launch_sound_rewrite_is_ok():
    row = survey.classify("legacy_launch", MODEL_FILE)
    assert (row.outcome, row.detail) == ("OK", "UNCHANGED")


def test_classify_crash(monkeypatch):
    def boom(source):
        raise KeyError("engine bug")

    monkeypatch.setattr(survey, "migrate", boom)
    row = survey.classify("single", TIDY)
    assert row.outcome == "CRASH"
    assert "KeyError" in row.detail


# ---------------------------------------------------------------- PARTIAL/GAP logic on made-up results

MIGRATED_WITHOUT_SAMPLER = '''\
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")
model = DDP(model)
loader = DataLoader(ds, shuffle=True)
'''


@pytest.mark.parametrize("codes, outcome", [(("DDP106",), "PARTIAL"), (("DDP120",), "GAP")])
def test_missing_property_explained_or_not(monkeypatch, codes, outcome):
    # A made-up engine answer, so that the classification (not the engine) is under test.
    monkeypatch.setattr(survey, "run_engine", lambda text: Result(code=text, original=text))
    diagnostics = tuple(Diagnostic(code, 6, 1, "made up") for code in codes)
    result = Result(code=MIGRATED_WITHOUT_SAMPLER, original="x = 1\n", diagnostics=diagnostics)
    row = survey._classify_training("single", "x = 1\n", result)
    assert row.outcome == outcome
    assert row.detail.startswith("sampler")


@pytest.mark.parametrize(
    "message",
    [
        "the training loop lives in another module",
        "`net.train()` trains through `net` from module `models`; the model, its optimizer and loop live there",
    ],
)
def test_training_elsewhere_when_a_diagnostic_says_so(message):
    assert survey.training_here(TIDY, ()) is True
    assert survey.training_here(TIDY, (Diagnostic("DDP114", 1, 1, message),)) is False


def test_survey_reads_a_manifest(tmp_path):
    (tmp_path / "negative").mkdir()
    (tmp_path / "negative" / "head.py").write_text(MODEL_FILE, encoding="utf-8")
    (tmp_path / "manifest.tsv").write_text(
        "local_file\tcategory\trepo\tpath\tcommit\tshape\nnegative/head.py\tnegative\to/r\thead.py\tabc\tmodel\n",
        encoding="utf-8",
    )
    rows = survey.survey(tmp_path)
    assert [(r.file, r.outcome) for r in rows] == [("negative/head.py", "OK")]
    assert survey.main([str(tmp_path), "--strict"]) == 0


# ---------------------------------------------------------------- the real-world corpus


@pytest.mark.skipif(not CORPUS.is_dir(), reason="real-world corpus not present")
def test_real_world_corpus_has_no_failures():
    rows = survey.survey(CORPUS)
    failures = [(r.outcome, r.category, r.file, r.detail) for r in survey.strict_failures(rows)]
    assert failures == []


def test_unreadable_corpus_is_one_line(tmp_path, capsys):
    (tmp_path / "manifest.tsv").write_text("local_file\tkind\tpath\nshell/x.sh\tshell\tx.sh\n", encoding="utf-8")
    assert survey.main([str(tmp_path)]) == 2  # the file is missing
    assert capsys.readouterr().err.count("\n") == 1
    (tmp_path / "manifest.tsv").write_text("local_file\tsort\nshell/x.sh\tshell\n", encoding="utf-8")
    assert survey.main([str(tmp_path)]) == 2  # neither a category nor a kind column
    assert capsys.readouterr().err.count("\n") == 1
    assert survey.main([str(tmp_path / "missing")]) == 2


def test_a_launcher_corpus_is_surveyed_by_kind(tmp_path, capsys):
    (tmp_path / "shell").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "negative").mkdir()
    (tmp_path / "shell" / "a__train.sh").write_text("python -m torch.distributed.launch --nproc_per_node=2 train.py\n")
    (tmp_path / "shell" / "b__split.sh").write_text('L="python -m torch.distributed.launch"\n$L --use_env train.py\n')
    (tmp_path / "other" / "c__Dockerfile").write_text('CMD ["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "train.py"]\n')
    (tmp_path / "negative" / "d__run.sh").write_text("torchrun --nproc_per_node=2 train.py\n")
    manifest = ["local_file\tkind\trepo\tpath\tcommit\tshape"]
    for local, kind, path in [("shell/a__train.sh", "shell", "train.sh"), ("shell/b__split.sh", "shell", "split.sh"),
                              ("other/c__Dockerfile", "other", "docker/Dockerfile"), ("negative/d__run.sh", "negative", "run.sh")]:
        manifest.append(f"{local}\t{kind}\tx/y\t{path}\tabc\t-")
    (tmp_path / "manifest.tsv").write_text("\n".join(manifest) + "\n")
    rows = {row.file: row for row in survey.survey(tmp_path)}
    assert rows["shell/a__train.sh"].outcome == "FULL"
    assert rows["shell/b__split.sh"].outcome == "DECLINED" and rows["shell/b__split.sh"].codes == ("DDP204",)
    assert rows["other/c__Dockerfile"].outcome == "FULL"  # read as a Dockerfile, by its upstream name
    assert rows["negative/d__run.sh"].outcome == "OK"
    assert survey.main([str(tmp_path)]) == 0
    assert "FULL / launcher files (fully rewritten): 2/3 = 67%" in capsys.readouterr().out
