"""What a checkpoint holds, as keys: the structure of a torch.save'd object from the probe's
summary, and the differences between the migration's and the original's.

A state_dict is its keys; a checkpoint dict ({"model": state_dict, "optimizer": ..., "epoch": 3})
is its keys and, for each mapping or module inside it, that one's structure, two levels down;
tensors and other values count by type only (their values change with training).
"""
from __future__ import annotations

from typing import List, Sequence

MODULE_PREFIX = "module."


def structure(summary: dict) -> dict:
    """The key structure of a saved object, from the probe's summary of it."""
    kind = summary.get("type")
    if kind == "module":
        return {"type": "module", "class": summary.get("class"),
                "state_dict_keys": sorted(summary.get("state_dict_keys") or [])}
    if kind == "mapping":
        label = ("state_dict" if summary.get("state_dict")
                 else "optimizer_state_dict" if summary.get("optimizer_state_dict") else "mapping")
        out: dict = {"type": label, "keys": sorted(summary.get("keys") or [])}
        items = {key: structure(value) for key, value in (summary.get("items") or {}).items()}
        if items:
            out["items"] = items
        return out
    return {"type": kind}


def describe(shape: dict, depth: int = 0) -> str:
    """`state_dict of 4 keys`; `{epoch, model_state: state_dict of 12 keys, optimizer_state:
    optimizer_state_dict, config: mapping of 14 keys}` (one level of a checkpoint dict shown)."""
    kind = shape.get("type")
    count = len(shape.get("keys") or [])
    if kind == "module":
        return f"module {shape.get('class')} with {len(shape.get('state_dict_keys') or [])} state_dict keys"
    if kind == "state_dict":
        return f"state_dict of {count} keys"
    if kind == "optimizer_state_dict":
        return "optimizer_state_dict"
    if kind == "mapping":
        if depth:
            return f"mapping of {count} keys"
        items = shape.get("items") or {}
        parts = [f"{key}: {describe(items[key], depth + 1)}" if key in items else key
                 for key in shape.get("keys") or []]
        return "{" + ", ".join(parts) + "}"
    return str(kind)


def differences(migrated: dict, original: dict, where: str) -> List[str]:
    """How the migration's structure differs from the original's, most specific first."""
    if migrated.get("type") != original.get("type") or migrated.get("class") != original.get("class"):
        return [f"{where}: the migration saved {describe(migrated)}, the original {describe(original)}"]
    lines = []
    for field_name in ("state_dict_keys", "keys"):
        new, old = set(migrated.get(field_name) or []), set(original.get(field_name) or [])
        if new != old:
            lines.append(f"{where}: keys only in the migration's {_some(sorted(new - old))}, only in the "
                         f"original's {_some(sorted(old - new))}{_prefix_hint(new, old)}")
    items_new, items_old = migrated.get("items") or {}, original.get("items") or {}
    for key in sorted(set(items_new) & set(items_old)):
        lines.extend(differences(items_new[key], items_old[key], f"{where}[{key!r}]"))
    return lines


def _prefix_hint(new: set, old: set) -> str:
    """A `module.` prefix is the DDP wrapper's: name it, with the fix."""
    if new and {MODULE_PREFIX + key for key in old} == new:
        return " (a `module.` prefix: the migration saves the DDP wrapper's state_dict; save model.module.state_dict())"
    if old and {MODULE_PREFIX + key for key in new} == old:
        return " (the original's keys have the `module.` prefix of its DataParallel wrapper; keep it)"
    return ""


def _some(values: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(values[:limit])
    return f"[{shown}{', ...' if len(values) > limit else ''}] ({len(values)})"
