"""A producer's batch on the leader: the checks before it is appended, and the append.

Kafka takes exactly one v2 batch per partition per Produce request. Idempotent producers are
checked against the partition's producer state (Kafka's ProducerStateManager rules): a retry
of one of the last five batches is answered with its original offsets and appends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlog.core.producer_state import BatchMetadata, ProducerStateError, ProducerStateManager
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import BatchHeader, CorruptRecordError, InvalidRecordError, iter_batches
from rlog.core.storage.files import Buffer
from rlog.core.storage.log import AppendInfo, Log, RecordTooLargeError


@dataclass(frozen=True, slots=True)
class Refused:
    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class CheckedBatch:
    header: BatchHeader
    duplicate: BatchMetadata | None  # set: a retry, answer with these offsets


def check_producer_batch(
    records: Buffer | None, producers: ProducerStateManager
) -> CheckedBatch | Refused:
    if records is None or len(records) == 0:
        return Refused(ErrorCode.INVALID_RECORD, "the request holds no record batch")
    try:
        batches = list(iter_batches(records))
    except InvalidRecordError as error:
        return Refused(ErrorCode.INVALID_RECORD, str(error))
    except CorruptRecordError as error:
        return Refused(ErrorCode.CORRUPT_MESSAGE, str(error))
    if len(batches) != 1:
        return Refused(
            ErrorCode.INVALID_RECORD,
            f"a produce request must hold exactly one record batch per partition, "
            f"not {len(batches)}",
        )
    _, header = batches[0]
    if header.is_control:
        return Refused(ErrorCode.INVALID_RECORD, "clients may not write control batches")
    try:
        duplicate = producers.check(header)
    except ProducerStateError as error:
        return Refused(error.code, str(error))
    return CheckedBatch(header, duplicate)


def append_producer_batch(
    log: Log,
    records: Buffer,
    header: BatchHeader,
    now_ms: int,
    *,
    leader_epoch: int,
) -> AppendInfo | Refused:
    """Append a checked batch with offsets from the LEO and `leader_epoch` stamped (the log
    applies it to the producer state). OSError from the disk propagates (nothing was written).
    """
    try:
        info = log.append(records, now_ms, leader_epoch=leader_epoch)
    except RecordTooLargeError as error:
        return Refused(ErrorCode.MESSAGE_TOO_LARGE, str(error))
    except InvalidRecordError as error:
        return Refused(ErrorCode.INVALID_RECORD, str(error))
    except CorruptRecordError as error:
        return Refused(ErrorCode.CORRUPT_MESSAGE, str(error))
    return info
