"""DDP017: PyTorch 0.3's `async=` keyword renamed on the token stream, nothing else touched."""
import pytest

from migrator import migrate
from migrator.errors import SourceParseError
from migrator.legacy_syntax import rename_async_keywords

TRAIN = '''import torch


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        x = torch.randn(8, 4)
        x = x.cuda(async=True) if torch.cuda.is_available() else x
        model(x).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_only_keyword_arguments_are_renamed():
    source = 'msg = "cuda(async=True)"  # async=True in a comment\ny = f(a, async=True)\nz = g(\n    async = False)\n'
    renamed, positions = rename_async_keywords(source)
    assert renamed == 'msg = "cuda(async=True)"  # async=True in a comment\ny = f(a, non_blocking=True)\nz = g(\n    non_blocking = False)\n'
    assert positions == [(2, 9), (4, 4)]


def test_async_as_a_python3_keyword_is_left_alone():
    source = "async def f():\n    await g()\n"
    assert rename_async_keywords(source) == (source, [])


def test_training_script_is_repaired_then_migrated_and_says_so():
    result = migrate(TRAIN)
    assert "non_blocking=True" in result.code and "async=" not in result.code
    assert "DistributedDataParallel" in result.code
    assert [c.line for c in result.changes if c.code == "DDP017"] == [9]
    assert migrate(result.code).code == result.code


def test_crlf_is_kept():
    crlf = TRAIN.replace("\n", "\r\n")
    result = migrate(crlf)
    assert "non_blocking=True" in result.code and "\r\n" in result.code and "\n" not in result.code.replace("\r\n", "")


def test_other_python2_syntax_still_fails_cleanly():
    source = TRAIN.replace("optimizer.step()", "print 'step'")
    with pytest.raises(SourceParseError):
        migrate(source)


def test_rule_can_be_turned_off():
    from migrator.options import Options

    with pytest.raises(SourceParseError):
        migrate(TRAIN, Options(ignore=("DDP017",)))
