"""Failover and restart times of a 3-broker cluster (issue 15's targets).

Starts ``rlog cluster up --brokers 3`` (configs/three-broker.toml) in a temporary data dir, creates
a 6-partition RF=3 topic, then:

* **leader failover**, ``--kills`` times: waits until every partition is led by its preferred
  replica with a full ISR, SIGKILLs partition 0's leader through rlogd (``rlog chaos kill``), and
  measures from the kill to (a) Metadata naming another leader, polled every 10 ms from a
  surviving broker, and (b) the first acks=all record to partition 0 acknowledged, sent in a loop
  by a confluent-kafka producer from the moment of the kill (the client-visible outage: its
  metadata refresh and retries included; librdkafka re-queries a partition whose leader went
  away on a 1 s timer, so (b) is about a second more than (a)). Target: (a) <= 1 s median.
* **cold restart**, ``--restarts`` times: ``rlog cluster down``, then measures from running
  ``rlog cluster up`` to every partition having a leader and one acks=all record to each being
  acknowledged. Target: <= 2 s median.

Prints every run and the medians; absolute times on a shared machine are noisy, so compare runs
made together.

    python benchmarks/bench_failover.py [--kills 7] [--restarts 3]
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

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from rlog.daemon import control

RLOG = [sys.executable, "-m", "rlog.cli.app"]
CONFIG = Path(__file__).resolve().parent.parent / "configs" / "three-broker.toml"
TOPIC = "failover"
PARTITIONS = 6
FAILOVER_TARGET_S = 1.0
RESTART_TARGET_S = 2.0
POLL_S = 0.01


def free_base_port(count: int) -> int:
    for _ in range(200):
        base = random.randrange(20000, 32000 - count)
        try:
            for port in range(base, base + count + 1):  # the brokers and the controller
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free ports")


def rlog(data_dir: Path, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [*RLOG, "--data-dir", str(data_dir), *args], capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"rlog {' '.join(args[:3])} failed: {done.stderr.strip()}")
    return done.stdout


def leaders(bootstrap: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), from a fresh Metadata request."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 1000})
    topic = admin.list_topics(TOPIC, timeout=2).topics[TOPIC]
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in topic.partitions.values()}


def wait_for(what: str, check: Any, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except KafkaException:
            pass
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def balanced(bootstrap: str) -> bool:
    found = leaders(bootstrap)
    return len(found) == PARTITIONS and all(
        leader == replicas[0] and len(isr) == 3 for leader, replicas, isr in found.values()
    )


def producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "message.timeout.ms": 30000,
            "retry.backoff.ms": 20,
            "retry.backoff.max.ms": 100,
            "topic.metadata.refresh.fast.interval.ms": 20,
        }
    )


def kill_leader_once(data_dir: Path, bootstrap: str, ports: dict[int, int]) -> dict[str, float]:
    wait_for("preferred leaders and full ISRs", lambda: balanced(bootstrap))
    leader = leaders(bootstrap)[0][0]
    survivor = next(b for b in ports if b != leader)
    via = f"127.0.0.1:{ports[survivor]}"
    client = producer(bootstrap)
    client.produce(TOPIC, b"warm-up", partition=0)
    client.flush(10)  # connections and metadata in place before the kill
    acked: list[float] = []

    def on_delivery(error: Any, _message: Any) -> None:
        if error is None and not acked:
            acked.append(time.monotonic())

    killed_at = time.monotonic()
    reply = control.request(data_dir, {"op": "kill", "target": f"broker-{leader}"})
    assert reply.get("ok"), reply
    new_leader_at = None
    while new_leader_at is None or not acked:
        if time.monotonic() - killed_at > 60:
            raise SystemExit("no failover within 60 s")
        if new_leader_at is None:
            try:
                if leaders(via)[0][0] not in (leader, -1):
                    new_leader_at = time.monotonic()
            except KafkaException:
                pass
        if not acked:
            client.produce(TOPIC, b"probe", partition=0, on_delivery=on_delivery)
        client.poll(POLL_S)
    client.flush(30)
    return {"metadata_s": new_leader_at - killed_at, "first_ack_s": acked[0] - killed_at}


def restart_once(data_dir: Path, bootstrap: str) -> float:
    rlog(data_dir, "cluster", "down")
    started = time.monotonic()
    rlog(data_dir, "cluster", "up")
    wait_for("every partition led", lambda: all(v[0] >= 0 for v in leaders(bootstrap).values()))
    client = producer(bootstrap)
    errors: list[Any] = []
    for partition in range(PARTITIONS):
        client.produce(TOPIC, b"x", partition=partition, on_delivery=lambda e, _m: errors.append(e))
    if client.flush(30) != 0 or any(errors):
        raise SystemExit(f"produce after restart failed: {errors}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=7)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="rlog-failover-")) / "data"
    base = free_base_port(3)
    ports = {b: base + b - 1 for b in (1, 2, 3)}
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports.values())
    results: dict[str, Any] = {"kills": [], "restarts": []}
    try:
        rlog(
            data_dir, "cluster", "up", "-n", "3", "--base-port", str(base), "--config", str(CONFIG)
        )
        rlog(data_dir, "topic", "create", TOPIC, "-p", str(PARTITIONS), "-r", "3")
        for run in range(1, args.kills + 1):
            result = kill_leader_once(data_dir, bootstrap, ports)
            results["kills"].append(result)
            print(
                f"kill {run}: new leader in metadata after {result['metadata_s'] * 1000:.0f} ms, "
                f"first acks=all ack after {result['first_ack_s'] * 1000:.0f} ms",
                flush=True,
            )
        for run in range(1, args.restarts + 1):
            took = restart_once(data_dir, bootstrap)
            results["restarts"].append(took)
            print(
                f"restart {run}: serving {took * 1000:.0f} ms after `rlog cluster up`", flush=True
            )
    finally:
        subprocess.run([*RLOG, "cluster", "down", "--data-dir", str(data_dir)], timeout=60)
        shutil.rmtree(data_dir.parent, ignore_errors=True)

    metadata = statistics.median(r["metadata_s"] for r in results["kills"])
    first_ack = statistics.median(r["first_ack_s"] for r in results["kills"])
    restart = statistics.median(results["restarts"])
    print()
    print(
        f"medians: leader failover {metadata * 1000:.0f} ms in metadata (target <= "
        f"{FAILOVER_TARGET_S * 1000:.0f} ms), {first_ack * 1000:.0f} ms to the first ack; "
        f"cold restart {restart * 1000:.0f} ms (target <= {RESTART_TARGET_S * 1000:.0f} ms)"
    )
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
