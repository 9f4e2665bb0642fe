"""The four measurements, for every system that speaks the Kafka protocol, with confluent-kafka.

Each producer runs in its own process (multiprocessing, spawn) so that the Python client, which
costs about a core per million records, is not what is measured. Workers start together at a
barrier; the parent reads the brokers' CPU time just before the barrier opens and after the last
worker is done. Latencies are per record and percentiles are over every record, not a sample.
"""

from __future__ import annotations

import multiprocessing as mp
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import loadgen
from .common import Cluster

RECORD_SIZE = 100
STAMP = struct.Struct("<d")  # the record's scheduled send time, first 8 bytes of its value
QUIET = {"log_level": 0}  # librdkafka's connection chatter during start and stop is noise here

# Batched throughput: the producer settings of run_foundation.py, and acks=all.
BATCH_PROPS: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}
# Latency runs send each record at once: one request per record (the small-request path).
EAGER_PROPS: dict[str, Any] = {"acks": "all", "linger.ms": 0}
CONSUMER_PROPS: dict[str, Any] = {
    "group.id": "peers-e2e",
    "enable.auto.commit": False,
    "fetch.wait.max.ms": 100,
}


@dataclass(frozen=True)
class Settings:
    """What every system is measured with; the same for each."""

    records: int  # (a) batched produce, in all
    producers: int  # producer processes for (a) and (c)
    one_at_a_time: int  # (b) records, one in flight
    steady_rate: int  # (c) records/s, open loop
    steady_seconds: float
    e2e_rate: int  # (d) records/s
    e2e_seconds: float
    partitions: int = 6
    # The client of (c), the steady small-request run: "confluent" (producer processes) or
    # "franz-go" (peers/loadgen.py: a Go program that costs the machine less).
    client: str = "confluent"
    # (c)'s acks: "all" for every figure peers.py compares; bench_small_requests.py's
    # --steady-acks 1 takes the followers' wait out of the latency, to see what it costs.
    steady_acks: str = "all"
    # With the Go client: every measurement from it (peers.py), not only (c) (bench_small_requests,
    # whose other phases stay comparable with its earlier runs).
    every_phase: bool = False


def latency_of(value: bytes | None, now: float) -> float | None:
    """``now`` minus the scheduled send time a record carries; None for a warm-up record (its
    value is not a plausible monotonic time)."""
    if not value or len(value) < STAMP.size:
        return None
    latency = now - STAMP.unpack_from(value)[0]
    return latency if 0 <= latency < 3600 else None


def percentiles(latencies_s: Sequence[float]) -> dict[str, float]:
    """p50/p99/p99.9 in ms (nearest rank) over every record."""
    if not latencies_s:
        return {"p50_ms": float("nan"), "p99_ms": float("nan"), "p999_ms": float("nan")}
    ordered = sorted(latencies_s)
    last = len(ordered) - 1

    def at(q: float) -> float:
        return ordered[min(last, int(q * len(ordered)))] * 1000

    return {"p50_ms": at(0.50), "p99_ms": at(0.99), "p999_ms": at(0.999)}


def cpu_per_100k(cpu_s: float, records: int) -> float:
    return cpu_s / records * 100_000 if records else float("nan")


def run_workers(
    target: Callable[..., None], args: list[tuple[Any, ...]], cluster: Cluster, timeout_s: float
) -> tuple[list[Any], float, float]:
    """Run ``target(barrier, queue, *a)`` for each ``a`` in its own process, all released at
    once; returns their results, the brokers' CPU seconds and the wall time between the barrier
    and the last result."""
    ctx = mp.get_context("spawn")  # no librdkafka threads inherited through fork
    barrier = ctx.Barrier(len(args) + 1)
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(barrier, queue, *a), daemon=True) for a in args]
    for p in procs:
        p.start()
    results: list[Any] = []
    try:
        barrier.wait(timeout=120)  # workers connect and warm up first
        cpu0, t0 = cluster.cpu_seconds(), time.monotonic()
        for _ in procs:
            results.append(queue.get(timeout=timeout_s))
        cpu1, t1 = cluster.cpu_seconds(), time.monotonic()
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    return results, cpu1 - cpu0, t1 - t0


