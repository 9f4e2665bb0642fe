"""``rlog bench produce|consume``: kafka-producer-perf-test and kafka-consumer-perf-test.

Same flags, same lines. The produce bench measures each record's latency from ``produce()`` to
its delivery report (``Message.latency()``); the consume bench takes records in batches
(``consume(num_messages=...)``) and sums their sizes without decoding them, so that the Python
client, not this loop, is what is measured.
"""

from __future__ import annotations

import random
import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any

import typer
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    Settings,
    check_reachable,
    client_config,
    close_quietly,
    resolve_bootstrap,
    settings_of,
    topic_partitions,
)
from rlog.cli.produce import Acks
from rlog.cli.terminal import CliError, ExitCode, Terminal, parse_properties

app = typer.Typer(help="Measure produce and consume throughput.", no_args_is_help=True)

REPORT_INTERVAL_S = 5.0  # kafka-producer-perf-test prints a window line every 5 s
POLL_EVERY = 1024  # records produced between two polls that serve delivery reports
CONSUME_BATCH = 10_000  # records per consume() call in the consume bench
MB = 1024 * 1024  # the perf tools' "MB"
PERCENTILES = (0.5, 0.95, 0.99, 0.999)

MULTI_VALUE_FLAGS = ("--producer-props", "--consumer-props")


def expand_multi_value_flags(args: list[str]) -> list[str]:
    """``--producer-props a=1 b=2`` (Kafka's spelling) into ``--producer-props a=1
    --producer-props b=2`` (what click parses)."""
    out: list[str] = []
    current: str | None = None
    for arg in args:
        if arg in MULTI_VALUE_FLAGS:
            current = arg
            out.append(arg)
            continue
        if current and not arg.startswith("-") and "=" in arg and out[-1] != current:
            out.append(current)
        elif arg.startswith("-") or "=" not in arg:
            current = None
        out.append(arg)
    return out


JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the result as JSON (window lines go to stderr).")
]
PropertyOption = Annotated[
    list[str] | None,
    typer.Option("-X", help="Any client property key=value (repeatable).", show_default=False),
]


# -- produce ----------------------------------------------------------------------------


@dataclass
class ProduceStats:
    """Delivery-report bookkeeping, in the shape of kafka-producer-perf-test's Stats."""

    record_size: int
    started: float = field(default_factory=time.monotonic)
    latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    errors: int = 0
    first_error: KafkaError | None = None
    window_start: float = field(default_factory=time.monotonic)
    window_count: int = 0
    window_total_ms: float = 0.0
    window_max_ms: float = 0.0

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors += 1
            if self.first_error is None:
                self.first_error = error
            return
        latency_ms = (message.latency() or 0.0) * 1000.0
        self.latencies_ms.append(latency_ms)
        self.window_count += 1
        self.window_total_ms += latency_ms
        if latency_ms > self.window_max_ms:
            self.window_max_ms = latency_ms

    def window_line(self, now: float) -> str | None:
        """The 5-second line, once a window is over (and resets the window)."""
        elapsed = now - self.window_start
        if elapsed < REPORT_INTERVAL_S or self.window_count == 0:
            return None
        count = self.window_count
        rate = count / elapsed
        line = (
            f"{count} records sent, {rate:.1f} records/sec "
            f"({rate * self.record_size / MB:.2f} MB/sec), "
            f"{self.window_total_ms / count:.1f} ms avg latency, "
            f"{self.window_max_ms:.1f} ms max latency."
        )
        self.window_start, self.window_count = now, 0
        self.window_total_ms = self.window_max_ms = 0.0
        return line

    def summary(self, ended: float) -> dict[str, Any]:
        count = len(self.latencies_ms)
        elapsed = max(ended - self.started, 1e-9)
        ordered = sorted(self.latencies_ms)

        def percentile(p: float) -> float:
            return ordered[min(int(p * count), count - 1)] if count else 0.0

        return {
            "records_sent": count,
            "records_per_sec": count / elapsed,
            "mb_per_sec": count * self.record_size / MB / elapsed,
            "avg_latency_ms": (sum(ordered) / count) if count else 0.0,
            "max_latency_ms": ordered[-1] if count else 0.0,
            "p50_ms": percentile(0.5),
            "p95_ms": percentile(0.95),
            "p99_ms": percentile(0.99),
            "p999_ms": percentile(0.999),
            "errors": self.errors,
            "elapsed_s": elapsed,
            "record_size": self.record_size,
        }


