"""The simulation's offsets admin (sim_groups.py) checks OffsetDelete across coordinator
failovers: a coordinator that deletes offsets without writing their tombstones to the log is
found, because the next coordinator replays the offsets back."""

from __future__ import annotations

import pytest
from sim_cluster import run_seed

from rlog.core.groups import Append, Caller, Effect, GroupCoordinator
from rlog.core.protocol.errors import ErrorCode

SEEDS = 600  # the suite's sweep (test_sim_replication.py)


def test_deleting_offsets_without_tombstones_in_the_log_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: OffsetDelete takes its tombstones as written at once and never writes them."""
    delete_offsets = GroupCoordinator.delete_offsets

    def in_memory_only(
        self: GroupCoordinator, caller: Caller, body: dict[str, object], now: int
    ) -> list[Effect]:
        effects: list[Effect] = []
        for effect in delete_offsets(self, caller, body, now):
            if isinstance(effect, Append):
                effects += self.append_done(effect.append_id, ErrorCode.NONE, now)
            else:
                effects.append(effect)
        return effects

    monkeypatch.setattr(GroupCoordinator, "delete_offsets", in_memory_only)
    for seed in range(SEEDS):
        outcome = run_seed(seed)
        if not outcome.ok:
            assert outcome.invariant == "I9-offset-delete-undone", outcome.detail
            return
    pytest.fail("the planted bug went unnoticed")
