"""Named assertions over a RunReport. Each raises AssertionError with the run's context.

Add new properties as new `assert_*` functions (and to `assert_trains_correctly_under_ddp`
when every migrated fixture must have them).
"""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from .harness import RunReport


def _prefix(report: RunReport) -> str:
    return f"[{report.label}] " if report.label else ""


def _fail(report: RunReport, message: str) -> None:
    raise AssertionError(f"{_prefix(report)}{message}\n{report.explain()}")


def _short(values, limit: int = 12) -> str:
    values = list(values)
    return f"{values[:limit]}{' ...' if len(values) > limit else ''} ({len(values)})"


def assert_clean_exit(report: RunReport) -> None:
    if report.timed_out:
        _fail(report, f"the run did not finish within {report.timeout:.0f}s")
    if report.returncode != 0:
        _fail(report, f"the run exited with code {report.returncode}")


def assert_all_ranks_recorded(report: RunReport, nproc: int = 2) -> None:
    missing = sorted(set(range(nproc)) - set(report.ranks))
    if missing or report.unreadable_records:
        _fail(report, f"no probe record from rank(s) {missing} (a process died before exit, or called os._exit)")


def assert_probe_ok(report: RunReport) -> None:
    """The probe recorded everything (a probe error would leave the other checks blind)."""
    for rank in report.ranks:
        errors = report.record(rank).get("probe_errors") or []
        if errors:
            _fail(report, f"the runtime probe failed on rank {rank} (a harness bug, not the script's): "
                          f"{errors[0].strip().splitlines()[-1]}")


def assert_world(report: RunReport, nproc: int = 2) -> None:
    """Every rank initialised the default process group once, with world size nproc and its own RANK."""
    seen = set()
    for rank in report.ranks:
        calls = report.init_calls(rank)
        if len(calls) != 1:
            _fail(report, f"rank {rank} called init_process_group {len(calls)} times, expected once")
        call = calls[0]
        if call["world_size"] != nproc:
            _fail(report, f"rank {rank}: world size {call['world_size']}, expected {nproc}")
        if call["rank"] != rank:
            _fail(report, f"process with RANK={rank} joined the group as rank {call['rank']}")
        seen.add(call["rank"])
    if seen != set(range(nproc)):
        _fail(report, f"ranks in the group: {sorted(seen)}, expected {list(range(nproc))}")


def assert_gloo_cpu(report: RunReport) -> None:
    """CPU training: gloo backend, no device_ids given to DDP, every wrapped parameter on the CPU."""
    for rank in report.ranks:
        for call in report.init_calls(rank):
            if call["backend"] != "gloo":
                _fail(report, f"rank {rank}: backend {call['backend']!r}, expected 'gloo' on a CPU-only machine")
        for mod in report.ddp_modules(rank):
            if mod.get("device_ids"):
                _fail(report, f"rank {rank}: DDP({mod['module_class']}) got device_ids={mod['device_ids']} on CPU")
            devices = set(mod.get("param_devices") or [])
            if devices - {"cpu"}:
                _fail(report, f"rank {rank}: DDP({mod['module_class']}) parameters on {sorted(devices)}")


def assert_ddp_wrapped(report: RunReport) -> None:
    """Each rank wrapped at least one module in DistributedDataParallel, the same classes on every rank."""
    per_rank = {rank: [m["module_class"] for m in report.ddp_modules(rank)] for rank in report.ranks}
    for rank, classes in per_rank.items():
        if not classes:
            _fail(report, f"rank {rank} constructed no DistributedDataParallel")
    if len({tuple(c) for c in per_rank.values()}) > 1:
        _fail(report, f"ranks wrapped different modules: {per_rank}")


