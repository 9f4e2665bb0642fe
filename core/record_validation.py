"""A client's record batch, checked record by record before the leader appends it.

A batch whose CRC is right can still hold records no consumer can read: garbage bytes, a codec
flag on plain bytes, a record claiming another offset, a length running past its record. Stored,
such a batch is replicated and then stops every consumer that reaches it, so the leader decodes
every record of a client's batch first, as Kafka's LogValidator does, and refuses the batch whole:
CORRUPT_MESSAGE when it does not decode, INVALID_RECORD when it decodes but breaks a rule.
Followers copy the leader's bytes and coordinators build their own batches, so neither pays.

One rule goes beyond Kafka's: a record's attributes byte, unused since magic 2, must be 0. Java
and librdkafka read it as one byte, but kafka-python reads it as a varint, so a byte of 0x80 or
more there makes kafka-python misread the rest of the batch; no client writes anything but 0.

The walk reads every record, so it comes in three tiers that must agree on every input:

1. `_walk_uniform`: when every record has the first one's layout (key and value sizes, header
   keys) and timestamp deltas of one byte, record i lies at a position known in advance, and each
   field is checked for all records at once with strided slices: loops in C, not in Python.
2. `_walk`: any other batch, in one pass of plain Python over the bytes, with no object per
   record and key and value bytes skipped by their lengths.
3. `_explain`: only once a tier said no, a careful walk that says what is wrong and where.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import (
    BATCH_HEADER_SIZE,
    VARINT32_MAX_BYTES,
    VARINT64_MAX_BYTES,
    BatchHeader,
    Buffer,
    Compression,
    CorruptRecordError,
    TimestampType,
    UnsupportedCompressionError,
    decompress_records,
    read_unsigned_varint,
    unsigned_varint_bytes,
)

NO_TIMESTAMP = -1
INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
# Fewer records than this go straight to `_walk`: the uniform tier's fixed cost (a dozen slices
# and a parse of the first record) only pays off over many records.
UNIFORM_MIN_RECORDS = 16
# The uniform tier knows the offset-delta varints of up to three bytes (index < 2**20).
UNIFORM_MAX_RECORDS = 1 << 20
# Kafka's processRecordErrors quotes at most this many record errors in the message.
QUOTED_RECORD_ERRORS_MAX = 3

RecordErrors = tuple[tuple[int, str], ...]  # (index of the record in its batch, what is wrong)


class BatchRefused(Exception):
    """The batch is refused whole with `code`; `record_errors` name the records at fault."""

    def __init__(self, code: ErrorCode, message: str, record_errors: RecordErrors = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.record_errors = record_errors


@dataclass(frozen=True, slots=True)
class ClientRules:
    """What a partition asks of a client's batch."""

    partition: str  # "topic-N", named in messages as Kafka names it
    message_max_bytes: int  # max.message.bytes
    keys_required: bool  # cleanup.policy includes compact: every record needs a key


def validate_client_batch(buf: Buffer, pos: int, header: BatchHeader, rules: ClientRules) -> int:
    """Check the batch at `pos` (its CRC already checked) and every record in it; return the
    maxTimestamp it must be stored with: the largest record timestamp, which the header may
    not have said (Kafka rewrites it too). Raises BatchRefused.
    """
    where = f" in topic partition {rules.partition}"
    _check_header(header, rules, where)
    payload = memoryview(buf)[pos + BATCH_HEADER_SIZE : pos + header.size]
    try:
        inflated = decompress_records(header.compression, payload)
    except UnsupportedCompressionError as error:
        raise BatchRefused(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"{error}{where}") from None
    except CorruptRecordError as error:
        raise BatchRefused(ErrorCode.CORRUPT_MESSAGE, f"{error}{where}") from None
    # Indexing bytes is much faster than indexing a memoryview: one copy of an uncompressed batch.
    data = inflated if isinstance(inflated, bytes) else bytes(inflated)
    count = header.records_count
    max_delta = None
    if count >= UNIFORM_MIN_RECORDS:
        claimed = header.max_timestamp - header.base_timestamp
        max_delta = _walk_uniform(data, count, claimed, rules.keys_required)
    if max_delta is None:
        max_delta = _walk(data, count, rules.keys_required)
    if max_delta is None:
        _explain(data, count, rules.keys_required, where)
        # _explain raises for every batch _walk refuses; reaching here is a bug in one of them.
        raise BatchRefused(ErrorCode.CORRUPT_MESSAGE, f"records do not decode{where}")
    max_timestamp = max(NO_TIMESTAMP, header.base_timestamp + max_delta)
    if max_timestamp > INT64_MAX:
        raise BatchRefused(
            ErrorCode.INVALID_RECORD,
            f"record timestamp {max_timestamp} does not fit 64 bits{where}",
        )
    return max_timestamp


