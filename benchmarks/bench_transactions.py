"""The transactions benchmark (issue 14): what exactly-once costs beside acks=all, in one run.

Starts a 3-broker cluster (``rlog cluster up --brokers 3``: RF=3, min.insync.replicas=2) in a
temporary data dir on free ports, creates 6-partition topics, and with confluent-kafka, 100-byte
records, ``linger.ms=5`` and ``batch.size=1000000`` (the foundation settings), per repeat:

- plain: N records with acks=all, no idempotence;
- transactional: the same N records in transactions of 100 and of 10,000 records
  (``begin_transaction`` .. ``commit_transaction``), acks=all and idempotence as Kafka requires;
- pipeline: Kafka's exactly-once loop over M records written first: a read_committed consumer in
  a group, a transactional producer writing each polled batch (up to 1,000 records) to an
  output topic with the consumer's offsets (``send_offsets_to_transaction``) in one transaction.

Prints every run, then the medians and the ratios to plain acks=all in the same run (absolute
figures on a shared 2-core machine are noise; ratios are not).

    python benchmarks/bench_transactions.py [--num-records N] [--pipeline-records M] [--repeats R]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from run_foundation import RLOG, free_port, rlog

CONFIG = """
[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"group.initial.rebalance.delay.ms" = 0
"""
PARTITIONS = 6
RECORD = b"x" * 100
BASE_PROPS = {"linger.ms": 5, "batch.size": 1_000_000, "acks": "all"}


def produce_plain(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    producer = Producer({"bootstrap.servers": bootstrap, **BASE_PROPS})
    started = time.perf_counter()
    for _ in range(records):
        _produce(producer, topic)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    return {"records_per_sec": records / elapsed}


def produce_transactional(
    bootstrap: str, topic: str, records: int, txn_size: int
) -> dict[str, float]:
    producer = Producer(
        {"bootstrap.servers": bootstrap, **BASE_PROPS, "transactional.id": f"bench-{uuid.uuid4()}"}
    )
    producer.init_transactions(30)
    commits: list[float] = []
    started = time.perf_counter()
    written = 0
    while written < records:
        size = min(txn_size, records - written)
        producer.begin_transaction()
        for _ in range(size):
            _produce(producer, topic)
        commit_started = time.perf_counter()
        producer.commit_transaction(120)
        commits.append((time.perf_counter() - commit_started) * 1000)
        written += size
    elapsed = time.perf_counter() - started
    return {
        "records_per_sec": records / elapsed,
        "transactions_per_sec": len(commits) / elapsed,
        "commit_p50_ms": statistics.median(commits),
    }


def _produce(producer: Producer, topic: str) -> None:
    while True:
        try:
            producer.produce(topic, RECORD)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.05)


def pipeline(bootstrap: str, source: str, sink: str, records: int) -> dict[str, float]:
    """Exactly-once consume-transform-produce until every input record is committed."""
    group = f"bench-eos-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap, **BASE_PROPS, "transactional.id": f"eos-{group}"}
    )
    producer.init_transactions(30)
    consumer.subscribe([source])
    done = 0
    transactions: list[float] = []
    started = time.perf_counter()
    deadline = time.monotonic() + 600
    try:
        while done < records and time.monotonic() < deadline:
            messages = [m for m in consumer.consume(1000, timeout=0.5) if not m.error()]
            if not messages:
                continue
            began = time.perf_counter()
            producer.begin_transaction()
            for message in messages:
                producer.produce(sink, message.value(), partition=message.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(120)
            transactions.append((time.perf_counter() - began) * 1000)
            done += len(messages)
    except KafkaException as error:
        raise SystemExit(f"the pipeline failed: {error}") from None
    finally:
        consumer.close()
    elapsed = time.perf_counter() - started
    return {
        "records_per_sec": done / elapsed,
        "transaction_p50_ms": statistics.median(transactions),
        "transactions": len(transactions),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=300_000)
    parser.add_argument("--pipeline-records", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="rlog-bench-txn-"))
    data_dir = root / "data"
    config = root / "rlog.toml"
    config.write_text(CONFIG)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        rlog(data_dir, "cluster", "up", "--brokers", "3", "--base-port", str(port),
             "--config", str(config), timeout=120)  # fmt: skip
        print(f"cluster: 3 brokers from {bootstrap}, data dir {data_dir}")
        for repeat in range(1, args.repeats + 1):
            topics = {name: f"{name}-{repeat}" for name in ("plain", "t100", "t10k", "in", "out")}
            for topic in topics.values():
                rlog(data_dir, "topic", "create", topic, "-p", str(PARTITIONS), "-r", "3")
            run = {
                "plain": produce_plain(bootstrap, topics["plain"], args.num_records),
                "t100": produce_transactional(bootstrap, topics["t100"], args.num_records, 100),
                "t10k": produce_transactional(bootstrap, topics["t10k"], args.num_records, 10_000),
            }
            produce_plain(bootstrap, topics["in"], args.pipeline_records)
            run["pipeline"] = pipeline(
                bootstrap, topics["in"], topics["out"], args.pipeline_records
            )
            runs.append(run)
            print(
                f"run {repeat}: plain acks=all {run['plain']['records_per_sec']:,.0f} rec/s; "
                f"txn of 100 {run['t100']['records_per_sec']:,.0f} rec/s "
                f"({run['t100']['transactions_per_sec']:,.0f} txn/s, commit p50 "
                f"{run['t100']['commit_p50_ms']:.1f} ms); txn of 10,000 "
                f"{run['t10k']['records_per_sec']:,.0f} rec/s (commit p50 "
                f"{run['t10k']['commit_p50_ms']:.1f} ms); exactly-once pipeline "
                f"{run['pipeline']['records_per_sec']:,.0f} rec/s "
                f"({run['pipeline']['transactions']} transactions, p50 "
                f"{run['pipeline']['transaction_p50_ms']:.1f} ms each)",
                flush=True,
            )
    finally:
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=120)
        shutil.rmtree(root, ignore_errors=True)

    def median(name: str, key: str) -> float:
        return statistics.median(run[name][key] for run in runs)

    plain = median("plain", "records_per_sec")
    print()
    print(f"medians of {args.repeats} runs, 100-byte records, 3 brokers, RF=3, min.insync=2:")
    for name, label in (
        ("plain", "acks=all, no transactions"),
        ("t100", "transactions of 100"),
        ("t10k", "transactions of 10,000"),
        ("pipeline", "exactly-once pipeline"),
    ):
        rate = median(name, "records_per_sec")
        print(f"  {label:<28}{rate:>12,.0f} rec/s   {rate / plain:>5.2f}x plain")
    print(
        f"  commit p50: {median('t100', 'commit_p50_ms'):.1f} ms (100), "
        f"{median('t10k', 'commit_p50_ms'):.1f} ms (10,000); pipeline transaction p50 "
        f"{median('pipeline', 'transaction_p50_ms'):.1f} ms "
        f"(total time {time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
