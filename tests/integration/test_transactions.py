"""Transactions against a real 3-broker cluster, with real Kafka clients: what a read_committed
consumer sees of committed, aborted, open and timed-out transactions; zombie fencing; and an
exactly-once consume-transform-produce loop that survives SIGKILLs of the output partition's
leader and of the transaction coordinator."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from rlog.core.protocol.apis import ApiKey
from rlog.daemon.wire import BlockingKafkaClient
from rlog.kafka_calls import CallTimedOut, call_with_deadline
from support.cluster import Cluster, start_cluster
from support.replication import CONFIG, partition_state, wait_for

pytestmark = pytest.mark.integration

# librdkafka hands these to committed() without retrying: the group coordinator is moving.
COORDINATOR_MOVING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)

TXN_CONFIG = (
    CONFIG
    + """"offsets.topic.num.partitions" = 4
"transaction.state.log.num.partitions" = 4
"group.initial.rebalance.delay.ms" = 0
"group.min.session.timeout.ms" = 1000
"transaction.abort.timed.out.transaction.cleanup.interval.ms" = 500
"""
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("transactions")
    config = Path(directory) / "rlog.toml"
    config.write_text(TXN_CONFIG)
    started = start_cluster(directory / "data", brokers=3, config=config)
    try:
        yield started
    finally:
        started.stop()


def _topic(cluster: Cluster, partitions: int = 3) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(timeout=15)
    for partition in range(partitions):
        wait_for(
            f"{name}-{partition} to have a leader",
            lambda p=partition: partition_state(cluster, name, p)["leader"] >= 0,
        )
    return name


def _producer(cluster: Cluster, transactional_id: str, **config: object) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **config,
        }
    )
    producer.init_transactions(30)
    return producer


def _write(producer: Producer, topic: str, values: list[str], *, commit: bool) -> None:
    producer.begin_transaction()
    for index, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=index % 3)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)
        producer.abort_transaction(30)


def _end_offsets(cluster: Cluster, topic: str, partitions: int, *, committed: bool) -> list[int]:
    """ListOffsets latest per partition: the HW, or with `committed` the LSO."""
    offsets = []
    for partition in range(partitions):
        leader = partition_state(cluster, topic, partition)["leader"]
        (broker,) = [b for b in cluster.status()["brokers"] if b["id"] == leader]
        with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=5) as client:
            body = client.request(
                ApiKey.LIST_OFFSETS,
                5,
                {
                    "replica_id": -1,
                    "isolation_level": 1 if committed else 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": partition,
                                    "current_leader_epoch": -1,
                                    "timestamp": -1,
                                }
                            ],
                        }
                    ],
                },
            )
        offsets.append(body["topics"][0]["partitions"][0]["offset"])
    return offsets


def _read_confluent(cluster: Cluster, topic: str, isolation: str, partitions: int = 3) -> list[str]:
    """Every record readable at this isolation level, up to each partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise KafkaException(message.error())
            at_end.discard(message.partition())
            values.append(message.value().decode())
    finally:
        consumer.close()
    assert len(at_end) == partitions, "the reader did not reach the end of every partition"
    return values


def _read_kafka_python(cluster: Cluster, topic: str, count: int) -> list[str]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    assigned = [KpTopicPartition(topic, p) for p in range(3)]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    values: list[str] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                values += [r.value.decode() for r in records]
            if len(values) >= count and all(
                consumer.position(tp) >= end for tp, end in consumer.end_offsets(assigned).items()
            ):
                break
    finally:
        consumer.close()
    return values


def _read_aiokafka(cluster: Cluster, topic: str, count: int) -> list[str]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    async def run() -> list[str]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cluster.bootstrap,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        await consumer.start()
        values: list[str] = []
        try:
            assigned = [AioTopicPartition(topic, p) for p in range(3)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=300)
                for records in batches.values():
                    values += [r.value.decode() for r in records]
                ends = await consumer.end_offsets(assigned)
                positions = [await consumer.position(tp) for tp in assigned]
                if len(values) >= count and all(
                    pos >= ends[tp] for pos, tp in zip(positions, assigned, strict=True)
                ):
                    break
        finally:
            await consumer.stop()
        return values

    return asyncio.run(asyncio.wait_for(run(), 60))


