"""A producer's batch on the leader: the checks before it is appended, and the append.

Kafka takes exactly one v2 batch per partition per Produce request. A client's batch is then
decoded record by record (record_validation.py); coordinators' own batches skip that. Idempotent
producers are checked against the partition's producer state (Kafka's ProducerStateManager
rules): a retry of one of the last five batches is answered with its original offsets and
appends nothing.
"""

from __future__ import annotations

from rlog.core.producer_state import BatchMetadata, ProducerStateError, ProducerStateManager
from rlog.core.protocol.errors import ErrorCode
from rlog.core.record_validation import (
    BatchRefused,
    ClientRules,
    RecordErrors,
    validate_client_batch,
)
from rlog.core.records import BatchHeader, CorruptRecordError, InvalidRecordError, iter_batches
from rlog.core.storage.files import Buffer
from rlog.core.storage.log import AppendInfo, Log, RecordTooLargeError
from rlog.core.values import value


@value
class Refused:
    error: ErrorCode
    message: str
    record_errors: RecordErrors = ()  # the records at fault, by index in the batch


def client_rules(log: Log, topic: str, partition: int) -> ClientRules:
    """What the partition's config asks of a client's batch."""
    config = log.config
    return ClientRules(f"{topic}-{partition}", config.message_max_bytes, config.compacts)


# A batch's position in the request's records and its header, as iter_batches read them.
FoundBatch = tuple[int, BatchHeader]


@value
class CheckedBatch:
    header: BatchHeader  # as the client sent it
    max_timestamp: int  # what the stored batch must say: the largest record timestamp
    duplicate: BatchMetadata | None  # set: a retry, answer with these offsets
    batches: tuple[FoundBatch, ...]  # validated, CRC included: the log need not read them again


def check_producer_batch(
    records: Buffer | None, producers: ProducerStateManager, rules: ClientRules | None
) -> CheckedBatch | Refused:
    """`rules` for a client's batch, whose records are then all checked; None for a
    coordinator's. The header returned carries the maxTimestamp to store."""
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
    position, header = batches[0]
    max_timestamp = header.max_timestamp
    if rules is not None:
        try:
            max_timestamp = validate_client_batch(records, position, header, rules)
        except BatchRefused as refused:
            return Refused(refused.code, refused.message, refused.record_errors)
    elif header.is_control:  # markers take their own path (Leader.append_marker)
        return Refused(ErrorCode.INVALID_RECORD, "control batches are written as markers only")
    try:
        duplicate = producers.check(header)
    except ProducerStateError as error:
        return Refused(error.code, str(error))
    return CheckedBatch(header, max_timestamp, duplicate, tuple(batches))


def append_producer_batch(
    log: Log,
    records: Buffer,
    max_timestamp: int,
    now_ms: int,
    *,
    leader_epoch: int,
    batches: tuple[FoundBatch, ...] | None = None,
) -> AppendInfo | Refused:
    """Append a checked batch with offsets from the LEO, `leader_epoch` and `max_timestamp`
    stamped (the log applies it to the producer state); `batches` as check_producer_batch found
    them, if it did. OSError from the disk propagates (nothing was written).
    """
    try:
        info = log.append(
            records,
            now_ms,
            leader_epoch=leader_epoch,
            max_timestamp=max_timestamp,
            batches=batches,
        )
    except RecordTooLargeError as error:
        return Refused(ErrorCode.MESSAGE_TOO_LARGE, str(error))
    except InvalidRecordError as error:
        return Refused(ErrorCode.INVALID_RECORD, str(error))
    except CorruptRecordError as error:
        return Refused(ErrorCode.CORRUPT_MESSAGE, str(error))
    return info
