"""The replication benchmark (issue 4): 3 brokers, RF=3, min.insync.replicas=2, acks=all.

Starts a 3-broker cluster (``rlog cluster up --brokers 3``, with the config below) in a temporary
data dir on free ports and creates a 1-partition and a 6-partition topic, both RF=3. For each, it
runs ``rlog bench produce --acks all`` three times per repeat: unthrottled (1,000,000 x 100-byte
records) for throughput, and at a steady 10,000 records/s (100,000 records) for latency, with
librdkafka's default linger.ms and with linger.ms=0. Prints every run and the medians. Targets on
the 2-core dev machine: ≥ 150,000 records/s, and p99 ≤ 20 ms at 10,000 records/s.

    python benchmarks/bench_replication.py [--num-records N] [--repeats R] [--partitions 1,6]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from run_foundation import PRODUCER_PROPS, RLOG, free_port, props, rlog

THROUGHPUT_TARGET = 150_000  # records/s
P99_TARGET_MS = 20.0  # at a steady rate of:
STEADY_RATE = 10_000  # records/s
CONFIG = """
[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"""
# The steady run uses librdkafka's defaults (linger.ms 5), what a user gets; a second steady run
# with linger.ms=0 sends every record at once, one request each, and shows what the brokers' CPU
# per request costs on 2 cores.
STEADY_PROPS: dict[str, str] = {}
NO_LINGER_PROPS = {"linger.ms": "0"}


def bench(data_dir: Path, topic: str, records: int, throughput: int, extra: dict[str, str]) -> Any:
    return json.loads(
        rlog(
            data_dir,
            "bench",
            "produce",
            "--json",
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            "100",
            "--throughput",
            str(throughput),
            "--acks",
            "all",
            *props("--producer-props", extra),
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--steady-records", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--partitions", default="1,6", help="comma-separated partition counts")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="rlog-bench-replication-"))
    data_dir = root / "data"
    config = root / "rlog.toml"
    config.write_text(CONFIG)
    port = free_port()
    results: dict[str, Any] = {}
    started = time.monotonic()
    try:
        rlog(
            data_dir,
            "cluster",
            "up",
            "--brokers",
            "3",
            "--base-port",
            str(port),
            "--config",
            str(config),
            timeout=120,
        )
        print(f"cluster: 3 brokers from 127.0.0.1:{port}, data dir {data_dir}")
        for partitions in (int(p) for p in args.partitions.split(",")):
            topic = f"bench-rf3-p{partitions}"
            rlog(data_dir, "topic", "create", topic, "-p", str(partitions), "-r", "3")
            runs = []
            for repeat in range(1, args.repeats + 1):
                fast = bench(data_dir, topic, args.num_records, -1, PRODUCER_PROPS)
                steady = bench(data_dir, topic, args.steady_records, STEADY_RATE, STEADY_PROPS)
                eager = bench(data_dir, topic, args.steady_records, STEADY_RATE, NO_LINGER_PROPS)
                print(
                    f"{topic} run {repeat}: unthrottled {fast['records_per_sec']:,.0f} rec/s "
                    f"{fast['mb_per_sec']:.2f} MB/s (p50 {fast['p50_ms']:.1f} ms, p99 "
                    f"{fast['p99_ms']:.1f} ms); at {STEADY_RATE:,} rec/s p50 "
                    f"{steady['p50_ms']:.1f} ms p99 {steady['p99_ms']:.1f} ms; with linger.ms=0 "
                    f"p50 {eager['p50_ms']:.1f} ms p99 {eager['p99_ms']:.1f} ms",
                    flush=True,
                )
                runs.append({"unthrottled": fast, "steady": steady, "eager": eager})
            results[topic] = {
                "records_per_sec": statistics.median(
                    r["unthrottled"]["records_per_sec"] for r in runs
                ),
                "steady_p50_ms": statistics.median(r["steady"]["p50_ms"] for r in runs),
                "steady_p99_ms": statistics.median(r["steady"]["p99_ms"] for r in runs),
                "eager_p50_ms": statistics.median(r["eager"]["p50_ms"] for r in runs),
                "eager_p99_ms": statistics.median(r["eager"]["p99_ms"] for r in runs),
            }
    finally:
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=120)
        shutil.rmtree(root, ignore_errors=True)

    print()
    print(f"medians of {args.repeats} runs, 100-byte records, acks=all, RF=3, min.insync=2:")
    print(f"{'':<28}{'at 10k/s, defaults':>20}{'at 10k/s, linger 0':>20}")
    print(f"{'TOPIC':<16}{'rec/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for topic, r in results.items():
        print(
            f"{topic:<16}{r['records_per_sec']:>12,.0f}"
            f"{r['steady_p50_ms']:>10.1f}{r['steady_p99_ms']:>10.1f}"
            f"{r['eager_p50_ms']:>10.1f}{r['eager_p99_ms']:>10.1f}"
        )
    print(
        f"targets: >= {THROUGHPUT_TARGET:,} rec/s; p99 <= {P99_TARGET_MS:.0f} ms at "
        f"{STEADY_RATE:,} rec/s (total time {time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