def summary_line(s: dict[str, Any]) -> str:
    """kafka-producer-perf-test's final line (Java's %f is six decimals, percentiles whole ms)."""
    return (
        f"{s['records_sent']} records sent, {s['records_per_sec']:f} records/sec "
        f"({s['mb_per_sec']:.2f} MB/sec), {s['avg_latency_ms']:.2f} ms avg latency, "
        f"{s['max_latency_ms']:.2f} ms max latency, {int(s['p50_ms'])} ms 50th, "
        f"{int(s['p95_ms'])} ms 95th, {int(s['p99_ms'])} ms 99th, "
        f"{int(s['p999_ms'])} ms 99.9th."
    )


def _payload(size: int) -> bytes:
    """Random upper-case letters, as the Java tool fills its payload."""
    rng = random.Random(0)
    return bytes(rng.randrange(65, 91) for _ in range(size))


@app.command("produce")
def bench_produce(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", help="Topic to write to.", show_default=False)],
    num_records: Annotated[int, typer.Option("--num-records", min=1, show_default=False)],
    record_size: Annotated[
        int, typer.Option("--record-size", min=0, help="Bytes per record.")
    ] = 100,
    throughput: Annotated[
        float,
        typer.Option("--throughput", help="Records/s to aim for; -1 for as fast as possible."),
    ] = -1,
    producer_props: Annotated[
        list[str] | None,
        typer.Option(
            "--producer-props",
            help="Producer properties k=v ... (Kafka's flag; also repeatable).",
            show_default=False,
        ),
    ] = None,
    acks: Annotated[
        Acks | None,
        typer.Option(
            "--acks", help="acks: 0, 1 or all [default: the client's, all]", show_default=False
        ),
    ] = None,
    properties: PropertyOption = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Produce NUM_RECORDS records as fast as allowed; print kafka-producer-perf-test's lines."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    terminal = settings.terminal
    config: dict[str, Any] = {}
    if acks is not None:
        config["acks"] = acks.value
    config.update(parse_properties(producer_props or [], flag="--producer-props"))
    config.update(parse_properties(properties or []))
    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)
    stats = ProduceStats(record_size)
    config["on_delivery"] = stats
    try:
        producer = Producer(client_config(settings, address, config, role="bench-producer"))
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad producer configuration: {exc}", ExitCode.USAGE) from None
    topic_partitions(producer, topic, bootstrap=address, timeout_s=settings.timeout_s)

    emit = terminal.note if json_out else terminal.line
    stats.started = stats.window_start = time.monotonic()
    _produce_loop(producer, topic, _payload(record_size), num_records, throughput, stats, emit)
    while producer.flush(1.0) > 0:
        _emit_window(stats, emit)
    summary = stats.summary(time.monotonic())
    if json_out:
        terminal.json(summary)
    else:
        terminal.line(summary_line(summary))
    if stats.errors:
        first = stats.first_error
        reason = f"{first.name()}: {first.str()}" if first is not None else "unknown error"
        raise CliError(
            f"{stats.errors} of {num_records} records failed delivery ({reason})",
            ExitCode.DELIVERY_FAILED,
        )


def _emit_window(stats: ProduceStats, emit: Any) -> None:
    line = stats.window_line(time.monotonic())
    if line is not None:
        emit(line)


def _produce_loop(
    producer: Producer,
    topic: str,
    payload: bytes,
    num_records: int,
    throughput: float,
    stats: ProduceStats,
    emit: Any,
) -> None:
    produce, poll = producer.produce, producer.poll
    throttled = throughput > 0
    start = time.monotonic()
    for i in range(num_records):
        try:
            produce(topic, payload)
        except BufferError:  # local queue full: serve delivery reports until there is room
            while True:
                poll(0.005)
                try:
                    produce(topic, payload)
                    break
                except BufferError:
                    continue
            _emit_window(stats, emit)
        if i % POLL_EVERY == 0:
            poll(0)
            _emit_window(stats, emit)
        if throttled:
            ahead_s = (i + 1) / throughput - (time.monotonic() - start)
            if ahead_s > 0:
                poll(ahead_s)  # sleep, serving delivery reports meanwhile


# -- consume ----------------------------------------------------------------------------

CONSUMER_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def _java_time(epoch_s: float) -> str:
    """kafka-consumer-perf-test's default date format, yyyy-MM-dd HH:mm:ss:SSS."""
    moment = datetime.fromtimestamp(epoch_s)
    return moment.strftime("%Y-%m-%d %H:%M:%S:") + f"{moment.microsecond // 1000:03d}"


