"""Read options of spark/README.md's table that no other test pinned down against a real
SparkSession and cluster in a way that fails when the option is ignored: failOnDataLoss both
ways, kafkaConsumer.pollTimeoutMs, minOffsetsPerTrigger with maxTriggerDelay's timing, the group
ids groupIdPrefix gives, fetchOffset.* (accepted), maxRecordsPerPartition before minPartitions,
subscribePattern never matching internal topics, and endingOffsets refused in streaming reads.

Where the other options are tested:
- test_spark_read.py: assign, subscribe, subscribePattern, startingOffsets and endingOffsets
  (JSON, sentinels, `latest` refused for batch), startingTimestamp, maxRecordsPerPartition,
  includeHeaders, bare bootstrap.servers;
- test_spark_kafka_options.py: startingOffsetsByTimestamp, endingOffsetsByTimestamp,
  endingTimestamp, startingOffsetsByTimestampStrategy, minPartitions, unknown options,
  kafka.isolation.level;
- test_spark_stream.py: maxOffsetsPerTrigger, the streaming default `latest`, commitGroup.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from rlog.spark import planning
from rlog.spark.batch_reader import RlogBatchReader
from rlog.spark.options import parse_read_options
from rlog.spark.records import kafka_schema
from rlog.spark.stream_reader import RlogStreamReader
from support import clients
from support.clients import Message

pytestmark = pytest.mark.integration


def fresh_topic(bootstrap: str, name: str, partitions: int = 1, records: int = 0) -> str:
    """A new topic with `records` records spread round-robin over its partitions."""
    topic = f"{name}-{uuid.uuid4().hex[:6]}"
    clients.create_topic(bootstrap, topic, partitions=partitions)
    if records:
        messages = [Message(None, b"%d" % i, (), i % partitions, -1) for i in range(records)]
        clients.confluent_produce(bootstrap, topic, messages)
    return topic


def read(spark, bootstrap: str, **options: str):
    reader = spark.read.format("rlog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


@pytest.fixture(scope="module")
def each(spark_cluster) -> str:
    """3 partitions x 10 records."""
    return fresh_topic(spark_cluster.bootstrap, "each", partitions=3, records=30)


def test_fail_on_data_loss_fails_by_default_and_reads_on_when_false(spark, spark_cluster) -> None:
    bootstrap = spark_cluster.bootstrap
    topic = fresh_topic(bootstrap, "head-deleted", records=10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 4)]).values():
        future.result(timeout=30)
    from_zero = json.dumps({topic: {"0": 0}})  # offsets 0..3 are gone
    with pytest.raises(Exception, match=r"records before offset 4 are gone.*failOnDataLoss=false"):
        read(spark, bootstrap, subscribe=topic, startingOffsets=from_zero).collect()
    frame = read(
        spark, bootstrap, subscribe=topic, startingOffsets=from_zero, failOnDataLoss="false"
    )
    assert sorted(r.offset for r in frame.select("offset").collect()) == list(range(4, 10))


def test_poll_timeout_bounds_a_task_waiting_for_records(spark, spark_cluster) -> None:
    """An open transaction holds read_committed readers before its first record: the task waits
    kafkaConsumer.pollTimeoutMs (1.5 s here; 120 s if the option were ignored), then fails."""
    bootstrap = spark_cluster.bootstrap
    topic = fresh_topic(bootstrap, "open-txn")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    try:
        started = time.monotonic()
        with pytest.raises(Exception, match=r"kafkaConsumer\.pollTimeoutMs=1500.*open"):
            read(
                spark,
                bootstrap,
                subscribe=topic,
                endingOffsets=json.dumps({topic: {"0": 3}}),
                **{"kafkaConsumer.pollTimeoutMs": "1500"},
            ).collect()
        assert time.monotonic() - started < 60
    finally:
        producer.abort_transaction(30)


def first_batch_with_rows(query, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        done = [p for p in query.recentProgress if p["numInputRows"] > 0]
        if done:
            return done[0]
        time.sleep(0.1)
    raise AssertionError(f"no micro-batch with rows within {timeout_s} s")


def progress_time(progress: dict) -> float:
    """When the trigger of a progress report started, as time.time()."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def test_min_offsets_per_trigger_waits_no_longer_than_max_trigger_delay(
    spark, spark_cluster, tmp_path
) -> None:
    bootstrap = spark_cluster.bootstrap
    topic = fresh_topic(bootstrap, "trigger-delay", records=5)
    started = time.time()
    query = (
        spark.readStream.format("rlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "100")
        .option("maxTriggerDelay", "4s")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="250 milliseconds")
        .start()
    )
    try:
        # 5 < 100 records: no batch until 4 s after the reader started (it starts after
        # `started`), then one with all 5.
        first = first_batch_with_rows(query, 60)
        assert first["numInputRows"] == 5
        assert progress_time(first) - started >= 3.5, first["timestamp"]
        # 100 new records reach the minimum: the next trigger takes them without waiting.
        batches = len(query.recentProgress)
        messages = [Message(None, b"%d" % i, (), 0, -1) for i in range(100)]
        clients.confluent_produce(bootstrap, topic, messages)
        produced = time.time()
        deadline = time.monotonic() + 30
        while not [p for p in query.recentProgress[batches:] if p["numInputRows"] == 100]:
            assert time.monotonic() < deadline, "no batch for the 100 new records"
            time.sleep(0.1)
        second = next(p for p in query.recentProgress[batches:] if p["numInputRows"] == 100)
        assert progress_time(second) - produced < 3.0, second["timestamp"]
    finally:
        query.stop()


