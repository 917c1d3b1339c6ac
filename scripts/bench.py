"""Benchmark: how long ddp-migrate takes, and how much memory, on one script or a whole repository.

    python scripts/bench.py [--lines 1000] [--repeat 5] [--file path/to/script.py]
    python scripts/bench.py --corpus [DIR] [--files 500] [--total-lines 74000] [--cpus 2] [--repeat 5]
    python scripts/bench.py --corpus --project --files 300 --total-lines 130000   # a repository with projects
    python scripts/bench.py --repos [--only detectron2,timm] [--repeat 5]         # real repositories, next to ruff

Default mode, one realistic 1,000-line training script, next to `python -c pass` for scale:
  - the engine alone (`migrate()` in-process: parse, metadata, rules, re-parse check);
  - the command end to end (`ddp-migrate FILE`, wall time including interpreter start-up),
    (target < 1.5 s).

--corpus mode, a 500-file, ~74k-line Python repository in which most files are irrelevant
(plain Python, no torch) and about 5% are training scripts or torch utilities. It is generated
(deterministically, --seed) into a temporary directory, or into DIR when DIR does not exist yet
(and kept there); an existing DIR is used as it is. Measured, next to `python -c pass` and, when
ruff is installed, `ruff check --no-cache --select E9 CORPUS` for scale:
  (a) `ddp-migrate --check` on one irrelevant file, wall;
  (b) `ddp-migrate --check` on one relevant 1,000-line training script, wall;
  (c) `ddp-migrate --check CORPUS` (the directory walk), wall;
  (b) and (c) again with `--check --diff`, the ddp-migrate-check pre-commit hook's command: it
      also generates the migrated code and renders the diffs, which plain --check skips;
  (e) with --project: the corpus also holds the multi-file projects of fixtures/projects/ (a
      training script whose trainer, loaders and saver live in packages), so project mode plans
      them: `--check CORPUS` (target: < 2 s for 300 files / 130,000 lines);
  (f) with --project: `--check` of the same corpus once migrated (`--in-place` on a copy), the
      repository with nothing to migrate (target < 1.5 s);
  (d) peak memory: the largest resident set of any one process of all runs (os.wait4's ru_maxrss),
      and, on Linux, the peak of the process tree's summed PSS (ddp-migrate and its --jobs
      workers; shared pages counted once), sampled every 20 ms in one extra run of each.
--repos mode, whole public repositories at pinned commits (REPOSITORIES below), each next to
`ruff check --no-cache` in the same run, and the ratio of the medians: `ddp-migrate --check .` in
the repository (target <= 4.5x ruff, peak RSS <= 200 MiB), plus a clean one-line file next to
`python -c pass` (target <= 2.5x), a generated training script just under the default
--max-file-size (parsed; RSS < 1 GiB) and a generated huge module (skipped above the limit;
RSS < 1 GiB). The repositories are never downloaded by the bench: they are looked for in
$DDP_MIGRATE_BENCH_CACHE (default ~/.cache/ddp-migrate-bench)/<name>, and one that is missing
is skipped with one line saying how to get it (`git clone URL DIR && git -C DIR checkout COMMIT`).

Commands run with their CPU affinity limited to --cpus CPUs (default 2, the development machine;
0: no limit). Best and median of --repeat runs; the targets are printed alongside.
Nothing is asserted and nothing in ddp-migrate is changed: the numbers are for people.

    python scripts/bench.py --verify [--steps 400] [--repeat 5]      # needs torch (the test extra)

--verify mode, the cost of `ddp-migrate verify` (its own interpreter: this one):
  (g) the probe's overhead per training step: one training script (a migrated loop: DistributedSampler,
      DDP on a world of one, an optimizer step and a print every 50 steps), run as one plain process
      with and without the probe armed as verify arms it (its watch on; the batch limit and the
      epoch stop set too high to cut anything, so both runs take the same --steps). The script
      times its own loop; per step, median of --repeat runs each, alternating (target < 5%);
  (h) verify's wall time on a fixture (checkpoint_rotation's expected.py: 2 processes, 2 epochs of
      3 batches), next to the same script under plain torchrun for its whole run, median of 3.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "fixtures" / "mnist_main_argparse" / "input.py"

MIB = 1024 * 1024

BLOCK = '''

class ResidualBlock{i}(nn.Module):
    """A pre-activation residual block (one of many, as in a real model zoo file)."""

    def __init__(self, channels, dropout=0.1):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        out = self.conv1(F.relu(self.norm1(x)))
        out = self.dropout(out)
        out = self.conv2(F.relu(self.norm2(out)))
        return x + out


def evaluate_{i}(model, device, loader, criterion):
    """Average loss and accuracy over `loader` (helper {i})."""
    model.eval()
    total, correct, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            loss_sum += criterion(output, target).item() * data.size(0)
            correct += (output.argmax(dim=1) == target).sum().item()
            total += data.size(0)
    return loss_sum / max(total, 1), correct / max(total, 1)
'''


def make_script(lines: int) -> str:
    """The mnist example padded with model-zoo style blocks until it has about `lines` lines."""
    base = BASE.read_text()
    head, sep, tail = base.partition("\ndef main():")
    blocks = []
    i = 0
    while (head + "".join(blocks) + sep + tail).count("\n") < lines:
        blocks.append(BLOCK.format(i=i))
        i += 1
    return head + "".join(blocks) + sep + tail


# --------------------------------------------------------------------------- the corpus

IRRELEVANT_HEADER = '''"""{title}: part of the data-processing and serving code of the project (module {n})."""
from __future__ import annotations

import json
import logging
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional

logger = logging.getLogger(__name__)

DEFAULT_{upper}_LIMIT = {limit}
_{upper}_PATTERN = re.compile(r"^(?P<key>[a-z_]+)=(?P<value>.*)$")
'''

# Plain Python as a real repository has it: dataclasses, parsing, I/O, small algorithms.
IRRELEVANT_CHUNKS = [
    '''

@dataclass
class {Name}Record:
    """One row of the {name} table."""

    key: str
    value: float = 0.0
    tags: List[str] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({{"key": self.key, "value": self.value, "tags": self.tags, **self.extra}})

    @classmethod
    def from_json(cls, text: str) -> "{Name}Record":
        data = json.loads(text)
        key, value = data.pop("key"), float(data.pop("value", 0.0))
        return cls(key, value, list(data.pop("tags", [])), data)
''',
    '''

def parse_{name}_lines(lines: Iterable[str], limit: int = DEFAULT_{upper}_LIMIT) -> Dict[str, str]:
    """Parse `key=value` lines, skipping comments and blank lines, up to `limit` entries."""
    result: Dict[str, str] = {{}}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _{upper}_PATTERN.match(line)
        if match is None:
            logger.warning("line %d is not key=value: %r", number, line)
            continue
        result[match.group("key")] = match.group("value")
        if len(result) >= limit:
            break
    return result
''',
    '''

class {Name}Cache:
    """A small least-recently-used cache for {name} lookups."""

    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self._data: Dict[str, Any] = {{}}
        self._order: List[str] = []
        self.hits = 0
        self.misses = 0

    def get(self, key: str, default: Optional[Any] = None) -> Any:
        if key in self._data:
            self.hits += 1
            self._order.remove(key)
            self._order.append(key)
            return self._data[key]
        self.misses += 1
        return default

    def put(self, key: str, value: Any) -> None:
        if key in self._data:
            self._order.remove(key)
        elif len(self._data) >= self.capacity:
            oldest = self._order.pop(0)
            del self._data[oldest]
        self._data[key] = value
        self._order.append(key)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
''',
    '''

def group_{name}_by(records: Iterable[Dict[str, Any]], key: str) -> Dict[Any, List[Dict[str, Any]]]:
    """Group `records` by the value of `key`; records without it go under None."""
    groups: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record.get(key)].append(record)
    return {{k: sorted(v, key=lambda r: str(r)) for k, v in groups.items()}}


def summarize_{name}(values: List[float]) -> Dict[str, float]:
    """Count, mean, min and max of `values` (zeros for an empty list)."""
    if not values:
        return {{"count": 0, "mean": 0.0, "min": 0.0, "max": 0.0}}
    return {{
        "count": len(values),
        "mean": sum(values) / len(values),
        "min": min(values),
        "max": max(values),
    }}
''',
    '''

def load_{name}_config(path: str, overrides: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Read a JSON config, apply `overrides`, and fill in defaults from the environment."""
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except FileNotFoundError:
        logger.info("no config at %s, using defaults", path)
        config = {{}}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{{path}}: invalid JSON at line {{exc.lineno}}") from exc
    config.update(overrides or {{}})
    config.setdefault("workers", int(os.environ.get("{UPPER}_WORKERS", "4")))
    config.setdefault("output_dir", os.environ.get("{UPPER}_OUTPUT", "out"))
    return config
