"""One read-only pass over a script: everything the rules need to know, found once.

Rules never walk the tree themselves; they read `ScriptFacts`, and ask the graph it carries (the
binding index and the value flow, migrator.graph). Names are resolved through the file's imports
by the binding index, so `nn.DataParallel`, `torch.nn.DataParallel` and
`from torch.nn import DataParallel as DP` are the same thing here.

Layout, one concern per module:
  facts.py      the frozen facts (ScriptFacts and its parts); positions come from migrator.positions
  collector.py  the single traversal (_Collector)
  passes.py     _Analysis: tree helpers, the assembled facts and the flow facts; analyze()
  entry.py      the entry point; models.py models and DataParallel; devices.py devices and .cuda();
  imports.py    imports and required arguments (entry, models, devices, imports: mixins of _Analysis)
  helpers.py    small syntactic helpers
"""
from migrator.analysis.collector import _Collector
from migrator.analysis.facts import (
    CudaCall,
    DataParallelSite,
    DeviceLiteral,
    GpuIndex,
    EntryPoint,
    HelperDevice,
    ImportNames,
    ModelFact,
    ScriptFacts,
)
from migrator.positions import LazyPositions, _OffsetState
from migrator.analysis.helpers import Block, Statement, code_of, code_of_target
from migrator.analysis.passes import _Analysis, analyze
from migrator.dataflow import LoaderFact, ModelUse, SaveSite, SplitDraw

__all__ = [
    "Block",
    "CudaCall",
    "DataParallelSite",
    "DeviceLiteral",
    "GpuIndex",
    "EntryPoint",
    "HelperDevice",
    "ImportNames",
    "LazyPositions",
    "LoaderFact",
    "ModelFact",
    "ModelUse",
    "SaveSite",
    "ScriptFacts",
    "SplitDraw",
    "Statement",
    "_Analysis",
    "_Collector",
    "_OffsetState",
    "analyze",
    "code_of",
    "code_of_target",
]
