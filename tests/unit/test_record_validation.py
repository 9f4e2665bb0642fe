"""The leader's record-by-record check of a client's batch (core/record_validation.py): every
kind of poison refused with its error code and a message naming what is wrong; valid batches
accepted with the maxTimestamp their records call for; the three tiers of the walk agreeing on
any bytes (hypothesis), and an accepted batch decoding the same in decode_batch and in
kafka-python's pure-Python reader.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from rlog.core import record_validation
from rlog.core.producer_state import ProducerStateManager
from rlog.core.protocol.errors import ErrorCode
from rlog.core.record_validation import BatchRefused, ClientRules, validate_client_batch
from rlog.core.records import (
    BATCH_HEADER_SIZE,
    Compression,
    CorruptRecordError,
    UnsupportedCompressionError,
    _compress,
    build_batch,
    decode_batch,
    unsigned_varint_bytes,
    validate_batch,
    varint_bytes,
)
from rlog.core.replication.produce import CheckedBatch, Refused, check_producer_batch
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log

RULES = ClientRules("t-0", 1 << 20, keys_required=False)
COMPACTED = ClientRules("t-0", 1 << 20, keys_required=True)
BASE_TIMESTAMP = 1_700_000_000_000
HEADER = struct.Struct(">qiibIhiqqqhii")  # Kafka's v2 batch header, as the records module packs it


def available_codecs() -> list[Compression]:
    codecs = []
    for codec in Compression:
        try:
            build_batch([(None, b"x")], compression=codec)
        except UnsupportedCompressionError:
            continue
        codecs.append(codec)
    return codecs


CODECS = available_codecs()


uvarint = unsigned_varint_bytes
varint = varint_bytes


def field(value: bytes | None) -> bytes:
    return varint(-1) if value is None else varint(len(value)) + value


def record(
    offset_delta: int,
    value: bytes | None = b"value",
    key: bytes | None = None,
    *,
    timestamp_delta: int = 0,
    headers: bytes = varint(0),
    length_change: int = 0,
) -> bytes:
    """One record's bytes; `headers` as encoded (count first), `length_change` to lie."""
    body = b"\x00" + varint(timestamp_delta) + varint(offset_delta) + field(key) + field(value)
    body += headers
    return varint(len(body) + length_change) + body


def framed(body: bytes) -> bytes:
    """A record from its body (attributes to headers): its length in front."""
    return varint(len(body)) + body


