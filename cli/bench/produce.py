"""``rlog bench produce``: kafka-producer-perf-test, open-loop when given a rate."""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from typing import Annotated, Any, Protocol

import typer

from rlog.cli.bench.common import (
    HEADER,
    POLL_EVERY,
    REPORT_INTERVAL_MS,
    CsvOption,
    JsonOption,
    PlotOption,
    ProducerPropsOption,
    PropertyOption,
    ReportingIntervalOption,
    make_producer,
    payload,
    require_header_room,
    window_emitter,
)
from rlog.cli.bench.output import write_outputs
from rlog.cli.bench.plots import require_matplotlib
from rlog.cli.bench.progress import Reporter
from rlog.cli.bench.stats import ClosedLoopDeliveries, LatencyStats, OpenLoopDeliveries
from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    check_reachable,
    resolve_bootstrap,
    settings_of,
    topic_partitions,
)
from rlog.cli.produce import Acks
from rlog.cli.terminal import CliError, ExitCode, parse_properties

SPIN_BELOW_S = 0.001  # producer.poll() counts whole ms (0 would spin): sleep shorter waits

Tick = Callable[[float], None]


class ProducerLike(Protocol):
    def produce(self, topic: str, value: bytes) -> None: ...
    def poll(self, timeout: float) -> int: ...


def summary_line(s: dict[str, Any]) -> str:
    """kafka-producer-perf-test's final line (Java's %f is six decimals, percentiles whole ms)."""
    return (
        f"{s['records_sent']} records sent, {s['records_per_sec']:f} records/sec "
        f"({s['mb_per_sec']:.2f} MB/sec), {s['avg_latency_ms']:.2f} ms avg latency, "
        f"{s['max_latency_ms']:.2f} ms max latency, {int(s['p50_ms'])} ms 50th, "
        f"{int(s['p95_ms'])} ms 95th, {int(s['p99_ms'])} ms 99th, "
        f"{int(s['p999_ms'])} ms 99.9th."
    )


ThroughputOption = Annotated[
    float,
    typer.Option(
        "--throughput",
        help=(
            "Records/s, open loop: record i is due i/RATE s after the start and its latency "
            "counts from then, so stalls show as latency, not as a lower rate. -1: as fast as "
            "possible, latency from each produce() call."
        ),
    ),
]
AcksOption = Annotated[
    Acks | None,
    typer.Option(
        "--acks", help="acks: 0, 1 or all [default: the client's, all]", show_default=False
    ),
]


