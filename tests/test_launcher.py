"""Launcher files: torch.distributed.launch -> torchrun in shell, Make, Docker, YAML, Markdown, reST, notebooks.

Fast and torch-free, except the one `runtime` test at the end, which runs a rewritten launcher
script under the real torchrun. Real-world files live in fixtures/launchers/<case>/: the input file,
expected/<same name> (absent: the file must stay unchanged) and findings.txt (every change and
diagnostic, as the CLI prints them). `pytest --update-fixtures` regenerates expected/ and
findings.txt; review the diff before committing it.
"""
from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from migrator.launcher import (
    EXAMPLE_KIND,
    KINDS,
    LAUNCHER_RULES,
    detect_kind,
    launch_problem,
    migrate_launcher,
    rewrite_command_string,
    rewrite_command_words,
)
from migrator.options import Options
from migrator.render import format_finding
from migrator.types import Result

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "launchers"

#: Text that marks a line as part of a launch command (the only lines allowed to change).
MARKERS = (
    "torch.distributed.launch", "torch.distributed.run", "--use_env", "--use-env", "--local_rank", "--local-rank",
    "torch/distributed/launch.py",
)  # fmt: skip


# --------------------------------------------------------------------------- helpers


def migrated(text: str, kind: str, options: Optional[Options] = None) -> Result:
    """migrate_launcher, plus the properties every rewrite must have."""
    result = migrate_launcher(text, kind, options)
    again = migrate_launcher(result.code, kind, options)
    assert again.code == result.code, "a second run must change nothing"
    assert not again.changes, "a second run must report no change"
    assert_nothing_else_changed(text, result.code)
    if kind == "notebook":
        json.loads(result.code)
    return result


def assert_nothing_else_changed(before: str, after: str) -> None:
    """Lines that are not part of a launch command are byte-identical, and in the same order.

    A launch line holds one of MARKERS, ends with a line continuation or is the interpreter or `-m`
    of a YAML list. Where the output differs, every input line is a launch line, and every output
    line is a rewritten launch line (it says torchrun / torch.distributed.run) or an input launch
    line that lost some of its text (a dropped argument, a dangling ` \\`).
    """
    old = before.splitlines(keepends=True)
    new = after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        changed = [line for line in old[i1:i2] if not _launch_line(line)]
        assert not changed, f"lines changed outside launch commands: {changed}"
        for line in new[j1:j2]:
            assert (
                "torchrun" in line
                or "torch.distributed.run" in line
                or any(_dropped_from(line, o) for o in old[i1:i2])
            ), f"unexpected new line {line!r}"


_LIST_ITEM = re.compile(r"""[ \t]*-[ \t]+["']?(?:python[\d.]*|-m|-u)["']?[ \t]*$""")


def _launch_line(line: str) -> bool:
    body = line.rstrip("\r\n")
    return (
        any(marker in line for marker in MARKERS)
        or body.endswith("\\")
        or body.endswith('\\\\n",')
        or bool(_LIST_ITEM.match(body))
    )


def _dropped_from(line: str, old: str) -> bool:
    """`line` is `old` with some characters taken out."""
    rest = iter(old)
    return _launch_line(old) and all(char in rest for char in line)


def codes(result: Result) -> List[str]:
    return [c.code for c in result.changes] + [d.code for d in result.diagnostics]


def positions(result: Result, code: str) -> List[Tuple[int, int]]:
    return [(f.line, f.col) for f in (*result.changes, *result.diagnostics) if f.code == code]


# --------------------------------------------------------------------------- the rules' own examples


EXAMPLES = [
    pytest.param(rule, example, id=f"{rule.code}-{example.id}") for rule in LAUNCHER_RULES for example in rule.examples
]


@pytest.mark.parametrize("rule, example", EXAMPLES)
def test_rule_example(rule, example):
    result = migrated(example.before, EXAMPLE_KIND)
    expected = example.before if example.after is None else example.after
    assert result.code == expected
    reported = set(codes(result))
    assert set(example.diagnostics) <= reported
    assert rule.code in reported


def test_rules_are_documented_and_coded():
    assert [rule.code for rule in LAUNCHER_RULES] == ["DDP201", "DDP202", "DDP203", "DDP204"]
    assert [rule.name for rule in LAUNCHER_RULES] == [
        "launch-to-torchrun",
        "drop-use-env",
        "drop-local-rank-arg",
        "launcher-unsafe",
    ]
    for rule in LAUNCHER_RULES:
        assert rule.examples and rule.summary and rule.what and rule.why and rule.fix and rule.fix_safety
        assert rule.fixable == (rule.code != "DDP204")
        text = rule.explain()
        for heading in ("## What it does", "## Why is this bad?", "## Fix", "## Fix safety", "## Example"):
            assert heading in text
    # the documented choices
    what = LAUNCHER_RULES[0].what
    assert "`-u` is dropped" in what and "torch.distributed.run" in what and "$PYTHON" in what


# --------------------------------------------------------------------------- kinds


@pytest.mark.parametrize(
    "path, head, kind",
    [
        ("tools/dist_train.sh", "", "shell"),
        ("run.bash", "", "shell"),
        ("run.zsh", "", "shell"),
        ("job.sbatch", "", "shell"),
        ("job.slurm", "", "shell"),
        ("scripts/train", "#!/bin/bash\nset -e\n", "shell"),
        ("scripts/train", "#!/usr/bin/env bash\r\n", "shell"),
        ("scripts/train", "#!/bin/sh -e\n", "shell"),
        ("scripts/train", "#!/usr/bin/env zsh\n", "shell"),
        ("scripts/train", "#!/usr/bin/env -S bash -eu\n", "shell"),
        ("scripts/train", "#!/usr/bin/env python\n", None),
        ("scripts/train", "", None),
        ("Makefile", "", "make"),
        ("makefile", "", "make"),
        ("GNUmakefile", "", "make"),
        ("rules/train.mk", "", "make"),
        ("Dockerfile", "", "docker"),
        ("docker/Dockerfile.gpu", "", "docker"),
        ("train.dockerfile", "", "docker"),
        (".github/workflows/ci.yml", "", "yaml"),
        ("k8s/job.yaml", "", "yaml"),
        ("README.md", "", "markdown"),
        ("docs/usage.markdown", "", "markdown"),
        ("docs/usage.rst", "", "rst"),
        ("notebooks/train.ipynb", "", "notebook"),
        ("train.py", "#!/bin/bash\n", None),
        ("notes.txt", "", None),
        ("setup.cfg", "", None),
        ("C:\\work\\run.sh", "", "shell"),
    ],
)
def test_detect_kind(path, head, kind):
    assert detect_kind(path, head) == kind


