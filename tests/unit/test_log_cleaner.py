"""Log compaction (core/storage/cleaner.py): what survives a pass, crash-safe swaps, thresholds."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.records import (
    BatchHeader,
    ControlType,
    build_batch,
    build_end_txn_marker,
    decode_batch,
    iter_batches,
    rebuild_batch,
)
from rlog.core.storage.cleaner import (
    CleanedSegments,
    build_cleaned_segments,
    clean_log,
    install_cleaned_segments,
    plan_cleaning,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FaultyFileSystem, FileSystem, RealFileSystem
from rlog.core.storage.log import Log, StaleCleaningError
from rlog.core.storage.log_manager import LogManager
from rlog.core.storage.segment import LogSegment
from rlog.daemon.broker.log_cleaner import LogCleaner, clean_limit
from rlog.daemon.config import BrokerSettings, ConfigError, parse_config

fs = RealFileSystem()
DAY_MS = 86_400_000
# Small segments (a few single-record batches each) and an index entry per batch.
COMPACT = LogConfig(
    segment_bytes=400,
    index_interval_bytes=0,
    cleanup_policy="compact",
    min_cleanable_dirty_ratio=0.0,
)

Entry = tuple[int, bytes | None, bytes | None]  # (offset, key, value)


def _open(dir_path: str, config: LogConfig = COMPACT, recovery_point: int = 0) -> Log:
    return Log(dir_path, config, fs, recovery_point=recovery_point, log_start_offset=0, now_ms=0)


def _append(log: Log, records: list[tuple[bytes | None, bytes | None]], timestamp: int = 0) -> None:
    """One batch per record: small segments hold several batches to drop or keep."""
    for key, value in records:
        log.append(build_batch([(key, value)], base_timestamp=timestamp), now_ms=timestamp)


def _read_all(log: Log) -> tuple[list[Entry], list[BatchHeader]]:
    """Every record and batch header, read with Log.read (CRCs checked) from the log start."""
    entries: list[Entry] = []
    headers: list[BatchHeader] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        found = log.read(offset, max_bytes=10**7, max_offset_exclusive=log.log_end_offset)
        assert found.records is not None
        data = found.records.read()
        for position, header in iter_batches(data):
            headers.append(header)
            entries += [(r.offset, r.key, r.value) for r in decode_batch(data, position)]
            offset = header.next_offset
    offsets = [entry[0] for entry in entries]
    assert offsets == sorted(set(offsets))  # strictly increasing
    for before, after in pairwise(headers):
        assert after.base_offset == before.next_offset  # no gaps: fillers cover removed batches
    return entries, headers


def _clean(log: Log, now_ms: int = 0, first_dirty_offset: int = 0) -> CleanedSegments | None:
    log.flush()  # only flushed segments are cleaned
    return clean_log(
        log, now_ms, first_dirty_offset=first_dirty_offset, high_watermark=log.log_end_offset
    )


def _latest(entries: list[Entry]) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, key, value in entries}


def test_latest_value_per_key_survives_with_its_offset(tmp_path: Path) -> None:
    log = _open(str(tmp_path))
    _append(log, [(b"k%d" % (i % 3), b"v%d" % i) for i in range(40)])
    before, _ = _read_all(log)
    active_bytes = log.active_segment.log_file.read(0, log.active_segment.size)
    end = log.active_segment.base_offset
    size_before = log.size_bytes

    result = _clean(log)

    assert result is not None and result.records_removed > 0
    after, _ = _read_all(log)
    cleaned = [entry for entry in after if entry[0] < end]
    assert len({key for _, key, _ in cleaned}) == len(cleaned)  # one record per key
    assert set(after) <= set(before)  # survivors keep offset, key and value
    assert _latest(after) == _latest(before)
    for _, key, _ in cleaned:  # the survivor is the latest before the active segment
        assert _latest([e for e in before if e[0] < end])[key] in [(o, v) for o, k, v in after]
    assert log.active_segment.log_file.read(0, log.active_segment.size) == active_bytes
    assert log.size_bytes < size_before
    assert (log.log_start_offset, log.recovery_point) == (0, log.log_end_offset)
    log.close()


def test_cleaned_log_reopens_with_full_recovery(tmp_path: Path) -> None:
    """Recovery walks gaps in offsets (dropped batches) without cutting anything."""
    log = _open(str(tmp_path))
    _append(log, [(b"k%d" % (i % 2), b"v%d" % i) for i in range(30)])
    _clean(log)
    after, headers = _read_all(log)
    segments = [(s.base_offset, s.next_offset, s.size) for s in log.segments]
    log.close()
    for recovery_point in (0, headers[-1].next_offset):
        reopened = _open(str(tmp_path), recovery_point=recovery_point)
        assert reopened.recovery_summary.truncated_bytes == 0
        assert reopened.recovery_summary.deleted_segments == 0
        assert [(s.base_offset, s.next_offset, s.size) for s in reopened.segments] == segments
        assert _read_all(reopened) == (after, headers)
        reopened.close()


def test_tombstone_kept_for_delete_retention_then_removed(tmp_path: Path) -> None:
    config = LogConfig(
        segment_bytes=400,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=DAY_MS,
    )
    log = _open(str(tmp_path), config)
    _append(log, [(b"a", b"1"), (b"b", b"1"), (b"a", None)], timestamp=1_000)
    log.roll()  # a segment of its own, whose newest data is at 1_000
    _append(log, [(b"c", b"%d" % i) for i in range(20)], timestamp=2_000)

    _clean(log, now_ms=1_000 + DAY_MS)  # the tombstone's segment is exactly a day old: kept
    entries, _ = _read_all(log)
    assert (2, b"a", None) in entries and all(e[1] != b"a" or e[0] == 2 for e in entries)

    _clean(log, now_ms=1_001 + DAY_MS)  # a day and a millisecond: gone
    entries, _ = _read_all(log)
    assert all(key != b"a" for _, key, _ in entries)
    assert (1, b"b", b"1") in entries
    log.close()


def test_a_thinned_batch_keeps_its_offsets_and_producer_fields(tmp_path: Path) -> None:
    log = _open(str(tmp_path), COMPACT)
    producer = {"producer_id": 42, "producer_epoch": 3, "base_sequence": 7}
    log.append(
        build_batch([(b"x", b"1"), (b"y", b"1"), (b"x", b"2"), (None, b"keyless")], **producer),
        now_ms=0,
    )
    log.append(build_batch([(b"y", b"2")], producer_id=42, producer_epoch=3, base_sequence=11), 0)
    _append(log, [(b"z", b"%d" % i) for i in range(12)])  # roll both into sealed segments
    original = next(h for _, h in iter_batches(log.read(0, 10**6, 4).records.read()))

    _clean(log)

    entries, headers = _read_all(log)
    first = headers[0]
    assert entries[:3] == [(2, b"x", b"2"), (3, None, b"keyless"), (4, b"y", b"2")]
    assert first.base_offset == 0 and first.records_count == 2
    assert (first.last_offset_delta, first.producer_id, first.producer_epoch) == (3, 42, 3)
    assert (first.base_sequence, first.partition_leader_epoch) == (
        7,
        original.partition_leader_epoch,
    )
    log.close()


def test_a_producers_last_batch_is_kept_even_when_empty(tmp_path: Path) -> None:
    log = _open(str(tmp_path), COMPACT)
    log.append(build_batch([(b"x", b"1")], producer_id=9, producer_epoch=0, base_sequence=0), 0)
    _append(log, [(b"x", b"2")] + [(b"z", b"%d" % i) for i in range(12)])
    _clean(log)
    _, headers = _read_all(log)
    assert headers[0].base_offset == 0 and headers[0].records_count == 0
    assert (headers[0].producer_id, headers[0].base_sequence) == (9, 0)
    log.close()


def test_removed_batches_leave_one_filler_and_segments_merge(tmp_path: Path) -> None:
    log = _open(str(tmp_path), COMPACT)
    _append(log, [(b"k", b"%d" % i) for i in range(30)])
    active = log.active_segment
    end = active.base_offset
    _clean(log)
    assert [(s.base_offset, s.next_offset) for s in log.segments] == [(0, end), (end, 30)]
    assert log.active_segment is active
    _, headers = _read_all(log)
    cleaned = [(h.base_offset, h.last_offset, h.records_count, h.producer_id) for h in headers]
    assert cleaned[:2] == [(0, end - 2, 0, -1), (end - 1, end - 1, 1, -1)]
    found = log.read(0, 10**6, log.log_end_offset).records  # offset 0 is in the filler
    assert found is not None
    data = found.read()
    assert next(r.offset for p, _ in iter_batches(data) for r in decode_batch(data, p)) == end - 1
    log.close()


def test_groups_stay_near_segment_bytes(tmp_path: Path) -> None:
    log = _open(str(tmp_path), COMPACT)
    _append(log, [(b"k%d" % i, b"v" * 40) for i in range(60)])  # distinct keys: all kept
    before, _ = _read_all(log)
    sealed = len(log.segments) - 1
    _clean(log)
    assert _read_all(log)[0] == before
    assert len(log.segments) - 1 == sealed  # full segments do not merge
    assert all(s.size <= COMPACT.segment_bytes for s in log.segments)
    log.close()


def _txn(producer_id: int, records: list[tuple[bytes, bytes]], *, commit: bool) -> list[bytes]:
    """A transaction's batch and its marker."""
    batch = build_batch(
        records, producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    control = ControlType.COMMIT if commit else ControlType.ABORT
    marker = build_end_txn_marker(
        control, producer_id=producer_id, producer_epoch=0, coordinator_epoch=1, timestamp_ms=0
    )
    return [batch, marker]


def test_a_committed_transactions_records_are_compacted_and_its_marker_kept(
    tmp_path: Path,
) -> None:
    log = _open(str(tmp_path), COMPACT)
    for data in _txn(5, [(b"t", b"1"), (b"u", b"1")], commit=True):
        log.append(data, 0)
    _append(log, [(b"t", b"2")] + [(b"z", b"%d" % i) for i in range(12)])
    _clean(log)
    entries, headers = _read_all(log)
    assert (b"t", b"1") not in [(k, v) for _, k, v in entries]  # superseded by t=2
    assert (1, b"u", b"1") in entries  # still the latest value of u, at its offset
    assert headers[1].is_control  # the marker stays
    log.close()


def test_an_aborted_transactions_records_are_removed_even_when_latest(tmp_path: Path) -> None:
    log = _open(str(tmp_path), COMPACT)
    for data in _txn(5, [(b"a", b"gone"), (b"b", b"gone")], commit=False):
        log.append(data, 0)
    _append(log, [(b"b", b"kept")] + [(b"z", b"%d" % i) for i in range(12)])
    assert log.aborted_transactions(0, 3)  # the abort is indexed, which the cleaner reads
    _clean(log)
    entries, headers = _read_all(log)
    values = [(k, v) for _, k, v in entries]
    assert (b"a", b"gone") not in values and (b"b", b"gone") not in values
    assert (b"b", b"kept") in values
    assert any(h.is_control for h in headers)
    log.close()


def test_active_segment_and_data_above_the_high_watermark_are_not_cleaned(tmp_path: Path) -> None:
    log = _open(str(tmp_path))
    _append(log, [(b"k", b"%d" % i) for i in range(30)])
    log.flush()
    high_watermark = log.segments[1].base_offset
    assert clean_log(log, 0, first_dirty_offset=0, high_watermark=0) is None
    result = clean_log(log, 0, first_dirty_offset=0, high_watermark=high_watermark)
    assert result is not None and [s.base_offset for s in result.plan.segments] == [0]
    log.close()


def test_min_compaction_lag_keeps_young_segments(tmp_path: Path) -> None:
    config = LogConfig(
        segment_bytes=400,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        min_compaction_lag_ms=1_000,
    )
    log = _open(str(tmp_path), config)
    _append(log, [(b"k", b"%d" % i) for i in range(30)], timestamp=5_000)
    assert _clean(log, now_ms=5_500) is None
    assert _clean(log, now_ms=6_000) is not None
    log.close()


def test_dirty_ratio_threshold(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.5)
    log = _open(str(tmp_path), config)
    _append(log, [(b"k%d" % i, b"v") for i in range(40)])  # distinct keys: nothing to remove
    first = _clean(log)
    assert first is not None and first.plan.dirty_ratio == 1.0
    dirty_from = first.plan.end_offset
    assert _clean(log, first_dirty_offset=dirty_from) is None  # nothing new
    _append(log, [(b"k0", b"new")] * 6)  # one more sealed segment: well under half
    log.flush()
    plan = plan_cleaning(log, 0, first_dirty_offset=dirty_from, high_watermark=log.log_end_offset)
    assert plan is None
    log.update_config(
        LogConfig(segment_bytes=400, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    )
    plan = plan_cleaning(log, 0, first_dirty_offset=dirty_from, high_watermark=log.log_end_offset)
    assert plan is not None and 0 < plan.dirty_ratio < 0.5
    log.close()


def test_a_truncation_during_the_pass_voids_it(tmp_path: Path) -> None:
    log = _open(str(tmp_path))
    _append(log, [(b"k", b"%d" % i) for i in range(30)])
    log.flush()
    plan = plan_cleaning(log, 0, first_dirty_offset=0, high_watermark=log.log_end_offset)
    assert plan is not None
    cleaned = build_cleaned_segments(fs, log.dir_path, log.config, plan, 0)
    log.truncate_to(log.log_end_offset - 1)
    before = _read_all(log)
    with pytest.raises(StaleCleaningError):
        install_cleaned_segments(log, cleaned)
    assert _read_all(log) == before
    assert not [name for name in os.listdir(tmp_path) if name.endswith((".cleaned", ".swap"))]
    log.close()


class Crash(BaseException):
    """A simulated power cut: no cleanup code runs."""


class CrashingFileSystem(RealFileSystem):
    """Real files; the rename or remove after `renames_left` more raises Crash."""

    def __init__(self, renames_left: int) -> None:
        self.renames_left = renames_left

    def _step(self, path: str) -> None:
        if self.renames_left == 0:
            raise Crash(f"crash before renaming or removing {path}")
        self.renames_left -= 1

    def rename(self, src: str, dst: str) -> None:
        self._step(src)
        super().rename(src, dst)

    def remove(self, path: str) -> None:
        self._step(path)
        super().remove(path)


def _crash_during_swap(dir_path: str, renames_left: int) -> tuple[list[Entry], list[Entry]]:
    """Fill a log, crash its cleaning pass after `renames_left` renames; (before, reopened)."""
    crashing: FileSystem = CrashingFileSystem(renames_left)
    log = Log(dir_path, COMPACT, crashing, recovery_point=0, log_start_offset=0, now_ms=0)
    _append(log, [(b"k%d" % (i % 4), b"v%d" % i) for i in range(40)])
    before, _ = _read_all(log)
    log.flush()
    with contextlib.suppress(Crash):
        clean_log(log, 0, first_dirty_offset=0, high_watermark=log.log_end_offset)
    recovery_point = log.recovery_point  # as a checkpoint would have it
    del log  # abandoned, as a killed process leaves it
    reopened = _open(dir_path, recovery_point=recovery_point)
    after, _ = _read_all(reopened)
    assert not [n for n in os.listdir(dir_path) if n.endswith((".cleaned", ".swap"))]
    reopened.close()
    return before, after


@pytest.mark.parametrize("renames_left", [*range(26), 10_000])  # 24 steps in all
def test_a_crash_mid_swap_leaves_the_old_or_the_new_segment(
    tmp_path: Path, renames_left: int
) -> None:
    before, after = _crash_during_swap(str(tmp_path), renames_left)
    assert set(after) <= set(before)  # nothing invented, offsets unchanged
    assert _latest(after) == _latest(before)  # nothing lost
    assert {e[0] for e in after} >= {offset for offset, _ in _latest(before).values()}


def _build_without_swapping(log: Log) -> list[LogSegment]:
    """The new segments of a pass over `log`, left under their `.cleaned` names."""
    log.flush()
    plan = plan_cleaning(log, 0, first_dirty_offset=0, high_watermark=log.log_end_offset)
    assert plan is not None
    return build_cleaned_segments(fs, log.dir_path, log.config, plan, 0).segments


def _reopen(log: Log) -> Log:
    recovery_point = log.recovery_point
    log.close()
    reopened = _open(log.dir_path, recovery_point=recovery_point)
    assert not [n for n in os.listdir(log.dir_path) if n.endswith((".cleaned", ".swap"))]
    return reopened


def test_leftover_cleaned_files_are_removed_and_committed_swaps_completed(tmp_path: Path) -> None:
    log = _open(str(tmp_path))
    _append(log, [(b"k0", b"old")] + [(b"k%d" % i, b"v" * 40) for i in range(30)])
    before, _ = _read_all(log)
    first, second, *_ = _build_without_swapping(log)
    first.rename_files(".swap")  # committed, not yet renamed to the live names
    first.close()
    second.close()  # still `.cleaned`: never committed
    reopened = _reopen(log)
    assert _read_all(reopened)[0] == before[1:]  # only the first segment changed
    reopened.close()


def test_a_committed_swap_of_a_group_removes_the_old_segments_inside_it(tmp_path: Path) -> None:
    log = _open(str(tmp_path))
    _append(log, [(b"k", b"%d" % i) for i in range(30)])
    end = log.active_segment.base_offset
    (group,) = _build_without_swapping(log)
    assert (group.base_offset, group.next_offset) == (0, end)
    group.rename_files(".swap")
    group.close()
    reopened = _reopen(log)
    assert [(s.base_offset, s.next_offset) for s in reopened.segments] == [(0, end), (end, 30)]
    entries, _ = _read_all(reopened)
    assert entries == [(end - 1, b"k", b"%d" % (end - 1))] + [
        (o, b"k", b"%d" % o) for o in range(end, 30)
    ]
    reopened.close()


def test_rebuild_batch_round_trips_untouched_records() -> None:
    batch = build_batch([(b"a", b"1"), (b"b", None)], base_offset=100, base_timestamp=5)
    header = next(h for _, h in iter_batches(batch))
    assert rebuild_batch(header, decode_batch(batch)) == batch


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", None]), st.binary(max_size=30)),
        min_size=1,
        max_size=80,
    ),
    batch_sizes=st.lists(st.integers(1, 4), min_size=1, max_size=80),
    segment_bytes=st.integers(150, 1_000),
)
def test_cleaning_keeps_the_latest_value_of_every_key_at_its_offset(
    records: list[tuple[bytes | None, bytes]], batch_sizes: list[int], segment_bytes: int
) -> None:
    config = LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=64,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
    )
    with tempfile.TemporaryDirectory() as dir_path:
        log = _open(dir_path, config)
        remaining, sizes = list(records), iter(batch_sizes * 80)
        while remaining:
            count = next(sizes)
            log.append(build_batch(remaining[:count]), now_ms=0)
            remaining = remaining[count:]
        before, _ = _read_all(log)
        _clean(log)
        after, _ = _read_all(log)
        assert set(after) <= set(before)  # every survivor at its original offset
        assert _latest(after) == _latest(before)
        assert [e for e in before if e[1] is None] == [e for e in after if e[1] is None]
        for offset in range(log.log_start_offset, log.log_end_offset):
            found = log.read(offset, 10**7, log.log_end_offset).records
            assert found is not None
            data = found.read()  # never only empty batches:
            assert any(decode_batch(data, position) for position, _ in iter_batches(data))
        log.close()
        reopened = _open(dir_path)  # and a full recovery reads the same
        assert _read_all(reopened)[0] == after
        reopened.close()


