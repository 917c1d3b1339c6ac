"""What the Kubeflow Training Operator (v1.7 to 1.9, API kubeflow.org/v1) gives each pod of a
PyTorchJob, to run a manifest's containers without a cluster.

From training-operator's pkg/controller.v1/pytorch: envvar.go (setPodEnv) and master.go
(MasterEnvVarGenerator), and pkg/apis/kubeflow.org/v1/pytorch_defaults.go (the Master's port,
23456, when the container names none). Every container of a replica gets MASTER_ADDR/PORT and
PET_MASTER_ADDR/PORT (the Master's service, `<job>-master-0`), WORLD_SIZE (replicas x
nprocPerNode), RANK and PET_NODE_RANK (0 for the Master, i+1 for Worker i), PET_NPROC_PER_NODE
(spec.nprocPerNode) and, without an elasticPolicy, PET_NNODES (all replicas).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

DEFAULT_PORT = 23456  # PyTorchJobDefaultPort, given to the Master's `pytorch` container


@dataclass(frozen=True)
class Pod:
    replica: str  # "Master" or "Worker"
    index: int
    command: List[str]
    env: Dict[str, str]


def pods(manifest: Dict[str, Any], master_addr: Optional[str] = None, master_port: int = DEFAULT_PORT) -> List[Pod]:
    """One Pod per replica, Master first. `master_addr`: the Master service's address
    (default: its DNS name, `<job>-master-0`); a test on one machine passes 127.0.0.1."""
    spec = manifest["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(replica["replicas"] for replica in replicas.values())
    nproc = spec.get("nprocPerNode", "auto")
    world = total * (int(nproc) if nproc.isdigit() else 1)
    address = master_addr or f"{manifest['metadata']['name']}-master-0"
    out = []
    for kind in ("Master", "Worker"):
        for index in range(replicas.get(kind, {}).get("replicas", 0)):
            rank = index + (1 if kind == "Worker" else 0)
            (container,) = [c for c in replicas[kind]["template"]["spec"]["containers"] if c["name"] == "pytorch"]
            env = {
                "PYTHONUNBUFFERED": "1",
                "MASTER_PORT": str(master_port), "PET_MASTER_PORT": str(master_port),
                "MASTER_ADDR": address, "PET_MASTER_ADDR": address,
                "WORLD_SIZE": str(world), "RANK": str(rank), "PET_NODE_RANK": str(rank),
                "PET_NPROC_PER_NODE": nproc, "PET_NNODES": str(total),
            }
            out.append(Pod(kind, index, list(container["command"]), env))
    return out
