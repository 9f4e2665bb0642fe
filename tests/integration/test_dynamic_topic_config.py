"""Topic configs changed on a running cluster (kafka-configs --alter, IncrementalAlterConfigs):
the controller records the change in its metadata log and every broker applies it at once,
without a restart."""

from __future__ import annotations

import uuid

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from support.cluster import Cluster
from support.replication import CONFIG, create_replicated_topic, partition_state, wait_for


def alter_topic(cluster: Cluster, topic: str, key: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=15)


def described(cluster: Cluster, broker: dict, topic: str, key: str) -> str:
    admin = AdminClient({"bootstrap.servers": f"{broker['host']}:{broker['port']}"})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return future.result(timeout=15)[key].value


def produce_one(cluster: Cluster, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0}
    )
    producer.produce(topic, value=b"x", on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(15) == 0
    return errors[0]


def test_min_insync_and_retention_change_on_every_broker_without_a_restart(
    cluster_factory,
) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"dynamic-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    alter_topic(cluster, topic, "retention.ms", "3600000")
    for broker in cluster.status()["brokers"]:
        assert described(cluster, broker, topic, "retention.ms") == "3600000"

    leader = partition_state(cluster, topic)["leader"]
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.chaos("terminate", f"broker-{follower}")
    wait_for("the ISR to shrink", lambda: len(partition_state(cluster, topic)["isr"]) == 2)
    assert produce_one(cluster, topic) is None, "2 in sync meets min.insync.replicas=2"
    alter_topic(cluster, topic, "min.insync.replicas", "3")
    error = produce_one(cluster, topic)
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS
    alter_topic(cluster, topic, "min.insync.replicas", "2")
    assert produce_one(cluster, topic) is None
