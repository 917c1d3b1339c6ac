"""Golden tests over fixtures/<scenario>/ (auto-discovered: a new folder is a new test).

For each scenario: output == expected.py (or the input byte-identical when there is none),
the output parses, a second run changes nothing, and the reported codes match fixture.toml.
`pytest --update-fixtures` rewrites expected.py from the engine; review the diff.
"""
import ast

import pytest

from fixture_cases import discover
from migrator import Options, SourceParseError, migrate
from migrator.api import check

CASES = [pytest.param(case, id=case.name) for case in discover()]


def _read(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


@pytest.mark.parametrize("case", CASES)
def test_fixture(case, update_fixtures):
    source = _read(case.input_path)
    options = Options(**case.options)
    if case.expects_parse_error:
        with pytest.raises(SourceParseError) as info:
            migrate(source, options, context=case.context)
        assert info.value.line > 0
        return
    result = migrate(source, options, context=case.context)
    if update_fixtures:
        if result.changed:
            case.expected_path.write_text(result.code, encoding="utf-8", newline="")
        elif case.expected_path.exists():
            case.expected_path.unlink()
    expected = _read(case.expected_path) if case.expected_path.exists() else source
    assert result.code == expected
    ast.parse(result.code)
    assert migrate(result.code, options, context=case.context).code == result.code, "second run must be a no-op"
    reported = sorted({d.code for d in result.diagnostics})
    assert reported == sorted(set(case.diagnostics)), "diagnostics differ from fixture.toml"


def _verdict(result):
    return result.changed, result.changes, result.diagnostics, result.launch_args


@pytest.mark.parametrize("case", CASES)
def test_check_agrees_with_migrate(case):
    """`--check` runs api.check() (no code generated): same verdict as migrate() on input and expected."""
    options = Options(**case.options)
    if case.expects_parse_error:
        with pytest.raises(SourceParseError):
            check(_read(case.input_path), options, context=case.context)
        return
    paths = [case.input_path] + ([case.expected_path] if case.expected_path.exists() else [])
    for path in paths:
        source = _read(path)
        checked = check(source, options, context=case.context)
        assert checked.code == source
        assert _verdict(checked) == _verdict(migrate(source, options, context=case.context)), path


@pytest.mark.parametrize("case", CASES)
def test_fixture_is_realistic_python(case):
    """Inputs (bar the Python 2 one) must parse; training fixtures must be marked as such."""
    if not case.input_parses:
        return
    ast.parse(_read(case.input_path))
