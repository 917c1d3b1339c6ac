"""`--spawn` (rules.spawn, analysis.spawn): mp.spawn scripts become torchrun scripts, or are declined.

Small cases as pyupgrade writes them: each shape the tool declines, with the reason it gives,
stays byte-identical under `--spawn` with one DDP117 at the spawn; the spellings it migrates;
every spawn fixture's input stays byte-identical and silent without the flag; the flag and the
config key on the command line; and the real-world spawn scripts, when the corpus is present.
The migrated fixtures' runtime checks (torchrun x2, plain python) are tests/test_runtime.py's.
"""
from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_cases import discover
from migrator import Options, migrate
from migrator import cli as cli_module
from migrator.triage import DISTRIBUTED, ENGINE, verdict

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import survey_checks  # noqa: E402

SPAWN = Options(spawn=True)
CORPUS = ROOT.parent / "shared" / "realworld" / "py"

# A worker that trains, set up from the rendezvous mp.spawn gives it (`WORKER` takes `rank, world_size`).
WORKER = '''
def train(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=world_size, rank=rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    dist.destroy_process_group()
'''
HEAD = "import os\n\nimport torch\nimport torch.distributed as dist\nimport torch.multiprocessing as mp\n"


def script(main: str, head: str = HEAD, worker: str = WORKER) -> str:
    return head + "\n" + worker + "\n\n" + textwrap.dedent(main).lstrip("\n")


DECLINED = [
    pytest.param(script('''
        if __name__ == "__main__":
            if torch.cuda.device_count() > 1:
                mp.spawn(train, nprocs=2, args=(2,))
            else:
                train(0, 1)
        '''), "runs only when `torch.cuda.device_count() > 1`", id="under-a-flag"),
    pytest.param(script('''
        if __name__ == "__main__":
            mp.spawn(train, nprocs=2, args=(2,))
            mp.spawn(train, nprocs=4, args=(4,))
        '''), "one of 2 mp.spawn calls", id="several-spawns"),
    pytest.param(script('''
        if __name__ == "__main__":
            mp.spawn(lambda rank: train(rank, 2), nprocs=2)
        '''), "is a lambda", id="lambda-worker"),
    pytest.param(script('''
        class Runner:
            def run(self, rank, world_size):
                train(rank, world_size)

        if __name__ == "__main__":
            mp.spawn(Runner().run, nprocs=2, args=(2,))
        '''), "is a method", id="method-worker"),
    pytest.param(script('''
        if __name__ == "__main__":
            context = mp.spawn(train, nprocs=2, args=(2,), join=False)
            context.join()
        '''), "result is used", id="join-false-kept"),
    pytest.param(script('''
        if __name__ == "__main__":
            mp.spawn(train, nprocs=2, args=(2,), join=False)
        '''), "join=False", id="join-false"),
    pytest.param(script('''
        if __name__ == "__main__":
            for world_size in (1, 2):
                mp.spawn(train, nprocs=world_size, args=(world_size,))
        '''), "in a loop", id="spawn-in-a-loop"),
    pytest.param(script('''
        if __name__ == "__main__":
            worker_args = (2,)
            mp.spawn(train, nprocs=2, args=worker_args)
        '''), "is not a literal tuple", id="args-not-a-literal-tuple"),
    pytest.param(script('''
        if __name__ == "__main__":
            workers = [mp.Process(target=train, args=(rank, 2)) for rank in range(2)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        '''), "started with mp.Process", id="mp-process-workers"),
    pytest.param(script('''
        def preprocess(rank, world_size):
            print("shard", rank, "of", world_size)

        if __name__ == "__main__":
            mp.spawn(preprocess, nprocs=2, args=(2,))
            train(0, 1)
        '''), "`preprocess` trains nothing", id="non-training-function"),
    pytest.param(script('''
        if __name__ == "__main__":
            mp.spawn(train, nprocs=2, args=(2,))
        ''', head=HEAD + "from workers import train\n", worker=""), "is not a function of this file", id="imported-worker"),
    pytest.param(script('''
        def main_worker(gpu, ngpus, args):
            args.rank += gpu
            dist.init_process_group("gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
            train(args.rank, args.world_size)

        if __name__ == "__main__":
            import argparse
            args = argparse.Namespace()
            ngpus = torch.cuda.device_count()
            if "SLURM_JOB_ID" in os.environ:
                args.rank = int(os.environ["SLURM_NODEID"]) * ngpus
                args.world_size = int(os.environ["SLURM_NNODES"]) * ngpus
                args.dist_url = "tcp://%s:58472" % os.environ["SLURM_SUBMIT_HOST"]
            else:
                args.rank = 0
                args.world_size = ngpus
                args.dist_url = "tcp://localhost:58472"
            mp.spawn(main_worker, (ngpus, args), ngpus)
        ''', worker=WORKER.replace('    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=world_size, rank=rank)\n', "")),
        "under `if \"SLURM_JOB_ID\" in os.environ:`", id="multi-node-rendezvous-per-environment"),
    pytest.param(script('''
        def main_worker(gpu, ngpus, args):
            dist.init_process_group("gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
            train(args.rank, args.world_size)

        if __name__ == "__main__":
            import argparse
            args = argparse.Namespace(rank=0, world_size=2, dist_url="tcp://localhost:23456")
            mp.spawn(main_worker, nprocs=2, args=(2, args))
        ''', worker=WORKER.replace('    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=world_size, rank=rank)\n', "")),
        "is not computed once from the process index", id="rank-taken-as-given"),
    pytest.param(script('''
        def main():
            launch(train, 2, num_machines=1, machine_rank=0, dist_url="auto", args=(2,))

        if __name__ == "__main__":
            main()
        ''', head=HEAD.replace("import torch.multiprocessing as mp\n", "from detectron2.engine import launch\n")),
        "started by `launch(train, ...)` (from detectron2.engine)", id="another-package-launches"),
]


