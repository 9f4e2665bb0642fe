"""The simulator runs the broker code that ships: a bug planted in core/broker is found within
the suite's seeds. If these pass with the plant in place, the simulator tests a copy, not the
product (or its invariants have gone blind)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sim_cluster import Outcome, SimOptions, run_seed

from rlog.core.broker import fetch_sessions
from rlog.core.broker.messages import Body
from rlog.core.broker.produce import ProduceJob
from rlog.core.groups import GroupCoordinator
from rlog.core.groups.group import Group
from rlog.core.producer_state import ProducerStateManager
from rlog.core.replication import TruncationPlan
from rlog.core.storage.log import Log

SUITE_SEEDS = 600  # the sweep in test_sim_replication.py


def first_failure(options: SimOptions | None = None, *, of: str = "") -> Outcome | None:
    """The first seed's failure (whose invariant starts with `of`, if given)."""
    for seed in range(SUITE_SEEDS):
        outcome = run_seed(seed, options)
        if not outcome.ok and outcome.invariant.startswith(of):
            return outcome
    return None


def test_acks_all_answered_before_the_isr_has_the_batch_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: the leader answers acks=all as soon as its own log has the batch."""
    appended = ProduceJob.appended

    def without_waiting_for_the_isr(
        self: ProduceJob,
        position: int,
        answer: object,
        *,
        waits_for_ack: bool,
        waits_for_sync: bool,
    ) -> None:
        appended(self, position, answer, waits_for_ack=False, waits_for_sync=waits_for_sync)  # type: ignore[arg-type]

    monkeypatch.setattr(ProduceJob, "appended", without_waiting_for_the_isr)
    found = first_failure()
    assert found is not None, "the planted bug went unnoticed"
    # Group commits are acks=all writes too: a lost commit may be the first loss seen.
    assert found.invariant in ("I1-acked-in-leader", "I9-committed-offset-lost"), found.detail


def test_a_follower_that_never_truncates_its_divergent_tail_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: a follower takes every OffsetForLeaderEpoch answer as 'your log agrees'."""

    def trusting(
        self: fetch_sessions.FollowerFetching,
        session: object,
        sent: fetch_sessions._Sent,
        body: Body,
        now_ms: int,
    ) -> None:
        for key, _found in self._answers(body, "topics", "topic", "partition"):
            plan = sent.plans.get(key)
            replica = self._replica(session, key)  # type: ignore[arg-type]
            if replica is None or not isinstance(plan, TruncationPlan):
                continue
            latest = replica.epochs.latest_epoch
            effects: Sequence[object] = replica.on_epoch_end_offset(
                latest, replica.log_end_offset, leader_epoch=plan.current_leader_epoch
            )
            self._on_effects(key, effects)  # type: ignore[arg-type]

    monkeypatch.setattr(fetch_sessions.FollowerFetching, "_on_epoch_end_offsets", trusting)
    # Fetch v11 only: with v12 a DivergingEpoch answer would still truncate the follower.
    # Another check may see a consequence first on some seeds (a replica of the transactional
    # topic that never converges fails liveness): the divergence itself must be named too.
    found = first_failure(SimOptions(fetch_versions=(11,)), of="I10")
    assert found is not None, "the planted bug went unnoticed"
    assert found.invariant.startswith("I10"), found.detail


def test_read_committed_fetches_that_list_no_aborted_transactions_are_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: a read_committed fetch never lists the aborted transactions."""
    monkeypatch.setattr(Log, "aborted_transactions", lambda self, fetch, upper: [])
    found = first_failure()
    assert found is not None, "the planted bug went unnoticed"
    assert found.invariant == "txn-aborted-read", found.detail


def test_an_lso_that_ignores_open_transactions_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the last stable offset is the high watermark, open transactions or not."""
    monkeypatch.setattr(ProducerStateManager, "first_unstable_offset", lambda self: None)
    found = first_failure()
    assert found is not None, "the planted bug went unnoticed"
    assert found.invariant in ("txn-partial", "txn-aborted-read"), found.detail


def test_a_retried_batch_appended_again_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: idempotence off; a retried produce is written a second time."""
    monkeypatch.setattr(ProducerStateManager, "check", lambda self, header: None)
    found = first_failure()
    assert found is not None, "the planted bug went unnoticed"
    assert found.invariant == "txn-duplicate", found.detail


def test_transactional_offsets_kept_on_abort_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the group coordinator keeps a transaction's offsets though it aborted."""
    complete = GroupCoordinator.complete_transaction

    def always_commit(
        self: GroupCoordinator, partition: int, producer_id: int, committed: bool, now: int
    ) -> list[object]:
        return complete(self, partition, producer_id, True, now)  # type: ignore[return-value]

    monkeypatch.setattr(GroupCoordinator, "complete_transaction", always_commit)
    found = first_failure()
    assert found is not None, "the planted bug went unnoticed"
    assert found.invariant == "txn-offsets", found.detail


def test_a_coordinator_that_loads_groups_as_new_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: a new coordinator ignores the group's record and starts it at generation 0."""
    from_record = Group.from_record.__func__  # type: ignore[attr-defined]

    def forgetting(cls: type[Group], group_id: str, record: object, now: int) -> Group:
        return from_record(cls, group_id, None, now)  # type: ignore[no-any-return]

    monkeypatch.setattr(Group, "from_record", classmethod(forgetting))
    found = first_failure()
    assert found is not None, "the planted bug went unnoticed"
    assert found.invariant == "group-generation-went-back", found.detail
