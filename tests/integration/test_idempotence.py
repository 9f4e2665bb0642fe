"""Kafka's classic duplicate, made on purpose: the broker appends a Produce batch, then its
answer is lost (rlog chaos lose-answers), and the client retries. Without idempotence the
record is written twice; with it, once, and in order with five requests in flight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from support.clients import create_topic
from support.cluster import Cluster

pytestmark = pytest.mark.integration

BROKER = "broker-1"
RLOG = [sys.executable, "-m", "rlog.cli.app"]
COMMAND_TIMEOUT_S = 60
FLUSH_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 30.0
# What the broker logs for each answer it drops (rlog.daemon.broker.faults).
LOST_ANSWER_LINE = "chaos: lost the answer to Produce"
# librdkafka's default is no idempotence: said here explicitly all the same, so the test does
# not depend on a client default.
PLAIN = {"enable.idempotence": False, "acks": "all", "retries": 5}
IDEMPOTENT = {"enable.idempotence": True, "acks": "all"}


@dataclass
class Delivery:
    """What the producer's delivery reports said: the errors, and each value's offset."""

    errors: list[KafkaError] = field(default_factory=list)
    offsets: dict[bytes, int] = field(default_factory=dict)

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.offsets[message.value()] = message.offset()


def lose_answers(cluster: Cluster, count: int) -> None:
    reply = cluster.chaos_request({"op": "lose-answers", "target": BROKER, "count": count})
    assert reply["changed"] == [BROKER], reply


def answers_lost(cluster: Cluster) -> int:
    """How many answers the broker has dropped so far, from its log."""
    text = (cluster.data_dir / "logs" / f"{BROKER}.log").read_text(errors="replace")
    return text.count(LOST_ANSWER_LINE)


def wait_for_losses(cluster: Cluster, count: int, timeout_s: float = 10.0) -> None:
    """The broker logs a loss as it happens, which is before the retry's answer reaches the
    producer; the file is read from another process, so allow it a moment."""
    deadline = time.monotonic() + timeout_s
    while answers_lost(cluster) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert answers_lost(cluster) == count, cluster.log_tail()


def produce(cluster: Cluster, topic: str, values: list[bytes], config: dict[str, Any]) -> Delivery:
    """Send `values` one produce() after the other, without waiting, then wait for them all."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0, **config})
    delivery = Delivery()
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=delivery)
        producer.poll(0)  # serve delivery reports; never waits
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    assert remaining == 0, f"{remaining} records undelivered after {FLUSH_TIMEOUT_S} s"
    return delivery


def read_partition(cluster: Cluster, topic: str) -> list[tuple[int, bytes]]:
    """Every record of partition 0 up to its high watermark: (offset, value)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            # librdkafka wants a group id even for assign(); nothing is committed to it.
            "group.id": f"rlog-test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    partition = TopicPartition(topic, 0, OFFSET_BEGINNING)
    records: list[tuple[int, bytes]] = []
    try:
        _, end = consumer.get_watermark_offsets(partition, timeout=10)
        consumer.assign([partition])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(records) < end and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error = message.error()
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"consume error: {error}")
                if error is None:
                    records.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert len(records) == end, f"read {len(records)} of {end} records in {READ_TIMEOUT_S} s"
    return records


def new_topic(cluster: Cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(cluster.bootstrap, name, partitions=1)
    return name


def test_a_lost_answer_writes_a_plain_producers_record_twice(cluster: Cluster) -> None:
    topic = new_topic(cluster, "dup")
    lose_answers(cluster, 1)
    config = {**PLAIN, "max.in.flight.requests.per.connection": 1}
    delivery = produce(cluster, topic, [b"once"], config)
    assert not delivery.errors, delivery.errors
    wait_for_losses(cluster, 1)
    assert read_partition(cluster, topic) == [(0, b"once"), (1, b"once")]


def test_an_idempotent_producer_writes_it_once(cluster: Cluster) -> None:
    topic = new_topic(cluster, "once")
    lose_answers(cluster, 1)
    delivery = produce(cluster, topic, [b"once"], IDEMPOTENT)
    assert not delivery.errors, delivery.errors
    wait_for_losses(cluster, 1)
    assert read_partition(cluster, topic) == [(0, b"once")]
    assert delivery.offsets == {b"once": 0}, "the retry is answered with the original offset"


def test_the_same_count_asked_again_loses_again(cluster: Cluster) -> None:
    """A second request for one lost answer arms a fresh one, though the rule reads the same."""
    topic = new_topic(cluster, "again")
    config = {**PLAIN, "max.in.flight.requests.per.connection": 1}
    lose_answers(cluster, 1)
    produce(cluster, topic, [b"first"], config)
    wait_for_losses(cluster, 1)
    lose_answers(cluster, 1)
    produce(cluster, topic, [b"second"], config)
    wait_for_losses(cluster, 2)
    values = [value for _, value in read_partition(cluster, topic)]
    assert values == [b"first", b"first", b"second", b"second"]


def test_lost_answers_keep_order_with_five_requests_in_flight(cluster: Cluster) -> None:
    topic = new_topic(cluster, "order")
    lose_answers(cluster, 3)
    config = {
        **IDEMPOTENT,
        "max.in.flight.requests.per.connection": 5,
        "batch.num.messages": 1,  # a request per record, so several are in flight at once
    }
    sent = [b"%d" % number for number in range(200)]
    delivery = produce(cluster, topic, sent, config)
    assert not delivery.errors, delivery.errors
    wait_for_losses(cluster, 3)
    records = read_partition(cluster, topic)
    assert [value for _, value in records] == sent, "each record once, in the order sent"
    assert delivery.offsets == {value: offset for offset, value in records}


def rlog(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLOG_")}
    env.update(RLOG_DATA_DIR=str(cluster.data_dir), NO_COLOR="1")
    done = subprocess.run(
        [*RLOG, *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_the_cli_arms_disarms_and_refuses_bad_input(cluster: Cluster) -> None:
    faults_file = cluster.data_dir / BROKER / "faults.json"
    armed = rlog(cluster, "chaos", "lose-answers", BROKER, "--count", "2")
    assert armed.returncode == 0, armed.stderr
    assert armed.stdout.strip() == (
        "broker-1: the next 2 answers to clients' Produce requests are lost after the append "
        "(each closes its connection)"
    )
    assert json.loads(faults_file.read_text())["lose_answers"] == 2
    again = rlog(cluster, "chaos", "lose-answers", BROKER, "--json")  # --count defaults to 1
    assert again.returncode == 0, again.stderr
    reply = json.loads(again.stdout)
    assert reply["changed"] == [BROKER] and reply["faults"][BROKER]["lose_answers"] == 1
    unknown = rlog(cluster, "chaos", "lose-answers", "broker-9")
    assert unknown.returncode == 5, unknown.stderr
    assert "unknown process 'broker-9'" in unknown.stderr
    controller = rlog(cluster, "chaos", "lose-answers", "controller")
    assert controller.returncode == 1, controller.stderr
    assert "acts on a broker (broker-N), not the controller" in controller.stderr
    negative = rlog(cluster, "chaos", "lose-answers", BROKER, "--count", "-1")
    assert negative.returncode == 2 and "--count" in negative.stderr, negative.stderr
    healed = rlog(cluster, "chaos", "heal")
    assert healed.returncode == 0, healed.stderr
    assert "lose_answers" not in json.loads(faults_file.read_text())
    assert rlog(cluster, "chaos", "lose-answers", BROKER, "--count", "0").returncode == 0
