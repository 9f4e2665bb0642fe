"""Producer state of one partition: idempotence (which sequence each producer must send next)
and transactions (which producers have one open here, and where it began).

Kafka's rules (ProducerAppendInfo), per producer id: keep the epoch and the last five batches. A
batch that repeats one of them is a retry: answer with its original offsets and append nothing.
A batch must continue the sequence (last + 1, wrapping after 2**31 - 1); a higher epoch starts
again at sequence 0; a lower epoch is fenced. A producer we hold no state for may start anywhere,
because its state may have been lost to retention or expiry.

Transactions: a producer's first transactional batch opens its transaction here (its offset is
the transaction's first offset); a COMMIT or ABORT marker closes it. The first offset of the
oldest transaction still open, or closed by a marker the ISR does not hold yet, is the partition's
first unstable offset: the last stable offset (LSO) read_committed consumers stop at is the lower
of it and the high watermark.

Every replica (leader and followers) keeps this state from the batches it appends, so a new
leader answers retries and fences zombies as the old one did. The log (storage/log.py) feeds it,
snapshots it at each segment roll and rebuilds it on restart from the latest snapshot plus the
batches after it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from rlog.core import limits
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import BatchHeader, ControlType
from rlog.core.values import value

SEQUENCE_MODULUS = 2**31


class ProducerStateError(Exception):
    """A batch breaks its producer's sequence or epoch; `code` is the Kafka error to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@value
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class Marker:
    """A transaction marker's content (its control record)."""

    control_type: ControlType
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=limits.PRODUCER_BATCHES_RETAINED)
    )
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1  # -1: no transaction open here
    # Of its last batch or marker: producer.id.expiration.ms counts from it.
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


def _next_sequence(sequence: int) -> int:
    return (sequence + 1) % SEQUENCE_MODULUS


