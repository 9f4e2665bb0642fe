"""``rlog group list|describe|reset-offsets|delete-offsets|delete``: consumer groups, as
kafka-consumer-groups.sh.

Everything goes through confluent-kafka's AdminClient, as with real Kafka: ListGroups (v5,
which tells classic groups from consumer-protocol ones and filters by type), DescribeGroups,
OffsetFetch (``list_consumer_group_offsets``), OffsetCommit without a member
(``alter_consumer_group_offsets``), DeleteGroups, and ListOffsets for the log start / end
offsets and offsets by time. confluent-kafka's AdminClient has no OffsetDelete, so
``delete-offsets`` speaks it through rlog's own wire client (:class:`rlog.cli.replicas.
WireCluster`), as Kafka's admin client does: Metadata for the topics' partitions,
FindCoordinator (key type 0), then OffsetDelete v0 at the coordinator, asked again while the
coordinator moves or loads. ``describe`` asks the same way, with ConsumerGroupDescribe v0,
first: a group of the consumer group protocol (KIP-848) answers with its epochs and its members'
target assignments (rendered by :mod:`rlog.cli.group_describe`), a classic or unknown one with
GROUP_ID_NOT_FOUND, and DescribeGroups describes it instead, as Kafka's admin client does. The
computations (lag rows, reset planning with Kafka's clamping,
datetime and duration parsing, the deletion's outcome) are plain functions, so tests need no
broker.

Kafka refuses to change the offsets of a group that has members (only an Empty or a Dead group
can be reset; DeleteGroups answers NON_EMPTY_GROUP): both commands say so in one line naming
the group and its member count. As kafka-consumer-groups.sh, a reset of a group that does not
exist yet creates it with those offsets. OffsetDelete is finer: a consumer group with members
may lose the offsets of topics none of them subscribes to (the others answer
GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import typer
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from rlog.cli import replicas
from rlog.cli.admin import Admin, JsonOption, PropertyOption, open_admin
from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    Settings,
    check_reachable,
    kafka_error,
    resolve_bootstrap,
    settings_of,
    wire_tls,
)
from rlog.cli.group_describe import (
    CLASSIC,
    CONSUMER,
    CONSUMER_MEMBERS_HEADERS,
    CONSUMER_STATE_HEADERS,
    ConsumerGroupDescription,
    consumer_describe_document,
    consumer_group_of,
    consumer_members_rows,
    consumer_state_row,
    group_type_name,
    parse_group_types,
    protocol_note,
    reconciling_notes,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

app = typer.Typer(
    help="List, describe, reset and delete consumer groups and their offsets "
    "(kafka-consumer-groups.sh).",
    no_args_is_help=True,
)

GroupArgument = Annotated[str, typer.Argument(help="Consumer group id.", show_default=False)]

# A committed offset of -2 (Kafka's EARLIEST_TIMESTAMP, librdkafka's OFFSET_BEGINNING) is what
# kafkajs's admin.resetOffsets({earliest: true}) stores: "start at the log start". OffsetFetch
# answers it as it is, so describe shows the partition (other negative offsets mean no commit).
EARLIEST = -2

DESCRIBE_HEADERS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
MEMBERS_HEADERS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_HEADERS = ("GROUP", "COORDINATOR (ID)", "TYPE", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
LIST_TYPE_HEADERS = ("GROUP", "TYPE")  # list --type, as kafka-consumer-groups.sh --list --type
RESET_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
DELETE_OFFSETS_HEADERS = ("TOPIC", "PARTITION", "STATUS")  # kafka-consumer-groups.sh's

GROUP_KEY_TYPE = 0  # FindCoordinator's key type for a group (1: a transactional id)
RETRY_BACKOFF_S = 0.2
# Answers that mean "ask again, perhaps elsewhere": the group's coordinator is loading its
# partition of __consumer_offsets, has none elected yet, or moved.
COORDINATOR_RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}

# Kafka's names for the classic protocol's group states (ConsumerGroupState's are upper case).
STATE_NAMES = {
    ConsumerGroupState.UNKNOWN: "Unknown",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.EMPTY: "Empty",
}
# The classic protocol's rebalance states, and the consumer protocol's (KIP-848) while the
# assignor runs or members still move to their target assignments.
REBALANCING = {"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"}
RESETTABLE = {"Empty", "Dead"}  # Kafka resets only a group without members
# OffsetCommit answers for a member-less commit to a group that has members.
_LIVE_MEMBER_ERRORS = {
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
}


# -- pure parts: views, rows, plans ------------------------------------------------------


@dataclass(frozen=True)
class MemberView:
    """A member as DescribeGroups reports it."""

    consumer_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...] = ()
    group_instance_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "consumer_id": self.consumer_id,
            "host": self.host,
            "client_id": self.client_id,
            "group_instance_id": self.group_instance_id,
            "partitions": [{"topic": t, "partition": p} for t, p in self.partitions],
        }


@dataclass(frozen=True)
class GroupView:
    """A group's state and members (DescribeGroups), and whether it exists at all."""

    group: str
    state: str
    members: tuple[MemberView, ...] = ()
    assignment_strategy: str = ""
    coordinator: str | None = None  # "host:port (id)", as kafka-consumer-groups prints it
    exists: bool = True
    group_type: str = CLASSIC  # "classic" (DescribeGroups) or "consumer" (KIP-848)

    @property
    def member_count(self) -> int:
        return len(self.members)


@dataclass(frozen=True)
class LagRow:
    """One line of ``describe``: a partition the group has an offset for or a member owns."""

    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None

    def cells(self) -> tuple[Any, ...]:
        return (
            self.group,
            self.topic,
            self.partition,
            self.current_offset,
            self.log_end_offset,
            self.lag,
            self.consumer_id,
            self.host,
            self.client_id,
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.current_offset,
            "log_end_offset": self.log_end_offset,
            "lag": self.lag,
            "consumer_id": self.consumer_id,
            "host": self.host,
            "client_id": self.client_id,
        }


