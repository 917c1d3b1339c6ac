"""ddp-migrate: move PyTorch training scripts to DistributedDataParallel under torchrun.

The public names load on first use (PEP 562): `import migrator` alone, or the CLI starting up on
files that have nothing to migrate, does not pay for importing LibCST and the rules.
"""
from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: `import migrator` (and the CLI's start-up) does not load typing

__version__ = "0.1.0"

__all__ = [
    "migrate",
    "Options",
    "Result",
    "Change",
    "Diagnostic",
    "MigrateError",
    "SourceParseError",
    "IntroducedSyntaxError",
    "ConfigError",
    "RULES",
    "__version__",
]

_EXPORTS = {
    "migrate": "migrator.api",
    "Options": "migrator.options",
    "Result": "migrator.types",
    "Change": "migrator.types",
    "Diagnostic": "migrator.types",
    "MigrateError": "migrator.errors",
    "SourceParseError": "migrator.errors",
    "IntroducedSyntaxError": "migrator.errors",
    "ConfigError": "migrator.errors",
    "RULES": "migrator.rules",
}

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from typing import Any, List

    from migrator.api import migrate
    from migrator.errors import ConfigError, IntroducedSyntaxError, MigrateError, SourceParseError
    from migrator.options import Options
    from migrator.rules import RULES
    from migrator.types import Change, Diagnostic, Result


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'migrator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))