def consumer_line(r: dict[str, Any]) -> str:
    return (
        f"{_java_time(r['start_time_ms'] / 1000)}, {_java_time(r['end_time_ms'] / 1000)}, "
        f"{r['data_mb']:.4f}, {r['mb_per_sec']:.4f}, {r['records']}, {r['records_per_sec']:.4f}, "
        f"{r['rebalance_time_ms']}, {r['fetch_time_ms']}, {r['fetch_mb_per_sec']:.4f}, "
        f"{r['fetch_records_per_sec']:.4f}"
    )


@app.command("consume")
def bench_consume(
    ctx: typer.Context,
    topic: Annotated[str, typer.Option("--topic", help="Topic to read.", show_default=False)],
    messages: Annotated[
        int, typer.Option("--messages", min=1, help="Records to consume.", show_default=False)
    ],
    timeout_ms: Annotated[
        int, typer.Option("--timeout", min=1, help="Give up after this long without a record (ms).")
    ] = 10_000,
    hide_header: Annotated[bool, typer.Option("--hide-header", help="No header line.")] = False,
    consumer_props: Annotated[
        list[str] | None,
        typer.Option("--consumer-props", help="Consumer properties k=v ...", show_default=False),
    ] = None,
    properties: PropertyOption = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Read MESSAGES records from the start of every partition; print consumer-perf-test's line."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    config: dict[str, Any] = {
        "group.id": "rlog-bench",  # required by confluent-kafka; unused with assign()
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }
    config.update(parse_properties(consumer_props or [], flag="--consumer-props"))
    config.update(parse_properties(properties or []))
    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)
    try:
        consumer = Consumer(client_config(settings, address, config, role="bench-consumer"))
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad consumer configuration: {exc}", ExitCode.USAGE) from None
    try:
        result = _consume_run(consumer, settings, topic, messages, timeout_ms / 1000, address)
    finally:
        close_quietly(consumer)
    _print_consume(settings.terminal, result, json_out, hide_header)
    if result["records"] < messages:
        raise CliError(
            f"exited after {result['records']} of {messages} records: no record for "
            f"{timeout_ms} ms",
            ExitCode.TIMEOUT,
        )


def _consume_run(
    consumer: Consumer,
    settings: Settings,
    topic: str,
    messages: int,
    timeout_s: float,
    address: str,
) -> dict[str, Any]:
    start_wall, start = time.time(), time.monotonic()
    partitions = topic_partitions(consumer, topic, bootstrap=address, timeout_s=settings.timeout_s)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    consume, error_of = consumer.consume, Message.error
    records = size = 0
    last_record = time.monotonic()
    while records < messages:
        batch = consume(num_messages=min(CONSUME_BATCH, messages - records), timeout=0.5)
        if not batch:
            if time.monotonic() - last_record > timeout_s:
                break
            continue
        last_record = time.monotonic()
        if any(map(error_of, batch)):  # rare: drop error events, report fatal ones
            batch = _drop_errors(settings.terminal, batch)
        records += len(batch)
        size += sum(map(len, batch))  # value bytes, summed without decoding in Python
    end_wall, end = time.time(), time.monotonic()
    elapsed = max(end - start, 1e-9)
    return {
        "start_time_ms": int(start_wall * 1000),
        "end_time_ms": int(end_wall * 1000),
        "data_mb": size / MB,
        "mb_per_sec": size / MB / elapsed,
        "records": records,
        "records_per_sec": records / elapsed,
        "rebalance_time_ms": 0,  # partitions are assigned: there is no group to join
        "fetch_time_ms": int(elapsed * 1000),
        "fetch_mb_per_sec": size / MB / elapsed,
        "fetch_records_per_sec": records / elapsed,
    }


def _drop_errors(terminal: Terminal, batch: Sequence[Message]) -> list[Message]:
    kept = []
    for message in batch:
        error = message.error()
        if error is None:
            kept.append(message)
        elif error.fatal():
            raise CliError(f"consume failed: {error.name()}: {error.str()}", ExitCode.FAILURE)
        elif error.code() != KafkaError._PARTITION_EOF:
            terminal.warn(f"{error.name()}: {error.str()}")
    return kept


def _print_consume(
    terminal: Terminal, result: dict[str, Any], json_out: bool, hide_header: bool
) -> None:
    if json_out:
        terminal.json(result)
        return
    if not hide_header:
        terminal.line(CONSUMER_HEADER)
    terminal.line(consumer_line(result))
