"""Startup recovery: torn tails, corrupt batches, bad indexes, clean restarts, bad checkpoints."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.records import BatchHeader, build_batch, decode_batch, iter_batches
from rlog.core.storage.checkpoint import RECOVERY_POINT_CHECKPOINT
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log
from rlog.core.storage.log_manager import LogManager

BatchMaker = Callable[..., bytes]
LogOpener = Callable[..., Log]

fs = RealFileSystem()


def _open(dir_path: str, config: LogConfig, recovery_point: int) -> Log:
    return Log(dir_path, config, fs, recovery_point=recovery_point, log_start_offset=0, now_ms=0)


def _records_by_reading(log: Log) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record, fetched batch by batch from the log start."""
    records: list[tuple[int, bytes | None]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, max_bytes=1, max_offset_exclusive=log.log_end_offset)
        assert result.records is not None
        data = result.records.read()
        (position, header), *_ = iter_batches(data)
        assert header.base_offset <= offset <= header.last_offset  # the index found the batch
        records += [(r.offset, r.value) for r in decode_batch(data, position)]
        offset = header.next_offset
    return records


def _fill(log: Log, sizes: list[tuple[int, int]]) -> tuple[list[BatchHeader], list[tuple]]:
    """Append one batch per (count, value size); returns headers and the expected records."""
    headers: list[BatchHeader] = []
    records: list[tuple[int, bytes | None]] = []
    for count, value_bytes in sizes:
        values = [os.urandom(value_bytes) for _ in range(count)]
        info = log.append(build_batch([(None, v) for v in values], base_timestamp=7), now_ms=0)
        headers += info.headers
        records += list(zip(range(info.first_offset, info.last_offset + 1), values, strict=True))
    return headers, records


batch_sizes = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 80)), min_size=1, max_size=20)
log_configs = st.builds(
    LogConfig, segment_bytes=st.integers(200, 1_200), index_interval_bytes=st.integers(0, 300)
)


def _segment_file(log_dir: str, base_offset: int) -> str:
    return os.path.join(log_dir, f"{base_offset:020d}.log")


@settings(max_examples=40, deadline=None)
@given(
    sizes=batch_sizes,
    config=log_configs,
    flushed_share=st.floats(0, 1),
    cut_share=st.floats(0, 1),
)
def test_torn_tail_keeps_every_whole_batch_before_the_cut(
    sizes: list[tuple[int, int]], config: LogConfig, flushed_share: float, cut_share: float
) -> None:
    with tempfile.TemporaryDirectory() as log_dir:
        log = _open(log_dir, config, 0)
        headers, records = _fill(log, sizes)
        recovery_point = headers[round(flushed_share * (len(headers) - 1))].base_offset
        log.flush(up_to_offset=recovery_point)
        last = log.active_segment
        in_last = [h for h in headers if h.base_offset >= last.base_offset]
        flushed_bytes = sum(h.size for h in in_last if h.base_offset < recovery_point)
        cut = flushed_bytes + round(cut_share * (last.size - flushed_bytes))
        log.close()  # as after kill -9: no flush, then the tail is cut
        os.truncate(_segment_file(log_dir, last.base_offset), cut)

        reopened = _open(log_dir, config, recovery_point)
        whole: list[BatchHeader] = []
        end = 0
        for header in in_last:
            end += header.size
            if end <= cut:
                whole.append(header)
        expected_end = whole[-1].next_offset if whole else last.base_offset
        assert reopened.log_end_offset == expected_end
        assert reopened.recovery_summary.truncated_bytes == cut - sum(h.size for h in whole)
        assert _records_by_reading(reopened) == records[:expected_end]
        assert reopened.append(build_batch([(None, b"next")]), now_ms=0).first_offset == (
            expected_end
        )
        assert _records_by_reading(reopened)[-1] == (expected_end, b"next")
        reopened.close()


@settings(max_examples=40, deadline=None)
@given(
    sizes=batch_sizes,
    config=log_configs,
    flushed_share=st.floats(0, 1),
    damaged_share=st.floats(0, 1),
    data=st.data(),
)
def test_corrupt_batch_after_recovery_point_is_cut_with_all_after_it(
    sizes: list[tuple[int, int]],
    config: LogConfig,
    flushed_share: float,
    damaged_share: float,
    data: st.DataObject,
) -> None:
    with tempfile.TemporaryDirectory() as log_dir:
        log = _open(log_dir, config, 0)
        headers, records = _fill(log, sizes)
        flushed = round(flushed_share * (len(headers) - 1))
        recovery_point = headers[flushed].base_offset
        log.flush(up_to_offset=recovery_point)
        damaged = headers[flushed + round(damaged_share * (len(headers) - 1 - flushed))]
        segment = [s for s in log.segments if s.base_offset <= damaged.base_offset][-1]
        position = sum(
            h.size for h in headers if segment.base_offset <= h.base_offset < damaged.base_offset
        )
        # partitionLeaderEpoch (bytes 12-15) is the one field neither the CRC nor offsets cover.
        byte = data.draw(st.integers(0, damaged.size - 5).map(lambda b: b if b < 12 else b + 4))
        log.close()
        with open(_segment_file(log_dir, segment.base_offset), "r+b") as file:
            file.seek(position + byte)
            original = file.read(1)[0]
            file.seek(position + byte)
            file.write(bytes([original ^ data.draw(st.integers(1, 255))]))

        reopened = _open(log_dir, config, recovery_point)
        assert reopened.log_end_offset == damaged.base_offset
        assert _records_by_reading(reopened) == records[: damaged.base_offset]
        assert all(s.base_offset <= damaged.base_offset for s in reopened.segments)
        reopened.close()


