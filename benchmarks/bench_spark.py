"""Spark batch read, a streaming query's first micro-batch and a batch write of a 6-partition
topic through format("rlog"), beside one tuned confluent-kafka consumer and producer on the same
records (issues 6, 18).

Starts a 1-broker cluster with ``rlog cluster up`` on a free port in a temporary data dir, fills
a 6-partition topic with ``rlog bench produce``, then times (a) one confluent-kafka consumer
reading every record, (b) ``spark.read.format("rlog")...load()`` written to Spark's `noop` sink so
every row really goes through Spark (local[2]) and (c) a ``readStream`` query from the earliest
offsets with ``Trigger.AvailableNow`` (one micro-batch) into the `noop` sink.

The write phase puts the same N records x record-size bytes (value i: i zero-padded to 10
digits, then 'x's; no key) into a fresh 6-partition topic per run: (d) from one confluent-kafka
Producer in this process, with the sink's own producer settings (acks=all, idempotence, the
writer's THROUGHPUT_DEFAULTS), timed from creating the producer to the end of its flush(); (e)
by ``df.write.format("rlog")`` from a DataFrame of the same rows in local[2]'s two partitions,
cached and counted before any timing, so what is timed is the save() call alone: planning, the
two tasks (Arrow batches from the cache, each task's producer, its flush) and the commit. Both
check afterwards that the topic holds N records. One untimed write of each kind warms up first.

Prints each run's records/s, the medians, and each Spark figure's ratio to its confluent-kafka
counterpart, stops the cluster and removes the data dir.

    python benchmarks/bench_spark.py [--num-records 1000000] [--record-size 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parent))
from run_foundation import CONSUMER_PROPS, PRODUCER_PROPS, RLOG, free_port, props, rlog

TOPIC = "bench-spark-p6"
PARTITIONS = 6
# Every value starts with its record number, zero-padded to this many digits.
NUMBER_DIGITS = 10


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


def record_values(count: int, size: int) -> list[bytes]:
    """The write phase's values: record i is i zero-padded to NUMBER_DIGITS, then 'x's."""
    padding = b"x" * (size - NUMBER_DIGITS)
    return [b"%0*d" % (NUMBER_DIGITS, i) + padding for i in range(count)]


@functools.cache
def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def fresh_topic(bootstrap: str) -> str:
    name = f"bench-spark-write-{uuid.uuid4().hex[:8]}"
    admin = admin_client(bootstrap)
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=30)
    return name


def records_in(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}"})
    try:
        marks = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()
    return sum(high - low for low, high in marks)


def produce_all(bootstrap: str, values: list[bytes]) -> float:
    """Seconds for one confluent-kafka producer, with the rlog sink's own settings, to write
    `values` to a fresh topic: from creating the producer to the end of flush()."""
    from rlog.spark.options import parse_write_options
    from rlog.spark.writer import producer_config

    topic = fresh_topic(bootstrap)
    errors: list[KafkaError] = []
    options = parse_write_options({"kafka.bootstrap.servers": bootstrap, "topic": topic})
    started = time.perf_counter()
    producer = Producer(producer_config(options, errors))
    produce = producer.produce
    for first in range(0, len(values), 10_000):
        for value in values[first : first + 10_000]:
            produce(topic, value)
        producer.poll(0)  # failed deliveries only: acks=all, idempotence, as the sink
    remaining = producer.flush(60)
    elapsed = time.perf_counter() - started
    assert not errors and remaining == 0, (errors[:1], remaining)
    assert records_in(bootstrap, topic) == len(values), "the producer lost records"
    return elapsed


def spark_write_all(bootstrap: str, frame, count: int) -> float:
    """Seconds of `frame.write.format("rlog")...save()` into a fresh topic (`frame` is cached)."""
    topic = fresh_topic(bootstrap)
    started = time.perf_counter()
    (
        frame.write.format("rlog")
        .mode("append")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .save()
    )
    elapsed = time.perf_counter() - started
    assert records_in(bootstrap, topic) == count, "spark did not write every record"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.record_size < NUMBER_DIGITS:
        parser.error(f"--record-size must be at least {NUMBER_DIGITS} (the record number)")

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
        # The write phase's rows, materialized before any timing: in this process for the
        # producer, in Spark's cache (local[2]'s two partitions) for df.write.
        values = record_values(args.num_records, args.record_size)
        padding = args.record_size - NUMBER_DIGITS
        write_frame = (
            spark.range(0, args.num_records, numPartitions=spark.sparkContext.defaultParallelism)
            .selectExpr(
                f"CAST(concat(lpad(CAST(id AS STRING), {NUMBER_DIGITS}, '0'), "
                f"repeat('x', {padding})) AS BINARY) AS value"
            )
            .cache()
        )
        assert write_frame.count() == args.num_records
        assert write_frame.first().value == values[0]
        produce_all(bootstrap, values)  # untimed, as the read above
        spark_write_all(bootstrap, write_frame, args.num_records)
        timings: dict[str, list[float]] = {
            "consumer": [], "batch": [], "stream batch": [], "stream query": [],
            "producer": [], "write": [],
        }  # fmt: skip
        for repeat in range(1, args.repeats + 1):
            timings["consumer"].append(consume_all(bootstrap, args.num_records))
            timings["batch"].append(spark_read_all(spark, bootstrap, args.num_records))
            micro_batch, query = spark_stream_first_batch(spark, bootstrap, args.num_records)
            timings["stream batch"].append(micro_batch)
            timings["stream query"].append(query)
            timings["producer"].append(produce_all(bootstrap, values))
            timings["write"].append(spark_write_all(bootstrap, write_frame, args.num_records))
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
        producer_rate = rates["producer"]
        print(f"confluent-kafka producer (acks=all, idempotence) {producer_rate:,.0f} rec/s")
        print(
            f"  format('rlog') local[2] df.write: {rates['write']:,.0f} rec/s, "
            f"ratio to the producer {rates['write'] / producer_rate:.2f}"
        )
    finally:
        if spark is not None:
            spark.stop()
        admin_client.cache_clear()  # its connections go before the broker does
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=60)
        shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
