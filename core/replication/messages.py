"""What goes into and comes out of a replica: metadata, requests' answers, plans and effects.

All plain frozen dataclasses. Effects are what the daemon and the simulator act on; nothing here
does I/O or keeps time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# The controller's answer to a ProposeIsr: one type shared by both sides.
from rlog.core.controller.api import AlterPartitionResponse as AlterPartitionResponse
from rlog.core.protocol.errors import ErrorCode
from rlog.core.storage.files import FileSlice
from rlog.core.storage.txn_index import AbortedTxn
from rlog.core.values import value

NO_LEADER = -1
NO_EPOCH = -1  # "not given" for current_leader_epoch / last_fetched_epoch, as Kafka sends
NO_TIMESTAMP = -1
NO_OFFSET = -1


# ---- inputs ----


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    # Read by the controller's election; a replica behaves the same either way.
    unclean_leader_election_enable: bool = False
    # After the controller refuses an ISR proposal (e.g. INELIGIBLE_REPLICA for a fenced
    # broker), wait this long before proposing again, rather than at every fetch.
    alter_partition_retry_backoff_ms: int = 100

    def __post_init__(self) -> None:
        if self.min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1, not {self.min_insync_replicas}")
        if self.replica_lag_time_max_ms < 0:
            raise ValueError(
                f"replica.lag.time.max.ms must be >= 0, not {self.replica_lag_time_max_ms}"
            )


@dataclass(frozen=True, slots=True)
class PartitionState:
    """The controller's committed view of one partition (Kafka's PartitionRecord)."""

    leader: int  # NO_LEADER when offline
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    partition_epoch: int


# ---- effects ----


@dataclass(frozen=True, slots=True)
class ProposeIsr:
    """Send AlterPartition to the controller. At most one is in flight per partition; the
    caller must answer each with on_alter_partition_response (an error if it was lost).
    """

    topic: str
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int  # the one the proposal is based on (the controller checks it)


@value
class CompleteProduce:
    """An acks=all produce is finished: answer it with `error` (NONE: HW passed its batch)."""

    topic: str
    partition: int
    pending_id: int
    error: ErrorCode
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int


@value
class HighWatermarkChanged:
    """Wake consumer fetches waiting for data; checkpoint the HW."""

    topic: str
    partition: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class Truncated:
    """The log lost every offset >= `offset` (a follower's divergent or uncommitted tail).
    `full`: it lost everything and restarts empty at `offset` (behind the leader's log start).
    """

    topic: str
    partition: int
    offset: int
    full: bool = False


Effect = ProposeIsr | CompleteProduce | HighWatermarkChanged | Truncated


# ---- answers ----


@value
class ProduceResult:
    error: ErrorCode
    base_offset: int = NO_OFFSET
    last_offset: int = NO_OFFSET
    log_append_time_ms: int = NO_TIMESTAMP
    log_start_offset: int = NO_OFFSET
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (index in the batch, why) of bad records


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A transaction's end, to be written to one of its partitions (WriteTxnMarkers)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool


@value
class PendingAck:
    """An acks=all produce waiting for the HW to pass `last_offset`, or for `deadline_ms`."""

    pending_id: int
    base_offset: int
    last_offset: int
    deadline_ms: int
    log_append_time_ms: int
    log_start_offset: int


@value
class AppendOutcome:
    """`result` is final unless `pending` is set: then its offsets are known, and a
    CompleteProduce with `pending.pending_id` will say how it ended.
    """

    result: ProduceResult
    pending: PendingAck | None = None
    effects: tuple[Effect, ...] = ()


@value
class ReadResult:
    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: FileSlice | None = None
    # read_committed: the aborted transactions overlapping the records, for the client to drop.
    aborted: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """Fetch v12+: the follower's log diverges; truncate as for an OffsetsForLeaderEpoch answer."""

    epoch: int
    end_offset: int


@value
class FollowerFetchResult:
    error: ErrorCode
    high_watermark: int = NO_OFFSET
    log_start_offset: int = NO_OFFSET
    log_end_offset: int = NO_OFFSET
    records: FileSlice | None = None
    diverging_epoch: DivergingEpoch | None = None
    effects: tuple[Effect, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteOutcome:
    """DeleteRecords on a leader: the error, or the offset the log start moved to (that every
    live replica's log start must reach before the request is answered)."""

    error: ErrorCode
    offset: int = NO_OFFSET


class EpochEndOffset(NamedTuple):
    """An OffsetsForLeaderEpoch answer for one partition (unpacks as error, epoch, end)."""

    error: ErrorCode
    epoch: int = NO_EPOCH
    end_offset: int = NO_OFFSET


# ---- what a follower sends next ----


@dataclass(frozen=True, slots=True)
class TruncationPlan:
    """Send OffsetsForLeaderEpoch(`epoch`) to `leader_id`; answer with on_epoch_end_offset."""

    leader_id: int
    replica_id: int
    current_leader_epoch: int
    epoch: int


@value
class FetchPlan:
    """Send Fetch from `fetch_offset` to `leader_id`; answer with on_fetch_response."""

    leader_id: int
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int  # for Fetch v12+; older versions leave it out
    log_start_offset: int
