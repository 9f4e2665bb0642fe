"""The consumer-protocol (KIP-848) checks of sim_consumer_groups.py are not vacuous: a coordinator
that gives a partition to a member before its owner has released it, or that forgets after a
failover what it told its members they own, is found within the suite's seeds."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sim_cluster import Outcome, run_seed

from rlog.core.groups import consumer_group
from rlog.core.groups.reconciliation import UNOWNED, MemberAssignment

SUITE_SEEDS = 600  # the sweep in test_sim_replication.py


def first_failure(of: str) -> Outcome | None:
    """The first seed's failure whose invariant starts with `of`."""
    for seed in range(SUITE_SEEDS):
        outcome = run_seed(seed)
        if not outcome.ok and outcome.invariant.startswith(of):
            return outcome
    return None


def test_giving_a_partition_before_its_owner_revoked_it_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: reconciliation takes every partition as unowned, so a partition still held (or
    being revoked) by one member is given to another at once."""
    reconcile = consumer_group.reconcile

    def careless(
        member: MemberAssignment, target_epoch: int, target: Any, owned: Any, owner_epoch: Any
    ) -> MemberAssignment:
        return reconcile(member, target_epoch, target, owned, lambda topic, partition: UNOWNED)

    monkeypatch.setattr(consumer_group, "reconcile", careless)
    found = first_failure("consumer")
    assert found is not None, "the planted bug went unnoticed"
    assert found.invariant == "consumer-coordinator-two-owners", found.detail


def test_a_coordinator_that_forgets_what_its_members_own_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: a new coordinator replays each member's epoch but not the partitions it was
    given, so it hands them to others while their owners, at that epoch, still consume them.
    Its own state stays disjoint: only the clients' view shows the two owners."""
    from_log = consumer_group.ConsumerGroup.from_log.__func__  # type: ignore[attr-defined]

    def forgetting(cls: type[consumer_group.ConsumerGroup], *args: Any) -> Any:
        group = from_log(cls, *args)
        for member in group.members.values():
            member.reconciled = replace(member.reconciled, assigned={}, pending_revocation={})
        return group

    monkeypatch.setattr(consumer_group.ConsumerGroup, "from_log", classmethod(forgetting))
    # Some seeds find it first as a group that never settles (a member waits for partitions
    # the coordinator no longer knows it has); the check asked of here is the clients' view.
    found = first_failure("consumer-two-owners")
    assert found is not None, "the planted bug went unnoticed"
