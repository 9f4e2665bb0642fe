"""The follower role: find where our log leaves the leader's, then copy the leader's batches.

After becoming a follower (a new leader or a new epoch) the first request is OffsetsForLeaderEpoch
for our latest epoch, and the log is cut where it diverges (KIP-101 / KIP-279), never simply at
our HW, which lags the leader's by a fetch. Only then do fetches start, from our LEO. A replica
with no epoch history at all (a log written before epochs were stamped) falls back to its HW.
"""

from __future__ import annotations

from rlog.core.replication.local import LocalReplica
from rlog.core.replication.messages import NO_EPOCH, Effect, FetchPlan, TruncationPlan
from rlog.core.replication.rules import truncation_point
from rlog.core.storage.files import Buffer


class Follower:
    def __init__(self, local: LocalReplica, leader_id: int) -> None:
        self._local = local
        self.leader_id = leader_id
        self.truncation_pending = True

    def start(self) -> list[Effect]:
        local = self._local
        if local.epochs.latest_epoch != NO_EPOCH:
            return []
        self.truncation_pending = False
        return local.truncate_to(local.high_watermark)

    def fetch_request(self) -> FetchPlan | TruncationPlan:
        local = self._local
        if self.truncation_pending:
            return TruncationPlan(
                self.leader_id, local.broker_id, local.leader_epoch, local.epochs.latest_epoch
            )
        return FetchPlan(
            self.leader_id,
            local.broker_id,
            local.leader_epoch,
            fetch_offset=local.log_end_offset,
            last_fetched_epoch=local.epochs.latest_epoch,
            log_start_offset=local.log.log_start_offset,
        )

    def on_epoch_end_offset(self, epoch: int, end_offset: int) -> list[Effect]:
        """The leader's (epoch, end offset) for our latest epoch, from OffsetsForLeaderEpoch or
        a Fetch's DivergingEpoch: cut the log there, or lower and ask again.
        """
        local = self._local
        log_end_offset = local.log_end_offset
        own_answer = local.epochs.end_offset_for(epoch, log_end_offset)
        if own_answer[0] == NO_EPOCH:
            entries = local.epochs.entries
            own_answer = (NO_EPOCH, entries[0].start_offset if entries else log_end_offset)
        offset, done = truncation_point(
            (epoch, end_offset), own_answer, log_end_offset, local.high_watermark
        )
        effects = local.truncate_to(offset)
        self.truncation_pending = not done
        return effects

    def on_fetch_response(
        self,
        records: Buffer,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        now_ms: int,
    ) -> list[Effect]:
        if self.truncation_pending:
            return []  # a fetch sent before we had to check our log again
        local = self._local
        if len(records) > 0 and not local.append_replicated(records, now_ms):
            return []  # stale (not from our LEO) or damaged: the next fetch asks again
        local.advance_log_start_offset(leader_log_start_offset)
        return local.raise_high_watermark(min(leader_high_watermark, local.log_end_offset))

    def on_offset_out_of_range(
        self, leader_log_start_offset: int, leader_log_end_offset: int
    ) -> list[Effect]:
        """The leader refused our fetch offset. Past its LEO (only after an unclean election):
        cut back to it. Before its log start (retention moved on): restart empty there.
        """
        local = self._local
        if local.log_end_offset > leader_log_end_offset:
            return local.truncate_to(leader_log_end_offset)
        if local.log_end_offset < leader_log_start_offset:
            return local.restart_at(leader_log_start_offset)
        return []
