"""The replication arithmetic as tiny pure functions, each tested on its own.

Like raft's `quorum.CommittedIndex`: the high watermark from the ISR's log end offsets, when a
follower counts as caught up, who may join or must leave the ISR, and where a follower truncates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication.messages import NO_EPOCH


def high_watermark_of(log_end_offsets: Iterable[int | None]) -> int | None:
    """The smallest log end offset among the replicas the HW waits for (the leader's own
    included): every one of them holds every offset below it. None while one is unknown (a
    follower that has not fetched in the current leader epoch), so the HW must not move.
    """
    smallest: int | None = None
    for offset in log_end_offsets:
        if offset is None:
            return None
        smallest = offset if smallest is None else min(smallest, offset)
    return smallest


def maximal_isr(isr: Iterable[int], proposed_isr: Iterable[int] | None) -> frozenset[int]:
    """Kafka's maximal ISR: while a proposal is in flight, a member being added already counts
    for the HW and a member being removed still does, until the controller commits.
    """
    members = frozenset(isr)
    return members if proposed_isr is None else members | frozenset(proposed_isr)


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    """What the leader knows of one follower in the current leader epoch."""

    log_end_offset: int | None = None  # None until it fetches in this epoch
    last_caught_up_ms: int | None = None  # None: not caught up in this epoch
    last_fetch_ms: int | None = None
    leader_end_offset_at_last_fetch: int | None = None
    # Its log start as its last Fetch said (None: not said yet), for DeleteRecords' low watermark.
    log_start_offset: int | None = None


def progress_after_fetch(
    progress: FollowerProgress,
    fetch_offset: int,
    leader_end_offset: int,
    now_ms: int,
    *,
    log_start_offset: int | None = None,
) -> FollowerProgress:
    """Kafka's lastCaughtUpTimeMs rule: a fetch from the leader's LEO means caught up now; a
    fetch from at least the LEO the leader had at the previous fetch means caught up then.
    `log_start_offset`: the follower's own, if its Fetch version carries it.
    """
    if log_start_offset is None:
        log_start_offset = progress.log_start_offset
    caught_up_ms = progress.last_caught_up_ms
    if fetch_offset >= leader_end_offset:
        caught_up_ms = _latest(caught_up_ms, now_ms)
    elif (
        progress.leader_end_offset_at_last_fetch is not None
        and progress.last_fetch_ms is not None
        and fetch_offset >= progress.leader_end_offset_at_last_fetch
    ):
        caught_up_ms = _latest(caught_up_ms, progress.last_fetch_ms)
    return FollowerProgress(
        log_end_offset=fetch_offset,
        last_caught_up_ms=caught_up_ms,
        last_fetch_ms=now_ms,
        leader_end_offset_at_last_fetch=leader_end_offset,
        log_start_offset=log_start_offset,
    )


def _latest(time_ms: int | None, other_ms: int) -> int:
    return other_ms if time_ms is None else max(time_ms, other_ms)


def is_in_sync(
    progress: FollowerProgress, leader_end_offset: int, now_ms: int, lag_time_max_ms: int
) -> bool:
    """At the leader's LEO, or caught up within the last `lag_time_max_ms`."""
    if progress.log_end_offset == leader_end_offset:
        return True
    caught_up_ms = progress.last_caught_up_ms
    return caught_up_ms is not None and now_ms - caught_up_ms <= lag_time_max_ms


def out_of_sync_members(
    isr: Iterable[int],
    leader_id: int,
    followers: Mapping[int, FollowerProgress],
    leader_end_offset: int,
    now_ms: int,
    lag_time_max_ms: int,
) -> tuple[int, ...]:
    """ISR members (never the leader) that have not caught up for too long."""
    return tuple(
        member
        for member in isr
        if member != leader_id
        and not is_in_sync(
            followers.get(member, FollowerProgress()), leader_end_offset, now_ms, lag_time_max_ms
        )
    )


def can_join_isr(
    progress: FollowerProgress, high_watermark: int, leader_epoch_start_offset: int
) -> bool:
    """A follower rejoins once it holds everything below the HW and has fetched into the
    current leader epoch (so its log has been checked against this leader's).
    """
    log_end_offset = progress.log_end_offset
    return (
        log_end_offset is not None
        and log_end_offset >= high_watermark
        and log_end_offset >= leader_epoch_start_offset
    )


def truncation_point(
    leader_answer: tuple[int, int],
    own_answer: tuple[int, int],
    log_end_offset: int,
    high_watermark: int,
) -> tuple[int, bool]:
    """Where a follower truncates after an OffsetsForLeaderEpoch answer (KIP-101 / KIP-279).

    `leader_answer` is the leader's (epoch, end offset); `own_answer` the follower's own
    (epoch, end offset) for that epoch, or (-1, start of its first epoch) when every epoch it
    knows is newer than the leader's answer: the leader has none of those, so nothing from there
    on is kept. Returns (offset, done); not done means the follower does not know the leader's
    epoch: it cut back to the end of its largest lower epoch and must ask again.
    """
    leader_epoch, leader_end_offset = leader_answer
    if leader_epoch < 0 or leader_end_offset < 0:
        return min(high_watermark, log_end_offset), True  # no common epoch: the HW is all we trust
    own_epoch, own_end_offset = own_answer
    if own_epoch < 0 or own_epoch == leader_epoch:
        return min(leader_end_offset, own_end_offset, log_end_offset), True
    return min(own_end_offset, log_end_offset), False


def leader_epoch_error(current_leader_epoch: int, leader_epoch: int) -> ErrorCode | None:
    """KIP-320: a request from someone who saw an older leader is fenced; a newer, unknown."""
    if current_leader_epoch in (NO_EPOCH, leader_epoch):
        return None
    if current_leader_epoch < leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH
