"""Helpers for tests of a replicated cluster: what the cluster says about a partition (from
the Kafka APIs, as a client sees it), and waiting for it to change."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlog.core.protocol.apis import ApiKey
from rlog.core.records import CorruptRecordError, iter_batches
from rlog.daemon.wire import BlockingKafkaClient, WireError
from support.clients import confluent_consume
from support.cluster import Cluster

# 3 brokers, RF=3, min.insync=2, with failure detection fast enough for tests.
CONFIG = """
[cluster]
restart_backoff_ms = 200

[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"broker.session.timeout.ms" = 3000
"broker.heartbeat.interval.ms" = 500
"replica.lag.time.max.ms" = 3000
"replica.fetch.backoff.ms" = 100
"auto.leader.rebalance.enable" = false
"""


# ---- what the cluster says about a partition ----


def every_broker(cluster: Cluster) -> str:
    """A bootstrap list of every broker: any one of them may be down when a client starts."""
    return ",".join(f"{b['host']}:{b['port']}" for b in cluster.status()["brokers"])


def partition_state(
    cluster: Cluster, topic: str, partition: int = 0, *, via: int | None = None
) -> dict:
    """Leader, epoch, replicas and ISR from Metadata v8, asked of any broker that answers (or
    of broker `via` only: a broker cut off from the controller answers from stale metadata)."""
    brokers = cluster.status()["brokers"]
    if via is not None:
        brokers = [b for b in brokers if b["id"] == via]
    for broker in brokers:
        try:
            with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=3) as client:
                body = client.request(
                    ApiKey.METADATA,
                    8,
                    {
                        "topics": [{"name": topic}],
                        "allow_auto_topic_creation": False,
                        "include_cluster_authorized_operations": False,
                        "include_topic_authorized_operations": False,
                    },
                )
        except WireError:
            continue
        (found,) = body["topics"]
        for info in found["partitions"]:
            if info["partition_index"] == partition:
                return {
                    "leader": info["leader_id"],
                    "leader_epoch": info["leader_epoch"],
                    "replicas": info["replica_nodes"],
                    "isr": sorted(info["isr_nodes"]),
                }
    raise AssertionError("no broker answered Metadata")


def log_end_offsets(cluster: Cluster, topic: str) -> dict[int, int]:
    """Each broker's LEO of partition 0: ListOffsets latest as a tool (replica id -2), which
    any replica answers with its log end."""
    found = {}
    for broker in cluster.status()["brokers"]:
        with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=3) as client:
            body = client.request(
                ApiKey.LIST_OFFSETS,
                4,
                {
                    "replica_id": -2,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                            ],
                        }
                    ],
                },
            )
        found[broker["id"]] = body["topics"][0]["partitions"][0]["offset"]
    return found


def wait_for(
    what: str, check: Callable[[], object], timeout_s: float = 30.0, every_s: float = 0.2
) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = check()
        except (AssertionError, WireError):
            found = None
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def create_replicated_topic(cluster: Cluster, name: str, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, num_partitions=1, replication_factor=3, config=config or {})
    admin.create_topics([topic])[name].result(timeout=15)
    wait_for(f"{name} to have a leader", lambda: partition_state(cluster, name)["leader"] >= 0)


# ---- a producer of numbered values that remembers what was acknowledged ----


class NumberedProducer:
    def __init__(self, cluster: Cluster, topic: str, **config: object) -> None:
        self.topic = topic
        self.producer = Producer(
            {
                "bootstrap.servers": every_broker(cluster),
                "acks": "all",
                "linger.ms": 2,
                "message.timeout.ms": 60_000,
                **config,
            }
        )
        self.acked: list[int] = []
        self.failed: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.sent = 0

    def _delivered(self, error: KafkaError | None, message: object) -> None:
        number = int(message.value())  # type: ignore[attr-defined]
        if error is None:
            self.acked.append(number)
        else:
            self.failed.append((number, error.name()))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"%d" % self.sent, on_delivery=self._delivered)
            self.sent += 1
            self.producer.poll(0.005)

    def start(self) -> NumberedProducer:
        self._thread.start()
        return self

    def wait_for_acks(self, count: int, timeout_s: float = 30.0) -> None:
        start = len(self.acked)
        wait_for(f"{count} more acks", lambda: len(self.acked) >= start + count, timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        remaining = self.producer.flush(90)
        assert remaining == 0, f"{remaining} records still undelivered"


def read_numbers(cluster: Cluster, topic: str, count: int) -> list[int]:
    return [number for number, _ in read_numbered(cluster, topic, count)]


def read_numbered(cluster: Cluster, topic: str, count: int) -> list[tuple[int, int]]:
    """(value, offset) of partition 0's records from the start."""
    messages = confluent_consume(every_broker(cluster), topic, [0], count, timeout_s=60)
    return [(int(m.value), m.offset) for m in messages if m.value is not None]


def explain_duplicates(cluster: Cluster, topic: str, numbered: list[tuple[int, int]]) -> str:
    """For each value read more than once: its offsets, and the batches holding those offsets in
    every broker's log (producer id, epoch, sequence, leader epoch), so a failure says whether
    the broker appended a retry twice or the client sent the value again under a new sequence."""
    offsets: dict[int, list[int]] = {}
    for number, offset in numbered:
        offsets.setdefault(number, []).append(offset)
    repeated = {number: found for number, found in offsets.items() if len(found) > 1}
    lines = [f"value {number} at offsets {found}" for number, found in list(repeated.items())[:10]]
    wanted = {offset for found in repeated.values() for offset in found}
    for broker_dir in sorted(cluster.data_dir.glob("broker-*")):
        for segment in sorted((broker_dir / f"{topic}-0").glob("*.log")):
            headers = []
            try:
                for _, header in iter_batches(segment.read_bytes()):
                    headers.append(header)
            except (OSError, CorruptRecordError) as error:  # a torn tail: say so, go on
                lines.append(f"{broker_dir.name}: {segment.name} ends unreadable: {error}")
            for header in headers:
                if any(header.base_offset <= o <= header.last_offset for o in wanted):
                    lines.append(
                        f"{broker_dir.name}: offsets {header.base_offset}-{header.last_offset} "
                        f"producer {header.producer_id} epoch {header.producer_epoch} "
                        f"sequence {header.base_sequence} leader epoch "
                        f"{header.partition_leader_epoch}"
                    )
    return "\n".join(lines)
