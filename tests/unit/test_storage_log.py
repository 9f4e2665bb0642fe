from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.records import (
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    TimestampType,
    _write_crc,
    build_batch,
    decode_batch,
    iter_batches,
    read_header,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FaultyFileSystem
from rlog.core.storage.log import (
    Log,
    OffsetOutOfOrderError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)

# Types of the conftest helpers.
BatchMaker = Callable[..., bytes]
LogOpener = Callable[..., Log]
OffsetsOf = Callable[[bytes], list[int]]


@dataclass(frozen=True)
class ModelBatch:
    base_offset: int
    last_offset: int
    size: int


def _expected_read(
    log: Log,
    batches: list[ModelBatch],
    offset: int,
    max_bytes: int,
    max_offset_exclusive: int,
    min_one_batch: bool,
) -> list[int]:
    """Base offsets a read should return, by the contract, from the model alone."""
    segment = [s for s in log.segments if s.base_offset <= offset][-1]
    in_segment = [b for b in batches if segment.base_offset <= b.base_offset < segment.next_offset]
    candidates = [b for b in in_segment if b.last_offset >= offset]
    if not candidates or candidates[0].last_offset >= max_offset_exclusive:
        return []
    taken: list[ModelBatch] = []
    for batch in candidates:
        if batch.last_offset >= max_offset_exclusive:
            break
        if sum(b.size for b in taken) + batch.size > max_bytes:
            break
        taken.append(batch)
    if not taken and min_one_batch:
        taken = candidates[:1]
    return [b.base_offset for b in taken]


def _read_bases(log: Log, offset: int, max_bytes: int, max_offset: int, one: bool) -> list[int]:
    result = log.read(offset, max_bytes, max_offset, one)
    if result.records is None:
        return []
    data = result.records.read()
    headers = [header for _, header in iter_batches(data)]  # also checks every CRC
    assert result.records.next_offset == headers[-1].last_offset + 1  # what a fetch counts
    return [header.base_offset for header in headers]


appends_strategy = st.lists(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 120)), min_size=1, max_size=3),
    min_size=1,
    max_size=25,
)


@settings(max_examples=100, deadline=None)
@given(
    appends=appends_strategy,
    segment_bytes=st.integers(150, 1_500),
    index_interval_bytes=st.integers(0, 400),
    fetches=st.lists(
        st.tuples(st.floats(0, 1), st.integers(1, 2_500), st.floats(0, 1.1), st.booleans()),
        min_size=1,
        max_size=25,
    ),
)
def test_offsets_contiguous_and_reads_match_the_model(
    appends: list[list[tuple[int, int]]],
    segment_bytes: int,
    index_interval_bytes: int,
    fetches: list[tuple[float, int, float, bool]],
) -> None:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes)
    with tempfile.TemporaryDirectory() as dir_path:
        log = Log(dir_path, config, _fs(), recovery_point=0, log_start_offset=0, now_ms=0)
        model: list[ModelBatch] = []
        largest_append = 0
        for append in appends:
            data = b"".join(
                build_batch([(b"k", bytes(value_bytes))] * count) for count, value_bytes in append
            )
            largest_append = max(largest_append, len(data))
            leo = log.log_end_offset
            info = log.append(data, now_ms=0)
            assert info.first_offset == leo  # contiguous with what came before
            assert info.num_batches == len(append)
            model += [ModelBatch(h.base_offset, h.last_offset, h.size) for h in info.headers]
        assert [b.base_offset for b in model[1:]] == [b.last_offset + 1 for b in model[:-1]]
        assert log.log_end_offset == model[-1].last_offset + 1
        for segment in log.segments[:-1]:
            assert segment.size <= max(segment_bytes, largest_append)
        log.flush()
        reopened = Log(
            dir_path,
            config,
            _fs(),
            recovery_point=log.log_end_offset,
            log_start_offset=0,
            now_ms=0,
        )
        assert reopened.recovery_summary.recovered_segments == 0
        leo = log.log_end_offset
        for offset_share, max_bytes, limit_share, min_one_batch in fetches:
            offset = round(offset_share * leo)
            max_offset_exclusive = round(limit_share * leo)
            expected = (
                _expected_read(log, model, offset, max_bytes, max_offset_exclusive, min_one_batch)
                if offset < leo
                else []
            )
            for subject in (log, reopened):
                got = _read_bases(subject, offset, max_bytes, max_offset_exclusive, min_one_batch)
                assert got == expected
        log.close()
        reopened.close()


