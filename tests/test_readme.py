"""README.md and generated files stay in step with the code: the rule table, codes.py, the JSON
example, and every command-line flag."""
from __future__ import annotations

import json
import re
from pathlib import Path

from migrator import cli as cli_module
from migrator import codes, docs
from migrator.rules import RULES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_rule_table_is_generated_from_the_registry():
    assert docs.readme_table(README) == docs.rule_table(), "run: python -m migrator.docs --write"


def test_codes_module_matches_the_registry():
    assert codes.CODES == tuple((rule.code, rule.name) for rule in RULES), "run: python -m migrator.docs --write"
    assert (ROOT / "migrator" / "codes.py").read_text(encoding="utf-8") == docs.codes_module()


def test_docs_check_passes_and_write_is_idempotent(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(docs.readme_with_table(README, "| stale |\n"), encoding="utf-8")
    codes_py = tmp_path / "codes.py"
    codes_py.write_text(docs.codes_module(), encoding="utf-8")
    monkeypatch.setattr(docs, "README", readme)
    monkeypatch.setattr(docs, "CODES", codes_py)
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    assert docs.main(["--check"]) == 1
    assert docs.main(["--write"]) == 0
    assert readme.read_text(encoding="utf-8") == docs.readme_with_table(README, docs.rule_table())
    assert docs.main(["--check"]) == 0


def test_readme_json_example_has_the_documented_keys():
    blocks = re.findall(r"```json\n(.*?)```", README, re.S)
    (example,) = [json.loads(block) for block in blocks if '"version"' in block]
    from tests.test_output_formats import _validate

    _validate(example)


def test_every_flag_is_in_the_readme():
    missing = []
    for param in cli_module.cli.params:
        names = [opt for opt in getattr(param, "opts", []) if opt.startswith("--")]
        if names and not any(name in README for name in names) and "--help" not in names:
            missing.append(names[0])
    assert not missing, f"README.md does not mention {missing}"


def test_cli_prefilter_never_skips_what_the_engine_would_read():
    """The CLI's cheap word check must be a superset of the engine's own relevance test."""
    from migrator.relevance import ALWAYS, WITH_TORCH, python_may_need_migration

    samples = [*ALWAYS, *(f"import torch  # {word}" for word in WITH_TORCH), "import torch", "x = 1"]
    for text in samples:
        if python_may_need_migration(text):
            assert any(word in text for word in cli_module.PYTHON_RELEVANT), text
