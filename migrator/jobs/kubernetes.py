"""A Kubeflow Training Operator PyTorchJob (apiVersion kubeflow.org/v1, operator v1.7 or later).

The operator starts one pod per node: a Master (node 0) and N-1 Workers, each running the
container named `pytorch` (the operator looks for that name). It gives every such container the
environment torchrun reads its defaults from, `PET_<OPTION>` (training-operator's
pkg/controller.v1/pytorch/envvar.go and master.go): PET_MASTER_ADDR (the Master's service) and
PET_MASTER_PORT, PET_NODE_RANK (0 on the Master, i+1 on Worker i), PET_NNODES (the replicas
together) and PET_NPROC_PER_NODE (spec.nprocPerNode). So the container runs plain
`torchrun --nnodes=N --nproc_per_node=G SCRIPT ARGS`: torchrun's static rendezvous at the Master,
with the counts spelled out so the manifest reads on its own and agrees with what the operator sets.
spec.nprocPerNode also makes the operator's WORLD_SIZE right (replicas x nprocPerNode).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from migrator.jobs import yaml_text
from migrator.jobs.spec import JobError, Launch

API_VERSION = "kubeflow.org/v1"
KIND = "PyTorchJob"
CONTAINER = "pytorch"  # the operator sets its environment and port on the container of this name
RESTART_POLICY = "OnFailure"
GPU_RESOURCE = "nvidia.com/gpu"

#: A DNS-1035 label, what Kubernetes requires of the services the operator names after the job.
_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
#: A namespace: a DNS-1123 label (may start with a digit).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_MAX_LABEL = 63


@dataclass(frozen=True)
class KubernetesOptions:
    image: str  # the container image that holds the script and torch; no default can be right
    namespace: Optional[str] = None


def manifest_text(launch: Launch, options: KubernetesOptions) -> str:
    """The manifest as YAML, ready for `kubectl create -f FILE`."""
    header = (
        f"# {launch.describe()}, written by ddp-migrate launch.\n"
        "# The script's path is relative to the image's working directory.\n"
    )
    return header + yaml_text.dump(manifest(launch, options))


def manifest(launch: Launch, options: KubernetesOptions) -> Dict[str, Any]:
    """The PyTorchJob as data: the Master, and Workers when there is more than one node."""
    container = _container(launch, options.image)
    replicas = {"Master": _replica(1, container)}
    if launch.nodes > 1:
        replicas["Worker"] = _replica(launch.nodes - 1, container)
    metadata: Dict[str, Any] = {"name": job_name(launch)}
    if options.namespace is not None:
        metadata["namespace"] = namespace(options.namespace)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        # A string in the CRD: it also takes "auto", "cpu" and "gpu".
        "spec": {"nprocPerNode": str(launch.gpus), "pytorchReplicaSpecs": replicas},
    }


def torchrun_command(launch: Launch) -> List[str]:
    """The container's command. Node rank and the Master's address come from the operator's PET_* variables."""
    return ["torchrun", f"--nnodes={launch.nodes}", f"--nproc_per_node={launch.gpus}", launch.script, *launch.args]


def job_name(launch: Launch) -> str:
    """--job-name, else the script's name made a DNS label (`train_ddp.py` -> `train-ddp`).

    Short enough that the operator's longest pod and service name, `<name>-worker-<index>`,
    is still a label of at most 63 characters.
    """
    room = _MAX_LABEL - len(f"-worker-{max(launch.nodes - 2, 0)}")
    if launch.name is not None:
        if not _LABEL.fullmatch(launch.name) or len(launch.name) > room:
            raise JobError(
                f"--job-name {launch.name!r}: give at most {room} lowercase letters, digits and '-', "
                "starting with a letter (the operator names the job's pods and services after it)"
            )
        return launch.name
    name = re.sub(r"[^a-z0-9]+", "-", launch.stem.lower()).strip("-")
    name = name if name[:1].isalpha() else f"job-{name}".rstrip("-")
    return name[:room].rstrip("-")


def namespace(value: str) -> str:
    if not _NAMESPACE.fullmatch(value) or len(value) > _MAX_LABEL:
        raise JobError(f"--namespace {value!r}: give at most 63 lowercase letters, digits and '-'")
    return value


def _container(launch: Launch, image: str) -> Dict[str, Any]:
    if not image or any(char.isspace() for char in image):
        raise JobError(f"--image {image!r}: give the image's name, e.g. registry.example.com/team/train:1.0")
    return {
        "name": CONTAINER,
        "image": image,
        "command": torchrun_command(launch),
        "resources": {"limits": {GPU_RESOURCE: launch.gpus}},
    }


def _replica(count: int, container: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "replicas": count,
        "restartPolicy": RESTART_POLICY,
        "template": {"spec": {"containers": [container]}},
    }
