"""Project mode: a training script and the modules of its project it trains through."""
from migrator.project.rewrite import ModuleRole, migrate_module

__all__ = ["ModuleRole", "migrate_module"]