def _check_header(header: BatchHeader, rules: ClientRules, where: str) -> None:
    """The batch-level rules (Kafka's LogValidator.validateBatch and the size limit), before
    anything is decompressed."""
    if header.size > rules.message_max_bytes:
        raise BatchRefused(
            ErrorCode.MESSAGE_TOO_LARGE,
            f"batch of {header.size} bytes exceeds max.message.bytes {rules.message_max_bytes}"
            f"{where}",
        )
    count = header.records_count
    if count <= 0:
        raise BatchRefused(
            ErrorCode.INVALID_RECORD, f"Invalid reported count for record batch: {count}{where}"
        )
    if count != header.last_offset_delta + 1:
        raise BatchRefused(
            ErrorCode.INVALID_RECORD,
            f"Inconsistent batch offset range [{header.base_offset}, {header.last_offset}] and "
            f"count of records {count}{where}",
        )
    if header.is_control:
        raise BatchRefused(
            ErrorCode.INVALID_RECORD, f"Clients are not allowed to write control records{where}"
        )
    if header.compression > Compression.ZSTD:
        raise BatchRefused(
            ErrorCode.INVALID_RECORD, f"unknown compression codec {header.compression}{where}"
        )
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        raise BatchRefused(
            ErrorCode.INVALID_TIMESTAMP,
            f"Producer should not set timestamp type to LogAppendTime{where}",
        )
    if header.producer_id >= 0:
        if header.base_sequence < 0:
            raise BatchRefused(
                ErrorCode.INVALID_RECORD,
                f"Invalid sequence number {header.base_sequence} in record batch with "
                f"producerId {header.producer_id}{where}",
            )
        if header.producer_epoch < 0:
            raise BatchRefused(
                ErrorCode.INVALID_RECORD,
                f"Invalid producer epoch {header.producer_epoch} in record batch with "
                f"producerId {header.producer_id}{where}",
            )
    elif header.is_transactional:
        raise BatchRefused(
            ErrorCode.INVALID_RECORD, f"Transactional record batch without a producerId{where}"
        )


# ---- tier 1: records of one layout, checked a field at a time ----


# Timestamp-delta bytes allowed when the batch's largest delta is d (0 <= d < 64): the one-byte
# zigzag encodings of 0..d, all even.
_TIMESTAMP_BYTES = tuple(bytes(range(0, 2 * d + 1, 2)) for d in range(64))
_CONTINUED = bytes(range(0x80, 0x100, 2))  # low byte of 2i with the continuation bit, i = 0..63


def _offset_delta_columns(length: int) -> tuple[bytes, ...]:
    """Column j holds byte j of the zigzag varint of offset delta i, for every i whose varint
    has `length` bytes, from the first such i on (64, 8192 and 2**20 are the boundaries)."""
    if length == 1:
        return (bytes(range(0, 128, 2)),)
    if length == 2:  # i = 64..8191: 2i is 14 bits
        return (_CONTINUED * 127, b"".join(bytes([k]) * 64 for k in range(1, 128)))
    middle = b"".join(bytes([0x80 | k]) * 64 for k in range(128))  # i = 8192..2**20 - 1
    return (_CONTINUED * 16256, middle * 127, b"".join(bytes([k]) * 8192 for k in range(1, 128)))


_OFFSET_DELTA_RANGES = ((0, 64, 1), (64, 8192, 2), (8192, UNIFORM_MAX_RECORDS, 3))
_offset_delta_cache: dict[int, tuple[bytes, ...]] = {}


def _columns(length: int) -> tuple[bytes, ...]:
    columns = _offset_delta_cache.get(length)
    if columns is None:  # the three-byte columns take 3 MB: built when a batch needs them
        columns = _offset_delta_cache[length] = _offset_delta_columns(length)
    return columns


