r"""``rlog consume TOPIC``: print records as kcat -C / rpk topic consume do.

Without ``--group``, partitions are *assigned* (no consumer group, nothing is committed).
confluent-kafka refuses to build a consumer without ``group.id``, so one is set (``rlog-cli``)
but never used: with ``assign()``, explicit start offsets and ``enable.auto.commit=false`` the
client sends no group request at all.

With ``--group G`` (kcat -G, rpk ``consume -g``, kafka-console-consumer ``--group``) the
consumer *subscribes*: it joins G, the group's coordinator shares the topic's partitions among
G's members (and rebalances them as members come and go), and each partition starts at G's
committed offset, or where ``auto.offset.reset`` says when G has none (``--from-beginning`` /
``-o start`` set it to earliest, ``-o end`` to latest, ``-o stored`` leaves Kafka's default,
latest). Offsets are *stored* only once a record has been written to stdout and flushed, so
neither mode commits a record that was not printed:

* auto-commit (default): librdkafka commits the stored offsets every
  ``auto.commit.interval.ms`` (5 s), on a rebalance and on close;
* ``--no-auto-commit``: each written batch's offsets (last offset + 1 per partition) are
  committed synchronously before the next batch is read (at-least-once).

``--isolation`` is Kafka's ``isolation.level``. It defaults to read_uncommitted, as
kafka-console-consumer does (librdkafka, and so kcat, default to read_committed): every record
in the log up to the high watermark, those of open and aborted transactions too.
``read_committed`` stops at the last stable offset (LSO) and skips aborted transactions'
records; transaction markers are never printed.

Offsets follow rpk's ``-o`` (``start|end|N|+N|-N|a:b|:end|@ts|@t1:t2``) with kcat's aliases
(``beginning|end|stored``); ``--format`` takes rpk/kcat tokens (``%t %p %o %k %v %s %T %d %h %e
%K %S %%``, ``\t \n``).
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import FrameType
from typing import Annotated, Any

import typer
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    Settings,
    check_reachable,
    client_config,
    close_quietly,
    config_error,
    kafka_error,
    resolve_bootstrap,
    settings_of,
    topic_partitions,
)
from rlog.cli.produce import unescape
from rlog.cli.progress import LiveLine
from rlog.cli.signals import exits_on_sigterm, interrupt_for, raise_terminated
from rlog.cli.terminal import CliError, ExitCode, Terminal, parse_properties

GROUP_ID = "rlog-cli"  # required by confluent-kafka's Consumer; unused with assign()
BATCH_MESSAGES = 1000  # records taken from librdkafka per consume() call
POLL_TIMEOUT_S = 0.2  # how long one consume() may block: bounds Ctrl-C latency


class Isolation(StrEnum):
    """Kafka's ``isolation.level``."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


# -- offsets ----------------------------------------------------------------------------

_START_WORDS = {"start", "oldest", "beginning", "earliest"}
_END_WORDS = {"end", "newest", "latest"}
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class Bound:
    """One side of an offset range: kind is start|end|exact|after_start|before_end|timestamp,
    or stored (the consumer group's committed offset; a start only)."""

    kind: str
    value: int = 0


@dataclass(frozen=True)
class OffsetRange:
    start: Bound
    stop: Bound | None  # None: keep consuming; else stop before this offset


def timestamp_ms(text: str, now_ms: int) -> int:
    """Unix milliseconds, or rpk-style relative ``-5m`` / ``-1h`` / ``-30s`` before now."""
    if re.fullmatch(r"\d+", text):
        return int(text)
    match = re.fullmatch(r"-(\d+)(ms|s|m|h|d)", text)
    if match:
        return now_ms - int(match.group(1)) * _DURATION_MS[match.group(2)]
    raise ValueError(f"bad timestamp {text!r} (unix ms, or -N followed by ms|s|m|h|d)")


