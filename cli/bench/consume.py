"""``rlog bench consume``: kafka-consumer-perf-test.

Records are taken in batches (``consume(num_messages=...)``) and their sizes summed without
decoding them, so that the Python client, not this loop, is what is measured. There is no
per-record latency here (see ``rlog bench e2e``): --csv writes one row per batch and --plot the
throughput over time.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from rlog.cli.bench.common import (
    CONSUME_BATCH,
    MB,
    ConsumerPropsOption,
    CsvOption,
    JsonOption,
    PlotOption,
    PropertyOption,
    consumer_defaults,
    make_consumer,
)
from rlog.cli.bench.output import summary_path, write_batch_csv
from rlog.cli.bench.plots import require_matplotlib
from rlog.cli.bench.progress import Reporter
from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    Settings,
    check_reachable,
    close_quietly,
    resolve_bootstrap,
    settings_of,
    topic_partitions,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal, parse_properties

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


@dataclass
class Batches:
    """One entry per consume() batch: when it came (s since the start), records, bytes."""

    done_s: array[float] = field(default_factory=lambda: array("d"))
    records: array[int] = field(default_factory=lambda: array("q"))
    sizes: array[int] = field(default_factory=lambda: array("q"))
    total: int = 0


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
    consumer_props: ConsumerPropsOption = None,
    properties: PropertyOption = None,
    csv_path: CsvOption = None,
    plot_dir: PlotOption = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Read MESSAGES records from the start of every partition; print consumer-perf-test's line."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    if plot_dir is not None:
        require_matplotlib()
    config = consumer_defaults()
    config.update(parse_properties(consumer_props or [], flag="--consumer-props"))
    config.update(parse_properties(properties or []))
    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)
    consumer = make_consumer(settings, address, config)
    batches = Batches()
    try:
        result = _consume_run(
            consumer, settings, topic, messages, timeout_ms / 1000, address, batches
        )
    finally:
        close_quietly(consumer)
    _print_consume(settings.terminal, result, json_out, hide_header)
    _write_outputs(settings.terminal, batches, result, csv_path, plot_dir)
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
    batches: Batches,
) -> dict[str, Any]:
    start_wall, start = time.time(), time.monotonic()
    partitions = topic_partitions(consumer, topic, bootstrap=address, timeout_s=settings.timeout_s)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    reporter = Reporter(
        settings.terminal.stderr,
        started=start,
        total=messages,
        verb="consumed",
        count=lambda: batches.total,
        p99=None,
        window=None,  # kafka-consumer-perf-test prints no window lines by default
        window_s=1.0,
        emit=settings.terminal.note,
    )
    consume, error_of = consumer.consume, Message.error
    records = size = 0
    last_record = time.monotonic()
    while records < messages:
        batch = consume(num_messages=min(CONSUME_BATCH, messages - records), timeout=0.5)
        now = time.monotonic()
        reporter.tick(now)
        if not batch:
            if now - last_record > timeout_s:
                break
            continue
        last_record = now
        if any(map(error_of, batch)):  # rare: drop error events, report fatal ones
            batch = _drop_errors(settings.terminal, batch)
        batch_size = sum(map(len, batch))  # value bytes, summed without decoding in Python
        records += len(batch)
        size += batch_size
        batches.done_s.append(now - start)
        batches.records.append(len(batch))
        batches.sizes.append(batch_size)
        batches.total = records
    reporter.finish()
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


def _write_outputs(
    terminal: Terminal,
    batches: Batches,
    result: dict[str, Any],
    csv_path: Path | None,
    plot_dir: Path | None,
) -> None:
    if csv_path is not None:
        write_batch_csv(csv_path, batches.done_s, batches.records, batches.sizes, result)
        terminal.note(f"% Wrote {csv_path} and {summary_path(csv_path)}")
    if plot_dir is not None:
        from rlog.cli.bench import plots  # matplotlib loads only here

        path = plots.throughput_plot(
            plot_dir / "throughput.png",
            "rlog bench consume: throughput",
            batches.done_s,
            result["fetch_time_ms"] / 1000,
            None,
            weights=batches.records,
        )
        terminal.note(f"% Wrote {path}")
