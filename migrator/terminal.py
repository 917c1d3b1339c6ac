"""Whether a stream takes colour, decided as rich decides it, without importing rich (or typing).

Shared by render.py (everything the user sees) and fastpath.py (the start-up path that must not
load the rest of the CLI).
"""
from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import IO

RESET = "\x1b[0m"
BOLD = "1"


def wants_color(stream: "IO[str]", color: str) -> bool:
    """rich's rules: NO_COLOR, FORCE_COLOR, TTY_COMPATIBLE, TERM=dumb, a tty; `color` other than auto wins."""
    if color != "auto":
        return color == "always"
    env = os.environ
    if env.get("NO_COLOR"):
        return False
    if env.get("TERM", "").strip().lower() in ("dumb", "unknown"):
        return False
    tty_compatible = env.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    if env.get("FORCE_COLOR") is not None:
        return env["FORCE_COLOR"] != ""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def styled_line(text: str, style: str, styled: bool) -> str:
    """`text` in one SGR style when `styled` (what render.Console.line writes for one segment)."""
    return f"\x1b[{style}m{text}{RESET}\n" if styled and text else text + "\n"
