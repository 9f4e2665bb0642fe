"""Kafka v2 record batches to Arrow columns in bulk.

A record's fields are varints, so finding where each record starts is a walk through the bytes;
the walks are compiled with numba (`nogil`, cached on disk), and everything around them works on
whole arrays: no Python object is made per record. The flow for one fetched byte range:

    scan_batches     the batch headers of every complete batch
    select_batches   which batches a consumer sees (no control batches, no aborted transactions)
    decode_records   offsets, timestamps and where each key, value and header block lies
    *_array          Arrow arrays gathered from those positions, sliced to Spark's batch size
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numba import njit

BATCH_HEADER_SIZE = 61
COMPRESSION_MASK = 0x07
LOG_APPEND_TIME_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
ABORT_MARKER = 0

# Error codes the compiled walks return (they cannot raise with details).
CORRUPT = -1
NOT_V2 = -2


class CorruptBatchError(RuntimeError):
    """The fetched bytes are not valid Kafka v2 record batches."""


# --- compiled walks ------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _int32(buf: np.ndarray, at: int) -> int:
    value = (
        (np.int64(buf[at]) << 24)
        | (np.int64(buf[at + 1]) << 16)
        | (np.int64(buf[at + 2]) << 8)
        | np.int64(buf[at + 3])
    )
    return value - (np.int64(1) << 32) if value >= (np.int64(1) << 31) else value


@njit(cache=True, nogil=True, inline="always")
def _int64(buf: np.ndarray, at: int) -> int:
    value = np.uint64(0)
    for i in range(8):
        value = (value << np.uint64(8)) | np.uint64(buf[at + i])
    return np.int64(value)


@njit(cache=True, nogil=True, inline="always")
def _varint(buf: np.ndarray, at: int, end: int) -> tuple[int, int]:
    """A zigzag varint at `at`: (value, position after it), or (0, -1) past `end`/too long."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    while at < end and shift < 64:
        byte = np.uint64(buf[at])
        at += 1
        raw |= (byte & np.uint64(0x7F)) << shift
        if byte < 0x80:
            return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), at
        shift += np.uint64(7)
    return 0, -1


@njit(cache=True, nogil=True)
def scan_batches(buf: np.ndarray, start: int, end: int) -> tuple:
    """Headers of the complete batches in buf[start:end] (a fetch may end mid-batch).

    Returns (count or an error code, positions, sizes, base offsets, attributes, last offset
    deltas, base timestamps, max timestamps, producer ids)."""
    most = (end - start) // BATCH_HEADER_SIZE + 1
    positions = np.empty(most, np.int64)
    sizes = np.empty(most, np.int64)
    base_offsets = np.empty(most, np.int64)
    attributes = np.empty(most, np.int32)
    last_deltas = np.empty(most, np.int64)
    base_timestamps = np.empty(most, np.int64)
    max_timestamps = np.empty(most, np.int64)
    producer_ids = np.empty(most, np.int64)
    count = 0
    at = start
    while at + BATCH_HEADER_SIZE <= end:
        size = 12 + _int32(buf, at + 8)
        if size < BATCH_HEADER_SIZE:
            count = CORRUPT
            break
        if at + size > end:
            break
        if buf[at + 16] != 2:
            count = NOT_V2
            break
        positions[count] = at
        sizes[count] = size
        base_offsets[count] = _int64(buf, at)
        attributes[count] = (np.int32(buf[at + 21]) << 8) | np.int32(buf[at + 22])
        last_deltas[count] = _int32(buf, at + 23)
        base_timestamps[count] = _int64(buf, at + 27)
        max_timestamps[count] = _int64(buf, at + 35)
        producer_ids[count] = _int64(buf, at + 43)
        count += 1
        at += size
    return (
        count,
        positions,
        sizes,
        base_offsets,
        attributes,
        last_deltas,
        base_timestamps,
        max_timestamps,
        producer_ids,
    )


