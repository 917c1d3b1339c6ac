"""The pure core: migrate(source, options) -> Result. No I/O, no printing."""
from __future__ import annotations

from typing import Optional

from migrator.options import Options
from migrator.types import Result


def migrate(source: str, options: Optional[Options] = None) -> Result:
    """Return the DDP version of `source` (unchanged when there is nothing to do).

    Raises SourceParseError when `source` is not valid Python 3, IntroducedSyntaxError
    if the engine would produce code that does not parse (a bug; nothing is written).
    """
    return Result(code=source, original=source)  # engine lands in the next commit