def state_name(state: Any) -> str:
    """A ConsumerGroupState (or Kafka's own string) as kafka-consumer-groups.sh prints it."""
    if isinstance(state, ConsumerGroupState):
        return STATE_NAMES.get(state, "Unknown")
    if isinstance(state, str) and state:
        by_upper = {name.upper(): name for name in STATE_NAMES.values()}
        return by_upper.get(state.replace("_", "").upper(), state)
    return "Unknown"


def lag_rows(
    group: str,
    committed: dict[tuple[str, int], int | None],
    log_ends: dict[tuple[str, int], int | None],
    members: Iterable[MemberView],
    log_starts: dict[tuple[str, int], int | None] | None = None,
) -> list[LagRow]:
    """kafka-consumer-groups.sh --describe: one row per partition with a committed offset or an
    owner, sorted by topic and partition. LAG = LOG-END-OFFSET - CURRENT-OFFSET; None ("-")
    where a value is missing (no commit, no owner, an unknown log end).

    A committed -2 (EARLIEST) is a row whose CURRENT-OFFSET is "-", as kafka-consumer-groups.sh
    shows it (Kafka's admin client turns any negative offset into "none"); its LAG is counted
    from the log start (``log_starts``), where the group's next consumer will begin, so the
    backlog it faces shows rather than "-"."""
    owners: dict[tuple[str, int], MemberView] = {}
    for member in members:
        for key in member.partitions:
            owners[key] = member
    keys = {
        k
        for k, offset in committed.items()
        if offset is not None and (offset >= 0 or offset == EARLIEST)
    }
    keys |= set(owners)
    rows = []
    for topic, partition in sorted(keys):
        current = committed.get((topic, partition))
        end = log_ends.get((topic, partition))
        lag_from = current
        if current == EARLIEST:
            lag_from = (log_starts or {}).get((topic, partition))
        if current is not None and current < 0:
            current = None
        owner = owners.get((topic, partition))
        rows.append(
            LagRow(
                group=group,
                topic=topic,
                partition=partition,
                current_offset=current,
                log_end_offset=end,
                lag=None if lag_from is None or lag_from < 0 or end is None else end - lag_from,
                consumer_id=owner.consumer_id if owner else None,
                host=owner.host if owner else None,
                client_id=owner.client_id if owner else None,
            )
        )
    return rows


def idle_member_rows(group: str, members: Iterable[MemberView]) -> list[tuple[Any, ...]]:
    """kafka-consumer-groups.sh also lists members that own no partition, topic and offsets
    "-" (more members than partitions, or a rebalance under way)."""
    return [
        (group, None, None, None, None, None, m.consumer_id, m.host, m.client_id)
        for m in members
        if not m.partitions
    ]


def group_note(view: GroupView) -> str:
    """The line kafka-consumer-groups.sh prints about the group's state before its table."""
    if view.member_count == 0:
        return f"Consumer group '{view.group}' has no active members."
    if view.state in REBALANCING:
        return f"Warning: Consumer group '{view.group}' is rebalancing."
    plural = "" if view.member_count == 1 else "s"
    return (
        f"Consumer group '{view.group}' is {view.state} with {view.member_count} "
        f"active member{plural}."
    )


def describe_document(view: GroupView, rows: Sequence[LagRow]) -> dict[str, Any]:
    return {
        "group": view.group,
        "type": view.group_type,
        "state": view.state,
        "coordinator": view.coordinator,
        "assignment_strategy": view.assignment_strategy or None,
        "member_count": view.member_count,
        "members": [m.as_json() for m in view.members],
        "partitions": [r.as_json() for r in rows],
    }


def members_rows(view: GroupView) -> list[tuple[Any, ...]]:
    return [
        (view.group, m.consumer_id, m.host, m.client_id, len(m.partitions)) for m in view.members
    ]


def state_row(view: GroupView) -> tuple[Any, ...]:
    return (
        view.group,
        view.coordinator,
        view.group_type,
        view.assignment_strategy or None,
        view.state,
        view.member_count,
    )


# reset planning


STRATEGY_FLAGS = (
    "--to-earliest",
    "--to-latest",
    "--to-current",
    "--to-offset",
    "--shift-by",
    "--to-datetime",
    "--by-duration",
)


@dataclass(frozen=True)
class ResetSpec:
    """One reset strategy: earliest|latest|current|offset|shift|timestamp (value: the offset,
    the shift, or the timestamp in ms)."""

    kind: str
    value: int = 0


@dataclass(frozen=True)
class PartitionOffsets:
    """What planning a reset needs to know about one partition."""

    topic: str
    partition: int
    log_start: int
    log_end: int
    committed: int | None = None
    at_timestamp: int | None = None  # first offset at or after the timestamp; None: none

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class PlannedOffset:
    group: str
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int
    requested: int  # before clamping into [log start, log end]

    @property
    def clamped(self) -> bool:
        return self.requested != self.new_offset

    def cells(self) -> tuple[Any, ...]:
        return (self.group, self.topic, self.partition, self.new_offset)

    def as_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "topic": self.topic,
            "partition": self.partition,
            "current_offset": self.current_offset,
            "new_offset": self.new_offset,
        }


class ResetError(ValueError):
    """A reset that cannot be planned (e.g. shifting a partition without a committed offset)."""