def batch_of(
    records: bytes,
    count: int,
    *,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    base_timestamp: int = BASE_TIMESTAMP,
    max_timestamp: int = BASE_TIMESTAMP,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A batch around `records` (the records area as sent) with a valid CRC."""
    last = count - 1 if last_offset_delta is None else last_offset_delta
    header = HEADER.pack(
        0, BATCH_HEADER_SIZE - 12 + len(records), -1, 2, 0, attributes, last,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
    )  # fmt: skip
    batch = bytearray(header + records)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def resign(batch: bytes | bytearray) -> bytes:
    """`batch` with batchLength and the CRC made right again after its bytes were changed."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def refusal(batch: bytes, rules: ClientRules = RULES) -> BatchRefused:
    with pytest.raises(BatchRefused) as caught:
        validate_client_batch(batch, 0, validate_batch(batch), rules)
    return caught.value


def accepted(batch: bytes, rules: ClientRules = RULES) -> int:
    return validate_client_batch(batch, 0, validate_batch(batch), rules)


GOOD = record(0) + record(1)

CORRUPT, INVALID = ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD
KEYED = record(0, key=b"k")
SIX_BYTES = b"\x80\x80\x80\x80\x80\x00"  # zero, in six bytes: too long for an int field


def with_header(*fields: bytes) -> bytes:
    return record(0, headers=varint(1) + b"".join(fields))


# (name, records area, record count, code, words the message must hold)
POISONS = [
    ("garbage bytes", b"\x17garbage that is no record", 1, CORRUPT, "record 0"),
    ("a count beyond the records", GOOD, 3, CORRUPT, "record 2"),
    ("a bad varint", b"\xff" * 11, 1, CORRUPT, "varint longer than 5"),
    (
        "a six-byte offset delta",
        framed(b"\x00\x00" + SIX_BYTES + field(None) + field(b"v") + varint(0)),
        1,
        CORRUPT,
        "varint longer than 5",
    ),
    (
        "a length wider than 32 bits",
        b"\xf0\xff\xff\xff\x7f" + record(0)[1:],
        1,
        CORRUPT,
        "overflows",
    ),
    ("a negative record length", varint(-3) + record(0)[1:], 1, CORRUPT, "negative record length"),
    (
        "a key running past its record",
        KEYED.replace(field(b"k"), varint(40) + b"k"),
        1,
        CORRUPT,
        "key of 40 bytes runs past",
    ),
    (
        "a value running past its record",
        record(0)[:-7] + varint(50) + b"value" + varint(0),
        1,
        CORRUPT,
        "value of 50 bytes runs past",
    ),
    (
        "a key length below -1",
        KEYED.replace(field(b"k"), varint(-2) + b"k"),
        1,
        CORRUPT,
        "negative key length -2",
    ),
    (
        "a record longer than its fields",
        record(0, length_change=1) + b"\x00",
        1,
        CORRUPT,
        "disagrees with its fields",
    ),
    ("a record shorter than its fields", record(0, length_change=-1), 1, CORRUPT, "record 0"),
    (
        "bytes after the last record",
        record(0) + b"\x00\x01",
        1,
        CORRUPT,
        "2 bytes remain after the last of 1 records",
    ),
    (
        "a negative header count",
        record(0, headers=varint(-1)),
        1,
        CORRUPT,
        "invalid number of record headers -1",
    ),
    (
        "a header value running past",
        with_header(field(b"h"), varint(9)),
        1,
        CORRUPT,
        "header 0 value of 9 bytes runs past",
    ),
    (
        "a header key of length -2",
        with_header(varint(-2), field(b"v")),
        1,
        CORRUPT,
        "negative key length -2",
    ),
    ("more headers than bytes", record(0, headers=varint(1000)), 1, CORRUPT, "1000 headers cannot"),
    ("offset delta 1 in one record", record(1), 1, INVALID, "has offset delta 1, expected 0"),
    ("two records at delta 0", record(0) + record(0), 2, INVALID, "offset delta 0, expected 1"),
    ("a negative offset delta", record(0) + record(-1), 2, INVALID, "offset delta -1, expected 1"),
    ("a null header key", with_header(varint(-1), field(b"v")), 1, INVALID, "null key in header"),
    ("a header key not UTF-8", with_header(field(b"\xff\xfe"), field(b"v")), 1, INVALID, "UTF-8"),
]


@pytest.mark.parametrize(
    ("name", "records", "count", "code", "words"),
    POISONS,
    ids=lambda p: p if isinstance(p, str) else "",
)
def test_each_poison_is_refused_with_its_code_and_a_clear_message(
    name: str, records: bytes, count: int, code: ErrorCode, words: str
) -> None:
    refused = refusal(batch_of(records, count))
    assert refused.code == code, (name, refused.message)
    assert words in refused.message, refused.message
    assert refused.message.endswith("in topic partition t-0") or refused.record_errors
    if code == ErrorCode.INVALID_RECORD:
        assert refused.record_errors and refused.message.startswith(
            "One or more records have been rejected due to"
        )


def _renumber(records: bytes, count: int, first: int) -> bytes | None:
    """The poison's records with offset deltas moved up by `first` (records made by `record`)."""
    out = bytearray()
    at = 0
    for _ in range(count):
        try:
            unsigned, start = record_validation.read_unsigned_varint(records, at, 5)
            length = (unsigned >> 1) ^ -(unsigned & 1)
            _ts, od_at = record_validation.read_unsigned_varint(records, start + 1, 10)
            od, rest = record_validation.read_unsigned_varint(records, od_at, 5)
        except CorruptRecordError:  # garbage: not records
            return None
        if length < 0:
            return None
        delta = (od >> 1) ^ -(od & 1)
        body = records[start:od_at] + varint(delta + first) + records[rest : start + length]
        out += varint(length + len(varint(delta + first)) - (rest - od_at)) + body
        at = start + length
    return bytes(out) + records[at:]


@pytest.mark.parametrize(
    ("name", "records", "count", "code"),
    [(name, moved, count, code) for name, records, count, code, _ in POISONS
     if (moved := _renumber(records, count, 40)) is not None],
    ids=lambda p: p if isinstance(p, str) else "",
)  # fmt: skip
def test_one_poisoned_record_among_many_uniform_ones_is_found(
    name: str, records: bytes, count: int, code: ErrorCode
) -> None:
    """Past UNIFORM_MIN_RECORDS the strided tier looks first; it must pass the batch on."""
    before = b"".join(record(i) for i in range(40))
    shifted = b"".join(record(i) for i in range(40 + count, 80))
    refused = refusal(batch_of(before + records + shifted, 80))
    assert refused.code == code, (name, refused.message)
    if refused.record_errors:
        assert refused.record_errors[0][0] >= 40


def test_batch_level_rules() -> None:
    one = record(0)
    cases = [
        (
            batch_of(GOOD, 2, last_offset_delta=0),
            INVALID,
            "Inconsistent batch offset range [0, 0] and count of records 2",
        ),
        (
            batch_of(GOOD, 0, last_offset_delta=1),
            INVALID,
            "Invalid reported count for record batch",
        ),
        (batch_of(one, 1, attributes=0x20), INVALID, "Clients are not allowed to write control"),
        (batch_of(one, 1, attributes=5), INVALID, "unknown compression codec 5"),
        (batch_of(one, 1, attributes=0x08), ErrorCode.INVALID_TIMESTAMP, "LogAppendTime"),
        (
            batch_of(one, 1, producer_id=7, producer_epoch=0),
            INVALID,
            "Invalid sequence number -1 in record batch with producerId 7",
        ),
        (
            batch_of(one, 1, producer_id=7, producer_epoch=-1, base_sequence=0),
            INVALID,
            "Invalid producer epoch -1",
        ),
        (
            batch_of(one, 1, attributes=0x10),
            INVALID,
            "Transactional record batch without a producer",
        ),
    ]
    for batch, code, words in cases:
        refused = refusal(batch)
        assert (refused.code, words in refused.message) == (code, True), refused.message
    late = 2**63 - 2
    overflow = batch_of(record(0, timestamp_delta=5), 1, base_timestamp=late, max_timestamp=late)
    assert "does not fit 64 bits" in refusal(overflow).message
    small = ClientRules("t-0", 80, keys_required=False)
    too_large = refusal(batch_of(record(0, b"x" * 30), 1), small)
    assert too_large.code == ErrorCode.MESSAGE_TOO_LARGE
    assert "exceeds max.message.bytes 80" in too_large.message


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_a_codec_flag_on_plain_records_is_corrupt(codec: Compression) -> None:
    refused = refusal(batch_of(GOOD, 2, attributes=int(codec)))
    assert refused.code == ErrorCode.CORRUPT_MESSAGE
    assert "decompress" in refused.message or "GZIP" in refused.message


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_poison_is_found_after_inflating(codec: Compression) -> None:
    for records, code in (
        (record(0) + record(0), ErrorCode.INVALID_RECORD),
        (record(0) + b"\x17garbage", ErrorCode.CORRUPT_MESSAGE),
    ):
        refused = refusal(batch_of(_compress(codec, records), 2, attributes=int(codec)))
        assert refused.code == code, refused.message
        assert refused.record_errors[0][0] == 1


def test_compacted_topic_refuses_records_without_a_key() -> None:
    batch = build_batch([(b"k", b"1"), (None, b"2"), (b"k", None), (None, b"4")])
    refused = refusal(batch, COMPACTED)
    assert refused.code == ErrorCode.INVALID_RECORD
    message = "Compacted topic cannot accept message without key in topic partition t-0"
    assert refused.record_errors == ((1, message), (3, message))
    assert refused.message == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]"
    )
    accepted(batch)  # fine where keys are not required
    keyed = build_batch([(b"k%d" % i, None) for i in range(40)])  # tombstones have keys
    assert accepted(keyed, COMPACTED) == 0
    uniform_null = build_batch([(None, b"v")] * 40)
    assert refusal(uniform_null, COMPACTED).record_errors[39][0] == 39


