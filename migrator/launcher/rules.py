"""The launcher's rules, DDP201-DDP204: what each rewrite does, why, and its examples.

They join the Python rules in `migrator.rules.RULES`; their examples are tested with
`migrate_launcher(before, EXAMPLE_KIND)`.
"""
from __future__ import annotations

from typing import Tuple

from migrator.rule import Example, Rule

# --------------------------------------------------------------------------- rules

LAUNCH_TO_TORCHRUN = Rule(
    code="DDP201",
    name="launch-to-torchrun",
    summary="launch with torchrun instead of the deprecated torch.distributed.launch",
    what="""
Rewrites `python -m torch.distributed.launch` to `torchrun` in shell scripts, Slurm scripts,
Makefiles, Dockerfiles, YAML, Markdown, reST and notebooks. A plain `python` or `python3`
becomes `torchrun`; an interpreter given as a variable or a path (`$PYTHON`,
`${PYTHON:-python}`, `$(PYTHON)`, `/opt/conda/bin/python`, `python3.10`) is kept and only the
module changes, to `torch.distributed.run`, so the command still runs in the environment the
script chose. `-u` is dropped with a plain interpreter: torchrun already starts every worker with
`python -u`, so training output stays unbuffered; any other interpreter option (`-O`, `-W ...`)
keeps the interpreter. All launcher options (`--nproc_per_node`, `--nnodes`, `--node_rank`,
`--master_addr`, `--master_port`, `--rdzv_*` ...) keep their values, spellings and quoting, so a
multi-node command stays multi-node (static rendezvous).""",
    why="""
`torch.distributed.launch` is deprecated. Unless given `--use_env`, it passes `--local-rank`
(dashed since torch 2.0, `--local_rank` before) to the training script, which then has to parse
it; torchrun passes nothing and sets `LOCAL_RANK` in each worker's environment.""",
    fix="""
Replace the interpreter and `-m torch.distributed.launch` with `torchrun`, or rename the module to
`torch.distributed.run` after a kept interpreter. Run `ddp-migrate` on the training script too:
it reads `LOCAL_RANK` from the environment.""",
    fix_safety="""
Safe for the launcher. A training script that only reads `args.local_rank` (set by the old
launcher without `--use_env`) must read `os.environ["LOCAL_RANK"]` instead, which is what
`ddp-migrate` does to Python scripts. `torchrun` must be on the PATH wherever `python` was; a kept
interpreter has no such requirement.""",
    fixable=True,
    example_language="bash",
    examples=(
        Example(
            id="plain-python",
            before="python -m torch.distributed.launch --nproc_per_node=4 train.py --epochs 10\n",
            after="torchrun --nproc_per_node=4 train.py --epochs 10\n",
        ),
        Example(
            id="unbuffered",
            before="python3 -u -m torch.distributed.launch --nproc_per_node $GPUS train.py\n",
            after="torchrun --nproc_per_node $GPUS train.py\n",
        ),
        Example(
            id="interpreter-variable-kept",
            before='${PYTHON:-python} -m torch.distributed.launch --nproc_per_node=8 tools/train.py "$@"\n',
            after='${PYTHON:-python} -m torch.distributed.run --nproc_per_node=8 tools/train.py "$@"\n',
        ),
    ),
)

DROP_USE_ENV = Rule(
    code="DDP202",
    name="drop-use-env",
    summary="drop --use_env: torchrun always sets LOCAL_RANK and rejects the flag",
    what="Removes `--use_env` / `--use-env` from a launch command.",
    why="""
`--use_env` told the old launcher to set `LOCAL_RANK` instead of passing `--local-rank`. torchrun
and `python -m torch.distributed.run` always do that and fail with "unrecognized arguments" on
the flag.""",
    fix="Remove the flag (and a line continuation left dangling by it).",
    fix_safety="Safe: the behaviour the flag asked for is torchrun's only behaviour.",
    fixable=True,
    example_language="bash",
    examples=(
        Example(
            id="use-env",
            before="python -m torch.distributed.launch --nproc_per_node=2 --use_env train.py\n",
            after="torchrun --nproc_per_node=2 train.py\n",
        ),
        Example(
            id="continued-lines",
            before=(
                "python -m torch.distributed.launch \\\n"
                "    --nproc_per_node=2 \\\n"
                "    --use-env \\\n"
                "    train.py\n"
            ),
            after="torchrun \\\n    --nproc_per_node=2 \\\n    train.py\n",
        ),
    ),
)

DROP_LOCAL_RANK_ARG = Rule(
    code="DDP203",
    name="drop-local-rank-arg",
    summary="drop the explicit --local_rank passed to the training script",
    what="""
Removes an explicit `--local_rank=...`, `--local_rank ...`, `--local-rank=...` or
`--local-rank ...` written after the training script of a launch command.""",
    why="""
Every worker gets the same explicit value, so all of them would claim the same GPU; torchrun
sets the right `LOCAL_RANK` in each worker's environment.""",
    fix="Remove the argument and its value.",
    fix_safety="""
Safe once the script reads `LOCAL_RANK` from the environment (what `ddp-migrate` makes of a Python
script). A script that declares `--local_rank` with `required=True` needs that requirement
dropped.""",
    fixable=True,
    example_language="bash",
    examples=(
        Example(
            id="local-rank",
            before="python -m torch.distributed.launch --nproc_per_node=2 train.py --local_rank=0 --epochs 5\n",
            after="torchrun --nproc_per_node=2 train.py --epochs 5\n",
        ),
    ),
)

LAUNCHER_UNSAFE = Rule(
    code="DDP204",
    name="launcher-unsafe",
    summary="a torch.distributed.launch command ddp-migrate cannot rewrite safely",
    what="""
Reports a use of `torch.distributed.launch` that is left as it is: launcher options that come
from a variable (`$DIST_ARGS`, `"$@"`) and may hold `--use_env`, a command split across a
variable and its use (`LAUNCH="python -m torch.distributed.launch ..."`; `$LAUNCH train.py`),
an option the launcher does not know, a command in a comment or in a code block of another
language.""",
    why="""
Half a rewrite is worse than none: `torchrun` with a `--use_env` hidden in a variable fails, and
a launch command without its training script cannot be checked for `--local_rank`.""",
    fix="""
Rewrite the command by hand to `torchrun ...` (drop `--use_env`, drop `--local_rank` passed to
the script).""",
    fix_safety="Nothing is changed.",
    fixable=False,
    example_language="bash",
    examples=(
        Example(
            id="split-across-a-variable",
            before='LAUNCH="python -m torch.distributed.launch --nproc_per_node=2"\n$LAUNCH --use_env train.py\n',
            after=None,
            diagnostics=("DDP204",),
        ),
    ),
)

LAUNCHER_RULES: Tuple[Rule, ...] = (LAUNCH_TO_TORCHRUN, DROP_USE_ENV, DROP_LOCAL_RANK_ARG, LAUNCHER_UNSAFE)
_RULE_NAMES = {rule.code: rule.name for rule in LAUNCHER_RULES}

#: The kind the rules' own examples are written in (they are tested with migrate_launcher(before, EXAMPLE_KIND)).
EXAMPLE_KIND = "shell"
