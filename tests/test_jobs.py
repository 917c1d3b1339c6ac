"""`ddp-migrate launch`'s job files: the Slurm batch script and the Kubeflow PyTorchJob manifest.

The Slurm script is checked by bash -n and shellcheck, then run under bash on a fake allocation
(tests/fake_slurm.py) whose torchrun records its argv, so an argument with spaces, quotes, `$`
or a glob is shown to reach the script unchanged. The manifest is validated against a JSON
schema of the PyTorchJob fields it uses (from the kubeflow.org/v1 CRD and the operator's
webhook), and its torchrun command is parsed by torch's own parser under the environment the
operator gives each pod (tests/fake_kubeflow.py). tests/test_jobs_cli.py tests the command,
tests/test_jobs_runtime.py trains with both files.
"""
from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import fake_kubeflow
import fake_slurm
from migrator.jobs import kubernetes, slurm, yaml_text
from migrator.jobs.spec import JobError, Launch, missing_arguments

#: Arguments a shell would mangle unquoted: spaces, both quotes, $ and command substitution,
#: globs, a separator, a backslash, a line break, an empty one, a dash, a second `--`, non-ASCII.
ODD_ARGS = ("--name", "two words", "it's", 'say "hi"', "$HOME", "${PATH}", "`id`", "$(id)", "*.py",
            "[ab]?", "a;b|c&", "back\\slash", "new\nline", "", "-", "--", "ünï ☃", "~")


def sbatch(launch_: Launch, **options: Any) -> str:
    return slurm.sbatch_script(launch_, slurm.SlurmOptions(**options))


# --------------------------------------------------------------------------- Slurm: text


def test_sbatch_directives_one_task_per_node_and_gpus():
    text = sbatch(Launch("train.py", nodes=3, gpus=8))
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=train", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
    ]
    assert text.startswith("#!/bin/bash\n")
    assert "\nset -euo pipefail\n" in text
    assert '\nhead_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)\n' in text
    assert "\nport=29500\n" in text
    assert "--nproc_per_node=8" in text and '--nnodes="$SLURM_NNODES"' in text


@pytest.mark.parametrize(
    "options, line",
    [
        ({"partition": "gpu"}, "#SBATCH --partition=gpu"),
        ({"time": "1-00:00:00"}, "#SBATCH --time=1-00:00:00"),
        ({"account": "proj42"}, "#SBATCH --account=proj42"),
        ({"cpus_per_task": 32}, "#SBATCH --cpus-per-task=32"),
    ],
    ids=["partition", "time", "account", "cpus-per-task"],
)
def test_sbatch_optional_directives_only_when_given(options, line):
    key = line.split("=")[0]
    assert line in sbatch(Launch("train.py"), **options).splitlines()
    assert key not in sbatch(Launch("train.py"))


def test_sbatch_directives_precede_every_command():
    """sbatch reads #SBATCH lines only up to the first command."""
    lines = sbatch(Launch("train.py", nodes=2), partition="gpu", setup=("module load cuda",)).splitlines()
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    assert all(not line or line.startswith("#") for line in lines[:last_directive])


@pytest.mark.parametrize(
    "launch_, expected",
    [
        (Launch("train.py"), "train"),
        (Launch("src/my train+v2.py"), "my-train-v2"),
        (Launch("train.py", name="bert-large.ft"), "bert-large.ft"),
    ],
    ids=["stem", "odd-characters", "given"],
)
def test_sbatch_job_name(launch_, expected):
    assert f"#SBATCH --job-name={expected}\n" in sbatch(launch_)


@pytest.mark.parametrize(
    "launch_, options, option",
    [
        (Launch("train.py", name="my job"), {}, "--job-name"),
        (Launch("train.py"), {"partition": "gpu #1"}, "--partition"),
        (Launch("train.py"), {"account": "a'b"}, "--account"),
        (Launch("train.py"), {"time": "1:00\n#SBATCH --nodes=99"}, "--time"),
        (Launch("train.py"), {"setup": ("module load a\nmodule load b",)}, "--setup"),
        (Launch("train.py"), {"port": 70000}, "--port"),
        (Launch("train.py"), {"cpus_per_task": 0}, "--cpus-per-task"),
    ],
    ids=["job-name-space", "partition-comment", "account-quote", "time-injects-a-line", "setup-two-lines",
         "port-range", "cpus"],
)
def test_sbatch_refuses_values_that_would_break_the_file(launch_, options, option):
    with pytest.raises(JobError, match=option):
        sbatch(launch_, **options)


