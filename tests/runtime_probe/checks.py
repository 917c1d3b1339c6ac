"""Named assertions over a RunReport. Each raises AssertionError with the run's context.

Add new properties as new `assert_*` functions (and to `assert_trains_correctly_under_ddp`
when every migrated fixture must have them).
"""
from __future__ import annotations

from typing import Iterable

from .harness import RunReport


def _fail(report: RunReport, message: str) -> None:
    raise AssertionError(f"{message}\n{report.explain()}")


def assert_clean_exit(report: RunReport) -> None:
    if report.timed_out:
        _fail(report, f"the run did not finish within {report.timeout:.0f}s")
    if report.returncode != 0:
        _fail(report, f"the run exited with code {report.returncode}")


def assert_all_ranks_recorded(report: RunReport, nproc: int = 2) -> None:
    missing = sorted(set(range(nproc)) - set(report.ranks))
    if missing or report.unreadable_records:
        _fail(report, f"no probe record from rank(s) {missing} (a process died before exit, or called os._exit)")


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


def assert_trains_correctly_under_ddp(report: RunReport, nproc: int = 2,
                                      skip: Iterable[str] = ()) -> None:
    """Every property a migrated script must have under torchrun, in order of diagnosis."""
    checks = [
        ("clean_exit", lambda: assert_clean_exit(report)),
        ("all_ranks_recorded", lambda: assert_all_ranks_recorded(report, nproc)),
        ("world", lambda: assert_world(report, nproc)),
        ("gloo_cpu", lambda: assert_gloo_cpu(report)),
        ("ddp_wrapped", lambda: assert_ddp_wrapped(report)),
        ("identical_params", lambda: assert_identical_params(report)),
        ("process_group_destroyed", lambda: assert_process_group_destroyed(report)),
    ]
    skip = set(skip)
    for name, check in checks:
        if name not in skip:
            check()