@pytest.mark.parametrize("source, reason", DECLINED)
def test_declined_shapes_stay_byte_identical_with_a_reason(source, reason):
    ast.parse(source)
    result = migrate(source, SPAWN)
    assert result.code == source
    assert not result.changes
    assert [d.code for d in result.diagnostics] == ["DDP117"] * len(result.diagnostics) and result.diagnostics
    assert any(reason in d.message for d in result.diagnostics), [d.message for d in result.diagnostics]
    lines = source.splitlines()
    for diagnostic in result.diagnostics:  # at the spawn (or what makes it unsafe), with its line
        assert diagnostic.line >= 1 and lines[diagnostic.line - 1].strip()


@pytest.mark.parametrize("source, reason", DECLINED)
def test_declined_shapes_say_nothing_without_the_flag(source, reason):
    result = migrate(source)
    assert result.code == source and not result.diagnostics and not result.changes


MIGRATED = [
    pytest.param(script('''
        if __name__ == "__main__":
            spawn(train, args=(2,), nprocs=2)
        ''', head=HEAD.replace("import torch.multiprocessing as mp\n", "from torch.multiprocessing import spawn\n")),
        'train(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))', "spawn", id="from-import-spawn"),
    pytest.param(script('''
        def main():
            world_size = torch.cuda.device_count()
            torch.multiprocessing.start_processes(train, (world_size,), world_size, True, False, "spawn")

        if __name__ == "__main__":
            main()
        ''', head=HEAD.replace("import torch.multiprocessing as mp\n", "")), "train(local_rank, world_size)", None,
        id="start-processes-positional"),
    pytest.param(script('''
        if __name__ == "__main__":
            local_rank = "taken"
            mp.spawn(train, nprocs=2, args=(2,))
        '''), 'train(process_index, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))', "mp", id="local-rank-name-taken"),
]


SETUP_WITH_A_PORT = WORKER.replace(
    '    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=world_size, rank=rank)\n',
    "    setup(rank, world_size, 29533)\n") + '''

def setup(rank, world_size, port):
    dist.init_process_group(backend="gloo", init_method=f"tcp://localhost:{port}", world_size=world_size, rank=rank)
'''
MIGRATED.append(pytest.param(script('''
    if __name__ == "__main__":
        mp.spawn(train, nprocs=2, args=(2,))
    ''', worker=SETUP_WITH_A_PORT), 'train(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))', "mp",
    id="helper-with-an-init-method-of-its-own"))


@pytest.mark.parametrize("source, call, dropped_import", MIGRATED)
def test_spellings_of_spawn_become_a_direct_call(source, call, dropped_import):
    result = migrate(source, SPAWN)
    assert result.changed
    assert call in result.code
    tree = ast.parse(result.code)
    assert survey_checks.spawn_problems(tree) == []
    assert 'if "RANK" in os.environ:' in result.code and "dist.HashStore()" in result.code
    assert {c.code for c in result.changes} == {"DDP024"} and not result.diagnostics
    if dropped_import:
        assert f"import {dropped_import}\n" not in result.code and f"as {dropped_import}\n" not in result.code
    assert migrate(result.code, SPAWN).code == result.code, "second run must be a no-op"


