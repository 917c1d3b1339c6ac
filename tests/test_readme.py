"""README.md, docs/ and the generated files stay in step with the code: docs/rules.md and codes.py
from the rule registry, the JSON example, every command-line flag, and a README that stays short
and reads as user documentation."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from migrator import cli as cli_module
from migrator import codes, docs
from migrator.rules import RULES

ROOT = Path(__file__).resolve().parent.parent
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")
DOCS = ROOT / "docs"
CLI_DOC = (DOCS / "cli.md").read_text(encoding="utf-8")
DOC_FILES = sorted(DOCS.glob("*.md"))

README_MAX_BYTES = 20_000
README_SECTIONS = [
    "Install", "Quick start", "Usage", "Verify a migration", "Several machines", "pre-commit",
    "Configuration", "Output formats", "Documentation",
]
# Development history has no place in user documentation: "issue 14", "#123", a commit hash.
ISSUE = re.compile(r"\bissue \d+|#\d{2,}", re.I)
COMMIT = re.compile(r"(?<![\w/.\-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w/.\-])", re.I)


def _prose(markdown: str) -> str:
    """`markdown` without its fenced code blocks."""
    return re.sub(r"(?ms)^([ \t]*)(```|~~~).*?^\1\2[ \t]*$", "", markdown)


# --------------------------------------------------------------------------- generated from the registry


def test_rules_doc_is_generated_from_the_registry():
    assert (DOCS / "rules.md").read_text(encoding="utf-8") == docs.rules_document(), "run: python -m migrator.docs --write"


def test_codes_module_matches_the_registry():
    assert codes.CODES == tuple((rule.code, rule.name) for rule in RULES), "run: python -m migrator.docs --write"
    assert (ROOT / "migrator" / "codes.py").read_text(encoding="utf-8") == docs.codes_module()


def test_docs_check_passes_and_write_is_idempotent(tmp_path, monkeypatch, capsys):
    rules_md = tmp_path / "docs" / "rules.md"
    codes_py = tmp_path / "migrator" / "codes.py"
    codes_py.parent.mkdir()
    codes_py.write_text(docs.codes_module(), encoding="utf-8")
    monkeypatch.setattr(docs, "RULES_MD", rules_md)
    monkeypatch.setattr(docs, "CODES", codes_py)
    monkeypatch.setattr(docs, "ROOT", tmp_path)

    assert docs.main(["--check"]) == 1  # docs/rules.md is missing
    assert "docs/rules.md is out of date" in capsys.readouterr().err
    assert docs.main(["--write"]) == 0
    assert rules_md.read_text(encoding="utf-8") == docs.rules_document()
    assert docs.main(["--check"]) == 0

    rules_md.write_text(docs.rules_document().replace("DDP003", "DDP999", 1), encoding="utf-8")
    codes_py.write_text(docs.codes_module() + "# stale\n", encoding="utf-8")
    assert docs.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "docs/rules.md is out of date" in err and "migrator/codes.py is out of date" in err
    assert docs.main(["--write"]) == 0
    assert rules_md.read_text(encoding="utf-8") == docs.rules_document()
    assert codes_py.read_text(encoding="utf-8") == docs.codes_module()
    assert docs.main(["--check"]) == 0
    capsys.readouterr()
    assert docs.main(["--write"]) == 0 and capsys.readouterr().err == ""  # nothing left to rewrite


def test_docs_prints_the_rules_doc(capsys):
    assert docs.main([]) == 0
    assert capsys.readouterr().out == docs.rules_document()


def test_rules_doc_has_a_section_per_rule_with_its_documentation_and_every_example():
    document = docs.rules_document()
    assert document.startswith("<!-- Generated") and "python -m migrator.docs --write" in document
    families = [document.index(f"## {heading}") for _, heading, _ in docs.FAMILIES]
    assert families == sorted(families)
    for rule in RULES:
        assert f"| [{rule.code}](#{rule.code.lower()}) | `{rule.name}` |" in document
        start = document.index(f'<a id="{rule.code.lower()}"></a>')
        end = document.find('<a id="', start + 1)
        section = document[start:end if end > 0 else len(document)]
        assert f"## {rule.code} `{rule.name}`" in section
        assert " ".join(rule.summary.split()) in section
        assert f"**Fixable:** {'yes' if rule.fixable else 'no'}" in section
        for part in (rule.what, rule.why, rule.fix, rule.fix_safety):
            assert part.strip() in section
        quiet = section.find("### Where it does not apply")
        for example in rule.examples:
            where = section.index(f"**{docs._caption(example)}**")
            assert section.index(example.before.rstrip(), where) > where
            if example.after is not None:
                assert example.after.rstrip() in section[where:]
            if example.fires:
                assert quiet < 0 or where < quiet, example.id
            else:
                assert 0 <= quiet < where, example.id


def test_rules_doc_shares_the_explain_text():
    """Each rule's prose in docs/rules.md is `--explain`'s, headings one level down."""
    for rule in RULES:
        explained = rule.explain()
        prose = explained[: explained.find("\n## Example")] if "\n## Example" in explained else explained
        prose = prose.split("\n## Where it does not apply")[0]
        documented = docs.rule_documentation(rule)
        for line in prose.splitlines()[2:]:
            assert ("#" + line if line.startswith("## ") else line) in documented.splitlines(), (rule.code, line)


# --------------------------------------------------------------------------- the documented interface


def test_readme_json_example_has_the_documented_keys():
    blocks = re.findall(r"```json\n(.*?)```", CLI_DOC, re.S)
    (example,) = [json.loads(block) for block in blocks if '"version"' in block]
    from tests.test_output_formats import _validate

    _validate(example)


def test_every_flag_is_in_the_readme_or_the_cli_reference():
    missing = []
    for param in cli_module.cli.params:
        names = [opt for opt in getattr(param, "opts", []) if opt.startswith("--")]
        if names and not any(name in README or name in CLI_DOC for name in names) and "--help" not in names:
            missing.append(names[0])
    assert not missing, f"neither README.md nor docs/cli.md mentions {missing}"


def test_every_flag_is_in_the_cli_reference_table():
    for param in cli_module.cli.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("-") and opt not in ("-h", "--help"):
                assert re.search(rf"(?m)^\| `{re.escape(opt)}[ `]", CLI_DOC) or f"`{opt}`, " in CLI_DOC \
                    or f", `{opt}" in CLI_DOC, opt


def test_cli_prefilter_never_skips_what_the_engine_would_read():
    """The CLI's cheap word check must be a superset of the engine's own relevance test."""
    from migrator.relevance import ALWAYS, WITH_TORCH, python_may_need_migration

    samples = [*ALWAYS, *(f"import torch  # {word}" for word in WITH_TORCH), "import torch", "x = 1"]
    for text in samples:
        if python_may_need_migration(text):
            assert any(word in text for word in cli_module.PYTHON_RELEVANT), text


# --------------------------------------------------------------------------- the README for users


def test_readme_is_at_most_20_kb():
    size = len(README_PATH.read_bytes())
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; move detail into docs/"


def test_readme_sections_are_in_order():
    headings = re.findall(r"(?m)^## (.+)$", _prose(README))
    assert headings == README_SECTIONS


def test_readme_keeps_the_quick_start_commands():
    assert "pip install . && ddp-migrate fixtures/mnist_main_argparse/input.py --diff" in README
    assert 'pip install -e ".[test]" && python -m pytest' in README  # .ci/run greps for `python -m pytest`


def test_readme_install_explains_torch():
    install = README[README.index("## Install"): README.index("## Quick start")]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in install
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in install
    assert "never needs torch" in install


@pytest.mark.parametrize("path", [README_PATH, *DOC_FILES], ids=lambda p: p.name)
def test_no_development_history(path):
    text = path.read_text(encoding="utf-8")
    assert not ISSUE.findall(text), f"{path.name} names issues: {ISSUE.findall(text)}"
    prose = _prose(text)
    assert not COMMIT.findall(prose), f"{path.name} names commits: {COMMIT.findall(prose)}"


def test_the_history_patterns_catch_history():
    assert ISSUE.search("the targets are issue 5's") and ISSUE.search("fixed in #123")
    assert COMMIT.search("the commit before (4f891b4) took") and COMMIT.search("at a2b2b2b")
    for innocent in ("https://download.pytorch.org/whl/cpu", "1234567 lines", "`--rdzv_id=<job-id>`", "#SBATCH",
                     "a defaced model", "0.5% to a 2.1 ms step", "[DDP003](#ddp003)"):
        assert not ISSUE.search(innocent) and not COMMIT.search(innocent), innocent


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("path", [README_PATH, *DOC_FILES], ids=lambda p: p.name)
def test_links_to_the_docs_resolve(path):
    text = path.read_text(encoding="utf-8")
    for target, anchor in re.findall(r"\]\(((?:docs/)?[\w./-]*\.md)?(?:#([\w-]+))?\)", _prose(text)):
        if not target and not anchor:
            continue
        linked = (path.parent / target) if target else path
        assert linked.is_file(), f"{path.name} links to {target}"
        if anchor:
            linked_text = linked.read_text(encoding="utf-8")
            anchors = {_slug(h) for h in re.findall(r"(?m)^#+ (.+)$", _prose(linked_text))}
            anchors |= set(re.findall(r'<a id="([\w-]+)"></a>', linked_text))
            assert anchor in anchors, f"{path.name} links to {target or path.name}#{anchor}"
