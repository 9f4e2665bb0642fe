"""The consumer-group benchmark (issue 8): 3 brokers, RF=3, a 6-partition topic.

1. Group read rate: one group of 3 confluent-kafka consumers (separate processes) reads every
   record; the rate is the records over the time from the group's first record to its last
   (the join itself is reported apart, as kafka-consumer-perf-test's rebalance time). It is
   compared with one consumer reading the same records by assignment (`rlog bench consume`) on
   the same cluster, and with the foundation run's single-consumer figure. Target: ≥ 80%.
2. Failover: in a stable group of 3, one member is SIGKILLed; the time until the two survivors
   own all 6 partitions between them. Target: ≤ session.timeout.ms + 3 s.

Both consumers use the foundation run's fetch settings (CONSUMER_PROPS); the members use
session.timeout.ms=6000 (Kafka's group.min.session.timeout.ms) and heartbeat.interval.ms=1000.

    python benchmarks/bench_groups.py [--num-records N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from run_foundation import CONSUMER_PROPS, PRODUCER_PROPS, RLOG, free_port, props, rlog

FOUNDATION_SINGLE_CONSUMER = 931_395  # rec/s, 6 partitions, issue 3's closing note
RATE_RATIO_TARGET = 0.8
SESSION_TIMEOUT_MS = 6_000
HEARTBEAT_INTERVAL_MS = 1_000
FAILOVER_SLACK_S = 3.0
PARTITIONS = 6
MEMBERS = 3
IDLE_S = 3.0  # a member with nothing more to read for this long is done
CONFIG = """
[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"""


# ---- the member process -------------------------------------------------------------------


def emit(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def member(bootstrap: str, topic: str, group: str, until_idle: bool) -> None:
    """Consume in the group, reporting assignments and, at the end, how much and when."""
    from confluent_kafka import Consumer

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            **CONSUMER_PROPS,
        }
    )
    consumer.subscribe([topic])
    records, first, last, assigned = 0, None, None, None
    idle_since = time.monotonic()
    while not stopping:
        batch = consumer.consume(num_messages=10_000, timeout=0.2)
        now = time.time()
        current = sorted(tp.partition for tp in consumer.assignment())
        if current != assigned:
            assigned = current
            emit(event="assigned", partitions=current, at=now)
        good = [m for m in batch if m.error() is None]
        if good:
            records += len(good)
            first = first if first is not None else now
            last = now
            idle_since = time.monotonic()
        elif until_idle and records and time.monotonic() - idle_since > IDLE_S:
            break
    emit(event="done", records=records, first=first, last=last)
    consumer.close()


# ---- the driver -----------------------------------------------------------------------------


class Member:
    def __init__(self, bootstrap: str, topic: str, group: str, until_idle: bool) -> None:
        command = [sys.executable, __file__, "--member", bootstrap, topic, group]
        if until_idle:
            command.append("--until-idle")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self.events: list[dict[str, Any]] = []

    def read_events(self, timeout_s: float) -> None:
        """Read this member's lines until it exits or the time is up."""
        import selectors

        deadline = time.monotonic() + timeout_s
        selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        selector.register(self.process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(timeout=0.05):
                if self.process.poll() is not None:
                    break
                continue
            line = self.process.stdout.readline()
            if not line:
                break
            self.events.append(json.loads(line))
        selector.close()

    @property
    def assignment(self) -> list[int]:
        assigned = [e for e in self.events if e["event"] == "assigned"]
        return assigned[-1]["partitions"] if assigned else []

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)


def group_read(bootstrap: str, topic: str, group: str, records: int) -> dict[str, Any]:
    started = time.time()
    members = [Member(bootstrap, topic, group, until_idle=True) for _ in range(MEMBERS)]
    try:
        for m in members:
            m.read_events(timeout_s=600)
    finally:
        for m in members:
            m.kill()
    done = [next(e for e in m.events if e["event"] == "done") for m in members]
    total = sum(d["records"] for d in done)
    if total != records:
        raise SystemExit(f"the group read {total} records, expected {records}")
    first = min(d["first"] for d in done if d["first"] is not None)
    last = max(d["last"] for d in done if d["last"] is not None)
    shares = [d["records"] for d in done]
    return {
        "records": total,
        "records_per_sec": total / (last - first),
        "rebalance_s": first - started,
        "shares": shares,
    }


def failover(bootstrap: str, topic: str, group: str) -> float:
    members = [Member(bootstrap, topic, group, until_idle=False) for _ in range(MEMBERS)]
    try:
        deadline = time.monotonic() + 60
        while not all(len(m.assignment) == PARTITIONS // MEMBERS for m in members):
            if time.monotonic() > deadline:
                raise SystemExit(f"no even split: {[m.assignment for m in members]}")
            for m in members:
                m.read_events(timeout_s=0.1)
        killed_at = time.time()
        members[0].kill()
        survivors = members[1:]
        deadline = time.monotonic() + 60
        while sorted(p for m in survivors for p in m.assignment) != list(range(PARTITIONS)):
            if time.monotonic() > deadline:
                raise SystemExit(f"survivors never took over: {[m.assignment for m in survivors]}")
            for m in survivors:
                m.read_events(timeout_s=0.1)
        taken = max(
            next(
                e["at"]
                for e in reversed(m.events)
                if e["event"] == "assigned" and e["partitions"] == m.assignment
            )
            for m in survivors
        )
        return taken - killed_at
    finally:
        for m in members:
            m.kill()


def single_read(data_dir: Path, topic: str, records: int) -> float:
    result = json.loads(
        rlog(
            data_dir,
            "bench",
            "consume",
            "--json",
            "--topic",
            topic,
            "--messages",
            str(records),
            *props("--consumer-props", CONSUMER_PROPS),
        )
    )
    return float(result["records_per_sec"])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--member":
        bootstrap, topic, group = sys.argv[2:5]
        member(bootstrap, topic, group, until_idle="--until-idle" in sys.argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-records", type=int, default=3_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="rlog-bench-groups-"))
    data_dir = root / "data"
    config = root / "rlog.toml"
    config.write_text(CONFIG)
    port = free_port()
    bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(3))
    topic = "bench-groups"
    try:
        rlog(data_dir, "cluster", "up", "--brokers", "3", "--base-port", str(port),
             "--config", str(config), timeout=120)  # fmt: skip
        rlog(data_dir, "topic", "create", topic, "-p", str(PARTITIONS), "-r", "3")
        rlog(
            data_dir, "bench", "produce", "--json", "--topic", topic,
            "--num-records", str(args.num_records), "--record-size", "100", "--throughput", "-1",
            "--acks", "all", *props("--producer-props", PRODUCER_PROPS),
        )  # fmt: skip
        print(f"cluster: 3 brokers from 127.0.0.1:{port}; {args.num_records:,} x 100 B records")
        singles, groups, failovers = [], [], []
        for repeat in range(1, args.repeats + 1):
            single = single_read(data_dir, topic, args.num_records)
            group = group_read(bootstrap, topic, f"bench-read-{repeat}", args.num_records)
            took = failover(bootstrap, topic, f"bench-failover-{repeat}")
            singles.append(single)
            groups.append(group["records_per_sec"])
            failovers.append(took)
            print(
                f"run {repeat}: one consumer {single:,.0f} rec/s; group of {MEMBERS} "
                f"{group['records_per_sec']:,.0f} rec/s (shares {group['shares']}, joined in "
                f"{group['rebalance_s']:.1f} s); survivors own all partitions {took:.2f} s "
                f"after the kill",
                flush=True,
            )
    finally:
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=120)
        shutil.rmtree(root, ignore_errors=True)

    single, group, took = (statistics.median(v) for v in (singles, groups, failovers))
    print()
    print(f"medians of {args.repeats} runs:")
    print(f"  one consumer (same cluster)      {single:>12,.0f} rec/s")
    print(f"  group of {MEMBERS} consumers             {group:>12,.0f} rec/s")
    print(f"  group / one consumer             {group / single:>12.2f}")
    print(
        f"  group / foundation single ({FOUNDATION_SINGLE_CONSUMER:,}) "
        f"{group / FOUNDATION_SINGLE_CONSUMER:>6.2f}   target >= {RATE_RATIO_TARGET}"
    )
    limit = SESSION_TIMEOUT_MS / 1000 + FAILOVER_SLACK_S
    print(f"  takeover after SIGKILL           {took:>12.2f} s   target <= {limit:.1f} s")


if __name__ == "__main__":
    main()
