"""Pure rules for choosing a partition's leader and ISR; the controller turns the result into a
ChangePartition record (with the epochs bumped).

`usable(broker_id)` says whether a broker may lead or join the ISR now: registered and unfenced
(and not the broker being fenced). Candidates are always taken in assignment order, so the
preferred replica wins whenever it may.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rlog.core.metadata.image import PartitionInfo
from rlog.core.metadata.records import NO_LEADER

Usable = Callable[[int], bool]


@dataclass(frozen=True, slots=True)
class PartitionChange:
    leader: int | None = None  # None: unchanged
    isr: tuple[int, ...] | None = None  # None: unchanged
    unclean: bool = False
    recovering: bool | None = None  # None: unchanged (a new leader always ends it)


def clean_leader(state: PartitionInfo, usable: Usable) -> int | None:
    """The first replica, in assignment order, that is in the ISR and usable."""
    for replica in state.replicas:
        if replica in state.isr and usable(replica):
            return replica
    return None


def unclean_leader(state: PartitionInfo, usable: Usable) -> int | None:
    """The first usable replica outside the ISR: it may lack acknowledged records."""
    for replica in state.replicas:
        if replica not in state.isr and usable(replica):
            return replica
    return None


def change_of(state: PartitionInfo, leader: int, isr: tuple[int, ...]) -> PartitionChange | None:
    """The change from `state` to (leader, isr), or None when nothing changes."""
    if leader == state.leader and isr == state.isr:
        return None
    return PartitionChange(
        leader=None if leader == state.leader else leader,
        isr=None if isr == state.isr else isr,
    )


def without_broker(
    state: PartitionInfo, broker_id: int, usable: Usable, unclean_allowed: bool
) -> PartitionChange | None:
    """`broker_id` is being fenced or shut down: it leaves the ISR (unless it is the last
    member: an ISR is never empty) and, if it leads, the next ISR replica takes over. With no
    such replica the partition goes offline, or with `unclean_allowed` any live replica leads.
    """
    if broker_id not in state.isr:
        assert state.leader != broker_id, "a leader is always in the ISR"
        return None
    others = tuple(member for member in state.isr if member != broker_id)
    isr = others or state.isr
    if state.leader != broker_id:
        return change_of(state, state.leader, isr)

    def eligible(candidate: int) -> bool:
        return candidate != broker_id and usable(candidate)

    leader = clean_leader(PartitionInfo(state.replicas, isr, NO_LEADER, 0, 0), eligible)
    if leader is None and unclean_allowed:
        leader = unclean_leader(state, eligible)
        if leader is not None:
            return PartitionChange(leader=leader, isr=(leader,), unclean=True)
    return change_of(state, NO_LEADER if leader is None else leader, isr)


def offline_election(
    state: PartitionInfo, usable: Usable, unclean_allowed: bool
) -> PartitionChange | None:
    """A leader for a partition without one: from the ISR, else (if allowed) from outside it.
    A recovering partition's ISR is not trusted: only `recovery_election` or an unclean
    election gives it a leader."""
    assert state.leader == NO_LEADER
    leader = None if state.recovering else clean_leader(state, usable)
    if leader is not None:
        return PartitionChange(leader=leader)
    if unclean_allowed:
        leader = unclean_leader(state, usable)
        if leader is not None:
            return PartitionChange(leader=leader, isr=(leader,), unclean=True)
    return None


def preferred_election(state: PartitionInfo, usable: Usable) -> PartitionChange | None:
    """Leadership back to the preferred replica, if it is in the ISR, usable and not leading."""
    preferred = state.preferred_leader
    if state.leader == preferred or preferred not in state.isr or not usable(preferred):
        return None
    if state.recovering:
        return None
    return PartitionChange(leader=preferred)


LogEnd = tuple[int, int]  # (the epoch of a replica's last batch, its log end offset)


def recovery_election(
    state: PartitionInfo, usable: Usable, log_ends: Mapping[int, LogEnd]
) -> PartitionChange | None:
    """A recovering partition's leader: once every replica is usable and has told its log end,
    the longest log leads, as the sole ISR member (KIP-966's balanced unclean recovery). The
    longest log is the one with the latest last epoch, then the highest end offset: every
    record acknowledged under that epoch's leader is on it, unless more replicas than the ISR
    could lose were lost. Ties go to the earlier replica in assignment order."""
    assert state.recovering and state.leader == NO_LEADER
    if not all(usable(replica) and replica in log_ends for replica in state.replicas):
        return None
    leader = max(
        state.replicas,
        key=lambda replica: (*log_ends[replica], -state.replicas.index(replica)),
    )
    return PartitionChange(leader=leader, isr=(leader,), recovering=False)