''',
    '''

class {Name}Pipeline:
    """Applies a list of steps to each item, collecting failures instead of raising."""

    def __init__(self, steps, name: str = "{name}") -> None:
        self.steps = list(steps)
        self.name = name
        self.failures: List[str] = []

    def run(self, items: Iterable[Any]) -> List[Any]:
        results = []
        for index, item in enumerate(items):
            try:
                for step in self.steps:
                    item = step(item)
            except (ValueError, KeyError) as exc:
                self.failures.append(f"{{self.name}}[{{index}}]: {{exc}}")
                continue
            results.append(item)
        return results

    def __repr__(self) -> str:
        return f"{Name}Pipeline(steps={{len(self.steps)}}, failures={{len(self.failures)}})"
''',
]

TORCH_UTILITY = '''"""Model building blocks and tensor helpers (torch utility module {n}). No training here."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def init_weights_{n}(module: nn.Module) -> None:
    """Kaiming init for convolutions, zeros for biases, ones for norms."""
    if isinstance(module, nn.Conv2d):
        nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, (nn.BatchNorm2d, nn.LayerNorm)):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class Attention{n}(nn.Module):
    def __init__(self, dim: int, heads: int = 8, dropout: float = 0.0):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = self.dropout(attn.softmax(dim=-1))
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


def cosine_schedule_{n}(step: int, total: int, base_lr: float, warmup: int = 100) -> float:
    if step < warmup:
        return base_lr * step / max(warmup, 1)
    progress = (step - warmup) / max(total - warmup, 1)
    return 0.5 * base_lr * (1 + math.cos(math.pi * progress))


@torch.no_grad()
def accuracy_{n}(output: torch.Tensor, target: torch.Tensor, topk=(1,)):
    maxk = max(topk)
    _, pred = output.topk(maxk, 1, True, True)
    correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
    return [correct[:k].reshape(-1).float().sum(0) * 100.0 / target.size(0) for k in topk]
'''

SUBPACKAGES = ("data", "io", "serving", "features", "reports", "cli", "storage", "metrics", "text", "config")


def _irrelevant(rng: random.Random, n: int, lines: int) -> str:
    name = f"{rng.choice(SUBPACKAGES)}{n}"
    fmt = {"name": name, "Name": name.title().replace("_", ""), "upper": name.upper(), "UPPER": name.upper()}
    parts = [IRRELEVANT_HEADER.format(title=name.title(), n=n, limit=rng.randint(10, 5000), **fmt)]
    count = parts[0].count("\n")
    while True:
        index = rng.randrange(len(IRRELEVANT_CHUNKS))
        chunk_no = len(parts)
        chunk = IRRELEVANT_CHUNKS[index].format(
            name=f"{name}_{chunk_no}", Name=f"{fmt['Name']}{chunk_no}", upper=fmt["upper"], UPPER=fmt["UPPER"]
        )
        size = chunk.count("\n")
        if count + size // 2 > lines and count >= 20:  # round to the nearest chunk: the total stays on target
            break
        parts.append(chunk)
        count += size
    return "".join(parts)


def _training_script(rng: random.Random, lines: int, data_parallel: bool) -> str:
    source = make_script(lines)
    if data_parallel:
        source = source.replace(
            "    model = Net().to(device)\n",
            "    model = Net().to(device)\n"
            "    if torch.cuda.device_count() > 1:\n"
            "        model = nn.DataParallel(model)\n",
        )
    return source


def generate_corpus(root: Path, files: int, total_lines: int, relevant_share: float, seed: int) -> Tuple[Path, Path]:
    """Write the corpus under `root`; return (one irrelevant file, the 1,000-line training script)."""
    rng = random.Random(seed)
    relevant = max(1, round(files * relevant_share))
    scripts = max(1, relevant * 2 // 5)  # training scripts; the rest of the relevant files are torch utilities
    written: List[Tuple[Path, str]] = []

    big = root / "train.py"
    written.append((big, make_script(1000)))
    for i in range(1, scripts):
        lines = rng.randint(150, 600)
        written.append((root / "experiments" / f"exp{i:02d}" / "train.py", _training_script(rng, lines, i % 2 == 0)))
    for i in range(relevant - scripts):
        written.append((root / "src" / "proj" / "models" / f"blocks{i:02d}.py", TORCH_UTILITY.format(n=i)))

    budget = total_lines - sum(text.count("\n") for _, text in written)
    others = files - len(written)
    weights = [rng.lognormvariate(0, 0.7) for _ in range(others)]
    scale = budget / sum(weights)
    sample: Optional[Path] = None
    for i, weight in enumerate(weights):
        lines = max(25, int(weight * scale))
        package = SUBPACKAGES[i % len(SUBPACKAGES)]
        folder = root / ("tests" if i % 7 == 0 else Path("src") / "proj" / package)
        path = folder / (f"test_{package}_{i:03d}.py" if i % 7 == 0 else f"{package}_{i:03d}.py")
        text = _irrelevant(rng, i, lines)
        written.append((path, text))
        if sample is None and 120 <= text.count("\n") <= 200:
            sample = path
    for path, text in written:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sample or written[-1][0], big


def n_projects(root: Path) -> str:
    apps = root / "apps"
    count = sum(1 for p in apps.iterdir() if p.is_dir()) if apps.is_dir() else 0
    return f"{count} projects"


def corpus_stats(root: Path) -> Tuple[int, int, int]:
    """(Python files, lines, files mentioning torch) under `root`."""
    count = lines = relevant = 0
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8", errors="replace")
        count += 1
        lines += text.count("\n")
        relevant += "torch" in text
    return count, lines, relevant


# --------------------------------------------------------------------------- measuring


def best_and_median(samples):
    return min(samples), statistics.median(samples)


def _limit_cpus(cpus: Optional[List[int]]) -> Optional[Callable[[], None]]:
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


# Commands run as users run them: with their modules' bytecode cached (a pip install compiles it).
# PYTHONDONTWRITEBYTECODE in the caller's environment would make every run compile ddp-migrate's
# modules from source again (40-60 ms of a 0.1 s start-up); time_command warms the cache first.
BENCH_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: Sequence[str], cpus: Optional[List[int]] = None, ok=(0,), cwd=None) -> Tuple[float, Optional[int]]:
    """(wall seconds, peak RSS in bytes or None) of one run of `argv`, output discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_limit_cpus(cpus), cwd=cwd, env=BENCH_ENV
    )
    if hasattr(os, "wait4"):
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    else:  # pragma: no cover - Windows
        proc.wait()
        elapsed = time.perf_counter() - start
        rss = None
    if proc.returncode not in ok:
        raise SystemExit(f"bench: {shlex.join(argv)} exited with status {proc.returncode}")
    return elapsed, rss


