"""The original's checkpoints (--original): the migration writes the same files, with the same keys."""
from __future__ import annotations

import json
import os
from typing import Dict, List

from migrator.verify import keys
from migrator.verify.checks.base import FAIL, PASS, SKIP, Observed, Row, first_line, inside, row, plural, some
from migrator.verify.checks.run import failed_ranks
from migrator.verify.runner import Run


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
            if tmp and inside(real, tmp) and not inside(real, root):
                continue
            shown = os.path.relpath(real, root) if inside(real, root) else real
            shape = keys.structure(save.get("summary") or {})
            out.setdefault(shown, {})[json.dumps(shape, sort_keys=True)] = shape
    return out


def check_checkpoint_keys(observed: Observed) -> Row:
    name = "checkpoint_keys"
    original = observed.original
    if original is None:
        if observed.original_script:
            return row(name, SKIP, "the original was not run (the migration failed)")
        return row(name, SKIP, "no --original given: nothing to compare the checkpoints with")
    if original.returncode != 0 or not original.records:
        raised = failed_ranks(original)
        what = f": {raised[0][1].get('type')}: {first_line(raised[0][1].get('message'))}" if raised else ""
        how = (f"exit status {original.returncode}" if original.exited
               else f"{original.ended} after {original.duration_s:.0f}s")
        return row(name, FAIL, f"the original ({observed.original_script}) did not run as one process: "
                          f"{how}{what}")
    if not observed.records:
        return row(name, SKIP, "not observed: no rank of the migration finished")
    cwd = str(observed.plan.cwd)
    new, old = _saved_structures(observed.run, cwd), _saved_structures(original, cwd)
    if not new and not old:
        return row(name, SKIP, "neither the migration nor the original saved a file with torch.save")
    lines = []
    if set(old) - set(new):
        lines.append(f"the original wrote {some(sorted(set(old) - set(new)), 4)}, the migration did not")
    if set(new) - set(old):
        lines.append(f"the migration wrote {some(sorted(set(new) - set(old)), 4)}, the original did not")
    for path in sorted(set(new) & set(old)):
        if set(new[path]) == set(old[path]):
            continue
        for sig_new in sorted(set(new[path]) - set(old[path])):
            for sig_old in sorted(set(old[path]) - set(new[path])) or sorted(old[path]):
                lines.extend(keys.differences(new[path][sig_new], old[path][sig_old], path))
    if lines:
        return row(name, FAIL, "; ".join(dict.fromkeys(lines)))
    by_shape: Dict[str, List[str]] = {}
    for path, shapes in sorted(new.items()):
        by_shape.setdefault("; ".join(keys.describe(shape) for shape in shapes.values()), []).append(path)
    shown = "; ".join(f"{', '.join(paths)}: {shape}" for shape, paths in list(by_shape.items())[:3])
    return row(name, PASS, f"{plural(len(new), 'file')} with the original's keys ({shown})")
