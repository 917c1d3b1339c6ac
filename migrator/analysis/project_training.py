"""Training that a script hands to its project's modules: `train(config, model, train_iter)`
imported from train_eval.py builds the optimizer from `model.parameters()` and runs the loop.

The per-file engine traces a trained model from the optimizer built on its parameters. When that
optimizer is built in a function (or a class's `__init__`) of another module of the project, the
script only builds the model and passes it on; without this, the script is "not training" and
stays unmigrated while its model trains on one GPU. A call whose callee builds an optimizer from
one of its parameters counts as the script's optimizer (like `get_optimizer(args, model)`), and the
argument passed there is the trained model. What each project function trains is read by
migrator.graph.training; this module finds the calls and the arguments passed, on the syntax tree.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from migrator import names as N
from migrator.analysis.distributed import _imported_names
from migrator.graph.bindings import dotted_name
from migrator.context import FileContext
from migrator.graph.training import LOADER, MOVED, trained_parameters


def trained_arguments(analysis_c, context: Optional[FileContext]) -> Dict[cst.Call, Tuple[List[cst.BaseExpression], List[cst.BaseExpression], bool]]:
    """Calls to project functions/classes that train an argument: call -> (the models passed, the
    loaders passed where the callee loops over them to train (empty when not known),
    whether the callee moves the model to a device itself)."""
    if context is None or context.modules is None:
        return {}
    imported = _imported_names(analysis_c.import_statements, context.package)
    found: Dict[cst.Call, Tuple[List[cst.BaseExpression], List[cst.BaseExpression], bool]] = {}
    for call in analysis_c.calls:
        dotted = dotted_name(call.func)
        if not dotted:
            continue
        head, _, rest = dotted.partition(".")
        source = imported.get(head)
        if source is None or source.split(".")[0] in N.NOT_PROJECT_PACKAGES or source.startswith("torch"):
            continue
        qualified = f"{source}.{rest}" if rest else source
        trained = trained_parameters(context.modules.roots, qualified)
        if trained:
            models = _arguments_for(call, tuple(p for p in trained if not p.startswith((LOADER, MOVED))))
            loaders = _arguments_for(call, tuple(p[len(LOADER):] for p in trained if p.startswith(LOADER)))
            if models:
                found[call] = (models, loaders, any(p.startswith(MOVED) for p in trained))
    return found


def _arguments_for(call: cst.Call, parameters: Tuple[str, ...]) -> List[cst.BaseExpression]:
    """The expressions passed for `parameters` (positions are encoded as "#0", "#1", ...)."""
    values = []
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    for parameter in parameters:
        if parameter.startswith("#"):
            index = int(parameter[1:])
            if index < len(positional):
                values.append(positional[index].value)
        else:
            values += [arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == parameter]
    return [v for v in values if isinstance(v, (cst.Name, cst.Attribute))]


