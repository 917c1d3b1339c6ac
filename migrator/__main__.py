"""`ddp-migrate` and `python -m migrator`: the commonest run answered at once (migrator.fastpath),
any other by the CLI (migrator.cli)."""
from __future__ import annotations

import sys

from migrator.fastpath import run

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover
    from typing import Optional, Sequence


def main(argv: "Optional[Sequence[str]]" = None) -> None:
    """Console-script entry point."""
    status = run(sys.argv[1:] if argv is None else list(argv))
    if status is not None:
        sys.exit(status)
    from migrator.cli import main as cli_main

    cli_main(argv)


if __name__ == "__main__":
    main()