def _three_segment_log(log_dir: str, make_batch: BatchMaker) -> tuple[LogConfig, Log]:
    config = LogConfig(segment_bytes=400, index_interval_bytes=0)
    log = _open(log_dir, config, 0)
    for i in range(12):
        log.append(make_batch(2, timestamp=i, value_bytes=30), now_ms=0)
    assert len(log.segments) >= 3
    log.flush()
    log.close()
    return config, log


@pytest.mark.parametrize(
    "damage",
    [
        "delete index",
        "delete time index",
        "random bytes",
        "partial entry",
        "plausible but wrong",
        "time index past the end",
    ],
)
def test_bad_index_is_rebuilt_not_trusted(
    tmp_path: Path, make_batch: BatchMaker, damage: str
) -> None:
    config, log = _three_segment_log(str(tmp_path), make_batch)
    middle = log.segments[1].base_offset
    index_path = tmp_path / f"{middle:020d}.index"
    time_index_path = tmp_path / f"{middle:020d}.timeindex"
    good_index, good_time_index = index_path.read_bytes(), time_index_path.read_bytes()
    assert good_index  # entries exist, so a rebuild has something to reproduce
    if damage == "delete index":
        index_path.unlink()
    elif damage == "delete time index":
        time_index_path.unlink()
    elif damage == "random bytes":
        index_path.write_bytes(os.urandom(len(good_index)))
    elif damage == "partial entry":
        index_path.write_bytes(good_index[:-3])
    elif damage == "plausible but wrong":  # increasing, in bounds, but not at batch starts
        index_path.write_bytes(b"".join(i.to_bytes(4, "big") * 2 for i in range(1, 5)))
    else:
        time_index_path.write_bytes(good_time_index + (10**6).to_bytes(8, "big") + b"\0\0\1\0")

    reopened = _open(str(tmp_path), config, log.log_end_offset)
    assert reopened.recovery_summary.recovered_segments == 1
    assert reopened.recovery_summary.truncated_bytes == 0
    assert reopened.log_end_offset == log.log_end_offset
    assert [r[0] for r in _records_by_reading(reopened)] == list(range(log.log_end_offset))
    assert index_path.read_bytes() == good_index  # rebuilt exactly as appends built it
    assert time_index_path.read_bytes() == good_time_index
    reopened.close()


def test_missing_middle_segment_drops_what_follows(tmp_path: Path, make_batch: BatchMaker) -> None:
    config, log = _three_segment_log(str(tmp_path), make_batch)
    middle = log.segments[1]
    os.remove(_segment_file(str(tmp_path), middle.base_offset))
    reopened = _open(str(tmp_path), config, log.log_end_offset)
    assert reopened.log_end_offset == middle.base_offset  # offsets must follow on
    assert reopened.recovery_summary.deleted_segments == len(log.segments) - 2
    # The first segment's files, and the producer snapshot taken when it rolled (at its end):
    # the later segments' files and snapshots are gone.
    first = log.segments[0]
    assert sorted(os.listdir(tmp_path)) == sorted(
        [f"{first.base_offset:020d}{suffix}" for suffix in (".log", ".index", ".timeindex")]
        + [f"{first.next_offset:020d}.snapshot"]
    )


def test_leftovers_are_removed_and_other_files_kept(tmp_path: Path, make_batch: BatchMaker) -> None:
    config, log = _three_segment_log(str(tmp_path), make_batch)
    for name in ("00000000000000000999.index", "x.log.deleted", "y.swap", "leader-epoch.tmp"):
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / "leader-epoch-checkpoint").write_bytes(b"0\n0\n")
    _open(str(tmp_path), config, log.log_end_offset).close()
    names = set(os.listdir(tmp_path))
    assert "leader-epoch-checkpoint" in names
    assert not names & {"00000000000000000999.index", "x.log.deleted", "y.swap", "leader-epoch.tmp"}


def _fill_manager(data_dir: str, make_batch: BatchMaker) -> tuple[LogConfig, dict]:
    config = LogConfig(segment_bytes=400, index_interval_bytes=100)
    manager = LogManager(data_dir, fs, config, now_ms=0)
    contents = {}
    for topic, partition in (("a-b", 0), ("a-b", 1), ("c", 0)):
        log = manager.create(topic, partition, config)
        for i in range(8):
            log.append(make_batch(2, timestamp=i, value_bytes=40), now_ms=0)
        contents[(topic, partition)] = _records_by_reading(log)
    manager.close()
    return config, contents


def test_clean_shutdown_then_restart_recovers_nothing(
    tmp_path: Path, make_batch: BatchMaker
) -> None:
    config, contents = _fill_manager(str(tmp_path), make_batch)
    manager = LogManager(str(tmp_path), fs, config, now_ms=0)
    assert manager.topic_partitions() == sorted(contents)
    for topic_partition, records in contents.items():
        log = manager.get(*topic_partition)
        assert log is not None
        assert log.recovery_summary.recovered_segments == 0
        assert log.recovery_point == log.log_end_offset
        assert _records_by_reading(log) == records
    manager.close()


@pytest.mark.parametrize(
    "garbage", [b"", b"\xff\xfe", b"0\n3\na-b 0 5\n", b"1\n0\n", b"0\n1\na-b x 5\n"]
)
def test_garbage_checkpoint_means_full_recovery_without_loss(
    tmp_path: Path, make_batch: BatchMaker, garbage: bytes
) -> None:
    config, contents = _fill_manager(str(tmp_path), make_batch)
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_bytes(garbage)
    manager = LogManager(str(tmp_path), fs, config, now_ms=0)
    for topic_partition, records in contents.items():
        log = manager.get(*topic_partition)
        assert log is not None
        assert log.recovery_summary.recovered_segments == len(log.segments)
        assert _records_by_reading(log) == records
    manager.close()
