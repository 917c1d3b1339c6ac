"""Job files that run a migrated script on several machines under a cluster's scheduler.

`ddp-migrate launch` (command.py) turns one Launch (spec.py: the script, its arguments, nodes and
GPUs per node) into a Slurm batch script (slurm.py) or a Kubeflow PyTorchJob manifest
(kubernetes.py, written by the small YAML writer in yaml_text.py). The builders are pure: text in,
text out; only command.py reads the script, asks the engine about it and writes the file.
"""
