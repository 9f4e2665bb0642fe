from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rlog.core.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_offset_checkpoint,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log_manager import LogManager, parse_partition_dir_name

BatchMaker = Callable[..., bytes]
fs = RealFileSystem()
CONFIG = LogConfig(segment_bytes=300)


def test_partition_dir_names_split_at_the_last_dash() -> None:
    assert parse_partition_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir_name("__consumer_offsets-0") == ("__consumer_offsets", 0)
    for name in ("topic", "topic-", "-3", "t-0.abc-delete", "t-x", "t-0-future", "..-1"):
        assert parse_partition_dir_name(name) is None


def test_create_get_and_reload(tmp_path: Path, make_batch: BatchMaker) -> None:
    manager = LogManager(str(tmp_path), fs, CONFIG, now_ms=0)
    log = manager.create("orders-eu", 2, CONFIG)
    assert (tmp_path / "orders-eu-2").is_dir()
    assert manager.get("orders-eu", 2) is log and manager.get("orders-eu", 3) is None
    assert manager.get_or_create("orders-eu", 2, CONFIG) is log
    with pytest.raises(ValueError, match="exists"):
        manager.create("orders-eu", 2, CONFIG)
    for bad_topic in ("../etc", "a/b", "", ".", "x" * 250):
        with pytest.raises(ValueError, match="illegal topic"):
            manager.create(bad_topic, 0, CONFIG)
    for _ in range(6):
        log.append(make_batch(2, value_bytes=40), now_ms=0)
    log.advance_log_start_offset(7)  # DeleteRecords into the middle of a segment
    manager.close()
    assert read_offset_checkpoint(fs, str(tmp_path / LOG_START_OFFSET_CHECKPOINT)) == {
        ("orders-eu", 2): 7
    }
    assert read_offset_checkpoint(fs, str(tmp_path / RECOVERY_POINT_CHECKPOINT)) == {
        ("orders-eu", 2): 12
    }

    reloaded = LogManager(
        str(tmp_path), fs, LogConfig(), now_ms=0, topic_configs={"orders-eu": CONFIG}
    )
    assert reloaded.topic_partitions() == [("orders-eu", 2)]
    log = reloaded.get("orders-eu", 2)
    assert log is not None and log.config == CONFIG
    assert (log.log_start_offset, log.log_end_offset) == (7, 12)
    reloaded.close()


def test_delete_removes_the_directory_and_its_offsets(
    tmp_path: Path, make_batch: BatchMaker
) -> None:
    manager = LogManager(str(tmp_path), fs, CONFIG, now_ms=0)
    manager.create("keep", 0, CONFIG)
    doomed = manager.create("gone", 0, CONFIG)
    doomed.append(make_batch(), now_ms=0)
    manager.delete("gone", 0)
    assert manager.topic_partitions() == [("keep", 0)]
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["keep-0", RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT]
    )
    recreated = manager.create("gone", 0, CONFIG)
    assert recreated.log_end_offset == 0
    manager.close()


def test_unfinished_deletions_are_finished_at_startup(tmp_path: Path) -> None:
    (tmp_path / "t-0.0123abcd-delete").mkdir()
    (tmp_path / "t-0.0123abcd-delete" / "00000000000000000000.log").write_bytes(b"x")
    (tmp_path / "not-a-partition").mkdir()
    manager = LogManager(str(tmp_path), fs, CONFIG, now_ms=0)
    assert manager.topic_partitions() == []
    assert not (tmp_path / "t-0.0123abcd-delete").exists()
    assert (tmp_path / "not-a-partition").exists()  # not ours to remove


def test_retention_and_periodic_flush(tmp_path: Path, make_batch: BatchMaker) -> None:
    manager = LogManager(str(tmp_path), fs, CONFIG, now_ms=0)
    timed = manager.create("timed", 0, LogConfig(segment_bytes=300, retention_ms=100, flush_ms=50))
    for _ in range(6):
        timed.append(make_batch(2, timestamp=0, value_bytes=40), now_ms=1_000)
    assert len(timed.segments) > 2
    assert manager.flush_due_logs(now_ms=1_010) == [("timed", 0)]  # rolled segments wait
    assert timed.recovery_point == timed.log_end_offset
    timed.append(make_batch(), now_ms=1_020)
    assert manager.flush_due_logs(now_ms=1_060) == []
    assert manager.flush_due_logs(now_ms=1_070) == [("timed", 0)]
    segment_count = len(timed.segments)
    # Records carry timestamp 0: retention.ms=100 expires them once now - 0 > 100.
    assert manager.run_retention(now_ms=100) == 0
    assert manager.run_retention(now_ms=101) == segment_count - 1  # all but the active one
    assert len(timed.segments) == 1
    manager.close()


def test_the_clean_shutdown_file_tells_the_next_start_the_broker_epoch(tmp_path: Path) -> None:
    """Kafka's `.kafka_cleanshutdown`: written by a clean close, read and removed at start, so
    a start after a crash (no file) sees -1."""
    fs = RealFileSystem()
    first = LogManager(str(tmp_path), fs, CONFIG, 0)
    assert first.previous_broker_epoch == -1, "a new data dir: no clean shutdown before"
    first.close(broker_epoch=42)
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    second = LogManager(str(tmp_path), fs, CONFIG, 0)
    assert second.previous_broker_epoch == 42
    assert not (tmp_path / ".kafka_cleanshutdown").exists(), "a crash from now on must show"
    # second crashes (no close): the next start knows
    assert LogManager(str(tmp_path), fs, CONFIG, 0).previous_broker_epoch == -1
