"""What verify judges from a run's records: one Row per check, PASS, FAIL or SKIP, with evidence.

Every verdict rests on what the processes did (the probe's records, the run's exit), never on the
script's text. A check that cannot be observed in this run says why and SKIPs: it never passes
for want of evidence. Each check is a function of the Observed run; CHECKS lists them in the
order of diagnosis (a run that did not end explains the rest).
"""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from migrator.verify import keys, stacks
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


# --------------------------------------------------------------------------- small helpers


def _ranks(values: Iterable[int]) -> str:
    values = sorted(values)
    return ("rank " if len(values) == 1 else "ranks ") + ", ".join(map(str, values))


def _some(values: Sequence, limit: int = 6) -> str:
    values = list(values)
    return "[" + ", ".join(map(str, values[:limit])) + (", ..." if len(values) > limit else "") + "]"


def _plural(count: int, word: str, plural: str = "") -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


def training_loader(record: dict) -> Optional[dict]:
    """The loader whose batches were followed by optimizer steps, one with a DistributedSampler
    first (the probe's rule for the epoch stop). None when no DataLoader fed a step."""
    fed = [loader for loader in record.get("loaders", [])
           if any(it.get("optimizer_steps") for it in loader.get("iterations", []))]
    sharded = [loader for loader in fed if loader.get("sampler_index") is not None]
    return (sharded or fed or [None])[0]


def _sampler(record: dict, loader: dict) -> Optional[dict]:
    index = loader.get("sampler_index")
    samplers = record.get("samplers", [])
    return samplers[index] if index is not None and index < len(samplers) else None


def _describe_loader(record: dict, loader: dict) -> str:
    sampler = _sampler(record, loader)
    how = "DistributedSampler" if sampler is not None else loader.get("sampler_class")
    size = loader.get("dataset_len")
    return (f"DataLoader #{loader.get('index')} over {loader.get('dataset_class')}"
            f"{f' ({size} samples)' if size is not None else ''}, {how}")


def _indices(iteration: dict) -> Optional[List[int]]:
    """The samples a pass drew; None for an IterableDataset (its sampler yields no indices)."""
    indices = iteration.get("indices") or []
    return indices if indices and all(isinstance(i, int) for i in indices) else None


def _missing_records(observed: Observed) -> List[int]:
    return sorted(set(range(observed.plan.nproc)) - set(observed.records))


def _no_records(observed: Observed, name: str) -> Optional[Row]:
    """SKIP when no rank left a record (the run was killed, or no process got to its end)."""
    if observed.records:
        return None
    why = "the run was ended before any rank finished" if not observed.run.exited else "no rank left a record"
    return _row(name, SKIP, f"not observed: {why}")


# --------------------------------------------------------------------------- the run itself


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
        return _row("run", FAIL, f"still running after --timeout {plan.timeout:g}s, so it was ended: "
                                 f"{_hang_where(observed)} (stacks below)")
    if run.ended == "worker-hang":
        return _row("run", FAIL, f"hung: DataLoader workers joined the process group (dataloader_workers), so it "
                                 f"was ended after {run.duration_s:.0f}s: {_hang_where(observed)} (stacks below)")
    abort = gloo_exit_abort(run, plan.nproc)
    if run.returncode != 0 and not abort:
        raised = failed_ranks(run)
        what = "; ".join(f"rank {rank} raised {exc.get('type')}: {_first_line(exc.get('message'))}"
                         for rank, exc in raised) or "no rank raised a Python exception"
        return _row("run", FAIL, f"exit status {run.returncode}: {what} (the traceback's end is below)")
    missing = _missing_records(observed)
    if missing:
        return _row("run", FAIL, f"no record from {_ranks(missing)}: it ended without Python's exit handlers "
                                 "(os._exit, or killed by a signal)")
    note = (" (then gloo aborted at interpreter exit, after every rank had finished: an upstream race in torch, "
            "not the script's)") if abort else ""
    return _row("run", PASS, _how_it_ended(observed) + note)