@pytest.mark.parametrize("codec", CODECS)
def test_valid_batches_of_every_shape_are_accepted(codec: Compression) -> None:
    shapes = [
        [(None, None)],
        [(b"", b""), (b"k", None, [("h", None), ("", b"")])],
        [(b"key", b"v" * 300, [("trace", b"x" * 200), ("\u00e9t\u00e9", b"y")])] * 3,
        [(None, bytes(i)) for i in range(100)],
        [(b"k", b"v" * 10_000)] * 3,
    ]
    for records in shapes:
        timestamps = [BASE_TIMESTAMP + (i * 37) % 11 - 5 for i in range(len(records))]
        batch = build_batch(
            records, base_timestamp=BASE_TIMESTAMP, timestamps=timestamps, compression=codec
        )
        assert accepted(batch) == max(timestamps)


def test_the_max_timestamp_is_the_records_largest_whatever_the_header_says() -> None:
    timestamps = [BASE_TIMESTAMP + d for d in (3, -2, 70_000, 5)]
    batch = bytearray(
        build_batch([(None, b"v")] * 4, base_timestamp=BASE_TIMESTAMP, timestamps=timestamps)
    )
    struct.pack_into(">q", batch, 35, BASE_TIMESTAMP)  # a header that says less
    assert accepted(resign(batch)) == BASE_TIMESTAMP + 70_000
    assert accepted(build_batch([(None, b"v")], base_timestamp=-1)) == -1  # NO_TIMESTAMP
    # Kafka's floor: a batch of timestamps all below -1 is stored with maxTimestamp -1.
    assert accepted(build_batch([(None, b"v")], base_timestamp=-50)) == -1


