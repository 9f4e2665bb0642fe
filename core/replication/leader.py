"""The leader role: follower progress, the ISR proposals, the HW and the acks=all produces.

The leader never acts on an ISR the controller has not committed. While its one proposal is in
flight the HW waits on the maximal ISR (the committed members and the one being added); the
committed ISR alone decides min.insync.replicas. A new leader knows no follower's LEO, so its HW
moves only once every ISR member has fetched in the new epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rlog.core.producer_state import ProducerStateError
from rlog.core.protocol.errors import ErrorCode
from rlog.core.record_validation import ClientRules
from rlog.core.records import ControlType, build_end_txn_marker, read_header
from rlog.core.replication.local import LocalReplica
from rlog.core.replication.messages import (
    AlterPartitionResponse,
    AppendOutcome,
    CompleteProduce,
    DivergingEpoch,
    Effect,
    FollowerFetchResult,
    PartitionState,
    PendingAck,
    ProduceResult,
    ProposeIsr,
    TxnMarker,
)
from rlog.core.replication.produce import (
    FoundBatch,
    Refused,
    append_producer_batch,
    check_producer_batch,
    client_rules,
)
from rlog.core.replication.rules import (
    FollowerProgress,
    can_join_isr,
    high_watermark_of,
    maximal_isr,
    out_of_sync_members,
    progress_after_fetch,
)
from rlog.core.storage.files import Buffer, FileSlice
from rlog.core.storage.log import OffsetOutOfRangeError

ACKS_ALL = -1
VALID_ACKS = (0, 1, ACKS_ALL)
DELETE_TO_HIGH_WATERMARK = -1  # DeleteRecords' offset meaning "everything below the HW"


# AlterPartition errors that mean our view of the partition is stale: the controller's newer
# state reaches us through metadata, and until then the proposal's maximal ISR stays in force.
_AWAIT_METADATA_ERRORS = frozenset(
    {
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.STALE_BROKER_EPOCH,
        ErrorCode.INVALID_REQUEST,
    }
)


class Leader:
    def __init__(self, local: LocalReplica, now_ms: int) -> None:
        state = local.state
        assert state is not None and state.leader == local.broker_id, f"{local}: not leader"
        self._local = local
        # Kafka's leaderEpochStartOffsetOpt: the LEO as the role is taken. For a new epoch it is
        # the start of the cache entry written just before; for an epoch this broker led before
        # a restart it is later than that entry, and KIP-207 and ISR joins wait for it.
        self.epoch_start_offset = local.log_end_offset
        self.followers: dict[int, FollowerProgress] = {}
        self._track_replicas(state, now_ms)
        # The one ISR proposal in flight. An answer counts only if it answers this one: an
        # answer to a proposal a committed state already replaced must not end its successor.
        self._proposal: ProposeIsr | None = None
        self._propose_after_ms = now_ms  # backoff after a refused proposal
        # A proposal whose fate is unknown (the answer was lost) is sent again at this time.
        self._resend_after_ms: int | None = None
        self._pending: dict[int, PendingAck] = {}
        self._high_watermark_floor = local.high_watermark
        self._rules: tuple[object, ClientRules] | None = None  # (the log config they came from)

    @property
    def proposed_isr(self) -> tuple[int, ...] | None:
        return self._proposal.new_isr if self._proposal is not None else None

    @property
    def _state(self) -> PartitionState:
        state = self._local.state
        assert state is not None
        return state

    def _track_replicas(self, state: PartitionState, now_ms: int) -> None:
        """Progress for every follower replica; an ISR member gets a full lag window to fetch
        in the new epoch, an outsider must catch up first (Kafka's resetReplicaState).
        """
        previous = self.followers
        self.followers = {}
        for replica_id in state.replicas:
            if replica_id == self._local.broker_id:
                continue
            caught_up_ms = now_ms if replica_id in state.isr else None
            self.followers[replica_id] = previous.get(
                replica_id, FollowerProgress(last_caught_up_ms=caught_up_ms)
            )

    def start(self) -> list[Effect]:
        return self._advance_high_watermark()

    # ---- produce ----

    def append(
        self,
        records: Buffer | None,
        acks: int,
        now_ms: int,
        *,
        timeout_ms: int,
        client: bool = True,
    ) -> AppendOutcome:
        """A client's batch (every record checked) or, `client` False, a coordinator's."""
        refused = self._refusal_before_append(acks)
        if refused is not None:
            return self._refused(refused)
        local = self._local
        rules = self._client_rules() if client else None
        checked = check_producer_batch(records, local.producers, rules)
        if isinstance(checked, Refused):
            return self._refused(checked)
        effects: list[Effect] = []
        if checked.duplicate is not None:
            result = ProduceResult(
                ErrorCode.NONE,
                base_offset=checked.duplicate.first_offset,
                last_offset=checked.duplicate.last_offset,
                log_start_offset=self._local.log.log_start_offset,
            )
        else:
            assert records is not None
            written = self._write(records, checked.max_timestamp, now_ms, checked.batches)
            if isinstance(written, Refused):
                return self._refused(written)
            result = written
            effects = self._advance_high_watermark_after_append()
        if acks != ACKS_ALL or result.last_offset < self._local.high_watermark:
            return AppendOutcome(result, effects=tuple(effects))
        pending = self._wait_for_replicas(result, now_ms + timeout_ms)
        return AppendOutcome(result, pending, tuple(effects))

    def append_marker(self, marker: TxnMarker, now_ms: int, *, timeout_ms: int) -> AppendOutcome:
        """A transaction coordinator's COMMIT or ABORT marker for one producer (WriteTxnMarkers),
        appended with acks=all."""
        refused = self._refusal_before_append(ACKS_ALL)
        if refused is not None:
            return self._refused(refused)
        local = self._local
        try:
            local.producers.check_marker(
                marker.producer_id, marker.producer_epoch, marker.coordinator_epoch
            )
        except ProducerStateError as error:
            return self._refused(Refused(error.code, str(error)))
        batch = build_end_txn_marker(
            ControlType.COMMIT if marker.committed else ControlType.ABORT,
            producer_id=marker.producer_id,
            producer_epoch=marker.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            timestamp_ms=now_ms,
        )
        written = self._write(batch, read_header(batch).max_timestamp, now_ms)
        if isinstance(written, Refused):
            return self._refused(written)
        effects = self._advance_high_watermark()
        if written.last_offset < local.high_watermark:
            return AppendOutcome(written, effects=tuple(effects))
        pending = self._wait_for_replicas(written, now_ms + timeout_ms)
        return AppendOutcome(written, pending, tuple(effects))

    def _client_rules(self) -> ClientRules:
        """What the partition's config asks of a client's batch, made again only when the
        config object changes (a topic config change replaces it)."""
        local = self._local
        config = local.log.config
        if self._rules is None or self._rules[0] is not config:
            self._rules = (config, client_rules(local.log, local.topic, local.partition))
        return self._rules[1]

    def _refusal_before_append(self, acks: int) -> Refused | None:
        if acks not in VALID_ACKS:
            return Refused(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}")
        isr_size = len(self._state.isr)
        min_insync = self._local.config.min_insync_replicas
        if acks == ACKS_ALL and isr_size < min_insync:
            return Refused(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"the ISR has {isr_size} replicas, min.insync.replicas is {min_insync}",
            )
        return None

    def _write(
        self,
        records: Buffer,
        max_timestamp: int,
        now_ms: int,
        batches: tuple[FoundBatch, ...] | None = None,
    ) -> ProduceResult | Refused:
        local = self._local
        info = append_producer_batch(
            local.log,
            records,
            max_timestamp,
            now_ms,
            leader_epoch=self._state.leader_epoch,
            batches=batches,
        )
        if isinstance(info, Refused):
            return info
        return ProduceResult(
            ErrorCode.NONE,
            base_offset=info.first_offset,
            last_offset=info.last_offset,
            log_append_time_ms=info.log_append_time_ms,
            log_start_offset=local.log.log_start_offset,
        )

    def _wait_for_replicas(self, result: ProduceResult, deadline_ms: int) -> PendingAck:
        pending = PendingAck(
            pending_id=self._local.next_pending_id(),
            base_offset=result.base_offset,
            last_offset=result.last_offset,
            deadline_ms=deadline_ms,
            log_append_time_ms=result.log_append_time_ms,
            log_start_offset=result.log_start_offset,
        )
        self._pending[pending.pending_id] = pending
        return pending

    def _refused(self, refused: Refused) -> AppendOutcome:
        result = ProduceResult(
            refused.error,
            log_start_offset=self._local.log.log_start_offset,
            error_message=refused.message,
            record_errors=refused.record_errors,
        )
        return AppendOutcome(result)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def _complete(self, pending: PendingAck, error: ErrorCode) -> CompleteProduce:
        del self._pending[pending.pending_id]
        local = self._local
        return CompleteProduce(
            local.topic,
            local.partition,
            pending.pending_id,
            error,
            pending.base_offset,
            pending.log_append_time_ms,
            pending.log_start_offset,
        )

    def step_down(self) -> list[Effect]:
        """Leadership is gone: every waiting produce fails (the write may still survive)."""
        return [
            self._complete(pending, ErrorCode.NOT_LEADER_OR_FOLLOWER)
            for pending in list(self._pending.values())
        ]

    # ---- follower fetches ----

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        now_ms: int,
        *,
        max_bytes: int,
        min_one_batch: bool,
        record_progress: bool = True,
        log_start_offset: int | None = None,
    ) -> FollowerFetchResult:
        """The follower's progress (and so the ISR and the HW) moves with each Fetch it
        sends; `record_progress` False reads for a Fetch whose progress was taken already.
        `log_start_offset`: the follower's, as its Fetch says (v5+)."""
        local = self._local
        log = local.log
        if replica_id not in self.followers:
            return self._fetch_answer(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        diverging = self._divergence(fetch_offset, last_fetched_epoch)
        if diverging is not None:
            return self._fetch_answer(ErrorCode.NONE, diverging_epoch=diverging)
        log_end_offset = log.log_end_offset  # a fetch reads; nothing below appends
        if not log.log_start_offset <= fetch_offset <= log_end_offset:
            return self._fetch_answer(ErrorCode.OFFSET_OUT_OF_RANGE)
        effects: list[Effect] = []
        if record_progress:
            progress = self.followers[replica_id]
            self.followers[replica_id] = progress_after_fetch(
                progress,
                fetch_offset,
                log_end_offset,
                now_ms,
                log_start_offset=log_start_offset,
            )
            effects = self._maybe_expand_isr(replica_id, now_ms)
            effects += self._advance_high_watermark()
        try:
            found = log.read(fetch_offset, max_bytes, log_end_offset, min_one_batch)
        except OffsetOutOfRangeError:  # checked above; the log did not change since
            raise AssertionError(f"{local}: fetch offset {fetch_offset} left the log") from None
        return self._fetch_answer(ErrorCode.NONE, records=found.records, effects=effects)

    # ---- DeleteRecords ----

    def delete_records(self, offset: int) -> tuple[ErrorCode, int]:
        """Move the log start to `offset` (DELETE_TO_HIGH_WATERMARK: the HW), as Kafka's
        deleteRecordsOnLeader: never past the HW, never back. Returns the error and the
        offset the request waits for (the followers follow through their fetch answers)."""
        local = self._local
        if not local.log.config.deletes_by_retention:
            return ErrorCode.POLICY_VIOLATION, -1
        wanted = local.high_watermark if offset == DELETE_TO_HIGH_WATERMARK else offset
        if not 0 <= wanted <= local.high_watermark:
            return ErrorCode.OFFSET_OUT_OF_RANGE, -1
        local.advance_log_start_offset(wanted)
        return ErrorCode.NONE, wanted

    def low_watermark(self, alive: frozenset[int]) -> int:
        """The lowest log start among this leader and the followers on live brokers (Kafka's
        lowWatermarkIfLeader): a follower that has not said its log start yet holds it at -1."""
        lowest = self._local.log.log_start_offset
        for replica_id, progress in self.followers.items():
            if replica_id in alive:
                follower_start = progress.log_start_offset
                lowest = min(lowest, -1 if follower_start is None else follower_start)
        return lowest

    def _divergence(self, fetch_offset: int, last_fetched_epoch: int) -> DivergingEpoch | None:
        """Fetch v12+: where the follower's log leaves ours, if its last epoch says it does."""
        if last_fetched_epoch < 0:
            return None
        local = self._local
        epoch, end_offset = local.epochs.end_offset_for(last_fetched_epoch, local.log_end_offset)
        if epoch == last_fetched_epoch and end_offset >= fetch_offset:
            return None
        return DivergingEpoch(epoch, end_offset)

    def _fetch_answer(
        self,
        error: ErrorCode,
        *,
        records: FileSlice | None = None,
        diverging_epoch: DivergingEpoch | None = None,
        effects: Sequence[Effect] = (),
    ) -> FollowerFetchResult:
        local = self._local
        return FollowerFetchResult(
            error,
            high_watermark=local.high_watermark,
            log_start_offset=local.log.log_start_offset,
            log_end_offset=local.log_end_offset,
            records=records,
            diverging_epoch=diverging_epoch,
            effects=tuple(effects),
        )

    def log_end_offsets(self) -> dict[int, int | None]:
        """Every replica's LEO as the leader knows it (None: not fetched in this epoch)."""
        offsets: dict[int, int | None] = {self._local.broker_id: self._local.log_end_offset}
        for replica_id, progress in self.followers.items():
            offsets[replica_id] = progress.log_end_offset
        return offsets

    # ---- the high watermark ----

    def _advance_high_watermark_after_append(self) -> list[Effect]:
        """The leader's own LEO moved. Followers never hold more than the leader, so the
        smallest LEO of the ISR can only grow by the leader's append when the leader is the
        ISR's only member: with followers, only their fetches move the HW."""
        if len(self._state.isr) > 1:
            return []
        return self._advance_high_watermark()

    def _advance_high_watermark(self) -> list[Effect]:
        local = self._local
        members = maximal_isr(self._state.isr, self.proposed_isr) | {local.broker_id}
        known = self.log_end_offsets()
        offsets = [known.get(member) for member in members]
        candidate = high_watermark_of(offsets)
        if candidate is None:
            return []
        effects = local.raise_high_watermark(candidate)
        if effects:
            effects += self._complete_replicated()
        return effects

    def _complete_replicated(self) -> list[Effect]:
        """Produces whose batch is now below the HW; with the committed ISR smaller than
        min.insync.replicas they fail as NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's rule).
        """
        high_watermark = self._local.high_watermark
        enough = len(self._state.isr) >= self._local.config.min_insync_replicas
        error = ErrorCode.NONE if enough else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return [
            self._complete(pending, error)
            for pending in list(self._pending.values())
            if pending.last_offset < high_watermark
        ]

    def check_invariants(self) -> None:
        high_watermark = self._local.high_watermark
        assert high_watermark >= self._high_watermark_floor, (
            f"{self._local}: leader HW went back from {self._high_watermark_floor}"
        )
        self._high_watermark_floor = high_watermark

    # ---- the ISR ----

    def tick(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = [
            self._complete(pending, ErrorCode.REQUEST_TIMED_OUT)
            for pending in list(self._pending.values())
            if now_ms >= pending.deadline_ms
        ]
        effects += self._maybe_resend_proposal(now_ms)
        effects += self._maybe_shrink_isr(now_ms)
        return effects

    def _maybe_resend_proposal(self, now_ms: int) -> list[Effect]:
        if self._proposal is None or self._resend_after_ms is None:
            return []
        if now_ms < self._resend_after_ms:
            return []
        self._resend_after_ms = None
        return [self._propose(self._proposal.new_isr)]

    def _may_propose(self, now_ms: int) -> bool:
        return self._proposal is None and now_ms >= self._propose_after_ms

    def _maybe_shrink_isr(self, now_ms: int) -> list[Effect]:
        if not self._may_propose(now_ms):
            return []
        isr = self._state.isr
        lagging = out_of_sync_members(
            isr,
            self._local.broker_id,
            self.followers,
            self._local.log_end_offset,
            now_ms,
            self._local.config.replica_lag_time_max_ms,
        )
        if not lagging:
            return []
        return [self._propose(tuple(member for member in isr if member not in lagging))]

    def _maybe_expand_isr(self, replica_id: int, now_ms: int) -> list[Effect]:
        if not self._may_propose(now_ms) or replica_id in self._state.isr:
            return []
        progress = self.followers[replica_id]
        if not can_join_isr(progress, self._local.high_watermark, self.epoch_start_offset):
            return []
        return [self._propose((*self._state.isr, replica_id))]

    def _propose(self, new_isr: tuple[int, ...]) -> ProposeIsr:
        state = self._state
        local = self._local
        self._proposal = ProposeIsr(
            local.topic, local.partition, state.leader_epoch, new_isr, state.partition_epoch
        )
        return self._proposal

    def on_alter_partition_response(
        self, response: AlterPartitionResponse, now_ms: int, *, proposal: ProposeIsr
    ) -> list[Effect]:
        """The controller's answer to `proposal`: a committed state is taken.

        An answer to any other proposal than the one in flight is ignored, as Kafka's
        Partition does when its pending ISR state is not the one that sent the request: a
        committed state that arrived through metadata ends a proposal, but its request may still
        be answered later, and that answer says nothing of the proposal sent since.

        Only INELIGIBLE_REPLICA proves the proposal was refused and nothing changed; then it is
        dropped and proposed again, if still needed, after the retry backoff. Any other error
        leaves its fate unknown (a lost answer may hide a commit), so the maximal ISR stays in
        force: errors saying our state is stale wait for newer metadata to replace the
        proposal; the rest (timeouts) send it again after the backoff. Dropping it instead
        would let the HW pass a member the controller already counts in the ISR.
        """
        if self._proposal is None or proposal != self._proposal:
            return []
        state = self._state
        backoff_ms = self._local.config.alter_partition_retry_backoff_ms
        if response.error == ErrorCode.INELIGIBLE_REPLICA:
            self._proposal = None
            self._resend_after_ms = None
            self._propose_after_ms = now_ms + backoff_ms
            return []
        if response.error in _AWAIT_METADATA_ERRORS:
            self._resend_after_ms = None
            return []
        if response.error != ErrorCode.NONE:
            self._resend_after_ms = now_ms + backoff_ms
            return []
        self._proposal = None
        self._resend_after_ms = None
        if (
            response.leader_epoch != state.leader_epoch
            or response.partition_epoch <= state.partition_epoch
        ):
            return []  # older than what we hold (the metadata got here first)
        self._local.state = replace(
            state, isr=tuple(response.isr), partition_epoch=response.partition_epoch
        )
        return self._advance_high_watermark()

    def on_committed_state(self, state: PartitionState, now_ms: int) -> list[Effect]:
        """A newer partition state in this leader epoch (already stored): it supersedes any
        proposal in flight.
        """
        self._proposal = None
        self._resend_after_ms = None
        self._track_replicas(state, now_ms)
        return self._advance_high_watermark()
