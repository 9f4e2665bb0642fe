"""Batch write through format("rlog") with Spark's Kafka-sink columns."""

from __future__ import annotations

import pytest

from support import clients

pytestmark = pytest.mark.integration


def test_write_with_topic_option_then_read_back(spark, spark_cluster) -> None:
    clients.create_topic(spark_cluster.bootstrap, "written", partitions=2)
    rows = [(f"k{i}", f"v{i}", i % 2) for i in range(50)]
    frame = spark.createDataFrame(rows, "key string, value string, partition int")
    (
        frame.write.format("rlog")
        .mode("append")
        .option("kafka.bootstrap.servers", spark_cluster.bootstrap)
        .option("topic", "written")
        .save()
    )
    read = clients.confluent_consume(spark_cluster.bootstrap, "written", [0, 1], 50)
    assert sorted((m.key, m.value, m.partition) for m in read) == sorted(
        (k.encode(), v.encode(), p) for k, v, p in rows
    )


def test_topic_option_overrides_the_column_and_headers_are_written(spark, spark_cluster) -> None:
    clients.create_topic(spark_cluster.bootstrap, "by-column")
    clients.create_topic(spark_cluster.bootstrap, "by-option")
    frame = spark.createDataFrame(
        [(b"a", b"1", "by-column", [("h", b"x")]), (None, b"2", None, None)],
        "key binary, value binary, topic string, headers array<struct<key:string,value:binary>>",
    )
    # As Spark's Kafka sink: option 'topic' overrides the data's 'topic' column.
    (
        frame.write.format("rlog")
        .mode("append")
        .option("kafka.bootstrap.servers", spark_cluster.bootstrap)
        .option("topic", "by-option")
        .save()
    )
    by_option = clients.confluent_consume(spark_cluster.bootstrap, "by-option", [0], 2)
    assert sorted((m.key or b"", m.value, m.headers) for m in by_option) == [
        (b"", b"2", ()),
        (b"a", b"1", (("h", b"x"),)),
    ]
    # Without the option, the column names each row's topic.
    frame.where("topic IS NOT NULL").write.format("rlog").mode("append").option(
        "kafka.bootstrap.servers", spark_cluster.bootstrap
    ).save()
    by_column = clients.confluent_consume(spark_cluster.bootstrap, "by-column", [0], 1)
    assert [(m.key, m.value, m.headers) for m in by_column] == [(b"a", b"1", (("h", b"x"),))]


def test_no_topic_anywhere_is_a_clear_error(spark, spark_cluster) -> None:
    frame = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="no topic to write to"):
        frame.write.format("rlog").mode("append").option(
            "kafka.bootstrap.servers", spark_cluster.bootstrap
        ).save()


def test_a_task_that_cannot_deliver_fails_the_write(spark) -> None:
    frame = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match=r"not written|undelivered"):
        (
            frame.write.format("rlog")
            .mode("append")
            .option("kafka.bootstrap.servers", "127.0.0.1:1")  # nothing listens there
            .option("kafka.message.timeout.ms", "1500")
            .option("topic", "nowhere")
            .save()
        )
