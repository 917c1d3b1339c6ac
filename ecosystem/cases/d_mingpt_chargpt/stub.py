# Stub for karpathy/minGPT projects/chargpt/chargpt.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * `pip install -e .` (the README's install step, which makes the package `mingpt` importable from
#     projects/chargpt/): the folder above the working directory that holds setup.py and mingpt/ (the case's
#     tree root) is put on sys.path. No file of the package is changed.
#   * input.txt (tiny-shakespeare, downloaded by hand per the project's readme): open("input.txt") for reading
#     returns an in-memory text of 80 characters instead: "O God, O God!" (the script's sampling prompt, so
#     every prompt character is in the vocabulary) followed by 67 seeded random characters from a small
#     alphabet. With --data.block_size=16 CharDataset has 80 - 16 = 64 samples. Any other open() is the real
#     one; nothing is written to disk.
import builtins
import io
import os
import random
import sys

TEXT_LEN = 80
PROMPT = "O God, O God!"
ALPHABET = "abcdefghilmnorstuwy ,.!\nOGT"


def _tree_root():
    d = os.getcwd()
    for _ in range(4):
        if os.path.isdir(os.path.join(d, "mingpt")) and os.path.exists(os.path.join(d, "setup.py")):
            return d
        d = os.path.dirname(d)
    return None


_root = _tree_root()
if _root and _root not in sys.path:
    sys.path.insert(1, _root)

_rng = random.Random(4242)
_TEXT = PROMPT + "".join(_rng.choice(ALPHABET) for _ in range(TEXT_LEN - len(PROMPT)))
_real_open = builtins.open


def _open(file, mode="r", *args, **kwargs):
    if isinstance(file, str) and os.path.basename(file) == "input.txt" and mode in ("r", "rt"):
        return io.StringIO(_TEXT)
    return _real_open(file, mode, *args, **kwargs)


builtins.open = _open
