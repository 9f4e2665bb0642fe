"""Thin helpers over the three real Kafka clients, shared by the integration tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class Message:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    partition: int
    offset: int


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})]
    )
    futures[name].result(timeout=15)


def confluent_produce(bootstrap: str, topic: str, messages: list[Message], **config: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    for message in messages:
        producer.produce(
            topic, value=message.value, key=message.key, partition=message.partition,
            headers=list(message.headers), on_delivery=delivered,
        )  # fmt: skip
    assert producer.flush(30) == 0, "messages still undelivered after 30 s"
    assert not errors, errors


def confluent_consume(
    bootstrap: str, topic: str, partitions: list[int], count: int, timeout_s: float = 30
) -> list[Message]:
    """Read `count` messages from the start of the given partitions (no consumer group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            # librdkafka insists on a group id even for assign(); nothing is committed to it.
            "group.id": f"rlog-test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    received: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(received) < count and time.monotonic() < deadline:
            for record in consumer.consume(num_messages=1000, timeout=0.5):
                if record.error() is not None:
                    if record.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"consume error: {record.error()}")
                received.append(
                    Message(
                        record.key(), record.value(), tuple(record.headers() or ()),
                        record.partition(), record.offset(),
                    )
                )  # fmt: skip
    finally:
        consumer.close()
    return received


def kafka_python_produce(bootstrap: str, topic: str, messages: list[Message], **config) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
    futures = [
        producer.send(
            topic, value=m.value, key=m.key, partition=m.partition, headers=list(m.headers)
        )
        for m in messages
    ]
    for future in futures:
        future.get(timeout=30)
    producer.close(timeout=10)


def kafka_python_consume(
    bootstrap: str, topic: str, partitions: list[int], count: int
) -> list[Message]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    assigned = [KafkaPythonTopicPartition(topic, p) for p in partitions]
    consumer.assign(assigned)
    consumer.seek_to_beginning(*assigned)
    received: list[Message] = []
    deadline = time.monotonic() + 30
    try:
        while len(received) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    headers = tuple((k, v) for k, v in r.headers)
                    received.append(Message(r.key, r.value, headers, r.partition, r.offset))
    finally:
        consumer.close()
    return received


def aiokafka_produce(bootstrap: str, topic: str, messages: list[Message], **config) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=m.value,
                    key=m.key,
                    partition=m.partition,
                    headers=list(m.headers),
                )
                for m in messages
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


def aiokafka_consume(
    bootstrap: str, topic: str, partitions: list[int], count: int
) -> list[Message]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as AioTopicPartition

    async def run() -> list[Message]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        received: list[Message] = []
        try:
            assigned = [AioTopicPartition(topic, p) for p in partitions]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            while len(received) < count:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for r in records:
                        headers = tuple((k, v) for k, v in r.headers)
                        received.append(Message(r.key, r.value, headers, r.partition, r.offset))
        finally:
            await consumer.stop()
        return received

    return asyncio.run(asyncio.wait_for(run(), 60))
