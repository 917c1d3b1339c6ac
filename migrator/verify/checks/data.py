"""The training data: each rank's batches are its own, and change from epoch to epoch."""
from __future__ import annotations

import math
from typing import Dict, Iterable, Optional, Sequence, Tuple

from migrator.verify.checks.base import (
    FAIL, PASS, SKIP, Observed, Row, describe_loader, drawn_indices, row, no_records, per_rank_text, plural,
    rank_list, sampler_of, some, training_loader,
)


def check_disjoint_batches(observed: Observed) -> Row:
    name = "disjoint_batches"
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    loaders = {rank: training_loader(record) for rank, record in observed.records.items()}
    if not any(loaders.values()):
        return row(name, SKIP, "no DataLoader's batches were followed by an optimizer step (training not fed by a "
                           "DataLoader, or no step taken)")
    without = sorted(rank for rank, loader in loaders.items() if loader is None)
    if without:
        return row(name, FAIL, f"{rank_list(without)} took no optimizer step on DataLoader batches, the others did")
    first_rank = min(loaders)
    record, loader = observed.records[first_rank], loaders[first_rank]
    desc = describe_loader(record, loader)
    passes = min(len(l.get("iterations", [])) for l in loaders.values())
    allowed = _padding(sampler_of(record, loader))
    drawn: Dict[int, int] = {}
    for k in range(passes):
        sets = {rank: drawn_indices(l["iterations"][k]) for rank, l in loaders.items()}
        if any(s is None for s in sets.values()):
            return row(name, SKIP, f"{desc}: an IterableDataset (no sample indices), sharding not observable")
        for a, b in _pairs(sorted(sets)):
            shared = sorted(set(sets[a]) & set(sets[b]))
            if len(shared) > allowed:
                fix = ("" if sampler_of(record, loader)
                       else " (give the training DataLoader sampler=DistributedSampler(dataset))")
                return row(name, FAIL, f"{desc}: in epoch {k + 1} ranks {a} and {b} both drew {len(shared)} of their "
                                   f"{len(sets[a])} samples {some(shared)}: every rank trains on the same "
                                   f"data, not its own part{fix}")
        drawn = {rank: len(s) for rank, s in sets.items()}
    padding = f" (padding allows {allowed} shared)" if allowed else ""
    return row(name, PASS, f"{desc}: {plural(passes, 'epoch')}, {per_rank_text(drawn)} samples per epoch, "
                       f"none shared{padding}")


def _padding(sampler: Optional[dict]) -> int:
    """Samples a DistributedSampler repeats to give every rank the same count (none with drop_last)."""
    if not sampler or sampler.get("drop_last") or not sampler.get("dataset_len") or not sampler.get("num_replicas"):
        return 0
    n, world = sampler["dataset_len"], sampler["num_replicas"]
    return math.ceil(n / world) * world - n


def _pairs(ranks: Sequence[int]) -> Iterable[Tuple[int, int]]:
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            yield a, b


def check_reshuffled(observed: Observed) -> Row:
    name = "reshuffled"
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    notes = []
    for rank, record in sorted(observed.records.items()):
        loader = training_loader(record)
        if loader is None:
            return row(name, SKIP, "no training DataLoader (see disjoint_batches)")
        iterations = loader.get("iterations", [])
        if len(iterations) < 2:
            return row(name, SKIP, f"{plural(len(iterations), 'epoch')} ran, nothing to compare (--epochs, or the "
                               "script's own loop)")
        sampler = sampler_of(record, loader)
        shuffles = sampler.get("shuffle") if sampler else loader.get("sampler_class") != "SequentialSampler"
        if not shuffles:
            return row(name, SKIP, f"{describe_loader(record, loader)} does not shuffle (shuffle=False): the same "
                               "order every epoch is what the script asks for")
        first, second = drawn_indices(iterations[0]), drawn_indices(iterations[1])
        if first is None or second is None:
            return row(name, SKIP, "an IterableDataset (no sample indices), the order is not observable")
        set_epoch = sampler.get("set_epoch", []) if sampler else None
        if first == second:
            why = ("sampler.set_epoch(epoch) was never called" if set_epoch == []
                   else f"set_epoch was called with {some(set_epoch)}" if set_epoch else "")
            return row(name, FAIL, f"rank {rank} drew the same batches in epochs 1 and 2 {some(first)}"
                               + (f": {why}" if why else "")
                               + (" (call it with the epoch number at the start of every epoch)"
                                  if sampler else ""))
        if set_epoch:
            notes.append(f"set_epoch({', '.join(map(str, set_epoch[:4]))})")
    how = f" ({notes[0]} on every rank)" if notes and len(set(notes)) == 1 else ""
    return row(name, PASS, f"every rank's batches differ between epochs 1 and 2{how}")
