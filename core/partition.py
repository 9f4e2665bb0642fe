"""One partition on a single broker: a Replica that leads in epoch 0 with ISR = [itself].

This is the interface the single-broker daemon was built on (append, read, high_watermark); the
rules now live in the replica state machine (core/replication/), so this class only fixes the
metadata a lone broker would get from a controller. With the ISR being the leader alone, the HW
is the LEO after every append, as before; batches are now stamped with leader epoch 0, which is
what Metadata already reports.
"""

from __future__ import annotations

from rlog.core.producer_state import ProducerStateManager
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication.messages import (
    NO_TIMESTAMP,
    PartitionState,
    ProduceResult,
    ReadResult,
    ReplicaConfig,
)
from rlog.core.replication.replica import Replica
from rlog.core.replication.rules import NO_EPOCH, leader_epoch_error
from rlog.core.storage.files import Buffer, FileSystem, RealFileSystem
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log import Log

__all__ = ["NO_TIMESTAMP", "SOLE_LEADER_EPOCH", "Partition", "ProduceResult", "ReadResult"]

SOLE_LEADER_EPOCH = 0
_SOLE_BROKER_ID = 0  # any id: the replica is alone in its ISR


class Partition:
    def __init__(self, topic: str, index: int, log: Log, *, fs: FileSystem | None = None) -> None:
        """`fs`: where the leader-epoch checkpoint lives (the log's own file system; the daemon
        uses real files).
        """
        self.topic = topic
        self.index = index
        self.log = log
        epochs = LeaderEpochCache.load(
            fs or RealFileSystem(),
            log.dir_path,
            log.iter_batch_headers(),
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
        )
        # Everything a lone leader wrote was committed when written.
        self.replica = Replica(
            topic,
            index,
            _SOLE_BROKER_ID,
            log,
            epochs,
            ReplicaConfig(),
            0,
            high_watermark=log.log_end_offset,
        )
        alone = (_SOLE_BROKER_ID,)
        state = PartitionState(_SOLE_BROKER_ID, SOLE_LEADER_EPOCH, alone, alone, 0)
        self.replica.apply_partition_state(state, 0)

    @property
    def producers(self) -> ProducerStateManager:
        return self.replica.producers

    @property
    def high_watermark(self) -> int:
        return self.replica.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append(self, records: Buffer | None, now_ms: int) -> ProduceResult:
        """Append one producer batch. Kafka takes exactly one v2 batch per partition per request."""
        outcome = self.replica.append_as_leader(records, 1, now_ms, required_acks_timeout_ms=0)
        return outcome.result

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        min_one_batch: bool,
        current_leader_epoch: int = NO_EPOCH,
    ) -> ReadResult:
        """Records from `fetch_offset`, never past the high watermark (consumers read below it)."""
        return self.replica.on_consumer_fetch(
            fetch_offset,
            max_bytes,
            current_leader_epoch=current_leader_epoch,
            min_one_batch=min_one_batch,
        )

    def leader_epoch_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """KIP-320's check for requests that carry the leader epoch their sender knows."""
        return leader_epoch_error(current_leader_epoch, SOLE_LEADER_EPOCH)