def test_a_failed_swap_before_its_commit_leaves_the_log_as_it_was(tmp_path: Path) -> None:
    faulty = FaultyFileSystem()
    log = Log(str(tmp_path), COMPACT, faulty, recovery_point=0, log_start_offset=0, now_ms=0)
    _append(log, [(b"k", b"%d" % i) for i in range(30)])
    log.flush()
    before = _read_all(log)
    plan = plan_cleaning(log, 0, first_dirty_offset=0, high_watermark=log.log_end_offset)
    assert plan is not None
    cleaned = build_cleaned_segments(faulty, log.dir_path, log.config, plan, 0)
    faulty.faults.sync_failures = 1  # the directory sync that commits the swap
    with pytest.raises(OSError):
        install_cleaned_segments(log, cleaned)
    assert _read_all(log) == before
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".cleaned", ".swap"))]
    assert clean_log(log, 0, first_dirty_offset=0, high_watermark=log.log_end_offset)
    log.close()


# ---- topic and broker configs ----


def test_compaction_topic_configs_parse_and_print_as_kafka_does() -> None:
    config = LogConfig.from_kafka_properties(
        {
            "cleanup.policy": "delete,compact",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "1000",
            "min.compaction.lag.ms": "5",
        }
    )
    assert config.compacts and config.deletes_by_retention
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms) == (0.01, 1000)
    properties = config.to_kafka_properties()
    assert properties["min.cleanable.dirty.ratio"] == "0.01"
    assert LogConfig.from_kafka_properties(properties) == config
    defaults = LogConfig().to_kafka_properties()
    assert defaults["delete.retention.ms"] == "86400000"
    assert defaults["min.cleanable.dirty.ratio"] == "0.5"
    assert defaults["min.compaction.lag.ms"] == "0"
    assert not LogConfig().compacts


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "-0.1"),
        ("min.cleanable.dirty.ratio", "nan"),
        ("min.cleanable.dirty.ratio", "half"),
        ("delete.retention.ms", "-1"),
        ("min.compaction.lag.ms", "-1"),
    ],
)
def test_bad_compaction_topic_configs_are_refused(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        LogConfig.from_kafka_properties({name: value})


def test_log_cleaner_broker_keys() -> None:
    settings = parse_config(
        '[broker]\n"log.cleaner.enable" = false\n"log.cleaner.backoff.ms" = 50\n'
    )
    assert (settings.broker.log_cleaner_enable, settings.broker.log_cleaner_backoff_ms) == (
        False,
        50,
    )
    assert (BrokerSettings().log_cleaner_enable, BrokerSettings().log_cleaner_backoff_ms) == (
        True,
        15_000,
    )
    with pytest.raises(ConfigError, match=r"log\.cleaner\.backoff\.ms"):
        parse_config('[broker]\n"log.cleaner.backoff.ms" = 0\n')


# ---- the broker's duty (daemon/broker/log_cleaner.py), without a broker ----


class FakeReplica:
    def __init__(
        self,
        is_leader: bool,
        high_watermark: int,
        offsets: dict[int, int | None],
        last_stable_offset: int | None = None,
    ) -> None:
        self.is_leader = is_leader
        self.high_watermark = high_watermark
        self.last_stable_offset = (
            high_watermark if last_stable_offset is None else last_stable_offset
        )
        self._offsets = offsets

    def replica_log_end_offsets(self) -> dict[int, int | None]:
        return self._offsets


def test_only_leaders_clean_and_never_past_a_replicas_log_end() -> None:
    assert clean_limit(None) is None
    assert clean_limit(FakeReplica(False, 50, {})) is None  # type: ignore[arg-type]
    assert clean_limit(FakeReplica(True, 50, {1: 60, 2: None})) is None  # type: ignore[arg-type]
    assert clean_limit(FakeReplica(True, 50, {1: 60, 2: 40})) == 40  # type: ignore[arg-type]
    assert clean_limit(FakeReplica(True, 50, {1: 60})) == 50  # type: ignore[arg-type]
    # An open transaction from offset 30: its records are neither kept nor dropped yet.
    assert clean_limit(FakeReplica(True, 50, {1: 60}, 30)) == 30  # type: ignore[arg-type]


def test_the_duty_cleans_compacted_logs_and_remembers_where_it_stopped(tmp_path: Path) -> None:
    manager = LogManager(str(tmp_path), fs, LogConfig(), now_ms=0)
    compacted = manager.create("c", 0, COMPACT)
    plain = manager.create("d", 0, LogConfig(segment_bytes=400))
    for log in (compacted, plain):
        _append(log, [(b"k", b"%d" % i) for i in range(30)])
        log.flush()
    plain_bytes = plain.size_bytes

    def make_cleaner() -> LogCleaner:
        return LogCleaner(
            manager, fs, lambda key: manager.get(*key).log_end_offset, lambda: 0, backoff_ms=1
        )

    cleaner = make_cleaner()
    assert asyncio.run(cleaner.clean_once()) == 1
    assert asyncio.run(cleaner.clean_once()) == 0  # nothing dirty since
    assert plain.size_bytes == plain_bytes
    assert len(compacted.segments) == 2
    assert os.path.exists(tmp_path / "cleaner-offset-checkpoint")
    assert asyncio.run(make_cleaner().clean_once()) == 0  # the checkpoint says it is clean
    manager.close()


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.lists(
                st.tuples(
                    st.sampled_from([b"a", b"b", b"c", None]),
                    st.one_of(st.none(), st.binary(max_size=20)),
                ),
                min_size=1,
                max_size=4,
            ),
            st.integers(0, 3),  # ms that pass before this batch
            st.booleans(),  # a cleaning pass after it
        ),
        min_size=1,
        max_size=60,
    ),
    segment_bytes=st.integers(100, 800),
)
def test_passes_between_appends_keep_every_live_key_and_expire_tombstones(
    steps: list[tuple[list[tuple[bytes | None, bytes | None]], int, bool]], segment_bytes: int
) -> None:
    config = LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=50,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=5,
    )
    with tempfile.TemporaryDirectory() as dir_path:
        log = _open(dir_path, config)
        appended: dict[int, tuple[bytes | None, bytes | None]] = {}
        now_ms = first_dirty = 0
        for records, elapsed_ms, clean in steps:
            now_ms += elapsed_ms
            info = log.append(build_batch(records, base_timestamp=now_ms), now_ms=now_ms)
            appended.update(
                zip(range(info.first_offset, info.last_offset + 1), records, strict=True)
            )
            if clean:
                result = _clean(log, now_ms, first_dirty)
                first_dirty = result.plan.end_offset if result else first_dirty
        entries, _ = _read_all(log)
        assert all(appended[offset] == (key, value) for offset, key, value in entries)
        latest = _latest(entries)
        expected = _latest([(offset, key, value) for offset, (key, value) in appended.items()])
        for key, (offset, value) in expected.items():
            if value is not None or key is None:
                assert latest[key] == (offset, value)
            else:  # a tombstone: there, or gone with everything older
                assert latest.get(key, (offset, value)) == (offset, value)
        recovery_point = log.recovery_point
        log.close()
        for reopened_at in (0, recovery_point):
            reopened = _open(dir_path, config, recovery_point=reopened_at)
            assert reopened.recovery_summary.truncated_bytes == 0
            assert _read_all(reopened)[0] == entries
            reopened.close()