def _start_bound(text: str) -> Bound:
    word = text.lower()
    if word in _START_WORDS or word == "":
        return Bound("start")
    if word in _END_WORDS:
        return Bound("end")
    if re.fullmatch(r"\+\d+", text):
        return Bound("after_start", int(text[1:]))
    if re.fullmatch(r"-\d+", text):
        return Bound("before_end", int(text[1:]))
    if text.isdigit():
        return Bound("exact", int(text))
    raise ValueError(f"bad offset {text!r}")


def parse_offset(text: str, now_ms: int | None = None) -> OffsetRange:
    """rpk's ``-o`` grammar, plus kcat's ``beginning`` and ``end``."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    text = text.strip()
    if text.lower() == "stored":  # kcat: the group's committed offset (needs --group)
        return OffsetRange(Bound("stored"), None)
    if text.startswith("@"):
        left, sep, right = text[1:].partition(":")
        start = Bound("timestamp", timestamp_ms(left, now)) if left else Bound("start")
        stop = Bound("timestamp", timestamp_ms(right, now)) if sep and right else None
        return OffsetRange(start, stop)
    left, sep, right = text.partition(":")
    if left.startswith("-") and sep:  # "-N:..." is ambiguous with a range; rpk rejects it too
        raise ValueError(f"bad offset {text!r}")
    start = _start_bound(left)
    if not sep or right == "":
        return OffsetRange(start, None)
    if right.lower() in _END_WORDS:
        return OffsetRange(start, Bound("end"))
    if right.isdigit():
        return OffsetRange(start, Bound("exact", int(right)))
    raise ValueError(f"bad offset {text!r}")


# With --group the coordinator assigns partitions and each starts at the group's committed
# offset: -o only chooses auto.offset.reset, for partitions the group has no offset for yet.
_GROUP_RESETS = {"start": "earliest", "end": "latest", "stored": None}


def group_offset_reset(
    spec: OffsetRange, offset_text: str | None, partitions: Sequence[int] | None
) -> str | None:
    """The ``auto.offset.reset`` a ``--group`` consume uses (None: Kafka's default, latest),
    or a usage error for flags that make no sense in a group (as rpk ``consume -g``)."""
    if partitions:
        raise CliError(
            "--partition cannot be used with --group: the group's coordinator assigns "
            "partitions to its members (drop --group to read chosen partitions)",
            ExitCode.USAGE,
        )
    if spec.stop is not None or spec.start.kind not in _GROUP_RESETS:
        raise CliError(
            f"--offset {offset_text} cannot be used with --group: a group member starts at the "
            "group's committed offset (-o start|end|stored only choose where a partition "
            "without one starts; move the group with 'rlog group reset-offsets')",
            ExitCode.USAGE,
        )
    return _GROUP_RESETS[spec.start.kind]


@dataclass
class Assignment:
    partition: int
    start: int  # an offset, or OFFSET_BEGINNING / OFFSET_END
    stop: int | None  # exclusive; None = unbounded


def _plan(
    consumer: Consumer, topic: str, partitions: Sequence[int], spec: OffsetRange, timeout_s: float
) -> list[Assignment]:
    """Turn the offset spec into a start (and stop) offset for each partition."""
    needs_marks = spec.start.kind in {"after_start", "before_end"} or (
        spec.stop is not None and spec.stop.kind in {"end", "timestamp"}
    )
    marks = {}
    if needs_marks:
        for p in partitions:
            marks[p] = consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=timeout_s, cached=False
            )
    by_time: dict[int, dict[int, int]] = {}
    for bound in (spec.start, spec.stop):
        if bound is not None and bound.kind == "timestamp" and bound.value not in by_time:
            query = [TopicPartition(topic, p, bound.value) for p in partitions]
            found = consumer.offsets_for_times(query, timeout=timeout_s)
            by_time[bound.value] = {tp.partition: tp.offset for tp in found}

    def resolve(bound: Bound, p: int) -> int:
        if bound.kind == "start":
            return OFFSET_BEGINNING
        if bound.kind == "end":
            return marks[p][1] if p in marks else OFFSET_END
        if bound.kind == "exact":
            return bound.value
        if bound.kind == "after_start":
            return marks[p][0] + bound.value
        if bound.kind == "before_end":
            return max(marks[p][0], marks[p][1] - bound.value)
        offset = by_time[bound.value][p]
        if offset >= 0:
            return offset
        # No record at or after the timestamp: start at the end; stop at the current end.
        return marks[p][1] if p in marks else OFFSET_END

    return [
        Assignment(
            p, resolve(spec.start, p), resolve(spec.stop, p) if spec.stop is not None else None
        )
        for p in partitions
    ]


# -- output formats ---------------------------------------------------------------------

_TOKEN = re.compile(r"%[tpokvsTdheKS%]")
Render = Callable[[Message], bytes]


def _text(value: Any) -> bytes:
    return str(value).encode()


def _headers(message: Message) -> bytes:
    pairs = message.headers() or []
    return b",".join(k.encode() + b"=" + (v if v is not None else b"") for k, v in pairs)


_RENDERERS: dict[str, Render] = {
    "%t": lambda m: m.topic().encode(),
    "%p": lambda m: _text(m.partition()),
    "%o": lambda m: _text(m.offset()),
    "%k": lambda m: m.key() or b"",
    "%v": lambda m: m.value() or b"",
    "%s": lambda m: m.value() or b"",
    "%T": lambda m: _text(m.timestamp()[1]),
    "%d": lambda m: _text(m.timestamp()[1]),
    "%h": _headers,
    "%e": lambda m: _text(m.leader_epoch() if m.leader_epoch() is not None else -1),
    # As kcat: -1 for a null key (an empty one is 0), while %k prints nothing for either.
    "%K": lambda m: _text(-1 if m.key() is None else len(m.key())),
    "%S": lambda m: _text(-1 if m.value() is None else len(m.value())),  # kcat: -1 if null
    "%%": lambda m: b"%",
}


def compile_format(template: str) -> Callable[[Message], bytes]:
    """A kcat/rpk ``--format`` string into a function from a message to its output bytes."""
    text = unescape(template)
    parts: list[bytes | Render] = []
    position = 0
    for match in _TOKEN.finditer(text):
        if match.start() > position:
            parts.append(text[position : match.start()].encode())
        parts.append(_RENDERERS[match.group()])
        position = match.end()
    if position < len(text):
        parts.append(text[position:].encode())
    leftover = re.search(r"%[^tpokvsTdheKS%]", _TOKEN.sub("", text))
    if leftover:
        raise CliError(f"unknown --format token {leftover.group()!r}", ExitCode.USAGE)

    def render(message: Message) -> bytes:
        return b"".join(part if isinstance(part, bytes) else part(message) for part in parts)

    return render


def _json_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def record_json(message: Message) -> dict[str, Any]:
    """A record as rpk prints it with ``--format json``."""
    return {
        "topic": message.topic(),
        "key": _json_text(message.key()),
        "value": _json_text(message.value()),
        "headers": [{"key": k, "value": _json_text(v)} for k, v in (message.headers() or [])],
        "timestamp": message.timestamp()[1],
        "partition": message.partition(),
        "offset": message.offset(),
    }


def render_json(message: Message) -> bytes:
    document = record_json(message)
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


# -- the command ------------------------------------------------------------------------


@dataclass
class Progress:
    """Which partitions are finished, and how many records were printed."""

    topic: str
    open_partitions: set[int]
    stops: dict[int, int | None]
    printed: int = 0

    def finish(self, partition: int) -> None:
        self.open_partitions.discard(partition)


@exits_on_sigterm
def consume(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to read.", show_default=False)],
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at each partition's first offset.")
    ] = False,
    offset: Annotated[
        str | None,
        typer.Option(
            "--offset",
            "-o",
            help="start|end|N|+N|-N|a:b|:end|@ts|@t1:t2 (rpk's -o), stored (with --group) "
            "[default: end, or start with --from-beginning; with --group: the group's "
            "committed offsets, and start|end|stored only choose where a partition without "
            "one starts]",
            show_default=False,
        ),
    ] = None,
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            "-p",
            min=0,
            help="Partition to read (repeatable) [default: all]",
            show_default=False,
        ),
    ] = None,
    max_messages: Annotated[
        int | None,
        typer.Option(
            "--max-messages", "-n", "-c", min=1, help="Exit after N records", show_default=False
        ),
    ] = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format", "-f", help=r"Output per record, kcat/rpk tokens and \t \n escapes"
        ),
    ] = r"%v\n",
    exit_at_end: Annotated[
        bool,
        typer.Option(
            "--exit-at-end",
            "-e",
            help="Exit when every partition reaches its end (kcat -e); with --group, every "
            "partition assigned to this member",
        ),
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="One JSON record per line, as rpk prints them.")
    ] = False,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            "-g",
            help="Consume as a member of consumer group G (kcat -G, rpk -g): subscribe, share "
            "the partitions with G's other members, start at G's committed offsets and commit "
            "what was printed. No --partition, and --offset only start|end|stored.",
            show_default=False,
        ),
    ] = None,
    auto_commit: Annotated[
        bool | None,
        typer.Option(
            "--auto-commit/--no-auto-commit",
            help="With --group: commit the printed records' offsets every "
            "auto.commit.interval.ms (5 s) and on exit [default], or after each written and "
            "flushed batch, synchronously (at-least-once).",
            show_default=False,
        ),
    ] = None,
    isolation: Annotated[
        Isolation,
        typer.Option(
            "--isolation",
            "--isolation-level",
            case_sensitive=False,
            help="isolation.level: read_uncommitted prints every record up to the high "
            "watermark, those of open and aborted transactions too; read_committed stops at "
            "the last stable offset and skips aborted transactions. The default is "
            "kafka-console-consumer's (librdkafka's and kcat's is read_committed).",
        ),
    ] = Isolation.READ_UNCOMMITTED,
    properties: Annotated[
        list[str] | None,
        typer.Option(
            "-X", help="Any consumer property key=value (repeatable).", show_default=False
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Print TOPIC's records to stdout until Ctrl-C, --max-messages or -e.

    With --group G the records are read as a member of consumer group G, from its committed
    offsets, and what was printed is committed (on exit too); see 'rlog group'."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    if from_beginning and offset is not None:
        raise CliError("use either --from-beginning or --offset, not both", ExitCode.USAGE)
    try:
        spec = parse_offset(offset or ("start" if from_beginning else "end"))
    except ValueError as exc:
        raise CliError(f"--offset: {exc}", ExitCode.USAGE) from None
    reset: str | None = None
    if group is None:
        if spec.start.kind == "stored":
            raise CliError(
                "--offset stored needs --group: it means the group's committed offsets",
                ExitCode.USAGE,
            )
        if auto_commit is not None:
            flag = "--auto-commit" if auto_commit else "--no-auto-commit"
            raise CliError(
                f"{flag} needs --group: without one nothing is committed", ExitCode.USAGE
            )
    elif not group.strip():
        raise CliError("--group needs a non-empty group id", ExitCode.USAGE)
    else:
        reset = group_offset_reset(spec, offset, partition)
    render = render_json if json_out else compile_format(output_format)

    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)
    if group is not None:
        member = GroupMember(group, auto_commit is not False, exit_at_end)
        consumer = _group_consumer(settings, address, properties, member, reset, isolation)
        try:
            topic_partitions(consumer, topic, bootstrap=address, timeout_s=settings.timeout_s)
            _run_group(
                consumer,
                settings.terminal,
                topic,
                member,
                render,
                max_messages,
                address,
                assignment_wait_s=settings.timeout_s,
            )
        finally:
            settings.terminal.clear_live()
            close_quietly(consumer)  # leaves the group; with auto-commit, commits first
        return
    consumer = _consumer(settings, address, properties, eof=True, isolation=isolation)
    try:
        available = topic_partitions(
            consumer, topic, bootstrap=address, timeout_s=settings.timeout_s
        )
        wanted = sorted(set(partition)) if partition else available
        missing = [p for p in wanted if p not in available]
        if missing:
            raise CliError(
                f"topic '{topic}' has no partition {missing[0]} (it has {len(available)})",
                ExitCode.NOT_FOUND,
            )
        try:
            plan = _plan(consumer, topic, wanted, spec, settings.timeout_s)
        except KafkaException as exc:
            raise kafka_error(exc, bootstrap=address, action="list offsets", topic=topic) from None
        _run(consumer, settings.terminal, topic, plan, render, max_messages, exit_at_end, address)
    finally:
        settings.terminal.clear_live()
        close_quietly(consumer)


def _consumer(
    settings: Settings,
    address: str,
    properties: list[str] | None,
    *,
    eof: bool,
    isolation: Isolation = Isolation.READ_UNCOMMITTED,
) -> Consumer:
    config: dict[str, Any] = {
        "group.id": GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": eof,
        "isolation.level": isolation.value,
    }
    config.update(parse_properties(properties or []))
    try:
        return Consumer(client_config(settings, address, config, role="consumer"))
    except (KafkaException, ValueError, TypeError) as exc:
        raise config_error(exc, "consumer", parse_properties(properties or [])) from None


class ConsumeStatus:
    """The progress line of a consumer whose records go to a file or a pipe: records printed,
    their rate, and the lag (high watermark minus position) over its partitions."""

    def __init__(self, consumer: Consumer, topic: str, live: LiveLine) -> None:
        self.consumer, self.topic, self.live = consumer, topic, live
        self.started = time.monotonic()

    def update(self, printed: int, partitions: Sequence[int]) -> None:
        now = time.monotonic()
        if self.live.due(now):
            rate = printed / max(now - self.started, 1e-9)
            lag = self.lag(partitions)
            shown = f", lag {lag}" if lag is not None else ""
            self.live.show(f"% {printed} records from {self.topic}, {rate:,.0f} records/s{shown}")

    def lag(self, partitions: Sequence[int]) -> int | None:
        """From what the consumer already knows (its positions, the watermarks its fetches
        brought): no request is sent for it."""
        total = 0
        try:
            positions = self.consumer.position([TopicPartition(self.topic, p) for p in partitions])
            for tp in positions:
                _low, high = self.consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset < 0 or high < 0:
                    return None
                total += max(0, high - tp.offset)
        except KafkaException:
            return None
        return total


def _run(
    consumer: Consumer,
    terminal: Terminal,
    topic: str,
    plan: list[Assignment],
    render: Callable[[Message], bytes],
    max_messages: int | None,
    exit_at_end: bool,
    address: str,
) -> None:
    live = [a for a in plan if a.stop is None or a.start < 0 or a.start < a.stop]
    progress = Progress(topic, {a.partition for a in live}, {a.partition: a.stop for a in live})
    if not live:
        return
    consumer.assign([TopicPartition(topic, a.partition, a.start) for a in live])
    status = ConsumeStatus(consumer, topic, terminal.live_line(beside_records=True))
    while progress.open_partitions:
        status.update(progress.printed, [a.partition for a in live])
        messages = consumer.consume(num_messages=BATCH_MESSAGES, timeout=POLL_TIMEOUT_S)
        out: list[bytes] = []
        for message in messages:
            error = message.error()
            if error is not None:
                _on_error(terminal, progress, message, error, exit_at_end, address)
                continue
            p = message.partition()
            if p not in progress.open_partitions:
                continue
            stop = progress.stops.get(p)
            if stop is not None and message.offset() >= stop:
                progress.finish(p)
                continue
            out.append(render(message))
            progress.printed += 1
            if stop is not None and message.offset() + 1 >= stop:
                progress.finish(p)
            if max_messages is not None and progress.printed >= max_messages:
                progress.open_partitions.clear()
                break
        if out:
            terminal.write_bytes(b"".join(out))


def _on_error(
    terminal: Terminal,
    progress: Progress,
    message: Message,
    error: KafkaError,
    exit_at_end: bool,
    address: str,
) -> None:
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        p = message.partition()
        stop = progress.stops.get(p)
        at_stop = stop is not None and message.offset() >= stop
        if p in progress.open_partitions and (exit_at_end or at_stop):
            progress.finish(p)
            if exit_at_end:
                suffix = "" if progress.open_partitions else ": exiting"
                terminal.note(
                    f"% Reached end of topic {progress.topic} [{p}] at offset "
                    f"{message.offset()}{suffix}"
                )
        return
    if code == KafkaError._TRANSPORT:
        return  # one connection dropped; librdkafka reconnects on its own
    if error.fatal() or code in {
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }:
        raise kafka_error(error, bootstrap=address, action="consume", topic=progress.topic)
    terminal.warn(f"{error.name()}: {error.str()}")


# -- consuming as a group member (--group) ------------------------------------------------


@dataclass
class GroupMember:
    """A ``--group`` consume: what the coordinator assigned to this member, and which of
    those partitions ``-e`` has seen the end of."""

    group: str
    auto_commit: bool
    exit_at_end: bool
    assigned: set[int] = field(default_factory=set)
    at_end: set[int] = field(default_factory=set)
    rebalancing: bool = True  # until the first assignment, and between revoke and assign
    ever_assigned: bool = False
    printed: int = 0

    def on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Eager assignors give the whole new assignment, cooperative ones what is added."""
        self.assigned |= {tp.partition for tp in partitions}
        self.rebalancing = False
        self.ever_assigned = True

    def on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions}
        self.assigned -= gone
        self.at_end -= gone
        self.rebalancing = True

    def finished(self) -> bool:
        """-e: every partition assigned to this member has reached its end."""
        return self.exit_at_end and not self.rebalancing and self.assigned <= self.at_end


