"""DeleteRecords against 3 real brokers: confluent-kafka's and kafka-python's delete_records and
`rlog topic trim` move the log start on every replica; consumers then start at it, and it
stays there across a restart of the whole cluster."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_END, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPythonPartition

from rlog.core.protocol.apis import ApiKey
from rlog.daemon.wire import BlockingKafkaClient
from support.cli_runner import ok, rlog
from support.clients import Message, confluent_consume, confluent_produce
from support.cluster import Cluster, start_cluster
from support.replication import CONFIG, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("delete-records")
    config = root / "rlog.toml"
    config.write_text(CONFIG)
    cluster = start_cluster(root / "data", brokers=3, config=config)
    yield cluster
    cluster.stop()


def topic_with(cluster: Cluster, records: int, partitions: int = 1, **config: str) -> str:
    name = f"trim-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(name, num_partitions=partitions, replication_factor=3, config=config)
    admin.create_topics([new])[name].result(timeout=30)
    messages = [Message(b"k%d" % i, b"v%d" % i, (), i % partitions, -1) for i in range(records)]
    confluent_produce(cluster.bootstrap, name, messages, acks="all")
    return name


def log_starts(cluster: Cluster, topic: str, partition: int) -> dict[int, int]:
    """Each broker's log start of the partition: ListOffsets earliest asked of every broker
    as a tool does (replica id -2), which any replica answers from its own log."""
    found = {}
    for broker in cluster.status()["brokers"]:
        with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=3) as client:
            spec = {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -2}
            body = client.request(
                ApiKey.LIST_OFFSETS,
                4,
                {"replica_id": -2, "isolation_level": 0,
                 "topics": [{"name": topic, "partitions": [spec]}]},
            )  # fmt: skip
        found[broker["id"]] = body["topics"][0]["partitions"][0]["offset"]
    return found


def test_confluent_delete_records_moves_the_log_start_that_consumers_see(cluster: Cluster):
    topic = topic_with(cluster, 20)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 12)], operation_timeout=30)
    (deleted,) = [f.result(timeout=40) for f in futures.values()]
    assert deleted.low_watermark == 12
    assert log_starts(cluster, topic, 0) == {1: 12, 2: 12, 3: 12}  # it was answered after all
    consumed = confluent_consume(cluster.bootstrap, topic, [0], 8)
    assert [m.offset for m in consumed] == list(range(12, 20))
    assert [m.value for m in consumed] == [b"v%d" % i for i in range(12, 20)]

    past_the_end = admin.delete_records([TopicPartition(topic, 0, 21)], operation_timeout=30)
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        next(iter(past_the_end.values())).result(timeout=40)
    everything = admin.delete_records([TopicPartition(topic, 0, OFFSET_END)])
    assert next(iter(everything.values())).result(timeout=40).low_watermark == 20


def test_kafka_python_delete_records_and_a_compacted_topic_refuses(cluster: Cluster):
    topic = topic_with(cluster, 10)
    compacted = topic_with(cluster, 10, **{"cleanup.policy": "compact"})
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        answer = admin.delete_records({KafkaPythonPartition(topic, 0): 4})
        assert answer[KafkaPythonPartition(topic, 0)]["low_watermark"] == 4
        with pytest.raises(Exception, match="PolicyViolation"):
            admin.delete_records({KafkaPythonPartition(compacted, 0): 4})
    finally:
        admin.close()


def test_rlog_topic_trim_by_offset_time_and_end_and_the_log_start_survives_a_restart(
    cluster: Cluster,
):
    topic = topic_with(cluster, 30, partitions=3)
    data_dir = ["--data-dir", str(cluster.data_dir)]
    out = ok(rlog("topic", "trim", topic, "--before", "4", "--json", *data_dir)).out
    assert json.loads(out) == {
        "topic": topic,
        "partitions": [{"partition": p, "log_start_offset": 4} for p in range(3)],
    }
    later = ok(rlog("topic", "trim", topic, "-p", "1", "--before", "end", *data_dir)).out
    assert later.strip() == f"{topic}-1: log start offset now 10"
    by_time = ok(rlog("topic", "trim", topic, "-p", "2", "--before", "@-1h", *data_dir)).out
    assert by_time.strip() == f"{topic}-2: log start offset now 4"  # every record is newer

    refused = rlog("topic", "trim", topic, "--before", "99", "-p", "0", *data_dir)
    assert refused.code == 1
    assert "OFFSET_OUT_OF_RANGE" in refused.out
    bad = rlog("topic", "trim", topic, "--before", "yesterday", *data_dir)
    assert bad.code != 0 and "--before" in bad.err and "Traceback" not in bad.err
    missing = rlog("topic", "trim", topic, "--before", "1", "-p", "7", *data_dir)
    assert missing.code != 0 and "no partition 7" in missing.err

    for broker in (1, 2, 3):
        cluster.chaos("restart", f"broker-{broker}")
    cluster.wait_until_running(60)
    for partition, start in ((0, 4), (1, 10), (2, 4)):
        wait_for(
            f"partition {partition}'s log start {start} on every replica",
            lambda p=partition, s=start: set(log_starts(cluster, topic, p).values()) == {s},
        )
    consumed = confluent_consume(cluster.bootstrap, topic, [0, 1, 2], 12)
    starts: dict[int, int] = {}
    for message in consumed:
        starts.setdefault(message.partition, message.offset)
    assert starts == {0: 4, 2: 4}  # partition 1 was trimmed to its end: nothing to read
