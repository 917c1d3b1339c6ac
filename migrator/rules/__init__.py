"""The rule registry: an explicit, ordered tuple. Order is the order rules are planned in."""
from __future__ import annotations

from typing import Tuple

from migrator.rule import Rule

RULES: Tuple[Rule, ...] = ()
