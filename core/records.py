"""Kafka record batch v2 (magic 2): read and check headers, patch them in place, build and decode.

The storage and replication paths work on whole batches: `validate_batch`, `iter_batches` and the
`patch_*` helpers touch only the 61-byte header (and the CRC). `build_batch` and `decode_batch`
walk records one by one into objects; they serve tests, tools, control markers and internal
topics, never the hot path. The one per-record pass on the produce path is
`record_validation.py`, which shares the varint reader and the codecs below.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

import crc32c

from rlog.core.limits import DECOMPRESSED_BATCH_MAX_BYTES

Buffer = bytes | bytearray | memoryview

MAGIC_V2 = 2
BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset (8) + batchLength (4): the bytes batchLength does not count
# batchLength counts everything after itself: even a batch without records has the header's rest.
BATCH_LENGTH_MIN = BATCH_HEADER_SIZE - LOG_OVERHEAD

# Field offsets inside a record batch v2 (Kafka's DefaultRecordBatch layout).
_PARTITION_LEADER_EPOCH_AT = 12
_CRC_AT = 17
_ATTRIBUTES_AT = 21  # the CRC covers everything from here to the end of the batch
_MAX_TIMESTAMP_AT = 35

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


class CorruptRecordError(Exception):
    """Bytes from the world (a peer or the disk) are not a valid batch: an error, not a bug."""


class InvalidRecordError(CorruptRecordError):
    """A batch that is intact but breaks a rule for new appends (Kafka's INVALID_RECORD)."""


class UnsupportedCompressionError(Exception):
    """The batch uses a codec whose library is not installed (or an unknown codec id)."""


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class BatchHeader(NamedTuple):
    """A v2 batch header's fields, in wire order. A named tuple: every produced and replicated
    batch makes a few, and a tuple is built from the unpacked fields at C speed."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes in a buffer or a segment file."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """The codec id (a `Compression` value when known; 5-7 are not defined by Kafka)."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)


_new_header = tuple.__new__  # BatchHeader from a tuple of its fields, without __new__'s call


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse and sanity-check the header at `pos`, without the CRC (scans use this)."""
    available = len(buf) - pos
    if available < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at position {pos}: {available} bytes, a header needs {BATCH_HEADER_SIZE}"
        )
    header = _new_header(BatchHeader, _HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"batch at position {pos}: magic {header.magic}, expected 2")
    # Checked here, not only in validate_batch, so every scan moves forward by at least a header
    # and offsets derived from headers only grow.
    if header.batch_length < BATCH_LENGTH_MIN:
        raise CorruptRecordError(
            f"batch at position {pos}: batchLength {header.batch_length} < {BATCH_LENGTH_MIN}"
        )
    if header.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch at position {pos}: negative lastOffsetDelta {header.last_offset_delta}"
        )
    if header.records_count < 0:
        raise CorruptRecordError(
            f"batch at position {pos}: negative recordsCount {header.records_count}"
        )
    return header


def may_be_transactional(buf: Buffer) -> bool:
    """Whether the batch at the start of `buf` has the transactional bit, or is too short to
    tell (read_header says what is wrong with it): a look at one byte, before any parsing."""
    return len(buf) <= _ATTRIBUTES_AT + 1 or bool(buf[_ATTRIBUTES_AT + 1] & _TRANSACTIONAL_BIT)


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Check the batch at `pos` completely (header fields, bounds, CRC-32C); return its header."""
    header = read_header(buf, pos)
    end = pos + header.size
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {pos}: {header.size} bytes declared, {len(buf) - pos} present"
        )
    crc = crc32c.crc32c(memoryview(buf)[pos + _ATTRIBUTES_AT : end])
    if crc != header.crc:
        raise CorruptRecordError(
            f"batch at position {pos}: CRC {crc:#010x} does not match stored {header.crc:#010x}"
        )
    return header


