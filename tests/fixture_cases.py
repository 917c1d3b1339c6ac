"""Discovery of fixtures/<scenario>/ folders, shared by the golden and the runtime tests.

A scenario folder holds:
  input.py       the script as users write it
  expected.py    what ddp-migrate must make of it (absent: the file must stay byte-identical)
  fixture.toml   optional: description, runtime (bool), args (list), error ("parse"), diagnostics (codes),
                 legacy_syntax (bool: input.py is not Python 3 until the tool repairs it, e.g. `async=`),
                 original_runs_on_cpu (bool, default true: input.py runs as one plain CPU process,
                 so the runtime test compares the keys it saves with the migrated script's),
                 runtime_skip (table: runtime check name -> why it cannot hold for this scenario),
                 evaluation_whole (bool: the runtime test also asserts that every loader feeding no training
                 stays unsharded, runtime_probe.checks.assert_evaluation_whole),
                 path (the name the file is checked under, e.g. "tests/test_training.py"; default train.py),
                 kind ("legacy-launch": written for torch.distributed.launch; its own setup may need a
                 launcher, so the migrated script is not run as plain python when the original cannot be),
                 options (table: the Options fields the engine runs with, e.g. {spawn = true} for `--spawn`,
                 {batch = "global"}, {eval = "sharded"}; default: none)
  support/       optional: modules the script imports (`from function import train`); the runtime
                 tests copy every file under it next to the script, for the migrated run and for the
                 original's, and the golden tests let the engine read them as the project's modules. They are run as they are: ddp-migrate does not migrate them (only
                 input.py is under test), so they must hold nothing that needs a DDP change.
Adding a folder adds tests; nothing here lists scenarios by name.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from migrator.context import FileContext, ProjectModules

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.9/3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@dataclass(frozen=True)
class _Configured:
    """A fixture folder and its TOML: the settings single-file and project fixtures share."""

    name: str
    folder: Path
    config: Dict[str, Any] = field(default_factory=dict)

    @property
    def args(self) -> List[str]:
        return list(self.config.get("args", []))

    @property
    def diagnostics(self) -> List[str]:
        return list(self.config.get("diagnostics", []))

    @property
    def options(self) -> Dict[str, Any]:
        """The Options fields the engine runs with (fixture.toml `options = {spawn = true}`)."""
        return dict(self.config.get("options", {}))

    @property
    def evaluation_whole(self) -> bool:
        """fixture.toml `evaluation_whole = true`: the evaluation loaders must stay unsharded under torchrun."""
        return bool(self.config.get("evaluation_whole", False))

    @property
    def runtime_skip(self) -> Dict[str, str]:
        """Runtime checks that cannot hold for this scenario: {check name: reason}."""
        return {str(k): str(v) for k, v in dict(self.config.get("runtime_skip", {})).items()}


@dataclass(frozen=True)
class FixtureCase(_Configured):

    @property
    def input_path(self) -> Path:
        return self.folder / "input.py"

    @property
    def expected_path(self) -> Path:
        return self.folder / "expected.py"

    @property
    def expected_path_or_none(self) -> Optional[Path]:
        return self.expected_path if self.expected_path.exists() else None

    @property
    def support_dir(self) -> Optional[Path]:
        """support/: files copied next to the script for the runtime runs (None: the folder has none)."""
        folder = self.folder / "support"
        return folder if folder.is_dir() else None

    @property
    def context(self) -> FileContext:
        """What the engine is told about the file: its path, and support/ as the project's modules."""
        support = self.support_dir
        modules = ProjectModules((str(support),)) if support is not None else None
        return FileContext(path=str(self.config.get("path", "train.py")), modules=modules)

    @property
    def expects_parse_error(self) -> bool:
        return self.config.get("error") == "parse"

    @property
    def input_parses(self) -> bool:
        """Is input.py Python 3 as it stands (not a parse-error scenario, not legacy syntax the tool repairs)?"""
        return not self.expects_parse_error and not self.config.get("legacy_syntax", False)

    @property
    def migrated_script(self) -> Path:
        """The script that should train under torchrun: the expected output, or the input when unchanged."""
        return self.expected_path if self.expected_path.exists() else self.input_path

    @property
    def runs_under_torchrun(self) -> bool:
        """Training fixtures run under torchrun unless fixture.toml says `runtime = false`."""
        if self.expects_parse_error:
            return False
        return bool(self.config.get("runtime", self.expected_path.exists()))

    @property
    def original_runs_on_cpu(self) -> bool:
        """input.py can run as one plain process on a CPU-only machine (no unconditional CUDA)."""
        return bool(self.config.get("original_runs_on_cpu", True))


def discover() -> List[FixtureCase]:
    cases = []
    for folder in sorted(p for p in FIXTURES.iterdir() if (p / "input.py").exists()):
        config_path = folder / "fixture.toml"
        config = tomllib.loads(config_path.read_text()) if config_path.exists() else {}
        cases.append(FixtureCase(folder.name, folder, config))
    return cases


# --------------------------------------------------------------------------- multi-file projects

PROJECTS = FIXTURES / "projects"


@dataclass(frozen=True)
class ProjectCase(_Configured):
    """fixtures/projects/<name>/: a small project as users write it, for project mode.

    input/         the project (entry script, packages, config files)
    expected/      what `ddp-migrate --in-place .` makes of it
    project.toml   description, unchanged (true: every file stays byte-identical, no expected/), entry (the script torchrun runs; default train.py), args (list),
                   diagnostics (codes reported anywhere in the project), runtime_skip (as for fixtures)
    """

    @property
    def input_dir(self) -> Path:
        return self.folder / "input"

    @property
    def expected_dir(self) -> Path:
        return self.folder / "expected"

    @property
    def migrated_dir(self) -> Path:
        """The tree that should train under torchrun: expected/, or input/ when nothing changes."""
        return self.input_dir if self.unchanged else self.expected_dir

    @property
    def unchanged(self) -> bool:
        """project.toml `unchanged = true`: every file must stay byte-identical (no expected/)."""
        return bool(self.config.get("unchanged", False))

    @property
    def entry(self) -> str:
        return str(self.config.get("entry", "train.py"))


def discover_projects() -> List[ProjectCase]:
    cases = []
    for folder in sorted(p for p in PROJECTS.iterdir() if (p / "input").is_dir()) if PROJECTS.is_dir() else ():
        config_path = folder / "project.toml"
        config = tomllib.loads(config_path.read_text()) if config_path.exists() else {}
        cases.append(ProjectCase(folder.name, folder, config))
    return cases


def tree_files(root: Path) -> Dict[str, bytes]:
    """Every file under `root` by '/'-separated relative path (caches and outputs left out)."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
