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


def test_positions_found_in_the_source_are_those_of_the_code_generation():
    """LazyPositions reads an expression's place off the source when its code occurs once there;
    for every expression of every fixture that must be where LibCST's code generation puts it."""
    import libcst as cst

    from migrator.analysis.facts import LazyPositions
    from migrator.tree import descendants

    checked = 0
    for case in discover():
        if not case.input_parses:
            continue
        path = case.input_path
        source = path.read_text(encoding="utf-8")
        module = cst.parse_module(source)
        fast, slow = LazyPositions(module, source), LazyPositions(module)
        for node in descendants(module, cst.BaseExpression):
            if fast._unique_offset(node) is not None:
                checked += 1
                assert fast.start(node) == slow.start(node), (path, cst.Module([]).code_for_node(node))
    assert checked > 1000
