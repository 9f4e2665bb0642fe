"""Bad group requests from a raw socket: one clear error each, and no committed offset moves."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import ClientConnection
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch
from support.clients import create_topic
from support.cluster import Cluster
from support.raw_wire import exchange, framed, header, request

pytestmark = pytest.mark.integration

CONFIG = """
[broker]
"group.initial.rebalance.delay.ms" = 0
"offsets.topic.num.partitions" = 2
"""


def group_consumer(cluster: Cluster) -> Consumer:
    return Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "ledger", "enable.auto.commit": False}
    )


def committed(cluster: Cluster) -> int:
    consumer = group_consumer(cluster)
    try:
        return consumer.committed([TopicPartition("orders", 0)], timeout=15)[0].offset
    finally:
        consumer.close()


def commit_body(group: str, *, topic: str = "orders", metadata: str = "", **fields: object) -> dict:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 999,
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": metadata,
                    }
                ],
            }
        ],
    } | fields


def join_body(group: str, **fields: object) -> dict:
    return {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 10_000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
        "reason": None,
    } | fields


def commit_error(answer: dict) -> ErrorCode:
    return ErrorCode(answer["topics"][0]["partitions"][0]["error_code"])


def test_bad_group_requests_get_clear_errors_and_offsets_stay(cluster_factory) -> None:
    cluster = cluster_factory(brokers=1, config_text=CONFIG)
    address = ("127.0.0.1", cluster.base_port)
    create_topic(cluster.bootstrap, "orders")
    consumer = group_consumer(cluster)
    consumer.commit(offsets=[TopicPartition("orders", 0, 5)], asynchronous=False)
    consumer.close()
    assert committed(cluster) == 5

    # Frames that do not parse: Kafka closes the connection, and so does rlog.
    for api_key, version in ((ApiKey.OFFSET_COMMIT, 7), (ApiKey.JOIN_GROUP, 5)):
        garbage = framed(header(api_key, version) + b"\x00\x06ledger\xff\xff\xff")
        assert exchange(address, garbage, expect_reply=False) is None

    def ask(api_key: ApiKey, version: int, body: dict) -> dict:
        return request(ClientConnection(), address, api_key, version, body).body

    # Well-formed requests with bad values: an error code on the part they concern.
    answer = ask(ApiKey.OFFSET_COMMIT, 7, commit_body("ledger", topic="no-such-topic"))
    assert commit_error(answer) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    answer = ask(ApiKey.OFFSET_COMMIT, 7, commit_body("ledger", metadata="x" * 5000))
    assert commit_error(answer) == ErrorCode.OFFSET_METADATA_TOO_LARGE
    stranger = commit_body("ledger", generation_id_or_member_epoch=3, member_id="ghost")
    assert commit_error(ask(ApiKey.OFFSET_COMMIT, 7, stranger)) == ErrorCode.UNKNOWN_MEMBER_ID
    assert commit_error(ask(ApiKey.OFFSET_COMMIT, 7, commit_body(""))) == ErrorCode.INVALID_GROUP_ID

    answer = ask(ApiKey.JOIN_GROUP, 5, join_body("ledger", session_timeout_ms=1))
    assert answer["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    answer = ask(ApiKey.JOIN_GROUP, 5, join_body("ledger", member_id="forged-id"))
    assert answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    answer = ask(ApiKey.JOIN_GROUP, 5, join_body("ledger", protocol_type=""))
    assert answer["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    beat = {"group_id": "ledger", "generation_id": 1, "member_id": "ghost",
            "group_instance_id": None}  # fmt: skip
    assert ask(ApiKey.HEARTBEAT, 3, beat)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    results = ask(ApiKey.DELETE_GROUPS, 1, {"groups_names": ["never-made"]})["results"]
    assert results[0]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND

    # Only the coordinators write __consumer_offsets: a client's Produce there is refused.
    forged = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {
                "name": "__consumer_offsets",
                "partition_data": [{"index": 0, "records": build_batch([(b"\x00", b"\x00")])}],
            }
        ],
    }
    produced = ask(ApiKey.PRODUCE, 8, forged)["responses"][0]["partition_responses"][0]
    assert produced["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION

    # The coordinator still serves, and nothing moved the committed offset.
    assert committed(cluster) == 5
    consumer = group_consumer(cluster)
    consumer.commit(offsets=[TopicPartition("orders", 0, 6)], asynchronous=False)
    consumer.close()
    assert committed(cluster) == 6
