"""What verify judges from a run's records: one Row per check, PASS, FAIL or SKIP, with evidence.

Every verdict rests on what the processes did (the probe's records, the run's exit), never on the
script's text. A check that cannot be observed in this run says why and SKIPs: it never passes
for want of evidence. Each check is a function of the Observed run; CHECKS lists them in the
order of diagnosis (a run that did not end explains the rest).
"""
from __future__ import annotations

from typing import Callable, List, Tuple

from migrator.verify.checks.base import FAIL, PASS, SKIP, TITLES, Observed, Row, row, training_loader
from migrator.verify.checks.checkpoints import check_checkpoint_keys
from migrator.verify.checks.data import check_disjoint_batches, check_reshuffled
from migrator.verify.checks.effects import check_rank0_files, check_rank0_output
from migrator.verify.checks.run import (
    check_dataloader_workers, check_run, failed_before_training, failed_ranks, gloo_exit_abort, role_label, role_order,
)
from migrator.verify.checks.setup import check_ddp, check_destroyed, check_process_group
from migrator.verify.checks.training import check_in_sync

__all__ = ["PASS", "FAIL", "SKIP", "TITLES", "CHECKS", "Observed", "Row", "judge", "training_loader",
           "failed_before_training", "failed_ranks", "gloo_exit_abort", "role_label", "role_order"]


CHECKS: Tuple[Callable[[Observed], Row], ...] = (
    check_run, check_process_group, check_ddp, check_disjoint_batches, check_reshuffled, check_in_sync,
    check_rank0_files, check_rank0_output, check_destroyed, check_dataloader_workers, check_checkpoint_keys,
)


def judge(observed: Observed) -> List[Row]:
    """Every check, in order. A check that fails on a record it did not expect is a bug in
    verify, not a verdict on the script: it SKIPs and says so."""
    rows = []
    for check in CHECKS:
        try:
            rows.append(check(observed))
        except Exception as exc:  # noqa: BLE001
            name = check.__name__.replace("check_", "", 1)
            rows.append(row(name, SKIP, "internal error in ddp-migrate verify (please report it): "
                                        f"{type(exc).__name__}: {exc}"))
    return rows
