from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.index import CorruptIndexError, OffsetIndex, TimeIndex

BASE = 1_000
fs = RealFileSystem()


def _offset_index(dir_path: str, entries_max: int = 1_000) -> OffsetIndex:
    return OffsetIndex(fs.open(f"{dir_path}/i.index", create=True), BASE, entries_max)


def _time_index(dir_path: str, entries_max: int = 1_000) -> TimeIndex:
    return TimeIndex(fs.open(f"{dir_path}/i.timeindex", create=True), BASE, entries_max)


# Strictly increasing (offset, position) pairs, as a segment appends them.
entries_strategy = st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5_000)), max_size=40).map(
    lambda steps: [
        (BASE + sum(s[0] for s in steps[: i + 1]), sum(s[1] for s in steps[: i + 1]))
        for i in range(len(steps))
    ]
)


@settings(max_examples=60, deadline=None)
@given(entries=entries_strategy, targets=st.lists(st.integers(0, BASE + 3_000), max_size=30))
def test_offset_lookup_is_the_largest_entry_at_or_below(
    entries: list[tuple[int, int]], targets: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as dir_path:
        index = _offset_index(dir_path)
        for offset, position in entries:
            index.append(offset, position)
        reloaded = _offset_index(dir_path)
        reloaded.load(log_size_bytes=10**9)
        for target in targets:
            below = [entry for entry in entries if entry[0] <= target]
            expected = below[-1] if below else (BASE, 0)
            assert index.lookup(target) == expected
            assert reloaded.lookup(target) == expected


@settings(max_examples=60, deadline=None)
@given(
    entries=entries_strategy,
    position_max=st.integers(0, 200_000),
    offset_end=st.integers(BASE - 5, BASE + 3_000),
)
def test_floor_position_matches_brute_force(
    entries: list[tuple[int, int]], position_max: int, offset_end: int
) -> None:
    with tempfile.TemporaryDirectory() as dir_path:
        index = _offset_index(dir_path)
        for offset, position in entries:
            index.append(offset, position)
        allowed = [p for o, p in entries if p <= position_max and o < offset_end]
        assert index.floor_position(position_max, offset_end) == (allowed[-1] if allowed else None)


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), max_size=40),
    targets=st.lists(st.integers(-5, 1_000), max_size=20),
)
def test_time_lookup_is_the_last_entry_at_or_below(
    steps: list[tuple[int, int]], targets: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as dir_path:
        index = _time_index(dir_path)
        kept: list[tuple[int, int]] = []
        timestamp, offset = 0, BASE
        for timestamp_step, offset_step in steps:
            timestamp += timestamp_step
            offset += offset_step
            index.maybe_append(timestamp, offset)
            if not kept or timestamp > kept[-1][0]:  # only a growing timestamp makes an entry
                kept.append((timestamp, offset))
        assert len(index) == len(kept)
        for target in targets:
            below = [entry for entry in kept if entry[0] <= target]
            assert index.lookup(target) == (below[-1][1] if below else BASE)


def test_truncate_to_drops_entries_at_or_after_offset_in_file_too(tmp_path: Path) -> None:
    index = _offset_index(str(tmp_path))
    for offset, position in [(BASE + 5, 100), (BASE + 9, 200), (BASE + 20, 300)]:
        index.append(offset, position)
    index.truncate_to(BASE + 9)
    assert index.last_entry() == (BASE + 5, 100)
    reloaded = _offset_index(str(tmp_path))
    reloaded.load(log_size_bytes=1_000)
    assert len(reloaded) == 1 and reloaded.lookup(BASE + 100) == (BASE + 5, 100)

    times = _time_index(str(tmp_path))
    times.maybe_append(10, BASE + 3)
    times.maybe_append(20, BASE + 9)
    times.truncate_to(BASE + 9)
    assert times.last_entry() == (10, BASE + 3)


def test_is_full(tmp_path: Path) -> None:
    index = _offset_index(str(tmp_path), entries_max=2)
    index.append(BASE + 1, 10)
    assert not index.is_full
    index.append(BASE + 2, 20)
    assert index.is_full


@pytest.mark.parametrize(
    ("content", "log_size"),
    [
        (b"\x00" * 7, 100),  # not a whole number of entries
        (struct.pack(">iiii", 5, 10, 4, 20), 100),  # offsets go backwards
        (struct.pack(">iiii", 4, 10, 5, 10), 100),  # positions do not grow
        (struct.pack(">ii", 4, 100), 100),  # position past the end of the log
        (struct.pack(">ii", -1, 0), 100),  # below the base offset
    ],
)
def test_offset_index_checks_on_load(tmp_path: Path, content: bytes, log_size: int) -> None:
    (tmp_path / "i.index").write_bytes(content)
    with pytest.raises(CorruptIndexError):
        _offset_index(str(tmp_path)).load(log_size)


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 13,
        struct.pack(">qiqi", 10, 1, 10, 2),  # timestamps do not grow
        struct.pack(">qiqi", 10, 2, 11, 1),  # offsets go backwards
    ],
)
def test_time_index_checks_on_load(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "i.timeindex").write_bytes(content)
    with pytest.raises(CorruptIndexError):
        _time_index(str(tmp_path)).load(100)
