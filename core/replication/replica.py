"""One partition's replica on one broker: the sans-IO state machine the daemon and the simulator
drive.

Inputs are the controller's partition states, requests from clients and followers, answers from
the leader and the controller, and `tick(now_ms)`; outputs are answers and effects (messages.py).
The role is an object (Leader, Follower, or none when offline or not a replica) and every
request goes to the role's own function; requests a role cannot serve are answered with the
error Kafka gives.
"""

from __future__ import annotations

from rlog.core.producer_state import ProducerStateManager
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication.follower import Follower
from rlog.core.replication.leader import Leader
from rlog.core.replication.local import LocalReplica
from rlog.core.replication.messages import (
    NO_EPOCH,
    NO_LEADER,
    AlterPartitionResponse,
    AppendOutcome,
    DeleteOutcome,
    Effect,
    EpochEndOffset,
    FetchPlan,
    FollowerFetchResult,
    PartitionState,
    ProduceResult,
    ProposeIsr,
    ReadResult,
    ReplicaConfig,
    TruncationPlan,
    TxnMarker,
)
from rlog.core.replication.rules import FollowerProgress, leader_epoch_error
from rlog.core.storage.files import Buffer
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log import Log, OffsetOutOfRangeError
from rlog.core.storage.txn_index import AbortedTxn

Role = Leader | Follower | None


