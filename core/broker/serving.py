"""A broker's answers for one partition, as Kafka's response bodies: the leader's Fetch
(followers and consumers), ListOffsets and OffsetForLeaderEpoch, and any replica's
DescribeProducers.

Pure functions over a `Replica` (or None when this broker does not host the partition). They
never raise for a client's bad input: every problem is the protocol's error code on the part of
the request it concerns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from rlog.core.broker.messages import Body, TopicPartition
from rlog.core.controller.validation import topic_name_problem
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.log_store import METADATA_TOPIC
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import decode_batch
from rlog.core.replication import NO_EPOCH, Effect, Replica
from rlog.core.replication.rules import leader_epoch_error
from rlog.core.storage.log import Log
from rlog.core.values import value

# ListOffsets' special timestamps, and the first version that may ask for each (Kafka's
# ReplicaManager refuses one asked in an older version with UNSUPPORTED_VERSION).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734: the record with the largest timestamp
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the local log's start (the log start without tiering)
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the last tiered offset (none without tiering)
SPECIAL_TIMESTAMP_VERSION_MIN = {
    LATEST_TIMESTAMP: 1,
    EARLIEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}
# ListOffsets v5 added OFFSET_NOT_AVAILABLE; older clients get LEADER_NOT_AVAILABLE, as in Kafka.
LIST_OFFSETS_NOT_AVAILABLE_VERSION_MIN = 5
UNKNOWN_OFFSET = -1
UNKNOWN_TIMESTAMP = -1
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
            log_start_offset=_said_log_start(request),
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


def list_offsets(
    body: Body,
    api_version: int,
    image: MetadataImage,
    replica_of: Callable[[TopicPartition], Replica | None],
    *,
    offline: bool,
) -> Body:
    """A ListOffsets answer, as Kafka's ReplicaManager.fetchOffset checks each partition: asked
    twice (INVALID_REQUEST, answered once), a special timestamp its version does not know
    (UNSUPPORTED_VERSION), hosted in the offline log dir (`offline`: KAFKA_STORAGE_ERROR), then
    `list_offset`. v10's TimeoutMs is for reads from tiered storage, which rlog has not."""
    replica_id = body.get("replica_id", CONSUMER_REPLICA_ID)
    read_committed = body.get("isolation_level", 0) == READ_COMMITTED
    asked = Counter(
        (topic["name"], partition["partition_index"])
        for topic in body["topics"]
        for partition in topic["partitions"]
    )
    answered: set[TopicPartition] = set()
    topics = []
    for topic in body["topics"]:
        name = topic["name"]
        partitions = []
        for request in topic["partitions"]:
            key = (name, request["partition_index"])
            if key in answered:
                continue
            answered.add(key)
            answer = _unknown_offset(request["partition_index"])
            replica = replica_of(key)
            if asked[key] > 1:
                answer["error_code"] = ErrorCode.INVALID_REQUEST
            elif not timestamp_supported(request["timestamp"], api_version):
                answer["error_code"] = ErrorCode.UNSUPPORTED_VERSION
            elif replica is not None and offline:
                answer["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
            else:
                answer = list_offset(
                    replica,
                    image,
                    name,
                    request,
                    replica_id,
                    api_version=api_version,
                    read_committed=read_committed,
                )
            partitions.append(answer)
        topics.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def timestamp_supported(timestamp: int, api_version: int) -> bool:
    """Whether a ListOffsets of `api_version` may ask for `timestamp` (any real time, or a
    special one from the version that introduced it)."""
    if timestamp >= 0:
        return True
    since = SPECIAL_TIMESTAMP_VERSION_MIN.get(timestamp)
    return since is not None and api_version >= since


def _unknown_offset(index: int) -> Body:
    """A ListOffsets partition answer with no offset: also what "nothing found" looks like."""
    return {
        "partition_index": index,
        "error_code": ErrorCode.NONE,
        "timestamp": UNKNOWN_TIMESTAMP,
        "offset": UNKNOWN_OFFSET,
        "leader_epoch": NO_EPOCH,
    }


def list_offset(
    replica: Replica | None,
    image: MetadataImage,
    topic: str,
    request: Body,
    replica_id: int,
    *,
    api_version: int,
    read_committed: bool,
) -> Body:
    """One partition of ListOffsets, as Kafka's Partition.fetchOffsetForTimestamp: the earliest
    offset, the latest (the HW for consumers, the LSO for read_committed ones, the LEO for
    replicas and tools), the record with the largest timestamp, or the first record at or after
    a timestamp; found records count only below that same latest offset."""
    index = request["partition_index"]
    answer = _unknown_offset(index)
    if replica is None:
        return answer | {"error_code": not_hosted_error(image, topic, index)}
    current_leader_epoch = request.get("current_leader_epoch", NO_EPOCH)
    if replica_id == DEBUGGING_REPLICA_ID:  # tools may ask any replica, in its epoch
        error = leader_epoch_error(current_leader_epoch, replica.leader_epoch)
    else:  # clients and followers ask the leader
        error = replica.leader_error(current_leader_epoch)
    if error is not None:
        return answer | {"error_code": error}
    consumer = replica_id == CONSUMER_REPLICA_ID
    # KIP-207: a new leader whose HW has not reached its epoch's start shows consumers no
    # offset at or past that HW, since it may be below what the old leader showed them.
    hw_lags = consumer and not replica.serves_consumers
    lags_error = (
        ErrorCode.OFFSET_NOT_AVAILABLE
        if api_version >= LIST_OFFSETS_NOT_AVAILABLE_VERSION_MIN
        else ErrorCode.LEADER_NOT_AVAILABLE  # what older clients know
    )
    if not consumer:
        last_fetchable = replica.log_end_offset
    elif read_committed:
        last_fetchable = replica.last_stable_offset
    else:
        last_fetchable = replica.high_watermark
    timestamp = request["timestamp"]
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        # Without tiered storage the local log starts where the log does.
        return answer | {
            "offset": replica.log_start_offset,
            "leader_epoch": _log_start_epoch(replica),
        }
    if timestamp == LATEST_TIMESTAMP:
        if hw_lags:
            return answer | {"error_code": lags_error}
        return answer | {"offset": last_fetchable, "leader_epoch": replica.leader_epoch}
    if timestamp == LATEST_TIERED_TIMESTAMP:
        found: _Found | None = _NOTHING_TIERED
    elif timestamp == MAX_TIMESTAMP:
        found = max_timestamp_record(replica.log)
    else:
        found = _first_record_at_or_after(replica.log, timestamp)
    if found is None or found.offset >= last_fetchable:
        return (answer | {"error_code": lags_error}) if hw_lags else answer
    return answer | {
        "timestamp": found.timestamp,
        "offset": found.offset,
        "leader_epoch": found.leader_epoch,
    }


@value
class _Found:
    """A record ListOffsets found, with the leader epoch of its batch (-1: none stamped)."""

    offset: int
    timestamp: int
    leader_epoch: int


# KIP-1005 without tiered storage: nothing is tiered, and Kafka answers -1 for all three.
_NOTHING_TIERED = _Found(UNKNOWN_OFFSET, UNKNOWN_TIMESTAMP, NO_EPOCH)


def _log_start_epoch(replica: Replica) -> int:
    """The epoch of the log start offset, as Kafka tells it with the earliest offset: its
    first cached epoch if that covers the log start, else -1 (a log written without epochs).
    Kafka cuts its cache whenever the log start moves, so that first epoch is the one holding
    the log start; rlog's retention leaves older epochs in the cache, so look that one up."""
    start = replica.log_start_offset
    holding = [entry.epoch for entry in replica.epochs.entries if entry.start_offset <= start]
    return holding[-1] if holding else NO_EPOCH


def _first_record_at_or_after(log: Log, timestamp: int) -> _Found | None:
    found = log.offset_for_timestamp(timestamp)
    if found is None:
        return None
    offset, record_timestamp = found
    batch = next(log.iter_batch_headers(offset))  # the batch holding it: its leader epoch
    return _Found(offset, record_timestamp, max(batch.partition_leader_epoch, NO_EPOCH))


def max_timestamp_record(log: Log) -> _Found | None:
    """The record with the largest timestamp (KIP-734), found as Kafka's
    UnifiedLog.fetchOffsetByTimestamp(MAX_TIMESTAMP) finds it: the first segment holding the
    largest batch maxTimestamp, the first batch there with that maxTimestamp, and in it the
    first record with that timestamp (under LogAppendTime, its first record). None when that
    batch has no such record (emptied by compaction) or the log has no batch.

    As in Kafka, records below the log start offset in its first segment still count: Kafka
    reads the whole segment. Segments that end below the log start (rlog has not deleted
    them yet) do not."""
    start = log.log_start_offset
    segments = [segment for segment in log.segments if segment.next_offset > start]
    if not segments:
        return None
    # max() keeps the first of equals, as Kafka's maxBy does.
    segment = max(segments, key=lambda candidate: candidate.largest_timestamp)
    largest = segment.largest_timestamp
    for position, header in segment.batches_from(segment.offset_of_largest_timestamp):
        if header.max_timestamp != largest:
            continue
        for record in decode_batch(segment.read_batch(position, header)):
            if record.timestamp == largest:
                return _Found(record.offset, largest, max(header.partition_leader_epoch, NO_EPOCH))
        return None
    return None


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


def describe_producers(
    body: Body,
    image: MetadataImage,
    replica_of: Callable[[TopicPartition], Replica | None],
    *,
    offline: bool,
) -> Body:
    """A DescribeProducers answer, as Kafka's KafkaApis and ReplicaManager.activeProducerState
    give it: an invalid or unknown topic fails all its partitions; a partition hosted here
    answers from its producer state, whatever the replica's role (Kafka lets followers answer,
    and `kafka-transactions describe-producers --broker-id` asks them); one hosted in the
    offline log dir (`offline`) answers KAFKA_STORAGE_ERROR."""
    topics = []
    for topic in body["topics"]:
        name = topic["name"]
        # Kafka checks only the name's form here: the metadata topic is just unknown.
        problem = None if name == METADATA_TOPIC else topic_name_problem(name, ())
        partitions = []
        for index in topic["partition_indexes"]:
            if problem is not None:
                answer = _producers_error(index, ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
            elif name not in image.topics:
                answer = _producers_error(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                replica = replica_of((name, index))
                answer = active_producers(replica, image, name, index, offline=offline)
            partitions.append(answer)
        topics.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def active_producers(
    replica: Replica | None, image: MetadataImage, topic: str, index: int, *, offline: bool
) -> Body:
    """One partition of DescribeProducers: every producer its state holds (sorted by id)."""
    if replica is None:
        return _producers_error(index, not_hosted_error(image, topic, index))
    if offline:
        return _producers_error(index, ErrorCode.KAFKA_STORAGE_ERROR)
    producers = sorted(replica.producers.entries, key=lambda entry: entry.producer_id)
    answer = _producers_error(index, ErrorCode.NONE)
    answer["active_producers"] = [
        {
            "producer_id": entry.producer_id,
            "producer_epoch": entry.epoch,
            "last_sequence": entry.last_sequence,  # -1 before its first idempotent batch
            "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": entry.current_txn_first_offset,  # -1: none open
        }
        for entry in producers
    ]
    return answer


def _producers_error(index: int, code: ErrorCode, message: str | None = None) -> Body:
    return {
        "partition_index": index,
        "error_code": code,
        "error_message": message,
        "active_producers": [],
    }


def _said_log_start(request: Body) -> int | None:
    """A follower's own log start, as its Fetch (v5+) says it; None when it does not."""
    offset = request.get("log_start_offset", -1)
    return offset if offset >= 0 else None