_DURATION = re.compile(
    r"(?P<sign>[-+])?P(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as kafka-consumer-groups.sh's --by-duration takes (``PnDTnHnMnS``,
    e.g. ``PT30M``, ``P1DT2H``), in milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    parts = ("days", "hours", "minutes", "seconds")
    if not match or not any(match.group(p) for p in parts) or text.strip().upper().endswith("T"):
        raise ValueError(f"bad duration {text!r} (ISO 8601 'PnDTnHnMnS', e.g. PT30M or P1DT2H)")
    seconds = (
        int(match.group("days") or 0) * 86_400
        + int(match.group("hours") or 0) * 3_600
        + int(match.group("minutes") or 0) * 60
        + float(match.group("seconds") or 0)
    )
    millis = round(seconds * 1000)
    return -millis if match.group("sign") == "-" else millis


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO 8601 as kafka-consumer-groups.sh (``YYYY-MM-DDTHH:mm:SS.sss``,
    optional ``Z`` or ``±HH:MM``; without one, local time, as Kafka), or unix milliseconds."""
    value = text.strip()
    if re.fullmatch(r"\d+", value):
        return int(value)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"bad datetime {text!r} (ISO 8601 such as 2026-01-31T12:00:00.000, with an optional "
            "Z or +HH:MM; or unix milliseconds)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a naive time is local time
    return int(moment.timestamp() * 1000)


def reset_spec(
    *,
    to_earliest: bool = False,
    to_latest: bool = False,
    to_current: bool = False,
    to_offset: int | None = None,
    shift_by: int | None = None,
    to_datetime: str | None = None,
    by_duration: str | None = None,
    now_ms: int | None = None,
) -> ResetSpec:
    """The one strategy the flags choose; ValueError when there are none or several."""
    chosen = [
        flag
        for flag, given in zip(
            STRATEGY_FLAGS,
            (
                to_earliest,
                to_latest,
                to_current,
                to_offset is not None,
                shift_by is not None,
                to_datetime is not None,
                by_duration is not None,
            ),
            strict=True,
        )
        if given
    ]
    if len(chosen) != 1:
        got = f"got {', '.join(chosen)}" if chosen else "got none"
        raise ValueError(f"choose exactly one of {'|'.join(STRATEGY_FLAGS)} ({got})")
    if to_earliest:
        return ResetSpec("earliest")
    if to_latest:
        return ResetSpec("latest")
    if to_current:
        return ResetSpec("current")
    if to_offset is not None:
        if to_offset < 0:
            raise ValueError(f"--to-offset must be >= 0, got {to_offset}")
        return ResetSpec("offset", to_offset)
    if shift_by is not None:
        return ResetSpec("shift", shift_by)
    if to_datetime is not None:
        return ResetSpec("timestamp", parse_datetime_ms(to_datetime))
    assert by_duration is not None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return ResetSpec("timestamp", now - parse_duration_ms(by_duration))


def plan_reset(
    group: str, spec: ResetSpec, partitions: Iterable[PartitionOffsets]
) -> list[PlannedOffset]:
    """The new offset of each partition, as kafka-consumer-groups.sh --reset-offsets computes
    it: a requested offset outside [log start, log end] is clamped into it; --shift-by and a
    partition without a committed offset is an error; --to-current without one takes the log
    end; a time after the last record takes the log end."""
    plans = []
    for p in sorted(partitions, key=lambda p: p.key):
        if spec.kind == "earliest":
            requested = p.log_start
        elif spec.kind == "latest":
            requested = p.log_end
        elif spec.kind == "current":
            requested = p.committed if p.committed is not None else p.log_end
        elif spec.kind == "offset":
            requested = spec.value
        elif spec.kind == "shift":
            if p.committed is None:
                raise ResetError(
                    f"cannot shift the offset of {p.topic} partition {p.partition} for group "
                    f"'{group}': it has no committed offset"
                )
            requested = p.committed + spec.value
        elif spec.kind == "timestamp":
            requested = p.at_timestamp if p.at_timestamp is not None else p.log_end
        else:
            raise ResetError(f"unknown reset strategy {spec.kind!r}")
        new = min(max(requested, p.log_start), p.log_end)
        plans.append(PlannedOffset(group, p.topic, p.partition, p.committed, new, requested))
    return plans


def clamp_note(plan: PlannedOffset) -> str:
    """Kafka's warning when a requested offset lies outside the partition's log."""
    side = "higher than latest" if plan.requested > plan.new_offset else "lower than earliest"
    return (
        f"new offset ({plan.requested}) is {side} offset for {plan.topic} partition "
        f"{plan.partition}; it will be set to {plan.new_offset}"
    )


def parse_topic_partitions(topic: str, partitions: Sequence[int] | None) -> tuple[str, list[int]]:
    """``--topic T`` plus ``--partition P``..., or Kafka's ``--topic T:0,1`` form."""
    name, sep, listed = topic.partition(":")
    chosen = list(partitions or [])
    if sep:
        try:
            chosen += [int(part) for part in listed.split(",") if part.strip()]
        except ValueError:
            raise ValueError(f"bad --topic {topic!r} (TOPIC or TOPIC:P,P,...)") from None
        if not listed.strip():
            raise ValueError(f"bad --topic {topic!r} (TOPIC or TOPIC:P,P,...)")
    if not name:
        raise ValueError(f"bad --topic {topic!r} (TOPIC or TOPIC:P,P,...)")
    if any(p < 0 for p in chosen):
        raise ValueError("partitions are numbers >= 0")
    return name, sorted(set(chosen))


def live_members_error(action: str, group: str, members: int | None, state: str | None) -> CliError:
    """Kafka refuses it while the group has members: one line naming the group and the count."""
    if members:
        have = f"it has {members} active member{'' if members == 1 else 's'}"
    else:
        have = "it has active members"
    where = f" (state {state})" if state else ""
    return CliError(
        f"cannot {action} consumer group '{group}': {have}{where}; Kafka only allows this for a "
        "group without members: stop its consumers first",
        ExitCode.FAILURE,
    )


def not_found_error(group: str) -> CliError:
    return CliError(f"consumer group '{group}' does not exist", ExitCode.NOT_FOUND)


def parse_delete_offsets_topics(topics: Sequence[str]) -> list[tuple[str, list[int]]]:
    """Each ``--topic`` of delete-offsets: ``T`` (every partition) or ``T:P,P``; a topic named
    twice gets the union (every partition wins)."""
    if not topics:
        raise ValueError("name at least one --topic (TOPIC or TOPIC:P,P,...)")
    chosen: dict[str, list[int] | None] = {}
    for text in topics:
        name, partitions = parse_topic_partitions(text, None)
        if not partitions or (name in chosen and chosen[name] is None):
            chosen[name] = None
        else:
            chosen[name] = sorted(set(chosen.get(name) or []) | set(partitions))
    return [(name, partitions or []) for name, partitions in chosen.items()]


@dataclass(frozen=True)
class DeletedOffset:
    """One partition of an OffsetDelete answer."""

    topic: str
    partition: int
    error: str | None  # None: deleted (or there was none); else Kafka's error name

    def cells(self) -> tuple[Any, ...]:
        return (self.topic, self.partition, f"Error: {self.error}" if self.error else "Successful")

    def as_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "error": self.error}


