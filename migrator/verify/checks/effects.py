"""What the ranks leave behind: files, and output. Only rank 0 should make either."""
from __future__ import annotations

import os
from collections import Counter
from typing import Dict, Iterable, List

from migrator.verify.checks.base import (
    FAIL, PASS, SKIP, Observed, Row, inside, row, no_records, plural, rank_list, some,
)


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
            if tmp and inside(real, tmp) and not inside(real, cwd):
                continue
            shown = os.path.relpath(real, cwd) if inside(real, cwd) else real
            out.setdefault(shown, {}).setdefault(rank, []).append("torch.save")
        for write in (record.get("writes") or {}).values():
            out.setdefault(write["path"], {}).setdefault(rank, []).append("open")
    return out


def _per_rank_file(path: str, ranks: Iterable[int]) -> bool:
    """A file one non-zero rank writes alone, named by its rank (log_rank1.txt): by design."""
    ranks = list(ranks)
    return len(ranks) == 1 and ranks[0] != 0 and str(ranks[0]) in os.path.basename(path)


def check_rank0_files(observed: Observed) -> Row:
    name = "rank0_files"
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    writes = _file_writes(observed)
    wrong = {path: by_rank for path, by_rank in writes.items()
             if set(by_rank) - {0} and not _per_rank_file(path, by_rank)}
    if wrong:
        shown = "; ".join(f"{path} by {rank_list(by_rank)} ({_how(by_rank)})"
                          for path, by_rank in sorted(wrong.items())[:4])
        more = f" and {len(wrong) - 4} more" if len(wrong) > 4 else ""
        return row(name, FAIL, f"written by more than rank 0: {shown}{more}: guard the write with "
                           "`if dist.get_rank() == 0:`")
    if not writes:
        return row(name, PASS, "no rank wrote a file")
    zero = sorted(path for path, by_rank in writes.items() if 0 in by_rank)
    per_rank = sorted(path for path in writes if path not in zero)
    text = f"rank 0 wrote {some(zero, 4)}" if zero else "rank 0 wrote no file"
    if per_rank:
        text += f"; per-rank files {some(per_rank, 4)}"
    return row(name, PASS, text)


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
    skipped = no_records(observed, name)
    if skipped:
        return skipped
    if not any("output" in record for record in observed.records.values()):
        return row(name, SKIP, "the output was not watched")
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
        return row(name, FAIL, "; ".join(noisy) + ": guard the script's own output with `if dist.get_rank() == 0:` "
                           "(tqdm: disable=dist.get_rank() != 0)")
    zero = _script_output((observed.records.get(0) or {}).get("output") or {}, samples=False)
    note = f"; not judged: {'; '.join(logged)}" if logged else ""
    return row(name, PASS, f"rank 0 {zero or 'printed nothing'}; the other ranks neither printed nor drew a bar"
                       f"{note}")


def _script_output(output: dict, samples: bool = True, kinds=_SCRIPT_OUTPUT) -> str:
    said = []
    for kind, count_key, text in kinds:
        bucket = output.get(kind) or {}
        count = bucket.get(count_key) or 0
        if count:
            sample = (bucket.get("samples") or [{}])[0]
            shown = f" ({sample.get('where')}: {sample.get('text')!r})" if samples and sample.get("text") else ""
            said.append(text.format(plural(count, "line") if count_key == "lines" else count) + shown)
    return ", ".join(said)
