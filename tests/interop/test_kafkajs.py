"""kafkajs (npm), through the node script tests/interop/kafkajs/client.js, against a 3-broker
rlog cluster: the idempotent producer with acks -1, group consumers committing by hand from
eachMessage and eachBatch, and the admin client's topics, configs, offsets, records and
groups."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from support.cluster import HOST, Cluster
from support.kafkajs import Kafkajs

pytestmark = pytest.mark.integration

BROKER_IDS = [1, 2, 3]
# kafkajs gives DescribeConfigs' config source as Kafka's number for it.
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
RETENTION_MS_DEFAULT, MAX_MESSAGE_BYTES_DEFAULT = "604800000", "1048588"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def eventually(what: str, check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    """Metadata reaches every broker a moment after the controller commits it."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.2)


def create_topic(kafkajs: Kafkajs, topic: str, *configs: str) -> None:
    config_options = [option for config in configs for option in ("--config", config)]
    created = kafkajs.one("create-topic", "--topic", topic, "--partitions", "3",
                          "--replication-factor", "3", *config_options)  # fmt: skip
    assert created == {"topic": topic, "created": True}


def watermarks(kafkajs: Kafkajs, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(low, high) watermarks by partition, from fetchTopicOffsets."""
    lines = kafkajs.lines("topic-offsets", "--topic", topic)
    return {line["partition"]: line["low"] for line in lines}, {
        line["partition"]: line["high"] for line in lines
    }


def produce(kafkajs: Kafkajs, topic: str, count: int, first: int = 0) -> list[dict[str, Any]]:
    """Produce key-<i>/value-<i>, i in [first, first + count), one send each, in that order;
    every record's acknowledgement."""
    acked = kafkajs.lines("produce", "--topic", topic, "--count", str(count),
                          "--first", str(first))  # fmt: skip
    assert [line["key"] for line in acked] == [f"key-{i}" for i in range(first, first + count)]
    assert [line["error_code"] for line in acked] == [0] * count
    return acked


def consume(
    kafkajs: Kafkajs, topic: str, group: str, count: int, mode: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Read `count` records in `group`, committing from eachMessage or eachBatch (`mode`):
    (the records, the commits made)."""
    lines = kafkajs.lines("consume", "--topic", topic, "--group", group, "--count", str(count),
                          "--mode", mode)  # fmt: skip
    records = [line for line in lines if line["event"] == "consumed"]
    assert len(records) == count
    return records, [line for line in lines if line["event"] == "committed"]


def committed_offsets(kafkajs: Kafkajs, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on `topic` by partition (-1: none), from fetchOffsets."""
    lines = kafkajs.lines("fetch-offsets", "--group", group, "--topic", topic)
    assert {line["topic"] for line in lines} == {topic}
    return {line["partition"]: line["offset"] for line in lines}


def last_commits(commits: list[dict[str, Any]]) -> dict[int, int]:
    return {commit["partition"]: commit["offset"] for commit in commits}


def test_idempotent_producer_with_acks_all_gets_every_record_acknowledged_with_its_offset(
    kafkajs_client: Kafkajs,
):
    topic = unique("kafkajs-produce")
    create_topic(kafkajs_client, topic)
    again = kafkajs_client.one("create-topic", "--topic", topic, "--partitions", "3")
    assert again == {"topic": topic, "created": False}  # kafkajs: the topic already exists

    acked = produce(kafkajs_client, topic, 30)
    # One send at a time: each partition's records got 0, 1, 2, ... in the order they were sent.
    offsets: dict[int, list[int]] = defaultdict(list)
    for line in acked:
        offsets[line["partition"]].append(line["offset"])
    assert sorted(offsets) == [0, 1, 2]
    assert offsets == {p: list(range(len(o))) for p, o in offsets.items()}
    low, high = watermarks(kafkajs_client, topic)
    assert low == {0: 0, 1: 0, 2: 0}
    assert high == {p: len(o) for p, o in offsets.items()}

    # Every acknowledged offset holds the record acknowledged there, header included.
    records, _ = consume(kafkajs_client, topic, unique("kafkajs-check"), 30, "message")
    read = {(r["partition"], r["offset"]): (r["key"], r["value"], r["headers"]) for r in records}
    assert read == {
        (line["partition"], line["offset"]): (
            line["key"],
            line["value"],
            {"index": line["key"].removeprefix("key-")},
        )
        for line in acked
    }


def test_group_consumers_commit_by_hand_from_each_message_and_each_batch_and_resume(
    kafkajs_client: Kafkajs,
):
    topic, group = unique("kafkajs-group"), unique("kafkajs-group")
    create_topic(kafkajs_client, topic)
    produce(kafkajs_client, topic, 12)
    _, first_high = watermarks(kafkajs_client, topic)

    # eachMessage, autoCommit false: one commitOffsets per record, of its offset plus one.
    records, commits = consume(kafkajs_client, topic, group, 12, "message")
    assert sorted(r["key"] for r in records) == sorted(f"key-{i}" for i in range(12))
    assert [(c["partition"], c["offset"]) for c in commits] == [
        (r["partition"], r["offset"] + 1) for r in records
    ]
    assert last_commits(commits) == first_high
    assert committed_offsets(kafkajs_client, group, topic) == first_high

    # The next member starts at the committed offsets; eachBatch commits once per batch.
    produce(kafkajs_client, topic, 12, first=12)
    _, second_high = watermarks(kafkajs_client, topic)
    records, commits = consume(kafkajs_client, topic, group, 12, "batch")
    assert sorted(r["key"] for r in records) == sorted(f"key-{i}" for i in range(12, 24))
    first_read: dict[int, int] = {}
    for r in records:
        first_read.setdefault(r["partition"], r["offset"])
    assert first_read == {p: first_high[p] for p in first_read}
    assert last_commits(commits) == {p: second_high[p] for p in first_read}
    assert committed_offsets(kafkajs_client, group, topic) == second_high


def test_admin_topics_metadata_configs_and_delete_records(
    kafkajs_client: Kafkajs, cluster: Cluster
):
    topic = unique("kafkajs-admin")
    create_topic(kafkajs_client, topic, "retention.ms=3600000")

    metadata = kafkajs_client.one("metadata", "--topic", topic)
    cluster_id = (cluster.data_dir / "meta.properties").read_text().split("cluster.id=")[1]
    assert metadata["cluster_id"] == cluster_id.split()[0]
    assert metadata["brokers"] == [
        {"node_id": node, "host": HOST, "port": cluster.base_port + node - 1} for node in BROKER_IDS
    ]
    [described] = metadata["topics"]
    assert described["topic"] == topic
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for p in described["partitions"]:
        assert sorted(p["replicas"]) == BROKER_IDS and sorted(p["isr"]) == BROKER_IDS
        assert p["leader"] in p["replicas"] and p["error_code"] == 0
    assert topic in kafkajs_client.one("list-topics")["topics"]

    [configs] = kafkajs_client.lines("describe-configs", "--topic", topic)
    assert (configs["name"], configs["error_code"]) == (topic, 0)
    retention = configs["configs"]["retention.ms"]
    assert (retention["value"], retention["is_default"]) == ("3600000", False)
    assert retention["source"] == DYNAMIC_TOPIC_CONFIG
    cleanup = configs["configs"]["cleanup.policy"]
    assert (cleanup["value"], cleanup["is_default"], cleanup["source"]) == (
        "delete", True, DEFAULT_CONFIG,
    )  # fmt: skip

    produce(kafkajs_client, topic, 20)
    low, high = watermarks(kafkajs_client, topic)
    assert low == {0: 0, 1: 0, 2: 0} and sum(high.values()) == 20
    # The first offset at or after time 0 is each partition's first.
    by_time = kafkajs_client.lines("topic-offsets", "--topic", topic, "--timestamp", "0")
    assert {line["partition"]: line["offset"] for line in by_time} == low

    # deleteTopicRecords: partition 0 before offset 2, partition 1 entirely (-1).
    deleted = kafkajs_client.one("delete-records", "--topic", topic, "--offset", "0=2",
                                 "--offset", "1=-1")  # fmt: skip
    assert deleted["deleted"] == [{"partition": 0, "offset": "2"}, {"partition": 1, "offset": "-1"}]
    assert watermarks(kafkajs_client, topic) == ({0: 2, 1: high[1], 2: 0}, high)
    beyond = kafkajs_client.error("delete-records", "--topic", topic,
                                  "--offset", f"2={high[2] + 1}")  # fmt: skip
    assert beyond["cause"] == "KafkaJSDeleteTopicRecordsError"
    assert beyond["causes"] == [{"partition": 2, "type": "OFFSET_OUT_OF_RANGE"}]
    assert watermarks(kafkajs_client, topic) == ({0: 2, 1: high[1], 2: 0}, high)

    assert kafkajs_client.one("delete-topic", "--topic", topic) == {"topic": topic, "deleted": True}
    eventually(
        f"{topic} gone from the topic list",
        lambda: topic not in kafkajs_client.one("list-topics")["topics"],
    )
    unknown = kafkajs_client.error("metadata", "--topic", topic)
    assert unknown["type"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_admin_alter_configs_replaces_the_topic_overrides(kafkajs_client: Kafkajs):
    """kafkajs' alterConfigs sends the legacy AlterConfigs: the set given replaces the topic's
    overrides, so one left out returns to its default."""
    topic = unique("kafkajs-alter-configs")
    create_topic(kafkajs_client, topic, "retention.ms=3600000", "max.message.bytes=500000")

    def overrides() -> dict[str, str]:
        [described] = kafkajs_client.lines("describe-configs", "--topic", topic)
        configs = described["configs"]
        return {
            key: config["value"]
            for key, config in configs.items()
            if config["source"] == DYNAMIC_TOPIC_CONFIG
        }

    assert overrides() == {"retention.ms": "3600000", "max.message.bytes": "500000"}
    altered = kafkajs_client.one("alter-configs", "--topic", topic,
                                 "--set", "cleanup.policy=compact",
                                 "--set", "segment.ms=600000")  # fmt: skip
    assert altered == {"name": topic, "error_code": 0, "error_message": None}
    assert overrides() == {"cleanup.policy": "compact", "segment.ms": "600000"}
    [described] = kafkajs_client.lines("describe-configs", "--topic", topic)
    assert described["configs"]["retention.ms"]["value"] == RETENTION_MS_DEFAULT
    assert described["configs"]["max.message.bytes"]["value"] == MAX_MESSAGE_BYTES_DEFAULT

    refused = kafkajs_client.error("alter-configs", "--topic", topic, "--set", "retention.ms=soon")
    assert refused["type"] == "INVALID_CONFIG"
    assert overrides() == {"cleanup.policy": "compact", "segment.ms": "600000"}


def test_admin_describes_resets_fetches_and_deletes_group_offsets(kafkajs_client: Kafkajs):
    topic, group = unique("kafkajs-offsets"), unique("kafkajs-offsets")
    create_topic(kafkajs_client, topic)
    produce(kafkajs_client, topic, 12)
    _, high = watermarks(kafkajs_client, topic)
    assert high[0] >= 2  # the keys' partitions are fixed: partition 0 has records to delete

    with kafkajs_client.held_consumer("--topic", topic, "--group", group, "--count", "12",
                                      "--mode", "batch"):  # fmt: skip
        [described] = kafkajs_client.lines("describe-group", "--group", group)
        assert (described["group"], described["error_code"]) == (group, 0)
        assert (described["state"], described["protocol_type"]) == ("Stable", "consumer")
        assert described["protocol"] == "RoundRobinAssigner"  # kafkajs' default assigner
        [member] = described["members"]
        assert (member["client_id"], member["client_host"]) == ("rlog-interop-kafkajs", f"/{HOST}")
        assert member["assigned"] == {topic: [0, 1, 2]}
        assert committed_offsets(kafkajs_client, group, topic) == high
        # Neither deleting the group nor resetting its offsets is allowed while it has a member.
        refused = kafkajs_client.error("delete-group", "--group", group)
        assert refused["causes"] == [{"group": group, "type": "NON_EMPTY_GROUP"}]
        running = kafkajs_client.error("reset-offsets", "--group", group, "--topic", topic,
                                       "--earliest")  # fmt: skip
        assert "must have no running instances, current state: Stable" in running["message"]

    [described] = kafkajs_client.lines("describe-group", "--group", group)
    assert (described["state"], described["members"]) == ("Empty", [])

    kafkajs_client.one("delete-records", "--topic", topic, "--offset", "0=2")
    low, _ = watermarks(kafkajs_client, topic)
    assert low == {0: 2, 1: 0, 2: 0}
    reset = kafkajs_client.one("reset-offsets", "--group", group, "--topic", topic, "--earliest")
    assert reset == {"group": group, "topic": topic, "reset": "earliest"}
    # resetOffsets commits Kafka's "earliest" sentinel, -2, which kafkajs' consumers resolve
    # to the low watermark when they start. (Each resetOffsets joins the group with a consumer
    # of its own: about 8 s, so only this one.)
    assert committed_offsets(kafkajs_client, group, topic) == {0: -2, 1: -2, 2: -2}
    # So the next member reads again from the low watermarks, not from where the last stopped.
    records, commits = consume(kafkajs_client, topic, group, 10, "message")
    assert sorted((r["partition"], r["offset"]) for r in records) == sorted(
        (p, o) for p in (0, 1, 2) for o in range(low[p], high[p])
    )
    assert last_commits(commits) == high
    assert committed_offsets(kafkajs_client, group, topic) == high

    assert kafkajs_client.one("delete-group", "--group", group) == {"group": group, "error_code": 0}
    [described] = kafkajs_client.lines("describe-group", "--group", group)
    assert (described["state"], described["members"]) == ("Dead", [])
    assert committed_offsets(kafkajs_client, group, topic) == {0: -1, 1: -1, 2: -1}
    gone = kafkajs_client.error("delete-group", "--group", group)
    assert gone["causes"] == [{"group": group, "type": "GROUP_ID_NOT_FOUND"}]
