"""The replica state machine, wired by hand: a leader and followers on real logs in tmp dirs,
a test playing the controller and the network. Nothing moves unless a test says so.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch, decode_batch, iter_batches
from rlog.core.replication import (
    NO_EPOCH,
    AlterPartitionResponse,
    AppendOutcome,
    CompleteProduce,
    Effect,
    FetchPlan,
    HighWatermarkChanged,
    PartitionState,
    ProposeIsr,
    Replica,
    ReplicaConfig,
    Truncated,
    TruncationPlan,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log import Log

TOPIC = "t"
LAG_MS = 30_000
TIMEOUT_MS = 60_000
FETCH_MAX_BYTES = 1024 * 1024
CONFIG = ReplicaConfig(min_insync_replicas=2, replica_lag_time_max_ms=LAG_MS)


class Cluster:
    """Replicas of partition t-0 on brokers, with the test as controller and network."""

    def __init__(
        self, root: Path, broker_ids: Sequence[int] = (1, 2, 3), config: ReplicaConfig = CONFIG
    ) -> None:
        self.root = root
        self.config = config
        self.now_ms = 0
        self.broker_ids = tuple(broker_ids)
        self.replicas: dict[int, Replica] = {b: self._open(b, 0) for b in broker_ids}
        self.state: PartitionState | None = None
        self.completed: dict[tuple[int, int], CompleteProduce] = {}  # by (broker, pending id)
        self.proposals: list[ProposeIsr] = []
        self.high_watermarks: list[tuple[int, int]] = []  # (broker, HW) as announced
        self.truncations: list[tuple[int, int]] = []  # (broker, offset)
        self.use_diverging_epoch = False  # Fetch v12+: send last_fetched_epoch

    def _open(self, broker_id: int, high_watermark: int) -> Replica:
        path = str(self.root / f"broker-{broker_id}" / f"{TOPIC}-0")
        fs = RealFileSystem()
        log = Log(path, LogConfig(), fs, recovery_point=0, log_start_offset=0, now_ms=self.now_ms)
        epochs = LeaderEpochCache.load(
            fs,
            path,
            log.iter_batch_headers(),
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
        )
        return Replica(
            TOPIC,
            0,
            broker_id,
            log,
            epochs,
            self.config,
            self.now_ms,
            high_watermark=high_watermark,
        )

    def __getitem__(self, broker_id: int) -> Replica:
        return self.replicas[broker_id]

    # ---- the controller ----

    def elect(
        self, leader: int, isr: Iterable[int], *, replicas: Iterable[int] | None = None
    ) -> None:
        """A new leader epoch with this leader and ISR, sent to every live broker."""
        epoch = self.state.leader_epoch + 1 if self.state is not None else 0
        self.publish(leader, epoch, tuple(isr), replicas)

    def publish(
        self,
        leader: int,
        leader_epoch: int,
        isr: tuple[int, ...],
        replicas: Iterable[int] | None = None,
    ) -> None:
        partition_epoch = self.state.partition_epoch + 1 if self.state is not None else 0
        replicas = tuple(replicas) if replicas is not None else self.broker_ids
        self.state = PartitionState(leader, leader_epoch, isr, replicas, partition_epoch)
        for replica in self.replicas.values():
            self.collect(replica.broker_id, replica.apply_partition_state(self.state, self.now_ms))

    def commit_proposal(self) -> None:
        """Commit the last ISR proposal: answer the leader, then publish the new state."""
        proposal = self.proposals.pop()
        assert self.state is not None
        assert proposal.partition_epoch == self.state.partition_epoch
        committed = self.state.partition_epoch + 1
        response = AlterPartitionResponse(
            ErrorCode.NONE, self.state.leader, proposal.leader_epoch, proposal.new_isr, committed
        )
        leader = self.replicas[self.state.leader]
        effects = leader.on_alter_partition_response(response, self.now_ms, proposal=proposal)
        self.collect(leader.broker_id, effects)
        self.publish(self.state.leader, self.state.leader_epoch, proposal.new_isr)

    def reject_proposal(self, error: ErrorCode = ErrorCode.INELIGIBLE_REPLICA) -> None:
        proposal = self.proposals.pop()
        assert self.state is not None
        leader = self.replicas[self.state.leader]
        response = AlterPartitionResponse(error)
        effects = leader.on_alter_partition_response(response, self.now_ms, proposal=proposal)
        self.collect(leader.broker_id, effects)

    def collect(self, broker_id: int, effects: Iterable[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, CompleteProduce):
                key = (broker_id, effect.pending_id)
                assert key not in self.completed, f"{key} completed twice"
                self.completed[key] = effect
            elif isinstance(effect, ProposeIsr):
                assert not self.proposals, "a second ISR proposal while one is in flight"
                self.proposals.append(effect)
            elif isinstance(effect, HighWatermarkChanged):
                self.high_watermarks.append((broker_id, effect.high_watermark))
            elif isinstance(effect, Truncated):
                self.truncations.append((broker_id, effect.offset))

    # ---- brokers ----

    def crash(self, broker_id: int) -> int:
        """Stop a broker; returns its HW, as its checkpoint would have it."""
        replica = self.replicas.pop(broker_id)
        replica.log.close()
        # Pending ids are unique within one process: the restarted broker counts from 0 again.
        self.completed = {key: done for key, done in self.completed.items() if key[0] != broker_id}
        return replica.high_watermark

    def restart(self, broker_id: int, high_watermark: int) -> Replica:
        """Start a broker again from its files; it learns the current state at once."""
        replica = self.replicas[broker_id] = self._open(broker_id, high_watermark)
        if self.state is not None:
            self.collect(broker_id, replica.apply_partition_state(self.state, self.now_ms))
        return replica

    def tick(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        for replica in self.replicas.values():
            self.collect(replica.broker_id, replica.tick(self.now_ms))

    # ---- clients ----

    def produce(
        self, value: bytes, acks: int = -1, *, to: int | None = None, batch: bytes | None = None
    ) -> AppendOutcome:
        assert self.state is not None
        replica = self.replicas[to if to is not None else self.state.leader]
        records = batch if batch is not None else build_batch([(None, value)])
        outcome = replica.append_as_leader(
            records, acks, self.now_ms, required_acks_timeout_ms=TIMEOUT_MS
        )
        self.collect(replica.broker_id, outcome.effects)
        return outcome

    # ---- the network between followers and the leader ----

    def fetch(self, follower_id: int) -> str:
        """One request and its answer; returns what happened."""
        follower = self.replicas[follower_id]
        plan = follower.follower_fetch_request()
        if plan is None or plan.leader_id not in self.replicas:
            return "idle"
        leader = self.replicas[plan.leader_id]
        if isinstance(plan, TruncationPlan):
            answer = leader.offsets_for_leader_epoch(plan.epoch, plan.current_leader_epoch)
            if answer.error != ErrorCode.NONE:
                return answer.error.name
            effects = follower.on_epoch_end_offset(
                answer.epoch, answer.end_offset, leader_epoch=plan.current_leader_epoch
            )
            self.collect(follower_id, effects)
            return "truncation"
        return self._fetch_records(follower, leader, plan)

    def _fetch_records(self, follower: Replica, leader: Replica, plan: FetchPlan) -> str:
        last_fetched_epoch = plan.last_fetched_epoch if self.use_diverging_epoch else NO_EPOCH
        result = leader.on_follower_fetch(
            follower.broker_id,
            plan.fetch_offset,
            last_fetched_epoch,
            plan.current_leader_epoch,
            self.now_ms,
            max_bytes=FETCH_MAX_BYTES,
        )
        self.collect(leader.broker_id, result.effects)
        if result.error != ErrorCode.NONE:
            return result.error.name
        if result.diverging_epoch is not None:
            diverging = result.diverging_epoch
            effects = follower.on_epoch_end_offset(
                diverging.epoch, diverging.end_offset, leader_epoch=plan.current_leader_epoch
            )
            self.collect(follower.broker_id, effects)
            return "diverging"
        records = result.records.read() if result.records is not None else b""
        effects = follower.on_fetch_response(
            records,
            result.high_watermark,
            result.log_start_offset,
            self.now_ms,
            leader_epoch=plan.current_leader_epoch,
        )
        self.collect(follower.broker_id, effects)
        return "records" if records else "empty"

    def replicate(self, *follower_ids: int, rounds: int = 5) -> None:
        """A few fetch rounds each: enough to copy everything and learn the HW."""
        for _ in range(rounds):
            for follower_id in follower_ids:
                self.fetch(follower_id)


def batches(replica: Replica) -> list[bytes]:
    """Every batch of the replica's log, as stored."""
    log = replica.log
    found = log.read(log.log_start_offset, 2**31 - 1, log.log_end_offset, True)
    data = found.records.read() if found.records is not None else b""
    return [data[position : position + header.size] for position, header in iter_batches(data)]