@pytest.fixture
def planning_group_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The group.id of every consumer the source's planning creates in this process (real
    consumers on the real cluster, only watched)."""
    seen: list[str] = []

    class WatchedConsumer(planning.Consumer):  # type: ignore[misc,name-defined]
        def __init__(self, config: dict) -> None:
            seen.append(str(config["group.id"]))
            super().__init__(config)

    monkeypatch.setattr(planning, "Consumer", WatchedConsumer)
    yield seen


def test_group_id_prefix_names_the_sources_consumers(
    spark, spark_cluster, each, planning_group_ids
) -> None:
    """The generated group is named in FindCoordinator requests only: it is never joined and
    nothing is committed to it, so the broker keeps nothing of it. What the option changes is the
    group.id of every consumer planning makes, which is what this checks, and that Spark takes
    the option."""
    options = {"kafka.bootstrap.servers": spark_cluster.bootstrap, "subscribe": each}
    RlogBatchReader(
        parse_read_options({**options, "groupIdPrefix": "dashboards"}, streaming=False),
        kafka_schema(False),
    ).partitions()
    stream = RlogStreamReader(
        parse_read_options({**options, "groupIdPrefix": "dashboards"}, streaming=True),
        kafka_schema(False),
    )
    stream.latestOffset(stream.initialOffset(), None)
    assert len(planning_group_ids) >= 3
    assert all(g.startswith("dashboards-") for g in planning_group_ids), planning_group_ids
    assert len(set(planning_group_ids)) == len(planning_group_ids)  # a fresh uuid each time
    planning_group_ids.clear()
    RlogBatchReader(parse_read_options(options, streaming=False), kafka_schema(False)).partitions()
    assert [g.rsplit("-", 1)[0] for g in planning_group_ids] == ["spark-kafka-source"]
    planning_group_ids.clear()
    fixed = {**options, "groupIdPrefix": "dashboards", "kafka.group.id": "mine"}
    RlogBatchReader(parse_read_options(fixed, streaming=False), kafka_schema(False)).partitions()
    assert planning_group_ids == ["mine"]  # kafka.group.id wins, as in Spark
    assert read(spark, spark_cluster.bootstrap, subscribe=each, groupIdPrefix="x").count() == 30


def test_fetch_offset_options_are_accepted(spark, spark_cluster, each) -> None:
    """Spark's offset-fetch retry options: accepted (a typo is an error), no effect."""
    frame = read(
        spark,
        spark_cluster.bootstrap,
        subscribe=each,
        **{"fetchOffset.numRetries": "5", "fetchOffset.retryIntervalMs": "20"},
    )
    assert frame.count() == 30
    with pytest.raises(Exception, match=r"unknown option.*'fetchoffset\.numretry'"):
        read(
            spark, spark_cluster.bootstrap, subscribe=each, **{"fetchOffset.numRetry": "5"}
        ).collect()


def test_max_records_per_partition_then_min_partitions(spark, spark_cluster, each) -> None:
    # 10 records per topic-partition: 4 + 4 + 2 each, 9 pieces; minPartitions 12 cuts again.
    capped = read(spark, spark_cluster.bootstrap, subscribe=each, maxRecordsPerPartition="4")
    assert capped.rdd.getNumPartitions() == 9
    both = read(
        spark,
        spark_cluster.bootstrap,
        subscribe=each,
        maxRecordsPerPartition="4",
        minPartitions="12",
    )
    assert both.rdd.getNumPartitions() >= 12
    assert sorted(r.offset for r in both.select("offset").collect()) == sorted(list(range(10)) * 3)


def test_subscribe_pattern_never_matches_internal_topics(spark, spark_cluster, each) -> None:
    from confluent_kafka import Consumer

    # A committed offset makes sure __consumer_offsets exists.
    committer = Consumer({"bootstrap.servers": spark_cluster.bootstrap, "group.id": "pattern"})
    try:
        committer.commit(offsets=[TopicPartition(each, 0, 1)], asynchronous=False)
    finally:
        committer.close()
    admin = AdminClient({"bootstrap.servers": spark_cluster.bootstrap})
    assert "__consumer_offsets" in admin.list_topics(timeout=30).topics
    frame = read(spark, spark_cluster.bootstrap, subscribePattern=f"__consumer_offsets|{each}")
    assert [r.topic for r in frame.select("topic").distinct().collect()] == [each]


def test_ending_offsets_is_refused_in_streaming_reads(spark, spark_cluster, each, tmp_path) -> None:
    with pytest.raises(Exception, match="'endingOffsets' is for batch queries only"):
        query = (
            spark.readStream.format("rlog")
            .option("kafka.bootstrap.servers", spark_cluster.bootstrap)
            .option("subscribe", each)
            .option("endingOffsets", "latest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            query.awaitTermination(60)
        finally:
            query.stop()