def _children_map() -> dict:
    """{parent pid: [child pids]} from /proc."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    return children


def _pss(pid: int) -> int:
    """Proportional set size of `pid` in bytes (shared pages split between sharers), else RSS; 0 if gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tree_memory(argv: Sequence[str], cpus: Optional[List[int]] = None, ok=(0,), interval=0.02, cwd=None) -> Optional[int]:
    """Peak of the summed PSS of `argv`'s process tree (it and its workers), sampled; None without /proc.

    A separate run, so the sampling does not slow down the timed ones.
    """
    if not os.path.exists("/proc/self/stat"):
        return None
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_limit_cpus(cpus), cwd=cwd, env=BENCH_ENV
    )
    peak = 0
    while proc.poll() is None:
        children = _children_map()
        tree, todo = [], [proc.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, ()))
        peak = max(peak, sum(_pss(pid) for pid in tree))
        time.sleep(interval)
    if proc.returncode not in ok:
        raise SystemExit(f"bench: {shlex.join(argv)} exited with status {proc.returncode}")
    return peak or None


def time_command(argv, repeat, cpus=None, ok=(0,), cwd=None):
    """((best, median) wall seconds, peak RSS in bytes or None) over `repeat` runs, after one warm-up
    run (bytecode written, files in the page cache)."""
    run_once(argv, cpus, ok, cwd)
    samples, peaks = [], []
    for _ in range(repeat):
        elapsed, rss = run_once(argv, cpus, ok, cwd)
        samples.append(elapsed)
        if rss is not None:
            peaks.append(rss)
    return best_and_median(samples), (max(peaks) if peaks else None)


