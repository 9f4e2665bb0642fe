"""core/partition.Partition, the single-broker daemon's view: a lone leader in epoch 0."""

from __future__ import annotations

import os
from pathlib import Path

from rlog.core.partition import Partition
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch, iter_batches
from rlog.core.storage.checkpoint import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log


def open_partition(path: Path) -> Partition:
    log = Log(
        str(path), LogConfig(), RealFileSystem(), recovery_point=0, log_start_offset=0, now_ms=0
    )
    return Partition("t", 0, log)


def test_every_append_is_readable_at_once(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    first = partition.append(build_batch([(None, b"a"), (None, b"b")]), 5)
    assert (first.error, first.base_offset, first.last_offset) == (ErrorCode.NONE, 0, 1)
    assert partition.high_watermark == 2 == partition.log.log_end_offset
    read = partition.read(0, 1024, min_one_batch=True)
    assert read.error == ErrorCode.NONE and read.high_watermark == 2
    assert read.records is not None
    ((_, header),) = list(iter_batches(read.records.read()))
    assert header.partition_leader_epoch == 0
    assert partition.read(3, 1024, min_one_batch=True).error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_bad_batches_and_idempotent_retries_are_answered_as_before(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    assert partition.append(b"", 0).error == ErrorCode.INVALID_RECORD
    assert partition.append(None, 0).error == ErrorCode.INVALID_RECORD
    two = build_batch([(None, b"a")]) + build_batch([(None, b"b")])
    assert partition.append(two, 0).error == ErrorCode.INVALID_RECORD
    damaged = bytearray(build_batch([(None, b"a")]))
    damaged[-1] ^= 0xFF
    assert partition.append(bytes(damaged), 0).error == ErrorCode.CORRUPT_MESSAGE
    batch = build_batch([(None, b"a")], producer_id=3, producer_epoch=0, base_sequence=0)
    assert partition.append(batch, 0).base_offset == 0
    retry = partition.append(batch, 0)
    assert (retry.error, retry.base_offset) == (ErrorCode.NONE, 0)
    gap = build_batch([(None, b"c")], producer_id=3, producer_epoch=0, base_sequence=5)
    assert partition.append(gap, 0).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert partition.log.log_end_offset == 1


def test_a_reopened_partition_keeps_its_hw_and_epochs(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    partition.append(build_batch([(None, b"a")]), 0)
    partition.log.close()
    again = open_partition(tmp_path)
    assert again.high_watermark == 1
    path = os.path.join(tmp_path, LEADER_EPOCH_CHECKPOINT)
    assert read_leader_epoch_checkpoint(RealFileSystem(), path) == [(0, 0)]
    assert again.append(build_batch([(None, b"b")]), 0).base_offset == 1