@njit(cache=True, nogil=True)
def decode_records(
    buf: np.ndarray,
    region_starts: np.ndarray,
    region_ends: np.ndarray,
    base_offsets: np.ndarray,
    base_timestamps: np.ndarray,
    max_timestamps: np.ndarray,
    attributes: np.ndarray,
    low: int,
    high: int,
) -> tuple:
    """Every record with low <= offset < high in the given record regions (each the records of
    one batch), in order. Key and value positions index `buf`; a length of -1 means null.

    Returns (count or CORRUPT, offsets, timestamps in ms, timestamp types, key positions, key
    lengths, value positions, value lengths, header block positions, header counts, record
    ends)."""
    most = 0
    for i in range(region_starts.shape[0]):
        # A record takes at least 7 bytes (a length and six one-byte fields).
        most += (region_ends[i] - region_starts[i]) // 7 + 1
    offsets = np.empty(most, np.int64)
    timestamps = np.empty(most, np.int64)
    timestamp_types = np.empty(most, np.int32)
    key_positions = np.empty(most, np.int64)
    key_lengths = np.empty(most, np.int32)
    value_positions = np.empty(most, np.int64)
    value_lengths = np.empty(most, np.int32)
    header_positions = np.empty(most, np.int64)
    header_counts = np.empty(most, np.int32)
    record_ends = np.empty(most, np.int64)
    count = 0
    corrupt = False
    for i in range(region_starts.shape[0]):
        at = region_starts[i]
        end = region_ends[i]
        log_append = (attributes[i] & LOG_APPEND_TIME_FLAG) != 0
        while at < end:
            length, at = _varint(buf, at, end)
            if at < 0 or length < 6 or at + length > end:
                corrupt = True
                break
            record_end = at + length
            # Fields in order; a position of -1 means a varint ran past the record's end.
            timestamp_delta, at = _varint(buf, at + 1, record_end)  # +1: the unused attributes
            offset_delta, at = _varint(buf, at, record_end) if at >= 0 else (0, -1)
            key_length, at = _varint(buf, at, record_end) if at >= 0 else (0, -1)
            key_at = at
            at = at + max(key_length, 0) if at >= 0 else -1
            value_length, at = _varint(buf, at, record_end) if at >= 0 else (0, -1)
            value_at = at
            at = at + max(value_length, 0) if at >= 0 else -1
            headers, at = _varint(buf, at, record_end) if at >= 0 else (0, -1)
            if at < 0 or at > record_end or headers < 0:
                corrupt = True
                break
            offset = base_offsets[i] + offset_delta
            if low <= offset < high:
                offsets[count] = offset
                timestamps[count] = (
                    max_timestamps[i] if log_append else base_timestamps[i] + timestamp_delta
                )
                timestamp_types[count] = 1 if log_append else 0
                key_positions[count] = key_at
                key_lengths[count] = max(key_length, -1)
                value_positions[count] = value_at
                value_lengths[count] = max(value_length, -1)
                header_positions[count] = at
                header_counts[count] = headers
                record_ends[count] = record_end
                count += 1
            at = record_end
        if corrupt:
            count = CORRUPT
            break
    return (
        count,
        offsets,
        timestamps,
        timestamp_types,
        key_positions,
        key_lengths,
        value_positions,
        value_lengths,
        header_positions,
        header_counts,
        record_ends,
    )


@njit(cache=True, nogil=True)
def decode_headers(
    buf: np.ndarray, positions: np.ndarray, counts: np.ndarray, ends: np.ndarray
) -> tuple:
    """Each record's headers: (total or CORRUPT, list offsets, key positions, key lengths,
    value positions, value lengths)."""
    rows = positions.shape[0]
    total = 0
    for row in range(rows):
        total += counts[row]
    list_offsets = np.empty(rows + 1, np.int32)
    key_positions = np.empty(total, np.int64)
    key_lengths = np.empty(total, np.int32)
    value_positions = np.empty(total, np.int64)
    value_lengths = np.empty(total, np.int32)
    header = 0
    list_offsets[0] = 0
    for row in range(rows):
        at = positions[row]
        end = ends[row]
        for _ in range(counts[row]):
            key_length, at = _varint(buf, at, end)
            if at < 0 or key_length < 0 or at + key_length > end:
                total = CORRUPT
                break
            key_positions[header] = at
            key_lengths[header] = key_length
            at += key_length
            value_length, at = _varint(buf, at, end)
            if at < 0 or at + max(value_length, 0) > end:
                total = CORRUPT
                break
            value_positions[header] = at
            value_lengths[header] = max(value_length, -1)
            at += max(value_length, 0)
            header += 1
        if total < 0:
            break
        list_offsets[row + 1] = header
    return total, list_offsets, key_positions, key_lengths, value_positions, value_lengths


@njit(cache=True, nogil=True)
def gather(buf: np.ndarray, positions: np.ndarray, lengths: np.ndarray) -> tuple:
    """Copy the byte strings at positions into one buffer: (Arrow offsets, data)."""
    rows = positions.shape[0]
    offsets = np.empty(rows + 1, np.int32)
    offsets[0] = 0
    total = 0
    for row in range(rows):
        total += max(lengths[row], 0)
        offsets[row + 1] = total
    data = np.empty(total, np.uint8)
    for row in range(rows):
        length = lengths[row]
        if length > 0:
            at = positions[row]
            data[offsets[row] : offsets[row] + length] = buf[at : at + length]
    return offsets, data


# --- the Python side: whole arrays at a time -------------------------------------------------


