"""What the training's forward calls, for the parameters an optimizer reads (ModelAnalysis.forward).

The DDP wrap goes around the value whose forward training calls, after the last change to its
parameters: a module put into a container (`modules.append(student)`) and called as an element
of it (`modules[0](x)`, `for m in modules: m(x)`) is wrapped before it enters the first
container; a container the training never calls (the optimizer's `trainable.parameters()`) stands
for the modules put into it; a container built empty and filled by `append` is wrapped after the
last append. What cannot be decided leaves the file unchanged with DDP104 naming the container.
At run time: fixtures/distill_module_list and tests/test_runtime.py.
"""
from __future__ import annotations

import libcst as cst
import pytest

from migrator import migrate
from migrator.analysis.passes import _analysis
from migrator.graph.flow import MODEL

SETUP = '''import torch
import torch.nn as nn


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x, y = torch.randn(8, 4), torch.randn(8, 2)
'''
FOOTER = '''

if __name__ == "__main__":
    main()
'''
TRAIN = '''    for step in range(2):
        loss = nn.functional.mse_loss({forward}, y.to(device))
        loss.backward()
        optimizer.step()
'''


def _migrated(body: str, forward: str):
    return migrate(SETUP + body + TRAIN.format(forward=forward) + FOOTER)


def _wraps(code: str):
    return [line.strip() for line in code.splitlines() if "DDP(" in line]


def test_flow_puts_a_module_into_a_container_and_reads_it_out():
    module = cst.parse_module('''import torch.nn as nn
student = nn.Linear(4, 2)
modules = nn.ModuleList([])
modules.append(student)
first = modules[0]
for m in modules:
    m.train()
''')
    analysis = _analysis(module)
    c, values = analysis.c, analysis.values
    names = c.bindings[module]
    kinds = {(e.kind, e.source.name, e.target.name) for bs in names.values() for b in bs for e in values.edges_into(b)}
    assert ("member", "student", "modules") in kinds
    assert ("element", "modules", "first") in kinds and ("element", "modules", "m") in kinds
    # a model value does not take them: the container is not the module, nor its element the container
    assert values.follow(names["student"], MODEL).bindings == set(names["student"])
    assert values.follow(names["modules"], MODEL).bindings == set(names["modules"])


def test_a_container_built_empty_and_called_is_wrapped_after_its_last_append():
    body = '''    net = nn.Sequential()
    net.append(nn.Linear(4, 8))
    net.append(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
'''
    code = _migrated(body, "net(x)").code
    assert code.index("net.append(nn.Linear(8, 2))") < code.index("net = DDP(net")
    assert "net.module.append" not in code


def test_the_modules_of_a_container_nothing_calls_are_wrapped_before_they_enter_one():
    body = '''    student = nn.Linear(4, 2)
    head = nn.Linear(2, 2)
    modules = nn.ModuleList([])
    modules.extend([student, head])
    trainable = nn.ModuleList([])
    trainable.extend([student, head])
    modules.to(device)
    optimizer = torch.optim.SGD(trainable.parameters(), lr=0.1)
'''
    result = _migrated(body, "modules[1](modules[0](x.to(device)))")
    wraps = _wraps(result.code)
    assert [w.split(" = ")[0] for w in wraps] == ["student", "head"]
    assert all(".to(torch.device(\"cuda\", local_rank)" in w for w in wraps)  # the list's move comes after the wrap
    assert result.code.index("head = DDP(") < result.code.index("modules.extend")
    assert "trainable = DDP" not in result.code and "modules = DDP" not in result.code


def test_a_module_called_as_the_element_a_loop_binds():
    body = '''    student = nn.Linear(4, 2)
    modules = nn.ModuleList([])
    modules.append(student)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
'''
    result = migrate(SETUP + body + '''    for step in range(2):
        for m in modules:
            out = m(x)
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        optimizer.step()
''' + FOOTER)
    assert [w.split(" = ")[0] for w in _wraps(result.code)] == ["student"]
    assert result.code.index("student = DDP(") < result.code.index("modules.append(student)")


DECLINED = {
    "a-container-holding-it-is-called": ('''    enc, dec = nn.Linear(4, 8), nn.Linear(8, 2)
    seq = nn.Sequential()
    seq.append(enc)
    seq.append(dec)
    optimizer = torch.optim.SGD(enc.parameters(), lr=0.1)
''', "seq(x)", "`seq`"),
    "a-member-training-never-calls": ('''    student = nn.Linear(4, 2)
    embed = nn.Linear(2, 2)
    modules = nn.ModuleList([])
    modules.append(student)
    trainable = nn.ModuleList([])
    trainable.append(student)
    trainable.append(embed)
    optimizer = torch.optim.SGD(trainable.parameters(), lr=0.1)
''', "modules[0](x)", "`embed`"),
    "a-member-without-a-name": ('''    student = nn.Linear(4, 2)
    modules = nn.ModuleList([])
    modules.append(student)
    trainable = nn.ModuleList([])
    trainable.append(student)
    trainable.append(nn.Linear(2, 2))
    optimizer = torch.optim.SGD(trainable.parameters(), lr=0.1)
''', "modules[0](x)", "`trainable`"),
    "prepared-after-it-enters-the-container": ('''    student = nn.Linear(4, 2)
    modules = nn.ModuleList([])
    modules.append(student)
    student.to(device)
    optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
''', "modules[0](x.to(device))", "`modules`"),
}


@pytest.mark.parametrize("body, forward, named", DECLINED.values(), ids=DECLINED.keys())
def test_declined_with_the_container_named(body, forward, named):
    result = _migrated(body, forward)
    assert not result.changed
    messages = [d.message for d in result.diagnostics if d.code == "DDP104"]
    assert len(messages) == 1 and named in messages[0], result.diagnostics