def test_unknown_kind_is_a_value_error():
    with pytest.raises(ValueError, match="unknown launcher kind 'python'"):
        migrate_launcher("python -m torch.distributed.launch train.py\n", "python")


# --------------------------------------------------------------------------- every form, exact output

L = "python -m torch.distributed.launch"

FORMS = [
    # (id, kind, before, after, codes in order of position)
    (
        "plain-python",
        "shell",
        f"{L} --nproc_per_node=2 train.py\n",
        "torchrun --nproc_per_node=2 train.py\n",
        ["DDP201"],
    ),
    (
        "python3-unbuffered-dropped",
        "shell",
        "python3 -u -m torch.distributed.launch --nproc_per_node 2 train.py\n",
        "torchrun --nproc_per_node 2 train.py\n",
        ["DDP201"],
    ),
    (
        "dollar-python-kept",
        "shell",
        "$PYTHON -m torch.distributed.launch --nproc_per_node=$GPUS --master_port=$PORT train.py $CONFIG\n",
        "$PYTHON -m torch.distributed.run --nproc_per_node=$GPUS --master_port=$PORT train.py $CONFIG\n",
        ["DDP201"],
    ),
    (
        "python-with-default-kept",
        "shell",
        "${PYTHON:-python} -m torch.distributed.launch --nproc_per_node=8 --use_env tools/train.py\n",
        "${PYTHON:-python} -m torch.distributed.run --nproc_per_node=8 tools/train.py\n",
        ["DDP201", "DDP202"],
    ),
    (
        "conda-path-kept-with-u",
        "shell",
        "/opt/conda/bin/python -u -m torch.distributed.launch --nproc_per_node=4 train.py\n",
        "/opt/conda/bin/python -u -m torch.distributed.run --nproc_per_node=4 train.py\n",
        ["DDP201"],
    ),
    (
        "versioned-python-kept",
        "shell",
        "python3.10 -m torch.distributed.launch --nproc_per_node=4 train.py\n",
        "python3.10 -m torch.distributed.run --nproc_per_node=4 train.py\n",
        ["DDP201"],
    ),
    (
        "python-options-keep-the-interpreter",
        "shell",
        "python -W ignore::UserWarning -m torch.distributed.launch --nproc_per_node=4 train.py\n",
        "python -W ignore::UserWarning -m torch.distributed.run --nproc_per_node=4 train.py\n",
        ["DDP201"],
    ),
    (
        "run-module-flags-only",
        "shell",
        "python -m torch.distributed.run --nproc_per_node=2 --use_env train.py --local_rank=0 --lr 0.1\n",
        "python -m torch.distributed.run --nproc_per_node=2 train.py --lr 0.1\n",
        ["DDP202", "DDP203"],
    ),
    (
        "use-env-dashed",
        "shell",
        f"{L} --use-env --nproc_per_node=2 train.py\n",
        "torchrun --nproc_per_node=2 train.py\n",
        ["DDP201", "DDP202"],
    ),
    (
        "local-rank-every-spelling",
        "shell",
        f"{L} --nproc_per_node=2 train.py --local_rank=0 --a 1 --local_rank 0 --b 2 --local-rank=$LOCAL_RANK --local-rank 1\n",
        "torchrun --nproc_per_node=2 train.py --a 1 --b 2\n",
        ["DDP201", "DDP203", "DDP203", "DDP203", "DDP203"],
    ),
    (
        "negative-local-rank-value",
        "shell",
        f"{L} --nproc_per_node=2 train.py --local_rank -1 --epochs 3\n",
        "torchrun --nproc_per_node=2 train.py --epochs 3\n",
        ["DDP201", "DDP203"],
    ),
    (
        "env-prefix-and-srun",
        "shell",
        f"CUDA_VISIBLE_DEVICES=0,1 OMP_NUM_THREADS=1 srun {L} --nproc_per_node=2 train.py\n",
        "CUDA_VISIBLE_DEVICES=0,1 OMP_NUM_THREADS=1 srun torchrun --nproc_per_node=2 train.py\n",
        ["DDP201"],
    ),
    (
        "nohup-redirect-background",
        "shell",
        f"nohup {L} --nproc_per_node=4 --use_env train.py --local_rank=0 > train.log 2>&1 &\n",
        "nohup torchrun --nproc_per_node=4 train.py > train.log 2>&1 &\n",
        ["DDP201", "DDP202", "DDP203"],
    ),
    (
        "quoting-and-values-kept",
        "shell",
        f"{L} --nproc_per_node \"$NGPU\" --master_addr='10.0.0.1' --master_port=${{PORT:-29500}} train.py --name \"exp 1\"\n",
        "torchrun --nproc_per_node \"$NGPU\" --master_addr='10.0.0.1' --master_port=${PORT:-29500} train.py --name \"exp 1\"\n",
        ["DDP201"],
    ),
    (
        "script-as-module",
        "shell",
        f"{L} --nproc_per_node=2 --use_env -m pkg.train --lr 0.1\n",
        "torchrun --nproc_per_node=2 -m pkg.train --lr 0.1\n",
        ["DDP201", "DDP202"],
    ),
    (
        "multi-node-static-rendezvous",
        "shell",
        f"{L} --nproc_per_node=8 --nnodes=2 --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=29500 train.py\n",
        "torchrun --nproc_per_node=8 --nnodes=2 --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=29500 train.py\n",
        ["DDP201"],
    ),
    (
        "continuations-with-dropped-lines",
        "shell",
        f"{L} \\\n    --nproc_per_node=2 \\\n    --use_env \\\n    train.py \\\n    --local_rank=0\necho done\n",
        "torchrun \\\n    --nproc_per_node=2 \\\n    train.py\necho done\n",
        ["DDP201", "DDP202", "DDP203"],
    ),
    (
        "interpreter-on-its-own-line",
        "shell",
        "python \\\n  -m torch.distributed.launch \\\n  --nproc_per_node=2 train.py\n",
        "torchrun \\\n  --nproc_per_node=2 train.py\n",
        ["DDP201"],
    ),
    (
        "command-substitution-and-args",
        "shell",
        f'OUT=$({L} --nproc_per_node=2 --use_env $(dirname "$0")/train.py "$@")\n',
        'OUT=$(torchrun --nproc_per_node=2 $(dirname "$0")/train.py "$@")\n',
        ["DDP201", "DDP202"],
    ),
    (
        "two-commands-on-a-line",
        "shell",
        f"{L} --nproc_per_node=2 a.py && {L} --nproc_per_node=2 b.py; echo ok\n",
        "torchrun --nproc_per_node=2 a.py && torchrun --nproc_per_node=2 b.py; echo ok\n",
        ["DDP201", "DDP201"],
    ),
    (
        "inside-a-double-quoted-string",
        "shell",
        f'CMD="{L} --nproc_per_node=$N --use_env train.py"\neval "$CMD"\n',
        'CMD="torchrun --nproc_per_node=$N train.py"\neval "$CMD"\n',
        ["DDP201", "DDP202"],
    ),
    (
        "inside-bash-c-single-quotes",
        "shell",
        f"srun bash -c '{L} --nproc_per_node=8 --node_rank=$SLURM_NODEID --use_env main.py'\n",
        "srun bash -c 'torchrun --nproc_per_node=8 --node_rank=$SLURM_NODEID main.py'\n",
        ["DDP201", "DDP202"],
    ),
    (
        "heredoc-body",
        "shell",
        f"cat > job.sh <<'EOF'\n{L} --nproc_per_node=2 --use_env train.py\nEOF\nsbatch job.sh\n",
        "cat > job.sh <<'EOF'\ntorchrun --nproc_per_node=2 train.py\nEOF\nsbatch job.sh\n",
        ["DDP201", "DDP202"],
    ),
    (
        "if-branch",
        "shell",
        f'if [ "$N" -gt 1 ]; then\n  {L} --nproc_per_node=$N train.py "$@"\nelse\n  python train.py "$@"\nfi\n',
        'if [ "$N" -gt 1 ]; then\n  torchrun --nproc_per_node=$N train.py "$@"\nelse\n  python train.py "$@"\nfi\n',
        ["DDP201"],
    ),
    (
        "argparse-abbreviations",
        "shell",
        f"{L} --nproc_per 2 --use train.py\n",
        "torchrun --nproc_per 2 train.py\n",
        ["DDP201", "DDP202"],
    ),
    (
        "no-final-newline",
        "shell",
        f"{L} --nproc_per_node=2 --use_env train.py",
        "torchrun --nproc_per_node=2 train.py",
        ["DDP201", "DDP202"],
    ),
    (
        "make-recipe-variable-interpreter",
        "make",
        "train:\n\t$(PYTHON) -m torch.distributed.launch --nproc_per_node=$(NGPUS) --use_env train.py\n",
        "train:\n\t$(PYTHON) -m torch.distributed.run --nproc_per_node=$(NGPUS) train.py\n",
        ["DDP201", "DDP202"],
    ),
    (
        "make-recipe-silent-prefix-and-continuations",
        "make",
        f"train:\n\t@{L} \\\n\t\t--nproc_per_node=2 \\\n\t\t--use_env \\\n\t\ttrain.py\n",
        "train:\n\t@torchrun \\\n\t\t--nproc_per_node=2 \\\n\t\ttrain.py\n",
        ["DDP201", "DDP202"],
    ),
    (
        "docker-exec-form",
        "docker",
        'CMD ["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "train.py"]\n',
        'CMD ["torchrun", "--nproc_per_node=2", "train.py"]\n',
        ["DDP201"],
    ),
    (
        "docker-exec-form-drops",
        "docker",
        'ENTRYPOINT ["python3", "-u", "-m", "torch.distributed.launch", "--use_env", "--nproc_per_node=2", "train.py", "--local_rank=0"]\n',
        'ENTRYPOINT ["torchrun", "--nproc_per_node=2", "train.py"]\n',
        ["DDP201", "DDP202", "DDP203"],
    ),
    (
        "docker-shell-form",
        "docker",
        f"FROM python:3.11\nRUN pip install torch \\\n && {L} --nproc_per_node=2 --use_env smoke.py\nCMD {L} --nproc_per_node=2 train.py\n",
        "FROM python:3.11\nRUN pip install torch \\\n && torchrun --nproc_per_node=2 smoke.py\nCMD torchrun --nproc_per_node=2 train.py\n",
        ["DDP201", "DDP202", "DDP201"],
    ),
    (
        "docker-sh-c-string",
        "docker",
        f'CMD ["sh", "-c", "{L} --nproc_per_node=$NPROC --use_env train.py"]\n',
        'CMD ["sh", "-c", "torchrun --nproc_per_node=$NPROC train.py"]\n',
        ["DDP201", "DDP202"],
    ),
    (
        "yaml-run-line",
        "yaml",
        f"steps:\n  - run: {L} --nproc_per_node=2 --use_env train.py\n",
        "steps:\n  - run: torchrun --nproc_per_node=2 train.py\n",
        ["DDP201", "DDP202"],
    ),
    (
        "yaml-block-scalar",
        "yaml",
        f"script:\n  - |\n    {L} \\\n      --nproc_per_node=2 \\\n      --use_env \\\n      train.py\n  - echo done\n",
        "script:\n  - |\n    torchrun \\\n      --nproc_per_node=2 \\\n      train.py\n  - echo done\n",
        ["DDP201", "DDP202"],
    ),
    (
        "yaml-folded-scalar",
        "yaml",
        f"command: >\n  {L}\n  --nproc_per_node=2\n  --use_env\n  train.py\nnext: 1\n",
        "command: >\n  torchrun\n  --nproc_per_node=2\n  train.py\nnext: 1\n",
        ["DDP201", "DDP202"],
    ),
    (
        "yaml-quoted-string",
        "yaml",
        f'command: "{L} --nproc_per_node=2 --use_env train.py"\n',
        'command: "torchrun --nproc_per_node=2 train.py"\n',
        ["DDP201", "DDP202"],
    ),
    (
        "yaml-flow-list",
        "yaml",
        'command: ["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "--use_env", "train.py"]\n',
        'command: ["torchrun", "--nproc_per_node=2", "train.py"]\n',
        ["DDP201", "DDP202"],
    ),
    (
        "yaml-plain-flow-list",
        "yaml",
        "args: [python, -m, torch.distributed.launch, --nproc_per_node=2, train.py, --local_rank=0]\n",
        "args: [torchrun, --nproc_per_node=2, train.py]\n",
        ["DDP201", "DDP203"],
    ),
    (
        "yaml-block-sequence",
        "yaml",
        "command:\n  - python\n  - -m\n  - torch.distributed.launch\n  - --nproc_per_node=2\n  - --use_env\n  - train.py\nnext: 1\n",
        "command:\n  - torchrun\n  - --nproc_per_node=2\n  - train.py\nnext: 1\n",
        ["DDP201", "DDP202"],
    ),
    (
        "markdown-fenced-block",
        "markdown",
        f"Train:\n\n```bash\n{L} --nproc_per_node=8 --use_env main.py\n```\n\nDone.\n",
        "Train:\n\n```bash\ntorchrun --nproc_per_node=8 main.py\n```\n\nDone.\n",
        ["DDP201", "DDP202"],
    ),
    (
        "markdown-console-prompt",
        "markdown",
        f"~~~console\n$ {L} --nproc_per_node=2 train.py\n~~~\n",
        "~~~console\n$ torchrun --nproc_per_node=2 train.py\n~~~\n",
        ["DDP201"],
    ),
    (
        "markdown-command-line-and-inline-code",
        "markdown",
        f"{L} --nproc_per_node=2 train.py\n\nor `{L} --nproc_per_node=1 --use_env train.py` for one GPU.\n",
        "torchrun --nproc_per_node=2 train.py\n\nor `torchrun --nproc_per_node=1 train.py` for one GPU.\n",
        ["DDP201", "DDP201", "DDP202"],
    ),
    (
        "markdown-yaml-fence",
        "markdown",
        f"```yaml\n- run: {L} --nproc_per_node=2 train.py\n```\n",
        "```yaml\n- run: torchrun --nproc_per_node=2 train.py\n```\n",
        ["DDP201"],
    ),
    (
        "rst-literal-block",
        "rst",
        f"Run::\n\n    {L} --nproc_per_node=4 --use_env train.py\n\nThen evaluate.\n",
        "Run::\n\n    torchrun --nproc_per_node=4 train.py\n\nThen evaluate.\n",
        ["DDP201", "DDP202"],
    ),
    (
        "rst-code-block-and-inline-literal",
        "rst",
        f".. code-block:: bash\n\n   {L} --nproc_per_node=4 train.py\n\nor ``{L} --nproc_per_node=1 train.py``.\n",
        ".. code-block:: bash\n\n   torchrun --nproc_per_node=4 train.py\n\nor ``torchrun --nproc_per_node=1 train.py``.\n",
        ["DDP201", "DDP201"],
    ),
]