def _group_consumer(
    settings: Settings,
    address: str,
    properties: list[str] | None,
    member: GroupMember,
    offset_reset: str | None,
    isolation: Isolation = Isolation.READ_UNCOMMITTED,
) -> Consumer:
    config: dict[str, Any] = {
        "group.id": member.group,
        "isolation.level": isolation.value,
        "enable.auto.commit": member.auto_commit,
        # Offsets are stored by hand once their records are written: librdkafka's automatic
        # store would mark records consumed that -n or a broken pipe left unprinted.
        "enable.auto.offset.store": False,
        "enable.partition.eof": member.exit_at_end,
    }
    if offset_reset is not None:
        config["auto.offset.reset"] = offset_reset
    config.update(parse_properties(properties or []))
    member.auto_commit = str(config["enable.auto.commit"]).lower() in {"true", "1"}
    try:
        return Consumer(client_config(settings, address, config, role="consumer"))
    except (KafkaException, ValueError, TypeError) as exc:
        raise config_error(exc, "consumer", parse_properties(properties or [])) from None


def next_offsets(messages: Sequence[Message]) -> list[TopicPartition]:
    """What to commit after writing ``messages``: per partition, the last offset + 1 (with
    that record's leader epoch, as Kafka's consumers commit it)."""
    last: dict[tuple[str, int], Message] = {}
    for message in messages:
        key = (message.topic(), message.partition())
        if key not in last or message.offset() > last[key].offset():
            last[key] = message
    offsets = []
    for (topic, partition), message in sorted(last.items()):
        epoch = message.leader_epoch()
        if epoch is None or epoch < 0:
            offsets.append(TopicPartition(topic, partition, message.offset() + 1))
        else:
            offsets.append(
                TopicPartition(topic, partition, message.offset() + 1, leader_epoch=epoch)
            )
    return offsets


