"""Streaming read: checkpointed restarts neither skip nor repeat a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streaming_support import run_to_end

from support import clients
from support.clients import Message

pytestmark = pytest.mark.integration


def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int) -> None:
    messages = [
        Message(None, b"%d" % i, (), i % partitions, -1) for i in range(start, start + count)
    ]
    clients.confluent_produce(bootstrap, topic, messages)


def run_available_now(spark, bootstrap: str, topic: str, out: Path, checkpoint: Path, **options):
    """Trigger.AvailableNow, or its stand-in under PySpark 4.0/4.1 (streaming_support.py)."""
    stream = (
        spark.readStream.format("rlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    for name, value in options.items():
        stream = stream.option(name, value)
    writer = (
        stream.load()
        .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )
    query = run_to_end(writer, 120)
    assert query.exception() is None, query.exception()
    return query


def test_restart_from_checkpoint_neither_skips_nor_repeats(spark, spark_cluster, tmp_path) -> None:
    topic = "stream-restart"
    clients.create_topic(spark_cluster.bootstrap, topic, partitions=3)
    produce(spark_cluster.bootstrap, topic, 0, 90, 3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "40"}
    first = run_available_now(spark, spark_cluster.bootstrap, topic, out, checkpoint, **options)
    batches = [p for p in first.recentProgress if p["numInputRows"] > 0]
    assert len(batches) == 3  # 90 records, at most 40 per trigger
    assert all(p["numInputRows"] <= 40 for p in batches)
    # The progress's own JSON: PySpark 4.0's `sources[0]["endOffset"]` is str() of the parsed
    # offsets (single quotes), not their JSON.
    end_offsets = json.loads(batches[-1].json)["sources"][0]["endOffset"]
    assert end_offsets == {topic: {"0": 30, "1": 30, "2": 30}}

    produce(spark_cluster.bootstrap, topic, 90, 60, 3)
    run_available_now(spark, spark_cluster.bootstrap, topic, out, checkpoint, **options)

    rows = spark.read.parquet(str(out)).collect()
    values = sorted(int(r.value) for r in rows)
    assert values == list(range(150))  # each record exactly once
    for partition in range(3):
        offsets = sorted(r.offset for r in rows if r.partition == partition)
        assert offsets == list(range(50))


def test_streaming_starts_at_latest_by_default(spark, spark_cluster, tmp_path) -> None:
    topic = "stream-latest"
    clients.create_topic(spark_cluster.bootstrap, topic)
    produce(spark_cluster.bootstrap, topic, 0, 5, 1)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    run_available_now(spark, spark_cluster.bootstrap, topic, out, checkpoint)
    produce(spark_cluster.bootstrap, topic, 5, 5, 1)
    run_available_now(spark, spark_cluster.bootstrap, topic, out, checkpoint)
    values = sorted(int(r.value) for r in spark.read.parquet(str(out)).collect())
    assert values == [5, 6, 7, 8, 9]


def test_streaming_write_round_trip(spark, spark_cluster, tmp_path) -> None:
    source, sink = "stream-source", "stream-sink"
    clients.create_topic(spark_cluster.bootstrap, source, partitions=2)
    clients.create_topic(spark_cluster.bootstrap, sink)
    produce(spark_cluster.bootstrap, source, 0, 20, 2)
    query = (
        spark.readStream.format("rlog")
        .option("kafka.bootstrap.servers", spark_cluster.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "concat(value, '!') AS value")
        .writeStream.format("rlog")
        .option("kafka.bootstrap.servers", spark_cluster.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    got = clients.confluent_consume(spark_cluster.bootstrap, sink, [0], 20)
    assert sorted(m.value for m in got) == sorted(b"%d!" % i for i in range(20))


def test_commit_group_shows_the_streams_progress_as_a_consumer_group(
    spark, spark_cluster, tmp_path
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = "stream-progress"
    clients.create_topic(spark_cluster.bootstrap, topic, partitions=2)
    produce(spark_cluster.bootstrap, topic, 0, 60, 2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"startingOffsets": "earliest", "commitGroup": "dashboard"}
    run_available_now(spark, spark_cluster.bootstrap, topic, out, checkpoint, **options)

    admin = AdminClient({"bootstrap.servers": spark_cluster.bootstrap})
    wanted = ConsumerGroupTopicPartitions("dashboard", [TopicPartition(topic, p) for p in (0, 1)])
    result = admin.list_consumer_group_offsets([wanted])["dashboard"].result(timeout=30)
    assert {tp.partition: tp.offset for tp in result.topic_partitions} == {0: 30, 1: 30}
