"""Where the process-group setup goes: after the arguments are parsed, so `--help` and argument
errors never start a process group (and never wait at torchrun's rendezvous)."""
from __future__ import annotations

import importlib.util
import os
import textwrap

import pytest

import fixture_cases
from migrator import migrate

CASE = next(case for case in fixture_cases.discover() if case.name == "setup_after_parse_args")


def _setup_line(code: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if "local_rank = int(os.environ" in line)


def _line_of(code: str, text: str) -> int:
    return next(i for i, line in enumerate(code.splitlines(), 1) if text in line)


@pytest.mark.parametrize("before", [
    pytest.param("torch.manual_seed(0)", id="seeding"),
    pytest.param('print("starting")', id="a-print"),
    pytest.param("config = load_config('cfg.yaml')", id="config-loading"),
])
def test_the_setup_follows_parse_args(before):
    source = textwrap.dedent(f"""\
        import argparse
        import torch
        import torch.nn as nn


        def main():
            {before}
            parser = argparse.ArgumentParser()
            parser.add_argument("--epochs", type=int, default=1)
            args = parser.parse_args()
            model = nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(args.epochs):
                opt.zero_grad()
                model(torch.ones(1, 2)).sum().backward()
                opt.step()


        if __name__ == "__main__":
            main()
        """)
    code = migrate(source).code
    assert _setup_line(code) > _line_of(code, "args = parser.parse_args()")


@pytest.mark.parametrize("before", [
    pytest.param("model = nn.Linear(2, 2)", id="the-model"),
    pytest.param('device = torch.device("cuda")', id="a-device"),
    pytest.param("x = torch.randn(2).cuda()", id="a-cuda-tensor"),
])
def test_the_setup_stays_before_what_needs_it(before):
    """Something the migration must run after the setup comes before the parsing: the setup stays first."""
    source = textwrap.dedent(f"""\
        import argparse
        import torch
        import torch.nn as nn


        def main():
            {before}
            parser = argparse.ArgumentParser()
            args = parser.parse_args()
            model = nn.Linear(2, 2)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(2):
                opt.zero_grad()
                model(torch.ones(1, 2)).sum().backward()
                opt.step()


        if __name__ == "__main__":
            main()
        """)
    code = migrate(source).code
    assert _setup_line(code) < _line_of(code, before.split(" = ")[0] + " = ")


@pytest.mark.runtime
@pytest.mark.parametrize("argv", [["--help"], ["--epochs", "not-a-number"]], ids=["help", "bad-argument"])
def test_help_and_argument_errors_start_no_process_group(tmp_path, argv):
    if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
        pytest.skip("torch is not installed")
    from runtime_probe.harness import run_torchrun

    report = run_torchrun(CASE.expected_path, tmp_path, args=argv, script_name="train.py", label=f"expected.py {argv}")
    assert report.returncode == (0 if argv == ["--help"] else 1), report.explain()
    for rank, record in report.records.items():
        assert record["init_process_group"] == [], (rank, record["init_process_group"])