def iter_batches(buf: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each batch in `buf`, validated; trailing bytes are an error."""
    pos = 0
    end = len(buf)
    while pos < end:
        header = validate_batch(buf, pos)
        yield pos, header
        pos += header.size


def patch_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Set baseOffset; it lies before the CRC-covered bytes, so the CRC stays valid."""
    struct.pack_into(">q", buf, pos, base_offset)


def patch_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Set partitionLeaderEpoch; also outside the CRC."""
    struct.pack_into(">i", buf, pos + _PARTITION_LEADER_EPOCH_AT, epoch)


def set_log_append_time(buf: bytearray, pos: int, now_ms: int) -> None:
    """Mark the batch LogAppendTime with `now_ms` as maxTimestamp; both are CRC-covered."""
    (attributes,) = struct.unpack_from(">h", buf, pos + _ATTRIBUTES_AT)
    struct.pack_into(">h", buf, pos + _ATTRIBUTES_AT, attributes | _TIMESTAMP_TYPE_BIT)
    struct.pack_into(">q", buf, pos + _MAX_TIMESTAMP_AT, now_ms)
    _write_crc(buf, pos)


def set_max_timestamp(buf: bytearray, pos: int, max_timestamp: int) -> None:
    """Set maxTimestamp (a CREATE_TIME batch whose header disagrees with its records)."""
    struct.pack_into(">q", buf, pos + _MAX_TIMESTAMP_AT, max_timestamp)
    _write_crc(buf, pos)


def _write_crc(buf: bytearray, pos: int) -> None:
    (batch_length,) = struct.unpack_from(">i", buf, pos + 8)
    end = pos + LOG_OVERHEAD + batch_length
    struct.pack_into(
        ">I", buf, pos + _CRC_AT, crc32c.crc32c(memoryview(buf)[pos + _ATTRIBUTES_AT : end])
    )


# ---- records (tests, tools, control markers, internal topics) ----


@dataclass(slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


HeaderInput = Header | tuple[str, bytes | None]
RecordInput = (
    tuple[bytes | None, bytes | None] | tuple[bytes | None, bytes | None, Sequence[HeaderInput]]
)


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    base_timestamp: int = 0,
    timestamps: Sequence[int] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode a valid v2 batch of `(key, value[, headers])` records.

    Each record's timestamp is `timestamps[i]` when given, else `base_timestamp`; either way the
    batch's baseTimestamp is `base_timestamp` and records store their delta from it.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    if timestamps is not None and len(timestamps) != len(records):
        raise ValueError(f"{len(timestamps)} timestamps for {len(records)} records")
    record_timestamps = (
        list(timestamps) if timestamps is not None else [base_timestamp] * len(records)
    )
    body = bytearray()
    for offset_delta, (record, timestamp) in enumerate(
        zip(records, record_timestamps, strict=True)
    ):
        key, value = record[0], record[1]
        headers = record[2] if len(record) == 3 else ()
        _encode_record(body, offset_delta, timestamp - base_timestamp, key, value, headers)
    payload = _compress(compression, bytes(body))
    attributes = int(compression)
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    batch = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        batch,
        0,
        base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        MAGIC_V2,
        0,  # the CRC, written once the rest is in place
        attributes,
        len(records) - 1,
        base_timestamp,
        max(record_timestamps),
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch += payload
    _write_crc(batch, 0)
    return bytes(batch)


def rebuild_batch(header: BatchHeader, records: Sequence[Record]) -> bytes:
    """The batch `header` describes, holding only `records` (some of its own, in order): what the
    log cleaner writes. Offsets stay where they were (each record's delta from the same
    baseOffset), and so do lastOffsetDelta and the producer fields, so idempotent-producer state
    read back from headers is unchanged. With no records left it is a bare header, as Kafka keeps
    for a producer's last batch (uncompressed: a codec's empty frame would not be empty).
    """
    body = bytearray()
    for record in records:
        offset_delta = record.offset - header.base_offset
        if not 0 <= offset_delta <= header.last_offset_delta:
            raise ValueError(f"record at offset {record.offset} is outside {header}")
        timestamp_delta = record.timestamp - header.base_timestamp
        key, value = record.key, record.value
        _encode_record(body, offset_delta, timestamp_delta, key, value, record.headers)
    attributes = header.attributes
    if records:
        payload = _compress(Compression(header.compression), bytes(body))
    else:
        payload, attributes = b"", attributes & ~_COMPRESSION_MASK
    max_timestamp = header.max_timestamp
    if header.timestamp_type is TimestampType.CREATE_TIME:
        # The largest timestamp kept (Kafka's choice too); an empty batch keeps the old one.
        max_timestamp = max((record.timestamp for record in records), default=max_timestamp)
    batch = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        batch,
        0,
        header.base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch,
        MAGIC_V2,
        0,  # the CRC, written once the rest is in place
        attributes,
        header.last_offset_delta,
        header.base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        len(records),
    )
    batch += payload
    _write_crc(batch, 0)
    return bytes(batch)


def build_end_txn_marker(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transaction marker: a control batch with one record (Kafka's EndTransactionMarker)."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(key, value)],
        base_offset=base_offset,
        base_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def read_end_txn_marker(record: Record) -> tuple[ControlType, int]:
    """(type, coordinator epoch) of a control record from a transaction marker."""
    if record.key is None or len(record.key) < 4 or record.value is None or len(record.value) < 6:
        raise CorruptRecordError("control record too short for a transaction marker")
    _version, control_type = struct.unpack_from(">hh", record.key)
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptRecordError(f"unknown control record type {control_type}")
    _version, coordinator_epoch = struct.unpack_from(">hi", record.value)
    return ControlType(control_type), coordinator_epoch


def decode_batch(buf: Buffer, pos: int = 0) -> list[Record]:
    """Validate the batch at `pos` and decode all its records (decompressing if needed)."""
    header = validate_batch(buf, pos)
    payload = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size]
    data = memoryview(decompress_records(header.compression, payload))
    records: list[Record] = []
    at = 0
    for _ in range(header.records_count):
        record, at = _decode_record(data, at, header)
        records.append(record)
    if at != len(data):
        raise CorruptRecordError(
            f"batch at offset {header.base_offset}: {len(data) - at} bytes after the last record"
        )
    return records


# ---- varints (zigzag, as in records) ----


def unsigned_varint_bytes(unsigned: int) -> bytes:
    """`unsigned` as a base-128 varint, low group first (no zigzag)."""
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def varint_bytes(value: int) -> bytes:
    """`value` zigzag-encoded, as records store their signed fields."""
    return unsigned_varint_bytes((value << 1) ^ (value >> 63))


def _put_varint(out: bytearray, value: int) -> None:
    out += varint_bytes(value)


VARINT32_MAX_BYTES = 5  # Kafka reads int fields (lengths, offset deltas) with at most 5 bytes
VARINT64_MAX_BYTES = 10  # and long fields (timestamp deltas) with at most 10


def read_unsigned_varint(
    data: Buffer, at: int, max_bytes: int = VARINT64_MAX_BYTES
) -> tuple[int, int]:
    """The unsigned varint at `at` (before zigzag decoding) and the position after it.

    `max_bytes` is 5 for 32-bit fields and 10 for 64-bit ones; a value wider than the field is
    refused too, as a reader in another language would truncate it.
    """
    unsigned = 0
    for shift in range(0, 7 * max_bytes, 7):
        if at >= len(data):
            raise CorruptRecordError("record ends inside a varint")
        byte = data[at]
        at += 1
        unsigned |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if unsigned >> (32 if max_bytes == VARINT32_MAX_BYTES else 64):
                raise CorruptRecordError(f"varint {unsigned} overflows its field")
            return unsigned, at
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes")


def _get_varint(data: memoryview, at: int, max_bytes: int = VARINT32_MAX_BYTES) -> tuple[int, int]:
    unsigned, at = read_unsigned_varint(data, at, max_bytes)
    return (unsigned >> 1) ^ -(unsigned & 1), at


def _put_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        _put_varint(out, -1)
    else:
        _put_varint(out, len(value))
        out += value


def _get_bytes(data: memoryview, at: int) -> tuple[bytes | None, int]:
    length, at = _get_varint(data, at)
    if length < 0:
        return None, at
    if at + length > len(data):
        raise CorruptRecordError(f"field of {length} bytes runs past the record")
    return bytes(data[at : at + length]), at + length


def _encode_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[HeaderInput],
) -> None:
    body = bytearray(b"\x00")  # record attributes: unused, always 0
    _put_varint(body, timestamp_delta)
    _put_varint(body, offset_delta)
    _put_bytes(body, key)
    _put_bytes(body, value)
    _put_varint(body, len(headers))
    for item in headers:
        header_key, header_value = (item.key, item.value) if isinstance(item, Header) else item
        _put_bytes(body, header_key.encode())
        _put_bytes(body, header_value)
    _put_varint(out, len(body))
    out += body


def _decode_record(data: memoryview, at: int, batch: BatchHeader) -> tuple[Record, int]:
    length, start = _get_varint(data, at)
    end = start + length
    if length < 1 or end > len(data):
        raise CorruptRecordError(f"record length {length} does not fit the batch")
    record_data = data[:end]  # fields may not run into the next record
    at = start + 1  # skip the attributes byte
    timestamp_delta, at = _get_varint(record_data, at, VARINT64_MAX_BYTES)
    offset_delta, at = _get_varint(record_data, at)
    key, at = _get_bytes(record_data, at)
    value, at = _get_bytes(record_data, at)
    header_count, at = _get_varint(record_data, at)
    if header_count < 0:
        raise CorruptRecordError(f"negative header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        header_key, at = _get_bytes(record_data, at)
        if header_key is None:
            raise CorruptRecordError("null header key")
        header_value, at = _get_bytes(record_data, at)
        try:
            headers.append(Header(header_key.decode(), header_value))
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
    if at != end:
        raise CorruptRecordError(f"record declares {length} bytes, its fields take {at - start}")
    if batch.timestamp_type is TimestampType.LOG_APPEND_TIME:
        timestamp = batch.max_timestamp
    else:
        timestamp = batch.base_timestamp + timestamp_delta
    return Record(batch.base_offset + offset_delta, timestamp, key, value, headers), end


# ---- compression ----

Codec = tuple[Callable[[bytes], bytes], Callable[[bytes], bytes]]  # (compress, decompress)

# The Java client frames snappy the way xerial's SnappyOutputStream does: this magic, two int32
# versions, then blocks of [int32 length][raw snappy]. librdkafka sends either that or raw snappy.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)


def _load_codecs() -> dict[int, Codec]:
    """Snappy, LZ4 (frame format) and zstd from cramjam, else from their own libraries, if any."""
    try:
        import cramjam
    except ImportError:
        return _load_fallback_codecs()
    return {
        Compression.SNAPPY: (
            lambda data: bytes(cramjam.snappy.compress_raw(data)),
            lambda data: bytes(cramjam.snappy.decompress_raw(data)),
        ),
        Compression.LZ4: (
            lambda data: bytes(cramjam.lz4.compress(data)),
            lambda data: bytes(cramjam.lz4.decompress(data)),
        ),
        Compression.ZSTD: (
            lambda data: bytes(cramjam.zstd.compress(data)),
            lambda data: bytes(cramjam.zstd.decompress(data)),
        ),
    }


def _load_fallback_codecs() -> dict[int, Codec]:
    codecs: dict[int, Codec] = {}
    try:
        import snappy

        codecs[Compression.SNAPPY] = (snappy.compress, snappy.uncompress)
    except ImportError:
        pass
    try:
        import lz4.frame

        codecs[Compression.LZ4] = (lz4.frame.compress, lz4.frame.decompress)
    except ImportError:
        pass
    try:
        import zstandard

        codecs[Compression.ZSTD] = (
            lambda data: zstandard.ZstdCompressor().compress(data),
            lambda data: zstandard.ZstdDecompressor().decompressobj().decompress(data),
        )
    except ImportError:
        pass
    return codecs


_CODECS = _load_codecs()


def _codec(compression: int) -> Codec:
    try:
        return _CODECS[compression]
    except KeyError:
        raise UnsupportedCompressionError(f"compression codec {compression} unavailable") from None


def _compress(compression: Compression, data: bytes) -> bytes:
    if compression == Compression.NONE:
        return data
    if compression == Compression.GZIP:
        return gzip.compress(data)
    compress, _ = _codec(compression)
    if compression == Compression.SNAPPY:
        return _XERIAL_HEADER + struct.pack(">i", len(block := compress(data))) + block
    return compress(data)


def decompress_records(compression: int, payload: memoryview) -> Buffer:
    """A batch's records area, inflated (CorruptRecordError if it does not inflate, or past
    DECOMPRESSED_BATCH_MAX_BYTES; UnsupportedCompressionError for a codec not installed)."""
    if compression == Compression.NONE:
        return payload
    if compression == Compression.GZIP:
        return _gunzip(payload)
    _, decompress = _codec(compression)
    try:
        if compression == Compression.SNAPPY and payload[: len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
            data = _unframe_xerial(payload, decompress)
        else:
            data = decompress(bytes(payload))
    except CorruptRecordError:
        raise
    except Exception as exc:  # each library raises its own types for bad input
        raise CorruptRecordError(
            f"cannot decompress {Compression(compression).name}: {exc}"
        ) from None
    if len(data) > DECOMPRESSED_BATCH_MAX_BYTES:
        raise CorruptRecordError(f"batch inflates past {DECOMPRESSED_BATCH_MAX_BYTES} bytes")
    return data


def _gunzip(payload: memoryview) -> bytes:
    out = bytearray()
    rest = bytes(payload)
    while rest:  # a gzip stream may hold several members
        inflater = zlib.decompressobj(wbits=31)
        try:
            out += inflater.decompress(rest, DECOMPRESSED_BATCH_MAX_BYTES + 1 - len(out))
        except zlib.error as exc:
            raise CorruptRecordError(f"cannot decompress GZIP: {exc}") from None
        if len(out) > DECOMPRESSED_BATCH_MAX_BYTES:
            raise CorruptRecordError(f"batch inflates past {DECOMPRESSED_BATCH_MAX_BYTES} bytes")
        if not inflater.eof:
            raise CorruptRecordError("GZIP stream is truncated")
        rest = inflater.unused_data
    return bytes(out)


def _unframe_xerial(payload: memoryview, decompress: Callable[[bytes], bytes]) -> bytes:
    out = bytearray()
    at = len(_XERIAL_HEADER)
    while at < len(payload):
        if at + 4 > len(payload):
            raise CorruptRecordError("xerial snappy block length is truncated")
        (block_length,) = struct.unpack_from(">i", payload, at)
        at += 4
        if block_length < 0 or at + block_length > len(payload):
            raise CorruptRecordError(
                f"xerial snappy block of {block_length} bytes runs past the batch"
            )
        out += decompress(bytes(payload[at : at + block_length]))
        at += block_length
        if len(out) > DECOMPRESSED_BATCH_MAX_BYTES:
            break  # the caller reports it
    return bytes(out)
