"""Log compaction on a real cluster: cleanup.policy=compact topics created and read with
confluent-kafka keep the latest value of each key at its original offset, shrink on disk, and lose
their tombstones once delete.retention.ms has passed.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from support import clients, replication
from support.cluster import Cluster
from support.replication import wait_for

pytestmark = pytest.mark.integration

# A cleaner pass every 200 ms over logs flushed every 100 ms (only flushed segments are cleaned).
CLEANER_KEYS = """
"log.cleaner.backoff.ms" = 200
"log.flush.scheduler.interval.ms" = 100
"""
CONFIG = "[broker]" + CLEANER_KEYS
CLEANING_WAIT_S = 15.0

Produced = list[tuple[int, bytes, bytes | None]]  # (offset, key, value) as acknowledged


def produce(cluster: Cluster, topic: str, records: list[tuple[bytes, bytes | None]]) -> Produced:
    """Produce in order to partition 0 in batches of ten; the offsets the broker assigned."""
    acknowledged: Produced = []
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, message) -> None:
        if error is not None:
            errors.append(error)
        else:
            acknowledged.append((message.offset(), message.key(), message.value()))

    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "linger.ms": 2, "batch.num.messages": 10}
    )
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors
    return sorted(acknowledged)


def consume_all(cluster: Cluster, topic: str, last_offset: int) -> Produced:
    """Every record from the beginning up to `last_offset` (never compacted: the active segment)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"rlog-test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    received: Produced = []
    deadline = time.monotonic() + 15
    try:
        while not received or received[-1][0] < last_offset:
            assert time.monotonic() < deadline, f"read only up to {received[-1:]}"
            for record in consumer.consume(num_messages=1000, timeout=0.5):
                assert record.error() is None, record.error()
                received.append((record.offset(), record.key(), record.value()))
    finally:
        consumer.close()
    return received


def cleaned_up_to(cluster: Cluster, topic: str, broker: int = 1) -> int:
    """The end of the last cleaning pass over `topic`-0, from the broker's log (-1: none yet)."""
    text = (cluster.data_dir / "logs" / f"broker-{broker}.log").read_text(errors="replace")
    ends = re.findall(rf"cleaned {re.escape(topic)}-0 up to offset (\d+)", text)
    return int(ends[-1]) if ends else -1


def log_bytes(cluster: Cluster, topic: str) -> int:
    partition_dir = cluster.data_dir / "broker-1" / f"{topic}-0"
    return sum(path.stat().st_size for path in Path(partition_dir).glob("*.log"))


def compacted_topic(cluster: Cluster, **config: str) -> str:
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    clients.create_topic(
        cluster.bootstrap,
        topic,
        config={
            "cleanup.policy": "compact",
            "segment.bytes": "4096",
            "min.cleanable.dirty.ratio": "0.01",
            **config,
        },
    )
    return topic


def test_compaction_keeps_the_latest_value_per_key_at_its_offset(cluster_factory) -> None:
    cluster = cluster_factory(config_text=CONFIG)
    topic = compacted_topic(cluster)
    records = [(b"key-%d" % (i % 5), b"value-%05d-" % i + b"x" * 40) for i in range(3000)]
    produced = produce(cluster, topic, records)
    assert [offset for offset, _, _ in produced] == list(range(len(records)))
    last_offset = produced[-1][0]

    # The pass that follows the last flush cleans everything below the active segment.
    wait_for(
        "a cleaning pass",
        lambda: cleaned_up_to(cluster, topic) > last_offset - 200,
        CLEANING_WAIT_S,
    )
    time.sleep(0.5)  # any pass still running finishes
    end = cleaned_up_to(cluster, topic)
    read = consume_all(cluster, topic, last_offset)

    assert set(read) <= set(produced)  # every survivor at its original offset
    cleaned = [record for record in read if record[0] < end]
    latest_below_end = {
        key: (offset, key, value) for offset, key, value in produced if offset < end
    }
    assert sorted(cleaned) == sorted(latest_below_end.values())  # one, the latest, per key
    assert [r for r in read if r[0] >= end] == [r for r in produced if r[0] >= end]
    raw_bytes = sum(len(key) + len(value or b"") for _, key, value in produced)
    assert log_bytes(cluster, topic) < raw_bytes / 4, "the log should have shrunk on disk"
    # The other clients read past the cleaned stretches (empty batches where records went).
    for consume in (clients.kafka_python_consume, clients.aiokafka_consume):
        others = consume(cluster.bootstrap, topic, [0], len(read))
        assert [(m.offset, m.key, m.value) for m in others] == read, consume.__name__


def test_a_tombstone_disappears_after_delete_retention(cluster_factory) -> None:
    cluster = cluster_factory(config_text=CONFIG)
    topic = compacted_topic(cluster, **{"delete.retention.ms": "4000"})
    filler = [(b"filler-%d" % (i % 3), b"f" * 60) for i in range(300)]  # rolls a few segments
    produced = produce(cluster, topic, [(b"gone", b"v1"), (b"gone", None), *filler])
    tombstone_offset = produced[1][0]

    wait_for(
        "a cleaning pass",
        lambda: cleaned_up_to(cluster, topic) > tombstone_offset,
        CLEANING_WAIT_S,
    )
    read = consume_all(cluster, topic, produced[-1][0])
    assert [r for r in read if r[1] == b"gone"] == [(tombstone_offset, b"gone", None)]

    time.sleep(4.5)  # past delete.retention.ms; new dirty data starts another pass
    before = cleaned_up_to(cluster, topic)
    produced = produce(cluster, topic, filler)
    wait_for(
        "another cleaning pass", lambda: cleaned_up_to(cluster, topic) > before, CLEANING_WAIT_S
    )
    read = consume_all(cluster, topic, produced[-1][0])
    assert not [r for r in read if r[1] == b"gone"]
    assert read[-1] == produced[-1]


def test_a_follower_paused_while_the_leader_compacts_catches_up(cluster_factory) -> None:
    """The leader cleans only below every replica's LEO, so a lagging follower's fetch position
    is never inside a batch the cleaner rewrote; it rejoins the ISR with the leader's log end.
    """
    cluster = cluster_factory(brokers=3, config_text=replication.CONFIG + CLEANER_KEYS)
    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    replication.create_replicated_topic(
        cluster,
        topic,
        {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"},
    )
    leader = replication.partition_state(cluster, topic)["leader"]
    paused = next(b for b in (1, 2, 3) if b != leader)
    records = [(b"key-%d" % (i % 5), b"value-%05d-" % i + b"x" * 40) for i in range(1500)]
    produce(cluster, topic, records)
    cluster.chaos("pause", f"broker-{paused}")
    # acks=all returns once the ISR has shrunk without the paused follower (3 s); the leader
    # compacts meanwhile, up to that follower's LEO.
    produced = produce(cluster, topic, records)
    wait_for(
        "a cleaning pass on the leader",
        lambda: cleaned_up_to(cluster, topic, leader) > 0,
        CLEANING_WAIT_S,
    )
    cluster.chaos("resume", f"broker-{paused}")
    replication.wait_for(
        "the ISR to be full again",
        lambda: replication.partition_state(cluster, topic)["isr"] == [1, 2, 3],
        timeout_s=30,
    )
    replication.wait_for(
        "every replica at the leader's log end",
        lambda: set(replication.log_end_offsets(cluster, topic).values()) == {produced[-1][0] + 1},
    )
    read = consume_all(cluster, topic, produced[-1][0])
    latest = {key: value for _, key, value in produced}
    assert {key: value for _, key, value in read} == latest
