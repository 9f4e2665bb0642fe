"""How one member of a consumer-protocol group (KIP-848) moves toward its target assignment.

The coordinator never gives a member a partition another member still owns, and never moves a
member to a new epoch while it still owns partitions it must give up. Each heartbeat it takes
the member's state, the group's target assignment for it and the partitions the member says
it owns, and computes the member's next state, as Kafka's CurrentAssignmentBuilder does:

* STABLE: the member owns its target (at the target epoch). A newer target starts it again.
* UNREVOKED_PARTITIONS: it was asked to give up `pending_revocation` and keeps its epoch until
  its heartbeat no longer lists them; then it moves on, epoch + 1.
* UNRELEASED_PARTITIONS: it is at the target epoch but part of its target is still owned by
  others; it gets each such partition once its owner releases it.

Partitions are `{topic: frozenset(partition)}`; `owner_epoch(topic, partition)` is the epoch
of the member that holds the partition now (-1: nobody), over the whole group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

Partitions = Mapping[str, frozenset[int]]
OwnerEpoch = Callable[[str, int], int]
UNOWNED = -1


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True)
class MemberAssignment:
    """A member's side of reconciliation: its epoch, what it owns, what it must give up."""

    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = -1
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)


def reconcile(
    member: MemberAssignment,
    target_epoch: int,
    target: Partitions,
    owned: Partitions | None,
    owner_epoch: OwnerEpoch,
) -> MemberAssignment:
    """The member's next state. `owned`: the partitions its last heartbeat listed (None when
    the heartbeat did not say, which counts as still owning everything)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, owned, owner_epoch)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, owned, owner_epoch)
    return _next(member, member.member_epoch, target_epoch, target, owned, owner_epoch)


def _still_owns(owned: Partitions | None, revoked: Partitions) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic, frozenset()) & partitions for topic, partitions in revoked.items())


def _next(
    member: MemberAssignment,
    epoch: int,
    target_epoch: int,
    target: Partitions,
    owned: Partitions | None,
    owner_epoch: OwnerEpoch,
) -> MemberAssignment:
    kept: dict[str, frozenset[int]] = {}
    revoke: dict[str, frozenset[int]] = {}
    gain: dict[str, frozenset[int]] = {}
    unreleased = False
    for topic in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic, frozenset())
        current = member.assigned.get(topic, frozenset())
        keep = current & wanted
        free = frozenset(p for p in wanted - keep if owner_epoch(topic, p) == UNOWNED)
        unreleased = unreleased or len(free) < len(wanted - keep)
        if keep:
            kept[topic] = keep
        if current - keep:
            revoke[topic] = current - keep
        if free:
            gain[topic] = free
    if revoke and _still_owns(owned, revoke):
        # Give up first, at the same epoch; the next epoch comes once the member has.
        return _moved(member, MemberState.UNREVOKED_PARTITIONS, epoch, kept, revoke)
    assigned = {t: kept.get(t, frozenset()) | gain.get(t, frozenset()) for t in {*kept, *gain}}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _moved(member, state, target_epoch, assigned, {})


def _moved(
    member: MemberAssignment,
    state: MemberState,
    epoch: int,
    assigned: Partitions,
    pending_revocation: Partitions,
) -> MemberAssignment:
    return replace(
        member,
        state=state,
        member_epoch=epoch,
        previous_member_epoch=member.member_epoch,
        assigned=dict(sorted(assigned.items())),
        pending_revocation=dict(sorted(pending_revocation.items())),
    )
