"""``rlog bench e2e``: produce at a rate and consume the same records, timing each end to end.

A consumer is assigned every partition of the topic at its end (the high watermarks read before
the first record is sent), and reads on a thread of its own while the main thread produces.
Each record's value starts with a 16-byte header, its index in the run and its scheduled send
time (``common.HEADER``); its end-to-end latency is the time the consumer got it (when poll()
or consume() returned it) minus its scheduled send time (open loop), or minus its produce() call
at --throughput -1. Both ends share this process's monotonic clock, so no clock sync is needed.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from rlog.cli.bench.common import (
    CONSUME_BATCH,
    HEADER,
    REPORT_INTERVAL_MS,
    ConsumerPropsOption,
    CsvOption,
    JsonOption,
    PlotOption,
    ProducerPropsOption,
    ReportingIntervalOption,
    consumer_defaults,
    make_consumer,
    make_producer,
    payload,
    require_header_room,
    window_emitter,
)
from rlog.cli.bench.output import write_outputs
from rlog.cli.bench.plots import require_matplotlib
from rlog.cli.bench.produce import AcksOption, produce_paced
from rlog.cli.bench.progress import Reporter
from rlog.cli.bench.stats import LatencyStats
from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    check_reachable,
    close_quietly,
    kafka_error,
    resolve_bootstrap,
    settings_of,
    topic_partitions,
)
from rlog.cli.terminal import CliError, ExitCode, parse_properties


def e2e_line(s: dict[str, Any]) -> str:
    """The produce bench's final line, for records consumed, with latencies to 0.01 ms."""
    return (
        f"{s['records_received']} records received, {s['records_per_sec']:f} records/sec "
        f"({s['mb_per_sec']:.2f} MB/sec), {s['avg_latency_ms']:.2f} ms avg end-to-end latency, "
        f"{s['max_latency_ms']:.2f} ms max end-to-end latency, {s['p50_ms']:.2f} ms 50th, "
        f"{s['p95_ms']:.2f} ms 95th, {s['p99_ms']:.2f} ms 99th, {s['p999_ms']:.2f} ms 99.9th."
    )


class Acknowledgements:
    """The producer's delivery reports: only counted here; latency is taken at the consumer."""

    def __init__(self, stats: LatencyStats) -> None:
        self.stats = stats
        self.acked = 0

    def __call__(self, error: KafkaError | None, _message: Message) -> None:
        if error is None:
            self.acked += 1
        else:
            self.stats.fail(error)


class Receiver(threading.Thread):
    """Consumes the run's records and appends each one's end-to-end latency to ``stats``."""

    def __init__(
        self, consumer: Consumer, stats: LatencyStats, num_records: int, send_s: array[float]
    ) -> None:
        super().__init__(name="rlog-bench-e2e-consumer", daemon=True)
        self.consumer = consumer
        self.stats = stats
        self.num_records = num_records
        self.send_s = send_s
        self.seen = bytearray(num_records)
        self.received = 0  # distinct records of this run
        self.duplicates = 0
        self.foreign = 0  # records without this run's header: not ours
        self.failure: str | None = None
        self.last_progress = time.monotonic()
        self.stopping = threading.Event()

    def run(self) -> None:
        poll, consume, clock = self.consumer.poll, self.consumer.consume, time.monotonic
        start = self.stats.started
        while self.received < self.num_records and not self.stopping.is_set():
            first = poll(0.1)  # returns as soon as one record is there
            if first is None:
                continue
            self.take((first,), clock() - start)
            rest = consume(num_messages=CONSUME_BATCH, timeout=0)  # whatever else is queued
            if rest:
                self.take(rest, clock() - start)
            if self.failure is not None:
                return

    def take(self, batch: Sequence[Message], now: float) -> None:
        stats, seen, send_s, count = self.stats, self.seen, self.send_s, self.num_records
        unpack, header_size = HEADER.unpack_from, HEADER.size
        rate = stats.rate if stats.open_loop else 0.0
        sent, done, latency, partitions = (
            stats.sent_s, stats.done_s, stats.latency_ms, stats.partitions
        )  # fmt: skip
        taken = 0
        for message in batch:
            error = message.error()
            if error is not None:
                if error.fatal():
                    self.failure = f"{error.name()}: {error.str()}"
                continue
            value = message.value()
            if value is None or len(value) < header_size:
                self.foreign += 1
                continue
            index = unpack(value)[0]
            if index >= count:
                self.foreign += 1
                continue
            if seen[index]:
                self.duplicates += 1
                continue
            seen[index] = 1
            due = index / rate if rate else send_s[index]
            sent.append(due)
            done.append(now)
            latency.append((now - due) * 1000.0)
            partitions.append(message.partition() or 0)
            taken += 1
        if taken:
            self.received += taken
            self.last_progress = time.monotonic()