class Replica:
    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        log: Log,
        epochs: LeaderEpochCache,
        config: ReplicaConfig,
        now_ms: int,
        *,
        high_watermark: int = 0,
    ) -> None:
        """`high_watermark`: the last checkpointed HW (clamped to the log). The replica has no
        role until the first apply_partition_state. `now_ms` is taken for symmetry with the other
        inputs; nothing needs the time before a role is taken.
        """
        self._local = LocalReplica(
            topic, partition, broker_id, log, epochs, config, high_watermark=high_watermark
        )
        self._role: Role = None

    # ---- what the daemon, the CLI and the tests read ----

    @property
    def topic(self) -> str:
        return self._local.topic

    @property
    def partition(self) -> int:
        return self._local.partition

    @property
    def broker_id(self) -> int:
        return self._local.broker_id

    @property
    def log(self) -> Log:
        return self._local.log

    @property
    def epochs(self) -> LeaderEpochCache:
        return self._local.epochs

    @property
    def producers(self) -> ProducerStateManager:
        return self._local.producers

    @property
    def high_watermark(self) -> int:
        return self._local.high_watermark

    @property
    def log_start_offset(self) -> int:
        return self._local.log.log_start_offset

    @property
    def leader_epoch_start_offset(self) -> int | None:
        """Leader only (else None): its LEO when it took this leadership (Kafka's
        leaderEpochStartOffsetOpt, set by Partition.makeLeader). The start of its epoch, unless
        it led this epoch before a restart: the epoch cache keeps the epoch's first offset, but
        the HW it restarted with (a checkpoint) may lag what it showed before anywhere above it.
        """
        return self._role.epoch_start_offset if isinstance(self._role, Leader) else None

    @property
    def serves_consumers(self) -> bool:
        """A leader serves consumers once its HW reaches its epoch start offset (KIP-207). A new
        leader learned the HW from its old leader's fetch answers, and a restarted one from its
        checkpoint, so it may start below what consumers were already shown; until its
        followers catch up with it, its HW is not shown, so the HW a consumer sees never moves
        back."""
        role = self._role
        return isinstance(role, Leader) and self.high_watermark >= role.epoch_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def partition_state(self) -> PartitionState | None:
        return self._local.state

    @property
    def leader_epoch(self) -> int:
        return self._local.leader_epoch

    @property
    def isr(self) -> tuple[int, ...]:
        state = self._local.state
        return state.isr if state is not None else ()

    @property
    def is_leader(self) -> bool:
        return isinstance(self._role, Leader)

    @property
    def is_follower(self) -> bool:
        return isinstance(self._role, Follower)

    @property
    def proposed_isr(self) -> tuple[int, ...] | None:
        return self._role.proposed_isr if isinstance(self._role, Leader) else None

    @property
    def pending_produce_count(self) -> int:
        return self._role.pending_count if isinstance(self._role, Leader) else 0

    @property
    def leader(self) -> int:
        state = self._local.state
        return state.leader if state is not None else NO_LEADER

    def replica_log_end_offsets(self) -> dict[int, int | None]:
        """Leader only (else empty): each replica's LEO, None if unknown in this epoch."""
        return self._role.log_end_offsets() if isinstance(self._role, Leader) else {}

    def follower_progress(self) -> dict[int, FollowerProgress]:
        """Leader only (else empty): each follower's LEO, last fetch and last caught-up times."""
        return dict(self._role.followers) if isinstance(self._role, Leader) else {}

    # ---- metadata ----

    def update_config(self, config: ReplicaConfig) -> None:
        """A dynamic topic config changed (min.insync.replicas, replica.lag.time.max.ms): the
        next produce and tick use it."""
        self._local.config = config

    @property
    def config(self) -> ReplicaConfig:
        return self._local.config

    def apply_partition_state(self, state: PartitionState, now_ms: int) -> list[Effect]:
        """Take the controller's state, unless it is older than (or repeats) the one we hold."""
        current = self._local.state
        if current is not None and (
            state.partition_epoch <= current.partition_epoch
            or state.leader_epoch < current.leader_epoch
        ):
            return []
        role = self._role
        same_term = current is not None and (current.leader, current.leader_epoch) == (
            state.leader,
            state.leader_epoch,
        )
        if same_term and role is not None and self.broker_id in state.replicas:
            self._local.state = state
            if isinstance(role, Leader):
                return self._checked(role.on_committed_state(state, now_ms))
            return []
        return self._checked(self._change_role(state, now_ms))

    def _change_role(self, state: PartitionState, now_ms: int) -> list[Effect]:
        local = self._local
        becomes_leader = state.leader == self.broker_id and self.broker_id in state.replicas
        if becomes_leader:
            # Before anything changes, so a failed checkpoint write leaves the replica as it was.
            local.epochs.assign(state.leader_epoch, local.log_end_offset)
        effects = self._role.step_down() if isinstance(self._role, Leader) else []
        local.state = state
        if becomes_leader:
            leader = Leader(local, now_ms)
            self._role = leader
            return effects + leader.start()
        if state.leader == NO_LEADER or self.broker_id not in state.replicas:
            self._role = None
            return effects
        follower = Follower(local, state.leader)
        self._role = follower
        return effects + follower.start()

    # ---- leader side ----

    def append_as_leader(
        self,
        records: Buffer | None,
        acks: int,
        now_ms: int,
        *,
        required_acks_timeout_ms: int,
        client: bool = True,
    ) -> AppendOutcome:
        """A client's Produce for this partition: one batch, `acks` 0, 1 or -1 (all); `client`
        False for a coordinator's batch, whose records are not checked one by one."""
        role = self._role
        if not isinstance(role, Leader):
            return AppendOutcome(self._not_leader_produce())
        outcome = role.append(
            records, acks, now_ms, timeout_ms=required_acks_timeout_ms, client=client
        )
        self._checked(list(outcome.effects))
        return outcome

    def append_marker(
        self, marker: TxnMarker, now_ms: int, *, required_acks_timeout_ms: int
    ) -> AppendOutcome:
        """A transaction marker, as leader, acks=all."""
        role = self._role
        if not isinstance(role, Leader):
            return AppendOutcome(self._not_leader_produce())
        outcome = role.append_marker(marker, now_ms, timeout_ms=required_acks_timeout_ms)
        self._checked(list(outcome.effects))
        return outcome

    def _not_leader_produce(self) -> ProduceResult:
        return ProduceResult(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            error_message=f"broker {self.broker_id} does not lead {self.topic}-{self.partition}",
        )

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        current_leader_epoch: int,
        now_ms: int,
        *,
        max_bytes: int,
        min_one_batch: bool = True,
        record_progress: bool = True,
        log_start_offset: int | None = None,
    ) -> FollowerFetchResult:
        """A follower's Fetch: its LEO is `fetch_offset`; the answer reads up to our LEO.
        `record_progress` False: the same Fetch served again after waiting, which only reads.
        `log_start_offset`: the follower's own (Fetch v5+), for DeleteRecords."""
        error = self.leader_error(current_leader_epoch)
        if error is not None:
            return FollowerFetchResult(error)
        assert isinstance(self._role, Leader)
        result = self._role.on_follower_fetch(
            replica_id,
            fetch_offset,
            last_fetched_epoch,
            now_ms,
            max_bytes=max_bytes,
            min_one_batch=min_one_batch,
            record_progress=record_progress,
            log_start_offset=log_start_offset,
        )
        self._checked(list(result.effects))
        return result

    def delete_records(self, offset: int, current_leader_epoch: int = NO_EPOCH) -> DeleteOutcome:
        """DeleteRecords on the leader: the log start moves to `offset` (-1: the HW) here at
        once, on the followers through their next fetch answers. The request is done when
        `low_watermark` reaches `outcome.offset`."""
        error = self.leader_error(current_leader_epoch)
        if error is not None:
            return DeleteOutcome(error)
        assert isinstance(self._role, Leader)
        error, offset = self._role.delete_records(offset)
        return DeleteOutcome(error, offset)

    def low_watermark(self, alive: frozenset[int]) -> int:
        """The lowest log start among the replicas on live brokers (-1 when not the leader)."""
        if not isinstance(self._role, Leader):
            return -1
        return self._role.low_watermark(alive)

    def on_consumer_fetch(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        current_leader_epoch: int = NO_EPOCH,
        min_one_batch: bool = True,
        read_committed: bool = False,
    ) -> ReadResult:
        """A consumer's Fetch: records from `fetch_offset`, never past the HW; read_committed
        never past the LSO, with the aborted transactions among the records."""
        error = self.leader_error(current_leader_epoch)
        if error is None and not self.serves_consumers:
            # Retriable for every client: they refresh metadata and fetch again.
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        if error is not None:
            return ReadResult(error, -1, -1, -1)
        high_watermark = self.high_watermark
        stable = self._local.last_stable_offset
        log = self._local.log
        try:
            limit = stable if read_committed else high_watermark
            found = log.read(fetch_offset, max_bytes, limit, min_one_batch)
        except OffsetOutOfRangeError:
            error = ErrorCode.OFFSET_OUT_OF_RANGE
            return ReadResult(error, high_watermark, stable, log.log_start_offset)
        aborted: tuple[AbortedTxn, ...] = ()
        if read_committed and found.records is not None:
            upper = found.records.next_offset
            aborted = tuple(log.aborted_transactions(fetch_offset, upper if upper >= 0 else limit))
        return ReadResult(
            ErrorCode.NONE, high_watermark, stable, log.log_start_offset, found.records, aborted
        )

    @property
    def last_stable_offset(self) -> int:
        return self._local.last_stable_offset

    def offsets_for_leader_epoch(
        self, requested_epoch: int, current_leader_epoch: int
    ) -> EpochEndOffset:
        """The largest epoch <= `requested_epoch` we know and where it ends (KIP-279)."""
        error = self.leader_error(current_leader_epoch)
        if error is not None:
            return EpochEndOffset(error)
        epoch, end_offset = self.epochs.end_offset_for(requested_epoch, self.log_end_offset)
        return EpochEndOffset(ErrorCode.NONE, epoch, end_offset)

    def leader_error(self, current_leader_epoch: int) -> ErrorCode | None:
        """Why this replica cannot serve a leader-only request sent in `current_leader_epoch`
        (NO_EPOCH: not checked), or None. Kafka's order: a stale or future epoch first, then
        leadership."""
        error = leader_epoch_error(current_leader_epoch, self.leader_epoch)
        if error is None and not isinstance(self._role, Leader):
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER
        return error

    def tick(self, now_ms: int) -> list[Effect]:
        """Time passed: fail produces past their deadline, propose shrinking a lagging ISR."""
        if not isinstance(self._role, Leader):
            return []
        return self._checked(self._role.tick(now_ms))

    def on_alter_partition_response(
        self, response: AlterPartitionResponse, now_ms: int, *, proposal: ProposeIsr
    ) -> list[Effect]:
        """The controller's answer to `proposal` (a ProposeIsr this replica asked for)."""
        if not isinstance(self._role, Leader):
            return []
        effects = self._role.on_alter_partition_response(response, now_ms, proposal=proposal)
        return self._checked(effects)

    # ---- follower side ----

    def follower_fetch_request(self) -> FetchPlan | TruncationPlan | None:
        """What to send the leader next; None unless following."""
        return self._role.fetch_request() if isinstance(self._role, Follower) else None

    def on_epoch_end_offset(
        self, epoch: int, end_offset: int, *, leader_epoch: int
    ) -> list[Effect]:
        """The leader's OffsetsForLeaderEpoch answer (or a Fetch's DivergingEpoch) to a request
        sent in `leader_epoch` (the plan's current_leader_epoch); stale answers are ignored.
        """
        follower = self._follower_in(leader_epoch)
        if follower is None:
            return []
        return self._checked(follower.on_epoch_end_offset(epoch, end_offset))

    def on_fetch_response(
        self,
        records: Buffer,
        leader_high_watermark: int,
        leader_log_start_offset: int,
        now_ms: int,
        *,
        leader_epoch: int,
    ) -> list[Effect]:
        """The leader's Fetch answer (no error, no divergence) to a fetch sent in
        `leader_epoch`: append its batches as they are, learn its HW and log start.
        """
        follower = self._follower_in(leader_epoch)
        if follower is None:
            return []
        effects = follower.on_fetch_response(
            records, leader_high_watermark, leader_log_start_offset, now_ms
        )
        return self._checked(effects)

    def on_offset_out_of_range(
        self, leader_log_start_offset: int, leader_log_end_offset: int, *, leader_epoch: int
    ) -> list[Effect]:
        """The leader answered our fetch with OFFSET_OUT_OF_RANGE."""
        follower = self._follower_in(leader_epoch)
        if follower is None:
            return []
        effects = follower.on_offset_out_of_range(leader_log_start_offset, leader_log_end_offset)
        return self._checked(effects)

    def _follower_in(self, leader_epoch: int) -> Follower | None:
        role = self._role
        if isinstance(role, Follower) and leader_epoch == self.leader_epoch:
            return role
        return None

    # ---- invariants ----

    def _checked(self, effects: list[Effect]) -> list[Effect]:
        """Assert the invariants after every step that changed something (bugs, not errors)."""
        local = self._local
        assert local.high_watermark <= local.log_end_offset, f"{local}: HW above the LEO"
        if isinstance(self._role, Leader):
            self._role.check_invariants()
        return effects

    def __repr__(self) -> str:
        role = type(self._role).__name__ if self._role is not None else "none"
        return f"Replica({self._local!r}, role={role}, isr={self.isr})"
