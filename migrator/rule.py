"""The shape of a rule: its code, its documentation and its own examples.

Every rule module in `migrator.rules` exposes one `RULE`. The registry, `--explain`,
`--list-rules`, the README table and the example tests all read from here, so the
documentation cannot drift from the code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


_HANDED_KINDS = {"state": "checkpoint state"}  # how the docs say what an Example's `handed` is


@dataclass(frozen=True)
class Example:
    """A small script and what the rule makes of it.

    `after is None` means the rule must leave the source unchanged; `diagnostics`
    lists codes that must then be reported. `fires=False` marks a case where other rules migrate
    the script but this one must not touch it (Fixit's "valid" examples).
    """

    id: str
    before: str
    after: Optional[str] = None
    diagnostics: Tuple[str, ...] = ()
    fires: bool = True
    path: Optional[str] = None  # the file name it is checked under (`tests/test_model.py`), when that matters
    # Options fields it runs with: (("eval", "sharded"),) is `--eval sharded`, (("spawn", True),) is `--spawn`
    options: Tuple[Tuple[str, object], ...] = ()
    # Project mode's examples (a module a training script imports): where the script's model, loader
    # epoch or checkpoint state ("model", "epoch", "state") is read in the module, as project mode
    # follows it from the script's calls: (("model", "Trainer", "self.model"),) is "the script calls
    # Trainer(model, ...), kept as self.model" (migrator.project.values).
    handed: Tuple[Tuple[str, str, str], ...] = ()

    @property
    def handed_caption(self) -> str:
        """` (the training script hands over its model as `self.model` in `Trainer`)`, for the docs."""
        if not self.handed:
            return ""
        where = ", ".join(f"its {_HANDED_KINDS.get(kind, kind)} as `{spelled}` in `{scope}`" for kind, scope, spelled in self.handed)
        return f" (the training script hands over {where})"

    @property
    def flags(self) -> str:
        """The command-line flags of `options` (`--eval sharded`, `--spawn`), for the docs."""
        return " ".join(f"--{name}" if value is True else f"--{name} {value}" for name, value in self.options)


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    summary: str  # one line, shown next to each finding
    what: str
    why: str
    fix: str
    fix_safety: str
    fixable: bool
    examples: Tuple[Example, ...] = ()
    example_language: str = "python"  # the fence language of the examples in explain() ("bash" for launcher rules)
    # An advisory that asks for no action (a note on scaling, a suggestion): it never fails `--check`.
    # Every other finding that is not fixed is something to act on, and does.
    informational: bool = False
    # The fixes whose edits this one's edits rely on (the process group DDP001 sets up, the wrap
    # DDP003 makes): a selection that takes this rule takes them too, and ignoring one of them
    # turns this one off (migrator.options.Options.fixes, which says why).
    requires: Tuple[str, ...] = ()
    # Each of its fixes stands alone (a print it guards): a `# ddp-migrate: ignore[CODE]` on one of
    # them drops that one and keeps the others (edits.Plan.site). Other fixes go whole.
    per_site: bool = False

    def explain(self) -> str:
        """The `--explain` text, in the shape of ruff's rule docs."""
        parts = [
            f"{self.code} ({self.name})",
            "",
            "## What it does",
            self.what.strip(),
            "",
            "## Why is this bad?",
            self.why.strip(),
            "",
            "## Fix",
            self.fix.strip(),
            "",
            "## Fix safety",
            self.fix_safety.strip(),
        ]
        if self.per_site:
            parts += ["", f"Each of its fixes stands alone: `# ddp-migrate: ignore[{self.code}]` on the line of one leaves "
                          "that one as it was and keeps the others."]
        for example in self.examples[:1]:
            fence = f"```{self.example_language}"
            heading = f"## Example (with `{example.flags}`)" if example.options else "## Example"
            parts += ["", heading + example.handed_caption, fence, example.before.rstrip(), "```"]
            if example.after is not None:
                parts += ["", "Use instead:", fence, example.after.rstrip(), "```"]
        quiet = [e for e in self.examples[1:] if not e.fires]
        if quiet:
            parts += ["", "## Where it does not apply"]
        for example in quiet:
            fence = f"```{self.example_language}"
            caption = example.id.replace("-", " ") + (f" (in `{example.path}`)" if example.path else "") + example.handed_caption
            parts += ["", f"{caption}:", fence, example.before.rstrip(), "```"]
        return "\n".join(parts) + "\n"
