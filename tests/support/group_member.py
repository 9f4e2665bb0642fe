"""One consumer-group member as its own process, with any of the three client libraries.

    python tests/support/group_member.py --client confluent|kafka-python|aiokafka \\
        --bootstrap HOST:PORT --group G --topic T [--commit manual|auto] [--slow-value V]

It prints one JSON object per line, flushed, so a test can follow it and SIGKILL it anywhere:
- `{"event": "assigned", "partitions": [...]}` whenever its assignment changes;
- `{"event": "record", "partition": p, "offset": o, "value": "..."}` once a record is processed;
- `{"event": "committed", "partition": p, "offset": o}` after a manual commit returned.

`--commit manual` commits each record's offset + 1 after processing it (at-least-once);
`--commit auto` lets the client auto-commit what it has handed out, before processing
(the loss window the tests show). `--slow-value V` makes processing the record whose value is V
take a minute, so a test can kill the member in the middle of it. SIGTERM closes the consumer
(it leaves the group) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from typing import Any

SLOW_PROCESSING_S = 60.0
POLL_S = 0.2


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class Member:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stopping = False
        self.assigned: list[int] | None = None

    def stop(self, *_: object) -> None:
        self.stopping = True

    def report_assignment(self, partitions: list[int]) -> None:
        partitions = sorted(partitions)
        if partitions != self.assigned:
            self.assigned = partitions
            emit("assigned", partitions=partitions)

    def process(self, partition: int, offset: int, value: bytes | None) -> None:
        text = (value or b"").decode()
        if text == self.args.slow_value:
            emit("slow", partition=partition, offset=offset, value=text)
            time.sleep(SLOW_PROCESSING_S)
        emit("record", partition=partition, offset=offset, value=text)


def run_confluent(member: Member) -> None:
    from confluent_kafka import Consumer

    args = member.args
    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": args.commit == "auto",
        "auto.commit.interval.ms": 100,
        **({"group.instance.id": args.instance_id} if args.instance_id else {}),
    }
    if args.protocol == "consumer":
        # KIP-848: the broker times the session and assigns (group.remote.assignor).
        config["group.protocol"] = "consumer"
        if args.assignor:
            config["group.remote.assignor"] = args.assignor
    else:
        config["session.timeout.ms"] = args.session_timeout_ms
        config["heartbeat.interval.ms"] = max(100, args.session_timeout_ms // 6)
        if args.assignor:
            config["partition.assignment.strategy"] = args.assignor
    consumer = Consumer(config)
    consumer.subscribe([args.topic])
    try:
        while not member.stopping:
            message = consumer.poll(POLL_S)
            member.report_assignment([tp.partition for tp in consumer.assignment()])
            if message is None or message.error() is not None:
                continue
            member.process(message.partition(), message.offset(), message.value())
            if args.commit == "manual":
                consumer.commit(message=message, asynchronous=False)
                emit("committed", partition=message.partition(), offset=message.offset() + 1)
    finally:
        consumer.close()


def run_kafka_python(member: Member) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    args = member.args
    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    strategy = {}
    if args.assignor:
        strategy["partition_assignment_strategy"] = [assignors[args.assignor]]
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=args.commit == "auto",
        auto_commit_interval_ms=100,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 6),
        # kafka-python's leader assigns from its own metadata: one read before every broker knew
        # the topic (a slow start) would otherwise stand for the default five minutes.
        metadata_max_age_ms=2000,
        **({"group_instance_id": args.instance_id} if args.instance_id else {}),
        **strategy,
    )
    consumer.subscribe([args.topic])
    # The topic's metadata before the first join, so that the first assignment has its
    # partitions. Else the leader assigns nothing, and rejoins when the metadata comes; and
    # kafka-python 3.0.12 loses the assignment of such a rejoin if a poll times out while its
    # SyncGroup is in flight: the leader's new metadata snapshot ends need_rejoin() before the
    # answer is applied, so the member stays with [] for good (3 runs in 11 here).
    consumer.topics()
    try:
        while not member.stopping:
            batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
            member.report_assignment([tp.partition for tp in consumer.assignment()])
            for records in batches.values():
                for record in records:
                    member.process(record.partition, record.offset, record.value)
                    if args.commit == "manual":
                        tp = TopicPartition(record.topic, record.partition)
                        consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
                        emit("committed", partition=record.partition, offset=record.offset + 1)
    finally:
        consumer.close()


async def run_aiokafka(member: Member) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    args = member.args
    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=args.commit == "auto",
        auto_commit_interval_ms=100,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 6),
    )
    await consumer.start()
    try:
        while not member.stopping:
            batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            member.report_assignment([tp.partition for tp in consumer.assignment()])
            for records in batches.values():
                for record in records:
                    member.process(record.partition, record.offset, record.value)
                    if args.commit == "manual":
                        tp = TopicPartition(record.topic, record.partition)
                        await consumer.commit({tp: record.offset + 1})
                        emit("committed", partition=record.partition, offset=record.offset + 1)
    finally:
        await consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--client", choices=["confluent", "kafka-python", "aiokafka"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--commit", choices=["manual", "auto"], default="manual")
    parser.add_argument("--slow-value")
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--instance-id")
    parser.add_argument("--assignor", help="range, roundrobin or cooperative-sticky")
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    args = parser.parse_args()
    # The client library's own account goes to stderr, which the test keeps in NAME.err and
    # quotes when a member does not reach what it waits for.
    logging.basicConfig(
        level=os.environ.get("RLOG_MEMBER_LOG_LEVEL", "INFO"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    member = Member(args)
    signal.signal(signal.SIGTERM, member.stop)
    emit("started", client=args.client, time=time.time())
    if args.client == "confluent":
        run_confluent(member)
    elif args.client == "kafka-python":
        run_kafka_python(member)
    else:
        asyncio.run(run_aiokafka(member))
    emit("closed")


if __name__ == "__main__":
    main()
