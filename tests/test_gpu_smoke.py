"""scripts/gpu_smoke.sh: the GPU smoke test's own plumbing, checked on the CPU.

On a machine without CUDA it must say so and exit 2 (never "all passed" having run nothing);
with --allow-cpu it migrates a fixture and runs the same checks under torchrun with gloo.
"""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "scripts" / "gpu_smoke.sh"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")


def _run(*args, timeout=300):
    return subprocess.run(["bash", str(SMOKE), *args], capture_output=True, text=True, timeout=timeout,
                          env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(Path.home())})


def test_without_a_gpu_it_says_so_and_fails():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = _run()
    assert result.returncode == 2
    assert "no CUDA device" in result.stderr


def test_an_unknown_fixture_is_an_error():
    result = _run("--allow-cpu", "--only", "no_such_fixture")
    assert result.returncode == 2 and "no_such_fixture" in result.stderr


@pytest.mark.runtime
def test_the_checks_run_on_the_cpu():
    result = _run("--allow-cpu", "--only", "mnist_main_argparse", "--jobs", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok   mnist_main_argparse x2" in result.stdout and "ok   mnist_main_argparse x1" in result.stdout
