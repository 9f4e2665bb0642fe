"""Producer state snapshots: Kafka's `<offset>.snapshot` files in a partition directory.

A snapshot holds every producer's state as of an offset (the file's name: the log end when it was
taken, at a segment roll or a clean shutdown), so a restart replays only the batches after the
latest snapshot instead of the whole log, and a producer whose batches compaction removed keeps
its sequence. The layout is Kafka's version 1, so its tools read ours:

    version int16 (1) | crc uint32 (CRC-32C of everything after it) | count int32 | entries

    entry: producer id int64 | epoch int16 | last sequence int32 | last offset int64 |
           offset delta int32 | timestamp int64 | coordinator epoch int32 |
           current transaction first offset int64

Only a producer's last batch is kept (as Kafka does), so after a restart a retry of an older one
of its last five is no longer recognised: the producer gets OUT_OF_ORDER_SEQUENCE_NUMBER, never a
duplicate. A snapshot that fails its CRC is dropped and an older one (or the log) used instead.
"""

from __future__ import annotations

import os
import struct

import crc32c

from rlog.core.producer_state import SEQUENCE_MODULUS, BatchMetadata, ProducerEntry
from rlog.core.storage.files import FileSystem

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(Exception):
    """A snapshot file that does not parse or fails its CRC."""


def snapshot_path(dir_path: str, offset: int) -> str:
    return os.path.join(dir_path, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def encode_snapshot(entries: list[ProducerEntry]) -> bytes:
    body = bytearray(struct.pack(">i", len(entries)))
    for entry in sorted(entries, key=lambda e: e.producer_id):
        last = entry.batches[-1] if entry.batches else None
        body += _ENTRY.pack(
            entry.producer_id,
            entry.epoch,
            last.last_sequence if last else -1,
            last.last_offset if last else -1,
            last.last_offset - last.first_offset if last else 0,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
    crc = crc32c.crc32c(bytes(body))
    return struct.pack(">hI", SNAPSHOT_VERSION, crc) + bytes(body)


def decode_snapshot(data: bytes) -> list[ProducerEntry]:
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is too short for a snapshot")
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot version {version}, expected {SNAPSHOT_VERSION}")
    if crc32c.crc32c(data[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes for {count} entries")
    entries = []
    for index in range(count):
        (producer_id, epoch, last_sequence, last_offset, offset_delta, timestamp,
         coordinator_epoch, txn_first_offset) = _ENTRY.unpack_from(
            data, _HEADER.size + index * _ENTRY.size
        )  # fmt: skip
        entry = ProducerEntry(
            producer_id,
            epoch,
            coordinator_epoch=coordinator_epoch,
            current_txn_first_offset=txn_first_offset,
            last_timestamp=timestamp,
        )
        if last_offset >= 0:
            entry.batches.append(
                BatchMetadata(
                    first_sequence=(last_sequence - offset_delta) % SEQUENCE_MODULUS,
                    last_sequence=last_sequence,
                    first_offset=last_offset - offset_delta,
                    last_offset=last_offset,
                    max_timestamp=timestamp,
                )
            )
        entries.append(entry)
    return entries


def list_snapshots(fs: FileSystem, dir_path: str) -> list[int]:
    """Offsets of the snapshot files in a partition directory, oldest first."""
    offsets = []
    for name in fs.listdir(dir_path):
        stem, suffix = os.path.splitext(name)
        if suffix == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def write_snapshot(
    fs: FileSystem, dir_path: str, offset: int, entries: list[ProducerEntry]
) -> None:
    """Write (atomically) the snapshot at `offset`."""
    fs.replace_atomically(snapshot_path(dir_path, offset), encode_snapshot(entries))


def read_snapshot(fs: FileSystem, dir_path: str, offset: int) -> list[ProducerEntry]:
    return decode_snapshot(fs.read_bytes(snapshot_path(dir_path, offset)))