def _last_sequence(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % SEQUENCE_MODULUS


@dataclass(frozen=True)
class ProducerStateCopy:
    """The whole state at `end_offset`, kept in memory so a truncation can start from it."""

    end_offset: int
    entries: tuple[ProducerEntry, ...]  # the open transactions are theirs, as in a snapshot
    unreplicated: tuple[CompletedTxn, ...]


def _copy_entry(entry: ProducerEntry) -> ProducerEntry:
    return replace(entry, batches=deque(entry.batches, maxlen=entry.batches.maxlen))


class ProducerStateManager:
    """Producer ids -> entries for one partition. Pure: the log feeds it batches in offset order."""

    def __init__(self) -> None:
        self._entries: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # Transactions closed by a marker at or above the high watermark: still unstable.
        self._unreplicated: list[CompletedTxn] = []
        self.end_offset = 0  # the offset after the last batch applied (a snapshot's name)

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    @property
    def entries(self) -> list[ProducerEntry]:
        return list(self._entries.values())

    # ---- the leader's checks, before an append ----

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a producer's batch before it is appended.

        Returns the retained batch it duplicates (the caller answers with its offsets and appends
        nothing), or None when the batch may be appended. Raises ProducerStateError otherwise.
        """
        if header.producer_id < 0:
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
        if not header.is_transactional and entry.current_txn_first_offset >= 0:
            raise ProducerStateError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {header.producer_id} sent a non-transactional batch while its "
                f"transaction from offset {entry.current_txn_first_offset} is open",
            )
        if header.base_sequence < 0:
            return None  # a coordinator's write (transactional offsets): no sequence
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

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a transaction marker before the leader appends it (WriteTxnMarkers)."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )
        if producer_epoch < entry.epoch:
            raise ProducerStateError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker for producer {producer_id} epoch {producer_epoch} is older than "
                f"the current epoch {entry.epoch}",
            )

    def has_open_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self._entries.get(producer_id)
        return (
            entry is not None
            and entry.epoch == producer_epoch
            and entry.current_txn_first_offset >= 0
        )

    # ---- applying appended batches (leader and followers alike) ----

    def update(
        self, header: BatchHeader, first_offset: int, marker: Marker | None = None
    ) -> CompletedTxn | None:
        """Apply an appended batch (its offsets as assigned by the log); `marker` is the control
        record of a transaction marker. Returns the transaction a marker closed."""
        self.end_offset = first_offset + header.last_offset_delta + 1
        if header.producer_id < 0:
            return None
        entry = self._entries.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            carried = entry.current_txn_first_offset if entry is not None else -1
            coordinator_epoch = entry.coordinator_epoch if entry is not None else -1
            entry = ProducerEntry(
                header.producer_id,
                header.producer_epoch,
                coordinator_epoch=coordinator_epoch,
                current_txn_first_offset=carried,  # a marker with a bumped epoch closes it
            )
            self._entries[header.producer_id] = entry
        entry.last_timestamp = header.max_timestamp  # the last batch's, as Kafka keeps it
        if header.is_control:
            return self._close_transaction(entry, first_offset, marker)
        if header.base_sequence >= 0:
            entry.batches.append(
                BatchMetadata(
                    first_sequence=header.base_sequence,
                    last_sequence=_last_sequence(header),
                    first_offset=first_offset,
                    last_offset=first_offset + header.last_offset_delta,
                    max_timestamp=header.max_timestamp,
                )
            )
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._ongoing[entry.producer_id] = first_offset
        return None

    def _close_transaction(
        self, entry: ProducerEntry, offset: int, marker: Marker | None
    ) -> CompletedTxn | None:
        if marker is None or marker.control_type not in (ControlType.ABORT, ControlType.COMMIT):
            return None  # not a transaction marker: nothing to close
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        self._ongoing.pop(entry.producer_id, None)
        completed = CompletedTxn(
            entry.producer_id,
            first if first >= 0 else offset,
            offset,
            aborted=marker.control_type == ControlType.ABORT,
        )
        self._unreplicated.append(completed)
        return completed

    # ---- the last stable offset ----

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction open, or closed above the HW."""
        firsts = [*self._ongoing.values(), *(t.first_offset for t in self._unreplicated)]
        return min(firsts) if firsts else None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` is out of the way (the `.txnindex` entry records it)."""
        firsts = [first for pid, first in self._ongoing.items() if pid != completed.producer_id]
        return min(firsts) if firsts else completed.last_offset + 1

    def on_high_watermark(self, high_watermark: int) -> None:
        """Markers below the HW are on the whole ISR: their transactions are stable now."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]

    # ---- time ----

    def expire(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms with no open transaction."""
        cutoff = now_ms - expiration_ms
        expired = [
            pid
            for pid, entry in self._entries.items()
            if entry.current_txn_first_offset < 0 and entry.last_timestamp < cutoff
        ]
        for pid in expired:
            del self._entries[pid]
        return expired

    # ---- rebuilding ----

    def load(self, entries: Iterable[ProducerEntry], end_offset: int) -> None:
        """Start again from a snapshot's entries (taken at `end_offset`)."""
        self.clear(end_offset)
        for entry in entries:
            self._entries[entry.producer_id] = entry
            if entry.current_txn_first_offset >= 0:
                self._ongoing[entry.producer_id] = entry.current_txn_first_offset

    def copy_state(self) -> ProducerStateCopy:
        return ProducerStateCopy(
            self.end_offset,
            tuple(_copy_entry(entry) for entry in self._entries.values()),
            tuple(self._unreplicated),
        )

    def restore(self, state: ProducerStateCopy) -> None:
        """Back to `state` (copied again: it may be restored more than once)."""
        self.load((_copy_entry(entry) for entry in state.entries), state.end_offset)
        self._unreplicated = list(state.unreplicated)

    def clear(self, end_offset: int = 0) -> None:
        self._entries.clear()
        self._ongoing.clear()
        self._unreplicated = []
        self.end_offset = end_offset

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Replay batch headers (oldest first) from nothing; markers' records are not read, so
        this is for logs without transactions (tests)."""
        self.clear()
        for header in headers:
            self.update(header, header.base_offset)