def deleted_offsets(answer: dict[str, Any]) -> list[DeletedOffset]:
    """An OffsetDelete answer's partitions, sorted by topic and partition."""
    return sorted(
        (
            DeletedOffset(
                topic["name"],
                part["partition_index"],
                None if part["error_code"] == 0 else replicas.error_name(part["error_code"]),
            )
            for topic in answer.get("topics") or []
            for part in topic.get("partitions") or []
        ),
        key=lambda d: (d.topic, d.partition),
    )


def delete_offsets_error(group: str, error_code: int) -> CliError:
    """A top-level OffsetDelete error, in one line."""
    if error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return not_found_error(group)
    if error_code == ErrorCode.NON_EMPTY_GROUP:
        return live_members_error("delete the offsets of", group, None, None)
    if error_code == ErrorCode.INVALID_GROUP_ID:
        return CliError(f"'{group}' is not a valid group id", ExitCode.USAGE)
    if error_code in COORDINATOR_RETRIABLE:
        return CliError(
            f"delete the offsets of group '{group}' failed: its coordinator did not settle "
            f"({replicas.error_name(error_code)}); try again",
            ExitCode.TIMEOUT,
        )
    return CliError(
        f"delete the offsets of group '{group}' failed: {replicas.error_name(error_code)}",
        ExitCode.FAILURE,
    )


def partition_failures_error(group: str, results: Sequence[DeletedOffset]) -> CliError | None:
    """None when every partition's offset went; else the error naming why the others stayed."""
    failed = [r for r in results if r.error]
    if not failed:
        return None
    subscribed = sorted({r.topic for r in failed if r.error == "GROUP_SUBSCRIBED_TO_TOPIC"})
    if subscribed:
        names = ", ".join(f"'{t}'" for t in subscribed)
        return CliError(
            f"kept the offsets of group '{group}' for {names}: its active members subscribe "
            "to it; stop them (or change their subscription) first",
            ExitCode.FAILURE,
        )
    first = failed[0]
    return CliError(
        f"delete the offsets of group '{group}' failed for {first.topic} partition "
        f"{first.partition}: {first.error}"
        + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""),
        ExitCode.FAILURE,
    )


# -- talking to the cluster --------------------------------------------------------------


def _code(exc: KafkaError | BaseException) -> int | None:
    error = exc if isinstance(exc, KafkaError) else (exc.args[0] if exc.args else None)
    return error.code() if isinstance(error, KafkaError) else None


def _cli_error(admin: Admin, exc: KafkaError | KafkaException, action: str) -> CliError:
    if _code(exc) == KafkaError._UNSUPPORTED_FEATURE:
        return CliError(
            f"{action} failed: the brokers at {admin.bootstrap} do not support consumer "
            "groups (no group coordinator APIs)",
            ExitCode.FAILURE,
        )
    return kafka_error(exc, bootstrap=admin.bootstrap, action=action)


def _result(admin: Admin, future: Any, action: str) -> Any:
    try:
        return future.result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        raise _cli_error(admin, exc, action) from None
    except TimeoutError:
        raise admin.timeout_error(action) from None


def _member_view(member: Any) -> MemberView:
    assignment = getattr(member, "assignment", None)
    partitions = tuple(
        sorted(
            (tp.topic, tp.partition) for tp in (getattr(assignment, "topic_partitions", None) or [])
        )
    )
    return MemberView(
        consumer_id=str(member.member_id),
        client_id=str(member.client_id or ""),
        host=str(member.host or ""),
        partitions=partitions,
        group_instance_id=getattr(member, "group_instance_id", None),
    )


def _coordinator(node: Any) -> str | None:
    if node is None or getattr(node, "id", -1) is None or node.id < 0:
        return None
    return f"{node.host}:{node.port} ({node.id})"


def describe_group(admin: Admin, group: str) -> GroupView:
    """DescribeGroups. A group Kafka calls Dead (or GROUP_ID_NOT_FOUND, as newer brokers
    answer) does not exist, unless it still has committed offsets."""
    futures = admin.client.describe_consumer_groups([group], request_timeout=admin.timeout_s)
    try:
        description = futures[group].result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        if _code(exc) == KafkaError.GROUP_ID_NOT_FOUND:
            return GroupView(group, "Dead", exists=False)
        raise _cli_error(admin, exc, f"describe group '{group}'") from None
    except TimeoutError:
        raise admin.timeout_error(f"describe group '{group}'") from None
    state = state_name(description.state)
    members = tuple(_member_view(m) for m in description.members or [])
    return GroupView(
        group=group,
        state=state,
        members=members,
        assignment_strategy=str(description.partition_assignor or ""),
        coordinator=_coordinator(getattr(description, "coordinator", None)),
        exists=not (state == "Dead" and not members),
    )


def committed_offsets(
    admin: Admin, group: str, partitions: Sequence[tuple[str, int]] | None = None
) -> dict[tuple[str, int], int | None]:
    """OffsetFetch: the group's committed offsets (all of them, or those partitions'); None
    where there is none, EARLIEST (-2) where that is what was committed."""
    wanted = [TopicPartition(t, p) for t, p in partitions] if partitions else None
    request = ConsumerGroupTopicPartitions(group, wanted)
    futures = admin.client.list_consumer_group_offsets([request], request_timeout=admin.timeout_s)
    result = _result(admin, futures[group], f"fetch the offsets of group '{group}'")
    offsets: dict[tuple[str, int], int | None] = {}
    for tp in result.topic_partitions or []:
        if tp.error is not None:
            continue
        offset = tp.offset
        offsets[(tp.topic, tp.partition)] = offset if offset >= 0 or offset == EARLIEST else None
    return offsets