def _commit_written(
    consumer: Consumer, terminal: Terminal, member: GroupMember, written: Sequence[Message]
) -> None:
    """Store (auto-commit) or commit synchronously the offsets of records already written."""
    offsets = next_offsets(written)
    if not offsets:
        return
    if member.auto_commit:
        # Fails only for a partition revoked meanwhile: its new owner reads those again.
        with contextlib.suppress(KafkaException):
            consumer.store_offsets(offsets=offsets)
        return
    try:
        results = consumer.commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        reason = f"{error.name()}: {error.str()}" if error is not None else str(exc)
        terminal.warn(
            f"could not commit group '{member.group}' offsets ({reason}); "
            "the group will read those records again"
        )
        return
    failed = [tp for tp in results or [] if tp.error is not None]
    if failed:
        tp = failed[0]
        terminal.warn(
            f"could not commit group '{member.group}' offset of {tp.topic} [{tp.partition}] "
            f"({tp.error.name()}: {tp.error.str()}); the group will read those records again"
        )


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold a first Ctrl-C (or SIGTERM, which takes the same way out) until the block is done,
    then raise it.

    Around "write the records, then store or commit their offsets": an interrupt in between
    would leave printed records uncommitted, so the group would print them again. A second
    signal interrupts at once. A signal whose handler is not ours (ignored, as SIGINT is in a
    shell's background job) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        if held:
            raise interrupt_for(signum)
        held.append(signum)

    ours = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: raise_terminated}
    previous = {
        signum: signal.signal(signum, hold)
        for signum, handler in ours.items()
        if signal.getsignal(signum) is handler
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        raise interrupt_for(held[0])


def _run_group(
    consumer: Consumer,
    terminal: Terminal,
    topic: str,
    member: GroupMember,
    render: Callable[[Message], bytes],
    max_messages: int | None,
    address: str,
    assignment_wait_s: float = 10.0,
) -> None:
    consumer.subscribe(
        [topic], on_assign=member.on_assign, on_revoke=member.on_revoke, on_lost=member.on_revoke
    )
    started = time.monotonic()
    waited_note = False
    status = ConsumeStatus(consumer, topic, terminal.live_line(beside_records=True))
    while True:
        status.update(member.printed, sorted(member.assigned))
        if member.finished():
            if not member.assigned:
                terminal.note(
                    f"% No partition of topic {topic} is assigned to this member of group "
                    f"{member.group}: exiting"
                )
            return
        waiting_s = time.monotonic() - started
        if not (member.ever_assigned or waited_note) and waiting_s > assignment_wait_s:
            terminal.warn(
                f"group '{member.group}': no partitions assigned after "
                f"{assignment_wait_s:g} s; still waiting for the group's coordinator"
            )
            waited_note = True
        messages = consumer.consume(num_messages=BATCH_MESSAGES, timeout=POLL_TIMEOUT_S)
        out: list[bytes] = []
        written: list[Message] = []
        done = False
        for message in messages:
            error = message.error()
            if error is not None:
                _on_group_error(terminal, topic, member, message, error, address)
                continue
            member.at_end.discard(message.partition())
            out.append(render(message))
            written.append(message)
            member.printed += 1
            if max_messages is not None and member.printed >= max_messages:
                done = True
                break
        if out:
            with deferred_interrupt():
                terminal.write_bytes(b"".join(out))  # flushed: only then is anything committed
                _commit_written(consumer, terminal, member, written)
        if done:
            return


_GROUP_FATAL = {
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.INVALID_GROUP_ID,
    KafkaError.GROUP_MAX_SIZE_REACHED,
    KafkaError.INCONSISTENT_GROUP_PROTOCOL,
}


def _on_group_error(
    terminal: Terminal,
    topic: str,
    member: GroupMember,
    message: Message,
    error: KafkaError,
    address: str,
) -> None:
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        p = message.partition()
        if member.exit_at_end and p in member.assigned and p not in member.at_end:
            member.at_end.add(p)
            suffix = ": exiting" if member.finished() else ""
            terminal.note(
                f"% Reached end of topic {topic} [{p}] at offset {message.offset()}{suffix}"
            )
        return
    if code == KafkaError._TRANSPORT:
        return  # one connection dropped; librdkafka reconnects on its own
    if error.fatal() or code in _GROUP_FATAL:
        raise kafka_error(
            error, bootstrap=address, action=f"consume as group '{member.group}'", topic=topic
        )
    terminal.warn(f"{error.name()}: {error.str()}")
