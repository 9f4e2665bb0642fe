"""Batch read through format("rlog") with Spark's Kafka-source options and schema."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from support import clients
from support.clients import Message

pytestmark = pytest.mark.integration

BASE_MS = 1_700_000_000_000


def produce_numbered(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(partitions):
        for i in range(per_partition):
            producer.produce(
                topic,
                key=b"k%d" % i,
                value=b"%d-%d" % (partition, i),
                partition=partition,
                timestamp=BASE_MS + i * 1000,
                headers=[("h", b"v%d" % i), ("n", None)] if i % 2 == 0 else None,
            )
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def numbered(spark_cluster) -> str:
    """Topic `numbered`: 3 partitions x 10 records, record i has timestamp BASE_MS + i s."""
    clients.create_topic(spark_cluster.bootstrap, "numbered", partitions=3)
    produce_numbered(spark_cluster.bootstrap, "numbered", 3, 10)
    return "numbered"


def read(spark, bootstrap: str, **options: str):
    reader = spark.read.format("rlog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_schema_is_sparks_kafka_schema(spark, spark_cluster, numbered) -> None:
    frame = read(spark, spark_cluster.bootstrap, subscribe=numbered)
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    with_headers = read(spark, spark_cluster.bootstrap, subscribe=numbered, includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )


def test_batch_read_returns_every_record_once(spark, spark_cluster, numbered) -> None:
    frame = read(spark, spark_cluster.bootstrap, subscribe=numbered, includeHeaders="true")
    assert frame.rdd.getNumPartitions() == 3  # one input partition per topic-partition
    rows = frame.orderBy("partition", "offset").collect()
    assert len(rows) == 30
    first = rows[0]
    assert (first.key, first.value, first.topic, first.partition, first.offset) == (
        b"k0", b"0-0", "numbered", 0, 0,
    )  # fmt: skip
    assert int(first.timestamp.timestamp() * 1000) == BASE_MS
    assert first.timestampType == 0  # CreateTime
    assert [(h.key, h.value) for h in first.headers] == [("h", b"v0"), ("n", None)]
    assert rows[1].headers == []
    for partition in range(3):
        got = [r for r in rows if r.partition == partition]
        assert [r.offset for r in got] == list(range(10))
        assert [r.value for r in got] == [b"%d-%d" % (partition, i) for i in range(10)]


def test_bare_bootstrap_servers_and_kafka_passthrough(spark, spark_cluster, numbered) -> None:
    frame = (
        spark.read.format("rlog")
        .option("bootstrap.servers", spark_cluster.bootstrap)
        .option("kafka.client.id", "spark-test")
        .option("kafka.isolation.level", "read_uncommitted")
        .option("subscribe", numbered)
        .load()
    )
    assert frame.count() == 30


def test_offsets_json_with_earliest_and_latest_sentinels(spark, spark_cluster, numbered) -> None:
    starting = json.dumps({numbered: {"0": 2, "1": -2, "2": 7}})
    ending = json.dumps({numbered: {"0": 5, "1": -1, "2": -1}})
    frame = read(
        spark, spark_cluster.bootstrap, subscribe=numbered,
        startingOffsets=starting, endingOffsets=ending,
    )  # fmt: skip
    got = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    expected = [(0, o) for o in range(2, 5)] + [(1, o) for o in range(10)]
    expected += [(2, o) for o in range(7, 10)]
    assert got == expected


def test_starting_timestamp(spark, spark_cluster, numbered) -> None:
    frame = read(
        spark, spark_cluster.bootstrap, subscribe=numbered, startingTimestamp=str(BASE_MS + 6500)
    )
    got = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    assert got == [(p, o) for p in range(3) for o in range(7, 10)]


def test_max_records_per_partition_splits_ranges(spark, spark_cluster, numbered) -> None:
    frame = read(spark, spark_cluster.bootstrap, subscribe=numbered, maxRecordsPerPartition="4")
    assert frame.rdd.getNumPartitions() == 9  # 10 records -> 4 + 4 + 2, three partitions
    offsets = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    assert offsets == [(p, o) for p in range(3) for o in range(10)]


def test_subscribe_pattern_and_assign(spark, spark_cluster, numbered) -> None:
    clients.create_topic(spark_cluster.bootstrap, "numbered-extra", partitions=1)
    clients.confluent_produce(
        spark_cluster.bootstrap, "numbered-extra", [Message(None, b"x", (), 0, -1)]
    )
    by_pattern = read(spark, spark_cluster.bootstrap, subscribePattern="numbered.*")
    assert sorted(r.topic for r in by_pattern.select("topic").distinct().collect()) == [
        "numbered", "numbered-extra",
    ]  # fmt: skip
    assert by_pattern.count() == 31
    assigned = read(spark, spark_cluster.bootstrap, assign=json.dumps({numbered: [0, 2]}))
    assert sorted(r.partition for r in assigned.select("partition").distinct().collect()) == [0, 2]
    assert assigned.count() == 20


def test_empty_topic_reads_nothing(spark, spark_cluster) -> None:
    clients.create_topic(spark_cluster.bootstrap, "empty-read", partitions=2)
    assert read(spark, spark_cluster.bootstrap, subscribe="empty-read").count() == 0


def test_bad_options_are_reported(spark, spark_cluster) -> None:
    with pytest.raises(Exception, match=r"bootstrap\.servers"):
        spark.read.format("rlog").option("subscribe", "x").load().collect()
    with pytest.raises(Exception, match="exactly one of"):
        read(spark, spark_cluster.bootstrap).collect()
    with pytest.raises(Exception, match="not allowed for batch"):
        read(spark, spark_cluster.bootstrap, subscribe="x", startingOffsets="latest").collect()
