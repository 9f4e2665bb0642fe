"""ListOffsets v7-10 (max timestamp, earliest local, latest tiered) and DescribeProducers v0
against a real 3-broker rlog cluster, asked by unmodified clients: confluent-kafka's
`AdminClient.list_offsets`, kafka-python's `list_partition_offsets` and `describe_producers`,
Kafka's own GetOffsetShell and kafka-transactions describe-producers (when the tools can be
fetched), and `rlog txn producers`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPartition
from kafka.admin import OffsetSpec as KafkaOffsetSpec
from kafka.errors import NotLeaderForPartitionError

from rlog.core.protocol.apis import ApiKey
from rlog.daemon.wire import BlockingKafkaClient
from support.cli_runner import ok, rlog
from support.cluster import HOST, Cluster, start_cluster
from support.kafka_tools import JVM_OPTIONS, KafkaTools, fetch
from support.replication import CONFIG

pytestmark = pytest.mark.integration

WAIT_S = 20.0
# Ten minutes ahead of each test (see fresh_base_time): transaction markers carry the broker's
# clock, and count for the max timestamp too (as in Kafka), so the records' times must stay
# above theirs however long the suite ran before.
BASE_MS = (int(time.time()) + 600) * 1000
# Timestamps out of order across and inside batches; the largest (BASE_MS + 50) first at 3.
TIMES = [10, 20, 5, 50, 30, 50, 40]


@pytest.fixture(autouse=True)
def fresh_base_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "BASE_MS", (int(time.time()) + 600) * 1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("offsets-producers")
    config = root / "rlog.toml"
    config.write_text(CONFIG + '"transaction.state.log.replication.factor" = 3\n')
    cluster = start_cluster(root / "data", brokers=3, config=config)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def kafka_tools() -> KafkaTools:
    return KafkaTools(fetch())


def new_topic(cluster: Cluster, partitions: int = 1, replicas: int = 3) -> str:
    name = f"op-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"min.insync.replicas": str(min(replicas, 2))}
    futures = admin.create_topics([NewTopic(name, partitions, replicas, config=config)])
    futures[name].result(timeout=15)
    return name


def wait_for(what: str, probe: Callable[[], Any], check: Callable[[Any], bool]) -> Any:
    deadline = time.monotonic() + WAIT_S
    seen = probe()
    while not check(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last seen: {seen!r}")
        time.sleep(0.2)
        seen = probe()
    return seen


def produce(producer: Producer, topic: str, offsets_ms: list[int]) -> None:
    """One record per timestamp (BASE_MS + each), to partition 0, in one flush."""
    for i, offset_ms in enumerate(offsets_ms):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=BASE_MS + offset_ms)
    assert producer.flush(30) == 0


def idempotent_producer(cluster: Cluster) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                     "linger.ms": 20})  # fmt: skip


def confluent_max(cluster: Cluster, topic: str, **options: Any) -> dict[int, tuple[int, int]]:
    """(offset, timestamp) of each partition's max-timestamp record, by confluent-kafka."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wanted = {ConfluentPartition(topic, p): OffsetSpec.max_timestamp() for p in (0, 1)}
    futures = admin.list_offsets(wanted, **options)
    answers = {tp.partition: future.result(timeout=15) for tp, future in futures.items()}
    return {p: (a.offset, a.timestamp) for p, a in answers.items()}


def kafka_python(cluster: Cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10_000)


def test_the_brokers_advertise_list_offsets_v10_and_describe_producers_v0(cluster: Cluster) -> None:
    with BlockingKafkaClient(HOST, cluster.base_port) as client:
        body = client.request(ApiKey.API_VERSIONS, 3, {})
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert ranges[ApiKey.LIST_OFFSETS] == (1, 10)
    assert ranges[ApiKey.DESCRIBE_PRODUCERS] == (0, 0)