def assert_identical_params(report: RunReport) -> None:
    """At exit, each DDP-wrapped module has bit-identical parameters on every rank."""
    ranks = report.ranks
    if not ranks:
        _fail(report, "no probe records to compare")
    counts = {rank: len(report.ddp_modules(rank)) for rank in ranks}
    if len(set(counts.values())) != 1:
        _fail(report, f"ranks wrapped different numbers of modules: {counts}")
    for index in range(counts[ranks[0]]):
        mods = {rank: report.ddp_modules(rank)[index] for rank in ranks}
        first = mods[ranks[0]]
        if "param_checksum" not in first:
            _fail(report, f"DDP module #{index} has no checksum (probe error?)")
        for rank, mod in mods.items():
            if mod.get("param_names") != first.get("param_names"):
                _fail(report, f"DDP({first['module_class']}) #{index}: parameter names differ between "
                              f"rank {ranks[0]} and rank {rank}")
            if mod.get("param_checksum") != first["param_checksum"]:
                differing = sorted(name for name, digest in mod.get("param_digests", {}).items()
                                   if first.get("param_digests", {}).get(name) != digest)
                _fail(report, f"DDP({first['module_class']}) #{index}: parameters differ between rank "
                              f"{ranks[0]} and rank {rank} at exit: {differing[:10]}"
                              f"{' ...' if len(differing) > 10 else ''} (gradients were not synchronised)")


def assert_process_group_destroyed(report: RunReport) -> None:
    """Clean shutdown: every rank called destroy_process_group before exiting."""
    for rank in report.ranks:
        if report.record(rank).get("initialized_at_exit") is not False:
            calls = len(report.record(rank).get("destroy_process_group", []))
            _fail(report, f"rank {rank} exited with the process group still initialised "
                          f"(destroy_process_group called {calls} times)")


# -- data sharding -------------------------------------------------------------------
def _describe_loader(loader: dict, sampler: Optional[dict] = None) -> str:
    if sampler is not None:
        how = (f"DistributedSampler(shuffle={sampler.get('shuffle')}, drop_last={sampler.get('drop_last')})"
               if sampler.get("class") == "DistributedSampler" else f"{sampler.get('class')} (a DistributedSampler)")
    else:
        how = loader.get("sampler_class")
    return (f"DataLoader #{loader.get('index')} over {loader.get('dataset_class')}"
            f"(len={loader.get('dataset_len')}) with {how}, batch_size={loader.get('batch_size')}")


def _sharded_loaders(report: RunReport, rank: int) -> List[dict]:
    return [loader for loader in report.loaders(rank) if loader.get("sampler_index") is not None]


def _unsharded_loaders(report: RunReport, rank: int) -> List[dict]:
    return [loader for loader in report.loaders(rank) if loader.get("sampler_index") is None]


def _indexed(iteration: dict) -> bool:
    """A pass over a map-style dataset (an IterableDataset's sampler yields no indices)."""
    indices = iteration.get("indices") or []
    return bool(indices) and all(isinstance(i, int) for i in indices)


def _order(iteration: dict) -> List[int]:
    """What the sampler gave this rank for one pass: its whole shard when recorded, else the
    indices the loop consumed."""
    return list(iteration["shard"]) if "shard" in iteration else list(iteration.get("indices") or [])


def _training_steps(loader: dict) -> int:
    """Optimizer steps taken while this loader had drawn the latest batch: > 0 for a loader
    that feeds training, 0 for evaluation."""
    return sum(it.get("optimizer_steps", 0) for it in loader.get("iterations", []))


