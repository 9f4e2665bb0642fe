"""The foundation benchmark: one broker, 100-byte records, acks=1, confluent-kafka.

Starts a 1-broker cluster with ``rlog cluster up`` in a temporary data dir on a free port,
creates a 1-partition and a 6-partition topic, and for each runs ``rlog bench produce``
(1,000,000 records, throughput -1) then ``rlog bench consume``, three times; prints each run and
the medians, then stops the cluster and removes the data dir. The targets (issue 3): at least
250,000 records/s produced and 500,000 records/s consumed on the 2-core dev machine.

    python benchmarks/run_foundation.py [--num-records N] [--repeats R] [--partitions 1,6]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RLOG = [sys.executable, "-m", "rlog.cli.app"]
PRODUCE_TARGET = 250_000  # records/s
CONSUME_TARGET = 500_000  # records/s

# Producer settings for throughput: batches up to 1 MB after at most 5 ms, and a local queue
# deep enough that produce() rarely waits for delivery reports.
PRODUCER_PROPS = {
    "linger.ms": "5",
    "batch.size": "1000000",
    "batch.num.messages": "100000",
    "queue.buffering.max.messages": "1000000",
    "queue.buffering.max.kbytes": "1048576",
}
# Consumer settings: large fetches and a deep prefetch queue.
CONSUMER_PROPS = {
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "10485760",
    "queued.min.messages": "1000000",
    "queued.max.messages.kbytes": "1048576",
}


def free_port() -> int:
    for _ in range(200):
        port = random.randrange(20000, 32000)  # below the ephemeral range (32768+)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port")


def rlog(data_dir: Path, *args: str, timeout: float = 600) -> str:
    command = [*RLOG, "--data-dir", str(data_dir), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def props(flag: str, values: dict[str, str]) -> list[str]:
    return [item for key, value in values.items() for item in (flag, f"{key}={value}")]


def run_once(data_dir: Path, topic: str, num_records: int, record_size: int) -> dict[str, Any]:
    produced = json.loads(
        rlog(
            data_dir,
            "bench",
            "produce",
            "--json",
            "--topic",
            topic,
            "--num-records",
            str(num_records),
            "--record-size",
            str(record_size),
            "--throughput",
            "-1",
            "--acks",
            "1",
            *props("--producer-props", PRODUCER_PROPS),
        )
    )
    consumed = json.loads(
        rlog(
            data_dir,
            "bench",
            "consume",
            "--json",
            "--topic",
            topic,
            "--messages",
            str(num_records),
            *props("--consumer-props", CONSUMER_PROPS),
        )
    )
    return {"produce": produced, "consume": consumed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", default="1,6", help="comma-separated partition counts")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="rlog-bench-")) / "data"
    port = free_port()
    results: dict[str, Any] = {}
    started = time.monotonic()
    try:
        rlog(data_dir, "cluster", "up", "--brokers", "1", "--base-port", str(port), timeout=120)
        print(f"cluster: 1 broker on 127.0.0.1:{port}, data dir {data_dir}")
        for partitions in (int(p) for p in args.partitions.split(",")):
            topic = f"bench-p{partitions}"
            rlog(data_dir, "topic", "create", topic, "-p", str(partitions), "-r", "1")
            runs = []
            for repeat in range(1, args.repeats + 1):
                run = run_once(data_dir, topic, args.num_records, args.record_size)
                p, c = run["produce"], run["consume"]
                print(
                    f"{topic} run {repeat}: produce {p['records_per_sec']:,.0f} rec/s "
                    f"{p['mb_per_sec']:.2f} MB/s (p50 {p['p50_ms']:.1f} ms, p99 {p['p99_ms']:.1f} "
                    f"ms, p99.9 {p['p999_ms']:.1f} ms); consume {c['records_per_sec']:,.0f} rec/s "
                    f"{c['mb_per_sec']:.2f} MB/s",
                    flush=True,
                )
                runs.append(run)
            results[topic] = {
                "partitions": partitions,
                "runs": runs,
                "median": {
                    side: {
                        key: statistics.median(r[side][key] for r in runs)
                        for key in ("records_per_sec", "mb_per_sec")
                    }
                    for side in ("produce", "consume")
                },
            }
    finally:
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=60)
        shutil.rmtree(data_dir.parent, ignore_errors=True)

    print()
    print(f"medians of {args.repeats} runs, {args.num_records:,} x {args.record_size} B, acks=1:")
    print(f"{'TOPIC':<12}{'PRODUCE rec/s':>16}{'MB/s':>9}{'CONSUME rec/s':>16}{'MB/s':>9}")
    for topic, result in results.items():
        p, c = result["median"]["produce"], result["median"]["consume"]
        print(
            f"{topic:<12}{p['records_per_sec']:>16,.0f}{p['mb_per_sec']:>9.2f}"
            f"{c['records_per_sec']:>16,.0f}{c['mb_per_sec']:>9.2f}"
        )
    print(
        f"targets: produce >= {PRODUCE_TARGET:,} rec/s, consume >= {CONSUME_TARGET:,} rec/s "
        f"(total time {time.monotonic() - started:.0f} s)"
    )
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