def test_confluent_kafka_lists_the_max_timestamp(cluster: Cluster) -> None:
    topic = new_topic(cluster, partitions=2)
    producer = idempotent_producer(cluster)
    produce(producer, topic, TIMES)
    produce(producer, topic, [45, 1])  # later batches with earlier times
    expected = {0: (3, BASE_MS + 50), 1: (-1, -1)}  # partition 1 is empty
    assert confluent_max(cluster, topic) == expected
    produce(producer, topic, [2, 50])  # the same largest time, later: the first still wins
    assert confluent_max(cluster, topic) == expected
    produce(producer, topic, [51])
    assert confluent_max(cluster, topic)[0] == (len(TIMES) + 4, BASE_MS + 51)


def test_read_committed_does_not_see_a_max_timestamp_in_an_open_transaction(
    cluster: Cluster,
) -> None:
    topic = new_topic(cluster, partitions=2)
    produce(idempotent_producer(cluster), topic, [10, 20])
    transactional = Producer({"bootstrap.servers": cluster.bootstrap,
                              "transactional.id": f"tx-{topic}"})  # fmt: skip
    transactional.init_transactions(30)
    transactional.begin_transaction()
    produce(transactional, topic, [99])  # offset 2, above the LSO while open
    committed = {"isolation_level": IsolationLevel.READ_COMMITTED}
    assert confluent_max(cluster, topic)[0] == (2, BASE_MS + 99)
    assert confluent_max(cluster, topic, **committed)[0] == (-1, -1)
    transactional.commit_transaction(30)
    wait_for("the committed max", lambda: confluent_max(cluster, topic, **committed)[0],
             lambda seen: seen == (2, BASE_MS + 99))  # fmt: skip


def test_kafka_python_lists_every_special_offset(cluster: Cluster) -> None:
    topic = new_topic(cluster)
    produce(idempotent_producer(cluster), topic, TIMES)
    admin = kafka_python(cluster)
    try:
        tp = KafkaPartition(topic, 0)
        answers = {
            spec: admin.list_partition_offsets({tp: spec})[tp]
            for spec in (
                KafkaOffsetSpec.MAX_TIMESTAMP,
                KafkaOffsetSpec.EARLIEST_LOCAL,
                KafkaOffsetSpec.LATEST_TIERED,
                KafkaOffsetSpec.EARLIEST,
                KafkaOffsetSpec.LATEST,
            )
        }
    finally:
        admin.close()
    seen = {spec: (a.offset, a.timestamp, a.leader_epoch) for spec, a in answers.items()}
    assert seen == {
        KafkaOffsetSpec.MAX_TIMESTAMP: (3, BASE_MS + 50, 0),
        KafkaOffsetSpec.EARLIEST_LOCAL: (0, -1, 0),
        KafkaOffsetSpec.LATEST_TIERED: (-1, -1, None),  # no tiered storage: nothing tiered
        KafkaOffsetSpec.EARLIEST: (0, -1, 0),
        KafkaOffsetSpec.LATEST: (len(TIMES), -1, 0),
    }


def describe_on(cluster: Cluster, topic: str, broker_id: int | None = None) -> list[Any]:
    """kafka-python's describe_producers of partition 0 (at the leader, or at `broker_id`),
    sorted by producer id."""
    admin = kafka_python(cluster)
    try:
        tp = KafkaPartition(topic, 0)
        states = admin.describe_producers([tp], broker_id=broker_id)[tp].active_producers
    finally:
        admin.close()
    return sorted(states, key=lambda state: state.producer_id)


