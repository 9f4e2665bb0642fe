"""Streaming pipeline demo: raw click events in, per-minute counts out, exactly checkable.

Run against a 3-broker cluster (use the broker addresses `rlog cluster up` prints, and create
`events` and `counts` with replication factor 3 to survive a broker loss):

    rlog cluster up --brokers 3
    python examples/pipeline.py --bootstrap 127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094 \
        --generate 5000 --seed 7
    python examples/pipeline.py --bootstrap ... --checkpoint /tmp/rlog-pipeline --available-now
    python examples/pipeline.py --bootstrap ... --verify   # prints OK if counts == batch

The job reads topic `events` (values like `{"user": "u3", "action": "click", "ts":
1700000000123}`) through `format("rlog")`, counts events per (action, event-time minute) and
writes the counts to topic `counts` with a checkpoint, in output mode "update" (through
`foreachBatch` and a batch `format("rlog")` write, since Python sinks take append mode only).

Output semantics: `counts` is a changelog. Each record has key `action|minute` (minute as an
ISO UTC timestamp) and value `{"action", "minute", "count"}`; a micro-batch emits only the keys
it changed, and a batch replayed after a failure re-emits the same values, so the last record
per key is the answer. `--verify` compares that with a batch recomputation over `events`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

ACTIONS = ("click", "view", "buy", "scroll")
EVENT_SCHEMA = "user STRING, action STRING, ts LONG"


def generate_events(count: int, seed: int, start_ms: int = 1_700_000_000_000) -> list[bytes]:
    """`count` JSON events over ~10 minutes of event time, reproducible from `seed`."""
    rng = random.Random(seed)
    return [
        json.dumps(
            {
                "user": f"u{rng.randrange(50)}",
                "action": rng.choice(ACTIONS),
                "ts": start_ms + rng.randrange(600_000),
            }
        ).encode()
        for _ in range(count)
    ]


def produce_events(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Produce with acks=all and idempotence, so a broker failure neither loses nor repeats."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda e, _m: e and errors.append(e))
        producer.poll(0)
    if producer.flush(60) != 0 or errors:
        raise RuntimeError(f"undelivered events: {errors[:5]}")


def parse_counts(events: DataFrame) -> DataFrame:
    """Kafka-schema rows -> (action, minute, count); shared by the stream and the batch check."""
    from pyspark.sql import functions as F

    parsed = events.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    return (
        parsed.select(
            F.col("e.action").alias("action"),
            F.date_trunc("minute", F.timestamp_millis(F.col("e.ts"))).alias("minute"),
        )
        .groupBy("action", "minute")
        .count()
    )


def as_records(counts: DataFrame) -> DataFrame:
    """(action, minute, count) -> key/value records for the sink."""
    from pyspark.sql import functions as F

    minute = F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'")
    return counts.select(
        F.concat_ws("|", "action", minute).alias("key"),
        F.to_json(F.struct("action", minute.alias("minute"), "count")).alias("value"),
    )


def build_query(
    spark: SparkSession,
    bootstrap: str,
    checkpoint: str,
    source: str = "events",
    sink: str = "counts",
    available_now: bool = False,
    processing_time: str = "2 seconds",
    max_offsets_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the streaming job; the checkpoint makes restarts resume without loss."""
    reader = (
        spark.readStream.format("rlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
    )
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))

    def write_batch(changed: DataFrame, _batch_id: int) -> None:
        # A replayed batch rewrites the same values, which is harmless for a changelog.
        (
            as_records(changed)
            .write.format("rlog")
            .mode("append")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .save()
        )

    # Python data sources take only append-mode streams, so the update-mode aggregate reaches
    # the sink through foreachBatch and a batch write of just the keys that changed.
    writer = (
        parse_counts(reader.load())
        .writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def batch_counts(spark: SparkSession, bootstrap: str, source: str = "events") -> dict[str, int]:
    """Recompute the answer from all of `source` with a batch read: key -> count."""
    events = (
        spark.read.format("rlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .load()
    )
    return {r.key: json.loads(r.value)["count"] for r in as_records(parse_counts(events)).collect()}


def latest_counts(spark: SparkSession, bootstrap: str, sink: str = "counts") -> dict[str, int]:
    """Read the changelog in `sink`: the last record per key (by partition offset) wins."""
    rows = (
        spark.read.format("rlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", sink)
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
        )
        .collect()
    )
    latest: dict[str, int] = {}
    # A key always hashes to one partition, so offset order within it is write order.
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        latest[row.key] = json.loads(row.value)["count"]
    return latest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--source", default="events")
    parser.add_argument("--sink", default="counts")
    parser.add_argument("--checkpoint", default="/tmp/rlog-pipeline-checkpoint")
    parser.add_argument("--trigger", default="2 seconds", help="processing-time trigger")
    parser.add_argument("--available-now", action="store_true", help="process all, then stop")
    parser.add_argument("--generate", type=int, metavar="N", help="produce N events and exit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verify", action="store_true", help="compare counts with a batch")
    args = parser.parse_args(argv)

    if args.generate:
        produce_events(args.bootstrap, args.source, generate_events(args.generate, args.seed))
        print(f"produced {args.generate} events to {args.source}")
        return 0

    from pyspark.sql import SparkSession

    from rlog.spark import register

    spark = (
        SparkSession.builder.appName("rlog-pipeline")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    register(spark)
    if args.verify:
        expected = batch_counts(spark, args.bootstrap, args.source)
        got = latest_counts(spark, args.bootstrap, args.sink)
        print("OK" if got == expected else f"MISMATCH: {len(expected)} vs {len(got)} keys")
        return 0 if got == expected else 1
    query = build_query(
        spark, args.bootstrap, args.checkpoint, args.source, args.sink,
        available_now=args.available_now, processing_time=args.trigger,
    )  # fmt: skip
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