@dataclass
class Batches:
    """Headers of a run of complete batches, one array element per batch."""

    positions: np.ndarray
    sizes: np.ndarray
    base_offsets: np.ndarray
    attributes: np.ndarray
    last_offset_deltas: np.ndarray
    base_timestamps: np.ndarray
    max_timestamps: np.ndarray
    producer_ids: np.ndarray

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def take(self, mask: np.ndarray) -> Batches:
        return Batches(*(getattr(self, name)[mask] for name in self.__dataclass_fields__))

    @property
    def next_offsets(self) -> np.ndarray:
        return self.base_offsets + self.last_offset_deltas + 1


def batches_in(buf: np.ndarray, start: int, end: int) -> Batches:
    count, *columns = scan_batches(buf, start, end)
    if count == NOT_V2:
        raise CorruptBatchError("a record batch is not in Kafka's v2 format (magic 2)")
    if count < 0:
        raise CorruptBatchError(f"a record batch in bytes {start}..{end} is corrupt")
    return Batches(*(column[:count] for column in columns))


def visible_batches(
    batches: Batches, buf: np.ndarray, aborted: list[tuple[int, int]]
) -> np.ndarray:
    """A mask of the batches a read_committed (or read_uncommitted, when `aborted` is empty)
    consumer sees: control batches never, and no batch of an aborted transaction."""
    visible = (batches.attributes & CONTROL_FLAG) == 0
    if not aborted:
        return visible
    # Kafka's rule: an aborted transaction (producer, first offset) covers that producer's
    # transactional batches from its first offset up to the producer's ABORT marker.
    pending = sorted(aborted, key=lambda pair: pair[1])
    aborting: set[int] = set()
    for index in range(len(batches)):
        last_offset = int(batches.next_offsets[index]) - 1
        while pending and pending[0][1] <= last_offset:
            aborting.add(pending.pop(0)[0])
        producer = int(batches.producer_ids[index])
        attributes = int(batches.attributes[index])
        if attributes & CONTROL_FLAG:
            if _control_type(buf, int(batches.positions[index])) == ABORT_MARKER:
                aborting.discard(producer)
        elif attributes & TRANSACTIONAL_FLAG and producer in aborting:
            visible[index] = False
    return visible


def _control_type(buf: np.ndarray, batch_position: int) -> int:
    """The type in a control batch's first record key (version int16, type int16)."""
    start = batch_position + BATCH_HEADER_SIZE
    end = batch_position + 12 + int.from_bytes(buf[batch_position + 8 : batch_position + 12])
    found = decode_records(
        buf,
        np.array([start], np.int64),
        np.array([end], np.int64),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        np.zeros(1, np.int64),
        np.zeros(1, np.int32),
        -(2**62),
        2**62,
    )
    if found[0] < 1 or found[5][0] < 4:
        raise CorruptBatchError("a control batch has no control record key")
    key_at = int(found[4][0])
    return struct.unpack_from(">h", buf, key_at + 2)[0]


def record_regions(buf: np.ndarray, batches: Batches) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buffer, region starts, region ends) of the batches' records, decompressed if needed."""
    starts = batches.positions + BATCH_HEADER_SIZE
    ends = batches.positions + batches.sizes
    compression = batches.attributes & COMPRESSION_MASK
    if not np.any(compression):
        return buf, starts, ends
    pieces = []
    for index in range(len(batches)):
        region = buf[starts[index] : ends[index]]
        kind = int(compression[index])
        pieces.append(decompress(kind, region.tobytes()) if kind else region.tobytes())
    sizes = np.array([len(piece) for piece in pieces], np.int64)
    new_ends = np.cumsum(sizes)
    return np.frombuffer(b"".join(pieces), np.uint8), new_ends - sizes, new_ends


XERIAL_MAGIC = b"\x82SNAPPY\x00"


def decompress(kind: int, payload: bytes) -> bytes:
    """One batch's records, decompressed (gzip 1, snappy 2, lz4 3, zstd 4)."""
    import cramjam

    if kind == 1:
        return bytes(cramjam.gzip.decompress(payload))
    if kind == 2:
        if payload.startswith(XERIAL_MAGIC):  # the Java client's framed snappy
            out = []
            at = 16
            while at < len(payload):
                size = int.from_bytes(payload[at : at + 4])
                out.append(bytes(cramjam.snappy.decompress_raw(payload[at + 4 : at + 4 + size])))
                at += 4 + size
            return b"".join(out)
        return bytes(cramjam.snappy.decompress_raw(payload))
    if kind == 3:
        return bytes(cramjam.lz4.decompress(payload))
    if kind == 4:
        return bytes(cramjam.zstd.decompress(payload))
    raise CorruptBatchError(f"unknown compression type {kind}")


