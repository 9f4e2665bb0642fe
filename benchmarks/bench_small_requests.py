"""The small-request path: what a record costs when every record is its own request.

    python benchmarks/bench_small_requests.py              # 3 rounds, ~2 minutes
    python benchmarks/bench_small_requests.py --rounds 5 --seconds 30 --json
    python benchmarks/bench_small_requests.py --client confluent   # the Python producers
    python benchmarks/bench_small_requests.py --profile /tmp/profile  # py-spy of the brokers
    python benchmarks/bench_small_requests.py --steady-rf 1 --steady-acks 1  # no replication
    python benchmarks/bench_small_requests.py --broker-cpus 1   # the brokers on CPU 1 only
    python benchmarks/bench_small_requests.py --awake-cpus      # idle CPUs poll (needs root)

One rlog cluster (``rlog cluster up --brokers 3``, RF=3, min.insync.replicas=2, acks=all, 100-byte
records; the same three topics throughout), measured in rounds; each round runs:

* one-at-a-time: one producer, one record in flight, linger.ms=0, on a 1-partition topic;
* steady: 10,000 records/s open loop, linger.ms=0, on a 6-partition topic, latency from each
  record's scheduled send time to its acknowledgement;
* batched: 1,000,000 records from 3 producers, linger.ms=5 (the throughput that must not drop).

The steady phase's client is, by default, franz-go in a Go program (peers/loadgen.py), which
costs about a quarter of a core at 10,000 records/s; with ``--client confluent`` it uses
confluent-kafka producer processes, which cost about 0.6 of a core there, taken from the brokers
on a 2-core machine. The other phases use confluent-kafka: one record in flight costs the
client little, and their figures stay comparable with earlier runs.

``--steady-rf 1`` (and ``--steady-acks 1``) run the steady phase on a topic without followers:
what the leaders' own work per request costs, apart from replication's.

For each phase it reports the latency percentiles (or records/s), the brokers' CPU seconds, and
requests per broker CPU-second: every request the three brokers' listeners read (clients' and
the followers' own fetches, from each broker's traffic.json) divided by the CPU seconds the
brokers and the controller used over the same window. Figures are medians over the rounds.

For the steady phase it also reports how long each broker was runnable but waiting for a CPU,
per second (Linux's schedstat): about 0.5 s/s beside 0.5 CPU-s/s means the broker was never
idle and its requests queued, on a machine whose 2 cores the 3 brokers and the client share.
Beside it: the cores the clients used (this process and its children that ended in the phase:
the Go program, the producer processes) and the records each Produce request carried. A client
with linger.ms=0 sends what it has as soon as it can, so brokers that answer faster get more,
smaller requests: the brokers stay busy until they can take about one request per record.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from resource import RUSAGE_CHILDREN, RUSAGE_SELF
from typing import Any

from broker_profile import broker_pids, profile_phase, report
from peers import loadgen
from peers import rlog as rlog_peer
from peers.common import Cluster, add_awake_cpus_option, awake_cpus, cpu_list
from peers.workload import Settings, create_topics, measure_phase

from rlog.daemon.broker.traffic import read_traffic
from rlog.daemon.data_dir import broker_dir

BROKERS = 3
TRAFFIC_WRITE_INTERVAL_S = 1.1  # brokers rewrite traffic.json every second


def requests_read(cluster: Cluster) -> dict[str, int]:
    """Requests the brokers' listeners have read since they started (as of their last write):
    under "all", and per API (PRODUCE, FETCH, ...). A smaller cluster's missing brokers count 0."""
    total: dict[str, int] = {"all": 0}
    for broker_id in range(1, BROKERS + 1):
        counters = read_traffic(broker_dir(cluster.root / "data", broker_id)) or {}
        total["all"] += int(counters.get("requests", 0))
        for api, count in (counters.get("requests_by_api") or {}).items():
            total[api] = total.get(api, 0) + int(count)
    return total


def run_queue_wait_s(cluster: Cluster) -> float:
    """Seconds the brokers' threads have spent runnable but waiting for a CPU (the second field
    of each /proc/PID/task/TID/schedstat), summed; NaN where the kernel does not keep it."""
    total_ns = 0
    for pid in broker_pids(cluster).values():
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            return float("nan")
        for task in tasks:
            try:
                total_ns += int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue  # a thread that ended meanwhile
    return total_ns / 1e9


