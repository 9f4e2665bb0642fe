from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.records import (
    BATCH_HEADER_SIZE,
    Compression,
    ControlType,
    CorruptRecordError,
    Header,
    Record,
    TimestampType,
    build_batch,
    build_end_txn_marker,
    decode_batch,
    iter_batches,
    may_be_transactional,
    patch_base_offset,
    patch_leader_epoch,
    read_end_txn_marker,
    read_header,
    set_log_append_time,
    validate_batch,
)

RECORDS = [
    (b"key", b"value", [("h1", b"x"), Header("h2", None)]),
    (None, b"null key"),
    (b"null value", None),
    (b"", b""),
]


@pytest.mark.parametrize("compression", list(Compression))
def test_build_validate_decode_round_trip(compression: Compression) -> None:
    batch = build_batch(
        RECORDS,
        base_offset=100,
        base_timestamp=1_000,
        timestamps=[1_000, 999, 1_005, 1_001],
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
        compression=compression,
        partition_leader_epoch=5,
    )
    header = validate_batch(batch)
    assert header.size == len(batch)
    assert (header.base_offset, header.last_offset, header.next_offset) == (100, 103, 104)
    assert (header.records_count, header.compression) == (4, compression)
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_005)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 11)
    assert header.partition_leader_epoch == 5
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert decode_batch(batch) == [
        Record(100, 1_000, b"key", b"value", [Header("h1", b"x"), Header("h2", None)]),
        Record(101, 999, None, b"null key", []),
        Record(102, 1_005, b"null value", None, []),
        Record(103, 1_001, b"", b"", []),
    ]