def test_a_one_machine_worker_stops_on_several_machines():
    result = migrate(script('''
        if __name__ == "__main__":
            mp.spawn(train, nprocs=2, args=(2,))
        '''), SPAWN)
    assert 'if int(os.environ.get("WORLD_SIZE", 1)) != int(os.environ.get("LOCAL_WORLD_SIZE", 1)):' in result.code
    assert "one machine only" in " ".join(c.message for c in result.changes)


def test_master_port_checks_go_with_what_they_guard():
    """`if "MASTER_PORT" not in os.environ: os.environ["MASTER_PORT"] = ...` goes as a whole."""
    source = script('''
        if __name__ == "__main__":
            if "MASTER_ADDR" not in os.environ:
                os.environ["MASTER_ADDR"] = "localhost"
            os.environ.setdefault("MASTER_PORT", "12355")
            mp.spawn(train, nprocs=2, args=(2,))
        ''')
    code = migrate(source, SPAWN).code
    assert "MASTER_ADDR" not in code and "MASTER_PORT" not in code
    ast.parse(code)


SPAWN_FIXTURES = [pytest.param(case, id=case.name) for case in discover() if case.options.get("spawn")]


def test_there_are_spawn_fixtures_of_each_kind():
    migrated = [p.values[0] for p in SPAWN_FIXTURES if p.values[0].expected_path_or_none is not None]
    declined = [p.values[0] for p in SPAWN_FIXTURES if p.values[0].expected_path_or_none is None]
    assert len(migrated) >= 2 and declined and all("DDP117" in case.diagnostics for case in declined)


@pytest.mark.parametrize("case", SPAWN_FIXTURES)
def test_without_the_flag_spawn_fixtures_stay_byte_identical_and_silent(case):
    source = case.input_path.read_text(encoding="utf-8")
    result = migrate(source, context=case.context)
    assert result.code == source
    assert not result.diagnostics and not result.changes


def test_the_first_look_hands_spawn_scripts_to_the_engine_only_with_the_flag():
    source = script('''
        if __name__ == "__main__":
            mp.spawn(train, nprocs=2, args=(2,))
        ''')
    assert verdict(source, None) == DISTRIBUTED
    assert verdict(source, None, spawn=True) == ENGINE


# --------------------------------------------------------------------------- the command line