def _walk_uniform(data: bytes, count: int, claimed_delta: int, keys_required: bool) -> int | None:
    """The largest timestamp delta if every record is the first one's layout with a one-byte,
    non-negative timestamp delta, the largest equal to the header's `claimed_delta`, and all
    else well-formed; None if any of that does not hold (the next tier decides then).

    Record i is then [length][attributes][timestamp delta][offset delta i][rest], where only the
    offset delta's size changes (at 64 and 8192 records), so for each run of records of one size
    the bytes of every field sit at a fixed stride, and a strided slice gathers one byte of a
    field from all records of the run at once.
    """
    if not 0 <= claimed_delta < 64 or count > UNIFORM_MAX_RECORDS:
        return None
    layout = _layout(data, keys_required)
    if layout is None:
        return None
    rest_length, literals = layout
    allowed = _TIMESTAMP_BYTES[claimed_delta]
    largest = 2 * claimed_delta
    seen_largest = False
    pos = 0
    for first, limit, delta_length in _OFFSET_DELTA_RANGES:
        if first >= count:
            break
        run = min(count, limit) - first
        body = 2 + delta_length + rest_length  # attributes, timestamp delta, offset delta, rest
        length = unsigned_varint_bytes(2 * body)
        stride = len(length) + body
        end = pos + run * stride
        if end > len(data):
            return None
        for j, byte in enumerate(length):
            if data[pos + j : end : stride].count(byte) != run:
                return None
        if data[pos + len(length) : end : stride].count(0) != run:  # attributes
            return None
        timestamps = data[pos + len(length) + 1 : end : stride]
        if timestamps.translate(None, allowed):  # a byte outside 0, 2, .., 2 * claimed_delta
            return None
        seen_largest = seen_largest or largest in timestamps
        at = pos + len(length) + 2
        for column in _columns(delta_length):
            if data[at:end:stride] != column[:run]:
                return None
            at += 1
        for offset, byte in literals:
            if data[at + offset : end : stride].count(byte) != run:
                return None
        pos = end
    if pos != len(data) or not seen_largest:
        return None
    return claimed_delta


def _layout(data: bytes, keys_required: bool) -> tuple[int, list[tuple[int, int]]] | None:
    """The first record as a template: the length of what follows its offset delta, and the
    (offset, byte) there of every byte that is not key or value content: varints and header
    keys. None if it cannot serve (badly formed, not in its shortest encodings, attributes
    other than 0).
    """
    try:
        unsigned, at = read_unsigned_varint(data, 0, VARINT32_MAX_BYTES)
    except CorruptRecordError:
        return None
    if unsigned & 1 or data[:at] != unsigned_varint_bytes(unsigned) or len(data) < at + 3:
        return None
    stop = at + (unsigned >> 1)
    if data[at] or data[at + 1] >= 0x80 or data[at + 2] != 0 or stop > len(data):
        return None  # a timestamp delta of more than one byte, or not offset delta 0
    spans: list[tuple[int, int]] = []
    errors: list[tuple[int, str]] = []
    try:
        end = _check_fields(memoryview(data)[:stop], at + 3, 0, keys_required, errors, spans)
    except CorruptRecordError:
        return None
    if errors or end != stop:
        return None
    rest = at + 3
    literals = [(i - rest, data[i]) for start, span_end in spans for i in range(start, span_end)]
    return stop - rest, literals


# ---- tier 2: any batch, one pass of plain Python ----

_ZIGZAG = tuple((raw >> 1) ^ -(raw & 1) for raw in range(0x80))  # one-byte varints, decoded


