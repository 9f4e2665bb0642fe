"""What the bench commands share: Kafka's multi-value flags, options, payloads, client setup."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Annotated, Any

import typer
from confluent_kafka import Consumer, KafkaException, Producer

from rlog.cli.discovery import Settings, client_config
from rlog.cli.terminal import CliError, ExitCode, Terminal

REPORT_INTERVAL_MS = 5_000  # kafka-producer-perf-test prints a window line every 5 s
POLL_EVERY = 1024  # records produced between two polls that serve delivery reports
CONSUME_BATCH = 10_000  # records per consume() call
MB = 1024 * 1024  # the perf tools' "MB"

# The first bytes of each record's value in the open-loop produce bench and in e2e: the record's
# index in the run and its scheduled send time in ns since the Unix epoch (both big-endian
# unsigned 64-bit). The index finds the record's schedule when its delivery report or its
# consumed copy comes back; the wall-clock time is for readers outside this process.
HEADER = struct.Struct(">QQ")

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
ProducerPropsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--producer-props",
        help="Producer properties k=v ... (Kafka's flag; also repeatable).",
        show_default=False,
    ),
]
ConsumerPropsOption = Annotated[
    list[str] | None,
    typer.Option("--consumer-props", help="Consumer properties k=v ...", show_default=False),
]
ReportingIntervalOption = Annotated[
    int,
    typer.Option(
        "--reporting-interval",
        min=1,
        help="ms between two window lines (printed when stderr is not a terminal).",
    ),
]
CsvOption = Annotated[
    Path | None,
    typer.Option(
        "--csv",
        help="Write per-record rows to FILE and the summary to FILE's .summary.csv sibling.",
        metavar="FILE",
        show_default=False,
        dir_okay=False,
    ),
]
PlotOption = Annotated[
    Path | None,
    typer.Option(
        "--plot",
        help="Write PNG plots into DIR (needs matplotlib).",
        metavar="DIR",
        show_default=False,
        file_okay=False,
    ),
]


def payload(size: int) -> bytes:
    """Random upper-case letters, as the Java tool fills its payload."""
    rng = random.Random(0)
    return bytes(rng.randrange(65, 91) for _ in range(size))


def require_header_room(record_size: int, why: str) -> None:
    if record_size < HEADER.size:
        raise CliError(
            f"--record-size must be at least {HEADER.size} {why}: each record starts with its "
            "index and scheduled send time",
            ExitCode.USAGE,
        )


def make_producer(settings: Settings, address: str, config: dict[str, Any]) -> Producer:
    try:
        return Producer(client_config(settings, address, config, role="bench-producer"))
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad producer configuration: {exc}", ExitCode.USAGE) from None


def make_consumer(settings: Settings, address: str, config: dict[str, Any]) -> Consumer:
    try:
        return Consumer(client_config(settings, address, config, role="bench-consumer"))
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad consumer configuration: {exc}", ExitCode.USAGE) from None


def consumer_defaults() -> dict[str, Any]:
    return {
        "group.id": "rlog-bench",  # required by confluent-kafka; unused with assign()
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }


def window_emitter(terminal: Terminal, json_out: bool) -> Any:
    """Window lines go to stdout as the perf tools print them, or to stderr under --json."""
    return terminal.note if json_out else terminal.line
