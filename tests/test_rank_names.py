"""Rank-0 guards read well: one name per function that asks more than once (migrator.rules.rank_names)."""
from __future__ import annotations

import textwrap

import libcst as cst

from migrator.api import migrate

TRAIN = textwrap.dedent(
    '''\
    import torch


    def train(model, optimizer, epochs):
        for epoch in range(epochs):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(f"epoch {epoch}: {loss.item():.4f}")
            total = loss.item() * 2
            print("total", total)
        torch.save(model.state_dict(), "model.pt")


    def main():
        model = torch.nn.Linear(4, 1)
        print("model built")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train(model, optimizer, 2)


    if __name__ == "__main__":
        main()
    '''
)


def _function(code: str, name: str) -> str:
    module = cst.parse_module(code)
    found = next(s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == name)
    return module.code_for_node(found)


def test_a_function_with_several_guards_names_the_test_once():
    train = _function(migrate(TRAIN).code, "train")
    assert train.count("is_main = dist.get_rank() == 0") == 1
    assert train.count("if is_main:") == 3
    assert "get_rank() == 0:" not in train
    # before the loop, so it runs before every guard in it
    assert train.index("is_main = ") < train.index("for epoch")


def test_a_single_guard_keeps_its_inline_test():
    main = _function(migrate(TRAIN).code, "main")
    assert "if dist.get_rank() == 0:" in main
    assert "is_main" not in main


def test_each_function_gets_its_own_name():
    source = TRAIN.replace('    print("model built")\n', '    print("model built")\n    x = 1\n    print("optimizer next")\n')
    code = migrate(source).code
    main = _function(code, "main")
    assert main.count("is_main = dist.get_rank() == 0") == 1
    # after the process group's setup, which the entry point gets
    assert main.index("init_process_group") < main.index("is_main = ")
    assert _function(code, "train").count("is_main = ") == 1


def test_adjacent_guarded_statements_share_one_if():
    source = TRAIN.replace('        total = loss.item() * 2\n', '')
    train = _function(migrate(source).code, "train")
    assert train.count("if is_main:") == 2
    assert 'if is_main:\n            print(f"epoch {epoch}: {loss.item():.4f}")\n            print("total", total)' in train


def test_a_name_the_file_uses_already_is_not_taken():
    source = TRAIN.replace("import torch\n", "import torch\n\nis_main = True  # the user's own\n", 1)
    code = migrate(source).code
    assert "is_main = True  # the user's own" in code
    assert "is_main_rank = dist.get_rank() == 0" in _function(code, "train")
    assert "if is_main:" not in code


def test_flat_script_names_it_after_the_setup():
    source = textwrap.dedent(
        '''\
        import torch

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        print("start")
        for epoch in range(2):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            optimizer.step()
            print(epoch, loss.item())
        torch.save(model.state_dict(), "m.pt")
        '''
    )
    code = migrate(source).code
    assert code.count("is_main = dist.get_rank() == 0") == 1
    assert code.index("init_process_group") < code.index("is_main = ")
    assert code.count("if is_main:") == 3
    compile(code, "flat.py", "exec")


def test_migrating_twice_changes_nothing():
    once = migrate(TRAIN).code
    again = migrate(once)
    assert again.code == once
    assert not again.changes
