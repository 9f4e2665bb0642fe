"""The metadata log on disk: a `Log` in `__cluster_metadata-0` holding one batch per `Ready`.

One batch per append makes each controller decision atomic on disk: a torn write loses the whole
batch at recovery (its CRC fails), never half a topic creation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import MetadataRecord, records_from_batches, records_to_batch
from rlog.core.records import iter_batches
from rlog.core.storage.config import LogConfig
from rlog.core.storage.log import Log

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_PARTITION_DIR = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
# Replay reads the log in chunks of at most this many bytes (whole batches; a larger batch is
# still read whole).
REPLAY_READ_BYTES = 1024 * 1024


def metadata_log_config(base: LogConfig | None = None) -> LogConfig:
    """`base` with what the metadata log needs: fsync every batch, never delete by retention."""
    return replace(base or LogConfig(), flush_messages=1, retention_ms=-1, retention_bytes=-1)


def append_records(
    log: Log, records: Sequence[MetadataRecord], now_ms: int, *, base_offset: int | None = None
) -> list[int]:
    """Append `records` as one batch at the log end and fsync it; return their offsets.

    `base_offset`, when given, is where the controller expects them (`Ready.base_offset`); an
    append anywhere else is a bug. OSError from the disk propagates: the controller must stop,
    since its records were not made durable.
    """
    if not records:
        return []
    start = log.log_end_offset
    assert base_offset is None or base_offset == start, f"log end {start}, expected {base_offset}"
    batch = records_to_batch(records, base_offset=start, timestamp_ms=now_ms)
    # As a follower appends: offsets are already in the batch, and a large topic creation may
    # exceed max.message.bytes, a limit meant for producers.
    info = log.append(batch, now_ms, assign_offsets=False)
    log.flush()
    return list(range(info.first_offset, info.last_offset + 1))


def read_records(log: Log, start_offset: int) -> list[tuple[int, MetadataRecord]]:
    """(offset, record) of every record from `start_offset` to the log end."""
    decoded: list[tuple[int, MetadataRecord]] = []
    offset = start_offset
    end_offset = log.log_end_offset
    while offset < end_offset:
        found = log.read(offset, REPLAY_READ_BYTES, end_offset).records
        assert found is not None, f"nothing to read at {offset} below the log end {end_offset}"
        data = found.read()
        decoded.extend((o, record) for o, record in records_from_batches(data) if o >= offset)
        *_, (_, last_header) = iter_batches(data)
        offset = last_header.next_offset
    return decoded


def replay(log: Log) -> MetadataImage:
    """The image the whole log folds to; the controller resumes at `log.log_end_offset`."""
    image = MetadataImage()
    for offset, record in read_records(log, log.log_start_offset):
        image.apply(offset, record)
    return image
