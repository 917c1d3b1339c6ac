"""Every rule's own examples (its --explain text) are tests: docs and code cannot drift apart."""
import pytest

from migrator import RULES, migrate
from migrator.context import FileContext
from migrator.options import Options
from migrator.launcher import EXAMPLE_KIND, LAUNCHER_RULES, migrate_launcher
from migrator.project import ModuleRole, migrate_module
from migrator.rules.modules.base import Receivers
from migrator.rules.modules import RULES as PROJECT_RULES

LAUNCHER_CODES = {rule.code for rule in LAUNCHER_RULES}
# Project mode's rules run on a module a migrated training script imports (migrator.project).
PROJECT_CODES = {rule.code for rule in PROJECT_RULES}
EXAMPLES = [pytest.param(rule, example, id=f"{rule.code}-{example.id}") for rule in RULES for example in rule.examples]


def _receivers(handed, kind):
    found = Receivers()
    for of, scope, spelled in handed:
        if of == kind:
            found.add(scope, spelled)
    return found


def example_role(handed) -> ModuleRole:
    """Project mode's role for a module whose example says what the script hands it."""
    return ModuleRole(entries=("train.py",), models=_receivers(handed, "model"), epochs=_receivers(handed, "epoch"),
                      states=_receivers(handed, "state"))


def _run(rule, source, path=None, options=(), handed=()):
    if rule.code in LAUNCHER_CODES:
        return migrate_launcher(source, EXAMPLE_KIND)
    if rule.code in PROJECT_CODES:
        return migrate_module(source, example_role(handed))
    return migrate(source, Options(**dict(options)), context=FileContext(path=path) if path else None)


@pytest.mark.parametrize("rule, example", EXAMPLES)
def test_rule_example(rule, example):
    result = _run(rule, example.before, example.path, example.options, example.handed)
    if example.after is None:
        assert result.code == example.before, "the example must stay unchanged"
    else:
        assert result.code == example.after
        assert _run(rule, result.code, example.path, example.options, example.handed).code == result.code, "second run must change nothing"
    reported = {d.code for d in result.diagnostics}
    assert set(example.diagnostics) <= reported
    fired = {c.code for c in result.changes} | reported
    if not example.fires:
        assert rule.code not in fired, "a 'must not fire' example"
    elif example.after is not None and example.after != example.before:
        assert rule.code in fired


def test_every_rule_has_an_example():
    assert all(rule.examples for rule in RULES)
