"""Batches with a valid CRC but broken records, sent from a raw socket to a real broker: each is
refused with its error code (and record_errors and error_message at Produce v8), takes no
offset, and leaves the partition readable: confluent-kafka, kafka-python and aiokafka then read
exactly the good records produced after them.
"""

from __future__ import annotations

import struct

import crc32c
import pytest

from rlog.core.protocol.connection import ClientConnection
from rlog.core.records import BATCH_HEADER_SIZE, Compression, build_batch, varint_bytes
from support import clients
from support.clients import Message
from support.raw_wire import request

pytestmark = pytest.mark.integration

CORRUPT_MESSAGE, INVALID_RECORD = 2, 87
HEADER = struct.Struct(">qiibIhiqqqhii")  # Kafka's v2 batch header


varint = varint_bytes


def field(value: bytes | None) -> bytes:
    return varint(-1) if value is None else varint(len(value)) + value


def record(offset_delta: int, *, key: bytes | None = None, tail: bytes | None = None) -> bytes:
    """A record with value b"value" and no headers; `tail` replaces what follows the offset
    delta, with the record length still counting the bytes actually there."""
    rest = field(key) + field(b"value") + varint(0) if tail is None else tail
    body = b"\x00" + varint(0) + varint(offset_delta) + rest
    return varint(len(body)) + body


def batch_of(
    records: bytes,
    count: int,
    *,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    producer_id: int = -1,
) -> bytes:
    """A batch around the records area `records`, with a valid CRC."""
    last = count - 1 if last_offset_delta is None else last_offset_delta
    epoch = 0 if producer_id >= 0 else -1
    header = HEADER.pack(
        0, BATCH_HEADER_SIZE - 12 + len(records), -1, 2, 0, attributes, last, 0, 0,
        producer_id, epoch, -1, count,
    )  # fmt: skip
    batch = bytearray(header + records)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


GOOD_RECORDS = record(0) + record(1)

# (name, batch, error code, whether record_errors name a record)
POISONS = [
    ("garbage record bytes", batch_of(b"\x17garbage, not a record", 1), CORRUPT_MESSAGE, True),
    *[
        (f"{codec.name} flag on plain records", batch_of(GOOD_RECORDS, 2, attributes=codec),
         CORRUPT_MESSAGE, False)
        for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
    ],
    ("count against offsets", batch_of(GOOD_RECORDS, 2, last_offset_delta=0), INVALID_RECORD,
     False),
    ("bad varint", batch_of(b"\xff" * 11, 1), CORRUPT_MESSAGE, True),
    ("offset delta 1 in one record", batch_of(record(1), 1), INVALID_RECORD, True),
    ("key past the record", batch_of(record(0, tail=varint(40) + b"k"), 1), CORRUPT_MESSAGE,
     True),
    ("value past the record", batch_of(record(0, tail=varint(-1) + varint(30) + b"v"), 1),
     CORRUPT_MESSAGE, True),
    ("header value past the record",
     batch_of(record(0, tail=field(None) + field(b"v") + varint(1) + field(b"h") + varint(9)), 1),
     CORRUPT_MESSAGE, True),
    ("record length against fields", batch_of(varint(12) + record(0)[1:] + b"\x00", 1),
     CORRUPT_MESSAGE, True),
    ("trailing bytes", batch_of(GOOD_RECORDS + b"\x00\x00", 2), CORRUPT_MESSAGE, False),
    ("control batch", batch_of(GOOD_RECORDS, 2, attributes=0x20), INVALID_RECORD, False),
    ("producer id without a sequence", batch_of(GOOD_RECORDS, 2, producer_id=5), INVALID_RECORD,
     False),
]  # fmt: skip


def produce(address: tuple[str, int], topic: str, batch: bytes, version: int) -> dict:
    body = {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }  # fmt: skip
    response = request(ClientConnection(), address, 0, version, body)
    return response.body["responses"][0]["partition_responses"][0]


def log_end(address: tuple[str, int], topic: str) -> int:
    partition = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [partition]}]}  # fmt: skip
    response = request(ClientConnection(), address, 2, 5, body)
    return response.body["topics"][0]["partitions"][0]["offset"]


def test_poison_batches_are_refused_and_every_client_reads_only_the_good(cluster) -> None:
    address = ("127.0.0.1", cluster.base_port)
    clients.create_topic(cluster.bootstrap, "poison")
    for name, batch, code, names_a_record in POISONS:
        answer = produce(address, "poison", batch, 8)
        assert answer["error_code"] == code, (name, answer)
        assert answer["base_offset"] == -1, name
        assert answer["error_message"] and "in topic partition poison-0" in (
            answer["error_message"] + "".join(e["batch_index_error_message"] for e in
                                              answer["record_errors"])
        ), (name, answer)  # fmt: skip
        assert bool(answer["record_errors"]) == names_a_record, (name, answer)
        assert log_end(address, "poison") == 0, name
    # Before v8 the answer has no room for the messages, and the error code is the same.
    old = produce(address, "poison", batch_of(record(1), 1), 3)
    assert (old["error_code"], old["record_errors"], old["error_message"]) == (87, [], None)
    assert log_end(address, "poison") == 0

    good = [Message(b"k%d" % i, b"good-%d" % i, (("h", b"%d" % i),), 0, -1) for i in range(5)] + [
        Message(b"no-value", None, (), 0, -1)
    ]
    clients.confluent_produce(cluster.bootstrap, "poison", good[:3])
    accepted = produce(address, "poison", build_batch([(None, b"raw-good")] * 20), 8)
    assert (accepted["error_code"], accepted["base_offset"]) == (0, 3)
    clients.kafka_python_produce(cluster.bootstrap, "poison", good[3:])
    expected = [(m.key, m.value, m.headers) for m in good[:3]]
    expected += [(None, b"raw-good", ())] * 20 + [(m.key, m.value, m.headers) for m in good[3:]]
    for consume in (
        clients.confluent_consume,
        clients.kafka_python_consume,
        clients.aiokafka_consume,
    ):
        seen = consume(cluster.bootstrap, "poison", [0], len(expected))
        assert [(m.key, m.value, m.headers) for m in seen] == expected, consume.__name__
        assert [m.offset for m in seen] == list(range(len(expected))), consume.__name__


def test_a_compacted_topic_refuses_records_without_a_key(cluster) -> None:
    address = ("127.0.0.1", cluster.base_port)
    clients.create_topic(cluster.bootstrap, "compacted", config={"cleanup.policy": "compact"})
    mixed = build_batch([(b"k", b"1"), (None, b"2"), (b"k", None)])
    answer = produce(address, "compacted", mixed, 8)
    message = "Compacted topic cannot accept message without key in topic partition compacted-0"
    assert answer["error_code"] == INVALID_RECORD
    assert answer["record_errors"] == [{"batch_index": 1, "batch_index_error_message": message}]
    assert answer["error_message"] == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{message}')]"
    )
    assert log_end(address, "compacted") == 0
    keyed = [Message(b"k", b"1", (), 0, -1), Message(b"k", None, (), 0, -1)]
    clients.confluent_produce(cluster.bootstrap, "compacted", keyed)
    seen = clients.kafka_python_consume(cluster.bootstrap, "compacted", [0], 2)
    assert [(m.key, m.value) for m in seen] == [(b"k", b"1"), (b"k", None)]
