"""The bodies the transaction coordinator answers with, and the error codes a client of each
version understands."""

from __future__ import annotations

from collections.abc import Callable

from rlog.core.protocol.errors import ErrorCode
from rlog.core.transactions.effects import Body
from rlog.core.transactions.metadata import NO_PRODUCER_EPOCH
from rlog.core.transactions.records import NO_PRODUCER_ID

# The first version of each API whose clients know PRODUCER_FENCED; older ones get
# INVALID_PRODUCER_EPOCH, which they handle the same way (Kafka's request handlers).
FENCED_SINCE = {"InitProducerId": 4, "AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2}
# AddPartitionsToTxn v5 (KIP-890) brought TRANSACTION_ABORTABLE, which a verification answers
# for a partition that is not in the transaction; v4 answered INVALID_TXN_STATE.
ABORTABLE_SINCE = 5


def for_version(error: ErrorCode, api: str, version: int) -> ErrorCode:
    if error == ErrorCode.PRODUCER_FENCED and version < FENCED_SINCE[api]:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def append_error(error: ErrorCode) -> ErrorCode:
    """What a client is told when a write to `__transaction_state` failed (Kafka's
    TransactionStateManager maps the log's errors the same way)."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return error


def init_answer(
    error: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH
) -> Body:
    if error != ErrorCode.NONE:
        producer_id, epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


def end_answer(
    error: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH
) -> Body:
    # v5+ carries the producer id and epoch (Kafka gives them only with NONE).
    if error != ErrorCode.NONE:
        producer_id, epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


def error_answer(error: ErrorCode) -> Body:
    """AddOffsetsToTxn's answer."""
    return {"throttle_time_ms": 0, "error_code": error}


def topic_results(
    requested: list[tuple[str, list[int]]], error_for: Callable[[str, int], ErrorCode]
) -> list[Body]:
    """AddPartitionsToTxn's per-topic results (AddPartitionsToTxnTopicResult)."""
    return [
        {
            "name": topic,
            "results_by_partition": [
                {"partition_index": index, "partition_error_code": error_for(topic, index)}
                for index in indexes
            ],
        }
        for topic, indexes in requested
    ]


def add_partitions_answer(version: int, results: list[tuple[str, list[Body]]]) -> Body:
    """v0-3 answer one transaction by topic; v4+ a list of (transactional id, topic results)."""
    if version < 4:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "results_by_transaction": [],
            "results_by_topic_v3_and_below": results[0][1] if results else [],
        }
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "results_by_transaction": [
            {"transactional_id": transactional_id, "topic_results": topics}
            for transactional_id, topics in results
        ],
        "results_by_topic_v3_and_below": [],
    }


def described_error(transactional_id: str, error: ErrorCode) -> Body:
    """A DescribeTransactions entry without a transaction (Kafka's defaults for the rest)."""
    return {
        "error_code": error,
        "transactional_id": transactional_id,
        "transaction_state": "",
        "transaction_timeout_ms": 0,
        "transaction_start_time_ms": 0,
        "producer_id": 0,
        "producer_epoch": 0,
        "topics": [],
    }
