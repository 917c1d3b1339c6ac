"""The distributed set-up: the process group, the DDP wrap, the group's end."""
from __future__ import annotations

from collections import Counter

from migrator.verify.checks.base import (
    FAIL, PASS, SKIP, Observed, Row, row, missing_records, no_records, per_rank_text, rank_list,
)


def check_process_group(observed: Observed) -> Row:
    name, nproc = "process_group", observed.plan.nproc
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    calls = {rank: record.get("init_process_group", []) for rank, record in observed.records.items()}
    never = sorted(rank for rank, made in calls.items() if not made)
    if never:
        return row(name, FAIL, f"{rank_list(never)} never called init_process_group")
    twice = sorted(rank for rank, made in calls.items() if len(made) > 1)
    if twice:
        return row(name, FAIL, f"{rank_list(twice)} called init_process_group more than once")
    worlds = {rank: made[0].get("world_size") for rank, made in calls.items()}
    if set(worlds.values()) != {nproc}:
        return row(name, FAIL, f"world size {per_rank_text(worlds)}, expected {nproc} (--nproc)")
    joined = sorted(made[0].get("rank") for made in calls.values())
    if len(set(joined)) != len(joined):
        return row(name, FAIL, f"ranks joined as {joined}: two processes took the same rank")
    backends = sorted({str(made[0].get("backend")) for made in calls.values()})
    missing = missing_records(observed)
    seen = f"; {rank_list(missing)} left no record" if missing else ""
    return row(name, PASS, f"world {nproc}, backend {', '.join(backends)}: {rank_list(joined)} joined once each{seen}")


def check_ddp(observed: Observed) -> Row:
    name = "ddp"
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    wrapped = {rank: [m.get("module_class") for m in record.get("ddp", [])]
               for rank, record in observed.records.items()}
    bare = sorted(rank for rank, classes in wrapped.items() if not classes)
    if bare:
        return row(name, FAIL, f"{rank_list(bare)} built no DistributedDataParallel: each process trains its own "
                           "copy and nothing keeps them in step (wrap the model after moving it to its device)")
    if len({tuple(classes) for classes in wrapped.values()}) > 1:
        return row(name, FAIL, f"the ranks wrapped different modules: {per_rank_text(wrapped)}")
    classes = next(iter(wrapped.values()))
    devices = {rank: [m.get("device_ids") for m in record.get("ddp", [])] for rank, record in observed.records.items()}
    on_cpu = all(ids == [None] * len(ids) for ids in devices.values())
    shown = "" if on_cpu else f" (device_ids {per_rank_text(devices)})"
    return row(name, PASS, f"{', '.join(classes)} on every rank{shown}")


def check_destroyed(observed: Observed) -> Row:
    name = "destroyed"
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    joined = {rank: record for rank, record in observed.records.items() if record.get("init_process_group")}
    if not joined:
        return row(name, SKIP, "no rank set up a process group")
    left = sorted(rank for rank, record in joined.items() if record.get("initialized_at_exit") is not False)
    if left:
        calls = Counter(len(joined[rank].get("destroy_process_group", [])) for rank in left)
        how = "never called" if set(calls) == {0} else "called, but the group was still there"
        return row(name, FAIL, f"{rank_list(left)} exited with the process group still initialised "
                           f"(destroy_process_group {how}): call dist.destroy_process_group() in a `finally:` "
                           "around the training")
    return row(name, PASS, f"called on {rank_list(joined)}, the group was gone at exit")
