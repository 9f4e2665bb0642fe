"""Shared helpers for the storage tests, as session fixtures (hypothesis tests may use them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from rlog.core.records import Compression, build_batch, decode_batch, iter_batches
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FileSystem, RealFileSystem
from rlog.core.storage.log import Log

BatchMaker = Callable[..., bytes]
OffsetsOf = Callable[[bytes], list[int]]
LogOpener = Callable[..., Log]


def _make_batch(
    count: int = 1,
    *,
    timestamp: int = 0,
    timestamps: Sequence[int] | None = None,
    value_bytes: int = 16,
    compression: Compression = Compression.NONE,
) -> bytes:
    """`count` records with distinct values; base offset 0 (the log assigns offsets)."""
    records = [(b"k%d" % i, bytes([i % 251]) * value_bytes) for i in range(count)]
    return build_batch(
        records, base_timestamp=timestamp, timestamps=timestamps, compression=compression
    )


def _offsets_of(data: bytes) -> list[int]:
    """Offsets of every record in a buffer of whole batches (checks each batch's CRC)."""
    return [record.offset for pos, _ in iter_batches(data) for record in decode_batch(data, pos)]


def _open_log(
    dir_path: str,
    config: LogConfig | None = None,
    fs: FileSystem | None = None,
    *,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    now_ms: int = 0,
) -> Log:
    return Log(
        dir_path,
        config or LogConfig(),
        fs or RealFileSystem(),
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        now_ms=now_ms,
    )


@pytest.fixture(scope="session")
def make_batch() -> BatchMaker:
    return _make_batch


@pytest.fixture(scope="session")
def offsets_of() -> OffsetsOf:
    return _offsets_of


@pytest.fixture(scope="session")
def open_log() -> LogOpener:
    return _open_log