def test_read_committed_sees_only_committed_transactions_with_every_client(
    cluster: Cluster,
) -> None:
    topic = _topic(cluster)
    producer = _producer(cluster, f"tx-{uuid.uuid4().hex[:6]}")
    _write(producer, topic, [f"c1-{i}" for i in range(30)], commit=True)
    _write(producer, topic, [f"a-{i}" for i in range(30)], commit=False)
    _write(producer, topic, [f"c2-{i}" for i in range(30)], commit=True)
    producer.flush(10)
    committed = sorted([f"c1-{i}" for i in range(30)] + [f"c2-{i}" for i in range(30)])
    aborted = sorted(f"a-{i}" for i in range(30))
    assert sorted(_read_confluent(cluster, topic, "read_committed")) == committed
    assert sorted(_read_confluent(cluster, topic, "read_uncommitted")) == sorted(
        committed + aborted
    )
    assert sorted(_read_kafka_python(cluster, topic, len(committed))) == committed
    assert sorted(_read_aiokafka(cluster, topic, len(committed))) == committed
    # With nothing open, the LSO is the HW: markers are on every replica.
    assert _end_offsets(cluster, topic, 3, committed=True) == _end_offsets(
        cluster, topic, 3, committed=False
    )


def test_kafka_python_and_aiokafka_transactional_producers_commit_and_abort(
    cluster: Cluster,
) -> None:
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    topic = _topic(cluster)
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}"
    )
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(5):
        producer.send(topic, value=f"kp-commit-{i}".encode(), partition=i % 3)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, value=b"kp-abort", partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.close(timeout=10)

    async def aiokafka_writes() -> None:
        aio = AIOKafkaProducer(
            bootstrap_servers=cluster.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:6]}"
        )
        await aio.start()
        try:
            async with aio.transaction():
                for i in range(5):
                    await aio.send(topic, value=f"aio-commit-{i}".encode(), partition=i % 3)
            await aio.begin_transaction()
            await aio.send_and_wait(topic, value=b"aio-abort", partition=1)
            await aio.abort_transaction()
        finally:
            await aio.stop()

    asyncio.run(asyncio.wait_for(aiokafka_writes(), 60))
    seen = sorted(_read_confluent(cluster, topic, "read_committed"))
    assert seen == sorted(
        [f"kp-commit-{i}" for i in range(5)] + [f"aio-commit-{i}" for i in range(5)]
    )
    assert "kp-abort" in _read_confluent(cluster, topic, "read_uncommitted")


