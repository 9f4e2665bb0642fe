"""Metadata records: JSON encoding both ways, strict decoding, and batches of records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.metadata.records import (
    RECORD_TYPES,
    AccessControlEntry,
    AllocateProducerIds,
    ChangeConfig,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataDecodeError,
    MetadataRecord,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UnfenceBroker,
    UserScramCredential,
    decode_record,
    encode_record,
    records_from_batches,
    records_to_batch,
)
from rlog.core.records import CorruptRecordError, build_batch

EXAMPLES: list[MetadataRecord] = [
    RegisterBroker(1, "inc-1", 0, "localhost", 9092, None),
    RegisterBroker(2, "inc-2", 7, "10.0.0.2", 19092, "rack-a"),
    FenceBroker(1, 0),
    UnfenceBroker(1, 0),
    CreateTopic("orders", "0123456789abcdef0123456789abcdef", {"retention.ms": "1000"}),
    CreatePartition("orders", 0, (1, 2, 3), (1, 2, 3), 1, 0, 0),
    ChangePartition("orders", 0, 2, (2, 3), 1, 1, "broker 1 fenced"),
    ChangePartition("orders", 0, None, None, 1, 2, "no-op"),
    ChangePartition("orders", 0, -1, (3,), 2, 3, "offline"),
    ChangePartition("orders", 0, 3, (3,), 3, 4, "unclean", unclean=True),
    DeleteTopic("orders"),
    ChangeConfig("topic", "orders", "min.insync.replicas", "2"),
    ChangeConfig("cluster", "", "unclean.leader.election.enable", None),
    AllocateProducerIds(1, 0, 1000),
    AccessControlEntry("0123456789abcdef0123456789abcdef", 2, "orders", 3, "User:a", "*", 3, 3),
    RemoveAccessControlEntry("0123456789abcdef0123456789abcdef"),
    UserScramCredential("alice", 1, "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096),
    RemoveUserScramCredential("alice", 2),
]


def test_examples_cover_every_type() -> None:
    assert {type(record) for record in EXAMPLES} == set(RECORD_TYPES.values())


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip(record: MetadataRecord) -> None:
    data = encode_record(record)
    assert decode_record(data) == record
    document = json.loads(data)
    assert document["type"] == record.TYPE
    assert list(document) == sorted(document)  # sorted keys: equal records, equal bytes


def test_encoding_is_compact_and_tagged() -> None:
    assert (
        encode_record(FenceBroker(1, 5))
        == b'{"broker_epoch":5,"broker_id":1,"type":"fence_broker"}'
    )


_ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_text = st.text(max_size=20)
_int_tuples = st.lists(_ints, max_size=5).map(tuple)
_configs = st.dictionaries(_text, _text, max_size=4)
records = st.one_of(
    st.builds(RegisterBroker, _ints, _text, _ints, _text, _ints, st.none() | _text),
    st.builds(FenceBroker, _ints, _ints),
    st.builds(UnfenceBroker, _ints, _ints),
    st.builds(CreateTopic, _text, _text, _configs),
    st.builds(CreatePartition, _text, _ints, _int_tuples, _int_tuples, _ints, _ints, _ints),
    st.builds(
        ChangePartition,
        _text,
        _ints,
        st.none() | _ints,
        st.none() | _int_tuples,
        _ints,
        _ints,
        _text,
        st.booleans(),
    ),
    st.builds(DeleteTopic, _text),
    st.builds(ChangeConfig, _text, _text, _text, st.none() | _text),
    st.builds(AllocateProducerIds, _ints, _ints, _ints),
)


@given(records)
def test_any_record_round_trips(record: MetadataRecord) -> None:
    assert decode_record(encode_record(record)) == record


@given(st.lists(records, min_size=1, max_size=20), st.integers(0, 2**40))
def test_batch_round_trip(batch_records: list[MetadataRecord], base_offset: int) -> None:
    batch = records_to_batch(batch_records, base_offset=base_offset, timestamp_ms=123)
    decoded = records_from_batches(batch)
    assert decoded == [(base_offset + i, record) for i, record in enumerate(batch_records)]


def test_several_batches_in_one_buffer() -> None:
    first = records_to_batch(EXAMPLES[:3], base_offset=0, timestamp_ms=0)
    second = records_to_batch(EXAMPLES[3:5], base_offset=3, timestamp_ms=0)
    assert [offset for offset, _ in records_from_batches(first + second)] == [0, 1, 2, 3, 4]


BAD_RECORDS = [
    # (why, bytes)
    ("not JSON", b"{"),
    ("not UTF-8", b"\xff\xfe"),
    ("not an object", b"[1, 2]"),
    ("no type", b'{"broker_id": 1, "broker_epoch": 0}'),
    ("unknown type", b'{"type": "delete_cluster"}'),
    ("type not a string", b'{"type": 7}'),
    ("missing field", b'{"type": "fence_broker", "broker_id": 1}'),
    ("unknown field", b'{"type": "fence_broker", "broker_id": 1, "broker_epoch": 0, "x": 1}'),
    ("string for int", b'{"type": "fence_broker", "broker_id": "1", "broker_epoch": 0}'),
    ("bool for int", b'{"type": "fence_broker", "broker_id": true, "broker_epoch": 0}'),
    ("float for int", b'{"type": "fence_broker", "broker_id": 1.0, "broker_epoch": 0}'),
    ("null for int", b'{"type": "fence_broker", "broker_id": null, "broker_epoch": 0}'),
    ("null for string", b'{"type": "delete_topic", "name": null}'),
    (
        "strings in replicas",
        b'{"type": "create_partition", "topic": "t", "partition": 0, "replicas": ["1"], '
        b'"isr": [1], "leader": 1, "leader_epoch": 0, "partition_epoch": 0}',
    ),
    (
        "config value not a string",
        b'{"type": "create_topic", "name": "t", "topic_id": "x", "configs": {"a": 1}}',
    ),
    (
        "configs not an object",
        b'{"type": "create_topic", "name": "t", "topic_id": "x", "configs": []}',
    ),
]


@pytest.mark.parametrize(("why", "data"), BAD_RECORDS, ids=[why for why, _ in BAD_RECORDS])
def test_bad_record_is_refused(why: str, data: bytes) -> None:
    with pytest.raises(MetadataDecodeError):
        decode_record(data)


def test_optional_fields_accept_null() -> None:
    document = b'{"type": "register_broker", "broker_id": 1, "incarnation_id": "i", ' + (
        b'"broker_epoch": 0, "host": "h", "port": 1, "rack": null}'
    )
    assert decode_record(document) == RegisterBroker(1, "i", 0, "h", 1, None)


def test_null_record_value_is_refused() -> None:
    with pytest.raises(MetadataDecodeError, match="null"):
        records_from_batches(build_batch([(None, None)]))


def test_corrupt_batch_is_a_record_error() -> None:
    batch = bytearray(records_to_batch(EXAMPLES[:2], base_offset=0, timestamp_ms=0))
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        records_from_batches(bytes(batch))


def test_a_record_written_before_a_field_was_added_takes_its_default() -> None:
    """ChangePartition.recovering came later: metadata logs written before it still load."""
    older = (
        b'{"type": "change_partition", "topic": "t", "partition": 0, "leader": 2, "isr": [2], '
        b'"leader_epoch": 1, "partition_epoch": 3, "reason": "r", "unclean": false}'
    )
    record = decode_record(older)
    assert isinstance(record, ChangePartition) and record.recovering is None
    assert decode_record(encode_record(record)) == record