def values(replica: Replica, *, below_high_watermark: bool = False) -> list[bytes | None]:
    limit = replica.high_watermark if below_high_watermark else replica.log_end_offset
    out: list[bytes | None] = []
    for batch in batches(replica):
        out += [record.value for record in decode_batch(batch) if record.offset < limit]
    return out


def epochs_of(replica: Replica) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in replica.epochs.entries]


def started(root: Path, *, leader: int = 1, isr: Sequence[int] = (1, 2, 3)) -> Cluster:
    """Brokers 1-3, `leader` elected in epoch 0, every ISR follower fetched (so known)."""
    cluster = Cluster(root)
    cluster.elect(leader, isr)
    cluster.replicate(*(b for b in isr if b != leader), rounds=2)
    return cluster


# ---- acks=all ----


def test_acks_all_completes_only_once_both_isr_followers_fetched_past_the_batch(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path)
    outcome = cluster.produce(b"a")
    assert outcome.result.error == ErrorCode.NONE and outcome.result.base_offset == 0
    assert outcome.pending is not None
    pending_id = outcome.pending.pending_id
    assert cluster[1].log_end_offset == 1 and cluster[1].high_watermark == 0

    cluster.fetch(2)  # copies offset 0; the leader learns only of fetch offset 0
    cluster.fetch(2)  # fetch offset 1: follower 2 has the batch
    assert cluster[1].high_watermark == 0, "follower 3 has not fetched past it"
    assert (1, pending_id) not in cluster.completed

    cluster.fetch(3)
    assert (1, pending_id) not in cluster.completed
    cluster.fetch(3)
    assert cluster[1].high_watermark == 1
    assert cluster.completed[1, pending_id].error == ErrorCode.NONE
    assert cluster.completed[1, pending_id].base_offset == 0
    assert (1, 1) in cluster.high_watermarks

    cluster.replicate(2, 3, rounds=1)
    assert [cluster[b].high_watermark for b in (2, 3)] == [1, 1], "followers learn it a fetch later"