def _walk(d: bytes, count: int, keys_required: bool) -> int | None:
    """The largest timestamp delta if every record is well-formed and follows the rules, else
    None. Speed matters more than words here: `_explain` finds out what was wrong.

    Each varint is read inline when it has one or two bytes (nearly all do) and by
    read_unsigned_varint otherwise. Fields are not bounded by their record one by one: a field
    that runs past its record moves `at` past `stop`, which the check at the record's end sees,
    and a read past the data raises IndexError.
    """
    end = len(d)
    at = 0
    largest = -(1 << 64)
    try:
        # `expected`: the zigzag encoding of the record's index, which its offset delta must be
        for expected in range(0, 2 * count, 2):
            raw = d[at]  # record length
            if raw < 0x80:
                at += 1
            elif d[at + 1] < 0x80:
                raw = (raw & 0x7F) | (d[at + 1] << 7)
                at += 2
            else:
                raw, at = read_unsigned_varint(d, at, VARINT32_MAX_BYTES)
            if raw & 1 or d[at]:  # a negative length, or attributes other than 0
                return None
            stop = at + (raw >> 1)
            raw = d[at + 1]  # timestamp delta
            if raw < 0x80:
                at += 2
                delta = _ZIGZAG[raw]
            else:
                if d[at + 2] < 0x80:
                    raw = (raw & 0x7F) | (d[at + 2] << 7)
                    at += 3
                else:
                    raw, at = read_unsigned_varint(d, at + 1, VARINT64_MAX_BYTES)
                delta = (raw >> 1) ^ -(raw & 1)
            if delta > largest:
                largest = delta
            raw = d[at]  # offset delta
            if raw < 0x80:
                at += 1
            elif d[at + 1] < 0x80:
                raw = (raw & 0x7F) | (d[at + 1] << 7)
                at += 2
            else:
                raw, at = read_unsigned_varint(d, at, VARINT32_MAX_BYTES)
            if raw != expected:
                return None
            raw = d[at]  # key length: -1 (zigzag 1) is a null key, other negatives are invalid
            if raw < 0x80:
                at += 1
            elif d[at + 1] < 0x80:
                raw = (raw & 0x7F) | (d[at + 1] << 7)
                at += 2
            else:
                raw, at = read_unsigned_varint(d, at, VARINT32_MAX_BYTES)
            if raw & 1:
                if raw != 1 or keys_required:
                    return None
            else:
                at += raw >> 1
            raw = d[at]  # value length
            if raw < 0x80:
                at += 1
            elif d[at + 1] < 0x80:
                raw = (raw & 0x7F) | (d[at + 1] << 7)
                at += 2
            else:
                raw, at = read_unsigned_varint(d, at, VARINT32_MAX_BYTES)
            if raw & 1:
                if raw != 1:
                    return None
            else:
                at += raw >> 1
            if d[at]:  # header count: rare enough for a call
                at = _skip_headers(d, at, stop)
                if at < 0:
                    return None
            else:
                at += 1
            if at != stop:
                return None
    except (IndexError, CorruptRecordError):
        return None
    if at != end:
        return None
    return largest


def _skip_headers(d: bytes, at: int, stop: int) -> int:
    """The position after a record's headers (count at `at`), or -1 if they are not valid."""
    raw = d[at]
    if raw < 0x80:
        at += 1
    else:
        raw, at = read_unsigned_varint(d, at, VARINT32_MAX_BYTES)
    if raw & 1 or raw >> 1 > (stop - at) // 2:  # each header takes at least two bytes
        return -1
    for _ in range(raw >> 1):
        raw = d[at]  # key length: a header key may not be null
        if raw < 0x80:
            at += 1
        else:
            raw, at = read_unsigned_varint(d, at, VARINT32_MAX_BYTES)
        if raw & 1:
            return -1
        key_end = at + (raw >> 1)
        if key_end > stop:
            return -1
        key = d[at:key_end]
        if not key.isascii():
            try:
                key.decode()
            except UnicodeDecodeError:
                return -1
        raw = d[key_end]  # value length
        if raw < 0x80:
            at = key_end + 1
        else:
            raw, at = read_unsigned_varint(d, key_end, VARINT32_MAX_BYTES)
        if raw & 1:
            if raw != 1:
                return -1
        else:
            at += raw >> 1
    return at


# ---- tier 3: what is wrong, and where ----


def _explain(data: bytes, count: int, keys_required: bool, where: str) -> None:
    """Walk the records carefully and raise BatchRefused for the first record that does not
    decode (CORRUPT_MESSAGE), or for every record that breaks a rule (INVALID_RECORD)."""
    errors: list[tuple[int, str]] = []
    view = memoryview(data)  # records are bounded by slices of it, without copies
    at = 0
    for index in range(count):
        try:
            at = _check_record(view, at, index, keys_required, errors)
        except CorruptRecordError as error:
            message = f"record {index} at byte {at} of the records: {error}"
            raise BatchRefused(
                ErrorCode.CORRUPT_MESSAGE, f"{message}{where}", ((index, f"{message}{where}"),)
            ) from None
    if at != len(data):
        raise BatchRefused(
            ErrorCode.CORRUPT_MESSAGE,
            f"Incorrect declared batch size, {len(data) - at} bytes remain after the last of "
            f"{count} records{where}",
        )
    if errors:
        record_errors = tuple((index, f"{message}{where}") for index, message in errors)
        quoted = ", ".join(
            f"RecordError(batchIndex={index}, message='{message}')"
            for index, message in record_errors[:QUOTED_RECORD_ERRORS_MAX]
        )
        raise BatchRefused(
            ErrorCode.INVALID_RECORD,
            f"One or more records have been rejected due to {len(record_errors)} record errors "
            f"in total, and only showing the first three errors at most: [{quoted}]",
            record_errors,
        )


