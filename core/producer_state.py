"""Idempotent-producer state of one partition: which sequence each producer must send next.

Kafka's rule (ProducerAppendInfo): per producer id keep the epoch and the last five batches. A
batch that repeats one of them is a retry: answer with its original offsets and append nothing.
A batch must continue the sequence (last + 1, wrapping after 2**31 - 1); a higher epoch starts
again at sequence 0; a lower epoch is fenced. A producer we hold no state for may start anywhere,
because its state may have been lost to retention.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from rlog.core import limits
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import BatchHeader

SEQUENCE_MODULUS = 2**31


class ProducerStateError(Exception):
    """A batch breaks its producer's sequence or epoch; `code` is the Kafka error to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=limits.PRODUCER_BATCHES_RETAINED)
    )

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


def _next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


def _last_sequence(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_MODULUS


class ProducerStateManager:
    """Producer ids → entries for one partition. Pure: the log feeds it batches, in offset order."""

    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a batch before it is appended.

        Returns the retained batch it duplicates (the caller answers with its offsets and appends
        nothing), or None when the batch may be appended. Raises ProducerStateError otherwise.
        """
        if header.producer_id < 0 or header.base_sequence < 0:
            return None
        entry = self._entries.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than "
                f"the current epoch {entry.epoch}",
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise ProducerStateError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {header.producer_id} new epoch {header.producer_epoch} must "
                    f"start at sequence 0, not {header.base_sequence}",
                )
            return None
        last_sequence = _last_sequence(header)
        for batch in entry.batches:
            if (
                batch.first_sequence == header.base_sequence
                and batch.last_sequence == last_sequence
            ):
                return batch
        if entry.batches and header.base_sequence != _next_sequence(entry.last_sequence):
            raise ProducerStateError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {header.producer_id} sent sequence {header.base_sequence}, "
                f"expected {_next_sequence(entry.last_sequence)}",
            )
        return None

    def update(self, header: BatchHeader, first_offset: int) -> None:
        """Record an appended batch (its offsets as assigned by the log)."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return
        entry = self._entries.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_id, header.producer_epoch)
            self._entries[header.producer_id] = entry
        entry.batches.append(
            BatchMetadata(
                first_sequence=header.base_sequence,
                last_sequence=_last_sequence(header),
                first_offset=first_offset,
                last_offset=first_offset + header.last_offset_delta,
                max_timestamp=header.max_timestamp,
            )
        )

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Replay batch headers from the log (oldest first) after a restart."""
        self._entries.clear()
        for header in headers:
            self.update(header, header.base_offset)

    def truncate(self) -> None:
        self._entries.clear()