def _fs() -> FaultyFileSystem:
    return FaultyFileSystem()


def test_read_returns_exactly_the_records_from_the_offset(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker, offsets_of: OffsetsOf
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=500, index_interval_bytes=0))
    for _ in range(30):
        log.append(make_batch(3), now_ms=0)
    assert len(log.segments) > 3
    for offset in range(90):
        result = log.read(offset, max_bytes=10**6, max_offset_exclusive=90)
        assert result.records is not None
        offsets = offsets_of(result.records.read())
        first_of_batch = offset - offset % 3
        assert offsets[0] == first_of_batch  # the batch holding `offset`, whole
        segment = [s for s in log.segments if s.base_offset <= offset][-1]
        assert offsets == list(range(first_of_batch, segment.next_offset))
    assert log.read(90, 10**6, 90).records is None  # at the LEO: nothing, no error


def test_high_watermark_limits_reads(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker, offsets_of: OffsetsOf
) -> None:
    log = open_log(str(tmp_path))
    for _ in range(5):
        log.append(make_batch(2), now_ms=0)
    for high_watermark in range(11):
        result = log.read(0, 10**6, high_watermark)
        offsets = offsets_of(result.records.read()) if result.records else []
        assert offsets == list(range(high_watermark - high_watermark % 2))
        assert all(offset < high_watermark for offset in offsets)


def test_kip74_first_batch_goes_whole_even_past_max_bytes(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path))
    big = make_batch(1, value_bytes=5_000)
    log.append(big, now_ms=0)
    log.append(make_batch(1), now_ms=0)
    result = log.read(0, max_bytes=100, max_offset_exclusive=2, min_one_batch=True)
    assert result.records is not None and result.size_bytes == len(big)
    assert log.read(0, 100, 2, min_one_batch=False).records is None


def test_out_of_range_reads(tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker) -> None:
    log = open_log(str(tmp_path), log_start_offset=0)
    log.append(make_batch(3), now_ms=0)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100, 3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100, 3)
    log.advance_log_start_offset(2)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100, 3)
    assert log.read(2, 10**6, 3).records is not None


def test_roll_by_segment_ms(tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_ms=1_000))
    log.append(make_batch(), now_ms=5_000)
    log.append(make_batch(), now_ms=6_000)  # exactly segment.ms old: not yet
    assert len(log.segments) == 1
    log.append(make_batch(), now_ms=6_001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append(make_batch(), now_ms=6_500)
    assert len(log.segments) == 2  # the new segment's age starts at its first append


def test_roll_when_index_full(tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker) -> None:
    config = LogConfig(index_interval_bytes=0, index_size_max_bytes=24)  # three offset entries
    log = open_log(str(tmp_path), config)
    for _ in range(9):
        log.append(make_batch(), now_ms=0)
    # Every batch but a segment's first gets an offset entry, so four batches fill a segment.
    # (Timestamps never grow, so the time index keeps its single entry.)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]


def test_retention_by_time_deletes_whole_old_segments_never_the_active(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=200, retention_ms=1_000))
    for timestamp in (100, 200, 300, 5_000, 5_100):
        log.append(make_batch(2, timestamp=timestamp, value_bytes=60), now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
    assert log.delete_retained_segments(now_ms=1_200) == 1  # 1_200 - 200 is not > 1_000
    assert log.log_start_offset == 2
    assert log.delete_retained_segments(now_ms=10_000) == 3
    assert [s.base_offset for s in log.segments] == [8]  # the active one stays, though expired
    assert log.log_start_offset == 8
    assert not (tmp_path / "00000000000000000000.log").exists()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 100, 10)


