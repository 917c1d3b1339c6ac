"""ddp-migrate: move PyTorch training scripts to DistributedDataParallel under torchrun."""
from migrator.api import migrate
from migrator.errors import ConfigError, IntroducedSyntaxError, MigrateError, SourceParseError
from migrator.options import Options
from migrator.rules import RULES
from migrator.types import Change, Diagnostic, Result

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
