import re

from migrator import RULES
from migrator.options import Options
from migrator.launcher import LAUNCHER_RULES
from migrator.rules import FIXERS, RULES_BY_CODE


def test_codes_are_unique_and_well_formed():
    codes = [rule.code for rule in RULES]
    assert len(codes) == len(set(codes))
    assert all(re.fullmatch(r"DDP[0-2]\d\d", code) for code in codes)
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))


def test_fixers_are_fixable_and_advisories_are_not():
    for rule, _ in FIXERS:
        assert rule.fixable and rule.code.startswith("DDP0"), rule.code
    for rule in RULES:
        if rule.code.startswith("DDP1"):
            assert not rule.fixable, rule.code
    assert {rule.code for rule in LAUNCHER_RULES} <= {rule.code for rule in RULES}


def test_explain_text_has_every_section():
    for rule in RULES:
        text = rule.explain()
        for heading in ("## What it does", "## Why is this bad?", "## Fix", "## Fix safety", "## Example"):
            assert heading in text, (rule.code, heading)


def test_select_and_ignore_accept_code_prefix_and_name():
    assert Options(select=("DDP0",)).enabled("DDP003", "wrap-model")
    assert not Options(select=("DDP1",)).enabled("DDP003", "wrap-model")
    assert not Options(ignore=("wrap-model",)).enabled("DDP003", "wrap-model")
    assert not Options(ignore=("ddp003",)).enabled("DDP003", "wrap-model")
    assert RULES_BY_CODE["DDP003"].name == "wrap-model"