def list_offsets(
    admin: Admin, keys: Iterable[tuple[str, int]], spec: OffsetSpec
) -> dict[tuple[str, int], int | None]:
    """ListOffsets for each partition; None where the partition answered with an error."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    futures = admin.client.list_offsets(
        {TopicPartition(t, p): spec for t, p in wanted}, request_timeout=admin.timeout_s
    )
    found: dict[tuple[str, int], int | None] = {}
    for tp, future in futures.items():
        try:
            info = future.result(timeout=admin.timeout_s + 5)
        except (KafkaException, TimeoutError):
            found[(tp.topic, tp.partition)] = None
            continue
        found[(tp.topic, tp.partition)] = info.offset if info.offset >= 0 else None
    return found


def topic_partition_ids(admin: Admin, topic: str) -> list[int]:
    try:
        metadata = admin.client.list_topics(topic=topic, timeout=admin.timeout_s)
    except KafkaException as exc:
        raise kafka_error(exc, bootstrap=admin.bootstrap, action="metadata", topic=topic) from None
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        if found is not None and found.error is not None:
            code = found.error.code()
            if code not in {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}:
                raise kafka_error(
                    found.error, bootstrap=admin.bootstrap, action="metadata", topic=topic
                )
        raise CliError(f"unknown topic '{topic}'", ExitCode.NOT_FOUND)
    return sorted(found.partitions)


def _wire(settings: Settings) -> replicas.WireCluster:
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap, settings.timeout_s)
    return replicas.WireCluster(bootstrap, settings.timeout_s, wire_tls(settings))


def _asking_until(
    deadline: float, ask: Callable[[], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """Ask again while the answer is a coordinator error worth retrying and the deadline has not
    passed; the last answer (None: no broker answered)."""
    while True:
        answer = ask()
        if answer is None or answer["error_code"] not in COORDINATOR_RETRIABLE:
            return answer
        if time.monotonic() + RETRY_BACKOFF_S >= deadline:
            return answer
        time.sleep(RETRY_BACKOFF_S)


def group_coordinator(cluster: replicas.WireCluster, group: str, deadline: float) -> int:
    """FindCoordinator v1 (key type 0): the broker id coordinating ``group``; a broker still
    catching up (COORDINATOR_NOT_AVAILABLE) is passed over for the others."""
    request = {"key": group, "key_type": GROUP_KEY_TYPE}

    def ask_every_broker() -> dict[str, Any]:
        last: dict[str, Any] | None = None
        for broker_id in sorted(cluster.brokers):
            body = cluster.request_at(broker_id, ApiKey.FIND_COORDINATOR, 1, request)
            if body is not None:
                last = body
                if body["error_code"] not in COORDINATOR_RETRIABLE:
                    return body
        return last or cluster.request_any(ApiKey.FIND_COORDINATOR, 1, request)

    body = _asking_until(deadline, ask_every_broker)
    assert body is not None
    if body["error_code"] != ErrorCode.NONE:
        reason = body.get("error_message") or replicas.error_name(body["error_code"])
        raise CliError(
            f"find the coordinator of group '{group}' failed: {reason}",
            ExitCode.TIMEOUT if body["error_code"] in COORDINATOR_RETRIABLE else ExitCode.FAILURE,
        )
    node_id = int(body["node_id"])
    cluster.brokers.setdefault(node_id, (body["host"], body["port"]))
    return node_id


def chosen_partitions(
    cluster: replicas.WireCluster, wanted: Sequence[tuple[str, list[int]]]
) -> list[tuple[str, list[int]]]:
    """Each topic's partitions to delete (all of them where none were named), checked against
    the cluster's Metadata: an unknown topic or partition is an error before anything changes."""
    metadata = replicas.fetch_metadata(cluster, [name for name, _ in wanted])
    found = {topic["name"]: topic for topic in metadata["topics"]}
    chosen = []
    for name, partitions in wanted:
        topic = found.get(name)
        if topic is None or topic["error_code"] != ErrorCode.NONE:
            raise CliError(f"unknown topic '{name}'", ExitCode.NOT_FOUND)
        available = sorted(p["partition_index"] for p in topic["partitions"])
        unknown = [p for p in partitions if p not in available]
        if unknown:
            raise CliError(
                f"topic '{name}' has no partition {unknown[0]} (it has {len(available)})",
                ExitCode.NOT_FOUND,
            )
        chosen.append((name, partitions or available))
    return chosen


def delete_group_offsets(
    cluster: replicas.WireCluster,
    group: str,
    topics: Sequence[tuple[str, list[int]]],
    timeout_s: float,
) -> dict[str, Any]:
    """OffsetDelete v0 at the group's coordinator, found again while it moves or loads; the
    last answer."""
    deadline = time.monotonic() + timeout_s
    request = {
        "group_id": group,
        "topics": [
            {"name": name, "partitions": [{"partition_index": p} for p in partitions]}
            for name, partitions in topics
        ],
    }

    def ask_the_coordinator() -> dict[str, Any] | None:
        node = group_coordinator(cluster, group, deadline)
        answer = cluster.request_at(node, ApiKey.OFFSET_DELETE, 0, request)
        if answer is None:  # it went down: another broker coordinates the group soon
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "topics": []}
        return answer

    answer = _asking_until(deadline, ask_the_coordinator)
    assert answer is not None
    return answer


def serves_api(cluster: replicas.WireCluster, api_key: ApiKey, version: int) -> bool:
    """ApiVersions v0 at a bootstrap broker: does it serve this version of the API?"""
    body = cluster.request_any(ApiKey.API_VERSIONS, 0, {})
    return any(
        entry["api_key"] == api_key and entry["min_version"] <= version <= entry["max_version"]
        for entry in body.get("api_keys") or []
    )


def consumer_describe_error(group: str, answer: dict[str, Any]) -> CliError:
    """A ConsumerGroupDescribe error other than GROUP_ID_NOT_FOUND, in one line."""
    code = answer["error_code"]
    if code == ErrorCode.INVALID_GROUP_ID:
        return CliError(f"'{group}' is not a valid group id", ExitCode.USAGE)
    reason = replicas.error_name(code)
    if answer.get("error_message"):
        reason += f" ({answer['error_message']})"
    if code in COORDINATOR_RETRIABLE:
        return CliError(
            f"describe group '{group}' failed: its coordinator did not settle ({reason}); "
            "try again",
            ExitCode.TIMEOUT,
        )
    return CliError(f"describe group '{group}' failed: {reason}", ExitCode.FAILURE)


