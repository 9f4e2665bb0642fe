"""What the transaction coordinator is configured with and what it asks its broker to do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Body = dict[str, Any]
Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker's transaction settings, under Kafka's names."""

    state_partitions: int = 50  # transaction.state.log.num.partitions
    offsets_partitions: int = 50  # offsets.topic.num.partitions (AddOffsetsToTxn)
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_check_interval_ms: int = 10_000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000
    # rlog's own: how long an EndTxn answer may wait for the markers and the Complete record,
    # so the producer's next transaction does not meet CONCURRENT_TRANSACTIONS (0: answer once
    # the decision is stored, as Kafka does).
    end_txn_hold_ms: int = 500


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request of this token; `body` has every field of the schema's latest version
    (the codec keeps those of the version asked)."""

    token: int
    body: Body


@dataclass(frozen=True, slots=True)
class Append:
    """Write these records to `__transaction_state-<partition>` with acks=all, then call
    `append_done(append_id, error, now)`."""

    append_id: int
    partition: int
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True)
class AllocateProducerId:
    """Get a fresh producer id from the controller, then call
    `producer_id_allocated(request_id, producer_id or None, now)`."""

    request_id: int


@dataclass(frozen=True, slots=True)
class WriteMarkers:
    """Write a COMMIT (`committed`) or ABORT marker for this producer to every partition listed,
    retrying each until it is written or its partition no longer exists, then call
    `markers_done(marker_id, now)`."""

    marker_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class TxnEvent:
    """For the event journal: `kind` is txn_committed, txn_aborted, txn_timed_out or
    producer_fenced."""

    kind: str
    transactional_id: str
    message: str


Effect = Respond | Append | AllocateProducerId | WriteMarkers | TxnEvent


@dataclass
class TxnLoadSummary:
    transactions: int = 0  # transactional ids loaded
    resumed: int = 0  # transactions found half-ended, whose ending this coordinator finishes
    corrupt_records: int = 0  # records that did not parse, or of an id hashed elsewhere
