"""A leader's answers for one partition: Fetch (followers and consumers), ListOffsets and
OffsetForLeaderEpoch, as Kafka's response bodies.

Pure functions over a `Replica` (or None when this broker does not host the partition). They
never raise for a client's bad input: every problem is the protocol's error code on the part of
the request it concerns.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlog.core.broker.messages import Body
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import NO_EPOCH, Effect, Replica

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2  # ListOffsets from tools: any replica answers, latest = its LEO
READ_COMMITTED = 1  # Fetch's and ListOffsets' isolation_level
# KIP-112: Fetch v6 (Produce v4, see produce.py) is the first whose clients know
# KAFKA_STORAGE_ERROR; older ones get NOT_LEADER_OR_FOLLOWER, which also sends them to the metadata.
FETCH_STORAGE_ERROR_VERSION_MIN = 6


def empty_fetch_partition(index: int, code: int = 0) -> Body:
    """A Fetch answer for one partition with no records (the starting point of every answer)."""
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        # Empty, not null: librdkafka rejects a null record set as a protocol error.
        "records": b"",
    }


def offline_fetch_error(api_version: int) -> ErrorCode:
    """A Fetch's error for a partition whose log dir is offline, as its version knows it."""
    if api_version < FETCH_STORAGE_ERROR_VERSION_MIN:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.KAFKA_STORAGE_ERROR


def not_hosted_error(image: MetadataImage, topic: str, index: int) -> ErrorCode:
    """Why a partition without a replica here cannot be served: it exists elsewhere, or not."""
    if image.partition(topic, index) is not None:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def fetch_partition(
    replica: Replica | None,
    image: MetadataImage,
    topic: str,
    request: Body,
    replica_id: int,
    max_bytes: int,
    now_ms: int,
    *,
    min_one_batch: bool,
    read_committed: bool = False,
    arrived: bool = True,
) -> tuple[Body, Sequence[Effect]]:
    """One partition of a Fetch: a follower's (it reads to the LEO and reports its own LEO) or
    a consumer's (it reads below the HW). Returns the answer and the replica's effects.
    `arrived` False: the request is served again after waiting, and only reads."""
    index = request["partition"]
    answer = empty_fetch_partition(index)
    if replica is None:
        return answer | {"error_code": not_hosted_error(image, topic, index)}, ()
    if replica_id >= 0:
        found = replica.on_follower_fetch(
            replica_id,
            request["fetch_offset"],
            request.get("last_fetched_epoch", NO_EPOCH),
            request["current_leader_epoch"],
            now_ms,
            max_bytes=max_bytes,
            min_one_batch=min_one_batch,
            record_progress=arrived,
        )
        answer |= {
            "error_code": found.error,
            "high_watermark": found.high_watermark,
            "last_stable_offset": found.high_watermark,
            "log_start_offset": found.log_start_offset,
            "records": found.records if found.records is not None else b"",
        }
        if found.diverging_epoch is not None:  # Fetch v12+; older versions leave it out
            diverging = found.diverging_epoch
            answer["diverging_epoch"] = {
                "epoch": diverging.epoch,
                "end_offset": diverging.end_offset,
            }
        return answer, found.effects
    result = replica.on_consumer_fetch(
        request["fetch_offset"],
        max_bytes,
        current_leader_epoch=request["current_leader_epoch"],
        min_one_batch=min_one_batch,
        read_committed=read_committed,
    )
    aborted = [
        {"producer_id": txn.producer_id, "first_offset": txn.first_offset} for txn in result.aborted
    ]
    return answer | {
        "error_code": result.error,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset,
        "aborted_transactions": aborted if read_committed else None,
        "records": result.records if result.records is not None else b"",
    }, ()


def list_offset(
    replica: Replica | None,
    image: MetadataImage,
    topic: str,
    request: Body,
    replica_id: int,
    *,
    read_committed: bool = False,
) -> Body:
    """One partition of ListOffsets: the earliest, the latest (the LSO for read_committed), or
    the first offset at or after a timestamp."""
    index = request["partition_index"]
    answer: Body = {
        "partition_index": index,
        "error_code": ErrorCode.NONE,
        "timestamp": -1,
        "offset": -1,
        "leader_epoch": -1,
    }
    if replica is None:
        return answer | {"error_code": not_hosted_error(image, topic, index)}
    # As Kafka: tools (replica id -2) may ask any replica; clients and followers the leader.
    if replica_id != DEBUGGING_REPLICA_ID:
        error = replica.leader_error(request["current_leader_epoch"])
        if error is None and replica_id == CONSUMER_REPLICA_ID and not replica.serves_consumers:
            error = ErrorCode.OFFSET_NOT_AVAILABLE  # KIP-207: a new leader's HW lags
        if error is not None:
            return answer | {"error_code": error}
    epoch = replica.leader_epoch
    timestamp = request["timestamp"]
    if timestamp == EARLIEST_TIMESTAMP:
        return answer | {"offset": replica.log_start_offset, "leader_epoch": epoch}
    if timestamp == LATEST_TIMESTAMP:
        # Consumers see the high watermark; replicas and tools the log end.
        consumer = replica_id == CONSUMER_REPLICA_ID
        latest = replica.high_watermark if consumer else replica.log_end_offset
        if consumer and read_committed:
            latest = replica.last_stable_offset
        return answer | {"offset": latest, "leader_epoch": epoch}
    if timestamp < 0:
        return answer | {"error_code": ErrorCode.UNSUPPORTED_VERSION}
    found = replica.log.offset_for_timestamp(timestamp)
    visible = replica.last_stable_offset if read_committed else replica.high_watermark
    if found is None or found[0] >= visible:
        return answer
    offset, found_timestamp = found
    return answer | {"offset": offset, "timestamp": found_timestamp, "leader_epoch": epoch}


def epoch_end_offset(
    replica: Replica | None, image: MetadataImage, topic: str, wanted: Body
) -> Body:
    """One partition of OffsetForLeaderEpoch: where an epoch ends (KIP-101/279). Consumers
    validate their position with it after a leader change; followers find where they diverge."""
    index = wanted["partition"]
    if replica is None:
        code, epoch, end_offset = not_hosted_error(image, topic, index), -1, -1
    else:
        code, epoch, end_offset = replica.offsets_for_leader_epoch(
            wanted["leader_epoch"], wanted["current_leader_epoch"]
        )
    return {"error_code": code, "partition": index, "leader_epoch": epoch, "end_offset": end_offset}