def _how_it_ended(observed: Observed) -> str:
    plan = observed.plan
    stops = {rank: record.get("stop") for rank, record in observed.records.items()}
    limit = f"at most {_plural(plan.steps_per_epoch, 'batch', 'batches')} per pass"
    if all(stops.values()):
        passes = {stop.get("pass") for stop in stops.values()}
        where = next(iter(stops.values())).get("where")
        if len(passes) == 1:
            return (f"stopped by verify on every rank after {_plural(plan.epochs, 'epoch')} ({limit}), "
                    f"as pass {passes.pop()} over the training loader was to start at {where}")
        return f"stopped by verify at different passes: {stops}"
    if any(stops.values()):
        return f"stopped by verify on {_ranks(r for r, s in stops.items() if s)} only, the others ended by themselves"
    epochs = {rank: len((training_loader(record) or {}).get("iterations", [])) for rank, record in observed.records.items()}
    return (f"the script ended by itself after {_plural(max(epochs.values(), default=0), 'epoch')} "
            f"of its own loop ({limit})")


def _first_line(message) -> str:
    lines = str(message or "").strip().splitlines()
    return lines[0][:200] if lines else ""


# --------------------------------------------------------------------------- distributed set-up


def check_process_group(observed: Observed) -> Row:
    name, nproc = "process_group", observed.plan.nproc
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    calls = {rank: record.get("init_process_group", []) for rank, record in observed.records.items()}
    never = sorted(rank for rank, made in calls.items() if not made)
    if never:
        return _row(name, FAIL, f"{_ranks(never)} never called init_process_group")
    twice = sorted(rank for rank, made in calls.items() if len(made) > 1)
    if twice:
        return _row(name, FAIL, f"{_ranks(twice)} called init_process_group more than once")
    worlds = {rank: made[0].get("world_size") for rank, made in calls.items()}
    if set(worlds.values()) != {nproc}:
        return _row(name, FAIL, f"world size {_by_rank(worlds)}, expected {nproc} (--nproc)")
    joined = sorted(made[0].get("rank") for made in calls.values())
    if len(set(joined)) != len(joined):
        return _row(name, FAIL, f"ranks joined as {joined}: two processes took the same rank")
    backends = sorted({str(made[0].get("backend")) for made in calls.values()})
    missing = _missing_records(observed)
    seen = f"; {_ranks(missing)} left no record" if missing else ""
    return _row(name, PASS, f"world {nproc}, backend {', '.join(backends)}: {_ranks(joined)} joined once each{seen}")


def _by_rank(values: Dict[int, object]) -> str:
    return ", ".join(f"rank {rank}: {value}" for rank, value in sorted(values.items()))


def check_ddp(observed: Observed) -> Row:
    name = "ddp"
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    wrapped = {rank: [m.get("module_class") for m in record.get("ddp", [])] for rank, record in observed.records.items()}
    bare = sorted(rank for rank, classes in wrapped.items() if not classes)
    if bare:
        return _row(name, FAIL, f"{_ranks(bare)} built no DistributedDataParallel: each process trains its own "
                                "copy and nothing keeps them in step (wrap the model after moving it to its device)")
    if len({tuple(classes) for classes in wrapped.values()}) > 1:
        return _row(name, FAIL, f"the ranks wrapped different modules: {_by_rank(wrapped)}")
    classes = next(iter(wrapped.values()))
    devices = {rank: [m.get("device_ids") for m in record.get("ddp", [])] for rank, record in observed.records.items()}
    shown = "" if all(ids == [None] * len(ids) for ids in devices.values()) else f" (device_ids {_by_rank(devices)})"
    return _row(name, PASS, f"{', '.join(classes)} on every rank{shown}")


def check_destroyed(observed: Observed) -> Row:
    name = "destroyed"
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    joined = {rank: record for rank, record in observed.records.items() if record.get("init_process_group")}
    if not joined:
        return _row(name, SKIP, "no rank set up a process group")
    left = sorted(rank for rank, record in joined.items() if record.get("initialized_at_exit") is not False)
    if left:
        calls = Counter(len(joined[rank].get("destroy_process_group", [])) for rank in left)
        how = "never called" if set(calls) == {0} else "called, but the group was still there"
        return _row(name, FAIL, f"{_ranks(left)} exited with the process group still initialised "
                                f"(destroy_process_group {how}): call dist.destroy_process_group() in a `finally:` "
                                "around the training")
    return _row(name, PASS, f"called on {_ranks(joined)}, the group was gone at exit")


