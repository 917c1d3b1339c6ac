"""The training: the same parameters on every rank after the same, non-zero number of steps."""
from __future__ import annotations

from migrator.verify.checks.base import (
    FAIL, PASS, SKIP, Observed, Row, row, no_records, per_rank_text, plural, rank_list, some,
)
from migrator.verify.checks.run import failed_before_training


def check_in_sync(observed: Observed) -> Row:
    name = "in_sync"
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    records = observed.records
    steps = {rank: int(record.get("optimizer_steps") or 0) for rank, record in records.items()}
    if not any(steps.values()):
        if not observed.run.exited or failed_before_training(observed.run, observed.plan.nproc):
            # The run hung or crashed before a step: that is the run check's failure, and
            # nothing here says whether the gradients would have been averaged.
            return row(name, SKIP, "not observed: the run ended before any optimizer step (see run)")
        return row(name, FAIL, f"no optimizer step was taken "
                          f"({plural(observed.plan.steps_per_epoch, 'batch', 'batches')} per "
                           "pass: a loop that steps every N batches needs --steps-per-epoch N or more)")
    if len(set(steps.values())) > 1:
        return row(name, FAIL, f"the ranks took different numbers of optimizer steps: {per_rank_text(steps)}")
    modules = {rank: record.get("ddp", []) for rank, record in records.items()}
    counts = {rank: len(found) for rank, found in modules.items()}
    if not any(counts.values()):
        return row(name, SKIP, "no DDP module to compare (see ddp)")
    if len(set(counts.values())) > 1:
        return row(name, SKIP, "the ranks wrapped different numbers of modules, nothing to pair (see ddp)")
    ranks = sorted(modules)
    step_count = steps[ranks[0]]
    for index in range(counts[ranks[0]]):
        first = modules[ranks[0]][index]
        if "param_checksum" not in first:
            return row(name, SKIP, f"DDP({first.get('module_class')}) has no checksum (a probe error)")
        for rank in ranks[1:]:
            other = modules[rank][index]
            if other.get("param_checksum") != first.get("param_checksum"):
                differ = sorted(key for key, digest in (other.get("param_digests") or {}).items()
                                if (first.get("param_digests") or {}).get(key) != digest)
                return row(name, FAIL, f"DDP({first.get('module_class')}): parameters differ between rank {ranks[0]} "
                                   f"and rank {rank} after {plural(step_count, 'optimizer step')} "
                                   f"{some(differ, 4)}: the gradients were not averaged across ranks")
    classes = ", ".join(m.get("module_class") or "?" for m in modules[ranks[0]])
    return row(name, PASS, f"{classes}: identical on {rank_list(ranks)} after "
                      f"{plural(step_count, 'optimizer step')} each")
