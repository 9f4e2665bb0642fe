"""Spark's Kafka-source option names, parsed once into a plain, picklable value."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

# Offsets JSON uses Spark's Kafka-source sentinels.
EARLIEST = -2
LATEST = -1

SUBSCRIPTION_OPTIONS = ("subscribe", "subscribepattern", "assign")


class RlogOptionError(ValueError):
    """The user's options are wrong (our fault would be an AssertionError)."""


@dataclass(frozen=True)
class OffsetSpec:
    """`earliest`, `latest`, per-partition offsets {(topic, partition): offset or -2/-1}, or
    timestamps: one for every partition (`timestamp_ms`) or one per partition (`timestamps`)."""

    kind: str  # "earliest" | "latest" | "json" | "timestamp"
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp_ms: int | None = None
    timestamps: dict[tuple[str, int], int] = field(default_factory=dict)


# Spark's Kafka-source options (lower case, as Spark hands them over), then rlog's own.
KAFKA_SOURCE_OPTIONS = (
    "assign",
    "subscribe",
    "subscribePattern",
    "startingOffsets",
    "endingOffsets",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "groupIdPrefix",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
)
RLOG_SOURCE_OPTIONS = ("commitGroup", "bootstrap.servers")
STREAMING_ONLY_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
BATCH_ONLY_OPTIONS = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000


@dataclass(frozen=True)
class ReadOptions:
    client_config: dict[str, str]
    subscription: tuple[
        str, str
    ]  # ("subscribe", "a,b") | ("subscribepattern", re) | ("assign", json)
    starting: OffsetSpec
    ending: OffsetSpec
    include_headers: bool
    fail_on_data_loss: bool
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    poll_timeout_ms: int
    # startingOffsetsByTimestampStrategy: "error" (no offset matches a starting timestamp: fail)
    # or "latest" (start that partition at its latest offset).
    timestamp_strategy: str = "error"
    # A streaming trigger with fewer new records than this waits, up to max_trigger_delay_ms.
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    # At least this many Spark partitions: big offset ranges are cut into pieces.
    min_partitions: int | None = None
    # Consumers this read makes are in group `{group_id_prefix}-{uuid}` unless kafka.group.id.
    group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX
    # A consumer group the streaming read commits each finished batch's end offsets to, so
    # `rlog group describe` and the TUI show the query's lag; the checkpoint stays the truth.
    commit_group: str | None = None


DEFAULT_TRANSACTIONAL_ID_PREFIX = "rlog-spark"


@dataclass(frozen=True)
class WriteOptions:
    client_config: dict[str, str]
    # Option `topic`: every record's topic, over the data's `topic` column.
    topic: str | None
    # `exactlyOnce`: each task of a streaming micro-batch writes in one Kafka transaction and
    # records the batch in a marker consumer group, so a replayed batch writes nothing (writer.py).
    exactly_once: bool = False
    # Transactional ids and marker groups are f"{prefix}-{queryId}-{partitionId}".
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    # The topic whose partition 0 carries the marker offsets: `markerTopic`, else `topic`.
    marker_topic: str | None = None


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark hands Python data sources a case-insensitive dict; normalise to lower case keys.
    return {str(k).lower(): str(v) for k, v in options.items()}


def client_config(options: Mapping[str, str]) -> dict[str, str]:
    """`kafka.*` options passed to the client; `bootstrap.servers` accepted bare too.

    Spark lower-cases option names; librdkafka property names are all lower case, so nothing is
    lost.
    """
    lowered = _lower(options)
    config = {
        key[len("kafka.") :]: value for key, value in lowered.items() if key.startswith("kafka.")
    }
    if "bootstrap.servers" not in config and "bootstrap.servers" in lowered:
        config["bootstrap.servers"] = lowered["bootstrap.servers"]
    if "bootstrap.servers" not in config:
        raise RlogOptionError(
            "option 'kafka.bootstrap.servers' (or 'bootstrap.servers') must be set"
        )
    return config


def consumer_config(
    config: Mapping[str, str], group_id_prefix: str = DEFAULT_GROUP_ID_PREFIX
) -> dict[str, object]:
    """A confluent-kafka Consumer config for assign()-style reads; nothing is ever committed.
    `kafka.group.id` (in `config`) wins over the generated `{groupIdPrefix}-{uuid}`."""
    merged: dict[str, object] = {
        # librdkafka needs a group id even for assign(); it is never used to commit.
        "group.id": f"{group_id_prefix}-{uuid.uuid4().hex}",
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        # An offset below the log start jumps to the earliest record, which the reader then
        # reports as data loss; librdkafka's default (latest) would skip silently.
        "auto.offset.reset": "earliest",
    }
    merged.update(config)
    merged["enable.auto.commit"] = False
    merged["enable.auto.offset.store"] = False
    return merged


