"""The value flow (migrator.graph.flow): each edge kind, propagation, and what holds a value."""
from typing import List

import libcst as cst

from migrator.analysis.passes import _analysis
from migrator.graph.flow import LOADER, MODEL

SCRIPT = '''\
import torch
from torch.utils.data import DataLoader
from tqdm import tqdm


class Net(torch.nn.Module):
    def forward(self, x):
        model = x * 2  # a tensor that happens to be called `model`
        return model


class Evaluator:
    def __init__(self, net, loader):
        self.net = net
        self.loader = loader
        self.other = None

    def run(self):
        for x, y in tqdm(self.loader):
            self.net.generate(x)


def build(args):
    model = Net().to(args.device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def loaders(data):
    return DataLoader(data, shuffle=True), DataLoader(data)


def sample(net):
    return net.generate(None)


def main(args, data):
    model, optimizer = build(args)
    train_loader, val_loader = loaders(data)
    bar = tqdm(train_loader)
    for epoch in range(3):
        for x, y in bar:
            loss = model(x).sum()
    sample(model)
    Evaluator(model, val_loader).run()
    alias = model
    return alias
'''


def _flow(source: str = SCRIPT):
    module = cst.parse_module(source)
    analysis = _analysis(module)
    return analysis, analysis.values, analysis.c


def _binding(c, scope_name: str, name: str):
    for scope, names in c.bindings.items():
        if getattr(getattr(scope, "name", None), "value", "<module>") == scope_name and name in names:
            return names[name][0]
    raise AssertionError(f"no {name} in {scope_name}")


def _held(c, value) -> List[str]:
    return sorted(f"{c.owner_of(n).name.value if hasattr(c.owner_of(n), 'name') else '<module>'}:"
                  f"{cst.Module([]).code_for_node(n)}" for n in value.references())


def test_each_edge_kind_is_recorded():
    _, values, c = _flow()
    kinds = {(e.kind, e.source.name, e.target.name) for names in c.bindings.values() for bs in names.values()
             for b in bs for e in values.edges_into(b)}
    assert ("return", "model", "model") in kinds  # `return model, ...` -> `model, optimizer = build(args)`
    assert ("argument", "model", "net") in kinds  # sample(model), Evaluator(model, ...)
    assert ("alias", "net", "self.net") in kinds  # self.net = net in __init__
    assert ("wrapper", "train_loader", "bar") in kinds  # bar = tqdm(train_loader)
    assert ("alias", "model", "alias") in kinds


def test_a_model_is_followed_through_returns_arguments_and_instances():
    _, values, c = _flow()
    seed = _binding(c, "main", "model")
    held = _held(c, values.follow([seed], MODEL))
    assert "sample:net" in held and "run:self.net" in held and "main:alias" in held
    assert not any(h.startswith("forward:") for h in held)  # the tensor in forward() is another binding


def test_a_model_held_since_its_wrap():
    analysis, values, c = _flow()
    seed = _binding(c, "main", "model")
    loop = next(s for s in seed.scope.body.body if isinstance(s, cst.For))
    value = values.follow([seed], MODEL, since=loop)
    held = _held(c, value)
    assert "main:model" in held and "sample:net" in held
    # `model(x)` inside the loop runs before `since` ends: not the value there
    inside = [n for n in seed.references if analysis.is_inside(n, loop)]
    assert inside and not any(value.holds(n) for n in inside)


def test_a_loader_is_followed_through_unpacking_and_wrappers():
    _, values, c = _flow()
    train = _binding(c, "main", "train_loader")
    val = _binding(c, "main", "val_loader")
    assert train.path == (0,) and val.path == (1,)
    held = _held(c, values.follow([val], LOADER))
    assert "run:self.loader" in held and "main:val_loader" in held
    assert "main:bar" in _held(c, values.follow([train], LOADER))


def test_a_reference_holds_a_value_only_when_every_binding_it_reads_does():
    source = SCRIPT.replace("        self.other = None\n", "        self.other = None\n\n    def swap(self, other):\n        self.net = other\n")
    _, values, c = _flow(source)
    held = _held(c, values.follow([_binding(c, "main", "model")], MODEL))
    assert "run:self.net" not in held  # self.net may be `other` too


def test_an_import_sharing_the_models_name_is_never_the_model():
    """awd-lstm-lm: `import model` then `model = model.RNNModel(...)`; functions read the global."""
    source = (
        "import torch\nimport model\n\n\ndef evaluate():\n    return model.init_hidden(1)\n\n\n"
        "model = model.RNNModel(4)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    _, values, c = _flow(source)
    module = next(scope for scope in c.bindings if isinstance(scope, cst.Module))
    seeds = c.holding("model", module)
    assert [b.kind for b in seeds] == ["assignment"]  # the import is no value made at run time
    value = values.follow(seeds, MODEL)
    held = _held(c, value)
    assert "evaluate:model" in held  # the function reads the global after it is rebound
    assert held.count("<module>:model") == 1  # `model.parameters()`, not the module in `model.RNNModel`


def test_an_element_of_a_tuple_assignment_is_given_its_element():
    # `total, n, bar = 0.0, 0, tqdm(loader)`: bar is the loader's bar (an unpacking edge, then a
    # wrapper), and the expression it is given is `tqdm(train_loader)`, not the whole tuple.
    source = SCRIPT.replace("    bar = tqdm(train_loader)\n", "    total, (n, bar) = 0.0, (0, tqdm(train_loader))\n")
    _, values, c = _flow(source)
    bar = _binding(c, "main", "bar")
    assert cst.Module([]).code_for_node(bar.given()) == "tqdm(train_loader)"
    assert cst.Module([]).code_for_node(_binding(c, "main", "total").given()) == "0.0"
    assert ("wrapper", "train_loader", "bar") in {(e.kind, e.source.name, e.target.name) for e in values.edges_into(bar)}
    assert "main:bar" in _held(c, values.follow([_binding(c, "main", "train_loader")], LOADER))
    assert _binding(c, "main", "train_loader").given() is None  # `train_loader, val_loader = loaders(data)`


SURELY = '''
import torch


def show(net):
    return net.sample(2)


def main(plain):
    model = torch.nn.Linear(2, 2)
    only = model
    if plain:
        either = torch.nn.Linear(2, 2)
    else:
        either = model
    show(either)
    show(torch.nn.Linear(2, 2))
    return only, either
'''


def test_surely_a_binding_every_way_into_which_brings_the_value():
    _, values, c = _flow(SURELY)
    seed = _binding(c, "main", "model")
    value = values.follow([seed], MODEL)
    sure = values.surely([value])
    either = [b for b in c.bindings[seed.scope]["either"] if b in value.bindings]
    assert _binding(c, "main", "only") in sure
    assert either and either[0] in sure  # `either = model`: that binding is the model; the name reads two
    net = _binding(c, "show", "net")
    assert net in value.bindings and net not in sure  # handed `either`, which may be the other Linear


def test_surely_not_a_parameter_a_call_hands_something_else():
    handed_only_the_model = SURELY.replace("    show(either)\n", "    show(only)\n")
    for source, expected in ((handed_only_the_model, False), (handed_only_the_model.replace("    show(torch.nn.Linear(2, 2))\n", ""), True)):
        _, values, c = _flow(source)
        value = values.follow([_binding(c, "main", "model")], MODEL)
        net = _binding(c, "show", "net")
        assert net in value.bindings and (net in values.surely([value])) is expected
