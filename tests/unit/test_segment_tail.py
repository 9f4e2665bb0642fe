"""The headers a LogSegment keeps in memory after its last offset-index entries (`_Tail` in
core/storage/segment.py): lookups must answer exactly as the file does through every change to
the segment (a stale tail would serve wrong positions), and reads at the log end read no header
from the file.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from sim.sim_fs import SimFileSystem

from rlog.core.records import BatchHeader, build_batch, iter_batches
from rlog.core.storage import segment as segment_module
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FileSlice
from rlog.core.storage.segment import LOG_SUFFIX, LogSegment, segment_file_name

DIR = "/topic-0"
BatchSpec = tuple[int, int, int]  # (records, value bytes per record, timestamp)
Batch = tuple[int, BatchHeader]  # (position, header)
Op = tuple[str, object]


def _new_fs() -> SimFileSystem:
    fs = SimFileSystem()
    fs.makedirs(DIR)
    return fs


def _append(segment: LogSegment, specs: Sequence[BatchSpec]) -> None:
    """Batches numbered on from the segment's end, written in one append as Log.append does."""
    data = bytearray()
    for count, value_bytes, timestamp in specs:
        records = [(b"k%d" % i, bytes([i % 251]) * value_bytes) for i in range(count)]
        offset = segment.next_offset + sum(h.records_count for _, h in iter_batches(data))
        data += build_batch(records, base_offset=offset, base_timestamp=timestamp)
    segment.append(data, [header for _, header in iter_batches(data)], now_ms=0)


def _file_batches(fs: SimFileSystem, base_offset: int) -> list[Batch]:
    """What the .log file holds, parsed without the segment's code (checks every CRC too)."""
    data = bytes(fs.files[f"{DIR}/{segment_file_name(base_offset, LOG_SUFFIX)}"].data)
    return list(iter_batches(data))


def _without_tail(segment: LogSegment) -> LogSegment:
    """The segment as it was before the tail existed: the same state (sharing its files and
    indexes, for reading only), with every header read from the file.
    """
    reference = copy.copy(segment)
    reference._tail = segment_module._Tail()
    return reference


def _slice(found: FileSlice | None) -> tuple[int, int, int] | None:
    return None if found is None else (found.position, found.size, found.next_offset)


def _check_tail(segment: LogSegment, batches: list[Batch], cap: int) -> None:
    """The tail is the file's last batches: all of those from the last index entry on and none
    before the entry before it, unless there are more than `cap` of them (then a shorter run
    that still ends at the end).
    """
    tail = segment._tail
    kept = list(zip(tail.positions, tail.headers, strict=True))
    assert tail.last_offsets == [header.last_offset for header in tail.headers]
    assert kept == batches[len(batches) - len(kept) :]
    assert len(kept) <= cap
    starts = [0, *segment._offset_index._values]  # indexed positions: where intervals begin
    from_last = [batch for batch in batches if batch[0] >= starts[-1]]
    from_previous = [batch for batch in batches if batch[0] >= starts[max(0, len(starts) - 2)]]
    if len(from_last) <= cap:
        assert len(from_last) <= len(kept) <= len(from_previous)
    else:
        assert len(kept) >= 1


def _check_answers(fs: SimFileSystem, segment: LogSegment, cap: int) -> None:
    """Lookups match the file's batches, and reads match the segment's without its tail."""
    batches = _file_batches(fs, segment.base_offset)
    end = batches[-1][1].next_offset if batches else segment.base_offset
    assert (segment.next_offset, segment.size) == (end, sum(h.size for _, h in batches))
    _check_tail(segment, batches, cap)
    reference = _without_tail(segment)

    probes = {segment.base_offset - 1, end - 1, end, end + 1}
    for _, header in batches:
        probes |= {header.base_offset, header.base_offset + 1, header.last_offset}
    for offset in sorted(probes):
        index = next((i for i, (_, h) in enumerate(batches) if h.last_offset >= offset), None)
        rest = batches[index:] if index is not None and offset < end else []
        expected = rest[0] if rest else None
        assert segment._find_batch(offset) == expected == reference._find_batch(offset)
        assert list(segment.batches_from(offset)) == rest
        assert list(segment.headers_from(offset)) == [header for _, header in rest]
        for max_offset_exclusive in (offset + 2, end - 1, end):
            for max_bytes in (0, 150, 1 << 20):
                for min_one_batch in (True, False):
                    args = (offset, max_bytes, max_offset_exclusive, min_one_batch)
                    assert _slice(segment.read(*args)) == _slice(reference.read(*args)), args
    for timestamp in (0, 7, 20, 40, 41):
        assert segment.find_offset_for_timestamp(
            timestamp, segment.base_offset
        ) == reference.find_offset_for_timestamp(timestamp, segment.base_offset)


_BATCH_SPECS = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 120), st.integers(0, 40)), min_size=1, max_size=4
)
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), _BATCH_SPECS),
        st.tuples(st.just("truncate"), st.integers(-1, 50)),  # relative to the base offset
        st.tuples(st.just("reload"), st.none()),
        st.tuples(st.just("recover"), st.booleans()),  # in place, or opened afresh
        st.tuples(st.just("torn"), st.integers(1, 120)),  # bytes of a torn append, then recover
    ),
    max_size=14,
)


