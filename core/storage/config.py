"""A partition log's settings: Kafka's topic configs under snake_case names with their units."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from rlog.core.limits import (
    LOG_INDEX_INTERVAL_BYTES_DEFAULT,
    LOG_INDEX_SIZE_MAX_BYTES,
    LOG_SEGMENT_BYTES_DEFAULT,
    LOG_SEGMENT_BYTES_MAX,
    LOG_SEGMENT_BYTES_MIN,
    MESSAGE_MAX_BYTES,
)

WEEK_MS = 7 * 24 * 60 * 60 * 1000
DAY_MS = 24 * 60 * 60 * 1000
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
CLEANUP_POLICIES = ("delete", "compact", "compact,delete")


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = LOG_SEGMENT_BYTES_DEFAULT  # segment.bytes
    segment_ms: int = WEEK_MS  # segment.ms (log.roll.ms)
    index_interval_bytes: int = LOG_INDEX_INTERVAL_BYTES_DEFAULT  # index.interval.bytes
    index_size_max_bytes: int = LOG_INDEX_SIZE_MAX_BYTES  # segment.index.bytes
    retention_ms: int = WEEK_MS  # retention.ms; -1 keeps data forever
    retention_bytes: int = -1  # retention.bytes; -1 means no size limit
    flush_messages: int = LONG_MAX  # flush.messages; the default never flushes by count
    flush_ms: int = LONG_MAX  # flush.ms; the default never flushes by time
    message_max_bytes: int = MESSAGE_MAX_BYTES  # max.message.bytes, per batch
    message_timestamp_type: str = CREATE_TIME  # message.timestamp.type
    cleanup_policy: str = "delete"  # cleanup.policy: delete, compact or compact,delete
    delete_retention_ms: int = DAY_MS  # delete.retention.ms: how long tombstones stay
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: records stay uncompacted this long
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio, in [0, 1]

    def __post_init__(self) -> None:
        for name, (field_name, _, bounds) in _PROPERTIES.items():
            value = getattr(self, field_name)
            if bounds is None:
                continue
            low, high = bounds
            if type(value) is not int or not low <= value <= high:
                raise ValueError(f"invalid value '{value}' for {name}: must be in [{low}, {high}]")
        if self.message_timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(
                f"invalid value '{self.message_timestamp_type}' for message.timestamp.type: "
                f"must be {CREATE_TIME} or {LOG_APPEND_TIME}"
            )
        ratio = self.min_cleanable_dirty_ratio
        if type(ratio) not in (int, float) or not 0 <= ratio <= 1:
            raise ValueError(
                f"invalid value '{ratio}' for min.cleanable.dirty.ratio: must be in [0, 1]"
            )
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ValueError(
                f"invalid value '{self.cleanup_policy}' for cleanup.policy: "
                f"must be one of {', '.join(CLEANUP_POLICIES)}"
            )

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @property
    def deletes_by_retention(self) -> bool:
        """Kafka applies retention.ms/bytes only when the policy includes delete."""
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        """The log cleaner keeps only the latest record per key when the policy includes compact."""
        return "compact" in self.cleanup_policy

    @property
    def offset_index_entries_max(self) -> int:
        return self.index_size_max_bytes // 8

    @property
    def time_index_entries_max(self) -> int:
        return self.index_size_max_bytes // 12

    @classmethod
    def from_kafka_properties(
        cls, properties: Mapping[str, str], base: LogConfig | None = None
    ) -> LogConfig:
        """`base` (or the defaults) with these topic configs applied; ValueError on bad input."""
        changes: dict[str, Any] = {}
        for name, text in properties.items():
            if name not in _PROPERTIES:
                raise ValueError(f"unknown log config '{name}'")
            field_name, parse, _ = _PROPERTIES[name]
            changes[field_name] = parse(name, text)
        return replace(base or cls(), **changes)  # __post_init__ checks ranges and relations

    def to_kafka_properties(self) -> dict[str, str]:
        return {name: str(getattr(self, spec[0])) for name, spec in _PROPERTIES.items()}


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _parse_int(name: str, text: str) -> int:
    if not _INTEGER.fullmatch(text.strip()):
        raise ValueError(f"invalid value '{text}' for {name}: not an integer")
    return int(text.strip())


def _parse_ratio(name: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError(f"invalid value '{text}' for {name}: not a number") from None
    if value != value:  # NaN passes no range check
        raise ValueError(f"invalid value '{text}' for {name}: not a number")
    return value


def _parse_timestamp_type(name: str, text: str) -> str:
    return text.strip()


def _parse_cleanup_policy(name: str, text: str) -> str:
    # Kafka takes a list in any order; keep one spelling so equal configs compare equal.
    parts = sorted({part.strip() for part in text.split(",") if part.strip()})
    return ",".join(parts)


Parser = Callable[[str, str], int | float | str]

# Kafka topic config name -> (LogConfig field, parser, inclusive bounds of an integer). The bounds
# are Kafka's, except segment.bytes, which also stays below 2 GiB for 32-bit index positions.
_PROPERTIES: dict[str, tuple[str, Parser, tuple[int, int] | None]] = {
    "segment.bytes": ("segment_bytes", _parse_int, (LOG_SEGMENT_BYTES_MIN, LOG_SEGMENT_BYTES_MAX)),
    "segment.ms": ("segment_ms", _parse_int, (1, LONG_MAX)),
    "segment.index.bytes": ("index_size_max_bytes", _parse_int, (4, INT_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _parse_int, (0, INT_MAX)),
    "retention.ms": ("retention_ms", _parse_int, (-1, LONG_MAX)),
    "retention.bytes": ("retention_bytes", _parse_int, (-1, LONG_MAX)),
    "flush.messages": ("flush_messages", _parse_int, (1, LONG_MAX)),
    "flush.ms": ("flush_ms", _parse_int, (0, LONG_MAX)),
    "max.message.bytes": ("message_max_bytes", _parse_int, (0, INT_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _parse_timestamp_type, None),
    "cleanup.policy": ("cleanup_policy", _parse_cleanup_policy, None),
    "delete.retention.ms": ("delete_retention_ms", _parse_int, (0, LONG_MAX)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _parse_int, (0, LONG_MAX)),
    # A float: checked in __post_init__, as the bounds here are for integers.
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _parse_ratio, None),
}

# The topic configs LogConfig owns; the broker handles the others (min.insync.replicas, ...).
LOG_CONFIG_NAMES = frozenset(_PROPERTIES)

assert {spec[0] for spec in _PROPERTIES.values()} == {f.name for f in fields(LogConfig)}
