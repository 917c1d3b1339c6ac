"""Imports, launch literals and the argparse arguments the script requires.

The methods of a mixin of `_Analysis` (passes.py).
"""
from __future__ import annotations

import re
from typing import List, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis.facts import ImportNames
from migrator.tree import descendants
from migrator.analysis.helpers import _is_local_rank_argument, code_of

_OPTIONAL_NARGS = re.compile(r"""^['"][?*]['"]$""")  # nargs="?" / "*": the positional may be left out


def _imported_up_front(module: cst.Module, name: str) -> bool:
    """Is `import name` among the module's opening statements (docstring, imports, constants)?"""
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine) and any(
            isinstance(small, cst.Import) and any(alias.asname is None and code_of(alias.name) == name for alias in small.names)
            for small in statement.body
        ):
            return True
        if not N.is_preamble(statement, module_level=True):
            return False
    return False


def _evaluated(node: cst.SimpleString) -> str:
    try:
        value = node.evaluated_value
    except Exception:  # noqa: BLE001 - an odd literal is simply not LOCAL_RANK
        return ""
    return value if isinstance(value, str) else ""


def _dest(call: cst.Call) -> str:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest" and isinstance(arg.value, cst.SimpleString):
            return _evaluated(arg.value)
    return "local_rank"


class ImportAnalysis:
    """Imports and the argparse arguments the script requires."""

    # -- imports -----------------------------------------------------------------------
    def import_names(self) -> ImportNames:
        bound = {qualified: local for local, qualified in self.c.imported[self.module].items()}
        torch = bound.get("torch")
        dist = bound.get("torch.distributed")
        ddp = bound.get("torch.nn.parallel.DistributedDataParallel") or bound.get(
            "torch.nn.parallel.distributed.DistributedDataParallel"
        )
        taken = self.c.bound[self.module]
        sampler = next((bound[q] for q in N.DISTRIBUTED_SAMPLER if q in bound), None)
        return ImportNames(
            torch=torch or "torch",
            torch_import_needed=torch is None,
            dist=dist or ("dist" if "dist" not in taken else f"{torch or 'torch'}.distributed"),
            dist_import_needed=dist is None and "dist" not in taken,
            ddp=ddp or ("DDP" if "DDP" not in taken else "DistributedDataParallel"),
            ddp_import_needed=ddp is None,
            # `import os` far down the file (awd-lstm imports it at line 100) comes after a module-level
            # setup: one more at the top is harmless, a NameError at start-up is not.
            os_import_needed="os" not in bound or not _imported_up_front(self.module, "os"),
            sampler=sampler or "DistributedSampler",
            sampler_import_needed=sampler is None,
        )

    def required_arguments(self) -> Tuple[str, ...]:
        """`DATA` for a positional, `--config CONFIG` for a required option, in declaration order."""
        found: List[str] = []
        for call in self.c.calls:
            if N.attribute_name(call.func) != "add_argument" or not call.args:
                continue
            first = call.args[0].value
            if not isinstance(first, cst.SimpleString) or _is_local_rank_argument(call):
                continue
            name = str(first.evaluated_value)
            keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            nargs = keywords.get("nargs")
            optional_nargs = isinstance(nargs, cst.SimpleString) and bool(_OPTIONAL_NARGS.match(nargs.value))
            if not name.startswith("-") and "default" not in keywords and not optional_nargs:
                found.append(name.upper())
            elif name.startswith("-") and N.is_name(keywords.get("required"), "True"):
                longest = max((str(a.value.evaluated_value) for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)), key=len)
                found.append(f"{longest} {longest.lstrip('-').replace('-', '_').upper()}")
        return tuple(found)

    def local_rank_arguments(self) -> Tuple[cst.Call, ...]:
        """`parser.add_argument("--local_rank", ...)` calls whose value matters under torchrun (DDP020).

        torchrun passes no --local_rank, so an optional one with a default is harmless unless the
        script reads it (to pick its GPU or rank) and nothing in the file reads LOCAL_RANK from the
        environment instead (timm, DINO and DeiT declare it and never read it; their setup reads the
        environment). A required one always matters: argparse stops the script before it starts.
        Asked twice (DDP020's facts, and DDP005's "is this a torch.distributed.launch script"): found once.
        """
        if self._local_rank_arguments is None:
            self._local_rank_arguments = self._mattering_local_rank_arguments()
        return self._local_rank_arguments

    def _mattering_local_rank_arguments(self) -> Tuple[cst.Call, ...]:
        declared = [call for call in self.c.calls if _is_local_rank_argument(call)]
        if not declared:
            return ()
        required = [call for call in declared if any(a.keyword is not None and a.keyword.value == "required" for a in call.args)]
        strings = [node for node in descendants(self.module, cst.SimpleString) if not any(self.is_inside(node, call) for call in declared)]
        if any("LOCAL_RANK" == _evaluated(node) for node in strings):
            return tuple(required)
        dests = {_dest(call) for call in declared}
        reads = any(
            attr.attr.value in dests and not self._is_assignment_target(attr)
            for attr in descendants(self.module, cst.Attribute)
        )
        return tuple(declared) if reads else tuple(required)

    def _is_assignment_target(self, attr: cst.Attribute) -> bool:
        """`args.local_rank = ...` writes the value; it is not a read."""
        statement = self.statement_of(attr)
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for small in statement.body:
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target] if isinstance(small, (cst.AnnAssign, cst.AugAssign)) else []
            if any(t is attr for t in targets):
                return True
        return False