@settings(max_examples=150, deadline=None)
@given(
    base_offset=st.sampled_from([0, 1000]),
    index_interval_bytes=st.sampled_from([0, 1, 150, 400, 4096]),
    index_size_max_bytes=st.sampled_from([8, 24, 1 << 20]),  # 1 or 3 entries: a full index
    cap=st.sampled_from([1, 3, 4096]),
    ops=_OPS,
)
def test_tail_answers_as_the_file_does_through_every_change(
    base_offset: int, index_interval_bytes: int, index_size_max_bytes: int, cap: int, ops: list[Op]
) -> None:
    config = LogConfig(
        index_interval_bytes=index_interval_bytes, index_size_max_bytes=index_size_max_bytes
    )
    fs = _new_fs()
    with mock.patch.object(segment_module, "TAIL_BATCHES_MAX", cap):
        segment = LogSegment.create(fs, DIR, base_offset, config)
        _check_answers(fs, segment, cap)
        for kind, arg in ops:
            if kind == "append":
                assert isinstance(arg, list)
                _append(segment, arg)
            elif kind == "truncate":
                assert isinstance(arg, int)
                segment.truncate_to(base_offset + arg)
            elif kind == "reload":
                segment = LogSegment.open(fs, DIR, base_offset, config)
                segment.load(now_ms=0)
            elif kind == "recover":
                if arg:
                    segment = LogSegment.open(fs, DIR, base_offset, config)
                segment.recover(now_ms=0)
            else:
                assert kind == "torn" and isinstance(arg, int)
                torn = build_batch([(b"k", b"v" * 100)], base_offset=segment.next_offset)
                segment.log_file.append(torn[:arg])  # a crash cut this append short
                assert segment.recover(now_ms=0) == arg
            _check_answers(fs, segment, cap)


@contextmanager
def _log_reads(segment: LogSegment) -> Iterator[list[tuple[int, int]]]:
    """(position, size) of every read of the segment's .log file while in the block."""
    log_file = segment.log_file
    read = log_file.read
    reads: list[tuple[int, int]] = []

    def counting_read(position: int, size: int) -> bytes:
        reads.append((position, size))
        return read(position, size)

    with mock.patch.object(log_file, "read", counting_read):
        yield reads


def _read_at_the_end(segment: LogSegment, batches: list[Batch]) -> None:
    """A follower's fetch at LEO - 1, and a consumer's that stops at a HW of LEO - 1 from the
    batch after the last index entry (the longest header walk there is); `batches` is the file's.
    """
    leo = segment.next_offset
    entry = segment._offset_index.last_entry()
    assert entry is not None
    first = entry[0] + 1  # the indexed batch's last offset + 1: in the batch after it
    found = segment._find_batch(leo - 1)
    assert found == batches[-1]
    follower = segment.read(leo - 1, 1 << 20, leo, True)
    assert follower is not None and follower.next_offset == leo
    consumer = segment.read(first, 1 << 20, leo - 1, True)
    assert consumer is not None and consumer.next_offset == found[1].base_offset
    tail = [batch for batch in batches if batch[1].last_offset >= first]
    assert list(segment.batches_from(first)) == tail


def test_reads_at_the_log_end_read_no_header_from_the_file() -> None:
    fs = _new_fs()
    config = LogConfig()  # index.interval.bytes 4096: an entry every 38 of these batches
    segment = LogSegment.create(fs, DIR, 0, config)
    for _ in range(100):
        _append(segment, [(1, 40, 0)])
    entry = segment._offset_index.last_entry()
    assert entry is not None and segment.next_offset - entry[0] >= 20  # a walk of 20+ headers
    batches = _file_batches(fs, 0)
    with _log_reads(segment) as reads:
        _read_at_the_end(segment, batches)
    assert reads == []

    # The same after a reload, and after a truncation and more appends.
    segment = LogSegment.open(fs, DIR, 0, config)
    segment.load(now_ms=0)
    with _log_reads(segment) as reads:
        _read_at_the_end(segment, batches)
    assert reads == []
    segment.truncate_to(segment.next_offset - 5)
    for _ in range(3):
        _append(segment, [(2, 40, 0)])
    batches = _file_batches(fs, 0)
    with _log_reads(segment) as reads:
        _read_at_the_end(segment, batches)
    assert reads == []


def test_truncation_then_new_batches_serve_the_new_positions() -> None:
    """A tail left from before a truncation would point into bytes written since."""
    fs = _new_fs()
    config = LogConfig(index_interval_bytes=1 << 20)
    segment = LogSegment.create(fs, DIR, 0, config)
    _append(segment, [(1, 10, 0)] * 10)
    segment.truncate_to(4)
    _append(segment, [(3, 100, 0), (1, 0, 0)])
    batches = _file_batches(fs, 0)
    assert [h.base_offset for _, h in batches] == [0, 1, 2, 3, 4, 7]
    assert segment._find_batch(5) == batches[4]
    assert list(segment.batches_from(7)) == batches[5:]
    found = segment.read(4, 1 << 20, 7, True)
    assert _slice(found) == (batches[4][0], batches[4][1].size, 7)


def test_a_fetch_from_just_before_the_last_index_entry_reads_no_header_from_the_file() -> None:
    """A follower that fetched a few batches ago asks for an offset before the newest index
    entry: that lookup is served from memory too, not by a walk from the entry before it."""
    fs = _new_fs()
    config = LogConfig()  # index.interval.bytes 4096: an entry every 38 of these batches
    segment = LogSegment.create(fs, DIR, 0, config)
    entries = 0
    while entries < 3:  # appends until the third entry was just made
        _append(segment, [(1, 40, 0)])
        entries = len(segment._offset_index)
    entry = segment._offset_index.last_entry()
    assert entry is not None and entry[0] == segment.next_offset - 1
    follower_offset = entry[0] - 5  # fetched up to here, five batches before the entry
    batches = _file_batches(fs, 0)
    with _log_reads(segment) as reads:
        found = segment.read(follower_offset, 1 << 20, segment.next_offset, True)
    assert reads == []
    assert found is not None and found.position == batches[follower_offset][0]
    assert found.next_offset == segment.next_offset