def test_retention_by_bytes(tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=200, retention_ms=-1))
    for _ in range(5):
        log.append(make_batch(2, value_bytes=60), now_ms=0)
    segment_size = log.segments[0].size
    config = LogConfig(segment_bytes=200, retention_ms=-1, retention_bytes=2 * segment_size)
    log.update_config(config)
    assert log.delete_retained_segments(now_ms=0) == 3
    assert log.size_bytes == 2 * segment_size and log.log_start_offset == 6


def test_compact_only_policy_keeps_everything(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    config = LogConfig(
        segment_bytes=200, retention_ms=0, retention_bytes=0, cleanup_policy="compact"
    )
    log = open_log(str(tmp_path), config)
    for _ in range(4):
        log.append(make_batch(2, value_bytes=60), now_ms=0)
    assert log.delete_retained_segments(now_ms=10**9) == 0


def test_advance_log_start_offset_deletes_segments_below_it(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=200))
    for _ in range(4):
        log.append(make_batch(2, value_bytes=60), now_ms=0)
    log.advance_log_start_offset(5)
    assert log.log_start_offset == 5
    assert [s.base_offset for s in log.segments] == [4, 6]
    with pytest.raises(OffsetOutOfRangeError):
        log.advance_log_start_offset(9)


def test_offset_for_timestamp_finds_the_first_record_at_or_after(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=300, index_interval_bytes=0))
    stamps = [[10, 30, 20], [25, 40, 35], [5, 50, 45], [60, 55, 70]]
    for i, timestamps in enumerate(stamps):
        compression = Compression.GZIP if i % 2 else Compression.NONE
        log.append(
            make_batch(3, timestamp=timestamps[0], timestamps=timestamps, compression=compression),
            now_ms=0,
        )
    flat = [ts for batch in stamps for ts in batch]
    for target in range(0, 75):
        expected = next(((o, ts) for o, ts in enumerate(flat) if ts >= target), None)
        assert log.offset_for_timestamp(target) == expected, target


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(
        st.lists(st.integers(0, 1_000), min_size=1, max_size=4), min_size=1, max_size=15
    ),
    segment_bytes=st.integers(150, 800),
    start=st.integers(0, 20),
    target=st.integers(-1, 1_001),
)
def test_offset_for_timestamp_matches_brute_force(
    batches: list[list[int]], segment_bytes: int, start: int, target: int
) -> None:
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=50)
    with tempfile.TemporaryDirectory() as dir_path:
        log = Log(dir_path, config, _fs(), recovery_point=0, log_start_offset=0, now_ms=0)
        for timestamps in batches:
            records = [(None, b"v")] * len(timestamps)
            log.append(build_batch(records, base_timestamp=0, timestamps=timestamps), now_ms=0)
        flat = [ts for batch in batches for ts in batch]
        log.advance_log_start_offset(min(start, len(flat)))
        expected = next(
            ((o, ts) for o, ts in enumerate(flat) if o >= log.log_start_offset and ts >= target),
            None,
        )
        assert log.offset_for_timestamp(target) == expected
        log.close()


def test_log_append_time(tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker) -> None:
    log = open_log(str(tmp_path), LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append(make_batch(2, timestamp=5) + make_batch(1, timestamp=6), now_ms=777)
    assert info.log_append_time_ms == 777 and info.max_timestamp == 777
    data = log.read(0, 10**6, 3).records.read()
    for position, header in iter_batches(data):
        assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert {r.timestamp for r in decode_batch(data, position)} == {777}


def test_leader_epoch_is_stamped(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path))
    info = log.append(make_batch(2) + make_batch(1), now_ms=0, leader_epoch=7)
    assert [h.partition_leader_epoch for h in info.headers] == [7, 7]
    data = log.read(0, 10**6, 3).records.read()
    assert [h.partition_leader_epoch for _, h in iter_batches(data)] == [7, 7]


def test_follower_append_keeps_bytes_and_checks_contiguity(
    tmp_path: Path, open_log: LogOpener
) -> None:
    log = open_log(str(tmp_path))
    leader_batches = build_batch([(b"a", b"1")] * 2, base_offset=0, partition_leader_epoch=3)
    leader_batches += build_batch([(b"b", b"2")], base_offset=2, partition_leader_epoch=4)
    info = log.append(leader_batches, now_ms=0, assign_offsets=False)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert log.read(0, 10**6, 3).records.read() == leader_batches  # byte for byte
    with pytest.raises(OffsetOutOfOrderError):
        log.append(build_batch([(b"c", b"3")], base_offset=4), now_ms=0, assign_offsets=False)
    assert log.log_end_offset == 3