def test_a_wrong_max_timestamp_is_rewritten_when_stored(tmp_path) -> None:
    """check_producer_batch hands the log the right maxTimestamp; the log patches it and the
    CRC, so the stored batch is valid and consistent."""
    records = [(None, b"v%d" % i) for i in range(30)]
    timestamps = [BASE_TIMESTAMP + i % 7 for i in range(30)]
    batch = bytearray(build_batch(records, base_timestamp=BASE_TIMESTAMP, timestamps=timestamps))
    struct.pack_into(">q", batch, 35, BASE_TIMESTAMP + 1000)  # says more than any record
    batch = resign(batch)
    checked = check_producer_batch(batch, ProducerStateManager(), RULES)
    assert isinstance(checked, CheckedBatch)
    assert checked.max_timestamp == BASE_TIMESTAMP + 6
    log = Log(str(tmp_path / "t-0"), LogConfig(), RealFileSystem(), recovery_point=0,
              log_start_offset=0, now_ms=0)  # fmt: skip
    info = log.append(batch, 0, leader_epoch=3, max_timestamp=checked.max_timestamp)
    assert info.max_timestamp == BASE_TIMESTAMP + 6
    stored = log.read(0, 1 << 20, log.log_end_offset).records
    assert stored is not None
    data = stored.read()
    assert validate_batch(data).max_timestamp == BASE_TIMESTAMP + 6
    assert [r.value for r in decode_batch(data)] == [value for _, value in records]
    log.close()


def test_check_producer_batch_refuses_with_record_errors_only_for_clients() -> None:
    bad = batch_of(record(1), 1)
    refused = check_producer_batch(bad, ProducerStateManager(), RULES)
    assert isinstance(refused, Refused)
    assert refused.error == ErrorCode.INVALID_RECORD
    assert refused.record_errors[0][0] == 0
    # A coordinator's batch (rules None) is not walked: transactional offsets carry a producer
    # id without a sequence, which a client may not send.
    offsets = build_batch([(b"k", b"v")], producer_id=5, producer_epoch=0, is_transactional=True)
    assert isinstance(check_producer_batch(offsets, ProducerStateManager(), None), CheckedBatch)
    assert isinstance(check_producer_batch(offsets, ProducerStateManager(), RULES), Refused)


# ---- the uniform tier ----