def test_acks_one_and_zero_complete_at_the_append(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    for acks in (1, 0):
        outcome = cluster.produce(b"x", acks)
        assert outcome.result.error == ErrorCode.NONE and outcome.pending is None
    assert cluster[1].high_watermark == 0, "acks=1 does not wait, but the HW still does"


def test_a_lone_leader_completes_acks_all_at_once(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, broker_ids=(1,), config=ReplicaConfig())
    cluster.elect(1, (1,))
    outcome = cluster.produce(b"a")
    assert outcome.result.error == ErrorCode.NONE and outcome.pending is None
    assert cluster[1].high_watermark == 1
    assert HighWatermarkChanged(TOPIC, 0, 1) in outcome.effects


def test_the_leader_stamps_its_epoch_on_every_batch(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.elect(1, (1, 2, 3))
    cluster.produce(b"a", 1)
    cluster.replicate(2, 3)
    assert epochs_of(cluster[1]) == [(1, 0)], "epoch 0 held no offsets"
    assert epochs_of(cluster[2]) == [(1, 0)], "a follower learns epochs from the batches"
    (header,) = [header for _, header in iter_batches(batches(cluster[2])[0])]
    assert header.partition_leader_epoch == 1


def test_a_new_leader_moves_its_hw_only_once_every_isr_member_fetched_in_its_epoch(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    cluster.replicate(2, 3, rounds=1)  # both copy offset 0; the leader has not heard yet
    assert [cluster[b].log_end_offset for b in (1, 2, 3)] == [1, 1, 1]
    cluster.elect(2, (1, 2, 3))
    assert cluster[2].high_watermark == 0
    cluster.replicate(1)
    assert cluster[2].high_watermark == 0, "follower 3 has not fetched in epoch 1"
    assert cluster.fetch(3) == "truncation"  # the epoch check comes first
    assert cluster[2].high_watermark == 0
    cluster.fetch(3)
    assert cluster[2].high_watermark == 1


def test_a_new_leader_serves_consumers_only_once_its_hw_reaches_its_epoch_start(
    tmp_path: Path,
) -> None:
    """KIP-207: the old leader showed consumers HW 1; the new one starts at HW 0 and must not
    show that, so it refuses consumers (retriable) until its followers have caught up."""
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    cluster.replicate(2, 3, rounds=1)  # both copy offset 0
    cluster.fetch(2)
    cluster.fetch(3)  # now the leader has heard from both: HW 1, which 2 has not learned
    assert cluster[1].on_consumer_fetch(0, FETCH_MAX_BYTES).high_watermark == 1
    assert cluster[2].high_watermark == 0
    cluster.elect(2, (1, 2, 3))
    assert cluster[2].leader_epoch_start_offset == 1 and not cluster[2].serves_consumers
    refused = cluster[2].on_consumer_fetch(0, FETCH_MAX_BYTES)
    assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    cluster.replicate(1, 3)
    assert cluster[2].serves_consumers
    served = cluster[2].on_consumer_fetch(0, FETCH_MAX_BYTES)
    assert (served.error, served.high_watermark) == (ErrorCode.NONE, 1)


def test_a_leader_restarted_into_its_own_epoch_with_a_stale_hw_does_not_serve_consumers(
    tmp_path: Path,
) -> None:
    """Kafka's Partition.makeLeader: a restarted broker that takes the leadership of the epoch
    it already led (the state did not change while it was down) starts that epoch at its LEO
    now, not at the epoch cache's older entry. Its HW checkpoint is stale (here 0, as after a
    power loss before the first checkpoint), so with the entry's start (0) it would show
    consumers HW 0 after HW 2."""
    cluster = started(tmp_path)
    cluster.produce(b"a")
    cluster.produce(b"b")
    cluster.replicate(2, 3)
    assert cluster[1].on_consumer_fetch(0, FETCH_MAX_BYTES).high_watermark == 2
    cluster.crash(1)
    leader = cluster.restart(1, high_watermark=0)
    assert leader.is_leader and leader.leader_epoch == 0 and leader.high_watermark == 0
    assert epochs_of(leader) == [(0, 0)], "the cache keeps the epoch's first offset"
    assert leader.leader_epoch_start_offset == 2 and not leader.serves_consumers
    refused = leader.on_consumer_fetch(0, FETCH_MAX_BYTES)
    assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    cluster.replicate(2, 3)
    served = leader.on_consumer_fetch(0, FETCH_MAX_BYTES)
    assert (served.error, served.high_watermark) == (ErrorCode.NONE, 2)


# ---- min.insync.replicas and timeouts ----


def test_not_enough_replicas_before_the_append(tmp_path: Path) -> None:
    cluster = started(tmp_path, isr=(1,))
    outcome = cluster.produce(b"a")
    assert outcome.result.error == ErrorCode.NOT_ENOUGH_REPLICAS
    assert cluster[1].log_end_offset == 0, "nothing appended"
    assert cluster.produce(b"a", 1).result.error == ErrorCode.NONE, "acks=1 is not refused"


def test_not_enough_replicas_after_append_when_the_isr_shrinks_while_waiting(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path, isr=(1, 2))
    outcome = cluster.produce(b"a")
    assert outcome.pending is not None
    cluster.tick(LAG_MS + 1)  # follower 2 stalled
    assert cluster.proposals[-1].new_isr == (1,)
    cluster.commit_proposal()
    assert cluster[1].high_watermark == 1
    assert cluster.completed[1, outcome.pending.pending_id].error == (
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    )
    assert cluster.produce(b"b").result.error == ErrorCode.NOT_ENOUGH_REPLICAS


def test_request_timed_out_at_the_deadline(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    outcome = cluster.produce(b"a")
    assert outcome.pending is not None
    assert outcome.pending.deadline_ms == TIMEOUT_MS
    cluster.replicate(2)  # keeps follower 2 in sync; 3 stays behind but within the lag time
    cluster.tick(TIMEOUT_MS - 1)
    assert (1, outcome.pending.pending_id) not in cluster.completed
    cluster.tick(1)
    assert cluster.completed[1, outcome.pending.pending_id].error == ErrorCode.REQUEST_TIMED_OUT
    cluster.replicate(3)
    assert len(cluster.completed) == 1, "a timed-out produce is not completed twice"


def test_stepping_down_fails_waiting_produces(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    outcome = cluster.produce(b"a")
    assert outcome.pending is not None
    cluster.elect(2, (1, 2, 3))
    assert (
        cluster.completed[1, outcome.pending.pending_id].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    )


# ---- the ISR ----


def test_isr_shrinks_after_the_lag_time_and_the_hw_moves_only_once_committed(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path)
    outcome = cluster.produce(b"a")
    assert outcome.pending is not None
    for _ in range(3):
        cluster.tick(LAG_MS // 3)
        cluster.replicate(2, rounds=1)  # follower 3 is stalled
    assert not cluster.proposals, "not yet past replica.lag.time.max.ms"
    cluster.tick(LAG_MS // 3)
    assert cluster.proposals[-1].new_isr == (1, 2)
    assert cluster[1].proposed_isr == (1, 2)

    cluster.tick(LAG_MS // 3)  # still within the produce timeout
    cluster.replicate(2)
    assert len(cluster.proposals) == 1, "one proposal in flight at a time"
    assert cluster[1].high_watermark == 0, "3 counts until the controller commits"
    assert (1, outcome.pending.pending_id) not in cluster.completed
    assert cluster[1].isr == (1, 2, 3)

    cluster.commit_proposal()
    assert cluster[1].isr == (1, 2)
    assert cluster[1].high_watermark == 1
    assert cluster.completed[1, outcome.pending.pending_id].error == ErrorCode.NONE


def test_a_rejected_proposal_is_dropped_and_proposed_again_later(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    cluster.tick(LAG_MS + 1)
    assert cluster[1].proposed_isr == (1,)
    cluster.reject_proposal()
    assert cluster[1].proposed_isr is None
    assert cluster[1].isr == (1, 2, 3)
    backoff_ms = CONFIG.alter_partition_retry_backoff_ms
    cluster.tick(backoff_ms - 1)
    assert cluster[1].proposed_isr is None, "not before the retry backoff"
    cluster.tick(1)
    assert cluster[1].proposed_isr == (1,)


def test_a_lost_answer_keeps_the_maximal_isr_and_the_proposal_is_sent_again(
    tmp_path: Path,
) -> None:
    """Simulator seed 887: the controller committed an expansion but its answer was lost. If
    the leader dropped the proposal, its HW would pass the new member the controller already
    counts in the ISR, and that member could be elected without an acknowledged record.
    """
    cluster = started(tmp_path, isr=(1, 2))
    cluster.produce(b"a", 1)
    cluster.replicate(2)
    cluster.replicate(3)  # 3 catches up: the leader proposes adding it
    assert cluster[1].proposed_isr == (1, 2, 3)
    cluster.reject_proposal(ErrorCode.REQUEST_TIMED_OUT)
    assert cluster[1].proposed_isr == (1, 2, 3), "a lost answer may hide a commit"
    outcome = cluster.produce(b"b")  # acks=all
    cluster.replicate(2)
    assert cluster[1].high_watermark == 1, "3 still counts until the outcome is known"
    assert outcome.pending is not None
    backoff_ms = CONFIG.alter_partition_retry_backoff_ms
    cluster.tick(backoff_ms)
    assert cluster.proposals, "the same proposal is sent again after the backoff"


def test_a_stale_state_answer_waits_for_metadata_with_the_maximal_isr(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    cluster.tick(LAG_MS + 1)
    assert cluster[1].proposed_isr == (1,)
    cluster.reject_proposal(ErrorCode.INVALID_UPDATE_VERSION)
    assert cluster[1].proposed_isr == (1,)
    cluster.tick(CONFIG.alter_partition_retry_backoff_ms * 10)
    assert not cluster.proposals, "no resend: newer metadata will settle it"


def test_a_lagging_follower_rejoins_once_it_reaches_the_hw(tmp_path: Path) -> None:
    cluster = started(tmp_path, isr=(1, 2))
    for value in (b"a", b"b", b"c"):
        cluster.produce(value, 1)
    cluster.replicate(2)
    assert cluster[1].high_watermark == 3

    cluster.fetch(3)  # fetch offset 0, copies 0-2
    assert not cluster.proposals, "LEO 0 is below the HW"
    cluster.fetch(3)  # fetch offset 3 = HW
    assert cluster.proposals[-1].new_isr == (1, 2, 3)

    cluster.produce(b"d", 1)
    cluster.replicate(2)
    assert cluster[1].high_watermark == 3, "the member being added already counts"
    cluster.commit_proposal()
    assert cluster[1].isr == (1, 2, 3)
    cluster.replicate(3)
    assert cluster[1].high_watermark == 4


def test_an_older_or_repeated_partition_state_is_ignored(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    current = cluster.state
    assert current is not None
    stale = PartitionState(2, 0, (2,), (1, 2, 3), current.partition_epoch - 1)
    assert cluster[1].apply_partition_state(stale, 0) == []
    assert cluster[1].apply_partition_state(current, 0) == []
    assert cluster[1].is_leader and cluster[1].isr == (1, 2, 3)


# ---- who serves what ----


def test_followers_refuse_client_produce_and_consumer_fetch(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    assert cluster.produce(b"a", 1, to=2).result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert cluster[2].on_consumer_fetch(0, 1024).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    answer = cluster[2].offsets_for_leader_epoch(0, NO_EPOCH)
    assert answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_consumers_read_only_below_the_hw(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    empty = cluster[1].on_consumer_fetch(0, 1024)
    assert empty.error == ErrorCode.NONE and empty.records is None and empty.high_watermark == 0
    cluster.replicate(2, 3)
    read = cluster[1].on_consumer_fetch(0, 1024)
    assert read.records is not None and read.high_watermark == 1
    assert cluster[1].on_consumer_fetch(2, 1024).error == ErrorCode.OFFSET_OUT_OF_RANGE


def test_requests_in_a_stale_or_future_leader_epoch_are_refused(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.elect(1, (1, 2, 3))  # epoch 1
    cluster.produce(b"a", 1)
    leader = cluster[1]
    stale = leader.on_follower_fetch(2, 0, NO_EPOCH, 0, 0, max_bytes=FETCH_MAX_BYTES)
    assert stale.error == ErrorCode.FENCED_LEADER_EPOCH
    assert stale.error == 74 and stale.records is None
    future = leader.on_follower_fetch(2, 0, NO_EPOCH, 2, 0, max_bytes=FETCH_MAX_BYTES)
    assert future.error == ErrorCode.UNKNOWN_LEADER_EPOCH == 75
    assert leader.replica_log_end_offsets()[2] is None, "a refused fetch reports nothing"
    assert leader.on_consumer_fetch(0, 1024, current_leader_epoch=0).error == 74
    assert leader.offsets_for_leader_epoch(0, 2).error == 75


def test_a_stale_fetch_answer_is_not_appended(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    plan = cluster[2].follower_fetch_request()
    assert isinstance(plan, FetchPlan)
    answer = cluster[1].on_follower_fetch(
        2, plan.fetch_offset, NO_EPOCH, plan.current_leader_epoch, 0, max_bytes=FETCH_MAX_BYTES
    )
    assert answer.records is not None
    records = answer.records.read()
    cluster.elect(1, (1, 2, 3))  # a new epoch while the answer was on the wire
    assert cluster[2].on_fetch_response(records, 1, 0, 0, leader_epoch=0) == []
    assert cluster[2].log_end_offset == 0
    cluster.replicate(2)
    assert cluster[2].log_end_offset == 1
    again = cluster[2].on_fetch_response(records, 1, 0, 0, leader_epoch=1)
    assert again == [] and cluster[2].log_end_offset == 1, "a repeated answer is dropped"


# ---- KIP-101 / KIP-279: truncation by leader epoch ----


def test_kip101_scenario_1_a_lagging_hw_does_not_lose_a_committed_offset(
    tmp_path: Path,
) -> None:
    """A leads; B and C follow. Offsets 0-1 reach everyone and are acknowledged (A's HW is 2),
    but B learns HWs a fetch late: its HW is 0. B restarts, then A dies and B leads. Truncating
    to its HW on restart would lose both acknowledged writes; epochs keep them.
    """
    a, b, c = 1, 2, 3
    cluster = started(tmp_path, leader=a)
    first, second = cluster.produce(b"m0"), cluster.produce(b"m1")
    cluster.fetch(b)  # copies 0-1
    cluster.fetch(b)  # reports LEO 2; C is behind, so the HW is still 0
    cluster.replicate(c, rounds=2)
    assert first.pending and second.pending
    assert cluster.completed[1, second.pending.pending_id].error == ErrorCode.NONE
    assert (cluster[a].high_watermark, cluster[b].high_watermark) == (2, 0)

    b_high_watermark = cluster.crash(b)
    cluster.restart(b, b_high_watermark)
    assert cluster[b].high_watermark == 0 and cluster[b].log_end_offset == 2
    assert cluster.fetch(b) == "truncation"  # OffsetsForLeaderEpoch(0) → (0, 2): nothing to cut
    assert cluster[b].log_end_offset == 2, "the old rule would have cut it to 0"

    cluster.crash(a)
    cluster.elect(b, (b, c))
    cluster.replicate(c)
    assert values(cluster[b], below_high_watermark=True) == [b"m0", b"m1"]
    assert cluster.truncations == []


def test_kip101_scenario_1_restarting_straight_into_leadership(tmp_path: Path) -> None:
    """The same, but B becomes leader before it ever fetched again: no truncation either."""
    a, b, c = 1, 2, 3
    cluster = started(tmp_path, leader=a)
    cluster.produce(b"m0")
    cluster.produce(b"m1")
    cluster.fetch(b)
    cluster.fetch(b)
    cluster.replicate(c, rounds=2)
    b_high_watermark = cluster.crash(b)
    assert b_high_watermark == 0
    cluster.crash(a)
    cluster.elect(b, (b, c))
    cluster.restart(b, b_high_watermark)
    assert cluster[b].is_leader
    cluster.replicate(c)
    assert values(cluster[b], below_high_watermark=True) == [b"m0", b"m1"]
    assert cluster.truncations == []


def test_kip101_scenario_2_divergent_logs_become_identical(tmp_path: Path) -> None:
    """A leads; offset 0 reaches B, offset 1 (acks=1) does not. Both crash. B comes back first
    and leads a new epoch, where another client writes a different offset 1. A returns as a
    follower: it must drop its offset 1 and take B's, or the two logs hold two values there.
    """
    a, b = 1, 2
    config = ReplicaConfig(min_insync_replicas=1)
    cluster = Cluster(tmp_path, broker_ids=(a, b), config=config)
    cluster.elect(a, (a, b))
    cluster.produce(b"m0", 1)
    cluster.replicate(b)
    cluster.produce(b"m1 from A", 1)
    a_high_watermark, b_high_watermark = cluster.crash(a), cluster.crash(b)
    assert (a_high_watermark, b_high_watermark) == (1, 1)

    cluster.restart(b, b_high_watermark)
    cluster.elect(b, (b,))
    cluster.produce(b"m1 from B", 1)
    assert epochs_of(cluster[b]) == [(0, 0), (1, 1)]

    cluster.restart(a, a_high_watermark)  # a follower of B in epoch 1
    assert cluster.fetch(a) == "truncation"  # OffsetsForLeaderEpoch(0) → (0, 1)
    assert cluster.truncations == [(a, 1)]
    cluster.replicate(a)
    assert values(cluster[a]) == [b"m0", b"m1 from B"]
    assert batches(cluster[a]) == batches(cluster[b]), "byte for byte"
    assert epochs_of(cluster[a]) == epochs_of(cluster[b])


def test_kip101_scenario_2_through_fetch_diverging_epoch(tmp_path: Path) -> None:
    """The same divergence found by Fetch v12+'s DivergingEpoch on the leader's side."""
    a, b = 1, 2
    config = ReplicaConfig(min_insync_replicas=1)
    cluster = Cluster(tmp_path, broker_ids=(a, b), config=config)
    cluster.use_diverging_epoch = True
    cluster.elect(a, (a, b))
    cluster.produce(b"m0", 1)
    cluster.replicate(b)
    cluster.produce(b"m1 from A", 1)
    cluster.crash(a)
    cluster.elect(b, (b,))
    cluster.produce(b"m1 from B", 1)

    a_replica = cluster.restart(a, 1)
    leader_epoch = cluster[b].leader_epoch
    result = cluster[b].on_follower_fetch(
        a, 2, 0, leader_epoch, cluster.now_ms, max_bytes=FETCH_MAX_BYTES
    )
    assert result.error == ErrorCode.NONE and result.records is None
    assert result.diverging_epoch is not None
    assert (result.diverging_epoch.epoch, result.diverging_epoch.end_offset) == (0, 1)
    assert cluster[b].replica_log_end_offsets()[a] is None, "a diverging fetch reports nothing"

    a_replica.on_epoch_end_offset(0, 1, leader_epoch=leader_epoch)
    assert a_replica.log_end_offset == 1
    cluster.replicate(a)
    assert batches(cluster[a]) == batches(cluster[b])


def test_a_longer_log_of_an_old_epoch_is_cut_to_the_new_leaders_end_of_that_epoch(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path, isr=(1, 2, 3))
    for value in (b"0", b"1", b"2"):
        cluster.produce(value, 1)
    cluster.replicate(2, 3)  # everyone has 0-2 in epoch 0
    cluster.crash(3)
    for value in (b"3", b"4", b"5"):
        cluster.produce(value, 1)
    cluster.replicate(2, rounds=1)  # 2 copies 3-5, but the HW stays 3
    old_leader_high_watermark = cluster.crash(1)

    cluster.restart(3, 3)
    cluster.elect(3, (2, 3))  # 3 missed 3-5 (acks=1 writes, never committed)
    cluster.produce(b"3 in epoch 1", 1)
    cluster.restart(1, old_leader_high_watermark)
    for follower in (1, 2):
        assert cluster.fetch(follower) == "truncation"  # asks for epoch 0 → (0, 3)
    assert sorted(cluster.truncations) == [(1, 3), (2, 3)]
    cluster.replicate(1, 2)
    expected = [b"0", b"1", b"2", b"3 in epoch 1"]
    assert [values(cluster[b]) for b in (1, 2, 3)] == [expected] * 3
    assert cluster[3].high_watermark == 4


def test_an_unknown_epoch_is_cut_back_epoch_by_epoch(tmp_path: Path) -> None:
    """A asks about epoch 3 (its own, unknown to leader C); C answers with its epoch 2, which A
    never saw: A cuts to the end of its epoch 0 and asks again.
    """
    a, b, c = 1, 2, 3
    cluster = started(tmp_path, leader=a)
    cluster.produce(b"0", 1)
    cluster.produce(b"1", 1)
    cluster.replicate(b, c)  # epoch 0: offsets 0-1 everywhere
    a_high_watermark = cluster.crash(a)
    cluster.publish(b, 2, (b, c))
    cluster.produce(b"2 in epoch 2", 1)
    cluster.replicate(c)
    cluster.restart(a, a_high_watermark)
    cluster.publish(a, 3, (a,))  # an unclean election, made by hand
    cluster.produce(b"2 in epoch 3", 1)
    cluster.produce(b"3 in epoch 3", 1)
    assert epochs_of(cluster[a]) == [(0, 0), (3, 2)]
    cluster.publish(c, 4, (c,))
    cluster.produce(b"3 in epoch 4", 1)
    assert epochs_of(cluster[c]) == [(0, 0), (2, 2), (4, 3)]

    assert cluster.fetch(a) == "truncation"  # (3) → C's (2, 3); A knows no epoch 2
    assert cluster[a].log_end_offset == 2 and epochs_of(cluster[a]) == [(0, 0)]
    assert isinstance(cluster[a].follower_fetch_request(), TruncationPlan), "asks again"
    assert cluster.fetch(a) == "truncation"  # (0) → (0, 2): nothing more to cut
    assert isinstance(cluster[a].follower_fetch_request(), FetchPlan)
    cluster.replicate(a)
    assert batches(cluster[a]) == batches(cluster[c])
    assert epochs_of(cluster[a]) == epochs_of(cluster[c])


def test_a_follower_whose_every_epoch_is_newer_than_the_answer_drops_those_epochs(
    tmp_path: Path,
) -> None:
    """Broker 1 writes offset 0 in epoch 0 and nobody copies it; broker 2 leads epoch 1 and
    writes its own offset 0; broker 1 leads again in epoch 2. Broker 2 asks about epoch 1 and
    hears (0, 1): it knows no epoch 0, and everything it has (from epoch 1) must go.
    """
    cluster = Cluster(tmp_path)
    cluster.elect(1, (1, 2, 3))
    cluster.produce(b"from 1 in epoch 0", 1)
    cluster.elect(2, (1, 2, 3))
    cluster.produce(b"from 2 in epoch 1", 1)
    cluster.elect(1, (1, 2, 3))
    assert epochs_of(cluster[2]) == [(1, 0)]
    assert cluster.fetch(2) == "truncation"
    assert cluster.truncations == [(2, 0)]
    cluster.replicate(2)
    assert batches(cluster[2]) == batches(cluster[1])


def test_no_common_epoch_falls_back_to_the_hw(tmp_path: Path) -> None:
    cluster = started(tmp_path, isr=(1, 2))
    cluster.produce(b"0", 1)
    cluster.produce(b"1", 1)
    cluster.replicate(2)
    cluster.produce(b"2", 1)
    cluster.fetch(2)
    follower = cluster[2]
    assert (follower.high_watermark, follower.log_end_offset) == (2, 3)
    cluster.elect(1, (1, 2))
    follower.on_epoch_end_offset(-1, -1, leader_epoch=1)
    assert follower.log_end_offset == 2


def test_a_log_without_epochs_falls_back_to_the_hw_when_following(tmp_path: Path) -> None:
    """Batches written before leader epochs were stamped carry -1: no history to compare."""
    cluster = Cluster(tmp_path, broker_ids=(1, 2))
    for value in (b"0", b"1", b"2"):
        cluster[2].log.append(build_batch([(None, value)]), 0)
    cluster.crash(2)
    restarted = cluster.restart(2, 1)
    assert restarted.epochs.entries == ()
    cluster.elect(1, (1,))
    assert restarted.log_end_offset == 1
    assert isinstance(restarted.follower_fetch_request(), FetchPlan)


# ---- out of range, and replicas without a role ----


def test_a_follower_past_the_leader_end_cuts_back_and_one_behind_its_start_restarts(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path, isr=(1, 2))
    for value in (b"0", b"1", b"2", b"3"):
        cluster.produce(value, 1)
    cluster.replicate(2)
    leader = cluster[1]
    past = leader.on_follower_fetch(2, 5, NO_EPOCH, 0, 0, max_bytes=FETCH_MAX_BYTES)
    assert past.error == ErrorCode.OFFSET_OUT_OF_RANGE and past.log_end_offset == 4

    follower = cluster[3]  # empty, not in the ISR
    leader.log.roll()
    leader.log.advance_log_start_offset(3)
    behind = leader.on_follower_fetch(3, 0, NO_EPOCH, 0, 0, max_bytes=FETCH_MAX_BYTES)
    assert behind.error == ErrorCode.OFFSET_OUT_OF_RANGE and behind.log_start_offset == 3
    effects = follower.on_offset_out_of_range(3, 4, leader_epoch=0)
    assert Truncated(TOPIC, 0, 3, full=True) in effects
    assert (follower.log_start_offset, follower.log_end_offset) == (3, 3)
    cluster.replicate(3)
    assert values(follower) == [b"3"]

    ahead = cluster[2]
    ahead.log.append(build_batch([(None, b"extra")]), 0, leader_epoch=0, assign_offsets=True)
    assert ahead.on_offset_out_of_range(3, 4, leader_epoch=0) == [Truncated(TOPIC, 0, 4)]
    assert ahead.log_end_offset == 4


def test_only_assigned_replicas_fetch_as_followers(tmp_path: Path) -> None:
    cluster = started(tmp_path, isr=(1, 2))
    leader = cluster[1]
    for stranger in (1, 9):
        answer = leader.on_follower_fetch(stranger, 0, NO_EPOCH, 0, 0, max_bytes=FETCH_MAX_BYTES)
        assert answer.error == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_replica_removed_from_the_assignment_or_leaderless_has_no_role(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.publish(-1, 1, (1, 2), replicas=(1, 2))
    for broker in (1, 2, 3):
        replica = cluster[broker]
        assert not replica.is_leader and not replica.is_follower
        assert replica.follower_fetch_request() is None
        assert cluster.produce(b"a", 1, to=broker).result.error == (
            ErrorCode.NOT_LEADER_OR_FOLLOWER
        )


def test_an_isr_change_in_the_same_epoch_does_not_restart_the_epoch_check(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    cluster.replicate(2, 3)
    assert isinstance(cluster[2].follower_fetch_request(), FetchPlan)
    cluster.publish(1, 0, (1, 2))
    assert cluster[2].isr == (1, 2)
    assert isinstance(cluster[2].follower_fetch_request(), FetchPlan)
    assert cluster[1].isr == (1, 2) and cluster[1].is_leader


def test_a_stale_alter_partition_answer_is_ignored(tmp_path: Path) -> None:
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    cluster.tick(LAG_MS + 1)
    assert cluster.state is not None
    proposal = cluster.proposals.pop()
    old = AlterPartitionResponse(ErrorCode.NONE, 1, 0, (1,), cluster.state.partition_epoch)
    assert cluster[1].on_alter_partition_response(old, cluster.now_ms, proposal=proposal) == []
    assert cluster[1].isr == (1, 2, 3) and cluster[1].proposed_isr is None


def test_a_late_answer_to_a_replaced_proposal_leaves_the_next_one_in_force(
    tmp_path: Path,
) -> None:
    """A shrink is committed and the leader hears it through metadata before the answer; it
    proposes to take the caught-up member back. The shrink's late answer must not end that
    proposal: the controller may commit it, so the HW must keep waiting for the member."""
    cluster = started(tmp_path)
    cluster.produce(b"a", 1)
    cluster.tick(LAG_MS // 2)
    cluster.replicate(2)
    cluster.tick(LAG_MS // 2 + 2)  # 3 has not caught up for longer than the lag time
    shrink = cluster.proposals.pop()
    assert shrink.new_isr == (1, 2)
    cluster.publish(1, 0, (1, 2))
    cluster.replicate(3)
    assert cluster.proposals[-1].new_isr == (1, 2, 3)
    assert cluster.state is not None
    late = AlterPartitionResponse(ErrorCode.NONE, 1, 0, (1, 2), cluster.state.partition_epoch)
    assert cluster[1].on_alter_partition_response(late, cluster.now_ms, proposal=shrink) == []
    assert cluster[1].proposed_isr == (1, 2, 3)
    outcome = cluster.produce(b"b")
    cluster.replicate(2)
    assert cluster[1].high_watermark == 1  # 3 has not fetched b
    assert outcome.pending is not None and not cluster.completed
    cluster.replicate(3)
    assert cluster[1].high_watermark == 2


# ---- producer state moves with the data ----


def test_a_new_leader_recognises_a_retry_of_a_replicated_idempotent_batch(
    tmp_path: Path,
) -> None:
    cluster = started(tmp_path)
    batch = build_batch([(None, b"once")], producer_id=7, producer_epoch=0, base_sequence=0)
    assert cluster.produce(b"", batch=batch).result.base_offset == 0
    cluster.replicate(2, 3)
    cluster.elect(2, (1, 2, 3))
    retry = cluster.produce(b"", batch=batch)
    assert retry.result.error == ErrorCode.NONE
    assert retry.result.base_offset == 0 and retry.pending is None, "below the HW: done"
    assert cluster[2].log_end_offset == 1, "nothing appended"


# ---- random walks, checked after every step ----

STEPS = (
    "produce_all",
    "produce_one",
    "fetch",
    "fetch",
    "fetch",
    "tick",
    "commit",
    "reject",
    "failover",
    "crash",
    "restart",
)


class Checked(Cluster):
    """A cluster whose invariants are checked after every step of a random walk."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.acknowledged: dict[int, bytes] = {}  # offset → value, acks=all and NONE
        self.waiting: dict[tuple[int, int], tuple[int, bytes]] = {}  # → (offset, value)
        self.leader_high_watermark = 0
        self.crashed: dict[int, int] = {}  # broker → its checkpointed HW
        self.stopped: dict[int, Replica] = {}  # crashed replicas: their logs are still on disk

    def step(self, name: str, choice: int) -> None:
        assert self.state is not None
        leader = self.state.leader
        followers = [b for b in self.replicas if b != leader]
        if name == "produce_all":
            value = b"v%d" % len(self.waiting)
            outcome = self.produce(value)
            if outcome.pending is not None:
                key = (leader, outcome.pending.pending_id)
                self.waiting[key] = (outcome.result.base_offset, value)
        elif name == "produce_one":
            self.produce(b"x", 1)
        elif name == "fetch" and followers:
            self.use_diverging_epoch = choice >= 2
            self.fetch(followers[choice % len(followers)])
        elif name == "tick":
            self.tick(choice * LAG_MS // 2)
        elif name in ("commit", "reject") and self.proposals:
            self.commit_proposal() if name == "commit" else self.reject_proposal()
        elif name == "failover":
            self.fail_over(choice)
        elif name == "crash" and followers:
            broker = followers[choice % len(followers)]
            self.stopped[broker] = self[broker]
            self.crashed[broker] = self.crash(broker)
            self.waiting = {key: sent for key, sent in self.waiting.items() if key[0] != broker}
        elif name == "restart" and self.crashed:
            broker = sorted(self.crashed)[choice % len(self.crashed)]
            self.stopped.pop(broker)
            self.restart(broker, self.crashed.pop(broker))
        self.check()

    def fail_over(self, choice: int) -> None:
        """A clean election: another live ISR member leads (none: nothing happens)."""
        assert self.state is not None
        leader = self.state.leader
        candidates = [b for b in self.state.isr if b != leader and b in self.replicas]
        if not candidates or self.proposals:
            return
        self.elect(candidates[choice % len(candidates)], self.state.isr)
        self.leader_high_watermark = self[self.state.leader].high_watermark

    def collect(self, broker_id: int, effects: Iterable[Effect]) -> None:
        super().collect(broker_id, effects)
        for effect in effects:
            if isinstance(effect, CompleteProduce) and effect.error == ErrorCode.NONE:
                offset, value = self.waiting[broker_id, effect.pending_id]
                replicas = [*self.replicas.values(), *self.stopped.values()]
                holders = {r.broker_id for r in replicas if r.log_end_offset > offset}
                assert len(holders) >= CONFIG.min_insync_replicas, f"{offset} acked too early"
                self.acknowledged[offset] = value

    def check(self) -> None:
        assert self.state is not None
        leader = self[self.state.leader]
        assert leader.high_watermark >= self.leader_high_watermark, "the leader's HW went back"
        self.leader_high_watermark = leader.high_watermark
        leader_values = values(leader)
        for offset, value in self.acknowledged.items():
            assert leader_values[offset] == value, f"acknowledged offset {offset} lost"
        leader_batches = batches(leader)
        for replica in self.replicas.values():
            high_watermark = replica.high_watermark
            assert high_watermark <= replica.log_end_offset
            assert batches(replica)[:high_watermark] == leader_batches[:high_watermark], (
                f"broker {replica.broker_id} disagrees with the leader below its HW"
            )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 3)), max_size=60))
def test_random_walks_keep_acknowledged_writes_and_a_monotonic_hw(
    steps: list[tuple[str, int]],
) -> None:
    with tempfile.TemporaryDirectory() as root:
        cluster = Checked(Path(root))
        cluster.elect(1, (1, 2, 3))
        for name, choice in steps:
            cluster.step(name, choice)
        # Heal: everyone back, fetching until quiet; then every replica agrees below the HW.
        for broker, high_watermark in cluster.crashed.items():
            cluster.restart(broker, high_watermark)
        for _ in range(3):
            cluster.replicate(*cluster.broker_ids, rounds=3)
            while cluster.proposals:
                cluster.commit_proposal()
        assert cluster.state is not None
        leader = cluster[cluster.state.leader]
        for replica in cluster.replicas.values():
            below = batches(replica)[: replica.high_watermark]
            assert below == batches(leader)[: replica.high_watermark]
        cluster.check()
