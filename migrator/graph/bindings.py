"""The binding index: every binding of the file, with its scope, its kind and its references.

Gathered during the analysis' single traversal (migrator.tree), in the shape of ruff's semantic
model (`crates/ruff_python_semantic/src/binding.rs`) and LibCST's ScopeProvider: a `Binding` is
one place a name gets a value (an assignment, a parameter, `self.x = ...` in a method, an import,
a loop target, an element of an unpacking, `with ... as`, `except ... as`, a def or a class), in
one scope; a reference is a Name that reads it. A value is identified by its bindings, never by
how it is spelled: a local `model` inside `forward()` is another binding than the script's
`model`, and `self.model` is one binding per class, written in any of its methods.

Resolution follows Python's rules: a name bound anywhere in a function is local to all of it
(`global`/`nonlocal` aside); class bodies are not enclosing scopes for their methods; a
comprehension's targets are its own; decorators, defaults and annotations are read in the
scope around the function. Like ruff's model, and unlike a data-flow analysis, it does not say
*which* of a scope's bindings of a name a reference reads: all of them (source order tells the
rest). `self.x` is resolved within the class whose method reads it.

Why not libcst's ScopeProvider / QualifiedNameProvider / ParentNodeProvider: on a 1,000-line
script they cost about 1.5 s together (measured with scripts/bench.py), three times the whole
budget for migrating such a file. tests/test_bindings.py holds this index to ScopeProvider's
answers on every fixture.

`resolve()` answers a narrower question the rules ask everywhere: the qualified name of a
Name/Attribute chain rooted in an import (`nn.DataParallel` -> `torch.nn.DataParallel`). Names
imported anywhere in the module count as module imports there (scripts import inside
`if __name__ == "__main__":` too).
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from migrator.tree import Visitor, descendants

ScopeOwner = cst.CSTNode  # a FunctionDef, Lambda, ClassDef or the Module
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


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


class Binding:
    """One place a name gets a value.

    name: `model`, or `self.model` for an attribute of `self` (then `scope` is the class).
    kind: assignment, unpacking, attribute, parameter, import, loop, with, except, function, class.
    node: what is bound (the target Name/Attribute, the Param, the def, the import alias).
    statement: the statement that binds it. value: the expression it is given, where there is one
    (the right-hand side of an assignment, the iterable of a loop, the context manager of a with),
    and path: where in that value an unpacked element comes from (`a, (b, c) = v`: c is (1, 1)).
    """

    __slots__ = ("name", "scope", "kind", "node", "statement", "value", "path", "references", "position")

    def __init__(self, name: str, scope: ScopeOwner, kind: str, node: cst.CSTNode, statement: Optional[cst.CSTNode],
                 value: Optional[cst.BaseExpression] = None, path: Tuple[int, ...] = ()) -> None:
        self.name, self.scope, self.kind, self.node = name, scope, kind, node
        self.statement, self.value, self.path = statement, value, path
        self.references: List[cst.CSTNode] = []
        self.position = 0  # where in the source it takes effect (after the value it is given)

    def __repr__(self) -> str:
        return f"Binding({self.name!r}, {self.kind}, {type(self.scope).__name__})"

    def given(self) -> Optional[cst.BaseExpression]:
        """The expression this binding is given, as written: its value, or for an element of an
        unpacking the element of a literal tuple or list at its path (`a, n, bar = 0.0, 0,
        tqdm(loader)`: bar is given `tqdm(loader)`); None where the value is not written out
        element by element (`a, b = make()`: the flow follows those, migrator.graph.flow)."""
        value = self.value
        for index in self.path:
            if not isinstance(value, (cst.Tuple, cst.List)) or index >= len(value.elements) or any(
                    isinstance(e, cst.StarredElement) for e in value.elements):
                return None
            value = value.elements[index].value
        return value


class NameIndex(Visitor):
    """The traversal's bookkeeping: parents, source order, scopes, bindings and references.

    Subclasses add their own visit_* methods and call super() where they override."""

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
        # -- the binding index
        self.bindings: Dict[ScopeOwner, Dict[str, List[Binding]]] = {module: {}}
        self.binding_at: Dict[cst.CSTNode, Binding] = {}  # a bound node -> its binding
        self.scope_parent: Dict[ScopeOwner, Optional[ScopeOwner]] = {module: None}
        self._not_read: Set[cst.CSTNode] = set()  # Names that are no reference (attr, keyword, targets...)
        self._declared: Dict[ScopeOwner, Dict[str, str]] = {}  # `global x` / `nonlocal x` per scope
        self._comprehensions: List[cst.CSTNode] = []
        self._outer: Dict[cst.CSTNode, ScopeOwner] = {}  # defaults, annotations, decorators: read outside the def
        self._reading_in: List[Tuple[ScopeOwner, int]] = []  # (the scope read in, the depth of the def)
        self._reads: List[Tuple[cst.CSTNode, str, ScopeOwner, Tuple[cst.CSTNode, ...]]] = []
        self.refers: Dict[cst.CSTNode, Tuple[Binding, ...]] = {}  # a reference -> the bindings it reads

    # -- traversal bookkeeping ----------------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._stack:
            self.parents[node] = self._stack[-1]
        self._stack.append(node)
        self._counter += 1
        self.order[node] = self._counter
        owner = self._owners[-1]
        self.owners[node] = owner
        # type() instead of isinstance(): libcst nodes are ABCs, and this runs for every node.
        kind = type(node)
        if node in self._outer:
            self._reading_in.append((self._outer[node], len(self._owners)))
        if kind is cst.Name:
            if node not in self._not_read:
                self._read(node, node.value)
        elif kind is cst.Attribute:
            self._not_read.add(node.attr)
            if type(node.value) is cst.Name and node.value.value == "self" and node not in self._not_read:
                self._read(node, "self." + node.attr.value)
        elif kind in _SCOPES:
            if kind is not cst.Lambda:
                self.bound[owner].add(node.name.value)
                self._not_read.add(node.name)
                self._bind(node.name.value, "function" if kind is cst.FunctionDef else "class", node, node)
                self._read_outside(node, owner)
            self._owners.append(node)
            self.bound.setdefault(node, set())
            self.imported.setdefault(node, {})
            self.bindings.setdefault(node, {})
            self.scope_parent[node] = owner
        elif kind in _COMPREHENSIONS:
            self._comprehensions.append(node)
            self.bindings.setdefault(node, {})
            self.scope_parent[node] = owner
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self._stack.pop()
        self.ends[original_node] = self._counter
        if original_node is self._owners[-1] and original_node is not self.module:
            self._owners.pop()
        elif self._comprehensions and original_node is self._comprehensions[-1]:
            self._comprehensions.pop()
        if self._reading_in and original_node in self._outer:
            self._reading_in.pop()

    def _read(self, node: cst.CSTNode, name: str) -> None:
        if self._reading_in and self._reading_in[-1][1] == len(self._owners):  # not in a lambda of a default
            owner, comprehensions = self._reading_in[-1][0], ()
        else:
            owner, comprehensions = self._owners[-1], tuple(self._comprehensions)
        self._reads.append((node, name, owner, comprehensions))

    def _read_outside(self, node: cst.CSTNode, owner: ScopeOwner) -> None:
        """Decorators, defaults and annotations of a def are evaluated in the scope around it."""
        roots: List[cst.CSTNode] = [d.decorator for d in node.decorators]
        if isinstance(node, cst.FunctionDef):
            for param in _params(node.params):
                roots += [x for x in (param.default, param.annotation) if x is not None]
            if node.returns is not None:
                roots.append(node.returns)
        else:
            roots += [arg.value for arg in node.bases] + [arg.value for arg in node.keywords]
        for root in roots:
            self._outer[root] = owner

    # -- bindings --------------------------------------------------------------------------
    def _bind(self, name: str, kind: str, node: cst.CSTNode, statement: Optional[cst.CSTNode],
              value: Optional[cst.BaseExpression] = None, path: Tuple[int, ...] = (), scope: Optional[ScopeOwner] = None) -> None:
        if scope is None:
            scope = self._owners[-1]
            declared = self._declared.get(scope, {}).get(name)
            if declared == "global":
                scope = self.module
            elif declared == "nonlocal":
                scope = self._enclosing_function(scope, name)
        binding = Binding(name, scope, kind, node, statement, value, path)
        self.bindings.setdefault(scope, {}).setdefault(name, []).append(binding)
        self.binding_at[node] = binding

    def _enclosing_function(self, scope: ScopeOwner, name: str) -> ScopeOwner:
        parent = self.scope_parent.get(scope)
        while parent is not None and parent is not self.module:
            if not isinstance(parent, cst.ClassDef) and name in self.bindings.get(parent, {}):
                return parent
            parent = self.scope_parent.get(parent)
        return scope

    def _bind_target(self, target: cst.CSTNode, kind: str = "assignment", statement: Optional[cst.CSTNode] = None,
                     value: Optional[cst.BaseExpression] = None, path: Tuple[int, ...] = (),
                     scope: Optional[ScopeOwner] = None) -> None:
        if isinstance(target, cst.Name):
            if scope is None:
                self.bound[self._owners[-1]].add(target.value)
            self._not_read.add(target)
            self._bind(target.value, "unpacking" if path and kind == "assignment" else kind, target, statement, value, path, scope)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for index, element in enumerate(target.elements):
                self._bind_target(element.value, kind, statement, value, (*path, index), scope)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, kind, statement, None, (), scope)
        elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and target.value.value == "self":
            cls = self._method_class()
            if cls is not None:
                self._not_read.add(target)
                self._bind("self." + target.attr.value, "attribute" if not path else "unpacking", target, statement,
                           value, path, scope=cls)

    def _method_class(self) -> Optional[cst.ClassDef]:
        """The class whose method the traversal is in (`self` is its first parameter)."""
        for owner in reversed(self._owners):
            if isinstance(owner, cst.FunctionDef):
                parent = self.scope_parent.get(owner)
                if isinstance(parent, cst.ClassDef):
                    return parent
            elif isinstance(owner, cst.ClassDef):
                return None
        return None

    def _statement(self) -> Optional[cst.CSTNode]:
        for node in reversed(self._stack):
            if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return node
        return None

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target, "assignment", self._statement(), node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target, "assignment", self._statement(), node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        # `x += 1` reads x too: the target stays a reference, and is a binding of its own
        self._bind_target(node.target, "assignment", self._statement(), None)
        self._not_read.discard(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_target(node.target, "assignment", self._statement(), node.value)

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target, "loop", node, node.iter)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind_target(node.target, "loop", node, node.iter, scope=self._comprehensions[-1])

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_target(node.asname.name, "with", self._statement(), node.item)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._bind_target(node.name.name, "except", node)

    def visit_Param(self, node: cst.Param) -> None:
        owner = self._owners[-1]
        self.params.setdefault(owner, set()).add(node.name.value)
        self.bound[owner].add(node.name.value)
        self._not_read.add(node.name)
        self._bind(node.name.value, "parameter", node, owner)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_read.add(node.keyword)

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self.bound[self._owners[-1]].discard(item.name.value)
            self._declared.setdefault(self._owners[-1], {})[item.name.value] = "global"
            self._not_read.add(item.name)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        for item in node.names:
            self._declared.setdefault(self._owners[-1], {})[item.name.value] = "nonlocal"
            self._not_read.add(item.name)

    def visit_Import(self, node: cst.Import) -> None:
        self.import_statements.append(node)
        table = self.imported[self.module]
        for alias in node.names:
            self._not_read.update(descendants(alias, cst.Name))
            full = dotted_name(alias.name) or ""
            if alias.asname is not None:
                local = alias.asname.name.value  # type: ignore[attr-defined]
                table.setdefault(local, full)
            else:
                local = full.split(".")[0]
                table.setdefault(local, local)
                table.setdefault(full, full)  # `import torch.distributed`: torch.distributed is usable as is
            self.bound[self.module].add(local)
            self._bind(local, "import", alias, self._statement())

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.import_statements.append(node)
        if node.module is not None:
            self._not_read.update(descendants(node.module, cst.Name))
        if isinstance(node.names, cst.ImportStar):
            self.star_imports = True
            return
        for alias in node.names:
            self._not_read.update(descendants(alias, cst.Name))
            name = dotted_name(alias.name) or ""
            local = alias.asname.name.value if alias.asname is not None else name  # type: ignore[attr-defined]
            self._bind(local, "import", alias, self._statement())
            if node.relative or node.module is None:
                continue
            self.imported[self.module].setdefault(local, f"{dotted_name(node.module)}.{name}")
            self.bound[self.module].add(local)

    # -- after the traversal -----------------------------------------------------------
    def resolve_references(self) -> None:
        """Each reference to the bindings it reads (once every binding of the file is known)."""
        for names in self.bindings.values():
            for found in names.values():
                for binding in found:
                    binding.position = self._takes_effect(binding)
        for node, name, owner, comprehensions in self._reads:
            found = self._lookup(name, owner, comprehensions, self.order[node])
            if found:
                self.refers[node] = found
                for binding in found:
                    binding.references.append(node)
        self._reads = []

    def _takes_effect(self, binding: Binding) -> int:
        """A target is bound once its value is computed (`model = DDP(model)` reads the old one)."""
        after = binding.value if binding.kind != "parameter" else None
        if binding.kind == "assignment" and binding.value is None:  # `x += 1`
            after = self.parents.get(binding.node)
        return self.ends.get(after, 0) + 1 if after is not None else self.order.get(binding.node, 0)

    def _lookup(self, name: str, owner: ScopeOwner, comprehensions: Tuple[cst.CSTNode, ...], at: int) -> Tuple[Binding, ...]:
        """As LibCST's ScopeProvider: in the reader's own scope, the bindings made before the
        read (else the enclosing scopes'); in an enclosing scope, all of them (a function runs
        later than it is defined)."""
        for comprehension in reversed(comprehensions):
            found = self.bindings[comprehension].get(name)
            if found:
                return tuple(found)
        if name.startswith("self."):
            scope: Optional[ScopeOwner] = owner
            while scope is not None and not isinstance(scope, cst.ClassDef):
                scope = self.scope_parent.get(scope)
            return tuple(self.bindings[scope].get(name, ())) if scope is not None else ()
        scope, first = owner, True
        while scope is not None:
            if first or not isinstance(scope, cst.ClassDef):
                found = self.bindings[scope].get(name)
                if found and first:
                    found = [b for b in found if b.position <= at]
                if found:
                    return tuple(found)
            scope, first = self.scope_parent.get(scope), False
        return ()

    # -- questions -------------------------------------------------------------------------
    def owner_of(self, node: cst.CSTNode) -> ScopeOwner:
        return self.owners.get(node, self.module)

    def local_names(self, owner: ScopeOwner) -> FrozenSet[str]:
        return frozenset(self.bound.get(owner, ()))

    def visible(self, name: str, scope: ScopeOwner) -> Tuple[Binding, ...]:
        """The bindings `name` may read anywhere in `scope` (not only those before some point)."""
        return self._lookup(name, scope, (), 1 << 62)

    def bound_after(self, name: str, statement: cst.CSTNode) -> bool:
        """Can code written right after `statement` read `name`: a binding in its scope made by
        then, or one in an enclosing scope (any: a function runs after its module is read)?"""
        return bool(self._lookup(name, self.owner_of(statement), (), self.ends.get(statement, 0) + 1))

    def holding(self, name: str, scope: ScopeOwner) -> List[Binding]:
        """The bindings of `name` that may hold a value made at run time where `scope` reads it
        (`self.x`: the class's); not an import, a def or a class that share its name."""
        if name.startswith("self."):
            cls = scope
            while cls is not None and not isinstance(cls, cst.ClassDef):
                cls = self.scope_parent.get(cls)
            found: Tuple[Binding, ...] = tuple(self.bindings.get(cls, {}).get(name, ())) if cls is not None else ()
        else:
            found = self.visible(name, scope) if "." not in name else ()
        return [b for b in found if b.kind not in ("import", "function", "class")]

    def bindings_of(self, node: cst.CSTNode) -> Tuple[Binding, ...]:
        """What `node` is: the bindings a reference reads, or the binding a target makes."""
        found = self.refers.get(node)
        if found is not None:
            return found
        binding = self.binding_at.get(node)
        return (binding,) if binding is not None else ()

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


def _params(params: cst.Parameters) -> List[cst.Param]:
    star = [params.star_arg] if isinstance(params.star_arg, cst.Param) else []
    kwargs = [params.star_kwarg] if params.star_kwarg is not None else []
    return [*params.posonly_params, *params.params, *star, *params.kwonly_params, *kwargs]