@pytest.mark.parametrize("count", [16, 64, 65, 8192, 8200])
def test_uniform_batches_take_the_strided_tier(count: int) -> None:
    """Across the offset-delta size changes (64 and 8192 records) and with headers."""
    headers = [("trace-id", b"0123456789abcdef")]
    for records in ([(None, b"x" * 100)] * count, [(b"key-1", b"v", headers)] * count):
        timestamps = [BASE_TIMESTAMP + i * 6 // count for i in range(count)]
        batch = build_batch(records, base_timestamp=BASE_TIMESTAMP, timestamps=timestamps)
        data = batch[BATCH_HEADER_SIZE:]
        delta = record_validation._walk_uniform(data, count, timestamps[-1] - BASE_TIMESTAMP, False)
        assert delta == timestamps[-1] - BASE_TIMESTAMP
        assert record_validation._walk(data, count, False) == delta
        assert accepted(batch) == timestamps[-1]


def test_the_strided_tier_passes_on_what_it_cannot_vouch_for() -> None:
    count = 100
    timestamps = [BASE_TIMESTAMP + 5 - i % 6 for i in range(count)]  # largest not last: fine
    batch = build_batch(
        [(None, b"v")] * count, base_timestamp=BASE_TIMESTAMP, timestamps=timestamps
    )
    data = batch[BATCH_HEADER_SIZE:]
    assert record_validation._walk_uniform(data, count, 5, False) == 5
    assert record_validation._walk_uniform(data, count, 4, False) is None  # header says less
    assert record_validation._walk_uniform(data, count, 6, False) is None  # header says more
    mixed = build_batch([(None, b"v")] * 50 + [(None, b"vv")] * 50)
    assert record_validation._walk_uniform(mixed[BATCH_HEADER_SIZE:], count, 0, False) is None
    assert accepted(mixed) == 0
    wide = build_batch([(None, b"v")] * count, timestamps=[i * 100 for i in range(count)])
    assert record_validation._walk_uniform(wide[BATCH_HEADER_SIZE:], count, 9900, False) is None
    assert accepted(wide) == 9900


# ---- properties ----

header_keys = st.text(max_size=8)
small_bytes = st.none() | st.binary(max_size=40)
records_strategy = st.lists(
    st.tuples(small_bytes, small_bytes, st.lists(st.tuples(header_keys, small_bytes), max_size=3)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=records_strategy,
    deltas=st.lists(st.integers(-(2**40), 2**40), min_size=40, max_size=40),
    codec=st.sampled_from(CODECS),
)
def test_any_batch_build_batch_makes_validates(records, deltas, codec) -> None:
    timestamps = [BASE_TIMESTAMP + deltas[i] for i in range(len(records))]
    batch = build_batch(
        records, base_timestamp=BASE_TIMESTAMP, timestamps=timestamps, compression=codec
    )
    assert accepted(batch) == max(-1, *timestamps)
    if all(key is not None for key, _, _ in records):
        assert accepted(batch, COMPACTED) == max(-1, *timestamps)
    else:
        assert refusal(batch, COMPACTED).code == ErrorCode.INVALID_RECORD


def _uniform_batch(count: int, key: bytes | None, value: bytes, with_header: bool) -> bytes:
    headers = [("h", b"abc")] if with_header else []
    timestamps = [BASE_TIMESTAMP + (i * 5) // count for i in range(count)]
    return build_batch(
        [(key, value, headers)] * count, base_timestamp=BASE_TIMESTAMP, timestamps=timestamps
    )


mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "insert", "delete"]), st.integers(0, 10**6), st.integers(0, 255)
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.one_of(
        records_strategy.map(lambda records: build_batch(records, base_timestamp=BASE_TIMESTAMP)),
        st.builds(
            _uniform_batch,
            st.integers(16, 90),
            st.none() | st.binary(min_size=1, max_size=5),
            st.binary(max_size=70),
            st.booleans(),
        ),
    ),
    edits=mutations,
    keys_required=st.booleans(),
)
def test_mutated_records_are_refused_or_decode_exactly(base, edits, keys_required) -> None:
    """Random byte changes in the records area (CRC made right again): the batch is refused,
    or it decodes, in decode_batch and in kafka-python, to records_count records at
    consecutive offsets with the timestamps the walk found. The tiers agree either way."""
    data = bytearray(base[BATCH_HEADER_SIZE:])
    for kind, where, byte in edits:
        at = where % (len(data) + 1)
        if kind == "set" and at < len(data):
            data[at] = byte
        elif kind == "insert":
            data.insert(at, byte)
        elif kind == "delete" and at < len(data):
            del data[at]
    batch = resign(base[:BATCH_HEADER_SIZE] + bytes(data))
    header = validate_batch(batch)
    rules = COMPACTED if keys_required else RULES
    count = header.records_count
    walked = record_validation._walk(bytes(data), count, keys_required)
    uniform = record_validation._walk_uniform(
        bytes(data), count, header.max_timestamp - header.base_timestamp, keys_required
    )
    assert uniform is None or uniform == walked
    try:
        max_timestamp = validate_client_batch(batch, 0, header, rules)
    except BatchRefused as refused:
        assert walked is None  # _explain refuses only what _walk refused
        assert refused.code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
        assert refused.message
        event(f"refused: {refused.code.name}")
        return
    assert walked is not None
    event("accepted by the strided tier" if uniform is not None else "accepted by _walk")
    decoded = decode_batch(batch)
    assert [r.offset for r in decoded] == list(range(count))
    assert max_timestamp == max(-1, *(r.timestamp for r in decoded))
    if keys_required:
        assert all(r.key is not None for r in decoded)
    theirs = list(DefaultRecordBatch(bytearray(batch)))
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in theirs] == [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for r in decoded
    ]


def test_a_walk_refusal_is_always_explained() -> None:
    """_explain must raise for everything _walk refuses: a hand-picked record error and a
    structural one."""
    for data, count in ((record(0) + record(2), 2), (record(0)[:-1], 1)):
        assert record_validation._walk(data, count, False) is None
        with pytest.raises(BatchRefused):
            record_validation._explain(data, count, False, "")