def bench_e2e(
    ctx: typer.Context,
    topic: Annotated[
        str, typer.Option("--topic", help="Topic to write and read.", show_default=False)
    ],
    num_records: Annotated[int, typer.Option("--num-records", min=1, show_default=False)],
    record_size: Annotated[
        int, typer.Option("--record-size", min=HEADER.size, help="Bytes per record (16+).")
    ] = 100,
    throughput: Annotated[
        float,
        typer.Option(
            "--throughput",
            help=(
                "Records/s, open loop: latency counts from each record's scheduled time i/RATE. "
                "-1: as fast as possible, latency from each produce() call."
            ),
        ),
    ] = -1,
    acks: AcksOption = None,
    producer_props: ProducerPropsOption = None,
    consumer_props: ConsumerPropsOption = None,
    timeout_ms: Annotated[
        int,
        typer.Option(
            "--timeout",
            min=1,
            help="Once all is sent, give up after this long without a record (ms).",
        ),
    ] = 10_000,
    reporting_interval: ReportingIntervalOption = REPORT_INTERVAL_MS,
    csv_path: CsvOption = None,
    plot_dir: PlotOption = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Produce NUM_RECORDS records and consume them concurrently; print end-to-end latency.

    End-to-end latency is the time the consumer got a record minus its scheduled send time
    (--throughput RATE, open loop) or its produce() call (-1). Each record starts with a 16-byte
    header: its index and scheduled send time (ns since the epoch, big-endian). Read the topic
    with no other writer; works with any number of partitions.
    """
    settings = settings_of(ctx).override(bootstrap, data_dir)
    if plot_dir is not None:
        require_matplotlib()
    require_header_room(record_size, "for e2e")
    terminal = settings.terminal
    producer_config: dict[str, Any] = {}
    if acks is not None:
        producer_config["acks"] = acks.value
    producer_config.update(parse_properties(producer_props or [], flag="--producer-props"))
    consumer_config = consumer_defaults()
    consumer_config.update(parse_properties(consumer_props or [], flag="--consumer-props"))
    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)

    stats = LatencyStats(record_size, rate=throughput if throughput > 0 else -1.0)
    acknowledgements = Acknowledgements(stats)
    producer_config["on_delivery"] = acknowledgements
    producer = make_producer(settings, address, producer_config)
    consumer = make_consumer(settings, address, consumer_config)
    receiver: Receiver | None = None
    try:
        partitions = topic_partitions(
            producer, topic, bootstrap=address, timeout_s=settings.timeout_s
        )
        _assign_at_end(consumer, topic, partitions, address, settings.timeout_s)
        send_s = array("d", bytes(8 * num_records))
        receiver = Receiver(consumer, stats, num_records, send_s)
        stats.start(time.monotonic())
        reporter = Reporter(
            terminal.stderr,
            started=stats.started,
            total=num_records,
            verb="received",
            count=lambda: stats.count,
            p99=stats.p99_so_far,
            window=lambda now: stats.window_line(now, "received", "end-to-end latency"),
            window_s=reporting_interval / 1000,
            emit=window_emitter(terminal, json_out),
        )
        receiver.start()
        body = payload(record_size)
        produce_paced(producer, topic, body, num_records, stats, reporter.tick, send_s)
        while producer.flush(0.1) > 0:
            reporter.tick(time.monotonic())
        _await_records(receiver, acknowledgements, reporter, timeout_ms / 1000)
    finally:
        if receiver is not None and receiver.is_alive():  # interrupted: stop it before closing
            receiver.stopping.set()
            receiver.join()
        close_quietly(consumer)
    reporter.finish()
    stats.ended = stats.started + (stats.done_s[-1] if stats.count else 0.0)
    summary = stats.summary(count_key="records_received")
    missing = acknowledgements.acked - receiver.received
    summary.update(
        records_sent=acknowledgements.acked,
        records_missing=max(0, num_records - receiver.received),
        duplicates=receiver.duplicates,
    )
    if json_out:
        terminal.json(summary)
    else:
        terminal.line(e2e_line(summary))
    write_outputs(terminal, "e2e", stats, summary, csv_path, plot_dir)
    if receiver.failure is not None:
        raise CliError(f"consume failed: {receiver.failure}", ExitCode.FAILURE)
    if stats.errors:
        first = stats.first_error
        reason = f"{first.name()}: {first.str()}" if first is not None else "unknown error"
        raise CliError(
            f"{stats.errors} of {num_records} records failed delivery ({reason})",
            ExitCode.DELIVERY_FAILED,
        )
    if missing > 0:
        raise CliError(
            f"{missing} of {acknowledgements.acked} acknowledged records were not consumed: "
            f"none came for {timeout_ms} ms",
            ExitCode.TIMEOUT,
        )


def _assign_at_end(
    consumer: Consumer, topic: str, partitions: list[int], address: str, timeout_s: float
) -> None:
    """Assign each partition at its high watermark as read now, before anything is sent: an
    OFFSET_END resolved later could skip the first records."""
    assignment = []
    for partition in partitions:
        try:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
        except Exception as exc:  # KafkaException, or a timeout reported as one
            raise kafka_error(exc, bootstrap=address, action="list offsets", topic=topic) from None
        assignment.append(TopicPartition(topic, partition, high))
    consumer.assign(assignment)


def _await_records(
    receiver: Receiver, acknowledgements: Acknowledgements, reporter: Reporter, timeout_s: float
) -> None:
    """Until every acknowledged record has been consumed, or none came for ``timeout_s``."""
    receiver.last_progress = max(receiver.last_progress, time.monotonic())
    while receiver.is_alive():
        receiver.join(0.05)
        now = time.monotonic()
        reporter.tick(now)
        if receiver.received >= acknowledgements.acked or now - receiver.last_progress > timeout_s:
            break
    receiver.stopping.set()
    receiver.join()
