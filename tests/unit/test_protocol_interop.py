"""Our codecs against two independent implementations: the clients' own protocol layers.

aiokafka's hand-written structs cover the non-flexible versions the broker serves; kafka-python
3's generated codecs cover flexible versions with tagged fields. Skipped if either is missing.
"""

from __future__ import annotations

import io
import uuid

import pytest

from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.connection import Request, ServerConnection

aiokafka_fetch = pytest.importorskip("aiokafka.protocol.fetch")
aiokafka_metadata = pytest.importorskip("aiokafka.protocol.metadata")
aiokafka_produce = pytest.importorskip("aiokafka.protocol.produce")


def test_aiokafka_fetch_v11_request_decodes() -> None:
    topics = [("t", [(0, -1, 7, 0, 1024)])]
    request = aiokafka_fetch.FetchRequest_v11(-1, 500, 1, 1000, 1, 0, -1, topics, [], "rack")
    body, _ = codec_for("FetchRequest", 11).decode(request.encode())
    assert (body["max_wait_ms"], body["min_bytes"], body["max_bytes"]) == (500, 1, 1000)
    assert (body["isolation_level"], body["session_epoch"], body["rack_id"]) == (1, -1, "rack")
    assert body["topics"][0]["partitions"][0] == {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": 7,
        "last_fetched_epoch": -1,
        "log_start_offset": 0,
        "partition_max_bytes": 1024,
        "replica_directory_id": uuid.UUID(int=0),
    }


def test_aiokafka_produce_v7_request_decodes() -> None:
    request = aiokafka_produce.ProduceRequest_v7(None, -1, 1000, [("t", [(2, b"batch")])])
    body, _ = codec_for("ProduceRequest", 7).decode(request.encode())
    partition = body["topic_data"][0]["partition_data"][0]
    assert (partition["index"], bytes(partition["records"])) == (2, b"batch")


def test_our_fetch_v11_response_reads_in_aiokafka() -> None:
    partition = {
        "partition_index": 0,
        "high_watermark": 10,
        "last_stable_offset": 9,
        "log_start_offset": 1,
        "aborted_transactions": [{"producer_id": 5, "first_offset": 2}],
        "records": b"abc",
    }
    body = {"throttle_time_ms": 3, "responses": [{"topic": "t", "partitions": [partition]}]}
    decoded = aiokafka_fetch.FetchResponse_v11.decode(
        io.BytesIO(codec_for("FetchResponse", 11).encode(body))
    )
    (topic, partitions) = decoded.topics[0]
    assert topic == "t"
    assert tuple(partitions[0]) == (0, 0, 10, 9, 1, [(5, 2)], -1, b"abc")


def test_our_metadata_v5_response_reads_in_aiokafka() -> None:
    partition = {"partition_index": 0, "leader_id": 1, "replica_nodes": [1, 2], "isr_nodes": [1]}
    body = {
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [{"name": "t", "partitions": [partition]}],
    }
    decoded = aiokafka_metadata.MetadataResponse_v5.decode(
        io.BytesIO(codec_for("MetadataResponse", 5).encode(body))
    )
    assert decoded.cluster_id == "c" and decoded.controller_id == 1
    assert tuple(decoded.brokers[0]) == (1, "h", 9092, None)
    assert tuple(decoded.topics[0][3][0]) == (0, 0, 1, [1, 2], [1], [])


def test_kafka_python_flexible_requests_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    metadata = pytest.importorskip("kafka.protocol.metadata")
    monkeypatch.setitem(SUPPORTED, ApiKey.METADATA, (1, 12))
    topic_id = uuid.uuid4()
    request = metadata.MetadataRequest(
        topics=[metadata.MetadataRequest.MetadataRequestTopic(name="t", topic_id=topic_id)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=True,
    )
    request.with_header(correlation_id=7, client_id="kp")
    server = ServerConnection()
    server.receive_data(request.encode(version=12, header=True, framed=True))
    event = server.next_event()
    assert isinstance(event, Request) and event.body is not None
    assert (event.api_version, event.correlation_id, event.client_id) == (12, 7, "kp")
    assert event.body["topics"] == [{"topic_id": topic_id, "name": "t"}]
    assert event.body["allow_auto_topic_creation"] is False


def test_our_flexible_fetch_response_reads_in_kafka_python() -> None:
    fetch = pytest.importorskip("kafka.protocol.consumer.fetch")
    partition = {
        "partition_index": 0,
        "high_watermark": 10,
        "diverging_epoch": {"epoch": 3, "end_offset": 55},  # tagged 0
        "current_leader": {"leader_id": 2, "leader_epoch": 9},  # tagged 1
        "records": b"abc",
    }
    body = {
        "responses": [{"topic_id": uuid.uuid4(), "partitions": [partition]}],
        "node_endpoints": [{"node_id": 2, "host": "x", "port": 1}],  # tagged, top level
    }
    request = Request(ApiKey.FETCH, 16, 8, "kp", {}, 0)
    wire = b"".join(ServerConnection().send(request, body))
    decoded = fetch.FetchResponse.decode(wire, version=16, header=True, framed=True)
    got = decoded.responses[0].partitions[0]
    assert (got.diverging_epoch.epoch, got.diverging_epoch.end_offset) == (3, 55)
    assert (got.current_leader.leader_id, got.current_leader.leader_epoch) == (2, 9)
    assert got.records == b"abc" and got.snapshot_id is None
    assert decoded.node_endpoints[0].host == "x"