def _check_record(
    view: memoryview, at: int, index: int, keys_required: bool, errors: list[tuple[int, str]]
) -> int:
    """The position after record `index` at `at`. Raises CorruptRecordError if it does not
    decode; adds to `errors` what breaks a rule."""
    unsigned, start = read_unsigned_varint(view, at, VARINT32_MAX_BYTES)
    length = _zigzag(unsigned)
    if length < 0:
        raise CorruptRecordError(f"negative record length {length}")
    stop = start + length
    if stop > len(view):
        raise CorruptRecordError(
            f"record length {length} runs past the records ({len(view) - start} bytes left)"
        )
    if length < 1:
        raise CorruptRecordError("record length 0 leaves no room for its attributes")
    record = view[:stop]  # no field may run into the next record
    if record[start]:
        errors.append((index, f"Record {index} has attributes {record[start]}, not 0"))
    unsigned, at = read_unsigned_varint(record, start + 1, VARINT64_MAX_BYTES)
    unsigned, at = read_unsigned_varint(record, at, VARINT32_MAX_BYTES)
    offset_delta = _zigzag(unsigned)
    if offset_delta != index:
        errors.append((index, f"Record {index} has offset delta {offset_delta}, expected {index}"))
    at = _check_fields(record, at, index, keys_required, errors, None)
    if at != stop:
        raise CorruptRecordError(
            f"record length {length} disagrees with its fields, which take {at - start} bytes"
        )
    return stop


def _check_fields(
    record: memoryview,
    at: int,
    index: int,
    keys_required: bool,
    errors: list[tuple[int, str]],
    spans: list[tuple[int, int]] | None,
) -> int:
    """Key, value and headers of the record that `record` ends with, from `at`; the position
    after them. `spans`, if given, collects where each varint and header key lies."""
    stop = len(record)
    key_length, at = _length(record, at, "key", spans)
    if key_length < 0 and keys_required:
        errors.append((index, "Compacted topic cannot accept message without key"))
    at += max(key_length, 0)
    value_length, at = _length(record, at, "value", spans)
    at += max(value_length, 0)
    start = at
    unsigned, at = read_unsigned_varint(record, at, VARINT32_MAX_BYTES)
    if spans is not None:
        spans.append((start, at))
    header_count = _zigzag(unsigned)
    if header_count < 0:
        raise CorruptRecordError(f"Found invalid number of record headers {header_count}")
    if header_count > (stop - at) // 2:  # each header takes at least two bytes
        raise CorruptRecordError(f"{header_count} headers cannot fit in {stop - at} bytes")
    for header in range(header_count):
        key_at = at
        unsigned, at = read_unsigned_varint(record, at, VARINT32_MAX_BYTES)
        key_length = _zigzag(unsigned)
        if key_length < -1:
            raise CorruptRecordError(f"header {header}: negative key length {key_length}")
        if key_length == -1:
            errors.append((index, f"Record {index} has a null key in header {header}"))
            key_length = 0
        if at + key_length > stop:
            raise CorruptRecordError(f"header {header}: key of {key_length} bytes runs past")
        try:
            bytes(record[at : at + key_length]).decode()
        except UnicodeDecodeError:
            errors.append((index, f"Record {index} has a header key that is not UTF-8"))
        at += key_length
        if spans is not None:
            spans.append((key_at, at))
        value_length, at = _length(record, at, f"header {header} value", spans)
        at += max(value_length, 0)
    return at


def _length(
    record: memoryview, at: int, what: str, spans: list[tuple[int, int]] | None
) -> tuple[int, int]:
    """A field's length (-1: null) and the position after it; the field must fit `record`."""
    unsigned, after = read_unsigned_varint(record, at, VARINT32_MAX_BYTES)
    if spans is not None:
        spans.append((at, after))
    length = _zigzag(unsigned)
    if length < -1:
        raise CorruptRecordError(f"negative {what} length {length}")
    if after + length > len(record):
        raise CorruptRecordError(
            f"{what} of {length} bytes runs past the record ({len(record) - after} bytes left)"
        )
    return length, after


def _zigzag(unsigned: int) -> int:
    return (unsigned >> 1) ^ -(unsigned & 1)
