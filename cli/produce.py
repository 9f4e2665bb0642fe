"""``rlog produce TOPIC``: one record per stdin line, like kcat -P and kafka-console-producer.

Flags map onto producer properties (``--acks`` is ``acks``, ``--linger-ms`` is ``linger.ms``,
``--compression`` is ``compression.type``, ``--idempotent`` is ``enable.idempotence=true``,
``--transactional-id`` is ``transactional.id``); ``-X key=value`` passes any other property,
and wins. Nothing is printed on success; failed deliveries are counted and reported, exit code 7.

With a transactional id the records go out in transactions of ``--txn-size`` lines (all of
stdin by default; the last one may be shorter): each is committed, or with ``--abort`` written
to the log (flushed) and then aborted, so read_committed consumers never see it. One line per
transaction goes to stderr (``% Committed transaction 1: 3 records``). A transaction the
cluster refuses is aborted and reported, exit code 7, and nothing after it is sent.

SIGTERM takes Ctrl-C's way out (here and in ``rlog consume``, see :mod:`rlog.cli.signals`):
an open transaction is aborted, records not yet sent are dropped, and the exit status is 143
(128 + SIGTERM, as shells report it and kafka-console-producer exits) instead of Ctrl-C's 130.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
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
    config_error,
    kafka_error,
    resolve_bootstrap,
    settings_of,
    topic_partitions,
)
from rlog.cli.progress import LiveLine
from rlog.cli.signals import exits_on_sigterm
from rlog.cli.terminal import CliError, ExitCode, Terminal, parse_properties

ABORT_ON_INTERRUPT_S = 5.0  # how long Ctrl-C waits for the open transaction's abort
# Written only by the brokers' coordinators; a Produce to them is refused with
# INVALID_TOPIC_EXCEPTION, which librdkafka prints as "Broker: Invalid topic".
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
RETRY_BACKOFF_S = 0.1  # between tries of a transaction call that failed retriably


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

    def reason(self) -> str:
        first = self.first_error
        return f"{first.name()}: {first.str()}" if first is not None else "unknown error"


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


@exits_on_sigterm
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
    idempotent: Annotated[
        bool,
        typer.Option(
            "--idempotent",
            help="Idempotent producer (enable.idempotence=true): the brokers drop a retried "
            "batch they already have, so retries never duplicate or reorder records. Needs "
            "--acks all (the default).",
        ),
    ] = False,
    transactional_id: Annotated[
        str | None,
        typer.Option(
            "--transactional-id",
            metavar="ID",
            help="Write in transactions under this transactional.id (implies --idempotent): "
            "see --txn-size and --abort.",
            show_default=False,
        ),
    ] = None,
    txn_size: Annotated[
        int | None,
        typer.Option(
            "--txn-size",
            metavar="N",
            min=1,
            help="With --transactional-id: one transaction per N input lines, the last one "
            "possibly shorter [default: all of stdin in one transaction].",
            show_default=False,
        ),
    ] = None,
    abort: Annotated[
        bool,
        typer.Option(
            "--abort",
            help="With --transactional-id: write each transaction's records, then abort it "
            "instead of committing (read_committed consumers never see them; "
            "read_uncommitted ones do).",
        ),
    ] = False,
    properties: Annotated[
        list[str] | None,
        typer.Option(
            "-X", help="Any producer property key=value (repeatable).", show_default=False
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Write stdin to TOPIC, one record per line; flush at end of input.

    With --transactional-id the records are written in transactions of --txn-size lines, each
    committed (or, with --abort, aborted), and one line per transaction goes to stderr."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    config: dict[str, str] = {}
    if acks is not None:
        config["acks"] = acks.value
    if linger_ms is not None:
        config["linger.ms"] = str(linger_ms)
    if compression is not None:
        config["compression.type"] = compression.value
    if transactional_id is not None:
        if not transactional_id.strip():
            raise CliError("--transactional-id needs a non-empty id", ExitCode.USAGE)
        config["transactional.id"] = transactional_id
    if idempotent or transactional_id is not None:
        config["enable.idempotence"] = "true"
    config.update(parse_properties(properties or []))
    check_transaction_flags(config, acks, idempotent, transactional_id, txn_size, abort)
    if topic in INTERNAL_TOPICS:
        raise CliError(
            f"'{topic}' is an internal topic: only the brokers write to it (Kafka refuses "
            "clients' writes to it too)",
            ExitCode.USAGE,
        )
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
        raise config_error(exc, "producer", parse_properties(properties or [])) from None
    partitions = topic_partitions(producer, topic, bootstrap=address, timeout_s=settings.timeout_s)
    if partition is not None and partition not in partitions:
        raise CliError(
            f"topic '{topic}' has no partition {partition} (it has {len(partitions)})",
            ExitCode.NOT_FOUND,
        )

    report = DeliveryReport()
    target = -1 if partition is None else partition  # -1: librdkafka's partitioner decides
    writer = RecordWriter(producer, topic, target, headers or None, report, client_errors, address)
    writer.live = settings.terminal.live_line()
    records = (split_line(line, separator) for line in sys.stdin.buffer)
    try:
        if config.get("transactional.id"):
            transactions = Transactions(
                producer, writer, settings.terminal, settings.timeout_s, abort=abort
            )
            transactions.run(records, txn_size)
            return
        for key, value in records:
            writer.send(key, value)
        producer.flush()
    finally:
        settings.terminal.clear_live()

    if report.failed:
        raise CliError(
            f"{report.failed} of {writer.sent} records failed delivery to '{topic}' "
            f"({report.reason()})",
            ExitCode.DELIVERY_FAILED,
        )


def check_transaction_flags(
    config: dict[str, str],
    acks: Acks | None,
    idempotent: bool,
    transactional_id: str | None,
    txn_size: int | None,
    abort: bool,
) -> None:
    """Usage errors for transaction flags without a transactional id, and for an acks that
    idempotence cannot work with (librdkafka would refuse it with a longer story)."""
    transactional = bool(config.get("transactional.id"))
    if txn_size is not None and not transactional:
        raise CliError(
            "--txn-size needs --transactional-id: only a transactional producer writes "
            "transactions",
            ExitCode.USAGE,
        )
    if abort and not transactional:
        raise CliError(
            "--abort needs --transactional-id: only a transaction can be aborted", ExitCode.USAGE
        )
    if acks is not None and acks is not Acks.ALL and (idempotent or transactional_id):
        flag = "--transactional-id" if transactional_id else "--idempotent"
        raise CliError(
            f"--acks {acks.value} cannot be used with {flag}: an idempotent producer needs "
            "--acks all (the default)",
            ExitCode.USAGE,
        )


@dataclass
class RecordWriter:
    """Hands records to librdkafka, serving delivery reports while its queue is full."""

    producer: Producer
    topic: str
    partition: int
    headers: list[tuple[str, bytes]] | None
    report: DeliveryReport
    client_errors: ClientErrors
    address: str
    sent: int = 0
    live: LiveLine | None = None  # the progress line on a terminal
    started: float = field(default_factory=time.monotonic)

    def send(self, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(
                    self.topic,
                    value,
                    key,
                    partition=self.partition,
                    on_delivery=self.report,
                    headers=self.headers,
                )
                break
            except BufferError:  # the local queue is full: serve delivery reports, retry
                self.producer.poll(0.1)
            except KafkaException as exc:
                raise self.error(exc) from None
        self.sent += 1
        self.producer.poll(0)
        fatal = self.client_errors.fatal()
        if fatal is not None:
            raise self.error(fatal)
        if self.live is not None:
            self.live.update(time.monotonic(), self.progress)

    def progress(self) -> str:
        rate = self.sent / max(time.monotonic() - self.started, 1e-9)
        return (
            f"% {self.sent} records sent to {self.topic}, {self.report.delivered} acknowledged, "
            f"{rate:,.0f} records/s"
        )

    def error(self, error: KafkaError | KafkaException) -> CliError:
        return kafka_error(error, bootstrap=self.address, action="produce", topic=self.topic)


def _kafka_error_of(exc: KafkaException) -> KafkaError | None:
    first = exc.args[0] if exc.args else None
    return first if isinstance(first, KafkaError) else None


def _reason(exc: KafkaException) -> str:
    error = _kafka_error_of(exc)
    return f"{error.name()}: {error.str()}" if error is not None else str(exc)


def records_note(count: int) -> str:
    return f"{count} record{'' if count == 1 else 's'}"


class Transactions:
    """``--transactional-id``: stdin in transactions of ``size`` records, each committed, or
    flushed and aborted with ``--abort``; one stderr line per transaction."""

    def __init__(
        self,
        producer: Producer,
        writer: RecordWriter,
        terminal: Terminal,
        timeout_s: float,
        *,
        abort: bool,
    ) -> None:
        self.producer = producer
        self.writer = writer
        self.terminal = terminal
        self.timeout_s = timeout_s
        self.abort = abort
        self.number = 0  # transactions begun
        self.open = False
        self.in_open = 0  # records of the open transaction

    def run(self, records: Iterable[tuple[bytes | None, bytes]], size: int | None) -> None:
        self._retrying("initialize the transactional producer", self.producer.init_transactions)
        try:
            for key, value in records:
                if not self.open:
                    self._begin()
                    self.number += 1
                    self.open, self.in_open = True, 0
                self.writer.send(key, value)
                self.in_open += 1
                if size is not None and self.in_open >= size:
                    self._end()
            if self.open:
                self._end()
        except KeyboardInterrupt:
            if self.open:  # do not leave it open until the transaction timeout
                with contextlib.suppress(KafkaException):
                    self.producer.abort_transaction(ABORT_ON_INTERRUPT_S)
            raise

    def _begin(self) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            raise self._failure(f"begin transaction {self.number + 1}", exc) from None

    def _end(self) -> None:
        if self.abort:
            # Into the log first: librdkafka would drop records not yet sent, and the point of
            # --abort is records in the log that read_committed consumers skip.
            self.producer.flush(self.timeout_s)
            self._retrying(f"abort transaction {self.number}", self.producer.abort_transaction)
        else:
            self._commit()
        self.open = False
        verb = "Aborted" if self.abort else "Committed"
        self.terminal.note(f"% {verb} transaction {self.number}: {records_note(self.in_open)}")

    def _commit(self) -> None:
        try:
            self._retrying(
                f"commit transaction {self.number}",
                self.producer.commit_transaction,
                abortable=True,
            )
        except _AbortableError as failure:
            with contextlib.suppress(KafkaException):
                self.producer.abort_transaction(self.timeout_s)
            self.open = False
            raise CliError(
                f"transaction {self.number} ({records_note(self.in_open)}) failed and was "
                f"aborted: {failure.reason}; nothing after it was sent",
                ExitCode.DELIVERY_FAILED,
            ) from None

    def _retrying(
        self, action: str, call: Callable[[float], object], *, abortable: bool = False
    ) -> None:
        """Call ``call(timeout)`` again on retriable errors until --timeout has passed. With
        ``abortable``, an error that needs the transaction aborted is :class:`_AbortableError`;
        any other failure is a :class:`CliError`."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            remaining = max(0.1, deadline - time.monotonic())
            try:
                call(remaining)
                return
            except KafkaException as exc:
                error = _kafka_error_of(exc)
                if abortable and error is not None and error.txn_requires_abort():
                    raise _AbortableError(_reason(exc)) from None
                if error is not None and error.retriable() and time.monotonic() < deadline:
                    time.sleep(RETRY_BACKOFF_S)
                    continue
                raise self._failure(action, exc) from None

    def _failure(self, action: str, exc: KafkaException) -> CliError:
        error = _kafka_error_of(exc)
        if error is not None and error.retriable():
            return CliError(
                f"{action} failed: no answer from the cluster at {self.writer.address} within "
                f"{self.timeout_s:g} s ({_reason(exc)})",
                ExitCode.TIMEOUT,
            )
        if error is not None and error.code() in _FENCED:
            return CliError(
                f"{action} failed: another producer started with the same transactional id "
                f"and fenced this one ({_reason(exc)})",
                ExitCode.FAILURE,
            )
        return CliError(f"{action} failed: {_reason(exc)}", ExitCode.FAILURE)


_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED}


class _AbortableError(Exception):
    """The transaction cannot commit (a record failed): it must be aborted."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