def test_a_zombie_producer_is_fenced_and_its_records_never_read(cluster: Cluster) -> None:
    topic = _topic(cluster)
    transactional_id = f"zombie-{uuid.uuid4().hex[:6]}"
    zombie = _producer(cluster, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(10)
    successor = _producer(cluster, transactional_id)  # same id: bumps the epoch, aborts
    _write(successor, topic, ["successor"], commit=True)
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(10)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert _read_confluent(cluster, topic, "read_committed") == ["successor"]


def test_an_open_transaction_holds_back_read_committed_until_it_times_out(
    cluster: Cluster,
) -> None:
    topic = _topic(cluster, partitions=1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(10)
    stalled = _producer(
        cluster, f"stall-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 3000}
    )
    stalled.begin_transaction()
    stalled.produce(topic, value=b"open", partition=0)
    stalled.flush(10)
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(10)
    # The open transaction starts at offset 1: read_committed stops there, read_uncommitted not.
    assert _end_offsets(cluster, topic, 1, committed=True) == [1]
    assert _end_offsets(cluster, topic, 1, committed=False) == [3]
    assert _read_confluent(cluster, topic, "read_committed", partitions=1) == ["before"]
    # The coordinator aborts it after transaction.timeout.ms; then "after" is readable.
    wait_for(
        "the timed-out transaction to be aborted",
        lambda: _end_offsets(cluster, topic, 1, committed=True)[0] == 4,
        timeout_s=20,
    )
    assert _read_confluent(cluster, topic, "read_committed", partitions=1) == ["before", "after"]


# ---- exactly-once consume-transform-produce through broker kills ----


def _coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    broker = cluster.status()["brokers"][0]
    with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=5) as client:
        body = client.request(ApiKey.FIND_COORDINATOR, 2, {"key": transactional_id, "key_type": 1})
    assert body["error_code"] == 0, body
    return body["node_id"]


class _Pipeline:
    """Kafka's exactly-once loop: read a batch, write its transform and the consumer's offsets
    in one transaction; on an abortable error abort and rewind to the committed offsets; on a
    fatal one start a new producer (same transactional id: the old one is fenced)."""

    def __init__(self, cluster: Cluster, source: str, sink: str) -> None:
        self.cluster = cluster
        self.source = source
        self.sink = sink
        self.transactional_id = f"pipeline-{uuid.uuid4().hex[:6]}"
        self.group = f"pipeline-{uuid.uuid4().hex[:6]}"
        self.consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": self.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
            }
        )
        self.consumer.subscribe([source])
        self.producer = self._new_producer()
        self.committed_batches = 0
        self.aborts = 0

    def _new_producer(self) -> Producer:
        return _producer(
            self.cluster,
            self.transactional_id,
            **{"transaction.timeout.ms": 10000, "message.timeout.ms": 10000},
        )

    def step(self) -> int:
        messages = [m for m in self.consumer.consume(10, timeout=0.5) if not m.error()]
        if not messages:
            return 0
        try:
            self.producer.begin_transaction()
            for message in messages:
                self.producer.produce(
                    self.sink, value=b"out-" + message.value(), partition=message.partition()
                )
            positions = self.consumer.position(self.consumer.assignment())
            group = self.consumer.consumer_group_metadata()
            try:  # librdkafka may block here forever when the group coordinator dies
                call_with_deadline(
                    "send_offsets_to_transaction",
                    lambda: self.producer.send_offsets_to_transaction(positions, group, 30),
                    40,
                )
            except CallTimedOut:
                self.aborts += 1
                self.producer = self._new_producer()  # fences the stuck one
                self._rewind()
                return 0
            self._commit()
        except KafkaException as failure:
            error = failure.args[0]
            self.aborts += 1
            if error.fatal():
                self.producer = self._new_producer()
            else:
                self._abort()
            self._rewind()
            return 0
        self.committed_batches += 1
        return len(messages)

    def _commit(self) -> None:
        while True:
            try:
                self.producer.commit_transaction(30)
                return
            except KafkaException as failure:
                if not failure.args[0].retriable():
                    raise

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(30)
        except KafkaException as failure:
            if failure.args[0].fatal():
                self.producer = self._new_producer()

    def _committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The group's committed offsets; the group coordinator may be moving (a killed
        broker): retry while the error is retriable."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.consumer.committed(partitions, timeout=10)
            except KafkaException as failure:
                error = failure.args[0]
                moving = error.retriable() or error.code() in COORDINATOR_MOVING
                if not moving or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _rewind(self) -> None:
        for position in self._committed(self.consumer.assignment()):
            offset = position.offset if position.offset >= 0 else 0
            self.consumer.seek(TopicPartition(position.topic, position.partition, offset))

    def committed_offsets(self) -> list[int]:
        partitions = [TopicPartition(self.source, p) for p in range(3)]
        return [max(tp.offset, 0) for tp in self._committed(partitions)]

    def close(self) -> None:
        self.consumer.close()


def test_consume_transform_produce_is_exactly_once_through_leader_and_coordinator_kills(
    cluster: Cluster,
) -> None:
    source, sink = _topic(cluster), _topic(cluster)
    total = 900
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(total):
        plain.produce(source, value=b"%d" % i, partition=i % 3)
    plain.flush(30)
    pipeline = _Pipeline(cluster, source, sink)
    processed = 0
    kills: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            processed += pipeline.step()
            if not kills and processed >= total // 4:
                leader = partition_state(cluster, sink, 0)["leader"]
                kills.append(f"broker-{leader}")
                cluster.chaos("kill", kills[-1])
            elif len(kills) == 1 and processed >= total // 2:
                kills.append(f"broker-{_coordinator_of(cluster, pipeline.transactional_id)}")
                cluster.chaos("kill", kills[-1])
            if len(kills) == 2 and sum(pipeline.committed_offsets()) >= total:
                break
        assert sum(pipeline.committed_offsets()) == total, "the pipeline did not finish"
    finally:
        pipeline.close()
    out = _read_confluent(cluster, sink, "read_committed")
    expected = sorted(f"out-{i}" for i in range(total))
    duplicates = len(out) - len(set(out))
    assert duplicates == 0, f"{duplicates} outputs written twice (kills: {kills})"
    assert sorted(out) == expected, f"missing outputs (kills: {kills})"
