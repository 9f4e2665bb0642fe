"""Driver-side planning: which topic-partitions, which offsets, and how to split the ranges.

Offsets travel as Spark's Kafka-source JSON, `{"topic": {"0": 23}}`, so they are plain dicts.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import pairwise

from confluent_kafka import Consumer, KafkaException, TopicPartition
from pyspark.sql.datasource import InputPartition

from .options import EARLIEST, LATEST, OffsetSpec, ReadOptions, RlogOptionError, consumer_config

log = logging.getLogger(__name__)

# Every driver-side broker request waits at most this long.
REQUEST_TIMEOUT_S = 15.0

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


class RlogDataLossError(RuntimeError):
    """Records Spark was asked to read are gone (and failOnDataLoss is true)."""


class OffsetRange(InputPartition):
    """One Spark input partition: records [from_offset, until_offset) of one topic-partition."""

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int) -> None:
        super().__init__((topic, partition, from_offset, until_offset))
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetRange) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return (
            f"OffsetRange({self.topic}-{self.partition} [{self.from_offset}, {self.until_offset}))"
        )


def to_json_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_json_offsets(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {
        (topic, int(partition)): int(offset)
        for topic, per_partition in offsets.items()
        for partition, offset in per_partition.items()
    }


@contextmanager
def metadata_consumer(options: ReadOptions) -> Iterator[Consumer]:
    consumer = Consumer(consumer_config(options.client_config, options.group_id_prefix))
    try:
        yield consumer
    finally:
        consumer.close()


def commit_progress(options: ReadOptions, group: str, offsets: Offsets) -> None:
    """Commit `offsets` to `group` (a member-less commit, as `assign()` consumers make). A
    failure is logged, not raised: this is a view of the query's progress, not its state."""
    config = consumer_config(options.client_config) | {"group.id": group}
    consumer = Consumer(config)
    try:
        consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
            asynchronous=False,
        )
    except KafkaException as error:
        log.warning("committing the stream's progress to group %r failed: %s", group, error)
    finally:
        consumer.close()


def topic_partitions(consumer: Consumer, options: ReadOptions) -> list[TopicPartitionKey]:
    """The topic-partitions the subscription names, sorted."""
    kind, value = options.subscription
    if kind == "assign":
        try:
            assigned = json.loads(value)
            return sorted((str(t), int(p)) for t, parts in assigned.items() for p in parts)
        except (ValueError, AttributeError, TypeError) as error:
            raise RlogOptionError(
                f"option 'assign' must be JSON like {{\"topic\":[0,1]}}, got {value!r}"
            ) from error
    metadata = consumer.list_topics(timeout=REQUEST_TIMEOUT_S)
    if kind == "subscribe":
        wanted = [t.strip() for t in value.split(",") if t.strip()]
    else:
        pattern = re.compile(value)
        wanted = [t for t in metadata.topics if pattern.fullmatch(t) and not t.startswith("__")]
    found: list[TopicPartitionKey] = []
    for topic in wanted:
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            continue  # as Spark's Kafka source: a missing topic simply has no partitions yet
        found.extend((topic, p) for p in described.partitions)
    return sorted(found)