def test_describe_producers_shows_idempotent_and_transactional_producers(
    cluster: Cluster,
) -> None:
    topic = new_topic(cluster)
    assert describe_on(cluster, topic) == []
    idempotent = idempotent_producer(cluster)
    produce(idempotent, topic, [1, 2, 3])  # offsets 0-2, sequences 0-2
    transactional = Producer({"bootstrap.servers": cluster.bootstrap,
                              "transactional.id": f"tx-{topic}"})  # fmt: skip
    transactional.init_transactions(30)
    transactional.begin_transaction()
    produce(transactional, topic, [7, 8])  # offsets 3-4: its transaction opens at 3
    # Producer ids come from different brokers' blocks: tell the two apart by what they did.
    by_txn = {s.current_transaction_start_offset >= 0: s for s in describe_on(cluster, topic)}
    idempotent_state, open_txn = by_txn[False], by_txn[True]
    assert (idempotent_state.last_sequence, idempotent_state.last_timestamp) == (2, BASE_MS + 3)
    assert idempotent_state.current_transaction_start_offset == -1
    assert (open_txn.last_sequence, open_txn.current_transaction_start_offset) == (1, 3)
    assert open_txn.coordinator_epoch == -1  # no marker yet
    # Kafka lets every replica answer from its own producer state (--broker-id).
    both = sorted([idempotent_state, open_txn], key=lambda state: state.producer_id)
    for broker_id in (1, 2, 3):
        wait_for(f"broker {broker_id}'s producer state",
                 lambda b=broker_id: describe_on(cluster, topic, b),
                 lambda seen: seen == both)  # fmt: skip
    transactional.commit_transaction(30)

    def transactional_state() -> Any:
        return next(s for s in describe_on(cluster, topic) if s.producer_id == open_txn.producer_id)

    closed = wait_for("the commit marker", transactional_state,
                      lambda seen: seen.current_transaction_start_offset == -1)  # fmt: skip
    assert closed.coordinator_epoch >= 0 and closed.producer_epoch == open_txn.producer_epoch
    # As a table, by rlog's own client.
    documents = json.loads(ok(rlog("txn", "producers", topic, "--json",
                                   data_dir=cluster.data_dir)).out)  # fmt: skip
    assert [(d["partition"], d["producer_id"], d["current_transaction_start_offset"])
            for d in documents] == [(0, state.producer_id, None) for state in both]  # fmt: skip


def test_describe_producers_at_a_broker_without_the_partition(cluster: Cluster) -> None:
    topic = new_topic(cluster, replicas=1)
    produce(idempotent_producer(cluster), topic, [1])
    admin = kafka_python(cluster)
    try:
        leader = wait_for("a leader", lambda: admin.describe_topics([topic])[0]["partitions"][0],
                          lambda p: p["leader_id"] >= 0)["leader_id"]  # fmt: skip
    finally:
        admin.close()
    elsewhere = next(b for b in (1, 2, 3) if b != leader)
    with pytest.raises(NotLeaderForPartitionError):
        describe_on(cluster, topic, elsewhere)
    refused = rlog("txn", "producers", topic, "--broker-id", str(elsewhere),
                   data_dir=cluster.data_dir)  # fmt: skip
    assert refused.code == 1 and "NOT_LEADER_OR_FOLLOWER" in refused.err


def kafka_tool(tools: KafkaTools, main_class: str, *args: str) -> str:
    """A Kafka tool by main class (some have no entry in support.kafka_tools.TOOLS)."""
    java = shutil.which("java")
    assert java is not None
    command = [java, *JVM_OPTIONS, "-cp", tools.classpath, main_class, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, f"{main_class} {args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_kafka_tools_get_offsets_and_describe_producers(
    cluster: Cluster, kafka_tools: KafkaTools, tmp_path: Path
) -> None:
    topic = new_topic(cluster, partitions=2)
    produce(idempotent_producer(cluster), topic, TIMES)
    boot = ("--bootstrap-server", cluster.bootstrap)
    by_time = {
        time_spec: kafka_tools.ok("kafka-get-offsets", *boot, "--topic", topic, "--time", time_spec)
        for time_spec in ("-3", "-4", "-5", str(BASE_MS + 25))
    }
    # GetOffsetShell leaves out partitions without an offset (-1).
    assert by_time == {
        "-3": f"{topic}:0:3\n",
        "-4": f"{topic}:0:0\n{topic}:1:0\n",
        "-5": "",
        str(BASE_MS + 25): f"{topic}:0:3\n",
    }
    out = kafka_tool(kafka_tools, "org.apache.kafka.tools.TransactionsCommand", *boot,
                     "describe-producers", "--topic", topic, "--partition", "0",
                     "--broker-id", "2")  # fmt: skip
    header, row = (line.split() for line in out.strip().splitlines())
    assert header[:2] == ["ProducerId", "ProducerEpoch"]
    assert row[3:] == [str(len(TIMES) - 1), str(BASE_MS + 50), "None"]