def test_bad_input_writes_nothing(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path), LogConfig(message_max_bytes=500))
    log.append(make_batch(), now_ms=0)
    size = log.size_bytes
    corrupt = bytearray(make_batch(2))
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        log.append(make_batch() + bytes(corrupt), now_ms=0)  # the good batch is not written either
    with pytest.raises(RecordTooLargeError):
        log.append(make_batch() + make_batch(1, value_bytes=600), now_ms=0)
    with pytest.raises(InvalidRecordError):
        log.append(b"", now_ms=0)
    unknown_codec = bytearray(make_batch())
    unknown_codec[22] |= 0x07  # attributes' codec bits: 7 is no codec
    _write_crc(unknown_codec, 0)
    with pytest.raises(InvalidRecordError):
        log.append(bytes(unknown_codec), now_ms=0)
    assert (log.log_end_offset, log.size_bytes) == (1, size)


def test_producer_batch_count_must_match_offsets(tmp_path: Path, open_log: LogOpener) -> None:
    batch = bytearray(build_batch([(b"k", b"v")] * 3))
    batch[57:61] = (2).to_bytes(4, "big")
    _write_crc(batch, 0)
    log = open_log(str(tmp_path))
    with pytest.raises(InvalidRecordError):
        log.append(bytes(batch), now_ms=0)


def test_truncate_to_then_append_continues(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker, offsets_of: OffsetsOf
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=300, index_interval_bytes=0))
    for _ in range(10):
        log.append(make_batch(2, value_bytes=40), now_ms=0)
    log.flush()
    log.truncate_to(9)  # inside the batch [8, 9]: that batch goes too
    assert log.log_end_offset == 8 and log.recovery_point == 8
    assert all(s.base_offset <= 8 for s in log.segments)
    info = log.append(make_batch(1), now_ms=0)
    assert info.first_offset == 8
    assert offsets_of(log.read(0, 10**6, 9).records.read())[:1] == [0]
    all_offsets = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 10**6, log.log_end_offset).records.read()
        all_offsets += offsets_of(data)
        offset = all_offsets[-1] + 1
    assert all_offsets == list(range(9))


def test_truncate_fully_and_start_at(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=300))
    for _ in range(6):
        log.append(make_batch(2, value_bytes=40), now_ms=0)
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (100, 100, 100)
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000000100.index",
        "00000000000000000100.log",
        "00000000000000000100.timeindex",
    ]
    assert log.append(make_batch(), now_ms=0).first_offset == 100


def test_flush_due_and_recovery_point(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path), LogConfig(flush_messages=1))
    assert not log.flush_due(0)
    log.append(make_batch(2), now_ms=0)
    assert log.flush_due(0) and log.unflushed_messages == 2
    log.flush(up_to_offset=1)
    assert log.recovery_point == 1
    log.flush()
    assert log.recovery_point == 2 and not log.flush_due(0)

    timed = open_log(str(tmp_path / "timed"), LogConfig(flush_ms=100))
    timed.append(make_batch(), now_ms=1_000)
    timed.append(make_batch(), now_ms=1_050)
    assert not timed.flush_due(1_099)
    assert timed.flush_due(1_100)  # counted from the oldest unflushed append