def time_engine(source, repeat):
    from migrator import migrate

    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        migrate(source)
        samples.append(time.perf_counter() - start)
    return best_and_median(samples)


def tool_argv(extra: Sequence[str]) -> List[str]:
    """How ddp-migrate is started: the console script when installed, else `python -m migrator`."""
    script = shutil.which("ddp-migrate")
    return [script, *extra] if script else [sys.executable, "-m", "migrator", *extra]


def _rss(value: Optional[int]) -> str:
    return f"{value / MIB:7.0f} MiB" if value is not None else "    n/a    "


def _row(label, times, rss=None, target="", verdict=""):
    best, median = times
    print(f"{label:54} {best:8.3f}s {median:7.3f}s {_rss(rss)}  {target:24} {verdict}".rstrip())


def _mib_verdict(value: Optional[int]) -> str:
    return _verdict(value / MIB if value else None, 200)


def _verdict(value: Optional[float], limit: float) -> str:
    if value is None:
        return ""
    return "ok" if value < limit else "MISS"


# --------------------------------------------------------------------------- modes


def bench_script(args) -> None:
    source = args.file.read_text() if args.file else make_script(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.py"
        path.write_text(source)
        n = source.count("\n")
        rows = [
            ("python -c pass", time_command([sys.executable, "-c", "pass"], args.repeat)),
            (f"migrate() in-process, {n} lines", (time_engine(source, args.repeat), None)),
            (
                f"ddp-migrate train.py ({n} lines), wall",
                time_command([sys.executable, "-m", "migrator", str(path)], args.repeat),
            ),
        ]
    print(f"{'what':54} {'best':>8} {'median':>8} {'peak RSS':>11}")
    for label, (times, rss) in rows:
        _row(label, times, rss)


def bench_corpus(args) -> None:
    extra = list(args.tool_arg)
    cpus: Optional[List[int]] = None
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    if args.cpus and available is not None:
        cpus = available[: args.cpus]
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        samples_dir = tmp_path / "samples"
        if args.corpus and Path(args.corpus).exists():
            corpus = Path(args.corpus)
            # (a) and (b) on the generator's kind of files, so they are comparable between corpora
            samples_dir.mkdir()
            irrelevant, relevant = samples_dir / "irrelevant.py", samples_dir / "train.py"
            irrelevant.write_text(_irrelevant(random.Random(args.seed), 0, 150))
            relevant.write_text(make_script(1000))
            origin = "given"
        else:
            corpus = Path(args.corpus) if args.corpus else tmp_path / "corpus"
            irrelevant, relevant = generate_corpus(corpus, args.files, args.total_lines, args.relevant_share, args.seed)
            origin = "generated, kept" if args.corpus else "generated"
        if args.file:
            relevant = args.file
        migrated_copy = None
        if args.project:
            for project in sorted((ROOT / "fixtures" / "projects").iterdir()):
                if (project / "input").is_dir():
                    shutil.copytree(project / "input", corpus / "apps" / project.name, dirs_exist_ok=True)
            migrated_copy = tmp_path / "migrated"
            shutil.copytree(corpus, migrated_copy)
            subprocess.run(tool_argv(["--in-place", "--quiet", str(migrated_copy)]), check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        n_files, n_lines, n_torch = corpus_stats(corpus)
        tool = tool_argv([])
        print(f"corpus: {corpus} ({origin}): {n_files} Python files, {n_lines} lines, {n_torch} mention torch")
        print(f"tool:   {shlex.join(tool + ['--check', *extra])}")
        cpu_note = f"{len(cpus)} of {len(available)}" if cpus else f"all ({os.cpu_count()})"
        print(f"CPUs:   {cpu_note}; {args.repeat} runs each (best, median); peak RSS is the largest of the runs")
        print()

        irrelevant_lines = irrelevant.read_text().count("\n")
        relevant_lines = relevant.read_text().count("\n")
        check = ["--check", *extra]
        a_argv, b_argv, c_argv = (tool + check + [str(target)] for target in (irrelevant, relevant, corpus))
        b_diff_argv, c_diff_argv = (tool + check + ["--diff", str(target)] for target in (relevant, corpus))
        a = time_command(a_argv, args.repeat, cpus, ok=(0, 1))
        b = time_command(b_argv, args.repeat, cpus, ok=(0, 1))
        c = time_command(c_argv, args.repeat, cpus, ok=(0, 1))
        b_diff = time_command(b_diff_argv, args.repeat, cpus, ok=(0, 1))
        c_diff = time_command(c_diff_argv, args.repeat, cpus, ok=(0, 1))
        f = time_command(tool + check + [str(migrated_copy)], args.repeat, cpus, ok=(0, 1)) if migrated_copy else None
        runs = (a_argv, b_argv, c_argv, b_diff_argv, c_diff_argv)
        trees = [tree_memory(argv, cpus, ok=(0, 1)) for argv in runs]

        print(f"{'what':54} {'best':>8} {'median':>8} {'peak RSS':>11}  {'issue target':24} verdict (median)")
        _row("python -c pass", *time_command([sys.executable, "-c", "pass"], args.repeat, cpus))
        ruff = shutil.which("ruff")
        if ruff:
            ruff_argv = [ruff, "check", "--no-cache", "--select", "E9", str(corpus)]
            _row("ruff check --no-cache --select E9 CORPUS", *time_command(ruff_argv, args.repeat, cpus, ok=(0, 1)))
        else:
            print(f"{'ruff check --select E9 CORPUS':54} (ruff is not installed)")
        _row("ddp-migrate --version (start-up and imports)", *time_command(tool + ["--version"], args.repeat, cpus))
        for label, (times, rss), target, limit in (
            (f"(a) --check one irrelevant file ({irrelevant_lines} lines)", a, "< 0.1 s", 0.1),
            (f"(b) --check one training script ({relevant_lines} lines)", b, "< 1.5 s", 1.5),
            (f"(c) --check CORPUS ({n_files} files, {n_lines} lines)", c, "< 1.5 s on 2 cores", 1.5),
            ("(b) --check --diff, the same script (pre-commit hook)", b_diff, "< 1.5 s", 1.5),
            ("(c) --check --diff CORPUS (pre-commit hook)", c_diff, "< 1.5 s on 2 cores", 1.5),
        ):
            _row(label, times, rss, target, _verdict(times[1], limit))
        if f is not None:
            _row(f"(e) --check CORPUS, {n_projects(corpus)} planned", c[0], c[1], "< 2 s on 2 cores", _verdict(c[0][1], 2.0))
            _row("(f) --check the migrated CORPUS (nothing to migrate)", f[0], f[1], "< 1.5 s on 2 cores", _verdict(f[0][1], 1.5))
        peaks = [rss for _, rss in (a, b, c, b_diff, c_diff) if rss is not None]
        peak = max(peaks) if peaks else None
        label = "(d) peak RSS of one process, largest of all runs"
        print(f"{label:54} {'':8}  {'':7}  {_rss(peak)}  {'< 200 MiB':24} {_mib_verdict(peak)}".rstrip())
        known = [tree for tree in trees if tree is not None]
        if known:
            tree = max(known)
            which = ("a", "b", "c", "b --diff", "c --diff")[trees.index(tree)]
            label = f"(d) peak PSS of process tree, workers summed ({which})"
            print(f"{label:54} {'':8}  {'':7}  {_rss(tree)}  {'< 200 MiB':24} {_mib_verdict(tree)}".rstrip())


# --------------------------------------------------------------------------- real repositories

#: (name, clone URL, pinned commit): what `--repos` measures. Update the commits deliberately.
REPOSITORIES: Tuple[Tuple[str, str, str], ...] = (
    ("detectron2", "https://github.com/facebookresearch/detectron2", "02b5c4e295e990042a714712c21dc79b731e8833"),
    ("timm", "https://github.com/huggingface/pytorch-image-models", "aa4b5850c1543fa488abf260f18390eda46cf85d"),
    ("fairseq", "https://github.com/facebookresearch/fairseq", "3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99"),
    ("yolov5", "https://github.com/ultralytics/yolov5", "5081342f04fb287fc2e5f2b5a4e06752b7937b1c"),
)


def bench_cache() -> Path:
    return Path(os.environ.get("DDP_MIGRATE_BENCH_CACHE") or Path.home() / ".cache" / "ddp-migrate-bench")


def _checkout(name: str, url: str, commit: str) -> Optional[Path]:
    """The repository's folder in the cache at `commit`, or None (and one line saying how to get it)."""
    folder = bench_cache() / name
    get = f"git clone {url} {folder} && git -C {folder} checkout {commit}"
    if not folder.is_dir():
        print(f"skipped {name}: not in {bench_cache()}; get it with: {get}")
        return None
    head = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head != commit:
        print(f"skipped {name}: {folder} is at {head or 'no git commit'}, not the pinned {commit[:12]}; "
              f"git -C {folder} checkout {commit}")
        return None
    return folder


def _huge_module(path: Path, lines: int) -> None:
    """A generated module (a table of weights, as some repositories keep in Python) of about `lines` lines."""
    with path.open("w") as handle:
        handle.write("import torch\n\nWEIGHTS = [\n")
        for i in range(lines):
            handle.write(f"    ({i}, {i * 0.5}, 'optim_{i}'),\n")
        handle.write("]\n")


DEFAULT_MAX_FILE_SIZE = 512 * 1024  # ddp-migrate's --max-file-size default


def _script_of_size(size: int) -> str:
    """A training script (make_script's shape) just under `size` bytes: the largest file the
    default --max-file-size still reads, so its peak memory is the one the limit bounds."""
    lines = 1000
    while len(make_script(lines * 2).encode()) < size:
        lines *= 2
    low, high = lines, lines * 2
    while high - low > 50:
        middle = (low + high) // 2
        low, high = (middle, high) if len(make_script(middle).encode()) < size else (low, middle)
    return make_script(low)


def bench_repos(args) -> None:
    cpus = _cpus(args.cpus)
    tool = shlex.split(args.tool) if args.tool else tool_argv([])
    ruff = shutil.which("ruff")
    wanted = {name.strip() for name in args.only.split(",") if name.strip()} if args.only else None
    print(f"tool: {shlex.join(tool)}; ruff: {ruff or 'not installed'}; cache: {bench_cache()}")
    print(f"CPUs: {len(cpus) if cpus else 'all'}; {args.repeat} runs each, alternating with the reference's; "
          "ratio = median of the per-run ratios")
    print()
    print(f"{'what':46} {'files':>6} {'median':>8} {'peak RSS':>11} {'ruff':>8} {'ratio':>7}  target")
    for name, url, commit in REPOSITORIES:
        if wanted is not None and name not in wanted:
            continue
        folder = _checkout(name, url, commit)
        if folder is None:
            continue
        n_files = sum(1 for _ in folder.rglob("*.py"))
        ours, theirs, ratio, rss = _side_by_side(tool + ["--check", "."], [ruff, "check", "--no-cache", "."] if ruff else None,
                                                 args.repeat, cpus, folder)
        tree = tree_memory(tool + ["--check", "."], cpus, ok=(0, 1), cwd=folder)
        peak = max(filter(None, (rss, tree)), default=None)
        _ratio_row(f"--check {name} ({commit[:7]})", n_files, ours, peak, theirs, ratio, "<= 4.5x ruff, <= 200 MiB",
                   ratio is not None and ratio <= 4.5 and (peak or 0) <= 200 * MIB)
    with tempfile.TemporaryDirectory() as tmp:
        clean = Path(tmp) / "clean.py"
        clean.write_text("x = 1\n")
        ours, python, ratio, rss = _side_by_side(tool + ["--check", str(clean)], [sys.executable, "-c", "pass"],
                                                 max(args.repeat, 11), cpus, None)
        _ratio_row("--check a clean file (vs python -c pass)", 1, ours, rss, python, ratio, "<= 2.5x python -c pass",
                   ratio <= 2.5)
        at_limit = Path(tmp) / "at_limit.py"
        at_limit.write_text(_script_of_size(DEFAULT_MAX_FILE_SIZE - 4096))
        size = at_limit.stat().st_size
        (_, ours), rss = time_command(tool + ["--check", str(at_limit)], 1, cpus, ok=(0, 1))
        skipped = b"max-file-size" in subprocess.run(tool + ["--check", str(at_limit)], capture_output=True).stderr
        _ratio_row(f"--check a training script at the limit ({size // 1024} KiB)", 1, ours, rss, None, None,
                   "parsed, RSS < 1 GiB", not skipped and (rss or 0) < 1024 * MIB)
        huge = Path(tmp) / "generated.py"
        _huge_module(huge, args.huge_lines)
        size = huge.stat().st_size
        (_, ours), rss = time_command(tool + ["--check", str(huge)], 1, cpus, ok=(0, 1))
        _ratio_row(f"--check a {args.huge_lines:,}-line module ({size / MIB:.0f} MiB)", 1, ours, rss, None, None,
                   "skipped, RSS < 1 GiB", (rss or 0) < 1024 * MIB)


def _side_by_side(argv, reference, repeat, cpus, cwd):
    """(our median, the reference's median, the median of the per-pair ratios, our peak RSS): the
    two commands alternate, run for run, so a machine whose speed drifts slows both alike."""
    run_once(argv, cpus, (0, 1), cwd)  # warm-up: bytecode, page cache
    if reference:
        run_once(reference, cpus, (0, 1), cwd)
    ours, theirs, peaks = [], [], []
    for _ in range(repeat):
        elapsed, rss = run_once(argv, cpus, (0, 1), cwd)
        ours.append(elapsed)
        if rss is not None:
            peaks.append(rss)
        if reference:
            theirs.append(run_once(reference, cpus, (0, 1), cwd)[0])
    ratio = statistics.median(a / b for a, b in zip(ours, theirs)) if theirs else None
    return (statistics.median(ours), statistics.median(theirs) if theirs else None, ratio,
            max(peaks) if peaks else None)


def _ratio_row(label, files, ours, rss, theirs, ratio, target, ok) -> None:
    theirs_text = f"{theirs:7.3f}s" if theirs is not None else f"{'':8}"
    ratio_text = f"{ratio:6.1f}x" if ratio is not None else f"{'':7}"
    print(f"{label:46} {files:6} {ours:7.3f}s {_rss(rss)} {theirs_text} {ratio_text}  {target} {'ok' if ok else 'MISS'}")


def _cpus(count: int) -> Optional[List[int]]:
    available = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return available[:count] if count and available is not None else None


# --------------------------------------------------------------------------- --verify

#: (g)'s training: a migrated loop, timed from inside (start-up and imports are not steps).
BENCH_TRAINING = '''
import json, os, sys, time
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

STEPS, BATCH = int(sys.argv[1]), 32
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
torch.manual_seed(0)
data = TensorDataset(torch.randn(BATCH * 50, 64), torch.randn(BATCH * 50, 1))
sampler = DistributedSampler(data, shuffle=True)
loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
model = DDP(nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps, epoch = 0, 0
started = time.perf_counter()
while steps < STEPS:
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        steps += 1
        if dist.get_rank() == 0 and steps % 50 == 0:
            print(f"epoch {epoch} step {steps} loss {loss.item():.4f}")
        if steps == STEPS:
            break
    epoch += 1
elapsed = time.perf_counter() - started
dist.destroy_process_group()
with open(os.environ["BENCH_OUT"], "w") as out:
    json.dump({"steps": steps, "seconds": elapsed}, out)
'''


def _timed_training(script: Path, steps: int, env: dict, out: Path) -> float:
    """Seconds per step of one run of the bench training."""
    subprocess.run([sys.executable, str(script), str(steps)], env=dict(env, BENCH_OUT=str(out)), check=True,
                   stdout=subprocess.DEVNULL, cwd=str(script.parent))
    result = json.loads(out.read_text())
    return result["seconds"] / result["steps"]


def bench_verify(args) -> None:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise SystemExit("bench --verify needs torch (pip install -e '.[test]')")
    from migrator.verify.probe import PROBE_DIR

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        script = tmp_path / "bench_train.py"
        script.write_text(BENCH_TRAINING)
        probe_dir = tmp_path / "probe"
        probe_dir.mkdir()
        plain_env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
        probed_env = dict(plain_env, PYTHONPATH=os.pathsep.join([str(PROBE_DIR), os.environ.get("PYTHONPATH", "")]),
                          DDP_PROBE_DIR=str(probe_dir), DDP_PROBE_SINGLE="1", DDP_PROBE_WATCH="1",
                          DDP_PROBE_MAX_BATCHES=str(10**9), DDP_PROBE_EPOCHS=str(10**9))
        plain, probed = [], []
        for _ in range(args.repeat):  # alternating, so a slower minute of the machine hits both
            plain.append(_timed_training(script, args.steps, plain_env, tmp_path / "plain.json"))
            probed.append(_timed_training(script, args.steps, probed_env, tmp_path / "probed.json"))
        record = json.loads((probe_dir / "rank0.json").read_text())
        assert record["optimizer_steps"] == args.steps and not record["probe_errors"], record["probe_errors"]
        p, q = statistics.median(plain), statistics.median(probed)
        overhead = (q - p) / p * 100
        print(f"(g) probe overhead per training step ({args.steps} steps, median of {args.repeat} runs each)")
        print(f"    without the probe {p * 1e3:8.3f} ms/step   (best {min(plain) * 1e3:.3f})")
        print(f"    with the probe    {q * 1e3:8.3f} ms/step   (best {min(probed) * 1e3:.3f})")
        print(f"    overhead          {overhead:+7.2f} %        target < 5 %   {'ok' if overhead < 5 else 'MISS'}")

        fixture = ROOT / "fixtures" / "checkpoint_rotation" / "expected.py"
        run_dir = tmp_path / "verify"
        run_dir.mkdir()
        (run_dir / "train.py").write_text(fixture.read_text())
        verify_argv = tool_argv(["verify", "train.py", "--output-format", "json"])
        torchrun_argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"]
        walls = {"verify": [], "torchrun": []}
        for _ in range(3):
            for name, argv in (("verify", verify_argv), ("torchrun", torchrun_argv)):
                start = time.perf_counter()
                subprocess.run(argv, cwd=str(run_dir), env=plain_env, check=name == "torchrun",
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                walls[name].append(time.perf_counter() - start)
        print("(h) wall time on checkpoint_rotation (2 processes, CPU), median of 3")
        print(f"    ddp-migrate verify train.py (2 epochs x 3 batches)  {statistics.median(walls['verify']):6.2f} s")
        print(f"    torchrun train.py, its whole run (3 epochs x 3)     {statistics.median(walls['torchrun']):6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000, help="size of the generated script (default mode)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (default 5)")
    parser.add_argument("--file", type=Path, help="benchmark this script instead of a generated one (both modes: (b))")
    corpus = parser.add_argument_group("--corpus mode")
    corpus.add_argument(
        "--corpus",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="measure a whole repository: DIR if it exists, else generate one (into DIR when given, kept)",
    )
    corpus.add_argument("--files", type=int, default=500, help="files in a generated corpus (default 500)")
    corpus.add_argument("--total-lines", type=int, default=74000, help="lines in a generated corpus (default 74000)")
    corpus.add_argument(
        "--relevant-share",
        type=float,
        default=0.05,
        help="share of training scripts and torch utilities (default 0.05)",
    )
    corpus.add_argument("--seed", type=int, default=0, help="seed of the generator (default 0)")
    corpus.add_argument("--project", action="store_true",
                        help="add fixtures/projects/ to the corpus and measure project mode: (e) and (f)")
    corpus.add_argument(
        "--cpus", type=int, default=2, help="limit the commands to this many CPUs (default 2; 0: no limit)"
    )
    corpus.add_argument(
        "--tool-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for ddp-migrate, repeatable (e.g. --tool-arg=--jobs --tool-arg=2)",
    )
    repos = parser.add_argument_group("--repos mode")
    repos.add_argument("--repos", action="store_true", help="measure the pinned public repositories next to ruff")
    repos.add_argument("--only", default="", help="comma-separated names of REPOSITORIES (default: all)")
    repos.add_argument("--tool", default="", help="the command to measure instead of ddp-migrate (e.g. an older checkout)")
    repos.add_argument("--huge-lines", type=int, default=300_000, help="lines of the generated huge module (default 300,000)")
    verify = parser.add_argument_group("--verify mode")
    verify.add_argument("--verify", action="store_true", help="measure ddp-migrate verify: (g) and (h)")
    verify.add_argument("--steps", type=int, default=400, help="training steps per run in (g) (default 400)")
    args = parser.parse_args()
    if args.repos:
        bench_repos(args)
    elif args.verify:
        bench_verify(args)
    elif args.corpus is None:
        bench_script(args)
    else:
        bench_corpus(args)


if __name__ == "__main__":
    main()
