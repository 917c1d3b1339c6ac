"""Benchmark: how long ddp-migrate takes on one realistic 1,000-line training script.

    python scripts/bench.py [--lines 1000] [--repeat 5] [--file path/to/script.py]

Prints, next to `python -c pass` for scale:
  - the engine alone (`migrate()` in-process: parse, metadata, rules, re-parse check);
  - the command end to end (`ddp-migrate FILE`, wall time including interpreter start-up),
    which is what the issue's 1.5 s target is about.
Best and median of --repeat runs. Nothing is asserted: the numbers are for people.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "fixtures" / "mnist_main_argparse" / "input.py"

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


def best_and_median(samples):
    return min(samples), statistics.median(samples)


def time_command(argv, repeat):
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return best_and_median(samples)


def time_engine(source, repeat):
    from migrator import migrate

    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        migrate(source)
        samples.append(time.perf_counter() - start)
    return best_and_median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--file", type=Path, help="benchmark this script instead of a generated one")
    args = parser.parse_args()

    source = args.file.read_text() if args.file else make_script(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.py"
        path.write_text(source)
        n = source.count("\n")
        rows = [
            ("python -c pass", time_command([sys.executable, "-c", "pass"], args.repeat)),
            (f"migrate() in-process, {n} lines", time_engine(source, args.repeat)),
            (
                f"ddp-migrate train.py ({n} lines), wall",
                time_command([sys.executable, "-m", "migrator", str(path)], args.repeat),
            ),
        ]
    print(f"{'what':48} {'best':>8} {'median':>8}")
    for label, (best, median) in rows:
        print(f"{label:48} {best:8.3f}s {median:7.3f}s")


if __name__ == "__main__":
    main()
