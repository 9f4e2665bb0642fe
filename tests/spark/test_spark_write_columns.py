"""The sink's columns, as Spark's Kafka sink takes them (topic, key, value, headers, partition),
through the Arrow writer PySpark 4.x uses and through the Row writer kept for PySpark without
Arrow writers; and the errors for data the sink cannot write."""

from __future__ import annotations

import sys
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from rlog.spark.source import RlogDataSource
from rlog.spark.writer import RlogRowStreamWriter, RlogRowWriter
from support import clients

pytestmark = pytest.mark.integration

HEADERS = "array<struct<key:string,value:binary>>"


class RowPathSource(RlogDataSource):
    """`format("rlog_rows")`: the rlog sink forced onto its Row writers (the PySpark 4.0
    streaming path), so the same columns can be checked there."""

    @classmethod
    def name(cls) -> str:
        return "rlog_rows"

    def writer(self, schema, overwrite):  # type: ignore[no-untyped-def]
        from rlog.spark.options import parse_write_options

        return RlogRowWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema, overwrite):  # type: ignore[no-untyped-def]
        from rlog.spark.options import parse_write_options

        return RlogRowStreamWriter(parse_write_options(self.options), schema)


@pytest.fixture(scope="module")
def row_path(spark) -> str:
    # Spark's Python workers cannot import this test module: send the class by value.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(RowPathSource)
    return "rlog_rows"


@pytest.fixture(params=["rlog", "rows"])
def sink(request, row_path) -> str:
    """The Arrow path (`rlog` under PySpark 4.x) and the Row path."""
    return "rlog" if request.param == "rlog" else row_path


def write(frame, sink: str, bootstrap: str, **options: str) -> None:
    writer = frame.write.format(sink).mode("append").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def topics(bootstrap: str, *names: str, partitions: int = 1) -> list[str]:
    """Fresh topics, one name per call and path."""
    made = [f"{name}-{uuid.uuid4().hex[:6]}" for name in names]
    for topic in made:
        clients.create_topic(bootstrap, topic, partitions=partitions)
    return made


def test_the_arrow_writer_is_used_where_pyspark_has_it() -> None:
    from pyspark.sql import datasource
    from pyspark.sql.types import BinaryType, StructField, StructType

    from rlog.spark.options import parse_write_options
    from rlog.spark.writer import batch_writer, stream_writer

    options = parse_write_options({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})
    schema = StructType([StructField("value", BinaryType())])
    if hasattr(datasource, "DataSourceArrowWriter"):
        assert isinstance(batch_writer(options, schema), datasource.DataSourceArrowWriter)
    if hasattr(datasource, "DataSourceStreamArrowWriter"):
        assert isinstance(stream_writer(options, schema), datasource.DataSourceStreamArrowWriter)


def records_in(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rlog-test-marks"})
    try:
        marks = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)
            for p in range(partitions)
        ]
    finally:
        consumer.close()
    return sum(high - low for low, high in marks)


def test_topic_column_string_columns_partition_and_headers(spark, spark_cluster, sink) -> None:
    bootstrap = spark_cluster.bootstrap
    first, second = topics(bootstrap, "cols-first", "cols-second", partitions=3)
    frame = spark.createDataFrame(
        [
            ("k0", "v0", first, 2, [("h", b"x"), ("n", None)]),
            (None, "v1", second, 1, None),  # null key
            ("k2", "v2", first, 2, []),
            ("ké", "vé", second, None, None),  # null partition: the partitioner's
        ],
        f"key string, value string, topic string, partition int, headers {HEADERS}",
    )
    write(frame, sink, bootstrap)  # no option 'topic': each row goes to its column's topic
    got = clients.confluent_consume(bootstrap, first, [0, 1, 2], 2)
    assert sorted((m.key, m.value, m.partition, m.headers) for m in got) == [
        (b"k0", b"v0", 2, (("h", b"x"), ("n", None))),
        (b"k2", b"v2", 2, ()),
    ]
    got = clients.confluent_consume(bootstrap, second, [0, 1, 2], 2)
    assert sorted((m.key or b"", m.value, m.headers) for m in got) == [
        (b"", b"v1", ()),
        ("ké".encode(), "vé".encode(), ()),
    ]
    assert [m.partition for m in got if m.value == b"v1"] == [1]
    assert records_in(bootstrap, first, 3) == 2 and records_in(bootstrap, second, 3) == 2


def test_binary_columns_and_the_topic_option_over_the_column(spark, spark_cluster, sink) -> None:
    bootstrap = spark_cluster.bootstrap
    topic, decoy = topics(bootstrap, "cols-binary", "cols-decoy", partitions=2)
    rows = [
        (None if i % 3 == 0 else b"k%d" % i, b"\x00v%d\xff" % i, None if i % 5 == 0 else decoy)
        for i in range(30)
    ]
    frame = spark.createDataFrame(rows, "key binary, value binary, topic string").repartition(2)
    write(frame, sink, bootstrap, topic=topic)  # the option overrides the column, as in Spark
    got = clients.confluent_consume(bootstrap, topic, [0, 1], 30)
    assert sorted((m.key or b"", m.value) for m in got) == sorted((k or b"", v) for k, v, _ in rows)
    assert records_in(bootstrap, decoy, 2) == 0
    # No partition column: a key's records all go where librdkafka's partitioner puts them.
    for key in (b"k1", b"k2"):
        assert len({m.partition for m in got if m.key == key}) == 1


def test_a_null_topic_without_the_option_is_an_error(spark, spark_cluster, sink) -> None:
    (topic,) = topics(spark_cluster.bootstrap, "cols-null-topic")
    frame = spark.createDataFrame([("a", topic), ("b", None)], "value string, topic string")
    with pytest.raises(Exception, match="a row has a null 'topic' and no option 'topic' is set"):
        write(frame.coalesce(1), sink, spark_cluster.bootstrap)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [
        ("key int, value string", "column 'key' must be string or binary, got int"),
        ("value array<int>", "column 'value' must be string or binary, got array<int>"),
        ("value string, partition string", "column 'partition' must be int, got string"),
        ("value string, topic binary", "column 'topic' must be string, got binary"),
        ("value string, headers map<string,binary>", "column 'headers' must be array<struct"),
        ("key string", r"needs a 'value' column; the data has \['key'\]"),
    ],
)
def test_columns_spark_cannot_write_are_errors(spark, spark_cluster, ddl, message) -> None:
    frame = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        write(frame, "rlog", spark_cluster.bootstrap, topic="never-written")


def test_a_stream_through_the_row_writer(spark, spark_cluster, row_path, tmp_path) -> None:
    """The streaming Row writer, which PySpark 4.0 uses (it has no Arrow stream writer)."""
    bootstrap = spark_cluster.bootstrap
    source, sink = topics(bootstrap, "rows-stream-in", "rows-stream-out")
    clients.confluent_produce(
        bootstrap, source, [clients.Message(b"k%d" % i, b"%d" % i, (), 0, -1) for i in range(10)]
    )
    query = (
        spark.readStream.format("rlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "partition")
        .writeStream.format(row_path)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    got = clients.confluent_consume(bootstrap, sink, [0], 10)
    assert sorted((m.key, m.value) for m in got) == sorted(
        (b"k%d" % i, b"%d" % i) for i in range(10)
    )
