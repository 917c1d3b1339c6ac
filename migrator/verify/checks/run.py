"""The run itself: did it end, how, and where was each process when it did not; and the
DataLoader workers that join the process group (the hang that spawned workers of a script with
module-level set-up cause).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from migrator.verify import stacks
from migrator.verify.checks.base import (
    FAIL, PASS, SKIP, Observed, Row, first_line, row, missing_records, plural, rank_list, some,
    training_loader,
)
from migrator.verify.runner import Run


def gloo_exit_abort(run: Run, nproc: int) -> bool:
    """torch's gloo backend can abort a process after the script has finished (a worker thread
    frees its last work while the interpreter finalises: "terminate called without an active
    exception"). Every rank wrote its record, none raised: not the script's doing."""
    if run.returncode in (0, None) or "terminate called without an active exception" not in run.stderr:
        return False
    return len(run.records) == nproc and not any(record.get("exception") for record in run.records.values())


def failed_ranks(run: Run) -> List[Tuple[int, dict]]:
    """(rank, its uncaught exception) for the ranks that raised."""
    return [(rank, record["exception"]) for rank, record in sorted(run.records.items()) if record.get("exception")]


def failed_before_training(run: Run, nproc: int) -> bool:
    """It exited with an error and no rank took an optimizer step."""
    if not run.exited or run.returncode == 0 or gloo_exit_abort(run, nproc):
        return False
    return not any(record.get("optimizer_steps") for record in run.records.values())


def _hang_where(observed: Observed) -> str:
    """Where each rank (and DataLoader worker) was when the run was ended."""
    roles = {alive.get("pid"): alive for alive in observed.run.alive}
    parts = []
    for pid, dump in sorted(observed.run.stacks.items(), key=lambda kv: role_order(roles.get(kv[0]))):
        parts.append(f"{role_label(roles.get(pid), pid)} at {stacks.summary(dump, observed.roots)}")
    return "; ".join(parts) if parts else "no stack could be taken"


def role_order(alive: Optional[dict]) -> Tuple[int, str]:
    alive = alive or {}
    return (0 if alive.get("role") == "rank" else 1, str(alive.get("rank")))


def role_label(alive: Optional[dict], pid: int) -> str:
    alive = alive or {}
    if alive.get("role") == "rank":
        return f"rank {alive.get('rank')}"
    return f"rank {alive.get('rank')}'s DataLoader worker {pid}"


def check_run(observed: Observed) -> Row:
    run, plan = observed.run, observed.plan
    if run.ended == "timeout":
        return row("run", FAIL, f"still running after --timeout {plan.timeout:g}s, so it was ended: "
                            f"{_hang_where(observed)} (stacks below){_survivors(run)}")
    if run.ended == "worker-hang":
        return row("run", FAIL, f"hung: DataLoader workers joined the process group (dataloader_workers), so it "
                            f"was ended after {run.duration_s:.0f}s: {_hang_where(observed)} (stacks "
                            f"below){_survivors(run)}")
    abort = gloo_exit_abort(run, plan.nproc)
    if run.returncode != 0 and not abort:
        raised = failed_ranks(run)
        what = "; ".join(f"rank {rank} raised {exc.get('type')}: {first_line(exc.get('message'))}"
                         for rank, exc in raised) or "no rank raised a Python exception"
        why = "DataLoader workers joined the process group (dataloader_workers) and died: " if run.worker_inits else ""
        return row("run", FAIL, f"exit status {run.returncode}: {why}{what} (the traceback's end is below)")
    missing = missing_records(observed)
    if missing:
        return row("run", FAIL, f"no record from {rank_list(missing)}: it ended without Python's exit handlers "
                            "(os._exit, or killed by a signal)")
    note = (" (then gloo aborted at interpreter exit, after every rank had finished: an upstream race in torch, "
            "not the script's)") if abort else ""
    return row("run", PASS, _how_it_ended(observed) + note + _survivors(run))


def _survivors(run: Run) -> str:
    """Processes of the run that outlived SIGKILL (stuck in the kernel): said, never hidden."""
    return f"; still there after the end: pids {some(run.survivors)}" if run.survivors else ""


def _how_it_ended(observed: Observed) -> str:
    plan = observed.plan
    stops = {rank: record.get("stop") for rank, record in observed.records.items()}
    limit = f"at most {plural(plan.steps_per_epoch, 'batch', 'batches')} per pass"
    if all(stops.values()):
        passes = {stop.get("pass") for stop in stops.values()}
        where = next(iter(stops.values())).get("where")
        if len(passes) == 1:
            return (f"stopped by verify on every rank after {plural(plan.epochs, 'epoch')} ({limit}), "
                    f"as pass {passes.pop()} over the training loader was to start at {where}")
        return f"stopped by verify at different passes: {stops}"
    if any(stops.values()):
        stopped = rank_list(rank for rank, stop in stops.items() if stop)
        return f"stopped by verify on {stopped} only, the others ended by themselves"
    epochs = {rank: len((training_loader(record) or {}).get("iterations", []))
              for rank, record in observed.records.items()}
    return (f"the script ended by itself after {plural(max(epochs.values(), default=0), 'epoch')} "
            f"of its own loop ({limit})")


def check_dataloader_workers(observed: Observed) -> Row:
    name = "dataloader_workers"
    inits = observed.run.worker_inits
    if inits:
        where = sorted({f"{i.get('where')}" for i in inits})
        modules = sorted({str(i.get("module")) for i in inits})
        parents = sorted({str(i.get("parent_rank")) for i in inits})
        reimport = " re-imported the script (as __mp_main__) and" if "__mp_main__" in modules else ""
        return row(name, FAIL, f"{plural(len(inits), 'DataLoader worker process', 'DataLoader worker processes')} "
                          f"of rank(s) {', '.join(parents)} "
                           f"(started with spawn or forkserver){reimport} called init_process_group at "
                           f"{', '.join(where)}: each joins the rendezvous as a second copy of its rank and "
                           "blocks there. Set up the process group in a function the main guard calls "
                           "(`if __name__ == \"__main__\":`), not at module level")
    started = [w for record in observed.records.values() for w in record.get("dataloader_workers", [])]
    if not started:
        if not observed.records:
            return row(name, SKIP, "not observed: no rank finished")
        return row(name, SKIP, "no DataLoader started worker processes (num_workers=0)")
    methods = sorted({str(w.get("start_method")) for w in started})
    count = sum(len(w.get("pids") or []) for w in started)
    return row(name, PASS, f"{plural(count, 'worker process', 'worker processes')} ({', '.join(methods)}), "
                      "none joined the process group")
