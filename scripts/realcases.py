#!/usr/bin/env python3
"""Real-repository cases, kept as recipes (as ruff keeps its ecosystem checks): never upstream code.

A recipe (`ecosystem/cases/<name>/`) says where a runnable case for `../shared/realrun/run.py` comes
from: `case.toml` (the harness's own keys: `source` = "owner/name", `commit`, `script`, `cwd`, `args`,
`train_len`, `properties`, `migrate`, plus `files`: the upstream paths the run needs), `stub.py` (our
stand-ins for data sets, downloads and missing packages) and `NOTES.md` (what the stub replaces and why).

    python scripts/realcases.py build ecosystem/cases /tmp/cases [--cases a,b] [--git-dir owner/name=DIR]
    python scripts/realcases.py record /work/extra/cases ecosystem/cases     # a built case -> its recipe

`build` clones each repository (or reads a local bare git directory given with --git-dir), takes the
recipe's `files` at its `commit` with `git archive` into `<out>/<name>/tree/` and copies the recipe
beside it. Then, from the project root:

    . ../shared/realrun/env.sh
    DDP_EVAL_CASES=/tmp/cases $REALRUN_VENV/bin/python ../shared/realrun/run.py \\
        --python $REALRUN_VENV/bin/python --timeout 300 \\
        --tool "chmod -R u+w {dir} && $REALRUN_VENV/bin/ddp-migrate --in-place {target}" --out /tmp/r.json
    $REALRUN_VENV/bin/python ../shared/realrun/verdict.py /tmp/r.json
"""
from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, List

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None  # type: ignore[assignment]

RECIPE_FILES = ("case.toml", "stub.py", "NOTES.md")


def _load(recipe: Path) -> dict:
    if tomllib is None:
        raise SystemExit("reading case.toml needs Python 3.11 or later (tomllib)")
    return tomllib.loads((recipe / "case.toml").read_text(encoding="utf-8"))


def _git_dir(source: str, given: Dict[str, str], cache: Path) -> str:
    if source in given:
        return given[source]
    target = cache / source.replace("/", "+")
    if not target.exists():
        subprocess.run(["git", "clone", "--bare", "--quiet", f"https://github.com/{source}.git", str(target)], check=True)
    return str(target)


def build(recipes: Path, out: Path, names: List[str], given: Dict[str, str]) -> int:
    cache = Path(tempfile.gettempdir()) / "ddp-realcases-git"
    cache.mkdir(exist_ok=True)
    for recipe in sorted(p for p in recipes.iterdir() if (p / "case.toml").exists()):
        if names and recipe.name not in names:
            continue
        config = _load(recipe)
        git_dir = _git_dir(config["source"], given, cache)
        case = out / recipe.name
        tree = case / "tree"
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "--git-dir", git_dir, "archive", "--format=tar", config["commit"], "--", *config["files"]],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tree)
        for name in RECIPE_FILES:
            if (recipe / name).exists():
                shutil.copy(recipe / name, case / name)
        print(f"{recipe.name}: {config['source']}@{config['commit'][:12]}, {len(config['files'])} paths -> {case}")
    return 0


def record(cases: Path, recipes: Path, names: List[str]) -> int:
    for case in sorted(p for p in cases.iterdir() if (p / "case.toml").exists() and (p / "tree").is_dir()):
        if names and case.name not in names:
            continue
        files = sorted(str(p.relative_to(case / "tree")) for p in (case / "tree").rglob("*") if p.is_file())
        target = recipes / case.name
        target.mkdir(parents=True, exist_ok=True)
        text = (case / "case.toml").read_text(encoding="utf-8").rstrip("\n")
        lines = [line for line in text.splitlines() if not line.startswith("files = ")]
        listed = ", ".join(f'"{f}"' for f in files)
        (target / "case.toml").write_text("\n".join(lines) + f"\nfiles = [{listed}]\n", encoding="utf-8")
        for name in RECIPE_FILES[1:]:
            if (case / name).exists():
                shutil.copy(case / name, target / name)
        print(f"{case.name}: {len(files)} upstream files listed -> {target}")
    return 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="recipes -> runnable cases")
    b.add_argument("recipes", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--cases", default="")
    b.add_argument("--git-dir", action="append", default=[], help="owner/name=DIR: a local (bare) clone to read")
    r = sub.add_parser("record", help="built cases -> recipes (no upstream file is copied)")
    r.add_argument("cases", type=Path)
    r.add_argument("recipes", type=Path)
    r.add_argument("--cases", dest="names", default="")
    args = parser.parse_args(argv)
    if args.command == "build":
        given = dict(item.split("=", 1) for item in args.git_dir)
        return build(args.recipes, args.out, [n for n in args.cases.split(",") if n], given)
    return record(args.cases, args.recipes, [n for n in args.names.split(",") if n])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["build", "record", "main"]