def watermarks(
    consumer: Consumer, keys: list[TopicPartitionKey]
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """(log start offset, high watermark) for each topic-partition, asked of the broker."""
    return {key: _watermark(consumer, key) for key in keys}


# Errors a leader change or a dead broker causes; librdkafka refreshes metadata, so asking
# again finds the leader. _DESTROY_BROKER: the request waited on the handle of a broker that left
# the metadata (killed), which librdkafka decommissions (seen in CI's leader-kill pipeline test).
_RETRIABLE = {
    "NOT_LEADER_FOR_PARTITION",
    "LEADER_NOT_AVAILABLE",
    "FENCED_LEADER_EPOCH",
    "UNKNOWN_LEADER_EPOCH",
    "KAFKA_STORAGE_ERROR",
    "_TRANSPORT",
    "_TIMED_OUT",
    "_DESTROY_BROKER",
}


def _watermark(consumer: Consumer, key: TopicPartitionKey) -> tuple[int, int]:
    deadline = time.monotonic() + 30.0
    while True:
        try:
            return consumer.get_watermark_offsets(
                TopicPartition(*key), timeout=REQUEST_TIMEOUT_S, cached=False
            )
        except KafkaException as error:
            if error.args[0].name() not in _RETRIABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def offsets_for_timestamps(consumer: Consumer, timestamps: Offsets) -> Offsets:
    """For each partition, the first offset whose timestamp is >= its timestamp (ms), or -1
    when no record is that late."""
    asked = [TopicPartition(t, p, ms) for (t, p), ms in sorted(timestamps.items())]
    answered = consumer.offsets_for_times(asked, timeout=REQUEST_TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in answered}


def resolve(
    consumer: Consumer,
    spec: OffsetSpec,
    keys: list[TopicPartitionKey],
    marks: dict[TopicPartitionKey, tuple[int, int]],
    *,
    missing: int,
    no_match: str = "latest",
) -> Offsets:
    """Concrete offsets for `spec`. A partition a JSON spec does not name gets `missing`
    (EARLIEST or LATEST); -2/-1 in the JSON mean earliest/latest, as in Spark. A timestamp no
    record reaches gives the latest offset, or fails with no_match="error"."""
    if spec.kind == "timestamp":
        if spec.timestamp_ms is not None:
            wanted = dict.fromkeys(keys, spec.timestamp_ms)
        else:
            absent = [f"{t}-{p}" for t, p in keys if (t, p) not in spec.timestamps]
            if absent:
                raise RlogOptionError(
                    "an OffsetsByTimestamp option must give a timestamp for every partition "
                    f"read; missing: {', '.join(absent)}"
                )
            wanted = {key: spec.timestamps[key] for key in keys}
        found = offsets_for_timestamps(consumer, wanted) if wanted else {}
        resolved: Offsets = {}
        for key in keys:
            if found[key] >= 0:
                resolved[key] = found[key]
            elif no_match == "error":
                raise RlogOptionError(
                    f"no record of {key[0]}-{key[1]} has a timestamp >= {wanted[key]}; set "
                    "startingOffsetsByTimestampStrategy=latest to start such partitions at "
                    "their latest offset"
                )
            else:
                resolved[key] = marks[key][1]
        return resolved
    default = {"earliest": EARLIEST, "latest": LATEST}.get(spec.kind, missing)
    resolved = {}
    for key in keys:
        low, high = marks[key]
        wanted_offset = spec.offsets.get(key, default)
        resolved[key] = (
            low if wanted_offset == EARLIEST else high if wanted_offset == LATEST else wanted_offset
        )
    return resolved


def split_ranges(
    starting: Offsets,
    ending: Offsets,
    max_records_per_partition: int | None,
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """One range per topic-partition, cut into pieces of at most max_records_per_partition;
    then, while there are fewer than min_partitions pieces, the pieces are cut again, each into
    a number of equal parts in proportion to its size, so every core gets a share."""
    pieces: list[tuple[TopicPartitionKey, int, int]] = []
    for key in sorted(ending):
        start, end = starting.get(key, 0), ending[key]
        if end <= start:
            continue
        step = max_records_per_partition or (end - start)
        pieces.extend((key, low, min(low + step, end)) for low in range(start, end, step))
    if min_partitions and len(pieces) < min_partitions:
        total = sum(end - start for _key, start, end in pieces)
        cut: list[tuple[TopicPartitionKey, int, int]] = []
        for key, start, end in pieces:
            size = end - start
            parts = min(size, max(1, -(-size * min_partitions // total)))  # ceiling
            bounds = [start + size * i // parts for i in range(parts + 1)]
            cut.extend((key, low, high) for low, high in pairwise(bounds))
        pieces = cut
    return [OffsetRange(key[0], key[1], low, high) for key, low, high in pieces]
