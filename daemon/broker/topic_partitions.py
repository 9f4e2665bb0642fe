"""Topics and partitions as the metadata image describes them: Metadata's entries, and
DescribeTopicPartitions (KIP-966; Kafka 4's kafka-topics --describe), which pages through them.

DescribeTopicPartitions follows Kafka's DescribeTopicPartitionsRequestHandler and
KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse: the topics asked for (every topic
when none is named, then unknown names are left out) from the cursor's topic on, sorted by
name; partitions from the cursor's index for that topic and from 0 for the rest, at most
`response_partition_limit` of them (capped at 2000, at least 1). When a topic does not fit, the
answer stops there and `next_cursor` names the first partition left out; when the limit is used
up exactly, it names the next topic at partition 0, whether or not that topic exists.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from typing import Any

from rlog.core.broker import INTERNAL_TOPICS
from rlog.core.controller.validation import topic_name_problem
from rlog.core.metadata.image import MetadataImage, PartitionInfo
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
# The listener fills in the bits (core/security/authorized_operations.py) as it answers.
NO_AUTHORIZED_OPERATIONS = -(2**31)
MAX_RESPONSE_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit default
ZERO_TOPIC_ID = uuid.UUID(int=0)


def is_internal(topic: str) -> bool:
    """Kafka's Topic.isInternal: the topics only the brokers write to."""
    return topic in INTERNAL_TOPICS


def partition_metadata(index: int, info: PartitionInfo, live_ids: Collection[int]) -> Body:
    """One partition as Metadata describes it; offline replicas are those on brokers the
    controller does not count live (fenced or never registered)."""
    return {
        "error_code": ErrorCode.NONE if info.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        "partition_index": index,
        "leader_id": info.leader,
        "leader_epoch": info.leader_epoch,
        "replica_nodes": list(info.replicas),
        "isr_nodes": list(info.isr),
        "offline_replicas": [r for r in info.replicas if r not in live_ids],
    }


def topic_name_error(name: str) -> ErrorCode:
    """The error for a topic the image does not have: is the name legal at all?"""
    if topic_name_problem(name, ()) is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _described_partition(index: int, info: PartitionInfo, live_ids: Collection[int]) -> Body:
    # DescribeTopicPartitions gives no partition an error, not even one without a leader
    # (leader -1 says it); rlog has no eligible leader replicas (KIP-966 ELR): empty lists.
    return partition_metadata(index, info, live_ids) | {
        "error_code": ErrorCode.NONE,
        "eligible_leader_replicas": [],
        "last_known_elr": [],
    }


def _topic_entry(image: MetadataImage, name: str, partitions: list[Body]) -> Body:
    topic = image.topics[name]
    return {
        "error_code": ErrorCode.NONE,
        "name": name,
        "topic_id": uuid.UUID(topic.topic_id),
        "is_internal": is_internal(name),
        "partitions": partitions,
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _error_topic(name: str, code: ErrorCode, *, internal: bool) -> Body:
    return {
        "error_code": code,
        "name": name,
        "topic_id": ZERO_TOPIC_ID,
        "is_internal": internal,
        "partitions": [],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _refused(names: list[str], code: ErrorCode) -> Body:
    """Kafka's answer to a request it refuses whole: every topic asked for, with `code`."""
    topics = [_error_topic(name, code, internal=False) for name in names]
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": None}


def describe_topic_partitions(image: MetadataImage, body: Body) -> Body:
    """The DescribeTopicPartitions answer to `body`, from `image`."""
    requested = [topic["name"] for topic in body.get("topics") or []]
    every_topic = not requested
    cursor = body.get("cursor")
    cursor_topic = cursor["topic_name"] if cursor is not None else ""
    candidates = image.topics if every_topic else requested
    names = sorted({name for name in candidates if name >= cursor_topic})
    if cursor is not None and (
        (not every_topic and cursor_topic not in names) or cursor["partition_index"] < 0
    ):
        return _refused(requested, ErrorCode.INVALID_REQUEST)
    live_ids = {b.broker_id for b in image.live_brokers()}
    remaining = max(
        min(MAX_RESPONSE_PARTITIONS, body.get("response_partition_limit", MAX_RESPONSE_PARTITIONS)),
        1,
    )
    topics: list[Body] = []
    next_cursor: Body | None = None
    for name in names:
        if remaining == 0:
            # The limit was used up exactly by the topics before: go on from this one.
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        topic = image.topics.get(name)
        if topic is None:
            if not every_topic:
                error = topic_name_error(name)
                topics.append(_error_topic(name, error, internal=is_internal(name)))
            continue
        start = cursor["partition_index"] if cursor is not None and name == cursor_topic else 0
        count = len(topic.partitions)
        end = min(count, start + remaining)
        partitions = [
            _described_partition(index, topic.partitions[index], live_ids)
            for index in range(start, end)
            if index in topic.partitions
        ]
        topics.append(_topic_entry(image, name, partitions))
        if end < count:
            next_cursor = {"topic_name": name, "partition_index": end}
            break
        remaining -= len(partitions)
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}