def _guard(barrier: Any, queue: Any, work: Callable[[], dict[str, Any]]) -> None:
    """Run a worker's body; a failure before the barrier breaks it so the parent does not wait."""
    try:
        queue.put(work())
    except Exception as exc:
        barrier.abort()
        queue.put({"error": f"{type(exc).__name__}: {exc}"})


def _producer(bootstrap: str, props: dict[str, Any]) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **QUIET, **props})
    return producer


def _warm_up(producer: Any, topic: str, partitions: int) -> None:
    """One acknowledged record per partition: metadata, connections and leaders are settled
    before the clock starts."""
    failures: list[Any] = []
    for partition in range(partitions):
        producer.produce(
            topic,
            b"w" * RECORD_SIZE,
            partition=partition,
            on_delivery=lambda err, _msg: err and failures.append(err),
        )
    if producer.flush(60) or failures:
        raise RuntimeError(f"warm-up produce to {topic} failed: {failures or 'timed out'}")


def _batched_worker(
    barrier: Any, queue: Any, bootstrap: str, topic: str, count: int, partitions: int
) -> None:
    def work() -> dict[str, Any]:
        errors: list[str] = []
        producer = _producer(
            bootstrap,
            {
                **BATCH_PROPS,
                "delivery.report.only.error": True,
                "on_delivery": lambda err, _msg: err and errors.append(str(err)),
            },
        )
        _warm_up(producer, topic, partitions)
        value = b"x" * RECORD_SIZE
        barrier.wait(timeout=120)
        t0 = time.monotonic()
        produce, poll = producer.produce, producer.poll
        for _ in range(count):
            while True:
                try:
                    produce(topic, value)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    poll(0.005)
        left = producer.flush(300)
        return {"t0": t0, "t1": time.monotonic(), "count": count, "errors": len(errors) + left}

    _guard(barrier, queue, work)


def _steady_worker(
    barrier: Any,
    queue: Any,
    bootstrap: str,
    topic: str,
    rate: float,
    seconds: float,
    index: int,
    workers: int,
    partitions: int,
    props: dict[str, Any],
) -> None:
    """Open loop: record j of this worker is due at t0 + (j * workers + index) / rate, and its
    latency runs from then (not from when it was sent) to its acknowledgement."""

    def work() -> dict[str, Any]:
        producer = _producer(bootstrap, props)
        _warm_up(producer, topic, partitions)
        latencies: list[float] = []
        errors = 0
        count = int(rate * seconds / workers)
        payload = b"x" * (RECORD_SIZE - STAMP.size)
        barrier.wait(timeout=120)
        t0 = time.monotonic() + 0.05
        mono = time.monotonic

        def delivered(err: Any, _msg: Any, due: float) -> None:
            nonlocal errors
            if err is None:
                latencies.append(mono() - due)
            else:
                errors += 1

        for j in range(count):
            due = t0 + (j * workers + index) / rate
            wait = due - mono()
            while wait > 0:
                # Serve delivery reports while waiting for the next due time; librdkafka's poll
                # counts whole milliseconds, so a shorter wait sleeps rather than spins.
                if wait >= 0.001:
                    producer.poll(wait)
                else:
                    time.sleep(wait)
                wait = due - mono()
            value = STAMP.pack(due) + payload
            while True:
                try:
                    producer.produce(
                        topic, value, on_delivery=lambda e, m, d=due: delivered(e, m, d)
                    )
                    break
                except BufferError:
                    producer.poll(0.001)
            producer.poll(0)
        left = producer.flush(120)
        return {"latencies": latencies, "count": count, "errors": errors + left}

    _guard(barrier, queue, work)


