"""Broker behaviour a Kafka user relies on, through confluent-kafka against a real broker."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from support import clients
from support.clients import Message

pytestmark = pytest.mark.integration


def consumer(bootstrap: str, **extra: object) -> Consumer:
    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "rlog-test", "enable.auto.commit": False,
         **extra}
    )  # fmt: skip


def test_list_offsets_earliest_latest_and_by_timestamp(cluster) -> None:
    clients.create_topic(cluster.bootstrap, "times")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    for i in range(10):
        producer.produce("times", value=b"%d" % i, partition=0, timestamp=base + i * 1000)
        producer.flush(10)  # one batch per record, so timestamps land in separate batches
    reader = consumer(cluster.bootstrap)
    try:
        assert reader.get_watermark_offsets(TopicPartition("times", 0), 10) == (0, 10)
        wanted = [TopicPartition("times", 0, base + 3500)]
        assert reader.offsets_for_times(wanted, 10)[0].offset == 4  # first with ts >= target
        wanted = [TopicPartition("times", 0, base + 3000)]
        assert reader.offsets_for_times(wanted, 10)[0].offset == 3
        later = [TopicPartition("times", 0, base + 60_000)]
        assert reader.offsets_for_times(later, 10)[0].offset == -1  # none that late: the end
    finally:
        reader.close()


def test_acks_zero_writes_without_answers(cluster) -> None:
    clients.create_topic(cluster.bootstrap, "fire-and-forget")
    sent = [Message(None, b"%d" % i, (), 0, -1) for i in range(200)]
    clients.confluent_produce(cluster.bootstrap, "fire-and-forget", sent, acks="0")
    read = clients.confluent_consume(cluster.bootstrap, "fire-and-forget", [0], 200)
    assert [m.value for m in read] == [m.value for m in sent]


def test_a_waiting_fetch_is_answered_as_soon_as_data_arrives(cluster) -> None:
    clients.create_topic(cluster.bootstrap, "long-poll")
    reader = consumer(cluster.bootstrap, **{"fetch.wait.max.ms": 5000})
    reader.assign([TopicPartition("long-poll", 0, OFFSET_BEGINNING)])
    try:
        assert reader.poll(1.0) is None  # nothing yet: the broker holds the fetch
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
        sent_at = time.monotonic()
        producer.produce("long-poll", value=b"now", partition=0)
        producer.flush(10)
        message = reader.poll(10)
        latency_s = time.monotonic() - sent_at
        assert message is not None and message.value() == b"now"
        # Woken by the append, not by fetch.wait.max.ms running out.
        assert latency_s < 2.5, f"fetch answered after {latency_s:.2f} s"
    finally:
        reader.close()


def test_many_partitions_and_auto_created_topics(cluster) -> None:
    clients.create_topic(cluster.bootstrap, "wide", partitions=64)
    sent = [Message(None, b"%d" % i, (), i % 64, -1) for i in range(640)]
    clients.confluent_produce(cluster.bootstrap, "wide", sent)
    read = clients.confluent_consume(cluster.bootstrap, "wide", list(range(64)), 640)
    assert sorted(int(m.value) for m in read) == list(range(640))
    # A producer naming an unknown topic creates it through Metadata (auto.create.topics.enable).
    clients.confluent_produce(cluster.bootstrap, "made-on-demand", [Message(None, b"x", (), 0, -1)])
    metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10)
    assert len(metadata.topics["made-on-demand"].partitions) == 1


def test_topic_admin_errors_are_the_protocols(cluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("admin", 2, 1, config={"retention.ms": "60000"})])[
        "admin"
    ].result(10)
    errors = {
        "again": (NewTopic("admin", 1, 1), KafkaError.TOPIC_ALREADY_EXISTS),
        "rf": (NewTopic("rf3", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        "bad-name": (NewTopic("no/slash", 1, 1), KafkaError.TOPIC_EXCEPTION),
        "bad-config": (
            NewTopic("cfg", 1, 1, config={"retention.ms": "soon"}),
            KafkaError.INVALID_CONFIG,
        ),
    }
    for topic, code in errors.values():
        with pytest.raises(Exception) as refused:
            admin.create_topics([topic])[topic.topic].result(10)
        assert refused.value.args[0].code() == code, refused.value
    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "60000"
    assert configs["segment.bytes"].value == str(1024**3)
    admin.delete_topics(["admin"])["admin"].result(10)
    assert "admin" not in admin.list_topics(timeout=10).topics