def bench_produce(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", help="Topic to write to.", show_default=False)],
    num_records: Annotated[int, typer.Option("--num-records", min=1, show_default=False)],
    record_size: Annotated[
        int, typer.Option("--record-size", min=0, help="Bytes per record (16+ with a rate).")
    ] = 100,
    throughput: ThroughputOption = -1,
    producer_props: ProducerPropsOption = None,
    acks: AcksOption = None,
    properties: PropertyOption = None,
    reporting_interval: ReportingIntervalOption = REPORT_INTERVAL_MS,
    csv_path: CsvOption = None,
    plot_dir: PlotOption = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Produce NUM_RECORDS records; print kafka-producer-perf-test's lines.

    Latency is measured to the time each record's delivery report is served: from its
    scheduled send time with --throughput RATE (open loop), from its produce() call at -1.
    Records of an open-loop run start with a 16-byte header: their index and scheduled send
    time (ns since the epoch, big-endian).
    """
    settings = settings_of(ctx).override(bootstrap, data_dir)
    if plot_dir is not None:
        require_matplotlib()
    open_loop = throughput > 0
    if open_loop:
        require_header_room(record_size, "with --throughput")
    terminal = settings.terminal
    config: dict[str, Any] = {}
    if acks is not None:
        config["acks"] = acks.value
    config.update(parse_properties(producer_props or [], flag="--producer-props"))
    config.update(parse_properties(properties or []))
    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)
    stats = LatencyStats(record_size, rate=throughput if open_loop else -1.0)
    config["on_delivery"] = OpenLoopDeliveries(stats) if open_loop else ClosedLoopDeliveries(stats)
    producer = make_producer(settings, address, config)
    topic_partitions(producer, topic, bootstrap=address, timeout_s=settings.timeout_s)

    stats.start(time.monotonic())
    reporter = Reporter(
        terminal.stderr,
        started=stats.started,
        total=num_records,
        verb="sent",
        count=lambda: stats.count,
        p99=stats.p99_so_far,
        window=stats.window_line,
        window_s=reporting_interval / 1000,
        emit=window_emitter(terminal, json_out),
    )
    body = payload(record_size)
    if open_loop:
        produce_paced(producer, topic, body, num_records, stats, reporter.tick)
    else:
        produce_fast(producer, topic, body, num_records, stats, reporter.tick)
    while producer.flush(0.01) > 0:  # short: the reports served here are timed at its return
        now = time.monotonic()
        stats.mark(now)
        reporter.tick(now)
    stats.ended = time.monotonic()
    stats.mark(stats.ended)
    reporter.finish()
    summary = stats.summary()
    if json_out:
        terminal.json(summary)
    else:
        terminal.line(summary_line(summary))
    write_outputs(terminal, "produce", stats, summary, csv_path, plot_dir)
    if stats.errors:
        first = stats.first_error
        reason = f"{first.name()}: {first.str()}" if first is not None else "unknown error"
        raise CliError(
            f"{stats.errors} of {num_records} records failed delivery ({reason})",
            ExitCode.DELIVERY_FAILED,
        )


def _produce_when_room(
    producer: ProducerLike,
    topic: str,
    value: bytes,
    stats: LatencyStats,
    tick: Tick,
    clock: Callable[[], float],
) -> None:
    """The local queue is full: serve delivery reports until there is room."""
    while True:
        producer.poll(0.005)
        now = clock()
        stats.mark(now)
        tick(now)
        try:
            producer.produce(topic, value)
            return
        except BufferError:
            continue


def produce_fast(
    producer: ProducerLike,
    topic: str,
    body: bytes,
    num_records: int,
    stats: LatencyStats,
    tick: Tick,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """As fast as possible, the same value every time: the loop kafka-producer-perf-test runs."""
    produce, poll, mark = producer.produce, producer.poll, stats.mark
    for i in range(num_records):
        try:
            produce(topic, body)
        except BufferError:
            _produce_when_room(producer, topic, body, stats, tick, clock)
        if i % POLL_EVERY == 0:
            poll(0)
            now = clock()
            mark(now)
            tick(now)


def produce_paced(
    producer: ProducerLike,
    topic: str,
    body: bytes,
    num_records: int,
    stats: LatencyStats,
    tick: Tick,
    send_s: array[float] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Each record carries its index and scheduled send time. With a rate, record i waits for
    i / rate (never for a late record before it: a late loop catches up at once, and the
    lateness counts as latency); at -1 a record is due when the loop gets to it, and
    ``send_s[i]`` keeps when that was. Delivery reports are served after every record, since
    a report's time is when it is served."""
    produce, poll = producer.produce, producer.poll
    pack, tail = HEADER.pack, body[HEADER.size :]
    start, wall_ns = stats.started, stats.started_wall_ns
    interval = 1.0 / stats.rate if stats.open_loop else 0.0
    for i in range(num_records):
        due = i * interval
        now = clock() - start
        while now < due:  # early: wait, serving delivery reports meanwhile
            ahead = due - now
            if ahead >= SPIN_BELOW_S:
                poll(ahead)
            else:
                sleep(ahead)
            now = clock() - start
        if not interval:
            due = now
            if send_s is not None:
                send_s[i] = now
        value = pack(i, wall_ns + int(due * 1e9)) + tail
        try:
            produce(topic, value)
        except BufferError:
            _produce_when_room(producer, topic, value, stats, tick, clock)
        poll(0)
        tick(now + start)
