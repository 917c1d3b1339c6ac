"""Small syntactic helpers shared by the analysis modules."""
from __future__ import annotations

from typing import List, Set, Union

import libcst as cst

from migrator.names import attribute_name
from migrator.tree import descendants

Block = Union[cst.Module, cst.IndentedBlock]
Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]


_EMPTY_MODULE = cst.Module(body=[])
_NO_SPACE = cst.SimpleWhitespace("")


def code_of(node: cst.CSTNode) -> str:
    """The node's exact source text. Names and plain dotted chains (`self.model`, most of what is
    asked) are read off the nodes; anything else goes through LibCST's code generation."""
    plain = _plain_dotted(node)
    return plain if plain is not None else _EMPTY_MODULE.code_for_node(node)


def _plain_dotted(node: cst.CSTNode):
    parts = []
    while type(node) is cst.Attribute:
        dot = node.dot
        if node.lpar or dot.whitespace_before != _NO_SPACE or dot.whitespace_after != _NO_SPACE:  # type: ignore[union-attr]
            return None
        parts.append(node.attr.value)
        node = node.value
    if type(node) is not cst.Name or node.lpar:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


# --------------------------------------------------------------------------- small helpers


def _parameter_owners(optimizer_call: cst.Call) -> List[str]:
    """`model` in optim.SGD(model.parameters()), [{"params": model.parameters()}], filter(..., m.parameters())."""
    if not optimizer_call.args:
        return []
    return _parameter_owners_in(optimizer_call.args[0].value)


def _parameter_owners_in(params: cst.CSTNode) -> List[str]:
    owners: List[str] = []
    for call in descendants(params, cst.Call):
        if attribute_name(call.func) not in ("parameters", "named_parameters"):
            continue
        owner = code_of(call.func.value)  # type: ignore[attr-defined]
        if owner not in owners:
            owners.append(owner)
    return owners


def _called_names(node: cst.CSTNode) -> List[str]:
    return [call.func.value for call in descendants(node, cst.Call) if isinstance(call.func, cst.Name)]


def _referenced_names(node: cst.CSTNode) -> Set[str]:
    return {name.value for name in descendants(node, cst.Name)}


def code_of_target(statement: cst.SimpleStatementLine) -> str:
    small = statement.body[0]
    target = small.targets[0].target if isinstance(small, cst.Assign) else getattr(small, "target", None)
    return code_of(target) if target is not None else ""


def _returns(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(isinstance(s, cst.Return) for s in statement.body)


def _raw_text(node: cst.CSTNode) -> str:
    return node.raw_value if isinstance(node, cst.SimpleString) else code_of(node)


def _is_local_rank_argument(call: cst.Call) -> bool:
    if attribute_name(call.func) != "add_argument":
        return False
    return any(
        isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in ("--local_rank", "--local-rank")
        for arg in call.args
        if arg.keyword is None
    )


def _has_map_location(call: cst.Call) -> bool:
    keywords = {arg.keyword.value for arg in call.args if arg.keyword is not None}
    positional = [arg for arg in call.args if arg.keyword is None]
    return "map_location" in keywords or len(positional) > 1


def _strings_in(node: cst.CSTNode) -> List[cst.SimpleString]:
    return list(descendants(node, cst.SimpleString))
