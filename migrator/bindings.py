"""Parents, scopes and import-resolved names, gathered during the analysis' single traversal.

Why not libcst's ScopeProvider / QualifiedNameProvider / ParentNodeProvider: on a 1,000-line
script they cost about 1.5 s together (measured with scripts/bench.py), three times the whole
budget for migrating such a file, and ddp-migrate asks them only a few narrow questions:
"which import does the callee `nn.DataParallel` come from", "is `device` bound in this
function", "what is this node's parent". This visitor answers exactly those, in the traversal
the analysis makes anyway.

Resolution follows Python's rules where they matter here: a name bound in a function (other
than by an import) shadows the module's import of the same name; class bodies are not
enclosing scopes for their methods; names imported anywhere in the module count as module
imports (scripts import inside `if __name__ == "__main__":` too).
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Set

import libcst as cst

from migrator.tree import Visitor

ScopeOwner = cst.CSTNode  # a FunctionDef, Lambda, ClassDef or the Module
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def dotted_name(node: cst.CSTNode) -> Optional[str]:
    """`torch.nn.DataParallel` for a Name/Attribute chain; None for anything else."""
    parts: List[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


class NameIndex(Visitor):
    """Base visitor: subclasses add their own visit_* methods and call super() where they override."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parents: Dict[cst.CSTNode, cst.CSTNode] = {}
        self._stack: List[cst.CSTNode] = []
        self._owners: List[ScopeOwner] = [module]
        self.owners: Dict[cst.CSTNode, ScopeOwner] = {}
        self.bound: Dict[ScopeOwner, Set[str]] = {module: set()}
        self.params: Dict[ScopeOwner, Set[str]] = {}
        self.imported: Dict[ScopeOwner, Dict[str, str]] = {module: {}}
        self.star_imports = False  # `from x import *` somewhere: names may come from it
        self.import_statements: List[cst.CSTNode] = []  # every Import / ImportFrom, relative ones too
        self.order: Dict[cst.CSTNode, int] = {}  # source order: when the traversal reached a node
        self.ends: Dict[cst.CSTNode, int] = {}  # ... and when it left it (after all its children)
        self._counter = 0

    # -- traversal bookkeeping ----------------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._stack:
            self.parents[node] = self._stack[-1]
        self._stack.append(node)
        self._counter += 1
        self.order[node] = self._counter
        self.owners[node] = self._owners[-1]
        # type() instead of isinstance(): libcst nodes are ABCs, and this runs for every node.
        if type(node) in _SCOPES:
            if type(node) is not cst.Lambda:
                self.bound[self._owners[-1]].add(node.name.value)
            self._owners.append(node)
            self.bound.setdefault(node, set())
            self.imported.setdefault(node, {})
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self._stack.pop()
        self.ends[original_node] = self._counter
        if original_node is self._owners[-1] and original_node is not self.module:
            self._owners.pop()

    # -- bindings --------------------------------------------------------------------------
    def _bind_target(self, target: cst.CSTNode) -> None:
        if isinstance(target, cst.Name):
            self.bound[self._owners[-1]].add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_target(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        if not isinstance(self.parents.get(node), cst.ImportAlias):
            self._bind_target(node.name)

    def visit_Param(self, node: cst.Param) -> None:
        self.params.setdefault(self._owners[-1], set()).add(node.name.value)
        self.bound[self._owners[-1]].add(node.name.value)

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self.bound[self._owners[-1]].discard(item.name.value)

    def visit_Import(self, node: cst.Import) -> None:
        self.import_statements.append(node)
        table = self.imported[self.module]
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            if alias.asname is not None:
                local = alias.asname.name.value  # type: ignore[attr-defined]
                table.setdefault(local, full)
            else:
                local = full.split(".")[0]
                table.setdefault(local, local)
                table.setdefault(full, full)  # `import torch.distributed`: torch.distributed is usable as is
            self.bound[self.module].add(local)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.import_statements.append(node)
        if isinstance(node.names, cst.ImportStar):
            self.star_imports = True
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted_name(node.module) or ""
        table = self.imported[self.module]
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            local = alias.asname.name.value if alias.asname is not None else name  # type: ignore[attr-defined]
            table.setdefault(local, f"{module}.{name}")
            self.bound[self.module].add(local)

    # -- questions -------------------------------------------------------------------------
    def owner_of(self, node: cst.CSTNode) -> ScopeOwner:
        return self.owners.get(node, self.module)

    def local_names(self, owner: ScopeOwner) -> FrozenSet[str]:
        return frozenset(self.bound.get(owner, ()))

    def resolve(self, node: cst.CSTNode) -> Optional[str]:
        """The qualified name of a Name/Attribute chain rooted in an import, else None."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        owner = self.owner_of(node)
        if owner is not self.module and head in self.bound.get(owner, ()):
            return None  # a local variable shadows the module's import
        qualified = self.imported[self.module].get(head)
        if qualified is None and head == "torch" and self.star_imports and "torch" not in self.bound.get(self.module, ()):
            # `from utils import *` handing over `torch` (tutorial repositories do this): an unbound
            # `torch` in a file that star-imports can only be the torch module.
            qualified = "torch"
        if qualified is None:
            return None
        return f"{qualified}.{rest}" if rest else qualified
