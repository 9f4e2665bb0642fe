"""LeaderEpochCache: the (epoch, start offset) entries, their KIP-279 lookups and their file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.records import build_batch
from rlog.core.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FaultyFileSystem, RealFileSystem
from rlog.core.storage.leader_epochs import EpochEntry, LeaderEpochCache
from rlog.core.storage.log import Log


def cache_of(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache([EpochEntry(epoch, offset) for epoch, offset in pairs])


def pairs_of(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in cache.entries]


# ---- assign ----


def test_assign_adds_only_newer_epochs() -> None:
    cache = cache_of()
    assert cache.latest_epoch == -1
    assert cache.assign(0, 0)
    assert cache.assign(2, 5)
    assert not cache.assign(2, 7), "the same epoch again"
    assert not cache.assign(1, 9), "an older epoch"
    assert not cache.assign(-1, 9), "an unstamped batch"
    assert pairs_of(cache) == [(0, 0), (2, 5)]
    assert cache.latest_epoch == 2


def test_assign_drops_older_entries_that_start_at_or_after_the_new_start() -> None:
    cache = cache_of((0, 0), (1, 5), (2, 8))
    assert cache.assign(3, 5)
    assert pairs_of(cache) == [(0, 0), (3, 5)]


# ---- end_offset_for ----

ENTRIES = ((0, 0), (2, 5), (4, 9))


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (4, (4, 12)),  # the latest epoch ends at the LEO
        (5, (4, 12)),  # newer than any: the latest
        (3, (2, 9)),  # unknown: the largest lower epoch, ending where epoch 4 starts
        (2, (2, 9)),
        (1, (0, 5)),
        (0, (0, 5)),
        (-1, (-1, -1)),
    ],
)
def test_end_offset_for(requested: int, expected: tuple[int, int]) -> None:
    assert cache_of(*ENTRIES).end_offset_for(requested, 12) == expected


def test_end_offset_for_an_epoch_below_every_entry_is_undefined() -> None:
    assert cache_of((3, 10), (5, 20)).end_offset_for(2, 30) == (-1, -1)
    assert cache_of().end_offset_for(0, 0) == (-1, -1)


epoch_entries = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=0, max_size=6
).map(
    # Cumulative sums make epochs strictly and offsets weakly increasing.
    lambda steps: [
        (sum(1 + e for e, _ in steps[: i + 1]), sum(o for _, o in steps[: i + 1]))
        for i in range(len(steps))
    ]
)


@given(epoch_entries, st.integers(-1, 30), st.integers(0, 10))
def test_end_offset_for_matches_a_brute_force_model(
    entries: list[tuple[int, int]], requested: int, beyond_last_start: int
) -> None:
    log_end_offset = (entries[-1][1] if entries else 0) + beyond_last_start
    lower = [pair for pair in entries if pair[0] <= requested]
    if requested < 0 or not lower:
        expected = (-1, -1)
    else:
        epoch = max(e for e, _ in lower)
        later_starts = [start for e, start in entries if e > epoch]
        expected = (epoch, min(later_starts) if later_starts else log_end_offset)
    assert cache_of(*entries).end_offset_for(requested, log_end_offset) == expected


# ---- truncation ----


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_offset() -> None:
    cache = cache_of(*ENTRIES)
    cache.truncate_from_end(10)
    assert pairs_of(cache) == [(0, 0), (2, 5), (4, 9)]
    cache.truncate_from_end(9)
    assert pairs_of(cache) == [(0, 0), (2, 5)]
    cache.truncate_from_end(3)
    assert pairs_of(cache) == [(0, 0)]
    cache.truncate_from_end(0)
    assert pairs_of(cache) == []


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        (0, [(0, 0), (2, 5), (4, 9)]),
        (3, [(0, 3), (2, 5), (4, 9)]),  # epoch 0 now starts at the log start
        (5, [(2, 5), (4, 9)]),
        (7, [(2, 7), (4, 9)]),
        (20, [(4, 20)]),
    ],
)
def test_truncate_from_start(offset: int, expected: list[tuple[int, int]]) -> None:
    cache = cache_of(*ENTRIES)
    cache.truncate_from_start(offset)
    assert pairs_of(cache) == expected


def test_truncate_from_start_before_every_entry_keeps_them() -> None:
    cache = cache_of((3, 10))
    cache.truncate_from_start(4)
    assert pairs_of(cache) == [(3, 10)]


# ---- the checkpoint file ----


def open_log(dir_path: Path) -> Log:
    return Log(
        str(dir_path),
        LogConfig(),
        RealFileSystem(),
        recovery_point=0,
        log_start_offset=0,
        now_ms=0,
    )


def write_epochs(log: Log, epochs: list[int]) -> None:
    for index, epoch in enumerate(epochs):
        log.append(build_batch([(None, b"v%d" % index)]), 0, leader_epoch=epoch)


def load(dir_path: Path, log: Log, fs: RealFileSystem | None = None) -> LeaderEpochCache:
    return LeaderEpochCache.load(
        fs or RealFileSystem(),
        str(dir_path),
        log.iter_batch_headers(),
        log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset,
    )


def test_changes_are_written_to_the_checkpoint_and_read_back(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    write_epochs(log, [0, 0, 2, 2])
    cache = load(tmp_path, log)
    assert pairs_of(cache) == [(0, 0), (2, 2)]
    cache.assign(5, 4)
    path = os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT)
    assert read_leader_epoch_checkpoint(RealFileSystem(), path) == [(0, 0), (2, 2), (5, 4)]
    again = load(tmp_path, log)
    assert not again.rebuilt_from_log
    assert pairs_of(again) == [(0, 0), (2, 2)], "epoch 5 starts at the LEO: nothing in it yet"


def test_a_missing_checkpoint_is_rebuilt_from_the_batch_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    write_epochs(log, [-1, 0, 0, 3, 7, 7])
    cache = load(tmp_path, log)
    assert cache.rebuilt_from_log
    assert pairs_of(cache) == [(0, 1), (3, 3), (7, 4)]
    path = os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT)
    assert read_leader_epoch_checkpoint(RealFileSystem(), path) == [(0, 1), (3, 3), (7, 4)]


def test_a_corrupt_checkpoint_is_rebuilt_from_the_batch_headers(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    write_epochs(log, [1, 4])
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_bytes(b"0\n2\n4 1\n1 0\n")  # goes backwards
    cache = load(tmp_path, log)
    assert cache.rebuilt_from_log
    assert pairs_of(cache) == [(1, 0), (4, 1)]


def test_entries_past_a_shortened_log_are_dropped_on_load(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    write_epochs(log, [0, 1, 2])
    load(tmp_path, log)
    log.truncate_to(2)  # as if the unsynced tail was lost with the checkpoint already written
    assert pairs_of(load(tmp_path, log)) == [(0, 0), (1, 1)]


def test_a_failed_checkpoint_write_leaves_the_cache_unchanged(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    fs = FaultyFileSystem()
    cache = load(tmp_path, log, fs)
    cache.assign(0, 0)
    fs.faults.sync_failures = 1
    with pytest.raises(OSError):
        cache.assign(1, 0)
    assert pairs_of(cache) == [(0, 0)]
    assert pairs_of(load(tmp_path, log)) == [], "epoch 0 starts at the LEO of the empty log"