def _offset_spec(text: str | None, default: str, name: str) -> OffsetSpec:
    if text is None or text.strip().lower() == default:
        return OffsetSpec(default)
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return OffsetSpec(stripped.lower())
    try:
        parsed = json.loads(stripped)
        offsets = {
            (str(topic), int(partition)): int(offset)
            for topic, per_partition in parsed.items()
            for partition, offset in per_partition.items()
        }
    except (ValueError, AttributeError, TypeError) as error:
        raise RlogOptionError(
            f"option '{name}' must be 'earliest', 'latest' or JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}}, got {text!r}'
        ) from error
    return OffsetSpec("json", offsets)


def _timestamps_json(text: str, name: str) -> dict[tuple[str, int], int]:
    try:
        parsed = json.loads(text)
        return {
            (str(topic), int(partition)): int(timestamp)
            for topic, per_partition in parsed.items()
            for partition, timestamp in per_partition.items()
        }
    except (ValueError, AttributeError, TypeError) as error:
        raise RlogOptionError(
            f'option \'{name}\' must be JSON like {{"topic":{{"0":1700000000000}}}} '
            f"(milliseconds), got {text!r}"
        ) from error


def _timestamp_ms(lowered: Mapping[str, str], name: str) -> int:
    try:
        return int(lowered[name.lower()])
    except ValueError as error:
        raise RlogOptionError(f"option '{name}' must be milliseconds since the epoch") from error


def _position(lowered: Mapping[str, str], side: str, default: str) -> OffsetSpec:
    """startingX / endingX: `{side}Timestamp` beats `{side}OffsetsByTimestamp` beats
    `{side}Offsets`, as in Spark."""
    if f"{side}timestamp" in lowered:
        return OffsetSpec("timestamp", timestamp_ms=_timestamp_ms(lowered, f"{side}Timestamp"))
    by_timestamp = f"{side}offsetsbytimestamp"
    if by_timestamp in lowered:
        return OffsetSpec(
            "timestamp",
            timestamps=_timestamps_json(lowered[by_timestamp], f"{side}OffsetsByTimestamp"),
        )
    return _offset_spec(lowered.get(f"{side}offsets"), default, f"{side}Offsets")


def _duration_ms(lowered: Mapping[str, str], name: str, default: int) -> int:
    """Spark's durations: `15m`, `30s`, `500ms`, `1h`, `1d`, or bare milliseconds."""
    text = lowered.get(name.lower())
    if text is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", text.lower())
    if match is None:
        raise RlogOptionError(f"option '{name}' must be a duration like 15m, 30s or 500ms")
    unit = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}.get(
        match.group(2), 86_400_000
    )
    return int(match.group(1)) * unit


def _check_known(lowered: Mapping[str, str], streaming: bool) -> None:
    known = {name.lower() for name in (*KAFKA_SOURCE_OPTIONS, *RLOG_SOURCE_OPTIONS)}
    unknown = sorted(k for k in lowered if k not in known and not k.startswith("kafka."))
    if unknown:
        raise RlogOptionError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for format('rlog'); the options "
            f"are Spark's Kafka source's: {', '.join(KAFKA_SOURCE_OPTIONS)}, kafka.*; and "
            f"rlog's: {', '.join(RLOG_SOURCE_OPTIONS)}"
        )
    misplaced = BATCH_ONLY_OPTIONS if streaming else STREAMING_ONLY_OPTIONS
    for name in misplaced:
        if name.lower() in lowered:
            kind = "batch" if streaming else "streaming"
            raise RlogOptionError(f"option '{name}' is for {kind} queries only")


def _positive_int(lowered: Mapping[str, str], name: str) -> int | None:
    if name.lower() not in lowered:
        return None
    try:
        value = int(lowered[name.lower()])
    except ValueError as error:
        raise RlogOptionError(f"option '{name}' must be a positive integer") from error
    if value <= 0:
        raise RlogOptionError(f"option '{name}' must be a positive integer, got {value}")
    return value


