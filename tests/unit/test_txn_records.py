"""The `__transaction_state` record formats, byte for byte as Kafka writes and reads them."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.transactions.records import (
    CorruptTxnRecordError,
    TxnLogValue,
    TxnState,
    parse_txn_key,
    parse_txn_value,
    txn_key,
    txn_value,
)


def test_states_carry_kafkas_status_bytes_and_names() -> None:
    assert [(s.value, s.kafka_name) for s in TxnState] == [
        (0, "Empty"),
        (1, "Ongoing"),
        (2, "PrepareCommit"),
        (3, "PrepareAbort"),
        (4, "CompleteCommit"),
        (5, "CompleteAbort"),
        (6, "Dead"),
        (7, "PrepareEpochFence"),
    ]
    assert TxnState.from_kafka_name("PrepareEpochFence") is TxnState.PREPARE_EPOCH_FENCE
    assert TxnState.from_kafka_name("ongoing") is None  # Kafka's names are case-sensitive


def test_the_key_is_version_0_then_the_id_as_an_int16_string() -> None:
    assert txn_key("tx") == bytes.fromhex("000000027478")
    assert txn_key("é") == bytes.fromhex("00000002c3a9")  # length in UTF-8 bytes
    assert parse_txn_key(bytes.fromhex("000000027478")) == "tx"


def test_a_value_is_laid_out_field_by_field_as_kafkas_version_0() -> None:
    value = TxnLogValue(
        producer_id=0x0102030405060708,
        producer_epoch=0x090A,
        timeout_ms=60_000,
        state=TxnState.ONGOING,
        partitions=(("ab", 1), ("ab", 2), ("c", 7)),
        last_update_ms=0x1122334455667788,
        start_ms=0x0000000000001000,
    )
    expected = bytes.fromhex(
        "0000"  # value version 0
        "0102030405060708"  # ProducerId int64
        "090a"  # ProducerEpoch int16
        "0000ea60"  # TransactionTimeoutMs int32 (60000)
        "01"  # TransactionStatus int8: Ongoing
        "00000002"  # TransactionPartitions: 2 topics
        "0002" "6162"  # Topic "ab"
        "00000002" "00000001" "00000002"  # PartitionIds [1, 2]
        "0001" "63"  # Topic "c"
        "00000001" "00000007"  # PartitionIds [7]
        "1122334455667788"  # TransactionLastUpdateTimestampMs
        "0000000000001000"  # TransactionStartTimestampMs
    )  # fmt: skip
    assert txn_value(value) == expected
    assert parse_txn_value(expected) == value


def test_empty_stores_null_partitions_and_complete_an_empty_array() -> None:
    empty = TxnLogValue(5, 0, 1000, TxnState.EMPTY, None, 10, -1)
    encoded = txn_value(empty)
    # version, pid, epoch, timeout, status, then -1 for the null array
    assert encoded[2 + 8 + 2 + 4 + 1 :][:4] == b"\xff\xff\xff\xff"
    assert parse_txn_value(encoded) == empty
    complete = TxnLogValue(5, 0, 1000, TxnState.COMPLETE_COMMIT, (), 10, 3)
    encoded = txn_value(complete)
    assert encoded[2 + 8 + 2 + 4 + 1 :][:4] == b"\x00\x00\x00\x00"
    assert parse_txn_value(encoded) == complete


def test_a_null_value_is_a_tombstone() -> None:
    assert parse_txn_value(None) is None


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_version_1_with_tagged_fields_parses() -> None:
    """Kafka's flexible value: compact arrays and strings, tags per struct and at the end."""
    data = (
        struct.pack(">hqhib", 1, 42, 3, 30_000, TxnState.PREPARE_COMMIT)
        + _uvarint(2)  # one topic (compact: n + 1)
        + _uvarint(4)
        + b"top"  # compact string "top"
        + _uvarint(3)
        + struct.pack(">ii", 0, 5)  # partitions [0, 5]
        + _uvarint(0)  # the topic's tags: none
        + struct.pack(">qq", 900, 800)
        + _uvarint(3)  # three tagged fields
        + _uvarint(0)
        + _uvarint(8)
        + struct.pack(">q", 41)  # PreviousProducerId
        + _uvarint(2)
        + _uvarint(2)
        + struct.pack(">h", 2)  # ClientTransactionVersion
        + _uvarint(9)
        + _uvarint(1)
        + b"\x00"  # an unknown tag, skipped
    )
    value = parse_txn_value(data)
    assert value == TxnLogValue(
        producer_id=42,
        producer_epoch=3,
        timeout_ms=30_000,
        state=TxnState.PREPARE_COMMIT,
        partitions=(("top", 0), ("top", 5)),
        last_update_ms=900,
        start_ms=800,
        previous_producer_id=41,
        next_producer_id=-1,
        client_transaction_version=2,
    )


def test_version_1_null_partitions_parse_as_none() -> None:
    data = (
        struct.pack(">hqhib", 1, 7, 0, 1000, TxnState.EMPTY)
        + _uvarint(0)  # null compact array
        + struct.pack(">qq", 5, -1)
        + _uvarint(0)
    )
    value = parse_txn_value(data)
    assert value is not None and value.partitions is None and value.state == TxnState.EMPTY


_GOOD = txn_value(TxnLogValue(1, 2, 3, TxnState.ONGOING, (("t", 0),), 4, 5))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        _GOOD[:-1],  # cut short
        _GOOD + b"\x00",  # bytes after the record
        b"\x00\x02" + _GOOD[2:],  # unknown value version
        _GOOD[:16] + b"\x08" + _GOOD[17:],  # status byte 8 does not exist
        _GOOD[:17] + b"\xff\xff\xff\xfe" + _GOOD[21:],  # array length -2
        _GOOD[:17] + b"\x7f\xff\xff\xff" + _GOOD[21:],  # more topics than bytes
        _GOOD[:21] + b"\xff\xff" + _GOOD[23:],  # null topic name
        _GOOD[:21] + b"\x00\x01\xff" + _GOOD[24:],  # topic name not UTF-8
    ],
)
def test_corrupt_values_raise(data: bytes) -> None:
    with pytest.raises(CorruptTxnRecordError):
        parse_txn_value(data)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x00\x00", b"\x00\x01\x00\x01a", b"\x00\x00\x00\x02a", b"\x00\x00\xff\xff"],
)
def test_corrupt_keys_raise(data: bytes) -> None:
    with pytest.raises(CorruptTxnRecordError):
        parse_txn_key(data)


def test_the_error_is_a_value_error() -> None:
    assert issubclass(CorruptTxnRecordError, ValueError)


_TOPICS = st.text(min_size=1, max_size=8)
_I16 = st.integers(-(2**15), 2**15 - 1)
_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def _values(draw: st.DrawFn) -> TxnLogValue:
    state = draw(st.sampled_from(list(TxnState)))
    partitions = None
    if state != TxnState.EMPTY or draw(st.booleans()):
        by_topic = draw(st.dictionaries(_TOPICS, st.lists(_I32, max_size=4), max_size=3))
        partitions = tuple((t, p) for t, ids in by_topic.items() for p in ids)
        if draw(st.booleans()):
            partitions = None
    return TxnLogValue(
        draw(_I64), draw(_I16), draw(_I32), state, partitions, draw(_I64), draw(_I64)
    )


@given(_values(), st.text(max_size=20))
def test_keys_and_values_round_trip(value: TxnLogValue, transactional_id: str) -> None:
    assert parse_txn_value(txn_value(value)) == value
    assert parse_txn_key(txn_key(transactional_id)) == transactional_id
