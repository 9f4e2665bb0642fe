"""Malformed frames from a raw socket do not take the broker down or disturb other clients."""

from __future__ import annotations

import struct

import pytest

from rlog.core.protocol.connection import ClientConnection
from rlog.core.records import build_batch
from support import clients
from support.clients import Message
from support.raw_wire import exchange, framed, header, request

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(struct.pack(">i", -5), id="negative-size"),
        pytest.param(struct.pack(">i", 2**31 - 1) + b"x" * 100, id="oversized-size-prefix"),
        pytest.param(struct.pack(">i", 3) + b"abc", id="frame-shorter-than-a-header"),
        pytest.param(struct.pack(">i", 200) + header(18, 0)[:6], id="truncated-frame-then-eof"),
        pytest.param(framed(header(999, 0)), id="unknown-api-key"),
        pytest.param(framed(header(3, 1) + b"\xff\xff\xff"), id="metadata-body-garbage"),
        pytest.param(framed(header(3, 99)), id="unsupported-metadata-version"),
    ],
)
def test_malformed_frame_closes_only_that_connection(cluster, frame: bytes) -> None:
    address = ("127.0.0.1", cluster.base_port)
    pid = cluster.broker_pid(1)
    assert exchange(address, frame, expect_reply=False) is None
    # The broker still serves everyone else, in the same process.
    clients.create_topic(cluster.bootstrap, "after-garbage")
    sent = [Message(b"k", b"v", (), 0, -1)]
    clients.confluent_produce(cluster.bootstrap, "after-garbage", sent)
    assert [
        m.value for m in clients.confluent_consume(cluster.bootstrap, "after-garbage", [0], 1)
    ] == [b"v"]
    assert cluster.broker_pid(1) == pid


def test_api_versions_above_the_supported_range_gets_error_35(cluster) -> None:
    reply = exchange(
        ("127.0.0.1", cluster.base_port),
        framed(header(18, 77) + b"\x00\x00"),
        expect_reply=True,
    )
    assert reply is not None
    _size, correlation_id, error_code = struct.unpack(">iih", reply[:10])
    assert correlation_id == 7
    assert error_code == 35  # UNSUPPORTED_VERSION, with a v0 body listing ApiVersions' range
    (count,) = struct.unpack(">i", reply[10:14])
    assert count == 1
    assert struct.unpack(">h", reply[14:16])[0] == 18


def test_corrupt_crc_is_refused_and_nothing_is_written(cluster) -> None:
    address = ("127.0.0.1", cluster.base_port)
    clients.create_topic(cluster.bootstrap, "crc")
    batch = bytearray(build_batch([(b"k", b"good", [])]))
    good = bytes(batch)
    batch[-1] ^= 0xFF  # flip a bit in the record bytes the CRC covers
    connection = ClientConnection()

    def produce(records: bytes) -> dict:
        body = {
            "transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": "crc", "partition_data": [{"index": 0, "records": records}]}],
        }  # fmt: skip
        response = request(connection, address, 0, 8, body)
        return response.body["responses"][0]["partition_responses"][0]

    refused = produce(bytes(batch))
    assert refused["error_code"] == 2  # CORRUPT_MESSAGE
    accepted = produce(good)
    assert accepted["error_code"] == 0
    assert accepted["base_offset"] == 0  # the corrupt batch took no offset
    assert [m.value for m in clients.confluent_consume(cluster.bootstrap, "crc", [0], 1)] == [
        b"good"
    ]


def test_fetch_and_list_offsets_check_the_leader_epoch(cluster) -> None:
    """KIP-320: a client that knows a newer leader epoch than the broker's is told so."""
    address = ("127.0.0.1", cluster.base_port)
    clients.create_topic(cluster.bootstrap, "epochs")
    connection = ClientConnection()

    def fetch(epoch: int) -> int:
        partition = {"partition": 0, "current_leader_epoch": epoch, "fetch_offset": 0,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}  # fmt: skip
        body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": "epochs", "partitions": [partition]}]}  # fmt: skip
        response = request(connection, address, 1, 11, body)
        return response.body["responses"][0]["partitions"][0]["error_code"]

    def list_offsets(epoch: int) -> int:
        partition = {"partition_index": 0, "current_leader_epoch": epoch, "timestamp": -1}
        body = {"replica_id": -1, "isolation_level": 0,
                "topics": [{"name": "epochs", "partitions": [partition]}]}  # fmt: skip
        response = request(connection, address, 2, 5, body)
        return response.body["topics"][0]["partitions"][0]["error_code"]

    assert fetch(-1) == 0 and fetch(0) == 0
    assert fetch(7) == 75  # UNKNOWN_LEADER_EPOCH
    assert list_offsets(0) == 0
    assert list_offsets(7) == 75


def test_offset_for_leader_epoch_says_where_an_epoch_ends(cluster) -> None:
    address = ("127.0.0.1", cluster.base_port)
    clients.create_topic(cluster.bootstrap, "epoch-ends")
    clients.confluent_produce(
        cluster.bootstrap, "epoch-ends", [Message(None, b"%d" % i, (), 0, -1) for i in range(3)]
    )
    connection = ClientConnection()

    def ask(epoch: int, topic: str = "epoch-ends") -> dict:
        partition = {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}
        body = {"replica_id": -1, "topics": [{"topic": topic, "partitions": [partition]}]}
        response = request(connection, address, 23, 3, body)
        return response.body["topics"][0]["partitions"][0]

    latest = ask(0)
    assert (latest["error_code"], latest["leader_epoch"], latest["end_offset"]) == (0, 0, 3)
    assert ask(5)["end_offset"] == 3  # a later epoch than any: the latest epoch's end, the LEO
    assert ask(0, topic="nope")["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
