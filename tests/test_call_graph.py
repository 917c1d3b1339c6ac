"""The one answer to "does running this train?" (migrator.dataflow.calls), which the flows, the
model analysis, spawn and project mode all read."""
from __future__ import annotations

import textwrap

import libcst as cst

from migrator.analysis.passes import call_graph


def _loops(source: str):
    module = cst.parse_module(textwrap.dedent(source))
    graph = call_graph(module)
    loops = [n for n in graph.c.loops if isinstance(n, cst.For)]
    return graph, {cst.Module(body=[]).code_for_node(loop.target): loop for loop in loops}


def _trains(source: str) -> dict:
    graph, loops = _loops(source)
    return {target: graph.trains(loop) for target, loop in loops.items()}


def test_a_backward_or_an_optimizer_step_trains():
    assert _trains("""
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for a in loader:
            model(a).sum().backward()
        for b in loader:
            optimizer.step()
        for c in loader:
            scaler.step(optimizer)
    """) == {"a": True, "b": True, "c": True}


def test_other_steps_do_not():
    # A scheduler's or an environment's step is no update of the model.
    assert _trains("""
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
        for epoch in range(3):
            scheduler.step()
        for action in actions:
            env.step(action)
    """) == {"epoch": False, "action": False}


def test_an_optimizer_from_a_helper_counts():
    assert _trains("""
        optimizer = build_optimizer(cfg, model)
        for batch in loader:
            optimizer.step()
    """) == {"batch": True}


def test_calls_of_this_files_code_are_followed():
    assert _trains("""
        class Trainer:
            def __init__(self, model):
                self.model = model
            def step(self, batch):
                self.model(batch).sum().backward()
            def fit(self, loader):
                for inner in loader:
                    self.step(inner)

        def train_one_epoch(model, loader):
            for batch in loader:
                model(batch).sum().backward()

        def log(epoch):
            print(epoch)

        for epoch in range(3):
            train_one_epoch(model, loader)
        for logged in range(3):
            log(logged)
        trainer = Trainer(model)
        for run in range(2):
            trainer.fit(loader)
    """) == {"inner": True, "batch": True, "epoch": True, "logged": False, "run": True}


def test_a_recursion_trains_only_through_a_call_that_does():
    assert _trains("""
        def walk(node):
            for child in node:
                walk(child)

        def descend(node):
            for part in node:
                descend(part)
            loss.backward()
    """) == {"child": False, "part": True}


def test_a_function_and_a_statement_are_asked_the_same_way():
    module = cst.parse_module(textwrap.dedent("""
        def train(model):
            model(x).sum().backward()

        def evaluate(model):
            return model(x)

        train(model)
        evaluate(model)
    """))
    graph = call_graph(module)
    functions = {fn.name.value: fn for fn in graph.c.functions}
    assert graph.trains(functions["train"]) and not graph.trains(functions["evaluate"])
    train_call, evaluate_call = module.body[2], module.body[3]
    assert graph.trains(train_call) and not graph.trains(evaluate_call)


def test_an_instance_of_a_class_of_the_file_called_runs_its_call_method():
    assert _trains("""
        class Stepper:
            def __call__(self, loss, optimizer):
                loss.backward()
                optimizer.step()

        stepper = Stepper()
        for batch in batches:
            stepper(model(batch).sum(), optimizer)
    """) == {"batch": True}


_SCHEDULER_DEMO = '''import torch
import torch.nn as nn


class Warmup:
    def __init__(self, optimizer, steps):
        self.optimizer, self.steps = optimizer, steps

    def __call__(self, optimizer, i):
        for group in optimizer.param_groups:
            group["lr"] = 0.1 * min(1.0, (i + 1) / self.steps)


if __name__ == "__main__":
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = Warmup(optimizer, 10)
    lrs = []
    for i in range(20):
        scheduler(optimizer, i)
        lrs.append(optimizer.param_groups[0]["lr"])
    print(model, lrs[-1])
'''


def test_an_optimizer_nothing_trains_with_is_no_training():
    """A scheduler's plotting demo under a module's main guard builds an optimizer and never runs a
    backward or a step: nothing to migrate (it was set up and wrapped in DDP before)."""
    from migrator.api import migrate

    result = migrate(_SCHEDULER_DEMO)
    assert result.code == _SCHEDULER_DEMO and not result.changes


def test_an_optimizer_handed_with_its_model_to_code_the_file_cannot_read_still_trains():
    from migrator.api import migrate

    handed = _SCHEDULER_DEMO.replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom engine import fit\n").replace(
        "    print(model, lrs[-1])\n", "    fit(model, optimizer)\n")
    assert "DDP003" in {c.code for c in migrate(handed).changes}
    stepped = _SCHEDULER_DEMO.replace("        scheduler(optimizer, i)\n",
                                      "        scheduler(optimizer, i)\n        model(torch.randn(2, 4)).sum().backward()\n        optimizer.step()\n")
    assert "DDP003" in {c.code for c in migrate(stepped).changes}


def _calls_train(source: str) -> dict:
    """{a call of the file's own function, as written: does it train?}"""
    module = cst.parse_module(textwrap.dedent(source))
    graph = call_graph(module)
    code = cst.Module(body=[]).code_for_node
    return {code(call): graph.call_trains(call) for call in graph.c.calls if graph.callee(call) is not None}


def test_a_function_that_trains_and_tests_trains_only_where_a_call_hands_it_an_optimizer():
    # SimCLR's linear evaluation: one train_val() for both; the calls that hand no optimizer test.
    assert _calls_train("""
        def train_val(net, data_loader, train_optimizer=None):
            is_train = train_optimizer is not None
            for data, target in data_loader:
                loss = net(data).sum()
                if is_train:
                    train_optimizer.zero_grad()
                    loss.backward()
                    train_optimizer.step()

        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_val(model, train_loader, optimizer)
        train_val(model, test_loader, None)
        train_val(model, val_loader)
        train_val(model, other_loader, train_optimizer=optimizer if training else None)
    """) == {"train_val(model, train_loader, optimizer)": True, "train_val(model, test_loader, None)": False,
             "train_val(model, val_loader)": False,
             "train_val(model, other_loader, train_optimizer=optimizer if training else None)": True}


def test_a_flag_argument_rules_out_the_branch_that_trains():
    # flownet2's run(loader, is_validate=True); the test read either way round, and an else branch.
    assert _calls_train("""
        def run(data_loader, is_validate=False):
            for inputs in data_loader:
                loss = model(inputs).sum()
                if not is_validate:
                    loss.backward()
                    optimizer.step()

        def epoch(loader, evaluate):
            for inputs in loader:
                if evaluate or inputs is None:
                    model(inputs)
                else:
                    model(inputs).sum().backward()

        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        run(val_loader, is_validate=True)
        run(train_loader)
        epoch(val_loader, True)
        epoch(train_loader, False)
    """) == {"run(val_loader, is_validate=True)": False, "run(train_loader)": True,
             "epoch(val_loader, True)": False, "epoch(train_loader, False)": True}
