"""A Slurm batch script: one torchrun per node, meeting at a c10d rendezvous on the first node.

    #SBATCH --nodes=2 / --ntasks-per-node=1 / --gpus-per-node=4
    head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
    srun --kill-on-bad-exit=1 torchrun --nnodes="$SLURM_NNODES" --nproc_per_node=4 \\
        --rdzv_backend=c10d --rdzv_endpoint="$head_node:$port" --rdzv_id="$SLURM_JOB_ID" train.py ...

One task per node because torchrun itself starts the GPUs' processes; the c10d rendezvous numbers
the nodes, so no node needs its own rank, and the job id keeps two jobs on one head node apart.
Everything the user gave is quoted with shlex.quote: an argument reaches the script as it was typed.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from migrator.jobs.spec import JobError, Launch, single_token

DEFAULT_PORT = 29500
FIRST_NODE = 'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p'


@dataclass(frozen=True)
class SlurmOptions:
    """The sbatch settings ddp-migrate writes only when asked (None: the cluster's default)."""

    partition: Optional[str] = None
    time: Optional[str] = None
    account: Optional[str] = None
    cpus_per_task: Optional[int] = None
    port: int = DEFAULT_PORT
    setup: Tuple[str, ...] = ()  # shell lines run before srun (module load, source venv/bin/activate)


def sbatch_script(launch: Launch, options: SlurmOptions = SlurmOptions()) -> str:
    """The whole batch script, ready for `sbatch FILE`."""
    lines = [
        "#!/bin/bash",
        f"# {launch.describe()}, written by ddp-migrate launch.",
        "# Submit it with sbatch from the directory the script's path is relative to.",
        *directives(launch, options),
        "",
        "set -euo pipefail",
        "",
        *_setup(options.setup),
        "# The first node of the allocation hosts the rendezvous; torchrun numbers the nodes.",
        "# sed reads the whole list: `head -n 1` would close the pipe early, and under pipefail",
        "# the SIGPIPE that kills scontrol on a long node list would fail the job.",
        f"head_node=$({FIRST_NODE})",
        f"port={_port(options.port)}",
        "",
        "# One torchrun per node (--ntasks-per-node=1), each starting one process per GPU;",
        "# a node that fails ends the others instead of leaving them waiting for it.",
        *_literal_note(launch),
        _continued([f"{_srun(options)} torchrun", *torchrun_options(launch), _command(launch)]),
    ]
    return "\n".join(lines) + "\n"


def directives(launch: Launch, options: SlurmOptions) -> List[str]:
    """The `#SBATCH` lines: what the job needs from the scheduler."""
    values = [
        ("job-name", job_name(launch)),
        ("nodes", str(launch.nodes)),
        ("ntasks-per-node", "1"),
        ("gpus-per-node", str(launch.gpus)),
        ("cpus-per-task", _cpus(options.cpus_per_task)),
        ("partition", options.partition and single_token("--partition", options.partition)),
        ("account", options.account and single_token("--account", options.account)),
        ("time", options.time and single_token("--time", options.time)),
    ]
    return [f"#SBATCH --{key}={value}" for key, value in values if value is not None]


def _srun(options: SlurmOptions) -> str:
    """srun and its options. Since Slurm 22.05 a step no longer inherits the job's
    --cpus-per-task: without it again here, torchrun and all its processes would share one CPU."""
    cpus = _cpus(options.cpus_per_task)
    return "srun --kill-on-bad-exit=1" + (f" --cpus-per-task={cpus}" if cpus else "")


def torchrun_options(launch: Launch) -> List[str]:
    """torchrun's rendezvous flags, as shell words (the variables are the script's and Slurm's)."""
    return [
        '--nnodes="$SLURM_NNODES"',
        f"--nproc_per_node={launch.gpus}",
        "--rdzv_backend=c10d",
        '--rdzv_endpoint="$head_node:$port"',
        '--rdzv_id="$SLURM_JOB_ID"',
    ]


def job_name(launch: Launch) -> str:
    """--job-name as given (one word), else the script's name with odd characters made `-`."""
    if launch.name is not None:
        return single_token("--job-name", launch.name)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", launch.stem).strip("-") or "train"


def _command(launch: Launch) -> str:
    return " ".join(shlex.quote(word) for word in (launch.script, *launch.args))


def _literal_note(launch: Launch) -> List[str]:
    """shellcheck's SC2016 asks whether a `$` in single quotes was meant to expand; here it was not."""
    if not any(char in word for word in (launch.script, *launch.args) for char in "$`"):
        return []
    return ["# The script's arguments are literal: a $ or ` in them reaches it as typed.", "# shellcheck disable=SC2016"]


def _continued(words: Sequence[str]) -> str:
    """One command over several lines, a flag per line, so a diff of two job files reads well."""
    return " \\\n    ".join(words)


def _setup(lines: Sequence[str]) -> List[str]:
    for line in lines:
        if "\n" in line or "\r" in line or not line.strip():
            raise JobError("--setup takes one line of shell; repeat --setup for more lines")
    return [*lines, ""] if lines else []


def _port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise JobError(f"--port {port}: give a TCP port, 1 to 65535")
    return port


def _cpus(cpus: Optional[int]) -> Optional[str]:
    if cpus is not None and cpus < 1:
        raise JobError(f"--cpus-per-task must be at least 1, not {cpus}")
    return None if cpus is None else str(cpus)
