"""Our offset-based positions must agree with libcst's PositionProvider wherever both speak."""
import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from fixture_cases import discover
from migrator.analysis import LazyPositions

CASES = [pytest.param(case, id=case.name) for case in discover() if case.input_parses]


@pytest.mark.parametrize("case", CASES)
def test_positions_match_libcst(case):
    module = cst.parse_module(case.input_path.read_text(encoding="utf-8"))
    reference = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    ours = LazyPositions(module)
    checked = 0
    for node, code_range in reference.items():
        start = ours.start(node)
        if start is None:
            continue
        assert start == (code_range.start.line, code_range.start.column), type(node).__name__
        checked += 1
    assert checked > 100
