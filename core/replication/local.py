"""What one broker holds of one partition, whatever its role: the log, the leader-epoch cache,
the producer state, the high watermark and the last partition state the controller committed.

The roles (leader.py, follower.py) change it only through these methods, which keep the log,
the epoch cache and the producer state consistent with each other.
"""

from __future__ import annotations

from itertools import count

from rlog.core.producer_state import ProducerStateManager
from rlog.core.records import CorruptRecordError, InvalidRecordError, iter_batches
from rlog.core.replication.messages import (
    Effect,
    HighWatermarkChanged,
    PartitionState,
    ReplicaConfig,
    Truncated,
)
from rlog.core.storage.files import Buffer
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log import Log, OffsetOutOfOrderError


class LocalReplica:
    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        log: Log,
        epochs: LeaderEpochCache,
        config: ReplicaConfig,
        *,
        high_watermark: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.log = log
        self.epochs = epochs
        self.config = config
        self.state: PartitionState | None = None
        # A checkpointed HW may be stale either way (an unsynced tail lost, the log start moved).
        self._high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        if self._high_watermark < log.producer_replay_start:
            # Markers between the HW and the snapshot the log loaded are not known to be on the
            # ISR yet: replay from below the HW so their transactions count as unstable.
            log.reload_producer_state(self._high_watermark)
        log.producers.on_high_watermark(self._high_watermark)
        self._pending_ids = count()

    @property
    def producers(self) -> ProducerStateManager:
        return self.log.producers

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed consumers stop: the HW, or the first offset of the oldest
        transaction still open (or closed by a marker the ISR does not hold yet) below it."""
        first_unstable = self.log.producers.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return max(min(first_unstable, self._high_watermark), self.log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    def next_pending_id(self) -> int:
        return next(self._pending_ids)

    def raise_high_watermark(self, offset: int) -> list[Effect]:
        """Move the HW up to `offset` (never down: a lower value is an older view)."""
        if offset <= self._high_watermark:
            return []
        assert offset <= self.log.log_end_offset, (
            f"{self}: HW {offset} above LEO {self.log.log_end_offset}"
        )
        self._high_watermark = offset
        self.log.producers.on_high_watermark(offset)
        return [HighWatermarkChanged(self.topic, self.partition, offset)]

    # ---- follower-side changes ----

    def append_replicated(self, records: Buffer, now_ms: int) -> bool:
        """Append the leader's batches as they are. False (nothing written) when they do not
        continue from our LEO (a stale or repeated response) or are damaged. New epochs go to
        the cache before the data, so a crash in between leaves an entry load() drops.
        """
        try:
            batches = list(iter_batches(records))  # CRCs included: the log trusts this list
        except (CorruptRecordError, InvalidRecordError):
            return False
        if not batches or batches[0][1].base_offset != self.log.log_end_offset:
            return False
        for _, header in batches:
            self.epochs.assign(header.partition_leader_epoch, header.base_offset)
        try:
            self.log.append(records, now_ms, assign_offsets=False, batches=batches)
        except (CorruptRecordError, OffsetOutOfOrderError):
            self.epochs.truncate_from_end(self.log.log_end_offset)
            return False
        except OSError:
            self.epochs.truncate_from_end(self.log.log_end_offset)
            raise
        return True

    def truncate_to(self, offset: int) -> list[Effect]:
        """Cut the log at `offset`: the log first, then the epochs, so a crash between them
        leaves epoch entries past the LEO, which load() drops.
        """
        if offset >= self.log.log_end_offset:
            # Nothing to cut from the log, but an epoch may start at the LEO with no data in it
            # (an ex-leader that wrote nothing): left in place, it would be sent as the last
            # fetched epoch forever and every Fetch v12 would answer DivergingEpoch again.
            self.epochs.truncate_from_end(offset)
            return []
        self.log.truncate_to(offset)  # the producer state goes back with it
        self.epochs.truncate_from_end(offset)
        self.log.producers.on_high_watermark(min(self._high_watermark, offset))
        effects: list[Effect] = [Truncated(self.topic, self.partition, offset)]
        if self._high_watermark > self.log.log_end_offset:
            self._high_watermark = self.log.log_end_offset
            effects.append(HighWatermarkChanged(self.topic, self.partition, self._high_watermark))
        return effects

    def restart_at(self, offset: int) -> list[Effect]:
        """Drop the whole log; it restarts empty at `offset` (the leader's log start is past
        our LEO, so nothing we hold is still on the leader).
        """
        self.log.truncate_fully_and_start_at(offset)
        self.epochs.clear()
        self._high_watermark = offset
        return [
            Truncated(self.topic, self.partition, offset, full=True),
            HighWatermarkChanged(self.topic, self.partition, offset),
        ]

    def advance_log_start_offset(self, offset: int) -> None:
        """Follow the leader's log start (retention, DeleteRecords), never past our LEO."""
        offset = min(offset, self.log.log_end_offset)
        if offset <= self.log.log_start_offset:
            return
        self.log.advance_log_start_offset(offset)
        self.epochs.truncate_from_start(offset)
        self._high_watermark = max(self._high_watermark, offset)

    def __repr__(self) -> str:
        return (
            f"LocalReplica({self.topic}-{self.partition} on {self.broker_id}, "
            f"epoch={self.leader_epoch}, hw={self._high_watermark}, "
            f"leo={self.log.log_end_offset})"
        )