def _e2e_consumer(
    barrier: Any, queue: Any, bootstrap: str, topic: str, expected: int, timeout_s: float
) -> None:
    """Reads from each partition's end (positioned before the barrier opens): latency is the
    time a record is in hand minus its scheduled send time, carried in its value."""

    def work() -> dict[str, Any]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, **QUIET, **CONSUMER_PROPS})
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        assignment = []
        for partition in meta.partitions:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=30
            )
            assignment.append(TopicPartition(topic, partition, high))
        consumer.assign(assignment)
        consumer.consume(num_messages=1, timeout=0.5)  # connections up before the clock
        latencies: list[float] = []
        barrier.wait(timeout=120)
        deadline = time.monotonic() + timeout_s
        while len(latencies) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=0.1):
                if msg.error() is None:
                    latency = latency_of(msg.value(), time.monotonic())
                    if latency is not None:
                        latencies.append(latency)
        consumer.close()
        return {
            "role": "consumer",
            "latencies": latencies,
            "count": expected,
            "errors": expected - len(latencies),
        }

    _guard(barrier, queue, work)


def create_topics(bootstrap: str, names: list[str], partitions: int, rf: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    futures = admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=rf) for n in names],
        operation_timeout=30,
        request_timeout=30,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=60)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise RuntimeError(f"create topic {name}: {exc}") from exc
    # Wait until every partition has a leader, so no phase measures an election.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=5).topics
        if all(
            n in topics
            and len(topics[n].partitions) == partitions
            and all(p.leader >= 0 for p in topics[n].partitions.values())
            for n in names
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topics {names} have no leaders after 60 s")


def run_phases(
    phases: dict[str, Callable[[], dict[str, Any]]], log: Callable[[str], None]
) -> dict[str, Any]:
    """Run the measurements in order, each into its own entry; a failure is recorded there and
    the run goes on. A "warm-up" phase runs like the others but is left out of the result."""
    result: dict[str, Any] = {}
    for name, body in phases.items():
        started = time.monotonic()
        try:
            result[name] = body()
        except Exception as exc:
            result[name] = {"error": f"{type(exc).__name__}: {exc}"}
        log(f"  {name}: {_summary(result[name])} ({time.monotonic() - started:.1f} s)")
    result.pop("warm-up", None)
    return result


def throughput(runs: Sequence[dict[str, Any]], total: int, cpu_s: float) -> dict[str, Any]:
    """The batched phase's figures from its producer processes' start and end times."""
    wall = max(r["t1"] for r in runs) - min(r["t0"] for r in runs)
    return {
        "records_per_sec": total / wall,
        "records": total,
        "errors": sum(r["errors"] for r in runs),
        "cpu_per_100k_s": cpu_per_100k(cpu_s, total),
    }


def measure(cluster: Cluster, settings: Settings, rf: int, log: Callable[[str], None]) -> dict:
    """All four measurements on a running Kafka-protocol system; a phase that fails is recorded
    with its error and the others still run."""
    s = settings
    boot = cluster.bootstrap
    topics = {"batch": "peers-batch", "one": "peers-one", "steady": "peers-steady"}
    topics["e2e"] = "peers-e2e"
    create_topics(boot, [topics["batch"], topics["steady"], topics["e2e"]], s.partitions, rf)
    create_topics(boot, [topics["one"]], 1, rf)
    names = ("warm-up", "batched", "one_at_a_time", "steady", "e2e")
    return run_phases(
        {name: lambda n=name: measure_phase(n, cluster, topics, s) for name in names}, log
    )


def measure_phase(
    name: str, cluster: Cluster, topics: dict[str, str], s: Settings
) -> dict[str, Any]:
    """One measurement: "batched" (topics["batch"]), "one_at_a_time" (topics["one"], one
    partition), "steady" and "e2e" (their topics), or an untimed "warm-up"."""
    boot = cluster.bootstrap
    if s.every_phase and s.client == loadgen.CLIENT and name != "steady":
        return _loadgen_phase(name, cluster, topics, s)
    if name == "batched":
        share = s.records // s.producers
        args = [(boot, topics["batch"], share, s.partitions) for _ in range(s.producers)]
        runs, cpu, _wall = run_workers(_batched_worker, args, cluster, timeout_s=600)
        return throughput(runs, share * s.producers, cpu)
    if name == "one_at_a_time":
        return _one_at_a_time(cluster, topics["one"], s.one_at_a_time)
    if name == "steady":
        if s.client == loadgen.CLIENT:
            return _loadgen_steady(cluster, topics["steady"], s.steady_rate, s.steady_seconds, s)
        return _steady(cluster, topics["steady"], s.steady_rate, s.steady_seconds, s)
    if name == "e2e":
        rate, seconds = s.e2e_rate, s.e2e_seconds
        producer_args: list[tuple[Any, ...]] = [
            (boot, topics["e2e"], rate, seconds, 0, 1, s.partitions, EAGER_PROPS)
        ]
        consumer_args = [(boot, topics["e2e"], int(rate * seconds), seconds + 30)]
        return _e2e(cluster, producer_args, consumer_args, rate)
    if name == "warm-up":
        # Untimed, the same for every system: a JVM peer JIT-compiles its hot paths here rather
        # than in the measured phases, and every system has its segments and connections made.
        if "batch" in topics:
            share = max(1, s.records // 5 // s.producers)
            args = [(boot, topics["batch"], share, s.partitions) for _ in range(s.producers)]
            run_workers(_batched_worker, args, cluster, timeout_s=600)
        measure_phase("steady", cluster, topics, Settings(**{**s.__dict__, "steady_seconds": 1.0}))
        return {}
    raise ValueError(f"no phase {name!r}")


def _loadgen_phase(
    name: str, cluster: Cluster, topics: dict[str, str], s: Settings
) -> dict[str, Any]:
    """`measure_phase` from the Go program: franz-go with the confluent-kafka runs' settings.
    The brokers' CPU is taken over each program's whole run, its warm-up records included."""
    boot = cluster.bootstrap
    cpu0 = cluster.cpu_seconds()
    if name == "batched":
        result = loadgen.batched(boot, topics["batch"], s.records, s.producers, s.partitions)
        return loadgen_throughput(result, cluster.cpu_seconds() - cpu0)
    if name == "one_at_a_time":
        result = loadgen.one(boot, topics["one"], s.one_at_a_time)
        return loadgen_latencies(result, cluster.cpu_seconds() - cpu0)
    if name == "e2e":
        result = loadgen.e2e(boot, topics["e2e"], s.e2e_rate, s.e2e_seconds, s.partitions)
        return loadgen_latencies(result) | {"rate": s.e2e_rate}
    if name == "warm-up":
        if "batch" in topics:
            share = max(1, s.records // 5)
            loadgen.batched(boot, topics["batch"], share, s.producers, s.partitions)
        measure_phase("steady", cluster, topics, Settings(**{**s.__dict__, "steady_seconds": 1.0}))
        return {}
    raise ValueError(f"no phase {name!r}")


def _one_at_a_time(cluster: Cluster, topic: str, count: int) -> dict[str, Any]:
    """One producer, one record in flight: produce, wait for its acknowledgement, repeat."""
    producer = _producer(cluster.bootstrap, EAGER_PROPS)
    _warm_up(producer, topic, 1)
    latencies: list[float] = []
    failures: list[Any] = []
    value = b"x" * RECORD_SIZE
    cpu0 = cluster.cpu_seconds()
    for _ in range(count):
        t = time.perf_counter()
        producer.produce(
            topic, value, partition=0, on_delivery=lambda e, _m: e and failures.append(e)
        )
        producer.flush(30)
        latencies.append(time.perf_counter() - t)
    cpu = cluster.cpu_seconds() - cpu0
    return {
        **percentiles(latencies),
        "records": count,
        "errors": len(failures),
        "cpu_per_100k_s": cpu_per_100k(cpu, count),
    }


def _steady(cluster: Cluster, topic: str, rate: int, seconds: float, s: Settings) -> dict[str, Any]:
    workers = s.producers
    steady_props = EAGER_PROPS | {"acks": s.steady_acks}
    args = [
        (cluster.bootstrap, topic, rate, seconds, i, workers, s.partitions, steady_props)
        for i in range(workers)
    ]
    runs, cpu, wall = run_workers(_steady_worker, args, cluster, timeout_s=seconds + 300)
    latencies = [x for r in runs for x in r["latencies"]]
    total = sum(r["count"] for r in runs)
    return {
        **percentiles(latencies),
        "records": total,
        "errors": sum(r["errors"] for r in runs),
        "achieved_rate": total / wall,
        "cpu_per_100k_s": cpu_per_100k(cpu, total),
    }


def _loadgen_steady(
    cluster: Cluster, topic: str, rate: int, seconds: float, s: Settings
) -> dict[str, Any]:
    """(c) from the Go load generator. The brokers' CPU is taken over the program's whole run,
    its warm-up of one record per partition included."""
    cpu0 = cluster.cpu_seconds()
    result = loadgen.steady(cluster.bootstrap, topic, rate, seconds, s.partitions, s.steady_acks)
    return loadgen_phase(result, cluster.cpu_seconds() - cpu0)


def loadgen_phase(result: dict[str, Any], cpu: float) -> dict[str, Any]:
    """A steady phase's figures from the Go program's `result` and the servers' CPU seconds."""
    return {
        **percentiles(result["latencies"]),
        "records": result["count"],
        "errors": result["errors"],
        "achieved_rate": result["count"] / result["wall_s"],
        "cpu_per_100k_s": cpu_per_100k(cpu, result["count"]),
    } | ({"error_example": result["first_error"]} if result.get("first_error") else {})


def loadgen_throughput(result: dict[str, Any], cpu: float) -> dict[str, Any]:
    """A batched phase's figures from the Go program's `result` and the servers' CPU seconds."""
    return {
        "records_per_sec": result["count"] / result["wall_s"],
        "records": result["count"],
        "errors": result["errors"],
        "cpu_per_100k_s": cpu_per_100k(cpu, result["count"]),
    }


def loadgen_latencies(result: dict[str, Any], cpu: float | None = None) -> dict[str, Any]:
    """A one-at-a-time (with the servers' CPU seconds) or end-to-end phase's figures from the
    Go program's `result`: its percentiles, records and errors."""
    figures = {**percentiles(result["latencies"]), "records": result["count"]}
    figures["errors"] = result["errors"]
    if cpu is not None:
        figures["cpu_per_100k_s"] = cpu_per_100k(cpu, result["count"])
    return figures


def _consumer_and_producer(barrier: Any, queue: Any, kind: str, args: tuple[Any, ...]) -> None:
    """One spawn target for both sides of the end-to-end run."""
    if kind == "consumer":
        _e2e_consumer(barrier, queue, *args)
    else:
        _steady_worker(barrier, queue, *args)


def _e2e(
    cluster: Cluster,
    producer_args: list[tuple[Any, ...]],
    consumer_args: list[tuple[Any, ...]],
    rate: int,
) -> dict[str, Any]:
    args = [("consumer", a) for a in consumer_args] + [("producer", a) for a in producer_args]
    runs, _cpu, _wall = run_workers(_consumer_and_producer, args, cluster, timeout_s=600)
    consumed = next(r for r in runs if r.get("role") == "consumer")
    return {
        **percentiles(consumed["latencies"]),
        "records": consumed["count"],
        "errors": consumed["errors"],
        "rate": rate,
    }


def _summary(result: dict[str, Any]) -> str:
    if not result:
        return "done"
    if "error" in result:
        return f"failed: {result['error']}"
    parts = []
    if "records_per_sec" in result:
        parts.append(f"{result['records_per_sec']:,.0f} rec/s")
    if "p50_ms" in result:
        parts.append(
            f"p50 {result['p50_ms']:.2f} p99 {result['p99_ms']:.2f} "
            f"p99.9 {result['p999_ms']:.2f} ms"
        )
    if "achieved_rate" in result:
        parts.append(f"at {result['achieved_rate']:,.0f} rec/s")
    if "cpu_per_100k_s" in result:
        parts.append(f"broker CPU {result['cpu_per_100k_s']:.2f} s/100k")
    if result.get("errors"):
        parts.append(f"{result['errors']} errors")
    return ", ".join(parts)
