"""Kafka's own command-line tools (kafka-tools 4.4 from Maven Central), run as an operator runs
them, against a 3-broker rlog cluster: topics, console producer and consumer, consumer groups,
configs, offsets and the producer perf test."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from support.cluster import Cluster
from support.kafka_tools import KafkaTools

pytestmark = pytest.mark.integration


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def describe_partitions(tools: KafkaTools, cluster: Cluster, topic: str) -> list[dict[str, str]]:
    """kafka-topics --describe, one dict per partition line (Partition, Leader, Replicas, Isr)."""
    out = tools.ok("kafka-topics", "--bootstrap-server", cluster.bootstrap, "--describe",
                   "--topic", topic)  # fmt: skip
    rows = []
    for line in out.splitlines():
        if "Partition:" in line:
            rows.append(dict(re.findall(r"(\w+): (\S*)", line)))
    return rows


def test_topics_create_describe_alter_list_and_delete(kafka_tools: KafkaTools, cluster: Cluster):
    topic = unique("cli-topics")
    boot = ["--bootstrap-server", cluster.bootstrap]
    created = kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic,
                             "--partitions", "3", "--replication-factor", "3",
                             "--config", "retention.ms=3600000")  # fmt: skip
    assert f"Created topic {topic}." in created
    partitions = describe_partitions(kafka_tools, cluster, topic)
    assert [p["Partition"] for p in partitions] == ["0", "1", "2"]
    for p in partitions:
        replicas = p["Replicas"].split(",")
        assert sorted(replicas) == ["1", "2", "3"]
        assert p["Leader"] in replicas
        assert sorted(p["Isr"].split(",")) == ["1", "2", "3"]
    summary = kafka_tools.ok("kafka-topics", *boot, "--describe", "--topic", topic)
    assert "retention.ms=3600000" in summary

    again = kafka_tools.run("kafka-topics", *boot, "--create", "--topic", topic,
                            "--partitions", "1")  # fmt: skip
    assert again.returncode != 0
    assert "already exists" in again.stdout + again.stderr

    kafka_tools.ok("kafka-topics", *boot, "--alter", "--topic", topic, "--partitions", "5")
    assert len(describe_partitions(kafka_tools, cluster, topic)) == 5
    assert topic in kafka_tools.ok("kafka-topics", *boot, "--list").split()

    kafka_tools.ok("kafka-topics", *boot, "--delete", "--topic", topic)
    assert topic not in kafka_tools.ok("kafka-topics", *boot, "--list").split()


def test_console_producer_and_consumer_carry_keys_values_and_headers(
    kafka_tools: KafkaTools, cluster: Cluster
):
    topic = unique("cli-console")
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "1")
    # The reader's line: headers, a tab, the key, a tab, the value (its defaults).
    lines = [f"trace:{i},empty:\tkey-{i}\tvalue-{i}" for i in range(20)]
    kafka_tools.ok(
        "kafka-console-producer", *boot, "--topic", topic, "--command-property", "acks=all",
        "--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
        input="\n".join(lines) + "\n",
    )  # fmt: skip
    out = kafka_tools.ok(
        "kafka-console-consumer", *boot, "--topic", topic, "--from-beginning",
        "--max-messages", "20", "--timeout-ms", "30000",
        "--formatter-property", "print.offset=true", "--formatter-property", "print.key=true",
        "--formatter-property", "print.headers=true",
    )  # fmt: skip
    consumed = [line for line in out.splitlines() if line.startswith("Offset:")]
    assert consumed == [f"Offset:{i}\ttrace:{i},empty:\tkey-{i}\tvalue-{i}" for i in range(20)]


def test_consumer_groups_describe_reset_and_delete(kafka_tools: KafkaTools, cluster: Cluster):
    topic, group = unique("cli-groups"), unique("group")
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "2")
    values = "".join(f"v{i}\n" for i in range(10))
    kafka_tools.ok("kafka-console-producer", *boot, "--topic", topic, input=values)
    kafka_tools.ok("kafka-console-consumer", *boot, "--topic", topic, "--group", group,
                   "--from-beginning", "--max-messages", "10", "--timeout-ms", "30000")  # fmt: skip

    def offsets() -> dict[int, tuple[int, int, int]]:
        """partition -> (current offset, log end offset, lag) from --describe."""
        out = kafka_tools.ok("kafka-consumer-groups", *boot, "--describe", "--group", group)
        rows = [line.split() for line in out.splitlines() if line.startswith(group)]
        return {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows if r[1] == topic}

    described = offsets()
    assert sum(current for current, _end, _lag in described.values()) == 10
    assert all(current == end and lag == 0 for current, end, lag in described.values())
    assert group in kafka_tools.ok("kafka-consumer-groups", *boot, "--list").split()

    reset = kafka_tools.ok("kafka-consumer-groups", *boot, "--group", group, "--topic", topic,
                           "--reset-offsets", "--to-earliest", "--execute")  # fmt: skip
    assert group in reset
    assert all(current == 0 and lag == end for current, end, lag in offsets().values())

    deleted = kafka_tools.ok("kafka-consumer-groups", *boot, "--delete", "--group", group)
    assert "successful" in deleted
    assert group not in kafka_tools.ok("kafka-consumer-groups", *boot, "--list").split()


def test_configs_alter_describe_and_delete_a_topic_override(
    kafka_tools: KafkaTools, cluster: Cluster
):
    topic = unique("cli-configs")
    boot = ["--bootstrap-server", cluster.bootstrap]
    entity = ["--entity-type", "topics", "--entity-name", topic]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "1")
    kafka_tools.ok("kafka-configs", *boot, "--alter", *entity,
                   "--add-config", "retention.ms=100000,cleanup.policy=compact")  # fmt: skip
    described = kafka_tools.ok("kafka-configs", *boot, "--describe", *entity)
    assert re.search(r"retention\.ms=100000\b", described)
    assert re.search(r"cleanup\.policy=compact\b", described)

    kafka_tools.ok("kafka-configs", *boot, "--alter", *entity, "--delete-config", "retention.ms")
    described = kafka_tools.ok("kafka-configs", *boot, "--describe", *entity)
    assert "retention.ms" not in described
    everything = kafka_tools.ok("kafka-configs", *boot, "--describe", *entity, "--all")
    assert re.search(r"retention\.ms=604800000\b", everything)  # back to the default

    refused = kafka_tools.run("kafka-configs", *boot, "--alter", *entity,
                              "--add-config", "retention.ms=soon")  # fmt: skip
    assert refused.returncode != 0
    assert "retention.ms" in refused.stdout + refused.stderr


def test_get_offsets_latest_and_earliest(kafka_tools: KafkaTools, cluster: Cluster):
    topic = unique("cli-offsets")
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "1")
    kafka_tools.ok("kafka-console-producer", *boot, "--topic", topic,
                   input="".join(f"{i}\n" for i in range(7)))  # fmt: skip
    latest = kafka_tools.ok("kafka-get-offsets", *boot, "--topic", topic, "--time", "-1")
    earliest = kafka_tools.ok("kafka-get-offsets", *boot, "--topic", topic, "--time", "-2")
    assert latest.split() == [f"{topic}:0:7"]
    assert earliest.split() == [f"{topic}:0:0"]


def test_producer_perf_test_sends_every_record(kafka_tools: KafkaTools, cluster: Cluster):
    topic = unique("cli-perf")
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "3")
    out = kafka_tools.ok(
        "kafka-producer-perf-test", *boot, "--topic", topic, "--num-records", "20000",
        "--record-size", "100", "--throughput", "-1",
        "--command-property", "acks=all", "enable.idempotence=true",
    )  # fmt: skip
    assert re.search(r"^20000 records sent", out, re.MULTILINE), out
    latest = kafka_tools.ok("kafka-get-offsets", *boot, "--topic", topic, "--time", "-1")
    assert sum(int(line.rsplit(":", 1)[1]) for line in latest.split()) == 20000


def test_delete_records_moves_the_earliest_offset(kafka_tools: KafkaTools, cluster: Cluster,
                                                  tmp_path: Path):  # fmt: skip
    topic = unique("cli-delete-records")
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "2")
    kafka_tools.ok("kafka-console-producer", *boot, "--topic", topic,
                   "--reader-property", "parse.key=true",
                   input="".join(f"{i % 2}\t{i}\n" for i in range(20)))  # fmt: skip
    latest = kafka_tools.ok("kafka-get-offsets", *boot, "--topic", topic, "--time", "-1")
    ends = {int(line.split(":")[1]): int(line.split(":")[2]) for line in latest.split()}
    assert sum(ends.values()) == 20
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 3},
        {"topic": topic, "partition": 1, "offset": -1},
    ]}))  # fmt: skip
    out = kafka_tools.ok("kafka-delete-records", *boot, "--offset-json-file", str(plan))
    assert f"partition: {topic}-0\tlow_watermark: 3" in out
    assert f"partition: {topic}-1\tlow_watermark: {ends[1]}" in out
    earliest = kafka_tools.ok("kafka-get-offsets", *boot, "--topic", topic, "--time", "-2")
    assert sorted(earliest.split()) == [f"{topic}:0:3", f"{topic}:1:{ends[1]}"]

    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": ends[0] + 5}]}))  # fmt: skip
    refused = kafka_tools.run("kafka-delete-records", *boot, "--offset-json-file", str(plan))
    assert "OffsetOutOfRangeException" in refused.stdout + refused.stderr


def test_log_dirs_show_every_replica_and_its_size(kafka_tools: KafkaTools, cluster: Cluster):
    topic = unique("cli-log-dirs")
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "2")
    kafka_tools.ok("kafka-console-producer", *boot, "--topic", topic,
                   input="".join(f"record-{i}\n" for i in range(50)))  # fmt: skip
    out = kafka_tools.ok("kafka-log-dirs", *boot, "--describe", "--topic-list", topic)
    described = json.loads(out.strip().splitlines()[-1])
    replicas = [
        (broker["broker"], partition["partition"], partition["size"])
        for broker in described["brokers"]
        for log_dir in broker["logDirs"]
        for partition in log_dir["partitions"]
    ]
    assert sorted((b, p) for b, p, _size in replicas) == [
        (b, f"{topic}-{p}") for b in (1, 2, 3) for p in (0, 1)
    ]
    assert sum(size for _b, _p, size in replicas) > 3 * 50 * len("record-00")


def test_offsets_by_max_timestamp_and_producers_of_a_partition(
    kafka_tools: KafkaTools, cluster: Cluster
):
    topic = unique("cli-max-timestamp")
    boot = ["--bootstrap-server", cluster.bootstrap]
    kafka_tools.ok("kafka-topics", *boot, "--create", "--topic", topic, "--partitions", "1")
    kafka_tools.ok("kafka-console-producer", *boot, "--topic", topic,
                   "--command-property", "enable.idempotence=true",
                   input="".join(f"{i}\n" for i in range(5)))  # fmt: skip
    newest = kafka_tools.ok("kafka-get-offsets", *boot, "--topic", topic, "--time", "-3")
    [(name, partition, offset)] = [line.split(":") for line in newest.split()]
    assert (name, partition) == (topic, "0") and 0 <= int(offset) <= 4
    producers = kafka_tools.ok("kafka-transactions", *boot, "describe-producers",
                               "--topic", topic, "--partition", "0")  # fmt: skip
    header, *rows = [line.split() for line in producers.strip().splitlines()]
    assert header[:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"]
    assert len(rows) == 1 and rows[0][3] == "4"  # one idempotent producer, five records


def test_leader_election_has_nothing_to_do_on_a_healthy_cluster(
    kafka_tools: KafkaTools, cluster: Cluster
):
    done = kafka_tools.run("kafka-leader-election", "--bootstrap-server", cluster.bootstrap,
                           "--election-type", "preferred", "--all-topic-partitions")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Error" not in done.stdout + done.stderr
