"""Where a hung process is: its faulthandler dump, read back.

faulthandler writes one block per thread, most recent call first:

    Current thread 0x00007f... (most recent call first):
      File "/work/train.py", line 30 in main
      File "/work/train.py", line 41 in <module>

The block of the thread that runs the script is the one with a `<module>` frame of a file (not
`<string>`); its innermost frame of the user's code says where the script is, and its innermost
frame of all where it waits (a collective, a queue, a sleep).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import List, Optional, Sequence

_FRAME = re.compile(r'^\s*File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.+)$')
_LIBRARY = ("site-packages", "dist-packages")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def short(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line} in {self.func}"


def threads(dump: str) -> List[List[Frame]]:
    """The frames of each thread in a dump, innermost first."""
    blocks: List[List[Frame]] = []
    for line in dump.splitlines():
        if line.startswith(("Thread ", "Current thread ")):
            blocks.append([])
            continue
        match = _FRAME.match(line)
        if match and blocks:
            blocks[-1].append(Frame(match["file"], int(match["line"]), match["func"]))
    return blocks


def main_thread(dump: str) -> List[Frame]:
    """The thread that runs the script (see the module docstring); else the first one."""
    found = threads(dump)
    for frames in found:
        if any(f.func == "<module>" and not f.file.startswith("<") for f in frames):
            return frames
    return found[0] if found else []


def _is_user(frame: Frame, roots: Sequence[str]) -> bool:
    if frame.file.startswith("<"):
        return False
    path = os.path.realpath(frame.file)
    parts = path.split(os.sep)
    return any(path.startswith(root.rstrip(os.sep) + os.sep) for root in roots) and not set(_LIBRARY) & set(parts)


def summary(dump: str, roots: Sequence[str]) -> str:
    """`train.py:30 in main, in distributed_c10d.py:4811 in barrier`: where the script's own code
    is, and the innermost call it waits in (when that is elsewhere)."""
    frames = main_thread(dump)
    if not frames:
        return "no stack"
    user: Optional[Frame] = next((f for f in frames if _is_user(f, roots)), None)
    innermost = frames[0]
    if user is None:
        return innermost.short()
    if user == innermost:
        return user.short()
    return f"{user.short()}, waiting in {innermost.short()}"
