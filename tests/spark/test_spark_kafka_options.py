"""Spark's Kafka-source options added for issue 18, and the raw-batch read path behind them:
timestamps, minPartitions, groupIdPrefix, minOffsetsPerTrigger / maxTriggerDelay, unknown
options, compressed batches and aborted transactions, against a real SparkSession and broker."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from rlog.spark.options import consumer_config, parse_read_options
from rlog.spark.records import kafka_schema
from rlog.spark.stream_reader import ReadMinRows, RlogStreamReader
from support import clients

pytestmark = pytest.mark.integration

BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def timed(spark_cluster) -> str:
    """Topic `timed`: 2 partitions x 10 records; record i has timestamp BASE_MS + i s."""
    clients.create_topic(spark_cluster.bootstrap, "timed", partitions=2)
    producer = Producer({"bootstrap.servers": spark_cluster.bootstrap, "linger.ms": 5})
    for partition in range(2):
        for i in range(10):
            producer.produce(
                "timed", value=b"%d" % i, partition=partition, timestamp=BASE_MS + i * 1000
            )
    assert producer.flush(30) == 0
    return "timed"


def read(spark, bootstrap: str, **options: str):
    reader = spark.read.format("rlog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def offsets(frame) -> list[tuple[int, int]]:
    return sorted(
        (row.partition, row.offset) for row in frame.select("partition", "offset").collect()
    )


def test_starting_and_ending_by_timestamp(spark, spark_cluster, timed) -> None:
    by_partition = json.dumps({timed: {"0": BASE_MS + 3000, "1": BASE_MS + 7000}})
    frame = read(
        spark, spark_cluster.bootstrap, subscribe=timed, startingOffsetsByTimestamp=by_partition
    )
    assert offsets(frame) == [(0, o) for o in range(3, 10)] + [(1, o) for o in range(7, 10)]
    # endingTimestamp: up to (not including) the first record at or after it.
    frame = read(
        spark,
        spark_cluster.bootstrap,
        subscribe=timed,
        startingTimestamp=str(BASE_MS + 2000),
        endingTimestamp=str(BASE_MS + 5000),
    )
    assert offsets(frame) == [(p, o) for p in (0, 1) for o in (2, 3, 4)]
    ending = json.dumps({timed: {"0": BASE_MS + 1000, "1": BASE_MS + 99_000}})
    frame = read(spark, spark_cluster.bootstrap, subscribe=timed, endingOffsetsByTimestamp=ending)
    # No record of partition 1 reaches its ending timestamp: it reads to the latest offset.
    assert offsets(frame) == [(0, 0)] + [(1, o) for o in range(10)]


def test_timestamp_strategy_and_missing_partitions(spark, spark_cluster, timed) -> None:
    late = str(BASE_MS + 60_000)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy=latest"):
        read(spark, spark_cluster.bootstrap, subscribe=timed, startingTimestamp=late).collect()
    frame = read(
        spark,
        spark_cluster.bootstrap,
        subscribe=timed,
        startingTimestamp=late,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert frame.count() == 0
    only_zero = json.dumps({timed: {"0": BASE_MS}})
    with pytest.raises(Exception, match="missing: timed-1"):
        read(
            spark, spark_cluster.bootstrap, subscribe=timed, startingOffsetsByTimestamp=only_zero
        ).collect()


def test_min_partitions_splits_the_ranges(spark, spark_cluster, timed) -> None:
    frame = read(spark, spark_cluster.bootstrap, subscribe=timed, minPartitions="5")
    assert frame.rdd.getNumPartitions() >= 5
    assert offsets(frame) == [(p, o) for p in (0, 1) for o in range(10)]


def test_group_id_prefix(spark, spark_cluster, timed) -> None:
    options = {"kafka.bootstrap.servers": spark_cluster.bootstrap, "subscribe": timed}
    parsed = parse_read_options({**options, "groupIdPrefix": "dashboards"}, streaming=False)
    assert str(
        consumer_config(parsed.client_config, parsed.group_id_prefix)["group.id"]
    ).startswith("dashboards-")
    default = parse_read_options(options, streaming=False)
    assert str(
        consumer_config(default.client_config, default.group_id_prefix)["group.id"]
    ).startswith("spark-kafka-source-")
    frame = read(spark, spark_cluster.bootstrap, subscribe=timed, groupIdPrefix="dashboards")
    assert frame.count() == 20


def test_unknown_and_misplaced_options_are_errors(spark, spark_cluster, timed) -> None:
    with pytest.raises(Exception, match=r"unknown option.*'startingoffset'.*startingOffsets"):
        read(spark, spark_cluster.bootstrap, subscribe=timed, startingOffset="earliest").collect()
    with pytest.raises(Exception, match="'maxOffsetsPerTrigger' is for streaming queries only"):
        read(spark, spark_cluster.bootstrap, subscribe=timed, maxOffsetsPerTrigger="5").collect()


def min_offsets_readers(bootstrap: str, topic: str) -> dict[str, RlogStreamReader]:
    """minOffsetsPerTrigger=25 over 20 records: patient (maxTriggerDelay 15m), impatient (0ms),
    and one that needs only 20."""
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "minOffsetsPerTrigger": "25",
    }
    variants = {
        "patient": options,
        "impatient": {**options, "maxTriggerDelay": "0ms"},
        "enough": {**options, "minOffsetsPerTrigger": "20"},
    }
    return {
        name: RlogStreamReader(parse_read_options(each, streaming=True), kafka_schema(False))
        for name, each in variants.items()
    }


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(spark_cluster, timed) -> None:
    """From the options, as under PySpark 4.0/4.1, which pass no read limit."""
    readers = min_offsets_readers(spark_cluster.bootstrap, timed)
    start = readers["patient"].initialOffset()
    end = {timed: {"0": 10, "1": 10}}
    assert readers["patient"].latestOffset(start, None) == start  # 20 < 25: no batch yet
    assert readers["patient"].latestOffset() == start  # pyspark 4.0's call: no start, no limit
    assert readers["impatient"].latestOffset(start, None) == end
    assert readers["impatient"].latestOffset() == end
    assert readers["enough"].latestOffset(start, None) == end


@pytest.mark.skipif(
    ReadMinRows is None, reason="Spark's read limits (ReadMinRows) reach Python sources in 4.2+"
)
def test_min_offsets_per_trigger_as_spark_read_limit(spark_cluster, timed) -> None:
    """PySpark 4.2+: minOffsetsPerTrigger alone comes back from Spark as ReadMinRows."""
    readers = min_offsets_readers(spark_cluster.bootstrap, timed)
    start = readers["patient"].initialOffset()
    end = {timed: {"0": 10, "1": 10}}
    assert readers["patient"].getDefaultReadLimit() == ReadMinRows(25)
    assert readers["patient"].latestOffset(start, ReadMinRows(25)) == start  # 20 < 25
    assert readers["impatient"].latestOffset(start, ReadMinRows(25)) == end
    assert readers["enough"].latestOffset(start, ReadMinRows(20)) == end


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(spark, spark_cluster, codec) -> None:
    topic = f"compressed-{codec}"
    clients.create_topic(spark_cluster.bootstrap, topic)
    producer = Producer(
        {"bootstrap.servers": spark_cluster.bootstrap, "compression.type": codec, "linger.ms": 20}
    )
    for i in range(500):
        producer.produce(topic, key=None if i % 7 == 0 else b"k%d" % i, value=b"v%d" % i * 3)
    assert producer.flush(30) == 0
    rows = read(spark, spark_cluster.bootstrap, subscribe=topic).collect()
    assert sorted((r.offset, r.key, r.value) for r in rows) == [
        (i, None if i % 7 == 0 else b"k%d" % i, b"v%d" % i * 3) for i in range(500)
    ]


def test_aborted_transactions_are_not_read_committed(spark, spark_cluster) -> None:
    topic = "with-aborts"
    clients.create_topic(spark_cluster.bootstrap, topic)
    producer = Producer(
        {"bootstrap.servers": spark_cluster.bootstrap, "transactional.id": "spark-aborts"}
    )
    producer.init_transactions(30)
    for label, commit in (("a", True), ("b", False), ("c", True)):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=b"%s%d" % (label.encode(), i))
        assert producer.flush(30) == 0  # the aborted records reach the log, not just the queue
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed = read(spark, spark_cluster.bootstrap, subscribe=topic)
    assert sorted(r.value for r in committed.collect()) == [
        b"a0",
        b"a1",
        b"a2",
        b"c0",
        b"c1",
        b"c2",
    ]
    everything = read(
        spark,
        spark_cluster.bootstrap,
        subscribe=topic,
        **{"kafka.isolation.level": "read_uncommitted"},
    )
    assert len(everything.collect()) == 9
