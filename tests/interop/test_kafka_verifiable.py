"""Kafka's own system-test workload, `kafka-verifiable-producer` and `kafka-verifiable-consumer`
(the Java client underneath), across a killed partition leader: with acks=all and idempotence,
every record the producer saw acknowledged is consumed afterwards, once, at the offset the
acknowledgement named, and the consumer's manual commits land."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from support.cluster import Cluster
from support.kafka_tools import KafkaTools
from support.replication import partition_state, wait_for

pytestmark = pytest.mark.integration

RECORDS = 6000
RATE = 1000  # records/s: the kill lands about two seconds into a six-second run


def events(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a verifiable tool printed (its other output, such as warnings, skipped)."""
    found = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def test_nothing_acknowledged_is_lost_across_a_killed_leader(
    kafka_tools: KafkaTools, cluster: Cluster, tmp_path: Path
):
    topic, group = f"verifiable-{uuid.uuid4().hex[:8]}", f"verifiable-{uuid.uuid4().hex[:8]}"
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "3",
                   "--replication-factor", "3")  # fmt: skip
    config = tmp_path / "producer.properties"
    config.write_text("enable.idempotence=true\nretries=2147483647\ndelivery.timeout.ms=120000\n")
    produced = tmp_path / "producer.jsonl"
    producer = kafka_tools.start(
        "kafka-verifiable-producer", *boot, "--topic", topic, "--acks", "-1",
        "--max-messages", str(RECORDS), "--throughput", str(RATE),
        "--producer.config", str(config), stdout=produced,
    )  # fmt: skip
    try:
        wait_for("acknowledged records", lambda: produced.exists() and "send_success"
                 in produced.read_text(), timeout_s=60)  # fmt: skip
        time.sleep(1.5)
        before = partition_state(cluster, topic, 0)
        cluster.chaos("kill", f"broker-{before['leader']}")
        wait_for(
            "a new leader",
            lambda: partition_state(cluster, topic, 0)["leader"] not in (-1, before["leader"]),
        )
        assert producer.wait(timeout=120) == 0, produced.read_text()[-2000:]
    finally:
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    sent = events(produced)
    acked = {(e["partition"], e["offset"]): e["value"] for e in sent
             if e["name"] == "producer_send_success"}  # fmt: skip
    failed = [e for e in sent if e["name"] == "producer_send_error"]
    assert not failed, failed[:5]
    assert len(acked) == RECORDS
    cluster.wait_until_running(60)

    consumed_path = tmp_path / "consumer.jsonl"
    consumer = kafka_tools.start(
        "kafka-verifiable-consumer", *boot, "--topic", topic, "--group-id", group,
        "--max-messages", str(RECORDS), "--verbose", "--reset-policy", "earliest",
        stdout=consumed_path,
    )  # fmt: skip
    try:
        assert consumer.wait(timeout=120) == 0, consumed_path.read_text()[-2000:]
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    received = events(consumed_path)
    records = [e for e in received if e["name"] == "record_data"]
    at = {(e["partition"], e["offset"]): e["value"] for e in records}
    lost = sorted(key for key in acked if at.get(key) != acked[key])
    assert not lost, f"{len(lost)} acknowledged records lost or changed: {lost[:10]}"
    values = [e["value"] for e in records]
    assert len(values) == len(set(values)) == RECORDS, "duplicates in the log"

    commits = [e for e in received if e["name"] == "offsets_committed"]
    assert commits and all(c["success"] for c in commits)
    last_commit: dict[int, int] = {}
    for commit in commits:
        for offset in commit["offsets"]:
            last_commit[offset["partition"]] = offset["offset"]
    ends = {p: max(o for (q, o) in acked if q == p) + 1 for p, _o in acked}
    assert last_commit == ends  # the manual commits reached each partition's end
