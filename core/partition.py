"""One partition as its leader sees it: the log, the producer state and the high watermark.

Until replication lands, the leader is the only replica, so the high watermark is the log end
offset. The replication issue turns this into the replica state machine of DESIGN.md (follower
progress, ISR, acks=all waiting); the produce and fetch rules below stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlog.core.producer_state import ProducerStateError, ProducerStateManager
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import CorruptRecordError, InvalidRecordError, iter_batches
from rlog.core.storage.files import FileSlice
from rlog.core.storage.log import Log, OffsetOutOfRangeError, RecordTooLargeError

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: ErrorCode
    base_offset: int = -1
    last_offset: int = -1
    log_append_time_ms: int = NO_TIMESTAMP
    log_start_offset: int = -1
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FileSlice | None = None


class Partition:
    def __init__(self, topic: str, index: int, log: Log) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.producers = ProducerStateManager()
        self.producers.rebuild(log.iter_batch_headers())

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append(self, records: bytes | bytearray | memoryview | None, now_ms: int) -> ProduceResult:
        """Append one producer batch. Kafka takes exactly one v2 batch per partition per request."""
        if records is None or len(records) == 0:
            return self._failed(ErrorCode.INVALID_RECORD, "the request holds no record batch")
        try:
            batches = list(iter_batches(records))
        except InvalidRecordError as error:
            return self._failed(ErrorCode.INVALID_RECORD, str(error))
        except CorruptRecordError as error:
            return self._failed(ErrorCode.CORRUPT_MESSAGE, str(error))
        if len(batches) != 1:
            return self._failed(
                ErrorCode.INVALID_RECORD,
                f"a produce request must hold exactly one record batch per partition, "
                f"not {len(batches)}",
            )
        _, header = batches[0]
        if header.is_control:
            return self._failed(ErrorCode.INVALID_RECORD, "clients may not write control batches")
        try:
            duplicate = self.producers.check(header)
        except ProducerStateError as error:
            return self._failed(error.code, str(error))
        if duplicate is not None:
            return ProduceResult(
                ErrorCode.NONE,
                base_offset=duplicate.first_offset,
                last_offset=duplicate.last_offset,
                log_start_offset=self.log.log_start_offset,
            )
        try:
            info = self.log.append(records, now_ms)
        except RecordTooLargeError as error:
            return self._failed(ErrorCode.MESSAGE_TOO_LARGE, str(error))
        except InvalidRecordError as error:
            return self._failed(ErrorCode.INVALID_RECORD, str(error))
        except CorruptRecordError as error:
            return self._failed(ErrorCode.CORRUPT_MESSAGE, str(error))
        self.producers.update(header, info.first_offset)
        return ProduceResult(
            ErrorCode.NONE,
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=self.log.log_start_offset,
        )

    def read(self, fetch_offset: int, max_bytes: int, *, min_one_batch: bool) -> ReadResult:
        """Records from `fetch_offset`, never past the high watermark (consumers read below it)."""
        high_watermark = self.high_watermark
        try:
            info = self.log.read(
                fetch_offset,
                max_bytes,
                max_offset_exclusive=high_watermark,
                min_one_batch=min_one_batch,
            )
        except OffsetOutOfRangeError:
            return ReadResult(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                high_watermark,
                high_watermark,
                self.log.log_start_offset,
            )
        return ReadResult(
            ErrorCode.NONE,
            high_watermark,
            high_watermark,
            self.log.log_start_offset,
            records=info.records,
        )

    def _failed(self, code: ErrorCode, message: str) -> ProduceResult:
        return ProduceResult(
            code, log_start_offset=self.log.log_start_offset, error_message=message
        )