def describe_consumer_group(
    cluster: replicas.WireCluster, group: str, timeout_s: float
) -> ConsumerGroupDescription | None:
    """ConsumerGroupDescribe v0 at the group's coordinator, found again while it moves or
    loads. None when the group is no consumer-protocol group (GROUP_ID_NOT_FOUND: a classic
    group, or none at all) or the brokers do not serve the API: DescribeGroups is the one to
    ask then, as Kafka's admin client does."""
    if not serves_api(cluster, ApiKey.CONSUMER_GROUP_DESCRIBE, 0):
        return None
    replicas.fetch_metadata(cluster, [])  # the brokers' addresses, for FindCoordinator's id
    deadline = time.monotonic() + timeout_s
    request = {"group_ids": [group], "include_authorized_operations": False}
    asked: list[int] = []

    def ask_the_coordinator() -> dict[str, Any]:
        node = group_coordinator(cluster, group, deadline)
        asked.append(node)
        body = cluster.request_at(node, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, request)
        if body is None:  # it went down: another broker coordinates the group soon
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        for answer in body.get("groups") or []:
            if answer.get("group_id") == group:
                return answer
        return {
            "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
            "error_message": "the answer did not name the group",
        }

    answer = _asking_until(deadline, ask_the_coordinator)
    assert answer is not None
    if answer["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    if answer["error_code"] != ErrorCode.NONE:
        raise consumer_describe_error(group, answer)
    node = asked[-1]
    address = cluster.brokers.get(node)
    coordinator = f"{address[0]}:{address[1]} ({node})" if address else None
    return consumer_group_of(answer, coordinator)


def consumer_group_view(description: ConsumerGroupDescription) -> GroupView:
    """The classic-shaped view of a consumer-protocol group, each member owning its current
    assignment: what the lag table and the state note are made of."""
    return GroupView(
        group=description.group,
        state=description.state,
        members=tuple(
            MemberView(
                consumer_id=m.member_id,
                client_id=m.client_id,
                host=m.host,
                partitions=m.assignment,
                group_instance_id=m.instance_id,
            )
            for m in description.members
        ),
        assignment_strategy=description.assignor,
        coordinator=description.coordinator,
        group_type=CONSUMER,
    )


# -- commands ----------------------------------------------------------------------------


@app.command("list")
def list_groups(
    ctx: typer.Context,
    group_types: Annotated[
        list[str] | None,
        typer.Option(
            "--type",
            metavar="classic|consumer",
            help="Only groups of this type, shown in a GROUP TYPE table (repeatable or "
            "comma-separated: --type classic,consumer shows every group with its type).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """List consumer group ids, one a line (with --json: each group's state too, null where
    the brokers do not report it).

    With --type, as kafka-consumer-groups.sh --list --type: only the groups of the protocol
    named, classic (JoinGroup/SyncGroup) or consumer (KIP-848), in a GROUP TYPE table (with
    --json: each group's type too)."""
    try:
        types = parse_group_types(group_types)
    except ValueError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = open_admin(settings, properties)
    if types:  # ListGroups v5's types_filter
        wanted = {
            ConsumerGroupType.CLASSIC if t == CLASSIC else ConsumerGroupType.CONSUMER for t in types
        }
        future = admin.client.list_consumer_groups(request_timeout=settings.timeout_s, types=wanted)
    else:
        future = admin.client.list_consumer_groups(request_timeout=settings.timeout_s)
    result = _result(admin, future, "list groups")
    errors = list(result.errors or [])
    listings = sorted(result.valid or [], key=lambda g: g.group_id)
    if errors and not listings:
        raise _cli_error(admin, errors[0], "list groups")
    for error in errors:  # some broker did not answer: the list may be incomplete
        settings.terminal.warn(f"list groups: {error.name()}: {error.str()}")
    if types:
        # The brokers filter; a group whose type they did not report is kept out as well.
        listings = [g for g in listings if group_type_name(getattr(g, "type", None)) in types]
    if json_out and types:
        settings.terminal.json(
            [
                {
                    "group": g.group_id,
                    "state": _listed_state(g.state),
                    "type": group_type_name(g.type),
                }
                for g in listings
            ]
        )
    elif json_out:
        settings.terminal.json(
            [{"group": g.group_id, "state": _listed_state(g.state)} for g in listings]
        )
    elif types:
        settings.terminal.table(
            LIST_TYPE_HEADERS, [(g.group_id, group_type_name(g.type)) for g in listings]
        )
    else:
        settings.terminal.lines(g.group_id for g in listings)


def _listed_state(state: Any) -> str | None:
    """ListGroups reports a state from v4 on (KIP-518), which rlog serves; an older broker
    answers without one: None (null)."""
    name = state_name(state)
    return None if name == "Unknown" else name


def _existing_group(
    admin: Admin, group: str
) -> tuple[GroupView, dict[tuple[str, int], int | None]]:
    """The group's description and committed offsets, or "does not exist"."""
    view = describe_group(admin, group)
    committed = committed_offsets(admin, group)
    if not view.exists and not any(o is not None for o in committed.values()):
        raise not_found_error(group)
    if not view.exists:  # Dead but with offsets: Kafka would call it Empty
        view = GroupView(group, "Empty", coordinator=view.coordinator)
    return view, committed


@app.command(no_args_is_help=True)
def describe(
    ctx: typer.Context,
    group: GroupArgument,
    json_out: JsonOption = False,
    members: Annotated[
        bool,
        typer.Option(
            "--members",
            help="One line per member: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS; for a "
            "consumer-protocol group also MEMBER-EPOCH SUBSCRIPTION ASSIGNMENT "
            "TARGET-ASSIGNMENT PENDING.",
        ),
    ] = False,
    state: Annotated[
        bool,
        typer.Option(
            "--state",
            help="One line: GROUP COORDINATOR (ID) TYPE ASSIGNMENT-STRATEGY STATE #MEMBERS; for "
            "a consumer-protocol group GROUP-EPOCH ASSIGNMENT-EPOCH before #MEMBERS.",
        ),
    ] = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Describe a consumer group as kafka-consumer-groups.sh --describe: per partition the
    committed offset (CURRENT-OFFSET), the high watermark (LOG-END-OFFSET), the LAG between
    them and the member that owns it; "-" (null in JSON) where there is none. A committed -2
    (reset to earliest, as kafkajs stores it) shows CURRENT-OFFSET "-" and the LAG from the log
    start offset.

    The group's state and member count go to stderr ("Consumer group 'G' has no active
    members." for a group without members). An unknown group is an error (exit 5).

    A group of the consumer group protocol (KIP-848, type consumer; ConsumerGroupDescribe) has
    the same table, each member owning the partitions it owns now, and stderr also gives its
    group and assignment epochs and names each member still reconciling, with the partitions
    it has yet to revoke and to be assigned. --state adds its epochs; --members each member's
    epoch, subscription, ASSIGNMENT (owned now), TARGET-ASSIGNMENT (what the assignor wants
    it to own) and PENDING (+ still to get, - still to give up, behind-epoch-N while the
    member has not reached the assignment epoch N: as Kafka, the coordinator does not report
    the partitions a member has yet to release; "-" once it owns its target), in the form
    TOPIC:P,P;TOPIC:P. A classic group (type classic) is described by DescribeGroups. --json
    gives the same fields, and "type" (classic or consumer) for either kind."""
    if members and state:
        raise CliError("use either --members or --state, not both", ExitCode.USAGE)
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = open_admin(settings, properties)
    cluster = replicas.WireCluster(admin.bootstrap, settings.timeout_s, wire_tls(settings))
    try:
        consumer = describe_consumer_group(cluster, group, settings.timeout_s)
    finally:
        cluster.close()
    if consumer is not None:
        view, committed = consumer_group_view(consumer), committed_offsets(admin, group)
    else:
        view, committed = _existing_group(admin, group)
    owned = {key for m in view.members for key in m.partitions}
    log_ends = list_offsets(
        admin, {k for k, o in committed.items() if o is not None} | owned, OffsetSpec.latest()
    )
    earliest = {k for k, o in committed.items() if o == EARLIEST}
    log_starts = list_offsets(admin, earliest, OffsetSpec.earliest())
    rows = lag_rows(group, committed, log_ends, view.members, log_starts)
    terminal = settings.terminal
    if json_out:
        if consumer is not None:
            terminal.json(consumer_describe_document(consumer, [r.as_json() for r in rows]))
        else:
            terminal.json(describe_document(view, rows))
        return
    terminal.note(group_note(view))
    if consumer is not None:
        terminal.note(protocol_note(consumer))
        for note in reconciling_notes(consumer):
            terminal.note(note)
    if state:
        if consumer is not None:
            terminal.table(CONSUMER_STATE_HEADERS, [consumer_state_row(consumer)])
        else:
            terminal.table(STATE_HEADERS, [state_row(view)])
    elif members:
        if consumer is not None and consumer.members:
            terminal.table(CONSUMER_MEMBERS_HEADERS, consumer_members_rows(consumer))
        elif view.members:
            terminal.table(MEMBERS_HEADERS, members_rows(view))
    else:
        idle = idle_member_rows(group, view.members)
        terminal.table(DESCRIBE_HEADERS, [r.cells() for r in rows] + idle)


def _check_no_members(admin: Admin, group: str, action: str) -> GroupView:
    view = describe_group(admin, group)
    if view.member_count or view.state not in RESETTABLE | {"Unknown"}:
        raise live_members_error(action, group, view.member_count, view.state)
    return view


def _partition_offsets(
    admin: Admin, group: str, topic: str, partitions: list[int], spec: ResetSpec
) -> list[PartitionOffsets]:
    keys = [(topic, p) for p in partitions]
    starts = list_offsets(admin, keys, OffsetSpec.earliest())
    ends = list_offsets(admin, keys, OffsetSpec.latest())
    missing = [k for k in keys if starts.get(k) is None or ends.get(k) is None]
    if missing:
        raise CliError(
            f"could not read the log start and end offsets of {topic} partition "
            f"{missing[0][1]} (is its leader down?)",
            ExitCode.FAILURE,
        )
    # A committed EARLIEST is no offset to shift from, as Kafka's admin client sees it.
    committed = {
        k: None if o == EARLIEST else o for k, o in committed_offsets(admin, group, keys).items()
    }
    at_time: dict[tuple[str, int], int | None] = {}
    if spec.kind == "timestamp":
        at_time = list_offsets(admin, keys, OffsetSpec.for_timestamp(spec.value))
    return [
        PartitionOffsets(
            topic,
            p,
            log_start=starts[(topic, p)] or 0,
            log_end=ends[(topic, p)] or 0,
            committed=committed.get((topic, p)),
            at_timestamp=at_time.get((topic, p)),
        )
        for p in partitions
    ]


def _alter(admin: Admin, group: str, plans: Sequence[PlannedOffset]) -> None:
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(p.topic, p.partition, p.new_offset) for p in plans]
    )
    futures = admin.client.alter_consumer_group_offsets([request], request_timeout=admin.timeout_s)
    try:
        result = futures[group].result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        if _code(exc) in _LIVE_MEMBER_ERRORS:
            raise live_members_error("reset the offsets of", group, None, None) from None
        raise _cli_error(admin, exc, f"reset the offsets of group '{group}'") from None
    except TimeoutError:
        raise admin.timeout_error(f"reset the offsets of group '{group}'") from None
    for tp in result.topic_partitions or []:
        if tp.error is None:
            continue
        if tp.error.code() in _LIVE_MEMBER_ERRORS:
            raise live_members_error("reset the offsets of", group, None, None)
        raise CliError(
            f"reset the offsets of group '{group}' failed for {tp.topic} partition "
            f"{tp.partition}: {tp.error.name()}: {tp.error.str()}",
            ExitCode.FAILURE,
        )


@app.command("reset-offsets", no_args_is_help=True)
def reset_offsets(
    ctx: typer.Context,
    group: GroupArgument,
    topic: Annotated[
        str,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC[:P,P...]",
            help="The topic whose offsets to reset (Kafka's TOPIC:0,1 form picks partitions).",
            show_default=False,
        ),
    ],
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            "-p",
            min=0,
            help="Only this partition (repeatable) [default: every partition of --topic].",
            show_default=False,
        ),
    ] = None,
    to_earliest: Annotated[
        bool, typer.Option("--to-earliest", help="Each partition's log start offset.")
    ] = False,
    to_latest: Annotated[
        bool, typer.Option("--to-latest", help="Each partition's log end (high watermark).")
    ] = False,
    to_current: Annotated[
        bool,
        typer.Option(
            "--to-current", help="The committed offset (the log end where there is none)."
        ),
    ] = False,
    to_offset: Annotated[
        int | None,
        typer.Option("--to-offset", metavar="N", help="Offset N.", show_default=False),
    ] = None,
    shift_by: Annotated[
        int | None,
        typer.Option(
            "--shift-by",
            metavar="N",
            help="The committed offset plus N (N < 0 goes back).",
            show_default=False,
        ),
    ] = None,
    to_datetime: Annotated[
        str | None,
        typer.Option(
            "--to-datetime",
            metavar="DATETIME",
            help="The first offset at or after this time: ISO 8601 "
            "(YYYY-MM-DDTHH:mm:SS.sss, optional Z or +HH:MM, else local time) or unix ms.",
            show_default=False,
        ),
    ] = None,
    by_duration: Annotated[
        str | None,
        typer.Option(
            "--by-duration",
            metavar="DURATION",
            help="As --to-datetime, this long before now (ISO 8601: PT30M, P1DT2H).",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Only print the new offsets (the default)."),
    ] = False,
    execute: Annotated[
        bool,
        typer.Option(
            "--execute",
            help="Apply the new offsets; without it nothing changes, as in "
            "kafka-consumer-groups.sh.",
        ),
    ] = False,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Reset a consumer group's committed offsets for a topic, with exactly one strategy.

    As kafka-consumer-groups.sh, it only prints the plan unless --execute is given, in that
    tool's table GROUP TOPIC PARTITION NEW-OFFSET. An offset outside a partition's log is
    clamped to its log start or end, as Kafka does. Refused while the group has members (Kafka
    resets only an Empty group); a group that does not exist yet is created with these
    offsets."""
    if dry_run and execute:
        raise CliError("use either --dry-run or --execute, not both", ExitCode.USAGE)
    try:
        spec = reset_spec(
            to_earliest=to_earliest,
            to_latest=to_latest,
            to_current=to_current,
            to_offset=to_offset,
            shift_by=shift_by,
            to_datetime=to_datetime,
            by_duration=by_duration,
        )
        name, chosen = parse_topic_partitions(topic, partition)
    except ValueError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = open_admin(settings, properties)
    available = topic_partition_ids(admin, name)
    unknown = [p for p in chosen if p not in available]
    if unknown:
        raise CliError(
            f"topic '{name}' has no partition {unknown[0]} (it has {len(available)})",
            ExitCode.NOT_FOUND,
        )
    _check_no_members(admin, group, "reset the offsets of")
    try:
        plans = plan_reset(
            group, spec, _partition_offsets(admin, group, name, chosen or available, spec)
        )
    except ResetError as exc:
        raise CliError(str(exc), ExitCode.FAILURE) from None
    terminal = settings.terminal
    for plan in plans:
        if plan.clamped:
            terminal.warn(clamp_note(plan))
    if execute:
        _alter(admin, group, plans)
    _print_plans(terminal, plans, json_out, applied=execute)


def _print_plans(
    terminal: Terminal, plans: Sequence[PlannedOffset], json_out: bool, *, applied: bool
) -> None:
    if json_out:
        terminal.json([p.as_json() for p in plans])
    else:
        terminal.table(RESET_HEADERS, [p.cells() for p in plans])
    if not applied:
        terminal.note("Dry run: no offsets were changed (add --execute to apply them).")


@app.command("delete-offsets", no_args_is_help=True)
def delete_offsets(
    ctx: typer.Context,
    group: GroupArgument,
    topic: Annotated[
        list[str],
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC[:P,P...]",
            help="A topic whose committed offsets to delete, all its partitions or those "
            "listed (repeatable).",
            show_default=False,
        ),
    ],
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Delete a consumer group's committed offsets for some topics (OffsetDelete, as
    kafka-consumer-groups.sh --delete-offsets), printing TOPIC PARTITION STATUS for each.

    The group keeps its other offsets and its members. Kafka allows it for a group without
    members, and for the topics a consumer group's members do not subscribe to: a subscribed
    topic's partitions keep their offsets (an error naming the topic, exit status 1)."""
    try:
        wanted = parse_delete_offsets_topics(topic)
    except ValueError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    if not group.strip():
        raise CliError("the group id must not be empty", ExitCode.USAGE)
    settings = settings_of(ctx).override(bootstrap, data_dir)
    cluster = _wire(settings)
    try:
        chosen = chosen_partitions(cluster, wanted)
        answer = delete_group_offsets(cluster, group, chosen, settings.timeout_s)
    finally:
        cluster.close()
    if answer["error_code"] != ErrorCode.NONE:
        raise delete_offsets_error(group, answer["error_code"])
    results = deleted_offsets(answer)
    terminal = settings.terminal
    if json_out:
        terminal.json([r.as_json() for r in results])
    else:
        terminal.table(DELETE_OFFSETS_HEADERS, [r.cells() for r in results])
    failure = partition_failures_error(group, results)
    if failure is not None:
        raise failure


@app.command(no_args_is_help=True)
def delete(
    ctx: typer.Context,
    group: GroupArgument,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Succeed if the group does not exist.")
    ] = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Delete a consumer group and its committed offsets (refused while it has members)."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = open_admin(settings, properties)
    futures = admin.client.delete_consumer_groups([group], request_timeout=settings.timeout_s)
    try:
        futures[group].result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        code = _code(exc)
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            if if_exists:
                return
            raise not_found_error(group) from None
        if code == KafkaError.NON_EMPTY_GROUP:
            view = describe_group(admin, group)
            raise live_members_error("delete", group, view.member_count, view.state) from None
        raise _cli_error(admin, exc, f"delete group '{group}'") from None
    except TimeoutError:
        raise admin.timeout_error(f"delete group '{group}'") from None
    settings.terminal.line(f"Deletion of requested consumer groups ('{group}') was successful.")
