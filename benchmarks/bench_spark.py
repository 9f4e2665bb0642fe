"""Spark batch read and a streaming query's first micro-batch of a 6-partition topic through
format("rlog"), beside one tuned confluent-kafka consumer reading the same topic (issues 6, 18).

Starts a 1-broker cluster with ``rlog cluster up`` on a free port in a temporary data dir, fills
a 6-partition topic with ``rlog bench produce``, then times (a) one confluent-kafka consumer
reading every record, (b) ``spark.read.format("rlog")...load()`` written to Spark's `noop` sink so
every row really goes through Spark (local[2]) and (c) a ``readStream`` query from the earliest
offsets with ``Trigger.AvailableNow`` (one micro-batch) into the `noop` sink. Prints each one's
records/s (medians) and its ratio to the consumer, stops the cluster and removes the data dir.

    python benchmarks/bench_spark.py [--num-records 1000000] [--record-size 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

sys.path.insert(0, str(Path(__file__).parent))
from run_foundation import CONSUMER_PROPS, PRODUCER_PROPS, RLOG, free_port, props, rlog

TOPIC = "bench-spark-p6"
PARTITIONS = 6


def consume_all(bootstrap: str, count: int) -> float:
    """Seconds for one confluent-kafka consumer to read `count` records (assign, no group)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            **CONSUMER_PROPS,
            # librdkafka otherwise waits 1 s before refilling a full fetch queue.
            "fetch.queue.backoff.ms": "0",
        }
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = 0
    started = time.perf_counter()
    try:
        while seen < count:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                error = message.error()
                if error is None:
                    seen += 1
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(error)
    finally:
        consumer.close()
    return time.perf_counter() - started


def spark_read_all(spark, bootstrap: str, count: int) -> float:
    started = time.perf_counter()
    frame = (
        spark.read.format("rlog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .load()
    )
    frame.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    assert frame.count() == count, "spark did not read every record"
    return elapsed


def spark_stream_first_batch(spark, bootstrap: str, count: int) -> tuple[float, float]:
    """Seconds of a streaming query's first micro-batch reading the whole topic (AvailableNow
    with no read limit plans one batch): (the batch's own time as Spark's progress reports it,
    `durationMs.triggerExecution`: planning, reading, committing; the whole query from start()
    to its end, which adds starting the query and its driver-side Python source process)."""
    checkpoint = tempfile.mkdtemp(prefix="rlog-bench-spark-ckpt-")
    try:
        started = time.perf_counter()
        query = (
            spark.readStream.format("rlog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        elapsed = time.perf_counter() - started
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert len(batches) == 1 and batches[0]["numInputRows"] == count, batches
        return batches[0]["durationMs"]["triggerExecution"] / 1000, elapsed
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    from rlog.spark import register

    data_dir = Path(tempfile.mkdtemp(prefix="rlog-bench-spark-")) / "data"
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = None
    try:
        rlog(data_dir, "cluster", "up", "--brokers", "1", "--base-port", str(port), timeout=120)
        rlog(data_dir, "topic", "create", TOPIC, "-p", str(PARTITIONS), "-r", "1")
        rlog(
            data_dir, "bench", "produce", "--json", "--topic", TOPIC,
            "--num-records", str(args.num_records), "--record-size", str(args.record_size),
            "--throughput", "-1", "--acks", "1", *props("--producer-props", PRODUCER_PROPS),
        )  # fmt: skip
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        # One untimed batch read first: the JVM's JIT and Spark's Python workers warm up.
        spark_read_all(spark, bootstrap, args.num_records)
        timings: dict[str, list[float]] = {
            "consumer": [], "batch": [], "stream batch": [], "stream query": []
        }  # fmt: skip
        for repeat in range(1, args.repeats + 1):
            timings["consumer"].append(consume_all(bootstrap, args.num_records))
            timings["batch"].append(spark_read_all(spark, bootstrap, args.num_records))
            micro_batch, query = spark_stream_first_batch(spark, bootstrap, args.num_records)
            timings["stream batch"].append(micro_batch)
            timings["stream query"].append(query)
            print(
                f"run {repeat}: "
                + ", ".join(
                    f"{name} {args.num_records / seconds[-1]:,.0f} rec/s"
                    for name, seconds in timings.items()
                ),
                flush=True,
            )
        rates = {
            name: args.num_records / statistics.median(seconds) for name, seconds in timings.items()
        }
        consumer_rate = rates["consumer"]
        print(
            f"median of {args.repeats}, {args.num_records:,} x {args.record_size} B, "
            f"{PARTITIONS} partitions: confluent-kafka consumer {consumer_rate:,.0f} rec/s"
        )
        for name, label in (
            ("batch", "spark.read batch read"),
            ("stream batch", "readStream first micro-batch (Spark's triggerExecution)"),
            ("stream query", "readStream query, start() to end"),
        ):
            print(
                f"  format('rlog') local[2] {label}: {rates[name]:,.0f} rec/s, "
                f"ratio to the consumer {rates[name] / consumer_rate:.2f}"
            )
    finally:
        if spark is not None:
            spark.stop()
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=60)
        shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