record_strategy = st.tuples(
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(record_strategy, min_size=1, max_size=8),
    base_timestamp=st.integers(0, 2**40),
    deltas=st.lists(st.integers(-(2**31), 2**31), min_size=8, max_size=8),
    compression=st.sampled_from([Compression.NONE, Compression.GZIP]),
)
def test_decode_inverts_build(
    records: list, base_timestamp: int, deltas: list[int], compression: Compression
) -> None:
    timestamps = [base_timestamp + delta for delta in deltas[: len(records)]]
    batch = build_batch(
        records, base_timestamp=base_timestamp, timestamps=timestamps, compression=compression
    )
    decoded = decode_batch(batch)
    assert [(r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in decoded] == [
        (key, value, list(headers)) for key, value, headers in records
    ]
    assert [r.timestamp for r in decoded] == timestamps
    assert [r.offset for r in decoded] == list(range(len(records)))
    assert validate_batch(batch).max_timestamp == max(timestamps)


BATCH = build_batch(RECORDS, base_offset=3, base_timestamp=50)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_flipped_byte_in_crc_region_is_detected(data: st.DataObject) -> None:
    # The CRC field (17..20) and everything it covers (21..end).
    position = data.draw(st.integers(17, len(BATCH) - 1))
    flip = data.draw(st.integers(1, 255))
    corrupt = bytearray(BATCH)
    corrupt[position] ^= flip
    with pytest.raises(CorruptRecordError):
        validate_batch(corrupt)


def test_may_be_transactional_looks_at_the_attributes_byte_alone() -> None:
    plain = build_batch([(None, b"v")], producer_id=7, producer_epoch=0, base_sequence=0)
    transactional = build_batch(
        [(None, b"v")], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    marker = build_end_txn_marker(
        ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0
    )
    assert not may_be_transactional(plain)
    assert may_be_transactional(transactional) and read_header(transactional).is_transactional
    assert may_be_transactional(marker)
    assert may_be_transactional(memoryview(transactional))
    assert may_be_transactional(plain[:20])  # too short to tell: read_header will say why


def test_patching_offset_and_epoch_keeps_crc_valid() -> None:
    batch = bytearray(BATCH)
    patch_base_offset(batch, 0, 2**40)
    patch_leader_epoch(batch, 0, 17)
    header = validate_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (2**40, 17)
    assert [r.offset for r in decode_batch(batch)] == [2**40 + i for i in range(4)]


def test_log_append_time_sets_type_and_timestamps_and_recomputes_crc() -> None:
    batch = bytearray(BATCH)
    set_log_append_time(batch, 0, 9_999)
    header = validate_batch(batch)  # raises if the CRC were stale
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 9_999
    assert {r.timestamp for r in decode_batch(batch)} == {9_999}


def test_every_truncation_is_corrupt() -> None:
    for length in range(1, len(BATCH)):  # an empty buffer holds no batches, fine for iter
        with pytest.raises(CorruptRecordError):
            validate_batch(BATCH[:length])
        with pytest.raises(CorruptRecordError):
            list(iter_batches(BATCH[:length]))


def test_iter_batches_yields_positions_then_fails_on_trailing_bytes() -> None:
    second = build_batch([(b"a", b"b")], base_offset=4)
    buffer = BATCH + second + BATCH
    assert [(pos, h.base_offset) for pos, h in iter_batches(buffer)] == [
        (0, 3),
        (len(BATCH), 4),
        (len(BATCH) + len(second), 3),
    ]
    seen = []
    with pytest.raises(CorruptRecordError):
        for pos, _ in iter_batches(BATCH + second[:-1]):
            seen.append(pos)
    assert seen == [0]
    assert list(iter_batches(b"")) == []


def test_header_checks_magic_and_length() -> None:
    bad_magic = bytearray(BATCH)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        read_header(bad_magic)
    short_length = bytearray(BATCH)
    struct.pack_into(">i", short_length, 8, 48)
    with pytest.raises(CorruptRecordError, match="batchLength 48"):
        read_header(short_length)
    with pytest.raises(CorruptRecordError, match="60 bytes"):
        read_header(BATCH[: BATCH_HEADER_SIZE - 1])


def test_negative_counts_are_corrupt_even_with_a_valid_crc() -> None:
    from rlog.core.records import _write_crc  # re-sign the tampered batch

    batch = bytearray(BATCH)
    struct.pack_into(">i", batch, 23, -1)  # lastOffsetDelta
    _write_crc(batch, 0)
    with pytest.raises(CorruptRecordError, match="lastOffsetDelta"):
        validate_batch(batch)


def test_record_fields_running_past_their_record_are_corrupt() -> None:
    from rlog.core.records import _write_crc

    batch = bytearray(build_batch([(b"k", b"v")]))
    batch[BATCH_HEADER_SIZE] += 2  # the record's length varint: claims bytes it does not have
    _write_crc(batch, 0)
    with pytest.raises(CorruptRecordError):
        decode_batch(batch)


def test_garbage_gzip_payload_is_corrupt() -> None:
    from rlog.core.records import _write_crc

    batch = bytearray(build_batch([(b"k", b"v" * 100)], compression=Compression.GZIP))
    batch[BATCH_HEADER_SIZE + 12] ^= 0xFF
    _write_crc(batch, 0)
    with pytest.raises(CorruptRecordError):
        decode_batch(batch)


def test_snappy_accepts_raw_blocks_and_xerial_framing() -> None:
    cramjam = pytest.importorskip("cramjam")
    from rlog.core.records import _write_crc

    HEADER = BATCH_HEADER_SIZE

    xerial = bytearray(build_batch([(b"k", b"v" * 300)], compression=Compression.SNAPPY))
    assert xerial[HEADER : HEADER + 8] == b"\x82SNAPPY\x00"
    records = bytes(cramjam.snappy.decompress_raw(bytes(xerial[HEADER + 20 :])))
    raw_payload = bytes(cramjam.snappy.compress_raw(records))
    raw = xerial[:HEADER] + raw_payload
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    _write_crc(raw, 0)
    assert decode_batch(raw) == decode_batch(xerial)
    assert decode_batch(raw)[0].value == b"v" * 300


@pytest.mark.parametrize("compression", list(Compression))
def test_interoperates_with_kafka_python(compression: Compression) -> None:
    default_records = pytest.importorskip("kafka.record.default_records")
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.append(0, timestamp=1_000, key=b"k", value=b"v" * 50, headers=[("h", b"1")])
    builder.append(1, timestamp=1_007, key=None, value=b"x", headers=[])
    theirs = bytes(builder.build())
    assert decode_batch(theirs) == [
        Record(0, 1_000, b"k", b"v" * 50, [Header("h", b"1")]),
        Record(1, 1_007, None, b"x", []),
    ]
    ours = build_batch([(b"k", b"v", [("a", None)])], base_timestamp=5, compression=compression)
    parsed = default_records.DefaultRecordBatch(ours)
    assert parsed.validate_crc()
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in parsed] == [
        (0, b"k", b"v", [("a", None)], 5)
    ]


def test_end_txn_marker_round_trip() -> None:
    marker = build_end_txn_marker(
        ControlType.COMMIT, producer_id=9, producer_epoch=2, coordinator_epoch=4, timestamp_ms=77
    )
    header = validate_batch(marker)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, -1)
    (record,) = decode_batch(marker)
    assert read_end_txn_marker(record) == (ControlType.COMMIT, 4)


def test_build_rejects_empty_and_mismatched_timestamps() -> None:
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v")], timestamps=[1, 2])
