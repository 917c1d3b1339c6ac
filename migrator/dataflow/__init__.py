"""Where data and models flow: which loaders train, which loops are epochs, who writes checkpoints.

Part of the single analysis: built from the same collected sites and name index, never a new
traversal of the whole tree. `Flow` combines one mixin class per concern over a shared core.

Layout, one concern per module:
  core.py     the facts (LoaderFact, EpochHook, SaveSite, ModelUse), FlowBase: construction and the
              navigation every concern shares (callees, parameters, loops over a name, training),
              and the helpers several concerns use (code_of, _iterated)
  loaders.py  LoaderFlow: DataLoaders, their loops, samplers and why one is declined
  epochs.py   EpochFlow: epoch loops, set_epoch hooks, gradient accumulation
  saves.py    SaveFlow: checkpoint writes, per-step prints and logs, rank checks and barriers
  models.py   ModelFlow: uses and reassignments of a model after it is wrapped
  penalty.py  PenaltyFlow: backward passes of a gradient penalty alone (WGAN-GP as an update of its own)
  draws.py    DrawFlow: random draws (a split, a shuffle of indices) that decide which samples a
              loader reads, and whether their generator is seeded on every rank before them
"""
from migrator.dataflow.draws import DrawFlow, SplitDraw
from migrator.dataflow.core import EpochHook, LoaderFact, ModelUse, SaveSite, Statement, code_of, loops_over, walked_by
from migrator.dataflow.epochs import EpochFlow
from migrator.dataflow.loaders import LoaderFlow
from migrator.dataflow.models import ModelFlow
from migrator.dataflow.penalty import PenaltyFlow
from migrator.dataflow.saves import SaveFlow


class Flow(LoaderFlow, SaveFlow, ModelFlow, PenaltyFlow, DrawFlow):
    """The flow facts of one script: loaders (with their epochs), saves, model uses and the draws
    that split the data."""


__all__ = [
    "DrawFlow",
    "EpochFlow",
    "EpochHook",
    "Flow",
    "LoaderFact",
    "LoaderFlow",
    "ModelFlow",
    "ModelUse",
    "PenaltyFlow",
    "SaveFlow",
    "SaveSite",
    "SplitDraw",
    "Statement",
    "code_of",
    "loops_over",
    "walked_by",
]