@pytest.mark.parametrize("kind, before, after, expected_codes", [pytest.param(*case[1:], id=case[0]) for case in FORMS])
def test_form(kind, before, after, expected_codes):
    result = migrated(before, kind)
    assert result.code == after
    assert codes(result) == expected_codes
    assert not result.diagnostics


CRLF_FORMS = [pytest.param(*case[1:4], id=case[0]) for case in FORMS if "\n" in case[2]]


@pytest.mark.parametrize("kind, before, after", CRLF_FORMS)
def test_form_with_crlf_line_endings(kind, before, after):
    result = migrated(before.replace("\n", "\r\n"), kind)
    assert result.code == after.replace("\n", "\r\n")


def test_changes_point_at_the_words_they_change():
    text = "set -e\nsrun python -u -m torch.distributed.launch --use_env train.py --local_rank 0\n"
    result = migrated(text, "shell")
    assert [(c.code, c.line, c.col) for c in result.changes] == [
        ("DDP201", 2, 6),
        ("DDP202", 2, 44),
        ("DDP203", 2, 63),
    ]
    assert result.changes[0].message == "`python -u -m torch.distributed.launch` becomes `torchrun`"
    assert "--local_rank 0" in result.changes[2].message


def test_notebook_bang_line_and_bash_cell():
    nb = {
        "cells": [
            {"cell_type": "code", "source": ["import sys\n", f"!{L} --nproc_per_node=2 --use_env train.py"]},
            {"cell_type": "code", "source": f"%%bash\n{L} --nproc_per_node=2 train.py --local_rank=0\n"},
            {"cell_type": "markdown", "source": [f"Run `{L} --nproc_per_node=2 train.py`\n"]},
            {"cell_type": "raw", "source": [f"{L} --nproc_per_node=2 train.py\n"]},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    text = json.dumps(nb, indent=1) + "\n"
    result = migrated(text, "notebook")
    cells = json.loads(result.code)["cells"]
    assert cells[0]["source"] == ["import sys\n", "!torchrun --nproc_per_node=2 train.py"]
    assert cells[1]["source"] == "%%bash\ntorchrun --nproc_per_node=2 train.py\n"
    assert cells[2]["source"] == ["Run `torchrun --nproc_per_node=2 train.py`\n"]
    assert cells[3]["source"] == nb["cells"][3]["source"]  # raw cells are not code
    # positions are in the .ipynb file
    line = text.splitlines().index(f'    "!{L} --nproc_per_node=2 --use_env train.py"') + 1
    assert (result.changes[0].line, result.changes[0].col) == (line, 7)


def test_invalid_notebook_is_reported_not_rewritten():
    text = '{"cells": [ {"source": "!python -m torch.distributed.launch train.py"}'
    result = migrate_launcher(text, "notebook")
    assert result.code == text
    assert codes(result) == ["DDP204"]


# --------------------------------------------------------------------------- YAML as PyYAML reads it

YAML_FORMS = [
    # (id, before, after, codes): what PyYAML's nodes and marks give that reading YAML line by line did not
    (
        "plain-scalar-over-lines",
        f"run: {L} --nproc_per_node=2\n  --use_env\n  train.py --local_rank=0\nnext: 1\n",
        "run: torchrun --nproc_per_node=2\n  train.py\nnext: 1\n",
        ["DDP201", "DDP202", "DDP203"],
    ),
    (
        "double-quoted-with-escaped-quotes",
        f'command: "bash -c \\"{L} --use_env train.py\\""\n',
        'command: "bash -c \\"torchrun train.py\\""\n',
        ["DDP201", "DDP202"],
    ),
    (
        "double-quoted-over-lines",  # the value is one line: the command's words may join on one
        f'command: "{L}\n  --use_env train.py"\n',
        'command: "torchrun train.py"\n',
        ["DDP201", "DDP202"],
    ),
    (
        "single-quoted-with-doubled-quotes",
        f"command: '{L} --use_env ''my train.py'' --local_rank=0'\n",
        "command: 'torchrun ''my train.py'''\n",
        ["DDP201", "DDP202", "DDP203"],
    ),
    (
        "flow-sequence-in-a-flow-mapping",
        "args: {command: [python, -m, torch.distributed.launch, --use_env, a.py], x: 1}\n",
        "args: {command: [torchrun, a.py], x: 1}\n",
        ["DDP201", "DDP202"],
    ),
    (
        "block-sequence-with-comments-between-items",
        "command:\n  - python\n  # the launcher\n  - -m\n  - torch.distributed.launch\n  - --use_env  # rejected\n  - train.py\n",
        "command:\n  - torchrun\n  # the launcher\n  - train.py\n",
        ["DDP201", "DDP202"],
    ),
    (
        "anchored-list-and-its-aliases",  # one node, rewritten once, where it is written
        "x-launch: &launch\n  - python\n  - -m\n  - torch.distributed.launch\n  - --use_env\n  - train.py\n"
        "services:\n  a: {command: *launch}\n  b: {command: *launch}\n",
        "x-launch: &launch\n  - torchrun\n  - train.py\nservices:\n  a: {command: *launch}\n  b: {command: *launch}\n",
        ["DDP201", "DDP202"],
    ),
    (
        "anchored-scalar",
        f"x-run: &run {L} --use_env train.py\njob:\n  script: *run\n",
        "x-run: &run torchrun train.py\njob:\n  script: *run\n",
        ["DDP201", "DDP202"],
    ),
    (
        "block-scalar-with-indentation-indicator",
        f"run: |2-\n    {L} \\\n      --use_env \\\n      train.py\n  echo done\n",
        "run: |2-\n    torchrun \\\n      train.py\n  echo done\n",
        ["DDP201", "DDP202"],
    ),
    (
        "github-actions-matrix-run",
        "jobs:\n  train:\n    strategy:\n      matrix:\n        gpus: [1, 2]\n    steps:\n      - run: |\n"
        f"          {L} --nproc_per_node=${{{{ matrix.gpus }}}} --use_env train.py\n          echo done\n",
        "jobs:\n  train:\n    strategy:\n      matrix:\n        gpus: [1, 2]\n    steps:\n      - run: |\n"
        "          torchrun --nproc_per_node=${{ matrix.gpus }} train.py\n          echo done\n",
        ["DDP201", "DDP202"],
    ),
    (
        "multi-document-stream",
        f'kind: Pod\nargs: ["sh", "-c", "{L} --use_env a.py"]\n---\nkind: Job\nrun: "bash -c \\"{L} b.py\\""\n',
        'kind: Pod\nargs: ["sh", "-c", "torchrun a.py"]\n---\nkind: Job\nrun: "bash -c \\"torchrun b.py\\""\n',
        ["DDP201", "DDP202", "DDP201"],
    ),
    (
        "byte-order-mark",  # libyaml's offsets start after it
        f'\ufeffrun: "{L} --use_env train.py"\n',
        '\ufeffrun: "torchrun train.py"\n',
        ["DDP201", "DDP202"],
    ),
]


@pytest.fixture(params=["libyaml", "pure-python"])
def yaml_loader(request, monkeypatch):
    """Both of PyYAML's readers: libyaml's (when PyYAML has it) and PyYAML's own."""
    yaml = pytest.importorskip("yaml")
    if request.param == "libyaml" and not hasattr(yaml, "CSafeLoader"):
        pytest.skip("this PyYAML has no libyaml")
    if request.param == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    return request.param


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("before, after, expected_codes", [pytest.param(*case[1:], id=case[0]) for case in YAML_FORMS])
def test_yaml_form(before, after, expected_codes, newline, yaml_loader):
    result = migrated(before.replace("\n", newline), "yaml")
    assert result.code == after.replace("\n", newline)
    assert codes(result) == expected_codes
    assert not result.diagnostics


@pytest.mark.parametrize(
    "text, where, reason",
    [
        pytest.param(  # dropping `--use_env` would take its anchor away from the alias that uses it
            "command:\n  - python\n  - -m\n  - torch.distributed.launch\n  - &env --use_env\n  - train.py\nother: *env\n",
            (2, 5),
            "the rewritten YAML would not read back as the same document",
            id="an-anchor-an-alias-uses",
        ),
        pytest.param(  # the alias's node is its anchor's, written elsewhere
            "x-env:\n  - &env --use_env\ncommand:\n  - python\n  - -m\n  - torch.distributed.launch\n  - *env\n  - train.py\n",
            (4, 3),
            "an item of this list is an alias",
            id="an-alias-in-the-command",
        ),
    ],
)
def test_yaml_rewrite_that_would_change_the_document_is_declined(text, where, reason, yaml_loader):
    result = migrated(text, "yaml")
    assert result.code == text and not result.changes
    assert positions(result, "DDP204") == [where]
    assert reason in result.diagnostics[0].message


YAML_FALLBACKS = [
    # (id, before, after): PyYAML cannot read these; the hand-written cutter still rewrites them
    (
        "invalid-yaml",
        f"steps:\n  - run: {L} --use_env a.py\n  bad: [unclosed\n",
        "steps:\n  - run: torchrun a.py\n  bad: [unclosed\n",
    ),
    (
        "helm-template",
        "{{- if .Values.train }}\napiVersion: batch/v1\nkind: Job\nspec:\n  containers:\n    - name: {{ .Chart.Name }}\n"
        '      command: ["python", "-m", "torch.distributed.launch", "--use_env", "train.py"]\n{{- end }}\n',
        "{{- if .Values.train }}\napiVersion: batch/v1\nkind: Job\nspec:\n  containers:\n    - name: {{ .Chart.Name }}\n"
        '      command: ["torchrun", "train.py"]\n{{- end }}\n',
    ),
    (
        "tab-indentation",
        f"steps:\n\t- run: {L} --use_env a.py\n",
        "steps:\n\t- run: torchrun a.py\n",
    ),
]


@pytest.mark.parametrize("before, after", [pytest.param(*case[1:], id=case[0]) for case in YAML_FALLBACKS])
def test_yaml_pyyaml_cannot_read_falls_back_to_the_lines(before, after):
    yaml = pytest.importorskip("yaml")
    with pytest.raises(yaml.YAMLError):
        list(yaml.compose_all(before, Loader=yaml.SafeLoader))
    result = migrated(before, "yaml")
    assert result.code == after
    assert codes(result) == ["DDP201", "DDP202"]


def test_yaml_quoted_scalars_decode_as_pyyaml_reads_them():
    """The offsets of a quoted scalar's characters (escapes, '' and folded lines) give PyYAML's value."""
    yaml = pytest.importorskip("yaml")
    hypothesis = pytest.importorskip("hypothesis")
    from hypothesis import strategies as st

    from migrator.launcher.yaml_quoted import _quoted_virtual

    double = ["a", " ", "\t", '\\"', "\\\\", "\\n", "\\x41", "\\u00e9", "\\U0001F600", "'", "\n", "\r\n", "\n\n", "  \n  ", "\\\n  "]
    single = ["a", " ", "\t", "''", "\\", '"', "\n", "\r\n", "\n\n", "  \n   "]

    @hypothesis.settings(max_examples=300, deadline=None)
    @hypothesis.given(st.sampled_from(['"', "'"]).flatmap(
        lambda q: st.tuples(st.just(q), st.lists(st.sampled_from(double if q == '"' else single), max_size=8))
    ))
    def check(case):
        quote, parts = case
        text = f"key: {quote}{''.join(parts)}{quote}\n"
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader).value[0][1]
        except yaml.YAMLError:
            return
        start, end = node.start_mark.index, node.end_mark.index
        virtual = _quoted_virtual(text, start, end, node.value)
        assert virtual is not None and virtual.text == node.value
        assert list(virtual.raw_at) == sorted(virtual.raw_at) and start < virtual.raw_at[0] <= virtual.raw_at[-1] < end

    check()


LAZY_IMPORTS = """
import sys
from migrator.launcher import migrate_launcher
migrate_launcher("python -m torch.distributed.launch --use_env a.py\\n", "shell")
migrate_launcher("name: ci\\n", "yaml")
migrate_launcher("# Notes\\n\\nRun `python train.py`.\\n", "markdown")
print(sorted(name for name in ("yaml", "markdown_it") if name in sys.modules))
migrate_launcher("run: python -m torch.distributed.launch a.py\\n", "yaml")
print(sorted(name for name in ("yaml", "markdown_it") if name in sys.modules))
migrate_launcher("```\\npython -m torch.distributed.launch a.py\\n```\\n", "markdown")
print(sorted(name for name in ("yaml", "markdown_it") if name in sys.modules))
"""


def test_yaml_and_markdown_libraries_load_only_for_a_file_with_a_launcher():
    run = subprocess.run([sys.executable, "-c", LAZY_IMPORTS], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[]", "['yaml']", "['markdown_it', 'yaml']"]


# --------------------------------------------------------------------------- declined: DDP204, nothing rewritten

DECLINES = [
    # (id, kind, text, [(line, col) of each DDP204])
    ("opaque-launcher-options", "shell", f"{L} $DIST_ARGS train.py\n", [(1, 11)]),
    ("all-arguments-forwarded", "shell", f'{L} "$@"\n', [(1, 11)]),
    ("arguments-slice-forwarded", "shell", f"{L} ${{@:2}}\n", [(1, 11)]),
    ("split-across-a-variable", "shell", f'LAUNCH="{L} --nproc_per_node=2"\n$LAUNCH --use_env train.py\n', [(1, 19)]),
    ("unknown-option", "shell", f"{L} --nproc_per_node=2 --foo train.py\n", [(1, 11)]),
    ("ambiguous-abbreviation", "shell", f"{L} --n 2 train.py\n", [(1, 11)]),
    ("option-without-value", "shell", f"{L} --nproc_per_node\n", [(1, 11)]),
    ("commented-out", "shell", f"# {L} --nproc_per_node=2 train.py\necho hi\n", [(1, 13)]),
    ("glued-module-flag", "shell", "python -mtorch.distributed.launch train.py\n", [(1, 10)]),
    ("make-variable-without-script", "make", f"LAUNCH = {L} --nproc_per_node=2 --use_env\n", [(1, 20)]),
    (
        "docker-entrypoint-without-script",
        "docker",
        'ENTRYPOINT ["python", "-m", "torch.distributed.launch", "--use_env"]\nCMD ["train.py"]\n',
        [(1, 29)],
    ),
    (
        "yaml-command-and-args-split",
        "yaml",
        'command: ["python", "-m", "torch.distributed.launch"]\nargs: ["--use_env", "train.py"]\n',
        [(1, 27)],
    ),
    ("markdown-python-block", "markdown", f'```python\nos.system("{L} train.py")\n```\n', [(2, 22)]),
    ("placeholder-script", "shell", f"{L} ...\n", [(1, 11)]),
]


@pytest.mark.parametrize("kind, text, where", [pytest.param(*case[1:], id=case[0]) for case in DECLINES])
def test_declined_launch_is_reported_and_left_whole(kind, text, where):
    result = migrated(text, kind)
    assert result.code == text
    assert not result.changes
    assert positions(result, "DDP204") == where
    assert all(not d.fixable for d in result.diagnostics)


def test_decline_says_why():
    (diagnostic,) = migrate_launcher(f"{L} $DIST_ARGS train.py\n", "shell").diagnostics
    assert diagnostic.message.startswith("launch left as it is: launcher options come from $DIST_ARGS")
    assert "torchrun" in diagnostic.message


# --------------------------------------------------------------------------- left alone, silently

NOOPS = [
    ("already-torchrun", "shell", "torchrun --nproc_per_node=2 train.py\n"),
    ("already-run-module", "shell", "python -m torch.distributed.run --nproc_per_node=2 train.py\n"),
    ("single-process-local-rank-untouched", "shell", "python train.py --local_rank 0 --use_env\n"),
    ("launcher-package-is-another-module", "shell", "python -m torch.distributed.launcher.api\n"),
    ("empty", "shell", ""),
    ("markdown-prose", "markdown", "We moved off torch.distributed.launch last year.\n"),
    (
        "markdown-inline-code-about-the-launcher",
        "markdown",
        "`python -m torch.distributed.launch ...` becomes `torchrun ...`; not `LAUNCH=\"python -m torch.distributed.launch"
        " --nproc_per_node=2\"`.\n",
    ),
    ("rst-prose", "rst", "``torch.distributed.launch`` is deprecated.\n"),
    ("yaml-without-launch", "yaml", "name: ci\non: [push]\n"),
    ("notebook-without-launch", "notebook", '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n'),
]


@pytest.mark.parametrize("kind, text", [pytest.param(*case[1:], id=case[0]) for case in NOOPS])
def test_left_alone(kind, text):
    result = migrated(text, kind)
    assert result.code == text
    assert not result.changes and not result.diagnostics


# --------------------------------------------------------------------------- options

MIXED = f"{L} --nproc_per_node=2 --use_env train.py --local_rank=0\npython -m torch.distributed.run --use_env b.py\n"
ALL_DONE = "torchrun --nproc_per_node=2 train.py\npython -m torch.distributed.run b.py\n"


@pytest.mark.parametrize(
    "options, expected, expected_codes",
    [
        (Options(), ALL_DONE, ["DDP201", "DDP202", "DDP203", "DDP202"]),
        (Options(select=("DDP2",)), ALL_DONE, ["DDP201", "DDP202", "DDP203", "DDP202"]),
        (Options(select=("DDP0",)), MIXED, []),
        (
            Options(ignore=("drop-local-rank-arg",)),
            "torchrun --nproc_per_node=2 train.py --local_rank=0\npython -m torch.distributed.run b.py\n",
            ["DDP201", "DDP202", "DDP202"],
        ),
        (
            Options(ignore=("DDP201",)),
            f"{L} --nproc_per_node=2 --use_env train.py --local_rank=0\npython -m torch.distributed.run b.py\n",
            ["DDP202"],
        ),
        (
            Options(ignore=("DDP202",)),  # torchrun would reject the --use_env left behind: decline instead
            MIXED,
            ["DDP204"],
        ),
    ],
    ids=["all", "select-prefix", "select-other", "ignore-local-rank", "ignore-launch", "ignore-use-env"],
)
def test_options_select_and_ignore(options, expected, expected_codes):
    result = migrate_launcher(MIXED, "shell", options)
    assert result.code == expected
    assert codes(result) == expected_codes


# --------------------------------------------------------------------------- helpers for the Python-side rule


@pytest.mark.parametrize(
    "words, expected",
    [
        (
            ["python", "-m", "torch.distributed.launch", "--nproc_per_node", "2", "train.py", "--local_rank=0"],
            ["torchrun", "--nproc_per_node", "2", "train.py"],
        ),
        (["python3", "-u", "-m", "torch.distributed.launch", "--use_env", "train.py"], ["torchrun", "train.py"]),
        (
            ["/usr/bin/python", "-m", "torch.distributed.launch", "--use_env", "train.py"],
            ["/usr/bin/python", "-m", "torch.distributed.run", "train.py"],
        ),
        (
            ["python", "-m", "torch.distributed.launch", "--nproc_per_node=2", "t.py", "--local_rank", "0", "--lr", "1"],
            ["torchrun", "--nproc_per_node=2", "t.py", "--lr", "1"],
        ),
        (["python", "-m", "torch.distributed.run", "--use_env", "t.py"], ["python", "-m", "torch.distributed.run", "t.py"]),
        (["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py"], None),
        (["torchrun", "--nproc_per_node=2", "train.py"], None),
        (["python", "train.py", "--local_rank=0"], None),
        (["python", "-m", "torch.distributed.launch", "--nproc_per_node=2"], None),  # no script: unsafe
        ([], None),
    ],
    ids=[
        "brief", "unbuffered", "path", "local-rank-pair", "run-flags", "clean-run", "torchrun", "no-launch", "unsafe", "empty"
    ],  # fmt: skip
)
def test_rewrite_command_words(words, expected):
    original = list(words)
    assert rewrite_command_words(words) == expected
    assert words == original  # the argument is not mutated
    if expected is not None:
        assert rewrite_command_words(expected) is None


def test_launch_problem():
    assert launch_problem(["python", "-m", "torch.distributed.launch", "--nproc_per_node=2"]) is not None
    problem = launch_problem(["python", "-m", "torch.distributed.launch", "--bogus", "t.py"])
    assert problem == "unknown launcher option --bogus"
    assert launch_problem(["python", "-m", "torch.distributed.launch", "t.py"]) is None
    assert launch_problem(["python", "t.py"]) is None


@pytest.mark.parametrize(
    "command, expected",
    [
        (f"{L} --nproc_per_node 2 --use_env train.py", "torchrun --nproc_per_node 2 train.py"),
        (
            "{sys.executable} -m torch.distributed.launch --nproc_per_node={n} train.py --local_rank={r}",
            "{sys.executable} -m torch.distributed.run --nproc_per_node={n} train.py",
        ),
        ("torchrun --nproc_per_node 2 train.py", None),
        (f"{L} $ARGS train.py", None),
        ("", None),
    ],
    ids=["plain", "format-string-fields", "already", "unsafe", "empty"],
)
def test_rewrite_command_string(command, expected):
    assert rewrite_command_string(command) == expected


# --------------------------------------------------------------------------- real-world files (fixtures/launchers/)


def _fixture_cases() -> List[Path]:
    return sorted(p for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []


def _input_file(case: Path) -> Path:
    (path,) = [p for p in case.iterdir() if p.is_file() and p.name != "findings.txt"]
    return path


def _findings(name: str, result: Result) -> str:
    rows = sorted(
        [(c.line, c.col, c.code, c.message, False) for c in result.changes]
        + [(d.line, d.col, d.code, d.message, d.fixable) for d in result.diagnostics]
    )
    return "".join(format_finding(name, *row) + "\n" for row in rows)


@pytest.mark.parametrize("case", _fixture_cases(), ids=lambda p: p.name)
def test_launcher_fixture(case: Path, update_fixtures: bool):
    source = _input_file(case)
    before = source.read_bytes().decode("utf-8")
    kind = detect_kind(source.name, before)
    assert kind in KINDS, f"{source.name}: not a launcher file"
    result = migrated(before, kind)
    expected_path = case / "expected" / source.name
    findings_path = case / "findings.txt"
    findings = _findings(source.name, result)
    if update_fixtures:
        if result.changed:
            expected_path.parent.mkdir(exist_ok=True)
            expected_path.write_bytes(result.code.encode("utf-8"))
        elif expected_path.exists():
            expected_path.unlink()
        findings_path.write_bytes(findings.encode("utf-8"))
        return
    expected = expected_path.read_bytes().decode("utf-8") if expected_path.exists() else before
    assert result.code == expected
    assert findings == (findings_path.read_bytes().decode("utf-8") if findings_path.exists() else "")
    if expected_path.exists():
        assert result.changed, "expected/ holds a copy of an unchanged file: delete it"


def test_every_fixture_case_is_a_launcher_kind():
    kinds = {detect_kind(_input_file(case).name, "") or "shell" for case in _fixture_cases()}
    assert {"shell", "make", "docker", "yaml", "markdown", "rst", "notebook"} <= kinds


# --------------------------------------------------------------------------- runtime: the rewritten script really runs

RANK_PROBE = """\
import atexit, json, os, sys

def _record():
    if "RANK" in os.environ:
        with open(os.path.join(os.environ["LAUNCH_PROBE_DIR"], "rank%s.json" % os.environ["RANK"]), "w") as f:
            env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
            json.dump({"env": env, "argv": sys.argv}, f)

atexit.register(_record)
"""

LEGACY_SCRIPT = """\
#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")"
PORT=${PORT:-29500}
python -m torch.distributed.launch --nproc_per_node=2 --master_port=$PORT --use_env train.py --epochs 1 --save-model
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.runtime
def test_rewritten_launcher_script_trains_under_torchrun(tmp_path: Path):
    pytest.importorskip("torch")
    (tmp_path / "train.py").write_bytes((ROOT / "fixtures" / "mnist_main_argparse" / "expected.py").read_bytes())
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(RANK_PROBE)

    result = migrate_launcher(LEGACY_SCRIPT, "shell")
    assert [c.code for c in result.changes] == ["DDP201", "DDP202"]
    assert "torchrun --nproc_per_node=2 --master_port=$PORT train.py --epochs 1 --save-model\n" in result.code
    script = tmp_path / "dist_train.sh"
    script.write_text(result.code)

    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "OMP_NUM_THREADS": "1",
        "PORT": str(_free_port()),
        "PYTHONPATH": str(probe),
        "LAUNCH_PROBE_DIR": str(tmp_path),
        "CUDA_VISIBLE_DEVICES": "",
    }
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["env"] for r in ranks] == [
        {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"},
        {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"},
    ]
    for r in ranks:
        assert r["argv"][1:] == ["--epochs", "1", "--save-model"]  # no --local-rank from torchrun
    assert "Test set: Average loss" in run.stdout
    assert (tmp_path / "mnist_cnn.pt").stat().st_size > 0


LEGACY_MAKEFILE = """\
devices ?=
num_gpus ?= 2
port ?= 29500

train:
\tOMP_NUM_THREADS=1 CUDA_VISIBLE_DEVICES=$(devices) python -m torch.distributed.launch --nproc_per_node=$(num_gpus) \\
\t    --master_port=$(port) --use_env train.py --epochs 1 --save-model ;\\
\techo "trained on $(num_gpus) processes"
"""


@pytest.mark.runtime
def test_rewritten_makefile_recipe_trains_under_torchrun(tmp_path: Path):
    """A Makefile recipe with make variables, an env prefix and `;\\` continuations, rewritten and run."""
    pytest.importorskip("torch")
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    (tmp_path / "train.py").write_bytes((ROOT / "fixtures" / "mnist_main_argparse" / "expected.py").read_bytes())
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(RANK_PROBE)

    result = migrate_launcher(LEGACY_MAKEFILE, "make")
    assert [c.code for c in result.changes] == ["DDP201", "DDP202"]
    assert "CUDA_VISIBLE_DEVICES=$(devices) torchrun --nproc_per_node=$(num_gpus) \\\n\t    --master_port=$(port) train.py" in result.code
    assert result.code.replace("torchrun", "python -m torch.distributed.launch").replace("train.py", "--use_env train.py") == LEGACY_MAKEFILE
    (tmp_path / "Makefile").write_text(result.code)

    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(probe),
        "LAUNCH_PROBE_DIR": str(tmp_path),
    }
    run = subprocess.run([make, "train", f"port={_free_port()}"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["env"]["WORLD_SIZE"] for r in ranks] == ["2", "2"]
    assert "trained on 2 processes" in run.stdout
    assert (tmp_path / "mnist_cnn.pt").stat().st_size > 0
