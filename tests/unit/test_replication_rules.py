"""The replication arithmetic (core/replication/rules.py), one pure function at a time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication.rules import (
    FollowerProgress,
    can_join_isr,
    high_watermark_of,
    is_in_sync,
    leader_epoch_error,
    maximal_isr,
    out_of_sync_members,
    progress_after_fetch,
    truncation_point,
)

LAG_MS = 1_000

# ---- the high watermark ----


@given(st.lists(st.one_of(st.none(), st.integers(0, 50)), min_size=1, max_size=6))
def test_high_watermark_is_the_largest_offset_every_replica_holds(
    log_end_offsets: list[int | None],
) -> None:
    """Brute force: the largest h such that every replica holds every offset below h."""
    if any(offset is None for offset in log_end_offsets):
        assert high_watermark_of(log_end_offsets) is None
        return
    known = [offset for offset in log_end_offsets if offset is not None]
    expected = max(h for h in range(max(known) + 1) if all(offset >= h for offset in known))
    assert high_watermark_of(log_end_offsets) == expected


def test_high_watermark_waits_for_a_replica_whose_progress_is_unknown() -> None:
    assert high_watermark_of([7, None, 9]) is None
    assert high_watermark_of([7]) == 7


def test_maximal_isr_counts_members_being_added_and_being_removed() -> None:
    assert maximal_isr((1, 2, 3), None) == {1, 2, 3}
    assert maximal_isr((1, 2), (1, 2, 3)) == {1, 2, 3}, "expansion in flight"
    assert maximal_isr((1, 2, 3), (1, 2)) == {1, 2, 3}, "shrink in flight"


# ---- caught up, in sync, joining ----


def test_a_fetch_from_the_leader_end_offset_is_caught_up_now() -> None:
    progress = progress_after_fetch(FollowerProgress(), 10, 10, now_ms=500)
    assert progress == FollowerProgress(10, 500, 500, 10)


def test_a_fetch_reaching_the_previous_leader_end_offset_was_caught_up_at_that_fetch() -> None:
    first = progress_after_fetch(FollowerProgress(), 4, 10, now_ms=100)
    assert first.last_caught_up_ms is None
    second = progress_after_fetch(first, 10, 15, now_ms=300)
    assert second.last_caught_up_ms == 100, "it had reached what the leader had at 100"
    assert second.log_end_offset == 10
    third = progress_after_fetch(second, 12, 20, now_ms=400)
    assert third.last_caught_up_ms == 100, "12 < 15, the leader's LEO at the fetch before"


def test_caught_up_time_never_goes_back() -> None:
    progress = FollowerProgress(10, 900, 800, 10)
    assert progress_after_fetch(progress, 10, 12, now_ms=950).last_caught_up_ms == 900


def test_in_sync_at_the_leader_end_offset_or_within_the_lag_time() -> None:
    at_end = FollowerProgress(log_end_offset=10, last_caught_up_ms=None)
    assert is_in_sync(at_end, 10, now_ms=99_999, lag_time_max_ms=LAG_MS)
    behind = FollowerProgress(log_end_offset=8, last_caught_up_ms=1_000)
    assert is_in_sync(behind, 10, now_ms=2_000, lag_time_max_ms=LAG_MS)
    assert not is_in_sync(behind, 10, now_ms=2_001, lag_time_max_ms=LAG_MS)
    assert not is_in_sync(FollowerProgress(), 10, now_ms=0, lag_time_max_ms=LAG_MS)


def test_out_of_sync_members_never_include_the_leader() -> None:
    followers = {
        2: FollowerProgress(log_end_offset=10, last_caught_up_ms=0),
        3: FollowerProgress(log_end_offset=4, last_caught_up_ms=0),
    }
    lagging = out_of_sync_members((1, 2, 3, 4), 1, followers, 10, LAG_MS + 1, LAG_MS)
    assert lagging == (3, 4), "4 has no progress at all"


@pytest.mark.parametrize(
    ("log_end_offset", "high_watermark", "epoch_start_offset", "joins"),
    [
        (None, 0, 0, False),
        (5, 6, 0, False),  # below the HW
        (6, 6, 0, True),
        (6, 6, 7, False),  # not yet into the current leader epoch
        (7, 6, 7, True),
    ],
)
def test_can_join_isr(
    log_end_offset: int | None, high_watermark: int, epoch_start_offset: int, joins: bool
) -> None:
    progress = FollowerProgress(log_end_offset=log_end_offset)
    assert can_join_isr(progress, high_watermark, epoch_start_offset) is joins


# ---- where a follower truncates ----


@pytest.mark.parametrize(
    ("leader_answer", "own_answer", "log_end_offset", "high_watermark", "expected"),
    [
        ((-1, -1), (-1, -1), 10, 4, (4, True)),  # nothing in common: the HW
        ((3, 7), (3, 9), 10, 4, (7, True)),  # the leader's epoch ended earlier
        ((3, 9), (3, 7), 10, 4, (7, True)),  # ours ended earlier (the leader has more)
        ((3, 12), (3, 10), 10, 4, (10, True)),  # nothing to cut
        ((3, 7), (1, 5), 10, 4, (5, False)),  # we never saw epoch 3: cut to our epoch 1's end
        ((3, 7), (-1, 10), 10, 4, (7, True)),  # we know no epoch that old (nor any at all)
        ((3, 7), (-1, 5), 10, 4, (5, True)),  # all ours are newer: the leader has none of them
    ],
)
def test_truncation_point(
    leader_answer: tuple[int, int],
    own_answer: tuple[int, int],
    log_end_offset: int,
    high_watermark: int,
    expected: tuple[int, bool],
) -> None:
    assert truncation_point(leader_answer, own_answer, log_end_offset, high_watermark) == expected


@pytest.mark.parametrize(
    ("current", "leader_epoch", "expected"),
    [
        (-1, 5, None),
        (5, 5, None),
        (4, 5, ErrorCode.FENCED_LEADER_EPOCH),
        (6, 5, ErrorCode.UNKNOWN_LEADER_EPOCH),
        (0, -1, ErrorCode.UNKNOWN_LEADER_EPOCH),  # a replica that has no state yet
    ],
)
def test_leader_epoch_error(current: int, leader_epoch: int, expected: ErrorCode | None) -> None:
    assert leader_epoch_error(current, leader_epoch) == expected
