"""What one small Produce costs the brokers: CPU microseconds per request, measured by psutil
from the brokers' and the controller's CPU times, so a busy machine changes it less than latency.

    python benchmarks/bench_request_cost.py                 # 1 broker acks=1, 3 brokers acks=all
    python benchmarks/bench_request_cost.py --requests 50000 --window 1 --window 64
    python benchmarks/bench_request_cost.py --broker-cpus 1    # the brokers on CPU 1 only
    python benchmarks/bench_request_cost.py --awake-cpus       # idle CPUs poll (needs root)

A raw client (the project's own codec over one socket) sends pre-built ProduceRequest v8 frames,
one 100-byte record each, to the leader of a 1-partition topic, keeping WINDOW requests in
flight: window 1 is one-at-a-time (every request pays a whole replication round), a larger
window lets the leader's followers fetch many produces at once. It prints, per setup and
window, the CPU per request (runs of --requests, medians of --rounds), requests/s, and the
requests per produce the brokers read (their traffic.json, by API): the followers' fetches.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from bench_small_requests import requests_read
from confluent_kafka.admin import AdminClient
from machine_wakeups import describe, ping_pong
from peers import rlog as rlog_peer
from peers.common import add_awake_cpus_option, awake_cpus, cpu_list
from peers.workload import create_topics

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import NEED_DATA, ClientConnection, Response
from rlog.core.records import build_batch

TOPIC = "request-cost"
PRODUCE_VERSION = 8


def cpu_seconds(processes: list[psutil.Process]) -> float:
    return sum(p.cpu_times().user + p.cpu_times().system for p in processes)


def produce_frames(
    codec: ClientConnection, count: int, acks: int, topic: str = TOPIC
) -> list[bytes]:
    """`count` one-record Produce frames, sent through `codec` so it expects their answers."""
    frames = []
    for _ in range(count):
        batch = build_batch([(None, b"x" * 100)], base_timestamp=int(time.time() * 1000))
        body = {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 30_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        }
        frames.append(codec.send_request(ApiKey.PRODUCE, PRODUCE_VERSION, body))
    return frames


def run(
    leader: tuple[str, int], count: int, acks: int, window: int, processes: list[psutil.Process]
) -> tuple[float, float]:
    """(broker CPU µs per request, requests/s) for `count` produces, `window` in flight."""
    codec = ClientConnection()
    frames = produce_frames(codec, count, acks)  # built before the clock starts
    with socket.create_connection(leader) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cpu0, t0 = cpu_seconds(processes), time.monotonic()
        sent = answered = 0
        while answered < len(frames):
            while sent < len(frames) and sent - answered < window:
                sock.sendall(frames[sent])
                sent += 1
            data = sock.recv(1 << 20)
            if not data:
                raise RuntimeError(f"the broker closed the connection after {answered} answers")
            codec.receive_data(data)
            while (event := codec.next_event()) is not NEED_DATA:
                assert isinstance(event, Response), event
                (partition,) = event.body["responses"][0]["partition_responses"]
                if partition["error_code"] != 0:
                    raise RuntimeError(f"produce refused: {partition}")
                answered += 1
        elapsed, cpu = time.monotonic() - t0, cpu_seconds(processes) - cpu0
    return cpu / len(frames) * 1e6, len(frames) / elapsed


def measure(
    brokers: int,
    acks: int,
    windows: list[int],
    requests: int,
    rounds: int,
    cpus: frozenset[int] | None = None,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="rlog-request-cost-"))
    cluster = rlog_peer.start(root, brokers, cpus)
    try:
        create_topics(cluster.bootstrap, [TOPIC], 1, brokers)
        metadata = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(TOPIC, 10)
        leader_id = metadata.topics[TOPIC].partitions[0].leader
        leader = (metadata.brokers[leader_id].host, metadata.brokers[leader_id].port)
        processes = [psutil.Process(pid) for pid in cluster.pids()]
        processes = [child for p in processes for child in p.children(recursive=True)]
        run(leader, 2_000, acks, 16, processes)  # warm-up
        for window in windows:
            time.sleep(1.1)  # traffic.json is rewritten every second
            before = requests_read(cluster)
            results = [run(leader, requests, acks, window, processes) for _ in range(rounds)]
            time.sleep(1.1)
            after = requests_read(cluster)
            fetches = (after.get("FETCH", 0) - before.get("FETCH", 0)) / (requests * rounds)
            cost = statistics.median(c for c, _ in results)
            rate = statistics.median(r for _, r in results)
            print(
                f"  {brokers} broker(s), acks={acks:>2}, window {window:>3}: "
                f"{cost:7.1f} µs broker CPU per Produce, {rate:9,.0f} requests/s, "
                f"{fetches:.2f} follower fetches per produce",
                flush=True,
            )
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=int, action="append", help="default: 1 and 16")
    parser.add_argument(
        "--broker-cpus",
        type=cpu_list,
        metavar="CPUS",
        help="run the controller and brokers on these CPUs only, as taskset(1) gives them "
        "(e.g. 1); this client stays where the scheduler puts it",
    )
    add_awake_cpus_option(parser)
    args = parser.parse_args()
    with awake_cpus(args.awake_cpus):
        measure_all(args)


def measure_all(args: argparse.Namespace) -> None:
    windows = args.window or [1, 16]
    # Before any client thread starts: machine_wakeups forks.
    floor = ping_pong(args.requests, echo_polls=False)
    same_cpu = ping_pong(args.requests, echo_polls=False, same_cpu=True)
    print("this machine, two processes asleep between messages (machine_wakeups.py):")
    print(f"  {describe(floor, 'loopback ping-pong')}")
    print(f"  {describe(same_cpu, 'the same on one CPU')}")
    where = f", brokers on CPUs {sorted(args.broker_cpus)}" if args.broker_cpus else ""
    where += ", idle CPUs kept polling" if args.awake_cpus else ""
    print(
        f"broker CPU per one-record Produce (medians of {args.rounds} x {args.requests:,}{where})"
    )
    measure(1, 1, windows, args.requests, args.rounds, args.broker_cpus)
    measure(3, -1, windows, args.requests, args.rounds, args.broker_cpus)


if __name__ == "__main__":
    main()