@dataclass
class DecodedRecords:
    """Columns of the records of one fetch, as numpy arrays indexing `buf`."""

    buf: np.ndarray
    offsets: np.ndarray
    timestamps_ms: np.ndarray
    timestamp_types: np.ndarray
    key_positions: np.ndarray
    key_lengths: np.ndarray
    value_positions: np.ndarray
    value_lengths: np.ndarray
    header_positions: np.ndarray
    header_counts: np.ndarray
    record_ends: np.ndarray

    def __len__(self) -> int:
        return int(self.offsets.shape[0])

    def slice(self, start: int, stop: int) -> DecodedRecords:
        return DecodedRecords(
            self.buf,
            *(getattr(self, name)[start:stop] for name in list(self.__dataclass_fields__)[1:]),
        )


def decode(buf: np.ndarray, batches: Batches, low: int, high: int) -> DecodedRecords:
    """The records of `batches` with low <= offset < high."""
    records_buf, starts, ends = record_regions(buf, batches)
    count, *columns = decode_records(
        records_buf,
        starts,
        ends,
        batches.base_offsets,
        batches.base_timestamps,
        batches.max_timestamps,
        batches.attributes,
        low,
        high,
    )
    if count < 0:
        raise CorruptBatchError("a record in a fetched batch is corrupt")
    return DecodedRecords(records_buf, *(column[:count] for column in columns))


def binary_array(
    buf: np.ndarray, positions: np.ndarray, lengths: np.ndarray, kind: pa.DataType
) -> pa.Array:
    """An Arrow binary (or string) array of the byte strings at positions; length -1 is null."""
    offsets, data = gather(buf, positions, lengths)
    nulls = lengths < 0
    null_count = int(np.count_nonzero(nulls))
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        kind, len(positions), [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count
    )


def constant_string_array(text: str, rows: int, kind: pa.DataType) -> pa.Array:
    encoded = text.encode()
    offsets = np.arange(rows + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(
        kind, rows, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * rows)]
    )


def numbers_array(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def headers_array(records: DecodedRecords, kind: pa.ListType) -> pa.Array:
    """list<struct<key: string, value: binary>>; a record without headers has an empty list."""
    total, list_offsets, key_at, key_lengths, value_at, value_lengths = decode_headers(
        records.buf, records.header_positions, records.header_counts, records.record_ends
    )
    if total < 0:
        raise CorruptBatchError("a record header in a fetched batch is corrupt")
    struct_type = kind.value_type
    keys = binary_array(records.buf, key_at, key_lengths, struct_type.field("key").type)
    values = binary_array(records.buf, value_at, value_lengths, struct_type.field("value").type)
    entries = pa.StructArray.from_arrays([keys, values], fields=list(struct_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), entries, type=kind)


def arrow_batch(
    records: DecodedRecords, schema: pa.Schema, topic: str, partition: int
) -> pa.RecordBatch:
    """Spark's Kafka-source columns for `records` (headers when the schema has them)."""
    rows = len(records)
    timestamp_type = schema.field("timestamp").type
    # Spark's timestamps are microseconds.
    microseconds = records.timestamps_ms * 1000
    arrays = [
        binary_array(
            records.buf, records.key_positions, records.key_lengths, schema.field("key").type
        ),
        binary_array(
            records.buf, records.value_positions, records.value_lengths, schema.field("value").type
        ),
        constant_string_array(topic, rows, schema.field("topic").type),
        numbers_array(np.full(rows, partition, np.int32), schema.field("partition").type),
        numbers_array(np.ascontiguousarray(records.offsets), schema.field("offset").type),
        numbers_array(microseconds, timestamp_type),
        numbers_array(
            np.ascontiguousarray(records.timestamp_types), schema.field("timestampType").type
        ),
    ]
    if "headers" in schema.names:
        arrays.append(headers_array(records, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def chunk_bounds(records: DecodedRecords, max_rows: int, max_bytes: int) -> list[tuple[int, int]]:
    """Cut points so no Arrow batch has more than max_rows rows or (but for a single huge row)
    more than max_bytes of keys and values: Arrow's binary offsets are 32-bit."""
    sizes = np.maximum(records.key_lengths, 0).astype(np.int64) + np.maximum(
        records.value_lengths, 0
    )
    cumulative = np.cumsum(sizes)
    bounds: list[tuple[int, int]] = []
    start = 0
    rows = len(records)
    while start < rows:
        before = int(cumulative[start - 1]) if start else 0
        by_bytes = int(np.searchsorted(cumulative, before + max_bytes, side="right"))
        stop = min(rows, start + max_rows, max(by_bytes, start + 1))
        bounds.append((start, stop))
        start = stop
    return bounds
