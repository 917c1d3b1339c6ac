"""What every check shares: the verdicts, a Row, the Observed runs, and the small readers of
the probe's records and writers of evidence.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

from migrator.verify.runner import Plan, Run

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Row:
    name: str
    title: str
    verdict: str
    evidence: str


@dataclass(frozen=True)
class Observed:
    """A verification's runs: the migration under torchrun and, with --original, the original."""

    plan: Plan
    run: Run
    original: Optional[Run] = None
    original_script: Optional[str] = None

    @property
    def records(self) -> Dict[int, dict]:
        return self.run.records

    @property
    def roots(self) -> List[str]:
        """Folders whose files are the user's code (for stacks)."""
        script_dir = os.path.dirname(os.path.realpath(os.path.join(self.plan.cwd, self.plan.script)))
        return sorted({os.path.realpath(self.plan.cwd), script_dir})


TITLES = {
    "run": "the run ends cleanly on every rank",
    "process_group": "the process group comes up, one rank per process",
    "ddp": "DDP wraps the model",
    "disjoint_batches": "each rank trains on its own batches",
    "reshuffled": "the batches change from epoch to epoch",
    "in_sync": "parameters agree on every rank after the steps",
    "rank0_files": "only rank 0 writes files",
    "rank0_output": "only rank 0 prints or draws progress bars",
    "destroyed": "destroy_process_group runs on every rank",
    "dataloader_workers": "DataLoader workers stay out of the process group",
    "checkpoint_keys": "the checkpoints keep the original's files and keys",
}


def row(name: str, verdict: str, evidence: str) -> Row:
    return Row(name, TITLES[name], verdict, evidence)


def rank_list(values: Iterable[int]) -> str:
    values = sorted(values)
    return ("rank " if len(values) == 1 else "ranks ") + ", ".join(map(str, values))


def some(values: Sequence, limit: int = 6) -> str:
    values = list(values)
    return "[" + ", ".join(map(str, values[:limit])) + (", ..." if len(values) > limit else "") + "]"


def plural(count: int, word: str, many: str = "") -> str:
    return f"{count} {word if count == 1 else many or word + 's'}"


def per_rank_text(values: Dict[int, object]) -> str:
    return ", ".join(f"rank {rank}: {value}" for rank, value in sorted(values.items()))


def first_line(message) -> str:
    lines = str(message or "").strip().splitlines()
    return lines[0][:200] if lines else ""


def training_loader(record: dict) -> Optional[dict]:
    """The loader whose batches were followed by optimizer steps, one with a DistributedSampler
    first (the probe's rule for the epoch stop). None when no DataLoader fed a step."""
    fed = [loader for loader in record.get("loaders", [])
           if any(it.get("optimizer_steps") for it in loader.get("iterations", []))]
    sharded = [loader for loader in fed if loader.get("sampler_index") is not None]
    return (sharded or fed or [None])[0]


def sampler_of(record: dict, loader: dict) -> Optional[dict]:
    index = loader.get("sampler_index")
    samplers = record.get("samplers", [])
    return samplers[index] if index is not None and index < len(samplers) else None


def describe_loader(record: dict, loader: dict) -> str:
    sampler = sampler_of(record, loader)
    how = "DistributedSampler" if sampler is not None else loader.get("sampler_class")
    size = loader.get("dataset_len")
    return (f"DataLoader #{loader.get('index')} over {loader.get('dataset_class')}"
            f"{f' ({size} samples)' if size is not None else ''}, {how}")


def drawn_indices(iteration: dict) -> Optional[List[int]]:
    """The samples a pass drew; None for an IterableDataset (its sampler yields no indices)."""
    indices = iteration.get("indices") or []
    return indices if indices and all(isinstance(i, int) for i in indices) else None


def missing_records(observed: Observed) -> List[int]:
    return sorted(set(range(observed.plan.nproc)) - set(observed.records))


def no_records(observed: Observed, name: str) -> Optional[Row]:
    """SKIP when no rank left a record (the run was killed, or no process got to its end)."""
    if observed.records:
        return None
    why = "the run was ended before any rank finished" if not observed.run.exited else "no rank left a record"
    return row(name, SKIP, f"not observed: {why}")


def inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
