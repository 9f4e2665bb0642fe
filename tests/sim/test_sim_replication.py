"""The deterministic simulation in the suite: many seeds, replay, and checkers that can fail.

The seed sweep lets each broker start choose whether it serves Fetch v12 (its followers then
pick v11 or v12 from its ApiVersions, as the daemon's do) and checks every invariant. A seed
found failing while its fix is under way goes in KNOWN_FAILURES with its own strict xfail.
Seeds 36, 42, 251 and 887 once failed, under the harness that drove replicas before the broker
core existed; a seed's run differs since, so each stays below as an extra seed, and the cases
that can be scripted are tests of their own.
"""

from __future__ import annotations

import pytest
from sim_cluster import Checker, InvariantViolation, SimOptions, Simulation, run_seed
from sim_fs import SimFileSystem

from rlog.core.records import build_batch
from rlog.core.replication import FetchPlan, PartitionState, Replica, ReplicaConfig, TruncationPlan
from rlog.core.storage.config import LogConfig
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log import Log

SUITE_OPTIONS = SimOptions()  # each broker start picks Fetch v11 or v12, by seed
SEEDS = 600
BATCH = 50
KNOWN_FAILURES: dict[int, str] = {}


def _describe(outcome) -> str:  # type: ignore[no-untyped-def]
    tail = "\n".join(outcome.trace_tail[-15:])
    return (
        f"seed {outcome.seed} step {outcome.step}: {outcome.invariant}: {outcome.detail}\n{tail}\n"
        f"replay: python tests/sim/sim_run.py --seed {outcome.seed} --trace"
    )


@pytest.mark.parametrize("first", range(0, SEEDS, BATCH), ids=lambda f: f"seeds{f}-{f + BATCH - 1}")
def test_seeds_keep_every_invariant(first: int) -> None:
    failures = []
    for seed in range(first, first + BATCH):
        if seed in KNOWN_FAILURES:
            continue
        outcome = run_seed(seed, SUITE_OPTIONS)
        if not outcome.ok:
            failures.append(_describe(outcome))
    assert not failures, "\n\n".join(failures)


def test_the_sweep_exercises_faults_and_acks() -> None:
    """A sweep where nothing is acknowledged or nothing fails would prove nothing."""
    totals = {
        "acked": 0, "unknown": 0, "failed": 0, "faults": 0, "txns_committed": 0, "txns_aborted": 0
    }  # fmt: skip
    for seed in range(20):
        outcome = run_seed(seed, SUITE_OPTIONS)
        for key in totals:
            totals[key] += outcome.summary[key]
    assert totals["acked"] > 500 and totals["faults"] > 20
    assert totals["unknown"] > 0 and totals["failed"] > 0
    assert totals["txns_committed"] > 50 and totals["txns_aborted"] > 20


# ---- determinism ----


def test_a_seed_replays_to_an_identical_trace() -> None:
    first = run_seed(7, SUITE_OPTIONS)
    again = run_seed(7, SUITE_OPTIONS)
    assert first.trace_hash == again.trace_hash
    assert first.summary == again.summary
    assert run_seed(8, SUITE_OPTIONS).trace_hash != first.trace_hash


# ---- seeds that once failed ----


# Seed 36 livelocked: a follower whose latest epoch entry started at its LEO (no data in that
# epoch) sent it as last_fetched_epoch forever, and every Fetch v12 answered DivergingEpoch.
def test_fetch_v12_follower_with_empty_latest_epoch_catches_up() -> None:
    outcome = run_seed(36, SimOptions(fetch_versions=(12,)))
    assert outcome.ok, _describe(outcome)


def _replica(broker_id: int) -> Replica:
    fs = SimFileSystem()
    fs.makedirs("/data/t-0")
    log = Log("/data/t-0", LogConfig(), fs, recovery_point=0, log_start_offset=0, now_ms=0)
    epochs = LeaderEpochCache.load(
        fs, "/data/t-0", log.iter_batch_headers(), log_start_offset=0, log_end_offset=0
    )
    return Replica("t", 0, broker_id, log, epochs, ReplicaConfig(min_insync_replicas=1), 0)


def test_minimal_ex_leader_with_no_data_in_its_epoch_catches_up_with_fetch_v12() -> None:
    """Broker 1 leads epoch 0 and writes nothing; broker 2 leads epoch 1 and takes one record.
    Broker 1 follows: every Fetch v12 from offset 0 with last_fetched_epoch 0 is answered with
    DivergingEpoch(epoch 0 ends at 0), truncate_to(0) at LEO 0 does nothing, the (0, 0) epoch
    entry stays, and the next fetch is the same request again.
    """
    ex_leader, leader = _replica(1), _replica(2)
    ex_leader.apply_partition_state(PartitionState(1, 0, (1, 2), (1, 2), 0), 0)
    state = PartitionState(2, 1, (2,), (1, 2), 1)
    leader.apply_partition_state(state, 0)
    ex_leader.apply_partition_state(state, 0)
    leader.append_as_leader(build_batch([(None, b"a")]), 1, 0, required_acks_timeout_ms=1000)
    for _ in range(5):
        plan = ex_leader.follower_fetch_request()
        if isinstance(plan, TruncationPlan):
            answer = leader.offsets_for_leader_epoch(plan.epoch, plan.current_leader_epoch)
            ex_leader.on_epoch_end_offset(answer.epoch, answer.end_offset, leader_epoch=1)
            continue
        assert isinstance(plan, FetchPlan)
        result = leader.on_follower_fetch(
            1, plan.fetch_offset, plan.last_fetched_epoch, 1, 0, max_bytes=1 << 20
        )
        if result.diverging_epoch is not None:
            diverging = result.diverging_epoch
            ex_leader.on_epoch_end_offset(diverging.epoch, diverging.end_offset, leader_epoch=1)
        else:
            records = result.records.read() if result.records is not None else b""
            ex_leader.on_fetch_response(records, result.high_watermark, 0, 0, leader_epoch=1)
    assert ex_leader.log_end_offset == 1, f"stuck: epochs {ex_leader.epochs.entries}"


