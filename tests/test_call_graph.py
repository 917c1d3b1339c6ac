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
