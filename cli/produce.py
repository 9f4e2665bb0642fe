"""``rlog produce TOPIC``: one record per stdin line, like kcat -P and kafka-console-producer.

Flags map onto producer properties (``--acks`` is ``acks``, ``--linger-ms`` is ``linger.ms``,
``--compression`` is ``compression.type``); ``-X key=value`` passes any other property, and wins.
Nothing is printed on success; failed deliveries are counted and reported, exit code 7.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from rlog.cli.discovery import (
    BootstrapOption,
    ClientErrors,
    DataDirOption,
    check_reachable,
    client_config,
    kafka_error,
    resolve_bootstrap,
    settings_of,
    topic_partitions,
)
from rlog.cli.terminal import CliError, ExitCode, parse_properties


class Acks(StrEnum):
    NONE = "0"
    LEADER = "1"
    ALL = "all"


class Compression(StrEnum):
    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


def unescape(text: str) -> str:
    r"""``\t``, ``\n``, ``\r``, ``\\`` in a flag value (a tab is hard to type in a shell)."""
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


class DeliveryReport:
    """The delivery callback: counts what the cluster acknowledged and what failed."""

    def __init__(self) -> None:
        self.delivered = 0
        self.failed = 0
        self.first_error: KafkaError | None = None

    def __call__(self, error: KafkaError | None, _message: Message) -> None:
        if error is None:
            self.delivered += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = error


def split_line(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line without its line ending; key on the first separator."""
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    if separator:
        key, found, value = line.partition(separator)
        if found:
            return key, value
    return None, line


def produce(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to write to.", show_default=False)],
    acks: Annotated[
        Acks | None,
        typer.Option(
            "--acks", help="acks: 0, 1 or all [default: the client's, all]", show_default=False
        ),
    ] = None,
    key_separator: Annotated[
        str | None,
        typer.Option(
            "--key-separator",
            "-K",
            help=r"Split each line into key and value on the first SEP (\t accepted).",
            show_default=False,
        ),
    ] = None,
    partition: Annotated[
        int | None,
        typer.Option(
            "--partition",
            "-p",
            min=0,
            help="Write every record to this partition [default: the partitioner picks]",
            show_default=False,
        ),
    ] = None,
    linger_ms: Annotated[
        int | None,
        typer.Option("--linger-ms", min=0, help="linger.ms", show_default=False),
    ] = None,
    compression: Annotated[
        Compression | None,
        typer.Option("--compression", "-z", help="compression.type", show_default=False),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            help="Header key=value on every record (repeatable).",
            show_default=False,
        ),
    ] = None,
    properties: Annotated[
        list[str] | None,
        typer.Option(
            "-X", help="Any producer property key=value (repeatable).", show_default=False
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Write stdin to TOPIC, one record per line; flush at end of input."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    config: dict[str, str] = {}
    if acks is not None:
        config["acks"] = acks.value
    if linger_ms is not None:
        config["linger.ms"] = str(linger_ms)
    if compression is not None:
        config["compression.type"] = compression.value
    config.update(parse_properties(properties or []))
    headers = [(k, v.encode()) for k, v in parse_properties(header or [], flag="--header").items()]
    separator = unescape(key_separator).encode() if key_separator else None

    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)
    client_errors = ClientErrors()
    try:
        producer = Producer(
            client_config(settings, address, config, role="producer", on_error=client_errors)
        )
    except (KafkaException, ValueError, TypeError) as exc:
        raise CliError(f"bad producer configuration: {exc}", ExitCode.USAGE) from None
    partitions = topic_partitions(producer, topic, bootstrap=address, timeout_s=settings.timeout_s)
    if partition is not None and partition not in partitions:
        raise CliError(
            f"topic '{topic}' has no partition {partition} (it has {len(partitions)})",
            ExitCode.NOT_FOUND,
        )

    report = DeliveryReport()
    sent = 0
    target = -1 if partition is None else partition  # -1: librdkafka's partitioner decides
    for line in sys.stdin.buffer:
        key, value = split_line(line, separator)
        while True:
            try:
                producer.produce(
                    topic, value, key, partition=target, on_delivery=report, headers=headers or None
                )
                break
            except BufferError:  # the local queue is full: serve delivery reports, retry
                producer.poll(0.1)
            except KafkaException as exc:
                raise kafka_error(exc, bootstrap=address, action="produce", topic=topic) from None
        sent += 1
        producer.poll(0)
        fatal = client_errors.fatal()
        if fatal is not None:
            raise kafka_error(fatal, bootstrap=address, action="produce", topic=topic)
    producer.flush()

    if report.failed:
        first = report.first_error
        reason = f"{first.name()}: {first.str()}" if first is not None else "unknown error"
        raise CliError(
            f"{report.failed} of {sent} records failed delivery to '{topic}' ({reason})",
            ExitCode.DELIVERY_FAILED,
        )