# Seed 42 once showed a consumer HW going back: a new leader served its own HW, one fetch behind
# the old leader's. A new leader now serves consumers only once its HW reaches its epoch start.
def test_hw_shown_by_the_current_leader_never_moves_back() -> None:
    outcome = run_seed(42, SimOptions(fetch_versions=(11,)))
    assert outcome.ok, _describe(outcome)


# Seed 251 once rewrote offset 0 below an HW of 1: the ISR had shrunk to the leader alone, which
# then lost its unsynced tail to a power loss and was re-elected (KIP-966's last replica
# standing). Since the leader keeps its maximal ISR on an unknown AlterPartition outcome the seed
# no longer reaches that state; the case itself stays possible until ELR-like rules land.
def test_power_loss_of_a_sole_isr_leader_keeps_values_below_the_hw() -> None:
    outcome = run_seed(251, SUITE_OPTIONS)
    assert outcome.ok, _describe(outcome)


# Seed 887 lost an acked write: the controller committed ISR (3,2,1), its answer was lost, the
# leader dropped the proposal on REQUEST_TIMED_OUT and acked offset 10 without broker 1, which
# the controller then elected. The leader now keeps the maximal ISR until the outcome is known.
def test_a_lost_isr_expansion_answer_does_not_lose_an_acked_write() -> None:
    outcome = run_seed(887, SUITE_OPTIONS)
    assert outcome.ok, _describe(outcome)


# Seeds 2604 and 4773 were reported failing I3-visible-hw (HW 71 -> 0, HW 6 -> 0) under a
# version of this harness in flux; they no longer replay to that state. A leader showing
# consumers HW 0 after a higher HW has one of two causes: it lost the data (the last replica
# standing above), or it restarted into the epoch it led before with a stale HW checkpoint and
# took the epoch cache's first offset of that epoch as its start. The second is scripted in
# test_a_leader_restarted_into_its_own_epoch_with_a_stale_hw_does_not_serve_consumers
# (tests/unit/test_replication.py): like Kafka's makeLeader, the start is now the LEO when the
# leadership is taken.
@pytest.mark.parametrize("seed", [2604, 4773])
def test_a_leader_with_a_stale_hw_does_not_show_consumers_a_lower_hw(seed: int) -> None:
    outcome = run_seed(seed, SUITE_OPTIONS)
    assert outcome.ok, _describe(outcome)


# ---- every checker fails on a broken history ----


def test_one_leader_per_epoch_checker_catches_two_leaders() -> None:
    checker = Checker()
    checker.leader(0, 3, 1)
    checker.leader(0, 3, 1)
    checker.leader(0, 4, 2)
    with pytest.raises(InvariantViolation, match="one-leader-per-epoch"):
        checker.leader(0, 3, 2)


def test_leader_hw_checker_catches_a_hw_going_back_in_a_term() -> None:
    checker = Checker()
    term = (1, 1, 0, 3)
    checker.leader_high_watermark(term, 5)
    checker.leader_high_watermark((1, 1, 0, 4), 2)  # another term may start lower
    with pytest.raises(InvariantViolation, match="I3-leader-hw"):
        checker.leader_high_watermark(term, 4)


def test_visible_hw_checker_catches_a_hw_going_back() -> None:
    checker = Checker()
    checker.consumer_high_watermark(0, 7)
    checker.consumer_high_watermark(1, 2)
    with pytest.raises(InvariantViolation, match="I3-visible-hw"):
        checker.consumer_high_watermark(0, 6)


def test_agreement_checker_catches_a_divergent_replica() -> None:
    checker = Checker()
    checker.below_high_watermark((1, 1, 0), 0, {0: b"a", 1: b"b"})
    checker.below_high_watermark((2, 1, 0), 0, {0: b"a"})
    with pytest.raises(InvariantViolation, match="I10"):
        checker.below_high_watermark((3, 1, 0), 0, {1: b"x"})


def test_acked_checker_catches_a_lost_ack() -> None:
    checker = Checker()
    log = {0: b"v0", 1: b"v1"}
    acked = [(0, 0, b"v0"), (0, 1, b"v1")]
    checker.acked_present((1, 1, 0, 0), acked, lambda _p, o: log.get(o))
    acked.append((0, 2, b"v2"))  # acknowledged, but not in the leader's log
    with pytest.raises(InvariantViolation, match="I1"):
        checker.acked_present((1, 1, 0, 0), acked, lambda _p, o: log.get(o))


def test_the_simulation_catches_a_fake_lost_ack_and_a_rewritten_offset() -> None:
    """The checks wired into a running simulation, not only the Checker alone."""
    sim = Simulation(3, SUITE_OPTIONS)
    for _ in range(600):
        sim.step(faults=False)
    assert sim.producer.acked, "the run acknowledged something"
    partition, offset, value = sim.producer.acked[0]
    sim.producer.acked.append((partition, offset, value + b"-lost"))
    with pytest.raises(InvariantViolation, match="I1"):
        sim.check()

    sim = Simulation(3, SUITE_OPTIONS)
    for _ in range(600):
        sim.step(faults=False)
    sim.checker.committed[(0, 0)] = b"another value"
    sim.checker.checked_upto.clear()
    with pytest.raises(InvariantViolation, match="I10"):
        sim.check()