# --------------------------------------------------------------------------- data


def check_disjoint_batches(observed: Observed) -> Row:
    name = "disjoint_batches"
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    loaders = {rank: training_loader(record) for rank, record in observed.records.items()}
    if not any(loaders.values()):
        return _row(name, SKIP, "no DataLoader's batches were followed by an optimizer step (training not fed by a "
                                "DataLoader, or no step taken)")
    without = sorted(rank for rank, loader in loaders.items() if loader is None)
    if without:
        return _row(name, FAIL, f"{_ranks(without)} took no optimizer step on DataLoader batches, the others did")
    first_rank = min(loaders)
    record, loader = observed.records[first_rank], loaders[first_rank]
    desc = _describe_loader(record, loader)
    passes = min(len(l.get("iterations", [])) for l in loaders.values())
    allowed = _padding(_sampler(record, loader))
    drawn: Dict[int, int] = {}
    for k in range(passes):
        sets = {rank: _indices(l["iterations"][k]) for rank, l in loaders.items()}
        if any(s is None for s in sets.values()):
            return _row(name, SKIP, f"{desc}: an IterableDataset (no sample indices), sharding not observable")
        for a, b in _pairs(sorted(sets)):
            shared = sorted(set(sets[a]) & set(sets[b]))
            if len(shared) > allowed:
                fix = "" if _sampler(record, loader) else " (give the training DataLoader sampler=DistributedSampler(dataset))"
                return _row(name, FAIL, f"{desc}: in epoch {k + 1} ranks {a} and {b} both drew {len(shared)} of their "
                                        f"{len(sets[a])} samples {_some(shared)}: every rank trains on the same "
                                        f"data, not its own part{fix}")
        drawn = {rank: len(s) for rank, s in sets.items()}
    padding = f" (padding allows {allowed} shared)" if allowed else ""
    return _row(name, PASS, f"{desc}: {_plural(passes, 'epoch')}, {_by_rank(drawn)} samples per epoch, "
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
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    notes = []
    for rank, record in sorted(observed.records.items()):
        loader = training_loader(record)
        if loader is None:
            return _row(name, SKIP, "no training DataLoader (see disjoint_batches)")
        iterations = loader.get("iterations", [])
        if len(iterations) < 2:
            return _row(name, SKIP, f"{_plural(len(iterations), 'epoch')} ran, nothing to compare (--epochs, or the "
                                    "script's own loop)")
        sampler = _sampler(record, loader)
        shuffles = sampler.get("shuffle") if sampler else loader.get("sampler_class") != "SequentialSampler"
        if not shuffles:
            return _row(name, SKIP, f"{_describe_loader(record, loader)} does not shuffle (shuffle=False): the same "
                                    "order every epoch is what the script asks for")
        first, second = _indices(iterations[0]), _indices(iterations[1])
        if first is None or second is None:
            return _row(name, SKIP, "an IterableDataset (no sample indices), the order is not observable")
        set_epoch = sampler.get("set_epoch", []) if sampler else None
        if first == second:
            why = ("sampler.set_epoch(epoch) was never called" if set_epoch == []
                   else f"set_epoch was called with {_some(set_epoch)}" if set_epoch else "")
            return _row(name, FAIL, f"rank {rank} drew the same batches in epochs 1 and 2 {_some(first)}"
                                    + (f": {why}" if why else "")
                                    + (" (call it with the epoch number at the start of every epoch)" if sampler else ""))
        if set_epoch:
            notes.append(f"set_epoch({', '.join(map(str, set_epoch[:4]))})")
    how = f" ({notes[0]} on every rank)" if notes and len(set(notes)) == 1 else ""
    return _row(name, PASS, f"every rank's batches differ between epochs 1 and 2{how}")


# --------------------------------------------------------------------------- training


def check_in_sync(observed: Observed) -> Row:
    name = "in_sync"
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    records = observed.records
    steps = {rank: int(record.get("optimizer_steps") or 0) for rank, record in records.items()}
    if not any(steps.values()):
        return _row(name, FAIL, f"no optimizer step was taken ({_plural(observed.plan.steps_per_epoch, 'batch', 'batches')} per "
                                "pass: a loop that steps every N batches needs --steps-per-epoch N or more)")
    if len(set(steps.values())) > 1:
        return _row(name, FAIL, f"the ranks took different numbers of optimizer steps: {_by_rank(steps)}")
    modules = {rank: record.get("ddp", []) for rank, record in records.items()}
    counts = {rank: len(found) for rank, found in modules.items()}
    if not any(counts.values()):
        return _row(name, SKIP, "no DDP module to compare (see ddp)")
    if len(set(counts.values())) > 1:
        return _row(name, SKIP, "the ranks wrapped different numbers of modules, nothing to pair (see ddp)")
    ranks = sorted(modules)
    step_count = steps[ranks[0]]
    for index in range(counts[ranks[0]]):
        first = modules[ranks[0]][index]
        if "param_checksum" not in first:
            return _row(name, SKIP, f"DDP({first.get('module_class')}) has no checksum (a probe error)")
        for rank in ranks[1:]:
            other = modules[rank][index]
            if other.get("param_checksum") != first.get("param_checksum"):
                differ = sorted(key for key, digest in (other.get("param_digests") or {}).items()
                                if (first.get("param_digests") or {}).get(key) != digest)
                return _row(name, FAIL, f"DDP({first.get('module_class')}): parameters differ between rank {ranks[0]} "
                                        f"and rank {rank} after {_plural(step_count, 'optimizer step')} "
                                        f"{_some(differ, 4)}: the gradients were not averaged across ranks")
    classes = ", ".join(m.get("module_class") or "?" for m in modules[ranks[0]])
    return _row(name, PASS, f"{classes}: identical on {_ranks(ranks)} after {_plural(step_count, 'optimizer step')} each")


# --------------------------------------------------------------------------- side effects


def _file_writes(observed: Observed) -> Dict[str, Dict[int, List[str]]]:
    """{path (relative to the working directory where inside it): {rank: [how, ...]}} for every
    torch.save to a file outside the temporary folder and every file opened for writing under
    the working directory."""
    out: Dict[str, Dict[int, List[str]]] = {}
    for rank, record in observed.records.items():
        cwd = record.get("cwd_real") or os.path.realpath(record.get("cwd") or str(observed.plan.cwd))
        tmp = record.get("tmp_dir")
        for save in record.get("saves", []):
            path = save.get("path")
            if not path:
                continue
            real = os.path.realpath(path)
            if tmp and _inside(real, tmp) and not _inside(real, cwd):
                continue
            shown = os.path.relpath(real, cwd) if _inside(real, cwd) else real
            out.setdefault(shown, {}).setdefault(rank, []).append("torch.save")
        for write in (record.get("writes") or {}).values():
            out.setdefault(write["path"], {}).setdefault(rank, []).append("open")
    return out


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _per_rank_file(path: str, ranks: Iterable[int]) -> bool:
    """A file one non-zero rank writes alone, named by its rank (log_rank1.txt): by design."""
    ranks = list(ranks)
    return len(ranks) == 1 and ranks[0] != 0 and str(ranks[0]) in os.path.basename(path)


def check_rank0_files(observed: Observed) -> Row:
    name = "rank0_files"
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    writes = _file_writes(observed)
    wrong = {path: by_rank for path, by_rank in writes.items()
             if set(by_rank) - {0} and not _per_rank_file(path, by_rank)}
    if wrong:
        shown = "; ".join(f"{path} by {_ranks(by_rank)} ({_how(by_rank)})" for path, by_rank in sorted(wrong.items())[:4])
        more = f" and {len(wrong) - 4} more" if len(wrong) > 4 else ""
        return _row(name, FAIL, f"written by more than rank 0: {shown}{more}: guard the write with "
                                "`if dist.get_rank() == 0:`")
    if not writes:
        return _row(name, PASS, "no rank wrote a file")
    zero = sorted(path for path, by_rank in writes.items() if 0 in by_rank)
    per_rank = sorted(path for path in writes if path not in zero)
    text = f"rank 0 wrote {_some(zero, 4)}" if zero else "rank 0 wrote no file"
    if per_rank:
        text += f"; per-rank files {_some(per_rank, 4)}"
    return _row(name, PASS, text)


def _how(by_rank: Dict[int, List[str]]) -> str:
    kinds = Counter(how for hows in by_rank.values() for how in hows)
    return ", ".join(f"{how} x{count}" for how, count in sorted(kinds.items()))


#: The script's own output that only rank 0 should make (the probe's watch classifies every
#: write): its print()s and its tqdm bars. What it logs is shown, not judged: a log line per
#: rank is often meant (its device, its shard), and logging is where libraries write too.
_SCRIPT_OUTPUT = (("print", "lines", "printed {}"), ("tqdm", "writes", "drew tqdm progress bars ({} updates)"))
_LOGGED = (("log", "lines", "logged {}"),)


def check_rank0_output(observed: Observed) -> Row:
    name = "rank0_output"
    skipped = _no_records(observed, name)
    if skipped:
        return skipped
    if not any("output" in record for record in observed.records.values()):
        return _row(name, SKIP, "the output was not watched")
    noisy, logged = [], []
    for rank, record in sorted(observed.records.items()):
        if rank == 0:
            continue
        said = _script_output(record.get("output") or {})
        if said:
            noisy.append(f"rank {rank} {said}")
        logs = _script_output(record.get("output") or {}, kinds=_LOGGED)
        if logs:
            logged.append(f"rank {rank} {logs}")
    if noisy:
        return _row(name, FAIL, "; ".join(noisy) + ": guard the script's own output with `if dist.get_rank() == 0:` "
                                "(tqdm: disable=dist.get_rank() != 0)")
    zero = _script_output((observed.records.get(0) or {}).get("output") or {}, samples=False)
    note = f"; not judged: {'; '.join(logged)}" if logged else ""
    return _row(name, PASS, f"rank 0 {zero or 'printed nothing'}; the other ranks neither printed nor drew a bar"
                            f"{note}")


def _script_output(output: dict, samples: bool = True, kinds=_SCRIPT_OUTPUT) -> str:
    said = []
    for kind, count_key, text in kinds:
        bucket = output.get(kind) or {}
        count = bucket.get(count_key) or 0
        if count:
            sample = (bucket.get("samples") or [{}])[0]
            shown = f" ({sample.get('where')}: {sample.get('text')!r})" if samples and sample.get("text") else ""
            said.append(text.format(_plural(count, "line") if count_key == "lines" else count) + shown)
    return ", ".join(said)


def check_dataloader_workers(observed: Observed) -> Row:
    name = "dataloader_workers"
    inits = observed.run.worker_inits
    if inits:
        where = sorted({f"{i.get('where')}" for i in inits})
        modules = sorted({str(i.get("module")) for i in inits})
        parents = sorted({str(i.get("parent_rank")) for i in inits})
        reimport = " re-imported the script (as __mp_main__) and" if "__mp_main__" in modules else ""
        return _row(name, FAIL, f"{_plural(len(inits), 'DataLoader worker process', 'DataLoader worker processes')} of rank(s) {', '.join(parents)} "
                                f"(started with spawn or forkserver){reimport} called init_process_group at "
                                f"{', '.join(where)}: each joins the rendezvous as a second copy of its rank and "
                                "blocks there. Set up the process group in a function the main guard calls "
                                "(`if __name__ == \"__main__\":`), not at module level")
    started = [w for record in observed.records.values() for w in record.get("dataloader_workers", [])]
    if not started:
        if not observed.records:
            return _row(name, SKIP, "not observed: no rank finished")
        return _row(name, SKIP, "no DataLoader started worker processes (num_workers=0)")
    methods = sorted({str(w.get("start_method")) for w in started})
    count = sum(len(w.get("pids") or []) for w in started)
    return _row(name, PASS, f"{_plural(count, 'worker process', 'worker processes')} ({', '.join(methods)}), none joined the process group")


# --------------------------------------------------------------------------- the original's checkpoints


def _saved_structures(run: Run, cwd: str) -> Dict[str, Dict[str, dict]]:
    """{path relative to cwd: {a structure's JSON: the structure}} of a run's torch.save files."""
    out: Dict[str, Dict[str, dict]] = {}
    for record in run.records.values():
        tmp = record.get("tmp_dir")
        root = record.get("cwd_real") or os.path.realpath(cwd)
        for save in record.get("saves", []):
            path = save.get("path")
            if not path:
                continue
            real = os.path.realpath(path)
            if tmp and _inside(real, tmp) and not _inside(real, root):
                continue
            shown = os.path.relpath(real, root) if _inside(real, root) else real
            shape = keys.structure(save.get("summary") or {})
            out.setdefault(shown, {})[json.dumps(shape, sort_keys=True)] = shape
    return out


def check_checkpoint_keys(observed: Observed) -> Row:
    name = "checkpoint_keys"
    original = observed.original
    if original is None:
        if observed.original_script:
            return _row(name, SKIP, "the original was not run (the migration failed)")
        return _row(name, SKIP, "no --original given: nothing to compare the checkpoints with")
    if original.returncode != 0 or not original.records:
        raised = failed_ranks(original)
        what = f": {raised[0][1].get('type')}: {_first_line(raised[0][1].get('message'))}" if raised else ""
        how = f"exit status {original.returncode}" if original.exited else f"{original.ended} after {original.duration_s:.0f}s"
        return _row(name, FAIL, f"the original ({observed.original_script}) did not run as one process: {how}{what}")
    if not observed.records:
        return _row(name, SKIP, "not observed: no rank of the migration finished")
    cwd = str(observed.plan.cwd)
    new, old = _saved_structures(observed.run, cwd), _saved_structures(original, cwd)
    if not new and not old:
        return _row(name, SKIP, "neither the migration nor the original saved a file with torch.save")
    lines = []
    if set(old) - set(new):
        lines.append(f"the original wrote {_some(sorted(set(old) - set(new)), 4)}, the migration did not")
    if set(new) - set(old):
        lines.append(f"the migration wrote {_some(sorted(set(new) - set(old)), 4)}, the original did not")
    for path in sorted(set(new) & set(old)):
        if set(new[path]) == set(old[path]):
            continue
        for sig_new in sorted(set(new[path]) - set(old[path])):
            for sig_old in sorted(set(old[path]) - set(new[path])) or sorted(old[path]):
                lines.extend(keys.differences(new[path][sig_new], old[path][sig_old], path))
    if lines:
        return _row(name, FAIL, "; ".join(dict.fromkeys(lines)))
    by_shape: Dict[str, List[str]] = {}
    for path, shapes in sorted(new.items()):
        by_shape.setdefault("; ".join(keys.describe(shape) for shape in shapes.values()), []).append(path)
    shown = "; ".join(f"{', '.join(paths)}: {shape}" for shape, paths in list(by_shape.items())[:3])
    return _row(name, PASS, f"{_plural(len(new), 'file')} with the original's keys ({shown})")


# --------------------------------------------------------------------------- all of them

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

CHECKS: Tuple[Callable[[Observed], Row], ...] = (
    check_run, check_process_group, check_ddp, check_disjoint_batches, check_reshuffled, check_in_sync,
    check_rank0_files, check_rank0_output, check_destroyed, check_dataloader_workers, check_checkpoint_keys,
)


def _row(name: str, verdict: str, evidence: str) -> Row:
    return Row(name, TITLES[name], verdict, evidence)


def judge(observed: Observed) -> List[Row]:
    """Every check, in order. A check that fails on a record it did not expect is a bug in
    verify, not a verdict on the script: it SKIPs and says so."""
    rows = []
    for check in CHECKS:
        try:
            rows.append(check(observed))
        except Exception as exc:  # noqa: BLE001
            name = check.__name__.replace("check_", "", 1)
            rows.append(_row(name, SKIP, f"internal error in ddp-migrate verify (please report it): "
                                         f"{type(exc).__name__}: {exc}"))
    return rows
