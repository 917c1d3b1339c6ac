"""A fake Slurm allocation to run generated batch scripts under plain bash.

    bin = fake_slurm.install(tmp_path / "bin", torchrun=fake_slurm.RECORD_ARGV)
    env = fake_slurm.environment(bin, nodes=["head-1", "node-2"], job_id="4242")
    subprocess.run(["bash", "job.sbatch"], env={**os.environ, **env}, ...)

`scontrol show hostnames "$SLURM_JOB_NODELIST"` prints the fake node names (and refuses any
other node list than the allocation's): the first one alone and the rest a moment later, as a
long list written in pieces arrives, so a reader that quits after one line makes it fail.
`srun` starts its command once per node, all at once, as `srun` does under
`--ntasks-per-node=1`, with SLURM_NODEID and SLURM_PROCID set, and records its own options in
$FAKE_SLURM_DIR/srun-options. `torchrun` is either RECORD_ARGV (writes its
argv, NUL-separated, to $FAKE_SLURM_DIR/torchrun-argv.<node>) or real_torchrun() (this
interpreter's torch.distributed.run).
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Sequence

SCONTROL = """\
#!/bin/bash
if [ "$#" -ne 3 ] || [ "$1 $2" != "show hostnames" ] || [ "$3" != "$SLURM_JOB_NODELIST" ]; then
    echo "fake scontrol: unexpected arguments: $*" >&2
    exit 2
fi
first=${FAKE_SLURM_NODES%% *}
printf '%s\\n' "$first"
sleep 0.2  # as a long list written in pieces: a reader that stopped after one line has gone by now
printf '%s\\n' $FAKE_SLURM_NODES | tail -n +2
"""

SRUN = """\
#!/bin/bash
options=()
while [ "$#" -gt 0 ] && [ "${1#-}" != "$1" ]; do options+=("$1"); shift; done
printf '%s\\n' "${options[@]}" > "$FAKE_SLURM_DIR/srun-options"
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do
    SLURM_NODEID=$node SLURM_PROCID=$node "$@" &
    pids+=("$!")
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit "$status"
"""

RECORD_ARGV = """\
#!/bin/bash
printf '%s\\0' "$@" > "$FAKE_SLURM_DIR/torchrun-argv.$SLURM_NODEID"
"""


def real_torchrun() -> str:
    """torchrun as this interpreter's module, whatever PATH holds."""
    return f"#!/bin/bash\nexec {shlex.quote(sys.executable)} -m torch.distributed.run \"$@\"\n"


def install(bin_dir: Path, torchrun: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("scontrol", SCONTROL), ("srun", SRUN), ("torchrun", torchrun)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    return bin_dir


def environment(bin_dir: Path, nodes: Sequence[str], job_id: str) -> Dict[str, str]:
    """What Slurm sets in a batch job, for the fake allocation of `nodes`, with the fakes first on PATH."""
    return {
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        "SLURM_JOB_NODELIST": f"fake[1-{len(nodes)}]",
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_JOB_ID": job_id,
        "FAKE_SLURM_NODES": " ".join(nodes),
        "FAKE_SLURM_DIR": str(bin_dir),
    }


def torchrun_argv(bin_dir: Path, node: int) -> List[str]:
    """The argv RECORD_ARGV's torchrun got on `node`."""
    data = (bin_dir / f"torchrun-argv.{node}").read_bytes().decode("utf-8")
    return data.split("\0")[:-1]


def srun_options(bin_dir: Path) -> List[str]:
    return (bin_dir / "srun-options").read_text().split()