def client_cpu_s() -> float:
    """CPU seconds of this process and of its children that ended (the Go program, the
    producer processes), user + system: the clients' share of the machine."""
    mine, children = (resource.getrusage(who) for who in (RUSAGE_SELF, RUSAGE_CHILDREN))
    return mine.ru_utime + mine.ru_stime + children.ru_utime + children.ru_stime


def with_request_rate(cluster: Cluster, phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run a phase and add the requests the brokers read per CPU-second they used meanwhile,
    how long each broker waited for a CPU per second (near 1 minus its CPU share, it was
    never idle, and requests queued behind one another), the cores the clients used, and the
    records each Produce request carried."""
    time.sleep(TRAFFIC_WRITE_INTERVAL_S)
    requests0, cpu0, t0 = requests_read(cluster), cluster.cpu_seconds(), time.monotonic()
    waited0, began, client0 = run_queue_wait_s(cluster), time.monotonic(), client_cpu_s()
    result = phase()
    waited1, ended, client1 = run_queue_wait_s(cluster), time.monotonic(), client_cpu_s()
    time.sleep(TRAFFIC_WRITE_INTERVAL_S)
    requests1, cpu1, t1 = requests_read(cluster), cluster.cpu_seconds(), time.monotonic()
    requests, cpu = requests1["all"] - requests0["all"], cpu1 - cpu0
    produce = requests1.get("PRODUCE", 0) - requests0.get("PRODUCE", 0)
    fetch = requests1.get("FETCH", 0) - requests0.get("FETCH", 0)
    return result | {
        "requests": requests,
        "requests_per_s": requests / (t1 - t0),
        "produce_requests_per_s": produce / (t1 - t0),
        "fetch_requests_per_s": fetch / (t1 - t0),
        "requests_per_cpu_s": requests / cpu if cpu > 0 else float("nan"),
        "run_queue_wait_per_broker": (waited1 - waited0) / (ended - began) / BROKERS,
        "client_cores": (client1 - client0) / (ended - began),
        "records_per_produce": result.get("records", 0) / produce if produce else float("nan"),
    }


# The same topics in every round: a follower's Fetch names every partition it follows from a
# leader, so a round that added partitions would cost more than the one before it.
TOPICS = {"one": "small-one", "steady": "small-steady", "batch": "small-batch"}


def create_the_topics(cluster: Cluster, settings: Settings, steady_rf: int) -> None:
    create_topics(cluster.bootstrap, [TOPICS["batch"]], settings.partitions, 3)
    create_topics(cluster.bootstrap, [TOPICS["steady"]], settings.partitions, steady_rf)
    create_topics(cluster.bootstrap, [TOPICS["one"]], 1, 3)


def one_round(cluster: Cluster, settings: Settings) -> dict[str, Any]:
    return {
        name: with_request_rate(cluster, lambda n=name: measure_phase(n, cluster, TOPICS, settings))
        for name in ("one_at_a_time", "steady", "batched")
    }


ROWS = [
    ("one-at-a-time p50 ms", "one_at_a_time", "p50_ms", ".2f"),
    ("one-at-a-time p99 ms", "one_at_a_time", "p99_ms", ".2f"),
    ("one-at-a-time requests/CPU-s", "one_at_a_time", "requests_per_cpu_s", ",.0f"),
    ("steady p50 ms", "steady", "p50_ms", ".2f"),
    ("steady p99 ms", "steady", "p99_ms", ".2f"),
    ("steady p99.9 ms", "steady", "p999_ms", ".2f"),
    ("steady achieved rec/s", "steady", "achieved_rate", ",.0f"),
    ("steady broker CPU s/100k", "steady", "cpu_per_100k_s", ".2f"),
    ("steady requests/s", "steady", "requests_per_s", ",.0f"),
    ("steady Produce requests/s", "steady", "produce_requests_per_s", ",.0f"),
    ("steady Fetch requests/s", "steady", "fetch_requests_per_s", ",.0f"),
    ("steady requests/CPU-s", "steady", "requests_per_cpu_s", ",.0f"),
    ("steady run-queue wait s/s/broker", "steady", "run_queue_wait_per_broker", ".2f"),
    ("steady records per Produce", "steady", "records_per_produce", ".2f"),
    ("steady client cores", "steady", "client_cores", ".2f"),
    ("batched rec/s", "batched", "records_per_sec", ",.0f"),
    ("batched broker CPU s/100k", "batched", "cpu_per_100k_s", ".2f"),
]


def medians(rounds: list[dict[str, Any]]) -> dict[str, float]:
    out = {}
    for label, phase, key, _fmt in ROWS:
        values = [r[phase][key] for r in rounds if key in r.get(phase, {})]
        out[label] = statistics.median(values) if values else float("nan")
    return out


def run_rounds(args: argparse.Namespace, settings: Settings) -> list[dict[str, Any]]:
    """The warm-up, the profile if asked, and the rounds, on a fresh cluster."""
    root = Path(tempfile.mkdtemp(prefix="rlog-small-requests-"))
    cluster = rlog_peer.start(root, BROKERS, args.broker_cpus)
    rounds: list[dict[str, Any]] = []
    try:
        create_the_topics(cluster, settings, args.steady_rf)
        measure_phase("warm-up", cluster, {"steady": TOPICS["steady"]}, settings)
        if args.profile is not None:
            profiles = profile_phase(
                cluster,
                args.profile,
                settings.steady_seconds,
                lambda: measure_phase("steady", cluster, TOPICS, settings),
            )
            print(report(profiles), file=sys.stderr)
        for index in range(args.rounds):
            rounds.append(one_round(cluster, settings))
            print(f"round {index + 1}: {json.dumps(medians(rounds[-1:]))}", file=sys.stderr)
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20, help="of the steady phase")
    parser.add_argument("--rate", type=int, default=10_000, help="of the steady phase, rec/s")
    parser.add_argument("--one", type=int, default=5_000, help="records sent one at a time")
    parser.add_argument("--records", type=int, default=1_000_000, help="of the batched phase")
    parser.add_argument(
        "--client",
        choices=(loadgen.CLIENT, "confluent"),
        default=loadgen.CLIENT,
        help="of the steady phase",
    )
    parser.add_argument(
        "--steady-rf",
        type=int,
        choices=(1, 3),
        default=3,
        help="the steady topic's replication factor: 1 leaves the followers' work out",
    )
    parser.add_argument(
        "--steady-acks",
        choices=("all", "1"),
        default="all",
        help="of the steady phase: 1 leaves the wait for the followers out of its latency",
    )
    parser.add_argument(
        "--broker-cpus",
        type=cpu_list,
        metavar="CPUS",
        help="run the controller and brokers on these CPUs only, as taskset(1) gives them "
        "(e.g. 1); the clients stay where the scheduler puts them",
    )
    add_awake_cpus_option(parser)
    parser.add_argument("--json", action="store_true", help="print every round as JSON")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="before the rounds, run the steady phase once with py-spy sampling each broker: "
        "collapsed stacks in DIR, the hottest functions printed",
    )
    args = parser.parse_args()
    settings = Settings(
        records=args.records,
        producers=3,
        one_at_a_time=args.one,
        steady_rate=args.rate,
        steady_seconds=args.seconds,
        e2e_rate=0,
        e2e_seconds=0,
        client=args.client,
        steady_acks=args.steady_acks,
    )
    with awake_cpus(args.awake_cpus):
        rounds = run_rounds(args, settings)
    if args.json:
        print(json.dumps(rounds, indent=2))
        return
    steady = (
        ""
        if (args.steady_rf, args.steady_acks) == (3, "all")
        else (f" (steady phase: RF={args.steady_rf} acks={args.steady_acks})")
    )
    print(
        f"rlog, 3 brokers RF=3 acks=all{steady}, {args.client} client, "
        f"median of {len(rounds)} rounds"
        + (f", brokers on CPUs {sorted(args.broker_cpus)}" if args.broker_cpus else "")
        + (", idle CPUs kept polling" if args.awake_cpus else "")
    )
    for label, value in medians(rounds).items():
        fmt = next(f for lbl, _p, _k, f in ROWS if lbl == label)
        print(f"  {label:32} {format(value, fmt):>12}")


if __name__ == "__main__":
    main()