def test_failed_fsync_keeps_the_recovery_point(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    fs = FaultyFileSystem()
    log = open_log(str(tmp_path), fs=fs)
    log.append(make_batch(3), now_ms=0)
    fs.faults.sync_failures = 1
    with pytest.raises(OSError):
        log.flush()
    assert log.recovery_point == 0 and log.unflushed_messages == 3
    log.flush()
    assert log.recovery_point == 3


@pytest.mark.parametrize("fault", ["disk_full", "torn"])
def test_failed_append_leaves_the_log_unchanged(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker, offsets_of: OffsetsOf, fault: str
) -> None:
    fs = FaultyFileSystem()
    log = open_log(str(tmp_path), fs=fs)
    log.append(make_batch(2), now_ms=0)
    size = log.size_bytes
    if fault == "disk_full":
        fs.faults.disk_full = True
    else:
        fs.faults.tear_next_append_bytes = 70
    with pytest.raises(OSError) as raised:
        log.append(make_batch(3), now_ms=0)
    if fault == "disk_full":
        assert raised.value.errno == errno.ENOSPC
    assert (log.log_end_offset, log.size_bytes) == (2, size)
    assert os.path.getsize(tmp_path / "00000000000000000000.log") == size
    fs.faults.disk_full = False
    assert log.append(make_batch(1), now_ms=0).first_offset == 2
    assert offsets_of(log.read(0, 10**6, 3).records.read()) == [0, 1, 2]


def test_slice_of_a_deleted_segment_stays_readable(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker, offsets_of: OffsetsOf
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=200, retention_ms=10))
    for _ in range(3):
        log.append(make_batch(2, timestamp=0, value_bytes=60), now_ms=0)
    in_flight = log.read(0, 10**6, 6).records
    assert log.delete_retained_segments(now_ms=1_000) == 2
    assert not (tmp_path / "00000000000000000000.log").exists()
    assert offsets_of(in_flight.read()) == [0, 1]  # the send in progress still has its bytes
    assert read_header(in_flight.read()).base_offset == 0


def test_iter_batch_headers_walks_every_batch_from_the_log_start(
    tmp_path: Path, open_log: LogOpener, make_batch: BatchMaker
) -> None:
    log = open_log(str(tmp_path), LogConfig(segment_bytes=300, index_interval_bytes=100))
    written = []
    for count in (1, 3, 2, 1, 4, 2, 2, 1):
        written += log.append(make_batch(count, value_bytes=30), now_ms=0).headers
    assert len(log.segments) > 2
    assert list(log.iter_batch_headers()) == written
    assert list(log.iter_batch_headers(5)) == written[2:]  # from the batch holding offset 5
    log.advance_log_start_offset(7)
    assert list(log.iter_batch_headers()) == written[4:]  # batches [0] [1-3] [4-5] [6] [7-10]


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 1_000)), min_size=1, max_size=20),
    config=st.builds(
        LogConfig, segment_bytes=st.integers(150, 800), index_interval_bytes=st.integers(0, 200)
    ),
    cut_share=st.floats(0, 1),
)
def test_truncate_keeps_a_consistent_prefix(
    batches: list[tuple[int, int]], config: LogConfig, cut_share: float
) -> None:
    with tempfile.TemporaryDirectory() as dir_path:
        log = Log(dir_path, config, _fs(), recovery_point=0, log_start_offset=0, now_ms=0)
        headers = []
        for count, timestamp in batches:
            batch = build_batch([(None, b"v")] * count, base_timestamp=timestamp)
            headers += log.append(batch, now_ms=0).headers
        cut = round(cut_share * log.log_end_offset)
        log.truncate_to(cut)
        kept = [h for h in headers if h.last_offset < cut]
        assert log.log_end_offset == (kept[-1].next_offset if kept else 0)
        for segment in log.segments:  # the state a truncation restores, per segment
            inside = [h for h in kept if segment.base_offset <= h.base_offset < segment.next_offset]
            assert segment.largest_timestamp == max((h.max_timestamp for h in inside), default=-1)
        assert list(log.iter_batch_headers()) == kept
        info = log.append(build_batch([(None, b"after")], base_timestamp=5), now_ms=0)
        assert info.first_offset == log.log_end_offset - 1 == (kept[-1].next_offset if kept else 0)
        log.flush()
        log.close()
        reopened = Log(
            dir_path,
            config,
            _fs(),
            recovery_point=info.last_offset + 1,
            log_start_offset=0,
            now_ms=0,
        )
        assert reopened.recovery_summary.recovered_segments == 0  # indexes stayed consistent
        assert list(reopened.iter_batch_headers()) == [*kept, *info.headers]
        reopened.close()