def _bool(lowered: Mapping[str, str], name: str, default: bool) -> bool:
    text = lowered.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise RlogOptionError(f"option '{name}' must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _subscription(lowered: Mapping[str, str]) -> tuple[str, str]:
    given = [name for name in SUBSCRIPTION_OPTIONS if name in lowered]
    if len(given) != 1:
        raise RlogOptionError(
            "exactly one of 'subscribe', 'subscribePattern' or 'assign' must be set, got "
            f"{given or 'none'}"
        )
    kind = given[0]
    value = lowered[kind]
    if kind == "subscribepattern":
        try:
            re.compile(value)
        except re.error as error:
            raise RlogOptionError(f"option 'subscribePattern' is not a regex: {error}") from error
    if kind == "subscribe" and not [t for t in value.split(",") if t.strip()]:
        raise RlogOptionError("option 'subscribe' names no topic")
    return kind, value


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    lowered = _lower(options)
    _check_known(lowered, streaming)
    starting = _position(lowered, "starting", "latest" if streaming else "earliest")
    ending = _position(lowered, "ending", "latest")
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise RlogOptionError(
            f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got "
            f"{strategy!r}"
        )
    group_id_prefix = lowered.get("groupidprefix", DEFAULT_GROUP_ID_PREFIX).strip()
    if not group_id_prefix:
        raise RlogOptionError("option 'groupIdPrefix' must not be empty")
    if not streaming:
        if starting.kind == "latest" or LATEST in starting.offsets.values():
            raise RlogOptionError("startingOffsets 'latest' (-1) is not allowed for batch queries")
        if ending.kind == "earliest" or EARLIEST in ending.offsets.values():
            raise RlogOptionError("endingOffsets 'earliest' (-2) is not allowed for batch queries")
    return ReadOptions(
        client_config=client_config(options),
        subscription=_subscription(lowered),
        starting=starting,
        ending=ending,
        include_headers=_bool(lowered, "includeHeaders", False),
        fail_on_data_loss=_bool(lowered, "failOnDataLoss", True),
        max_records_per_partition=_positive_int(lowered, "maxRecordsPerPartition"),
        max_offsets_per_trigger=_positive_int(lowered, "maxOffsetsPerTrigger"),
        poll_timeout_ms=_positive_int(lowered, "kafkaConsumer.pollTimeoutMs") or 120_000,
        commit_group=_commit_group(lowered, streaming),
        timestamp_strategy=strategy,
        min_offsets_per_trigger=_positive_int(lowered, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=_duration_ms(lowered, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        min_partitions=_positive_int(lowered, "minPartitions"),
        group_id_prefix=group_id_prefix,
    )


def _commit_group(lowered: Mapping[str, str], streaming: bool) -> str | None:
    group = lowered.get("commitgroup")
    if group is None:
        return None
    if not streaming:
        raise RlogOptionError("option 'commitGroup' is for streaming reads only")
    if not group.strip():
        raise RlogOptionError("option 'commitGroup' must name a consumer group")
    return group.strip()


EXACTLY_ONCE_OPTIONS = ("transactionalIdPrefix", "markerTopic")


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    lowered = _lower(options)
    config = client_config(options)
    # As in Spark's Kafka sink, option `topic` overrides the data's `topic` column.
    topic = (lowered.get("topic") or "").strip() or None
    exactly_once = _bool(lowered, "exactlyOnce", False)
    if not exactly_once:
        given = [name for name in EXACTLY_ONCE_OPTIONS if name.lower() in lowered]
        if given:
            raise RlogOptionError(f"option {given[0]!r} needs option 'exactlyOnce' set to true")
        return WriteOptions(client_config=config, topic=topic)
    if "transactional.id" in config:
        raise RlogOptionError(
            "option 'kafka.transactional.id' cannot be set with 'exactlyOnce': every task gets "
            "its own transactional id; set 'transactionalIdPrefix' instead"
        )
    prefix = lowered.get("transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    if not prefix:
        raise RlogOptionError("option 'transactionalIdPrefix' must not be empty")
    marker_topic = (lowered.get("markertopic") or topic or "").strip()
    if not marker_topic:
        raise RlogOptionError(
            "option 'exactlyOnce' needs a topic for its batch markers: set option 'topic' or "
            "option 'markerTopic' (an existing topic; its partition 0 is used)"
        )
    return WriteOptions(
        client_config=config,
        topic=topic,
        exactly_once=True,
        transactional_id_prefix=prefix,
        marker_topic=marker_topic,
    )