def _invoke(*args: str):
    try:
        runner = CliRunner(mix_stderr=False)  # click 8.1
    except TypeError:
        runner = CliRunner()
    env = {"FORCE_COLOR": None, "NO_COLOR": None, "TERM": "xterm", "COLUMNS": "200"}
    return runner.invoke(cli_module.cli, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def spawn_project(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    source = (ROOT / "fixtures" / "spawn_tutorial_setup" / "input.py").read_text()
    (tmp_path / "train.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_flag_migrates_and_prints_torchrun_commands(spawn_project):
    plain = _invoke("--check", "train.py")
    assert plain.exit_code == 0 and "DDP" not in plain.stderr and "1 file left unchanged" in plain.stderr
    result = _invoke("--check", "--spawn", "train.py")
    assert result.exit_code == 1
    assert "DDP024" in result.stderr
    assert "run it: torchrun --standalone --nproc_per_node=<gpus> train.py" in result.stderr
    expected = (ROOT / "fixtures" / "spawn_tutorial_setup" / "expected.py").read_text()
    assert _invoke("--spawn", "train.py").stdout == expected


def test_the_config_key_is_the_flag(spawn_project):
    (spawn_project / "pyproject.toml").write_text("[tool.ddp-migrate]\nspawn = true\n")
    result = _invoke("--check", "-v", "train.py")
    assert result.exit_code == 1 and "DDP024" in result.stderr
    assert "several machines: torchrun --nnodes=<nodes>" in result.stderr
    assert _invoke("--check", "--isolated", "train.py").exit_code == 0


def test_a_bad_spawn_value_is_one_line(spawn_project):
    (spawn_project / "pyproject.toml").write_text('[tool.ddp-migrate]\nspawn = "yes"\n')
    result = _invoke("--check", "train.py")
    assert result.exit_code == 2
    assert "pyproject.toml: [tool.ddp-migrate] spawn must be true or false, not a string" in result.stderr


def test_a_decline_fails_check_with_its_line(spawn_project):
    (spawn_project / "train.py").write_text((ROOT / "fixtures" / "spawn_declined_flag" / "input.py").read_text())
    result = _invoke("--check", "--spawn", "train.py")
    assert result.exit_code == 1
    assert "train.py:36:9: DDP117 mp.spawn script left as it is: mp.spawn runs only when" in result.stderr


def test_help_shows_the_flag():
    assert "--spawn" in _invoke("--help").stdout


# --------------------------------------------------------------------------- real scripts


@pytest.mark.skipif(not (CORPUS / "spawn").is_dir(), reason="the real-world corpus is not here")
@pytest.mark.parametrize("path", sorted((CORPUS / "spawn").glob("*.py")) if (CORPUS / "spawn").is_dir() else [],
                         ids=lambda p: p.name)
def test_real_spawn_scripts_are_migrated_or_declined(path):
    source = path.read_text(encoding="utf-8")
    quiet = migrate(source)
    assert quiet.code == source and not quiet.diagnostics
    result = migrate(source, SPAWN)
    if result.changed:
        assert survey_checks.spawn_problems(ast.parse(result.code)) == []
        assert migrate(result.code, SPAWN).code == result.code
        assert not result.diagnostics
    else:
        assert [d.code for d in result.diagnostics] == ["DDP117"]


def test_a_rank_set_in_the_environment_by_hand_is_the_process_index():
    """`os.environ["RANK"] = str(rank)` then an env:// init_process_group: one machine, like rank=rank."""
    worker = WORKER.replace(
        '    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:23456", world_size=world_size, rank=rank)\n',
        '    os.environ["RANK"] = str(rank)\n    os.environ["WORLD_SIZE"] = str(world_size)\n'
        '    dist.init_process_group("gloo", init_method="env://")\n')
    result = migrate(script('''
        if __name__ == "__main__":
            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = "29500"
            mp.spawn(train, nprocs=2, args=(2,))
        ''', worker=worker), SPAWN)
    assert 'os.environ["RANK"]' not in result.code and "MASTER" not in result.code
    assert "written for one machine" in result.code
    ast.parse(result.code)


def test_the_survey_check_of_a_migrated_spawn_can_fail():
    assert survey_checks.spawn_problems(ast.parse('dist.init_process_group("gloo")\n')) == []
    assert survey_checks.spawn_problems(ast.parse(
        'dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)\n')) == []
    assert survey_checks.spawn_problems(ast.parse("mp.spawn(train, nprocs=2)\n"))
    assert survey_checks.spawn_problems(ast.parse('dist.init_process_group("gloo", init_method="env://")\n'))
    assert survey_checks.spawn_problems(ast.parse('dist.init_process_group("gloo", rank=r, world_size=2)\n'))


def test_survey_classifies_spawn_files_under_the_flag():
    import survey

    migrated = survey.classify("spawn", (ROOT / "fixtures" / "spawn_tutorial_setup" / "input.py").read_text(), SPAWN)
    declined = survey.classify("spawn", (ROOT / "fixtures" / "spawn_declined_flag" / "input.py").read_text(), SPAWN)
    quiet = survey.classify("spawn", (ROOT / "fixtures" / "spawn_declined_flag" / "input.py").read_text())
    assert (migrated.outcome, declined.outcome, quiet.outcome) == ("MIGRATED", "DECLINED", "OK")
    assert declined.codes == ("DDP117",)


def test_a_spawn_script_written_for_the_old_launcher_too_keeps_only_that_migration():
    """Its --local_rank picks the device: DDP005/DDP020 migrate that, as without --spawn; the spawn is declined."""
    source = script('''
        import argparse

        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=0)

        if __name__ == "__main__":
            args = parser.parse_args()
            torch.cuda.set_device(args.local_rank)
            mp.spawn(train, nprocs=2, args=(2,))
        ''')
    quiet, result = migrate(source), migrate(source, SPAWN)
    assert result.code == quiet.code != source
    assert "DDP024" not in {c.code for c in result.changes}
    assert [d.message for d in result.diagnostics if d.code == "DDP117"] == [
        "mp.spawn script left as it is: it is written for torch.distributed.launch too (its --local_rank picks the device)"]
