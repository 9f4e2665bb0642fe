"""Spark batch read of a 6-partition topic through format("rlog"), beside one confluent-kafka
consumer reading the same topic (issue 6).

Starts a 1-broker cluster with ``rlog cluster up`` on a free port in a temporary data dir, fills
a 6-partition topic with ``rlog bench produce``, then times (a) one confluent-kafka consumer
reading every record and (b) ``spark.read.format("rlog")...load()`` counted with a `noop` write
so every row really goes through Spark (local[2]). Prints records/s and the ratio, stops the
cluster and removes the data dir.

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
        consumer_s, spark_s = [], []
        for repeat in range(1, args.repeats + 1):
            consumer_s.append(consume_all(bootstrap, args.num_records))
            spark_s.append(spark_read_all(spark, bootstrap, args.num_records))
            print(
                f"run {repeat}: consumer {args.num_records / consumer_s[-1]:,.0f} rec/s, "
                f"spark {args.num_records / spark_s[-1]:,.0f} rec/s",
                flush=True,
            )
        consumer_rate = args.num_records / statistics.median(consumer_s)
        spark_rate = args.num_records / statistics.median(spark_s)
        print(
            f"median of {args.repeats}, {args.num_records:,} x {args.record_size} B, "
            f"{PARTITIONS} partitions: confluent-kafka consumer {consumer_rate:,.0f} rec/s, "
            f"spark format('rlog') local[2] {spark_rate:,.0f} rec/s, "
            f"ratio spark/consumer {spark_rate / consumer_rate:.2f}"
        )
    finally:
        if spark is not None:
            spark.stop()
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=60)
        shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