def _check_unsharded_loader(report: RunReport, rank: int, loader: dict, notes: List[str]) -> None:
    """A loader without a DistributedSampler must be an evaluation loader (no optimizer steps
    on its batches), and it gives every rank the whole dataset."""
    desc = _describe_loader(loader)
    n = loader.get("dataset_len")
    passes = [(k, it) for k, it in enumerate(loader.get("iterations", [])) if _indexed(it)]
    if n is None or not passes:
        notes.append(f"{desc}: no indices (IterableDataset?), sharding not observable")
        return
    steps = _training_steps(loader)
    if steps:
        k, first = passes[0]
        same = [_order(it) for r in report.ranks
                for l in report.loaders(r)[loader.get("index"):loader.get("index") + 1]
                if l.get("sampler_index") is None and l.get("dataset_class") == loader.get("dataset_class")
                for it in l.get("iterations", [])[k:k + 1]]
        shared = set.intersection(*(set(o) for o in same)) if len(same) == len(report.ranks) else None
        _fail(report, f"{desc} feeds training ({steps} optimizer steps on its batches on rank {rank}) but has "
                      f"no DistributedSampler, so the training data is not sharded: in pass {k} rank {rank} drew "
                      f"{len(set(first['indices']))} distinct of {n} samples"
                      + (f", and ranks {report.ranks} share {len(shared)} of them" if shared is not None else "")
                      + "; give the training loader sampler=DistributedSampler(dataset)")
    exhaustive = (loader.get("sampler_class") in ("SequentialSampler", "RandomSampler")
                  and not loader.get("sampler_replacement") and loader.get("sampler_len") in (None, n))
    batch = loader.get("batch_size")
    full = (n // batch) * batch if loader.get("drop_last") and batch else n
    for k, it in passes:
        indices = it["indices"]
        where = f"{desc}, pass {k}, rank {rank}"
        outside = sorted({i for i in indices if not 0 <= i < n})
        if outside:
            _fail(report, f"{where}: indices outside the dataset: {_short(outside)}")
        if not exhaustive:
            continue
        repeated = sorted(i for i, c in Counter(indices).items() if c > 1)
        if repeated:
            _fail(report, f"{where}: indices drawn more than once in one pass: {_short(repeated)}")
        if len(indices) < full:
            notes.append(f"{desc}: pass {k} on rank {rank} stopped after {len(indices)} of {full} samples "
                         "(the loop breaks early), coverage not checked")
            continue
        if not loader.get("drop_last") and set(indices) != set(range(n)):
            _fail(report, f"{where}: this loader has no DistributedSampler, so every rank must see the "
                          f"whole dataset, but it missed {_short(sorted(set(range(n)) - set(indices)))}")
    if not exhaustive:
        notes.append(f"{desc}: sampler {loader.get('sampler_class')} need not cover the "
                     "dataset, only the index range was checked")
    else:
        notes.append(f"{desc}: not sharded, whole dataset on every rank")


def _check_same_subsets(report: RunReport, notes: List[str]) -> None:
    """A loader over a Subset (`random_split`, `Subset(ds, perm[:n])`) reads the same samples of the
    dataset under it on every rank: else each rank shards, or evaluates, a different set (a split
    drawn apart on each rank), whose indices alone look disjoint and covering."""
    ranks = report.ranks
    loaders = {rank: report.loaders(rank) for rank in ranks}
    for j in range(min(len(found) for found in loaders.values())):
        subsets = {rank: loaders[rank][j].get("subset_of") for rank in ranks}
        if any(subset is None for subset in subsets.values()):
            continue
        first = subsets[ranks[0]]
        desc = (f"{_describe_loader(loaders[ranks[0]][j])}, a Subset of {first.get('dataset_class')}"
                f"(len={first.get('dataset_len')})")
        picked = {rank: subset.get("indices") or [] for rank, subset in subsets.items()}
        if any(indices != picked[ranks[0]] for indices in picked.values()):
            shared = set.intersection(*(set(indices) for indices in picked.values()))
            sizes = ", ".join(f"rank {rank}: {len(indices)}" for rank, indices in picked.items())
            _fail(report, f"{desc}: the ranks' Subsets pick different samples of the dataset ({sizes}; "
                          f"{len(shared)} shared by all ranks), so each rank reads its own set: the split "
                          "was drawn apart on each rank (an unseeded random_split, randperm or shuffle)")
        notes.append(f"{desc}: the same {len(picked[ranks[0]])} samples on every rank")


def assert_disjoint_shards(report: RunReport, nproc: int = 2) -> str:
    """Training data is split across ranks by a DistributedSampler, pass by pass.

    For each loader with a DistributedSampler (paired across ranks in order), in every pass
    (epoch) the ranks' shards interleave back into one permutation of the dataset, padded (when
    the sampler's drop_last is False) by repeating its first total_size - N indices: so the
    shards are disjoint but for that padding and together cover the dataset. A loader without
    a DistributedSampler must not feed training (no optimizer step on its batches) and must
    give every rank the whole dataset (evaluation). Returns a note.
    """
    ranks = report.ranks
    notes: List[str] = []
    for rank in ranks:
        for loader in _unsharded_loaders(report, rank):
            _check_unsharded_loader(report, rank, loader, notes)

    _check_same_subsets(report, notes)

    sharded = {rank: _sharded_loaders(report, rank) for rank in ranks}
    if not any(sharded.values()):
        return "; ".join(dict.fromkeys(
            ["no DataLoader with a DistributedSampler (training data not from a map-style DataLoader)"]
            + notes))

    counts = {rank: len(loaders) for rank, loaders in sharded.items()}
    if len(set(counts.values())) != 1:
        _fail(report, f"ranks iterated different numbers of DistributedSampler loaders: {counts}")
    summary = []
    for j in range(counts[ranks[0]]):
        loaders = {rank: sharded[rank][j] for rank in ranks}
        samplers = {rank: report.sampler(rank, loaders[rank]) or {} for rank in ranks}
        desc = _describe_loader(loaders[ranks[0]], samplers[ranks[0]])
        for rank, sampler in samplers.items():
            if (sampler.get("num_replicas"), sampler.get("rank")) != (nproc, rank):
                _fail(report, f"{desc} on rank {rank}: the sampler has num_replicas={sampler.get('num_replicas')}, "
                              f"rank={sampler.get('rank')}; expected num_replicas={nproc}, rank={rank}")
        passes = {rank: len(loader.get("iterations", [])) for rank, loader in loaders.items()}
        if len(set(passes.values())) != 1:
            _fail(report, f"{desc}: ranks made different numbers of passes over it: {passes}")
        n = samplers[ranks[0]].get("dataset_len") or loaders[ranks[0]].get("dataset_len")
        if n is None:
            notes.append(f"{desc}: dataset has no len(), shards not checked")
            continue
        drop_last = bool(samplers[ranks[0]].get("drop_last"))
        per_rank = n // nproc if drop_last else math.ceil(n / nproc)
        total = per_rank * nproc
        for k in range(passes[ranks[0]]):
            its = {rank: loaders[rank]["iterations"][k] for rank in ranks}
            where = f"{desc}, pass {k} (sampler epoch {its[ranks[0]].get('epoch')})"
            shards = {rank: _order(it) for rank, it in its.items()}
            exact = all("shard" in it for it in its.values())
            for rank, shard in shards.items():
                outside = sorted({i for i in shard if not (isinstance(i, int) and 0 <= i < n)})
                if outside:
                    _fail(report, f"{where}: rank {rank} got indices outside the dataset: {_short(outside)}")
            overlap = sorted(set.intersection(*(set(s) for s in shards.values())))
            union = set().union(*(set(s) for s in shards.values()))
            missing = sorted(set(range(n)) - union)
            padding = 0 if drop_last else total - n
            pairs = ", ".join(f"rank {r}: {len(s)}" for r, s in shards.items())
            if exact:
                for rank, shard in shards.items():
                    if len(shard) != per_rank:
                        _fail(report, f"{where}: rank {rank} was given {len(shard)} indices, expected "
                                      f"{per_rank} = {'floor' if drop_last else 'ceil'}({n}/{nproc})")
                full = [shards[r][i] for i in range(per_rank) for r in ranks]
                head, tail = (full, []) if drop_last else (full[:n], full[n:])
                well_formed = (len(set(head)) == len(head) and (drop_last or sorted(head) == list(range(n)))
                               and tail == full[:len(tail)])
                if not well_formed:
                    _fail(report, f"{where}: the ranks' shards are not a split of one permutation of the "
                                  f"{n} samples (sizes {pairs}): shared by all ranks {_short(overlap)} "
                                  f"(padding allows {padding}, repeating the first indices), never given to "
                                  f"any rank {_short(missing)}")
            else:
                if len(overlap) > padding:
                    _fail(report, f"{where}: ranks share {_short(overlap)} (DistributedSampler padding allows "
                                  f"{padding}); consumed {pairs}")
                if all(len(s) == per_rank for s in shards.values()):
                    if not drop_last and missing:
                        _fail(report, f"{where}: no rank saw {_short(missing)} of {n} samples")
                else:
                    notes.append(f"{where}: partial pass ({pairs} of {per_rank}), coverage not checked")
        summary.append(f"{desc}: {passes[ranks[0]]} pass(es) split {per_rank}/rank over {n}")
    return "; ".join(dict.fromkeys(summary + notes))


def assert_evaluation_whole(report: RunReport) -> str:
    """An evaluation loader (no optimizer step on its batches, in a run where another loader's
    batches are stepped on) has no DistributedSampler: it gives every rank the whole data set, so
    the score it makes and what the script decides from it (the best checkpoint) are the same on
    every rank. Not part of assert_trains_correctly_under_ddp: scripts that shard their
    evaluation themselves, or migrated with --eval sharded, do so on purpose; fixtures ask for it
    (fixture.toml `evaluation_whole = true`). Returns a note."""
    notes: List[str] = []
    for rank in report.ranks:
        if not any(_training_steps(loader) for loader in report.loaders(rank)):
            notes.append(f"rank {rank}: no optimizer step on any loader's batches, evaluation not told apart")
            continue
        for loader in _sharded_loaders(report, rank):
            if _training_steps(loader) or not loader.get("iterations"):
                continue
            sampler = report.sampler(rank, loader) or {}
            passes = [_order(it) for it in loader.get("iterations", [])]
            _fail(report, f"{_describe_loader(loader, sampler)} on rank {rank} feeds no training (no optimizer "
                          f"step on its batches in {len(passes)} pass(es)) but is sharded: this rank evaluated "
                          f"{len(passes[0])} of {loader.get('dataset_len')} samples, so its score (and what the "
                          "script decides from it) is of a part of the data and differs between ranks; an "
                          "evaluation loader stays whole on every rank")
        notes.append(f"rank {rank}: every sharded loader feeds training")
    return "; ".join(dict.fromkeys(notes))


def assert_reshuffled_each_epoch(report: RunReport) -> str:
    """A shuffling DistributedSampler gets a new epoch (set_epoch) every epoch, so each rank's
    order differs between epochs. Checked when a rank made >= 2 passes over such a loader."""
    notes: List[str] = []
    if not any(_sharded_loaders(report, rank) for rank in report.ranks):
        return "not observable: no DataLoader with a DistributedSampler"
    for rank in report.ranks:
        for loader in _sharded_loaders(report, rank):
            sampler = report.sampler(rank, loader) or {}
            desc = _describe_loader(loader, sampler)
            iterations = loader.get("iterations", [])
            if not sampler.get("shuffle"):
                notes.append(f"{desc}: shuffle=False, nothing to reshuffle")
                continue
            if len(iterations) < 2:
                notes.append(f"{desc}: {len(iterations)} pass(es), reshuffling not observable")
                continue
            set_epoch = sampler.get("set_epoch", [])
            called = f"called with {_short(set_epoch)}" if set_epoch else "never called"
            first_of_epoch: Dict[object, dict] = {}
            for it in iterations:
                first_of_epoch.setdefault(it.get("epoch"), it)
            if len(first_of_epoch) < 2:
                same = _order(iterations[0]) == _order(iterations[1])
                _fail(report, f"{desc} on rank {rank}: all {len(iterations)} passes ran with sampler epoch "
                              f"{iterations[0].get('epoch')}, so {'every pass drew the same order' if same else 'the shuffle never changes'}"
                              f" (pass 0 starts {_order(iterations[0])[:8]}, pass 1 starts "
                              f"{_order(iterations[1])[:8]}); set_epoch was {called}: call "
                              "sampler.set_epoch(epoch) at the start of every epoch")
            (e0, it0), (e1, it1) = list(first_of_epoch.items())[:2]
            if _order(it0) == _order(it1) and len(_order(it0)) >= 4:
                _fail(report, f"{desc} on rank {rank}: epochs {e0} and {e1} drew the same order "
                              f"{_order(it0)[:8]} ...; set_epoch was {called}")
            if len(set(map(str, set_epoch))) < 2:
                _fail(report, f"{desc} on rank {rank}: the sampler's epoch changed ({e0} -> {e1}) but "
                              f"set_epoch was {called}, expected distinct values")
            else:
                notes.append(f"{desc}: reshuffled every epoch")
    return "; ".join(dict.fromkeys(notes))


# -- output ----------------------------------------------------------------------------
def assert_rank0_output(report: RunReport) -> str:
    """Ranks other than 0 neither print (the script's own print()/sys.stdout.write) nor draw tqdm
    bars: the probe attributes each write to the code that made it."""
    noisy = []
    for rank, record in sorted(report.records.items()):
        output = record.get("output") or {}
        printed = (output.get("print") or {}).get("lines") or 0
        bars = (output.get("tqdm") or {}).get("writes") or 0
        if rank != 0 and (printed or bars):
            samples = (output.get("print") or output.get("tqdm") or {}).get("samples") or [{}]
            noisy.append(f"rank {rank}: {printed} printed line(s), {bars} tqdm update(s), e.g. "
                         f"{samples[0].get('where')}: {samples[0].get('text')!r}")
    if noisy:
        _fail(report, "; ".join(noisy) + ": only rank 0 may print or draw progress bars")
    zero = report.records.get(0, {}).get("output") or {}
    return f"rank 0 printed {(zero.get('print') or {}).get('lines') or 0} line(s); the other ranks nothing"


# -- checkpoints -----------------------------------------------------------------------
def assert_single_writer(report: RunReport) -> str:
    """Every file written with torch.save is written by one process: rank 0. A file one process
    writes in a temporary folder it made for itself (tempfile: a new name in every process) is
    that process's scratch, not a checkpoint of the run."""
    by_path = report.saves_by_path()
    for path, saves in by_path.items():
        writers = Counter(s["probe_rank"] for s in saves)
        if len(writers) == 1 and _private_scratch(path):
            continue
        if set(writers) != {0}:
            calls = ", ".join(f"rank {r}: {c} call(s)" for r, c in sorted(writers.items()))
            _fail(report, f"{path!r} is written by rank(s) {sorted(writers)} ({calls}); every checkpoint must "
                          "be written by rank 0 only (guard the torch.save with `if rank == 0:`)")
    return f"{len(by_path)} file(s), all written by rank 0 only" if by_path else "no torch.save to a file"


def _private_scratch(path: str) -> bool:
    """A path outside the run folder (saves_by_path keeps those absolute), under the system's
    temporary folder, one level or more below it: `/tmp/tmpab12cd/best.pt`."""
    import tempfile

    if not os.path.isabs(path):
        return False
    try:
        inside = Path(path).resolve().relative_to(Path(tempfile.gettempdir()).resolve())
    except ValueError:
        return False
    return len(inside.parts) >= 2


def _structure(summary: dict) -> dict:
    """The key structure of a saved object (from the probe's summary): state_dict keys, mapping
    keys and the same for nested mappings/modules; tensors and other values by type only."""
    kind = summary.get("type")
    if kind == "module":
        return {"type": "module", "class": summary.get("class"),
                "state_dict_keys": sorted(summary.get("state_dict_keys") or [])}
    if kind == "mapping":
        label = ("state_dict" if summary.get("state_dict")
                 else "optimizer_state_dict" if summary.get("optimizer_state_dict") else "mapping")
        out: dict = {"type": label, "keys": sorted(summary.get("keys") or [])}
        items = {k: _structure(v) for k, v in (summary.get("items") or {}).items()}
        if items:
            out["items"] = items
        return out
    if kind in ("list", "tuple") and summary.get("items"):  # `[model.state_dict(), optimizer.state_dict(), epoch]`
        return {"type": kind, "items": {k: _structure(v) for k, v in summary["items"].items()}}
    return {"type": kind}


def _structure_diff(a: dict, b: dict, where: str) -> List[str]:
    """Differences between the migrated (a) and original (b) structures, most specific first."""
    if a.get("type") != b.get("type") or a.get("class") != b.get("class"):
        return [f"{where}: the migrated script saved a {a.get('type')} {a.get('class') or ''}".rstrip()
                + f", the original a {b.get('type')} {b.get('class') or ''}".rstrip()]
    lines = []
    for field_name in ("state_dict_keys", "keys"):
        ka, kb = set(a.get(field_name) or []), set(b.get(field_name) or [])
        if ka != kb:
            lines.append(f"{where}: keys only in the migrated save {_short(sorted(ka - kb), 6)}, "
                         f"only in the original's {_short(sorted(kb - ka), 6)}")
    items_a, items_b = a.get("items") or {}, b.get("items") or {}
    for key in sorted(set(items_a) & set(items_b)):
        lines.extend(_structure_diff(items_a[key], items_b[key], f"{where}[{key!r}]"))
    return lines


def assert_same_saved_keys(migrated: RunReport, original: RunReport) -> str:
    """The migrated script (under torchrun) writes the same files as the original (one plain
    process), and each holds the same keys: state_dict keys, checkpoint-dict keys and nested
    state_dict keys, so code that loads the original's checkpoints loads the new ones."""
    def signatures(report: RunReport) -> Dict[str, Dict[str, dict]]:
        out: Dict[str, Dict[str, dict]] = {}
        for path, saves in report.saves_by_path().items():
            if _private_scratch(path):  # a new folder name in every process: compared by file name
                path = "<temporary folder>/" + os.path.basename(path)
            for save in saves:
                structure = _structure(save.get("summary") or {})
                out.setdefault(path, {})[json.dumps(structure, sort_keys=True)] = structure
        return out

    def fail(message: str) -> None:
        raise AssertionError(f"{_prefix(migrated)}{message}\n--- migrated run ---\n{migrated.explain(15)}"
                             f"\n--- original run ---\n{original.explain(15)}")

    new, old = signatures(migrated), signatures(original)
    only_new, only_old = sorted(set(new) - set(old)), sorted(set(old) - set(new))
    if only_new or only_old:
        what = []
        if only_old:
            what.append(f"the original wrote {only_old} but the migrated script never did")
        if only_new:
            what.append(f"the migrated script wrote {only_new}, which the original never did")
        fail("; ".join(what) + " (torch.save files, relative to the run folder; a save that depends on a "
             "validation score can also differ when the 2-rank run trains differently)")
    for path in sorted(new):
        if set(new[path]) == set(old[path]):
            continue
        lines = []
        for sig_new in sorted(set(new[path]) - set(old[path])):
            for sig_old in sorted(set(old[path]) - set(new[path])) or sorted(old[path]):
                lines.extend(_structure_diff(new[path][sig_new], old[path][sig_old], repr(path)))
        fail(f"{path!r} holds different keys than the original's:\n  " + "\n  ".join(
            lines or [f"migrated {list(new[path].values())} vs original {list(old[path].values())}"]))
    return f"{len(new)} file(s) with the original's keys" if new else "neither run saved a file"


def assert_trains_correctly_under_ddp(report: RunReport, nproc: int = 2,
                                      skip: Iterable[str] = ()) -> Dict[str, str]:
    """Every property a migrated script must have under torchrun, in order of diagnosis.

    Returns {check name: note} for the checks that ran (a note says what was observed, or
    why a property could not be observed in this run)."""
    checks = [
        ("clean_exit", lambda: assert_clean_exit(report)),
        ("all_ranks_recorded", lambda: assert_all_ranks_recorded(report, nproc)),
        ("probe_ok", lambda: assert_probe_ok(report)),
        ("world", lambda: assert_world(report, nproc)),
        ("gloo_cpu", lambda: assert_gloo_cpu(report)),
        ("ddp_wrapped", lambda: assert_ddp_wrapped(report)),
        ("identical_params", lambda: assert_identical_params(report)),
        ("process_group_destroyed", lambda: assert_process_group_destroyed(report)),
        ("disjoint_shards", lambda: assert_disjoint_shards(report, nproc)),
        ("reshuffled_each_epoch", lambda: assert_reshuffled_each_epoch(report)),
        ("single_writer", lambda: assert_single_writer(report)),
        ("rank0_output", lambda: assert_rank0_output(report)),
    ]
    skip = set(skip)
    unknown = skip - {name for name, _ in checks}
    if unknown:
        raise ValueError(f"unknown check(s) to skip: {sorted(unknown)}")
    notes: Dict[str, str] = {}
    for name, check in checks:
        if name not in skip:
            notes[name] = check() or "ok"
    return notes
