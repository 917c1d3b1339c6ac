"""What the CLI does with each file, and the tally it ends with (the shape of black's report.py).

The flags collapse into one WriteBack value so each layer branches on one thing. Report only
counts; render.py prints it.
"""
from __future__ import annotations

from enum import Enum

#: Exit status bits.
EXIT_WOULD_CHANGE = 1  # with --check: a file would change, or has a finding to act on (not with --exit-zero)
EXIT_FAILED = 2  # a file could not be read, parsed, migrated or written


class WriteBack(Enum):
    """What happens to a migrated file."""

    PRINT = "print"  # one file, no flag: the migrated source on stdout
    DIFF = "diff"  # --diff, or several paths / a directory with no flag
    IN_PLACE = "in-place"  # --in-place
    CHECK = "check"  # --check: write nothing, report, exit 1 when something would change
    CHECK_DIFF = "check-diff"  # --check --diff

    @classmethod
    def from_flags(cls, *, diff: bool, in_place: bool, check: bool, single_file: bool) -> "WriteBack":
        """Raise ValueError for combinations that make no sense (--in-place with --diff/--check)."""
        if in_place and (diff or check):
            raise ValueError("--in-place cannot be combined with --diff or --check")
        if check:
            return cls.CHECK_DIFF if diff else cls.CHECK
        if in_place:
            return cls.IN_PLACE
        if diff or not single_file:
            return cls.DIFF
        return cls.PRINT

    @property
    def writes(self) -> bool:
        return self is WriteBack.IN_PLACE

    @property
    def shows_diff(self) -> bool:
        return self in (WriteBack.DIFF, WriteBack.CHECK_DIFF)

    @property
    def needs_code(self) -> bool:
        """Is the migrated source shown or written? Plain --check only reports what would change."""
        return self is not WriteBack.CHECK

    @property
    def checks(self) -> bool:
        return self in (WriteBack.CHECK, WriteBack.CHECK_DIFF)


class Report:
    """Counts files by outcome and derives the summary line and the exit status.

    A plain class: the CLI's start-up is measured, and a dataclass costs a millisecond to define."""

    def __init__(self, mode: WriteBack, change_count: int = 0, same_count: int = 0, failure_count: int = 0,
                 skip_count: int = 0, attention_count: int = 0, exit_zero: bool = False) -> None:
        self.mode = mode
        self.change_count = change_count
        self.same_count = same_count
        self.failure_count = failure_count
        self.skip_count = skip_count  # files passed over for a reason shown to the user (above the size limit)
        self.attention_count = attention_count  # files left unchanged with a finding to act on ("need a human")
        self.exit_zero = exit_zero  # --exit-zero: something to act on does not set EXIT_WOULD_CHANGE

    def skipped(self) -> None:
        self.skip_count += 1

    def done(self, changed: bool, needs_human: bool = False) -> None:
        """A file migrated (or not); `needs_human`: it has a finding that is neither fixed nor informational."""
        if changed:
            self.change_count += 1
        elif needs_human:
            self.attention_count += 1
        else:
            self.same_count += 1

    def failed(self) -> None:
        self.failure_count += 1

    @property
    def total(self) -> int:
        return self.change_count + self.same_count + self.failure_count + self.attention_count

    @property
    def return_code(self) -> int:
        code = 0
        if (self.change_count or self.attention_count) and self.mode.checks and not self.exit_zero:
            code |= EXIT_WOULD_CHANGE
        if self.failure_count:
            code |= EXIT_FAILED
        return code

    def status(self, changed: bool) -> str:
        """The per-file verb: 'would migrate' / 'migrated' / 'unchanged'."""
        if not changed:
            return "unchanged"
        return "migrated" if self.mode.writes else "would migrate"

    def __str__(self) -> str:
        """'2 files would be migrated, 1 needs a human, 5 left unchanged, 1 failed' (the noun only on the
        first part). A file that "needs a human" was left unchanged with a finding to act on."""
        migrated = "migrated" if self.mode.writes else "would be migrated"
        parts = [
            (self.change_count, migrated),
            (self.attention_count, "needs a human" if self.attention_count == 1 else "need a human"),
            (self.same_count, "left unchanged"),
            (self.failure_count, "failed"),
            (self.skip_count, "skipped"),
        ]
        out = []
        for count, what in parts:
            if not count:
                continue
            if out:
                out.append(f"{count} {what}")
            else:
                out.append(f"{count} {'file' if count == 1 else 'files'} {what}")
        return ", ".join(out) if out else "no Python files found"
