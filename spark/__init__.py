"""PySpark data source `rlog`, a drop-in for Spark's `format("kafka")`.

    from rlog.spark import register
    register(spark)
    df = (spark.read.format("rlog").option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())
    df.write.format("rlog").mode("append").option("kafka.bootstrap.servers", "...")
      .option("topic", "out").save()

Options are Spark's Kafka source's (the table in spark/README.md: subscribe, subscribePattern,
assign, starting/ending offsets and timestamps, maxOffsetsPerTrigger, minOffsetsPerTrigger,
maxTriggerDelay, minPartitions, failOnDataLoss, includeHeaders, groupIdPrefix, kafka.*; an unknown
option is an error), plus one of rlog's own: a streaming read with `.option("commitGroup",
"dashboard")` commits each finished batch's end offsets to that consumer group, so `rlog group
describe dashboard` and the TUI show the query's lag. The checkpoint stays the source of truth: the
group is only a view. A streaming write with `.option("exactlyOnce", "true")` writes each task of
each micro-batch in one Kafka transaction and skips batches a restarted query replays (writer.py;
`transactionalIdPrefix`, `markerTopic`), so read_committed consumers see every row once.

Writes take Spark's Kafka-sink columns: `value` (string or binary), and optionally `key`,
`topic` (option `topic` overrides it, as in Spark), `partition` and `headers`. Each task gets
Spark's Arrow record batches (PySpark's Arrow writers; Rows where PySpark has none) and hands
their records to an idempotent acks=all confluent-kafka producer a column at a time (writer.py).

Python data sources accept only the append and overwrite save modes, so batch writes need
`.mode("append")` (Spark's Kafka sink also accepts the default ErrorIfExists).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .source import RlogDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RlogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make `format("rlog")` available in this session."""
    spark.dataSource.register(RlogDataSource)