def test_launch_refuses_no_nodes_or_gpus():
    with pytest.raises(JobError, match="--nodes"):
        Launch("train.py", nodes=0)
    with pytest.raises(JobError, match="--gpus"):
        Launch("train.py", gpus=0)


# --------------------------------------------------------------------------- Slurm: bash and shellcheck

SBATCH_CASES = {
    "plain": (Launch("train.py", nodes=2, gpus=4), {}),
    "one-node": (Launch("train.py", nodes=1, gpus=1), {}),
    "odd-arguments": (Launch("my dir/it's train.py", ODD_ARGS, nodes=2, gpus=2), {}),
    "every-option": (
        Launch("train.py", ("--epochs", "3"), nodes=4, gpus=8, name="big"),
        {"partition": "gpu", "time": "02:00:00", "account": "ml", "cpus_per_task": 64, "port": 29400,
         "setup": ("module load cuda/12.1", "export OMP_NUM_THREADS=8")},
    ),
}


def shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed: .ci/run installs it (Debian package shellcheck)")
        pytest.skip("shellcheck is not installed (apt-get install shellcheck); CI runs this check")
    return found


@pytest.mark.parametrize("name", SBATCH_CASES)
def test_sbatch_script_passes_bash_n_and_shellcheck(name, tmp_path):
    job = tmp_path / "job.sbatch"
    job.write_text(sbatch(SBATCH_CASES[name][0], **SBATCH_CASES[name][1]))
    syntax = subprocess.run(["bash", "-n", str(job)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    lint = subprocess.run([shellcheck(), "--shell=bash", "--severity=style", str(job)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_shellcheck_check_can_fail(tmp_path):
    """The check above would see an unquoted argument (the bug shlex.quote prevents)."""
    job = tmp_path / "job.sbatch"
    job.write_text(sbatch(Launch("train.py", ("$HOME",))).replace("'$HOME'", '"$HOME"/$1'))
    lint = subprocess.run([shellcheck(), "--shell=bash", str(job)], capture_output=True, text=True)
    assert lint.returncode != 0 and "SC2086" in lint.stdout


def run_on_fake_allocation(text: str, tmp_path: Path, nodes: List[str], job_id: str = "4242") -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir(parents=True)
    (workdir / "decoy.py").write_text("")  # an unquoted *.py would expand to this
    job = workdir / "job.sbatch"
    job.write_text(text)
    bin_dir = fake_slurm.install(tmp_path / "bin", torchrun=fake_slurm.RECORD_ARGV)
    env = {**os.environ, **fake_slurm.environment(bin_dir, nodes=nodes, job_id=job_id)}
    done = subprocess.run(["bash", str(job)], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr}"
    return bin_dir


def test_sbatch_arguments_reach_the_script_unchanged(tmp_path):
    job = Launch("my dir/it's train.py", ODD_ARGS, nodes=2, gpus=4)
    bin_dir = run_on_fake_allocation(sbatch(job, port=29411), tmp_path, nodes=["gpu-node-17", "gpu-node-18"])
    expected = [
        "--nnodes=2", "--nproc_per_node=4", "--rdzv_backend=c10d", "--rdzv_endpoint=gpu-node-17:29411",
        "--rdzv_id=4242", "my dir/it's train.py", *ODD_ARGS,
    ]
    for node in (0, 1):  # srun ran one torchrun per node, each with the same command
        assert fake_slurm.torchrun_argv(bin_dir, node) == expected
    assert fake_slurm.srun_options(bin_dir) == ["--kill-on-bad-exit=1"]


def test_sbatch_rendezvous_at_the_first_node_of_the_allocation(tmp_path):
    bin_dir = run_on_fake_allocation(sbatch(Launch("train.py", nodes=3)), tmp_path,
                                     nodes=["b-node", "a-node", "c-node"], job_id="99")
    argv = fake_slurm.torchrun_argv(bin_dir, 2)
    assert "--rdzv_endpoint=b-node:29500" in argv and "--rdzv_id=99" in argv and "--nnodes=3" in argv


def test_first_node_survives_a_long_node_list(tmp_path):
    """`scontrol ... | head -n 1` under pipefail fails the job (141, SIGPIPE) when scontrol is
    still writing once head has quit; the fake scontrol writes that way, so the check can fail."""
    text = sbatch(Launch("train.py", nodes=2))
    with pytest.raises(AssertionError, match="141"):
        run_on_fake_allocation(text.replace("| sed -n 1p", "| head -n 1"), tmp_path / "head", nodes=["n1", "n2"])
    bin_dir = run_on_fake_allocation(text, tmp_path / "sed", nodes=["n1", "n2"])
    assert "--rdzv_endpoint=n1:29500" in fake_slurm.torchrun_argv(bin_dir, 1)


def test_srun_asks_for_the_jobs_cpus_again(tmp_path):
    """Slurm 22.05 and later: a step does not inherit --cpus-per-task from the job."""
    bin_dir = run_on_fake_allocation(sbatch(Launch("train.py"), cpus_per_task=24), tmp_path, nodes=["n1"])
    assert fake_slurm.srun_options(bin_dir) == ["--kill-on-bad-exit=1", "--cpus-per-task=24"]


def test_sbatch_setup_lines_run_before_torchrun(tmp_path):
    text = sbatch(Launch("train.py"), setup=('echo "setup ran" > setup.log',))
    run_on_fake_allocation(text, tmp_path, nodes=["n1"])
    assert (tmp_path / "work" / "setup.log").read_text() == "setup ran\n"


def test_sbatch_stops_when_a_step_fails(tmp_path):
    """set -euo pipefail: a failed setup line does not go on to start the training."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    job = workdir / "job.sbatch"
    job.write_text(sbatch(Launch("train.py"), setup=("false",)))
    bin_dir = fake_slurm.install(tmp_path / "bin", torchrun=fake_slurm.RECORD_ARGV)
    env = {**os.environ, **fake_slurm.environment(bin_dir, nodes=["n1"], job_id="1")}
    done = subprocess.run(["bash", str(job)], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert not (bin_dir / "torchrun-argv.0").exists()


# --------------------------------------------------------------------------- Kubernetes: the manifest

#: The PyTorchJob fields the manifest uses, from the kubeflow.org/v1 CRD
#: (training-operator manifests/base/crds/kubeflow.org_pytorchjobs.yaml) and what its webhook
#: (pkg/webhooks/pytorch/pytorchjob_webhook.go) adds: replica types Master and Worker only, one
#: Master, a container named `pytorch` with an image. `additionalProperties: false` where the
#: manifest's keys are all known, so a misspelt field fails too.
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
CONTAINER_SCHEMA = {
    "type": "object",
    "required": ["name", "image", "command", "resources"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "image": {"type": "string", "minLength": 1, "pattern": r"^\S+$"},
        "command": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "resources": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"limits": {
                "type": "object",
                "required": ["nvidia.com/gpu"],
                "additionalProperties": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]},
            }},
        },
    },
}
REPLICA_SCHEMA = {
    "type": "object",
    "required": ["replicas", "restartPolicy", "template"],
    "additionalProperties": False,
    "properties": {
        "replicas": {"type": "integer", "minimum": 1},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {
            "type": "object",
            "required": ["spec"],
            "properties": {"spec": {
                "type": "object",
                "required": ["containers"],
                "properties": {"containers": {
                    "type": "array",
                    "minItems": 1,
                    "items": CONTAINER_SCHEMA,
                    "contains": {"properties": {"name": {"const": "pytorch"}}},
                }},
            }},
        },
    },
}
PYTORCHJOB_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "PyTorchJob"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "maxLength": 63, "pattern": DNS_LABEL},
                "namespace": {"type": "string", "maxLength": 63, "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            },
        },
        "spec": {
            "type": "object",
            "required": ["pytorchReplicaSpecs"],
            "additionalProperties": False,
            "properties": {
                "nprocPerNode": {"type": "string"},  # a string in the CRD: also "auto", "cpu", "gpu"
                "pytorchReplicaSpecs": {
                    "type": "object",
                    "required": ["Master"],
                    "additionalProperties": False,  # the replica types: Master and Worker only
                    "properties": {
                        "Master": {"allOf": [REPLICA_SCHEMA, {"properties": {"replicas": {"const": 1}}}]},
                        "Worker": REPLICA_SCHEMA,
                    },
                },
            },
        },
    },
}


def manifest(nodes: int = 2, gpus: int = 4, args=("--epochs", "3"), **options: Any) -> Dict[str, Any]:
    text = kubernetes.manifest_text(Launch("train.py", tuple(args), nodes=nodes, gpus=gpus),
                                    kubernetes.KubernetesOptions(**{"image": "registry.example/team/train:1.0", **options}))
    return yaml.safe_load(text)


def schema_errors(document: Dict[str, Any]) -> List[str]:
    validator = jsonschema.Draft202012Validator(PYTORCHJOB_SCHEMA)
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in validator.iter_errors(document)]


def test_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(PYTORCHJOB_SCHEMA)


@pytest.mark.parametrize("nodes", [1, 2, 5])
def test_manifest_matches_the_pytorchjob_schema(nodes):
    document = manifest(nodes=nodes, namespace="ml-team")
    assert schema_errors(document) == []
    replicas = document["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    assert replicas.get("Worker", {}).get("replicas", 0) == nodes - 1
    assert ("Worker" in replicas) == (nodes > 1), "a one-node job is its Master alone"


def _rename_container(d): d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
def _bad_restart(d): d["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Sometimes"
def _two_masters(d): d["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
def _chief(d): d["spec"]["pytorchReplicaSpecs"]["Chief"] = d["spec"]["pytorchReplicaSpecs"].pop("Worker")
def _int_nproc(d): d["spec"]["nprocPerNode"] = 4
def _no_image(d): del d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"]
def _misspelt(d): d["spec"]["nProcPerNode"] = d["spec"].pop("nprocPerNode")
def _api_version(d): d["apiVersion"] = "kubeflow.org/v1beta1"
def _bad_name(d): d["metadata"]["name"] = "Train_Job"
def _no_gpus(d): d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {}}


@pytest.mark.parametrize("breaks", [_rename_container, _bad_restart, _two_masters, _chief, _int_nproc, _no_image,
                                    _misspelt, _api_version, _bad_name, _no_gpus], ids=lambda f: f.__name__.strip("_"))
def test_schema_check_fails_on_a_broken_manifest(breaks):
    document = copy.deepcopy(manifest(nodes=3))
    breaks(document)
    assert schema_errors(document), f"{breaks.__name__} went unnoticed"


def test_manifest_runs_torchrun_in_the_pytorch_container_with_gpu_limits():
    document = manifest(nodes=3, gpus=8, args=("--data", "/data/my set"))
    assert document["spec"]["nprocPerNode"] == "8"
    for replica in document["spec"]["pytorchReplicaSpecs"].values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch"
        assert container["image"] == "registry.example/team/train:1.0"
        assert container["command"] == ["torchrun", "--nnodes=3", "--nproc_per_node=8", "train.py", "--data", "/data/my set"]
        assert container["resources"] == {"limits": {"nvidia.com/gpu": 8}}
        assert replica["restartPolicy"] == "OnFailure"


def test_manifest_namespace_only_when_given():
    assert "namespace" not in manifest()["metadata"]
    assert manifest(namespace="research")["metadata"]["namespace"] == "research"


def test_manifest_yaml_is_the_manifest_data():
    job = Launch("train.py", ODD_ARGS, nodes=4, gpus=2)
    options = kubernetes.KubernetesOptions("img:1", "ns")
    assert yaml.safe_load(kubernetes.manifest_text(job, options)) == kubernetes.manifest(job, options)


@pytest.mark.parametrize(
    "script, nodes, expected",
    [("train.py", 2, "train"), ("Train_DDP.py", 2, "train-ddp"), ("2stage.py", 2, "job-2stage"),
     ("x" * 80 + ".py", 12, "x" * 53)],
    ids=["stem", "lowercased", "leading-digit", "long-name-fits-worker-pods"],
)
def test_kubernetes_job_name_is_a_dns_label(script, nodes, expected):
    name = kubernetes.job_name(Launch(script, nodes=nodes))
    assert name == expected
    assert len(f"{name}-worker-{nodes - 2}") <= 63


@pytest.mark.parametrize("options, option", [({"image": ""}, "--image"), ({"image": "a b"}, "--image"),
                                             ({"image": "i", "namespace": "My_NS"}, "--namespace")])
def test_manifest_refuses_values_kubernetes_would_reject(options, option):
    with pytest.raises(JobError, match=option):
        kubernetes.manifest(Launch("train.py"), kubernetes.KubernetesOptions(**options))


def test_manifest_torchrun_under_the_operators_environment():
    """Each pod's torchrun, given the PET_* variables the operator sets, joins one static
    rendezvous at the Master's service as its own node, with the script's arguments intact."""
    if importlib.util.find_spec("torch") is None and not os.environ.get("CI"):
        pytest.skip("torch is not installed (pip install -e '.[test]')")
    # One interpreter for all the pods (torch takes seconds to import): torchrun's parser reads
    # the PET_* defaults from os.environ each time it is built, so each pod's is set in turn.
    code = r"""
import json, os, sys
from torch.distributed.run import config_from_args, parse_args
for env, command in json.loads(sys.stdin.read()):
    os.environ.update(env)
    args = parse_args(command[1:])
    config, _, _ = config_from_args(args)
    print(json.dumps({"min": config.min_nodes, "max": config.max_nodes, "nproc": config.nproc_per_node,
                      "backend": config.rdzv_backend, "endpoint": config.rdzv_endpoint,
                      "rank": config.rdzv_configs.get("rank"), "script": args.training_script,
                      "args": args.training_script_args}))
"""
    document = manifest(nodes=3, gpus=4, args=ODD_ARGS)
    pods = fake_kubeflow.pods(document)
    assert all(pod.command[0] == "torchrun" for pod in pods)
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps([(pod.env, pod.command) for pod in pods]),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = []
    for line in done.stdout.splitlines():
        parsed = json.loads(line)
        assert (parsed["min"], parsed["max"], parsed["nproc"]) == (3, 3, 4)
        assert parsed["backend"] == "static"
        assert parsed["endpoint"] == f"{document['metadata']['name']}-master-0:23456"
        assert (parsed["script"], tuple(parsed["args"])) == ("train.py", ODD_ARGS)
        seen.append(parsed["rank"])
    assert seen == [0, 1, 2], "the Master is node 0, Worker i is node i+1"


# --------------------------------------------------------------------------- the YAML writer

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)


def _containers(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4)


_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT, _containers, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_TEXT, _VALUES, max_size=5))
def test_yaml_writer_round_trips(data):
    assert yaml.safe_load(yaml_text.dump(data) or "{}") == data


@pytest.mark.parametrize("text", ["yes", "No", "on", "null", "~", "1", "-1", "1e3", "0x1f", "1:20", ".inf", "=", "<<",
                                  "a: b", "#x", "- x", "", " lead", "trail ", "--", "---", "@x", "!x", "%x", "&x", "*x"])
def test_yaml_writer_keeps_strings_that_look_like_other_things(text):
    assert yaml.safe_load(yaml_text.dump({"k": text, "l": [text]})) == {"k": text, "l": [text]}


# --------------------------------------------------------------------------- required arguments


@pytest.mark.parametrize(
    "given, missing",
    [
        ((), ("DATA", "--config CONFIG")),
        (("data/",), ("--config CONFIG",)),
        (("--config", "c.yaml"), ("DATA",)),  # c.yaml is --config's value: not a positional
        (("--config", "c.yaml", "--lr", "0.1"), ()),  # 0.1 may be a positional: no error
        (("data/", "--config=c.yaml"), ()),
        (("data/", "--conf", "c.yaml"), ()),  # argparse takes an unambiguous abbreviation
        (("--config", "c.yaml", "data/"), ()),
        (("data/", "-c", "c.yaml"), ()),  # -c may be --config's short name
    ],
    ids=["nothing", "no-option", "no-positional", "bare-word-after-an-unknown-option", "equals", "abbreviated",
         "any-order", "short-option"],
)
def test_missing_arguments(given, missing):
    assert missing_arguments(("DATA", "--config CONFIG"), given) == missing
