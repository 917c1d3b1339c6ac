"""Rule selection (--select/--ignore, config), [tool.ddp-migrate] discovery and errors, exclude patterns.

Selection is checked end to end with the real engine on the rules' own examples, and the launcher
with its own rules, so these tests hold while the rules grow.
"""
from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from click.testing import CliRunner

from migrator import cli as cli_module
from migrator.codes import CODES
from migrator.config import (
    RuleSelection,
    SelectorError,
    canonical_selector,
    find_config,
    load_config,
    resolve_rules,
    split_selectors,
)
from migrator.errors import ConfigError
from migrator.files import DEFAULT_EXCLUDE, Exclude, discover
from migrator.options import Options
from migrator.rules import RULES_BY_CODE

ALL = [code for code, _ in CODES]
WRAP_EXAMPLE = RULES_BY_CODE["DDP003"].examples[0].before
LAUNCH = "#!/bin/bash\npython -m torch.distributed.launch --nproc_per_node=2 --use_env train.py --local_rank=0\n"

PLAIN_ENV = {"FORCE_COLOR": None, "NO_COLOR": None, "TTY_COMPATIBLE": None, "TERM": "xterm", "COLUMNS": "80"}


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # click 8.1
    except TypeError:
        return CliRunner()


def invoke(*args: str):
    return _runner().invoke(cli_module.cli, list(args), env=PLAIN_ENV, catch_exceptions=False)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def codes_in(stderr: str) -> List[str]:
    """The codes of the finding lines, in order."""
    return [line.split()[1] for line in stderr.splitlines() if line.count(":") >= 2 and " DDP" in line]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A git repository as the working directory (so config search stops here)."""
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def enabled(options: Options) -> List[str]:
    return [code for code in ALL if options.enabled(code)]


# --------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    "selector, canonical",
    [("DDP003", "DDP003"), ("ddp003", "DDP003"), ("DDP0", "DDP0"), ("wrap-model", "DDP003"), (" DDP2 ", "DDP2")],
)
def test_a_selector_is_a_code_a_prefix_or_a_name(selector, canonical):
    assert canonical_selector(selector) == canonical


@pytest.mark.parametrize("selector", ["DDP999", "DDP3", "wrap_model", "", "E501"])
def test_an_unknown_selector_is_an_error(selector):
    with pytest.raises(SelectorError, match="unknown rule code or name"):
        canonical_selector(selector)


def test_selectors_repeat_or_separate_with_commas():
    assert split_selectors(["DDP0,wrap-model", " DDP101 ", "DDP2,"]) == ("DDP0", "DDP003", "DDP101", "DDP2")


@pytest.mark.parametrize(
    "layers, expected",
    [
        ([], ALL),
        ([RuleSelection(select=("DDP0",))], [c for c in ALL if c.startswith("DDP0")]),
        ([RuleSelection(select=("DDP0",), ignore=("DDP003",))], [c for c in ALL if c.startswith("DDP0") and c != "DDP003"]),
        # the more specific selector wins, whichever list it is in
        ([RuleSelection(select=("DDP003",), ignore=("DDP0",))], ["DDP003"]),
        ([RuleSelection(ignore=("DDP1",))], [c for c in ALL if not c.startswith("DDP1")]),
        ([RuleSelection(select=())], []),
        # a later layer's select replaces the earlier layers' selection, ignore included
        ([RuleSelection(ignore=("DDP1",)), RuleSelection(select=("DDP105",))], ["DDP105"]),
        # a later layer without select refines the earlier one
        ([RuleSelection(select=("DDP0",)), RuleSelection(ignore=("DDP003",))], [c for c in ALL if c.startswith("DDP0") and c != "DDP003"]),
        ([RuleSelection(select=("DDP0",)), RuleSelection(extend_select=("DDP201",))], [c for c in ALL if c.startswith("DDP0")] + ["DDP201"]),
        ([RuleSelection(), RuleSelection(extend_ignore=("DDP2",))], [c for c in ALL if not c.startswith("DDP2")]),
    ],
    ids=lambda v: repr(v)[:60],
)
def test_layers_resolve_to_one_set_of_rules(layers, expected):
    assert enabled(resolve_rules(*layers)) == expected


def test_every_rule_enabled_is_the_default_options():
    assert resolve_rules(RuleSelection()) == Options()


# --------------------------------------------------------------------------- selection reaches the engines


def test_select_and_ignore_reach_the_python_engine(project):
    write(project / "train.py", WRAP_EXAMPLE)
    everything = codes_in(invoke("--check", "train.py").stderr)
    assert "DDP003" in everything and "DDP001" in everything

    without = invoke("--check", "--ignore", "wrap-model", "train.py")
    assert "DDP003" not in codes_in(without.stderr)
    assert "DDP001" in codes_in(without.stderr)

    only = invoke("--check", "--select", "DDP003,DDP001", "train.py")
    # the wrap needs the process group and the per-rank device: selecting it takes them too
    assert set(codes_in(only.stderr)) <= {"DDP001", "DDP002", "DDP003"} and "DDP003" in codes_in(only.stderr)


def test_select_and_ignore_reach_the_launcher(project):
    write(project / "run.sh", LAUNCH)
    assert codes_in(invoke("--check", "run.sh").stderr) == ["DDP201", "DDP202", "DDP203"]
    kept = invoke("--check", "--ignore", "DDP203", "run.sh")
    assert "DDP203" not in codes_in(kept.stderr)
    assert "--local_rank=0" in invoke("--ignore", "drop-local-rank-arg", "run.sh").stdout


def test_nothing_selected_changes_nothing(project):
    write(project / "train.py", WRAP_EXAMPLE)
    result = invoke("--check", "--select", "DDP2", "train.py")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == ["1 file left unchanged"]


@pytest.mark.parametrize("flag", ["--select", "--ignore", "--extend-select", "--extend-ignore"])
def test_unknown_rule_on_the_command_line_is_a_one_line_usage_error(project, flag):
    write(project / "train.py", WRAP_EXAMPLE)
    result = invoke(flag, "DDP0,DDP999", "train.py")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: {flag}: unknown rule code or name 'DDP999'; did you mean 'DDP119'?"]
    assert result.stdout == ""


# --------------------------------------------------------------------------- finding the config


def test_nearest_pyproject_with_the_table_is_used(project):
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nignore = ["DDP1"]\n')
    write(project / "pkg" / "pyproject.toml", '[project]\nname = "pkg"\n')  # no table: searched past
    write(project / "pkg" / "sub" / "train.py", "")
    assert find_config(project / "pkg" / "sub" / "train.py") == project / "pyproject.toml"
    write(project / "pkg" / "pyproject.toml", '[project]\nname = "pkg"\n[tool.ddp-migrate]\n')
    assert find_config(project / "pkg" / "sub") == project / "pkg" / "pyproject.toml"


def test_search_stops_at_the_repository_root(tmp_path):
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nignore = ["DDP1"]\n')
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    write(tmp_path / "repo" / "train.py", "")
    assert find_config(tmp_path / "repo" / "train.py") is None
    assert find_config(tmp_path / "train.py") == tmp_path / "pyproject.toml"


@pytest.mark.parametrize(
    "text",
    ['[tool."ddp-migrate"]\nselect = ["DDP0"]\n', '[tool]\nddp-migrate = { select = ["DDP0"] }\n'],
    ids=["quoted", "inline"],
)
def test_any_toml_spelling_of_the_table(project, text):
    write(project / "pyproject.toml", text)
    assert load_config(find_config(project)).rules.select == ("DDP0",)


def test_config_from_the_first_path_and_cli_wins(project):
    write(project / "sub" / ".git" / "HEAD", "")  # sub is its own repository with its own config
    write(project / "sub" / "pyproject.toml", '[tool.ddp-migrate]\nselect = ["DDP1", "DDP003"]\n')
    write(project / "sub" / "train.py", WRAP_EXAMPLE)
    configured = codes_in(invoke("--check", "sub/train.py").stderr)
    assert "DDP003" in configured and "DDP004" not in configured  # DDP001 comes with DDP003, DDP004 does not
    assert "DDP001" in codes_in(invoke("--check", "--select", "DDP0", "sub/train.py").stderr)
    assert "DDP001" in codes_in(invoke("--check", "--isolated", "sub/train.py").stderr)
    assert "DDP003" not in codes_in(invoke("--check", "--ignore", "DDP003", "sub/train.py").stderr)


def test_config_flag_names_the_file(project):
    write(project / "train.py", WRAP_EXAMPLE)
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nselect = ["DDP003"]\n')
    write(project / "other.toml", 'select = ["DDP001"]\n')  # not a pyproject.toml: keys at the top
    assert codes_in(invoke("--check", "train.py").stderr) == ["DDP001", "DDP002", "DDP003"]  # the wrap takes what it needs
    assert codes_in(invoke("--check", "--config", "other.toml", "train.py").stderr) == ["DDP001"]
    conflict = invoke("--check", "--config", "other.toml", "--isolated", "train.py")
    assert conflict.exit_code == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ('[tool.ddp-migrate]\nselect = ["DDP999"]\n', "[tool.ddp-migrate] select: unknown rule code or name 'DDP999'"),
        ('[tool.ddp-migrate]\nignore = "DDP1"\n', "[tool.ddp-migrate] ignore must be a list of strings, not a string"),
        ('[tool.ddp-migrate]\nexclude = [1]\n', "[tool.ddp-migrate] exclude must be a list of strings, not a list with"),
        ('[tool.ddp-migrate]\nextend_exclude = ["x"]\n', "[tool.ddp-migrate] unknown key 'extend_exclude'; did you mean 'extend-exclude'?"),
        ('[tool.ddp-migrate]\ncolour = true\n', "[tool.ddp-migrate] unknown key 'colour' (known keys: select, ignore"),
        ('[tool.ddp-migrate]\nselect = [\n', "invalid TOML: "),
        ('[tool]\nddp-migrate = 3\n', "[tool.ddp-migrate] must be a table"),
    ],
    ids=["unknown-code", "wrong-type", "wrong-item-type", "underscore-key", "unknown-key", "bad-toml", "not-a-table"],
)
def test_a_bad_config_is_one_line_with_its_path_and_exit_2(project, text, message):
    write(project / "pyproject.toml", text)
    write(project / "train.py", WRAP_EXAMPLE)
    result = invoke("--check", "train.py")
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"pyproject.toml: {message}"), line
    assert result.stdout == ""
    with pytest.raises(ConfigError):
        load_config(project / "pyproject.toml")


def test_a_pyproject_that_does_not_mention_the_tool_is_not_parsed(project, monkeypatch):
    write(project / "pyproject.toml", "this is [not toml\n")
    write(project / "train.py", "x = 1\n")
    assert invoke("--check", "train.py").exit_code == 0  # no mention of ddp-migrate: never parsed


# --------------------------------------------------------------------------- exclude


def _tree(root: Path, names: List[str]) -> None:
    for name in names:
        write(root / name, "import torch\n")


def _found(*args: str) -> List[str]:
    result = invoke("--check", "--output-format", "json", *args)
    import json

    return [f["path"] for f in json.loads(result.stdout)["files"]]


def test_config_exclude_and_extend_exclude_apply_to_walks(project):
    _tree(project, ["train.py", "gen/a.py", "build/b.py", "src/x_pb2.py", "src/y.py", "third_party/z.py"])
    assert _found(".") == ["gen/a.py", "src/x_pb2.py", "src/y.py", "third_party/z.py", "train.py"]

    write(project / "pyproject.toml", '[tool.ddp-migrate]\nextend-exclude = ["*_pb2.py", "/third_party/"]\n')
    assert _found(".") == ["gen/a.py", "src/y.py", "train.py"]

    # exclude replaces the default: build/ is walked again
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nexclude = ["gen/"]\n')
    assert _found(".") == ["build/b.py", "src/x_pb2.py", "src/y.py", "third_party/z.py", "train.py"]

    # the command line's --exclude replaces the config's, --extend-exclude adds
    assert _found(".", "--exclude", "src/", "--extend-exclude", "third_party,build") == ["gen/a.py", "train.py"]


def test_exclude_patterns_are_relative_to_the_config_file(project, monkeypatch):
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nextend-exclude = ["/src/gen/"]\n')
    _tree(project, ["src/gen/a.py", "src/b.py", "other/src/gen/c.py"])
    monkeypatch.chdir(project / "src")
    assert _found(".") == ["b.py"]
    monkeypatch.chdir(project)
    assert _found(".") == ["other/src/gen/c.py", "src/b.py"]


def test_named_files_are_taken_unless_force_exclude(project):
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nextend-exclude = ["gen/", "*_pb2.py"]\n')
    _tree(project, ["gen/a.py", "x_pb2.py", "train.py"])
    assert _found("gen/a.py", "x_pb2.py", "train.py") == ["gen/a.py", "x_pb2.py", "train.py"]
    assert _found("--force-exclude", "gen/a.py", "x_pb2.py", "train.py") == ["train.py"]
    assert _found("--force-exclude", "gen") == []


def test_a_named_directory_is_walked_even_when_excluded(project):
    _tree(project, ["build/x.py", "build/venv/y.py", "gen/a.py", "gen/sub/b.py"])
    assert _found("build") == ["build/x.py"]
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nextend-exclude = ["/gen/", "sub/"]\n')
    assert _found("gen") == ["gen/a.py"]


def test_discover_exclude_outside_the_root_matches_names(tmp_path):
    _tree(tmp_path, ["proj/a.py", "proj/venv/b.py", "proj/gen/c.py"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = discover([tmp_path / "proj"], [Exclude(DEFAULT_EXCLUDE, elsewhere), Exclude(("gen",), elsewhere)])
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["proj/a.py"]


# --------------------------------------------------------------------------- max-file-size

@pytest.mark.parametrize("value, size", [
    ("512K", 512 * 1024), ("2M", 2 * 1024**2), ("1.5MiB", int(1.5 * 1024**2)), ("1000000", 1_000_000),
    (4096, 4096), ("0", 0), ("1 g", 1024**3),
])
def test_sizes(value, size):
    from migrator.config import parse_size

    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["2X", "-1", "", "M", True, 1.5, -3, [1]])
def test_a_bad_size_says_so(value):
    from migrator.config import parse_size

    with pytest.raises(ValueError, match="must"):
        parse_size(value)


def _big(path: Path, size: int) -> Path:
    """A training script padded with a comment to `size` bytes."""
    text = WRAP_EXAMPLE + "# " + "x" * max(0, size - len(WRAP_EXAMPLE) - 3) + "\n"
    return write(path, text)


def test_a_python_file_above_the_limit_is_skipped_with_one_line(project):
    _big(project / "huge.py", 600 * 1024)
    write(project / "train.py", WRAP_EXAMPLE)
    result = invoke("--check", ".")
    assert result.exit_code == 1  # train.py would change; the skip is not a failure
    assert ("huge.py: skipped: 600 KiB is above the 512 KiB limit for Python files (raise it with --max-file-size, "
            "or max-file-size in [tool.ddp-migrate])") in result.stderr.splitlines()
    assert result.stderr.splitlines()[-1] == "1 file would be migrated, 1 skipped"
    assert invoke("--check", "--quiet", ".").stderr == ""


def test_the_limit_comes_from_the_flag_then_the_config(project):
    _big(project / "huge.py", 600 * 1024)
    assert "huge.py: skipped" not in invoke("--check", "--max-file-size", "1M", "huge.py").stderr
    assert invoke("--check", "--max-file-size", "0", "huge.py").exit_code == 1  # 0: no limit, it is migrated
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nmax-file-size = "100K"\n')
    write(project / "train.py", WRAP_EXAMPLE + "#" * 200_000 + "\n")
    size = (project / "train.py").stat().st_size / 1024
    assert f"train.py: skipped: {size:.1f} KiB is above the 100 KiB limit" in invoke("--check", "train.py").stderr
    assert invoke("--check", "--max-file-size", "1M", "train.py").exit_code == 1  # the flag wins


def test_skipped_files_are_in_the_json_report(project):
    import json

    _big(project / "huge.py", 600 * 1024)
    report = json.loads(invoke("--check", "--output-format", "json", ".").stdout)
    assert report["skipped"] == [{"path": "huge.py", "reason": report["skipped"][0]["reason"]}]
    assert "512 KiB limit" in report["skipped"][0]["reason"] and report["summary"]["skipped"] == 1
    assert [f["path"] for f in report["files"]] == []


def test_stdin_above_the_limit_is_skipped(project):
    result = _runner().invoke(cli_module.cli, ["--check", "--max-file-size", "1K", "-"], input=WRAP_EXAMPLE * 10,
                              env=PLAIN_ENV, catch_exceptions=False)
    assert "-: skipped:" in result.stderr and result.exit_code == 0


@pytest.mark.parametrize("flag", ["2X", "-5"])
def test_a_bad_max_file_size_flag_is_a_usage_error(project, flag):
    write(project / "train.py", WRAP_EXAMPLE)
    result = invoke("--check", "--max-file-size", flag, "train.py")
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stderr


def test_a_bad_max_file_size_in_the_config_is_one_line(project):
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nmax-file-size = "big"\n')
    write(project / "train.py", WRAP_EXAMPLE)
    result = invoke("--check", "train.py")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "pyproject.toml: [tool.ddp-migrate] max-file-size must be a size such as 512K, 2M or 1000000 (bytes), not 'big'"
    ]


# --------------------------------------------------------------------------- --check gates on what needs a human

UNREWRITABLE = RULES_BY_CODE["DDP103"].examples[0].before  # a DataParallel the tool cannot rewrite


def test_a_finding_that_needs_a_human_fails_check(project):
    write(project / "train.py", UNREWRITABLE)
    result = invoke("--check", "train.py")
    assert result.exit_code == 1, result.stderr
    assert "DDP103" in result.stderr and result.stderr.splitlines()[-1] == "1 file needs a human"
    assert invoke("--check", "--exit-zero", "train.py").exit_code == 0
    assert invoke("--diff", "train.py").exit_code == 0  # only --check gates
    write(project / "pyproject.toml", "[tool.ddp-migrate]\nexit-zero = true\n")
    assert invoke("--check", "train.py").exit_code == 0


@pytest.mark.parametrize("code, fails", [("DDP120", False), ("DDP123", False), ("DDP111", False), ("DDP103", True),
                                         ("DDP140", True), ("DDP204", True)])
def test_only_findings_to_act_on_fail_check(project, monkeypatch, code, fails):
    from migrator.types import Diagnostic, Result

    def engine(source, options=None, context=None):
        return Result(source, (), (Diagnostic(code, 1, 1, "a finding"),), original=source)

    monkeypatch.setattr(cli_module, "check", engine)
    monkeypatch.setattr(cli_module, "_verdict", lambda source, context, spawn=False: "engine")
    monkeypatch.setattr(cli_module, "_may_need_a_look", lambda source, name: True)
    write(project / "train.py", "import torch\n")
    result = invoke("--check", "train.py")
    assert result.exit_code == int(fails), result.stderr
    assert result.stderr.splitlines()[-1] == ("1 file needs a human" if fails else "1 file left unchanged")


def test_exit_zero_keeps_failures(project):
    write(project / "old.py", "import torch\nopt = torch.optim.SGD(m.parameters(), lr=1)\nprint 'x'\n")
    assert invoke("--check", "--exit-zero", "old.py").exit_code == 2


def test_a_bad_exit_zero_is_one_line(project):
    write(project / "pyproject.toml", '[tool.ddp-migrate]\nexit-zero = "yes"\n')
    write(project / "train.py", WRAP_EXAMPLE)
    result = invoke("--check", "train.py")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["pyproject.toml: [tool.ddp-migrate] exit-zero must be true or false, not a string"]


def test_help_documents_the_exit_status(project):
    text = invoke("--help").stdout
    assert "Exit status" in text and "--exit-zero" in text and "needs a human" in text
