"""``rlog verify``'s history format and checker, without a cluster.

Each detector gets a deliberately broken history it must flag (with the right example) and a
clean one it must not. Then histories from a model of a correct log (append-only partitions,
transactional and plain producers, a consumer group with rebalances and commits, a seeking reader
and two final drains) must be valid with no anomalies, and each mutation of them must be flagged
by exactly the detectors it breaks. The JSON lines form round-trips."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from rlog.cli.verify.checker import check
from rlog.cli.verify.history import (
    Commit,
    EndOffsets,
    F,
    HistoryError,
    Op,
    OpType,
    Poll,
    Seek,
    Send,
    Txn,
    Value,
    read_jsonl,
    write_jsonl,
)
from rlog.cli.verify.promises import Guarantee, Promises
from rlog.cli.verify.verdict import Anomaly, Finding, Verdict, render_table

OK, FAIL, INFO = OpType.OK, OpType.FAIL, OpType.INFO
ALL = (0, 1, 2)
# acks=all + min.insync.replicas=2, idempotence, read_committed consumers
STRICT = Promises(durable_acks=True, idempotence=True, read_committed=True)
# acks=1, no idempotence, read_uncommitted consumers: clean elections only
LOOSE = Promises()


class H:
    """Builds a history tersely: each call records an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def op(self, process: str, op_type: OpType, f: F, value: Value) -> int:
        index = len(self.ops)
        self.ops.append(Op(index, index * 1000, process, op_type, f, value))
        return index

    def send(
        self,
        process: str,
        partition: int,
        value: int,
        offset: int | None = None,
        op_type: OpType = OK,
        txn: int | None = None,
    ) -> int:
        self.op(process, OpType.INVOKE, F.SEND, Send(partition, value, txn=txn))
        return self.op(process, op_type, F.SEND, Send(partition, value, offset, txn))

    def poll(
        self,
        process: str,
        reads: dict[int, list[tuple[int, int]]],
        assignment: tuple[int, ...] = ALL,
        generation: int | None = None,
        op_type: OpType = OK,
    ) -> int:
        self.op(process, OpType.INVOKE, F.POLL, Poll())
        frozen = {p: tuple(pairs) for p, pairs in reads.items()}
        return self.op(process, op_type, F.POLL, Poll(frozen, assignment, generation))

    def commit(
        self,
        process: str,
        offsets: dict[int, int],
        op_type: OpType = OK,
        reset: bool = False,
        group: str = "g",
    ) -> int:
        self.op(process, OpType.INVOKE, F.COMMIT, Commit(group, offsets, reset))
        return self.op(process, op_type, F.COMMIT, Commit(group, offsets, reset))

    def seek(self, process: str, positions: dict[int, int]) -> int:
        self.op(process, OpType.INVOKE, F.SEEK, Seek(positions))
        return self.op(process, OK, F.SEEK, Seek(positions))

    def txn(self, process: str, f: F, txn: int, op_type: OpType = OK) -> int:
        self.op(process, OpType.INVOKE, f, Txn(txn))
        return self.op(process, op_type, f, Txn(txn))

    def end_offsets(self, offsets: dict[int, int]) -> int:
        self.op("admin", OpType.INVOKE, F.END_OFFSETS, EndOffsets())
        return self.op("admin", OK, F.END_OFFSETS, EndOffsets(offsets))


def findings(verdict: Verdict, anomaly: Anomaly) -> tuple[Finding, ...]:
    return verdict.anomalies[anomaly].examples


def found(verdict: Verdict) -> set[Anomaly]:
    return set(verdict.found)


# -- lost-write and unseen ----------------------------------------------------------------


def test_lost_write_is_an_acknowledged_write_a_reader_went_past() -> None:
    h = H()
    h.send("producer-0", 0, 1, 0)
    lost = h.send("producer-0", 0, 2, 1)
    h.send("producer-0", 0, 3, 2)
    reader = h.poll("consumer-0", {0: [(0, 1), (2, 3)]})
    verdict = check(h.ops, STRICT)
    (example,) = findings(verdict, Anomaly.LOST_WRITE)
    assert (example.partition, example.offset, example.value) == (0, 1, 2)
    assert example.ops == (lost, reader)
    assert example.breaks is Guarantee.DURABLE_ACKS
    # the reader also jumped over an offset an ack shows holding a record
    assert found(verdict) == {Anomaly.LOST_WRITE, Anomaly.POLL_SKIP, Anomaly.UNSEEN}
    assert findings(verdict, Anomaly.POLL_SKIP)[0].breaks is Guarantee.DURABLE_ACKS
    assert not verdict.valid and verdict.violated == (Anomaly.LOST_WRITE, Anomaly.POLL_SKIP)


def test_writes_read_in_full_are_not_lost() -> None:
    h = H()
    for value in range(3):
        h.send("producer-0", 0, value, value)
    h.poll("consumer-0", {0: [(0, 0), (1, 1), (2, 2)]})
    verdict = check(h.ops, STRICT)
    assert found(verdict) == set() and verdict.valid


def test_writes_past_the_drain_are_unseen_not_lost() -> None:
    h = H()
    for value in range(3):
        h.send("producer-0", 0, value, value)
    h.poll("consumer-0", {0: [(0, 0)]})
    verdict = check(h.ops, STRICT)
    assert found(verdict) == {Anomaly.UNSEEN} and verdict.valid
    assert verdict.anomalies[Anomaly.UNSEEN].allowed == "yes"
    assert verdict.summary.unseen == {0: 2}
    assert [f.value for f in findings(verdict, Anomaly.UNSEEN)] == [1, 2]
    note = "p0: 2 acknowledged writes never read and not shown lost (2 past the highest offset"
    assert note in verdict.notes[0]


def test_the_unseen_note_leaves_out_writes_shown_lost() -> None:
    h = H()
    for value in range(3):
        h.send("producer-0", 0, value, value)
    h.poll("consumer-0", {0: [(0, 0), (2, 2)]})  # value 1 is lost, not merely unseen
    verdict = check(h.ops, STRICT)
    assert verdict.anomalies[Anomaly.UNSEEN].count == 1
    assert verdict.anomalies[Anomaly.LOST_WRITE].count == 1
    assert not any("never read" in note for note in verdict.notes)


def test_a_write_past_the_end_offset_after_healing_is_lost() -> None:
    h = H()
    h.send("producer-0", 0, 0, 0)
    lost = h.send("producer-0", 0, 1, 1)
    h.poll("consumer-0", {0: [(0, 0)]})
    end = h.end_offsets({0: 1})
    (example,) = findings(check(h.ops, STRICT), Anomaly.LOST_WRITE)
    assert (example.value, example.ops) == (1, (lost, end))
    assert "ends at offset 1" in example.detail


def test_an_end_offset_beyond_the_write_or_taken_before_it_shows_no_loss() -> None:
    h = H()
    h.end_offsets({0: 0})  # before the send: says nothing about it
    h.send("producer-0", 0, 0, 0)
    h.end_offsets({0: 1})
    assert found(check(h.ops, STRICT)) == {Anomaly.UNSEEN}


def test_an_acks_1_write_truncated_under_a_leader_kill_is_reported_and_allowed() -> None:
    # producer-0's write at offset 1 was acknowledged by a leader that died before its followers
    # had it; the new leader gave offset 1 to producer-1's value.
    h = H()
    h.send("producer-0", 0, 10, 0)
    h.send("producer-0", 0, 11, 1)
    h.send("producer-1", 0, 20, 1)
    h.poll("consumer-0", {0: [(0, 10), (1, 20)]})
    acks_1 = Promises.from_settings(acks=1, min_insync_replicas=2)
    verdict = check(h.ops, acks_1)
    assert found(verdict) == {Anomaly.LOST_WRITE, Anomaly.INCONSISTENT_OFFSETS, Anomaly.UNSEEN}
    assert verdict.valid
    assert verdict.anomalies[Anomaly.LOST_WRITE].allowed == "yes"
    strict = check(h.ops, Promises.from_settings(acks="all", min_insync_replicas=2))
    assert not strict.valid
    assert strict.violated == (Anomaly.LOST_WRITE, Anomaly.INCONSISTENT_OFFSETS)


# -- duplicate ------------------------------------------------------------------------------


def test_a_value_at_two_offsets_is_a_duplicate_even_from_an_indeterminate_send() -> None:
    h = H()
    send = h.send("producer-0", 0, 7, op_type=INFO)
    first = h.poll("consumer-0", {0: [(0, 7)]})
    second = h.poll("consumer-0", {0: [(1, 7)]})
    verdict = check(h.ops, STRICT)
    (example,) = findings(verdict, Anomaly.DUPLICATE)
    assert example.value == 7 and example.ops == (first, second)
    assert f"p0@0 (op {first}), p0@1 (op {second})" in example.detail and send == 1
    assert found(verdict) == {Anomaly.DUPLICATE}
    assert not verdict.valid
    assert check(h.ops, LOOSE).valid  # no idempotence: retries may write twice


def test_an_indeterminate_send_read_once_or_never_is_no_anomaly() -> None:
    h = H()
    h.send("producer-0", 0, 7, op_type=INFO)
    h.send("producer-0", 0, 8, op_type=INFO)
    h.poll("consumer-0", {0: [(0, 7)]})
    verdict = check(h.ops, STRICT)
    assert found(verdict) == set() and verdict.summary.sends == {"ok": 0, "fail": 0, "info": 2}


# -- inconsistent-offsets --------------------------------------------------------------------


def test_two_reads_of_one_offset_disagreeing_are_inconsistent_under_any_settings() -> None:
    h = H()
    h.send("producer-0", 0, 1, 0)
    h.send("producer-1", 0, 2, op_type=INFO)
    h.poll("consumer-0", {0: [(0, 1)]})
    h.poll("consumer-1", {0: [(0, 2)]})
    verdict = check(h.ops, LOOSE)
    (example,) = findings(verdict, Anomaly.INCONSISTENT_OFFSETS)
    assert (example.partition, example.offset) == (0, 0)
    assert example.breaks is Guarantee.CLEAN_ELECTION
    assert "holds 2 values: 1 (read by op 1), 2 (read by op 7)" in example.detail
    assert found(verdict) == {Anomaly.INCONSISTENT_OFFSETS} and not verdict.valid


def test_reads_that_agree_with_acks_are_consistent() -> None:
    h = H()
    h.send("producer-0", 0, 1, 0)
    h.poll("consumer-0", {0: [(0, 1)]})
    h.poll("consumer-1", {0: [(0, 1)]})
    assert found(check(h.ops, STRICT)) == set()


# -- nonmonotonic-send ---------------------------------------------------------------------


def test_a_producers_later_send_at_a_lower_offset_is_nonmonotonic() -> None:
    h = H()
    first = h.send("producer-0", 0, 1, 5)
    h.send("producer-0", 0, 2, op_type=INFO)  # indeterminate sends are not compared
    second = h.send("producer-0", 0, 3, 3)
    h.poll("consumer-0", {0: [(3, 3), (5, 1)]})
    verdict = check(h.ops, STRICT)
    (example,) = findings(verdict, Anomaly.NONMONOTONIC_SEND)
    assert example.ops == (first, second) and example.offset == 3
    assert found(verdict) == {Anomaly.NONMONOTONIC_SEND}
    assert check(h.ops, LOOSE).valid  # acks=1: a truncation reuses offsets


def test_sends_to_different_partitions_or_by_different_producers_are_not_compared() -> None:
    h = H()
    h.send("producer-0", 0, 1, 5)
    h.send("producer-0", 1, 2, 3)
    h.send("producer-1", 0, 3, 4)
    h.poll("consumer-0", {0: [(4, 3), (5, 1)], 1: [(3, 2)]})
    assert found(check(h.ops, STRICT)) == set()


# -- nonmonotonic-poll ---------------------------------------------------------------------


def _three_records(h: H) -> None:
    for value in range(3):
        h.send("producer-0", 0, value, value)


def test_a_consumer_reading_backwards_without_a_rebalance_or_seek_is_nonmonotonic() -> None:
    h = H()
    _three_records(h)
    first = h.poll("consumer-0", {0: [(0, 0), (1, 1)]}, generation=1)
    again = h.poll("consumer-0", {0: [(1, 1), (2, 2)]}, generation=1)
    verdict = check(h.ops, STRICT)
    (example,) = findings(verdict, Anomaly.NONMONOTONIC_POLL)
    assert example.ops == (first, again) and example.offset == 1
    assert found(verdict) == {Anomaly.NONMONOTONIC_POLL} and not check(h.ops, LOOSE).valid


def test_reading_backwards_within_one_poll_is_nonmonotonic() -> None:
    h = H()
    _three_records(h)
    poll = h.poll("reader", {0: [(0, 0), (1, 1), (2, 2), (1, 1)]})
    (example,) = findings(check(h.ops, STRICT), Anomaly.NONMONOTONIC_POLL)
    assert example.ops == (poll,) and "in the same poll" in example.detail


@pytest.mark.parametrize("between", ["seek", "rebalance", "reassign", "info poll"])
def test_going_back_after_a_seek_rebalance_or_indeterminate_poll_is_allowed(between: str) -> None:
    h = H()
    _three_records(h)
    h.poll("consumer-0", {0: [(0, 0), (1, 1)]}, generation=1)
    generation, assignment = 1, ALL
    if between == "seek":
        h.seek("consumer-0", {0: 0})
    elif between == "rebalance":
        generation = 2
    elif between == "reassign":
        assignment = (0,)
    else:
        h.poll("consumer-0", {}, generation=1, op_type=INFO)
    h.poll("consumer-0", {0: [(0, 0), (1, 1), (2, 2)]}, assignment, generation)
    assert found(check(h.ops, STRICT)) == set()


def test_a_rebalance_during_a_poll_leaves_that_polls_order_unchecked() -> None:
    h = H()
    _three_records(h)
    h.poll("consumer-0", {0: [(0, 0)]}, generation=1)
    h.poll("consumer-0", {0: [(2, 2), (0, 0), (1, 1)]}, generation=2)
    assert found(check(h.ops, STRICT)) == set()


# -- poll-skip ------------------------------------------------------------------------------


def test_a_consumer_jumping_over_a_record_someone_read_skips() -> None:
    h = H()
    _three_records(h)
    h.poll("consumer-0", {0: [(0, 0), (1, 1), (2, 2)]})
    before = h.poll("consumer-1", {0: [(0, 0)]}, generation=4)
    after = h.poll("consumer-1", {0: [(2, 2)]}, generation=4)
    verdict = check(h.ops, LOOSE)
    (example,) = findings(verdict, Anomaly.POLL_SKIP)
    assert example.ops == (before, after) and example.offset == 2
    assert example.breaks is Guarantee.CLEAN_ELECTION
    assert "skipping 1 offset known to hold records (1)" in example.detail
    assert found(verdict) == {Anomaly.POLL_SKIP} and not verdict.valid


def test_gaps_no_op_shows_holding_a_record_are_not_skips() -> None:
    # offsets 1 and 3 hold transaction markers: no op shows a value there
    h = H()
    h.send("producer-0", 0, 0, 0)
    h.send("producer-0", 0, 2, 2)
    h.send("producer-0", 0, 4, 4)
    h.poll("consumer-0", {0: [(0, 0), (2, 2)]})
    h.poll("consumer-0", {0: [(4, 4)]})
    assert found(check(h.ops, STRICT)) == set()


def test_a_read_committed_consumer_skipping_an_aborted_record_does_not_skip() -> None:
    h = H()
    h.send("producer-0", 0, 0, 0)
    h.txn("txn-producer", F.TXN_BEGIN, 9)
    h.send("txn-producer", 0, 1, 1, txn=9)
    h.txn("txn-producer", F.TXN_ABORT, 9)  # its marker is offset 2
    h.send("producer-0", 0, 3, 3)
    h.poll("dirty-reader", {0: [(0, 0), (1, 1), (3, 3)]})
    h.poll("consumer-0", {0: [(0, 0), (3, 3)]})
    verdict = check(h.ops, STRICT)
    # the dirty reader's read is an aborted read; the read_committed consumer did right
    assert found(verdict) == {Anomaly.ABORTED_READ}


# -- aborted-read (G1a) --------------------------------------------------------------------


def test_reading_a_failed_send_is_an_aborted_read_under_any_settings() -> None:
    h = H()
    send = h.send("producer-0", 0, 5, op_type=FAIL)
    poll = h.poll("consumer-0", {0: [(0, 5)]})
    verdict = check(h.ops, LOOSE)
    (example,) = findings(verdict, Anomaly.ABORTED_READ)
    assert example.ops == (send, poll) and example.value == 5
    assert example.breaks is Guarantee.ALWAYS and not verdict.valid
    assert found(verdict) == {Anomaly.ABORTED_READ}


@pytest.mark.parametrize(
    ("ends", "aborted"),
    [
        ([(F.TXN_ABORT, OK)], True),
        ([(F.TXN_ABORT, INFO)], True),  # an invoked abort ends in an abort
        ([(F.TXN_COMMIT, FAIL), (F.TXN_ABORT, OK)], True),
        ([(F.TXN_COMMIT, FAIL)], True),  # every commit failed
        ([(F.TXN_COMMIT, FAIL), (F.TXN_COMMIT, OK)], False),  # a retried commit went through
        ([(F.TXN_COMMIT, INFO)], False),  # unknown: may be read
        ([(F.TXN_COMMIT, OK)], False),
        ([], False),  # never ended in the history: unknown
    ],
)
def test_reading_a_value_of_an_aborted_transaction_is_an_aborted_read(
    ends: list[tuple[F, OpType]], aborted: bool
) -> None:
    h = H()
    h.txn("txn-producer", F.TXN_BEGIN, 1)
    send = h.send("txn-producer", 0, 5, 0, txn=1)
    for f, op_type in ends:
        h.txn("txn-producer", f, 1, op_type)
    poll = h.poll("consumer-0", {0: [(0, 5)]})
    read_committed = check(h.ops, STRICT)
    read_uncommitted = check(h.ops, Promises(durable_acks=True, idempotence=True))
    if not aborted:
        assert found(read_committed) == set()
        return
    (example,) = findings(read_committed, Anomaly.ABORTED_READ)
    assert example.ops == (send, poll) and example.breaks is Guarantee.READ_COMMITTED
    assert "in transaction 1, which aborted" in example.detail
    assert found(read_committed) == {Anomaly.ABORTED_READ} and not read_committed.valid
    assert read_uncommitted.valid  # read_uncommitted consumers read aborted records


# -- commit-regression -------------------------------------------------------------------------


def test_a_groups_committed_offset_moving_back_is_a_regression() -> None:
    h = H()
    first = h.commit("consumer-0", {0: 5, 1: 2})
    second = h.commit("consumer-1", {0: 3, 1: 2})
    verdict = check(h.ops, LOOSE)
    (example,) = findings(verdict, Anomaly.COMMIT_REGRESSION)
    assert example.ops == (first, second) and (example.partition, example.offset) == (0, 3)
    assert found(verdict) == {Anomaly.COMMIT_REGRESSION} and not verdict.valid


def test_a_regression_after_a_completed_reset_is_still_caught() -> None:
    h = H()
    h.commit("consumer-0", {0: 5})
    h.commit("operator", {0: 0}, reset=True)
    h.commit("consumer-0", {0: 3})
    h.commit("consumer-0", {0: 4})
    last = h.commit("consumer-1", {0: 1})
    (example,) = findings(check(h.ops, STRICT), Anomaly.COMMIT_REGRESSION)
    assert example.ops == (last - 2, last)


def test_concurrent_commits_in_any_order_are_no_regression() -> None:
    h = H()
    h.op("consumer-0", OpType.INVOKE, F.COMMIT, Commit("g", {0: 5}))
    h.op("consumer-1", OpType.INVOKE, F.COMMIT, Commit("g", {0: 3}))
    h.op("consumer-0", OK, F.COMMIT, Commit("g", {0: 5}))
    h.op("consumer-1", OK, F.COMMIT, Commit("g", {0: 3}))
    assert found(check(h.ops, STRICT)) == set()


@pytest.mark.parametrize("case", ["reset", "info reset", "failed", "info", "other group"])
def test_going_back_across_a_reset_or_without_a_known_commit_is_no_regression(case: str) -> None:
    h = H()
    if case == "info reset":  # it may take effect at any time after its invoke
        h.commit("operator", {0: 0}, reset=True, op_type=INFO)
    h.commit("consumer-0", {0: 5})
    if case == "reset":
        h.commit("operator", {0: 0}, reset=True)
    op_type = {"failed": FAIL, "info": INFO}.get(case, OK)
    h.commit("consumer-1", {0: 3}, op_type, group="h" if case == "other group" else "g")
    assert found(check(h.ops, STRICT)) == set()


# -- unwritten-read -------------------------------------------------------------------------


def test_reading_a_value_nobody_sent_is_an_unwritten_read() -> None:
    h = H()
    poll = h.poll("consumer-0", {0: [(0, 999)]})
    verdict = check(h.ops, LOOSE)
    (example,) = findings(verdict, Anomaly.UNWRITTEN_READ)
    assert example.ops == (poll,) and example.value == 999 and not verdict.valid
    assert found(verdict) == {Anomaly.UNWRITTEN_READ}


# -- promises, table, well-formedness ---------------------------------------------------------


@pytest.mark.parametrize(
    ("settings_", "held"),
    [
        ({"acks": "all", "min_insync_replicas": 2}, {Guarantee.DURABLE_ACKS}),
        ({"acks": -1, "min_insync_replicas": 1}, set()),
        ({"acks": 1, "min_insync_replicas": 3}, set()),
        ({"acks": "all", "min_insync_replicas": 2, "idempotence": True}, {"d", "i"}),
        (
            {
                "acks": "all",
                "min_insync_replicas": 2,
                "transactional": True,
                "isolation": "read_committed",
            },
            {"d", "i", "r"},
        ),
        (
            {"acks": "all", "min_insync_replicas": 2, "unclean_leader_election": True},
            {"unclean"},
        ),
    ],
)
def test_promises_from_settings(settings_: dict[str, object], held: set[object]) -> None:
    names = {"d": Guarantee.DURABLE_ACKS, "i": Guarantee.IDEMPOTENCE, "r": Guarantee.READ_COMMITTED}
    expected = {names.get(g, g) for g in held if g != "unclean"}  # type: ignore[call-overload]
    promises = Promises.from_settings(**settings_)  # type: ignore[arg-type]
    assert promises.holds(Guarantee.ALWAYS)
    assert promises.holds(Guarantee.CLEAN_ELECTION) is ("unclean" not in held)
    others = {Guarantee.DURABLE_ACKS, Guarantee.IDEMPOTENCE, Guarantee.READ_COMMITTED}
    assert {g for g in others if promises.holds(g)} == expected


def test_promises_refuse_unknown_settings() -> None:
    with pytest.raises(ValueError, match="acks"):
        Promises.from_settings(acks="some", min_insync_replicas=2)
    with pytest.raises(ValueError, match="isolation"):
        Promises.from_settings(acks=1, min_insync_replicas=2, isolation="dirty")


def test_the_table_names_each_anomaly_its_count_whether_allowed_and_an_example() -> None:
    h = H()
    h.send("producer-0", 0, 1, 0)
    h.send("producer-0", 0, 2, 1)
    h.send("producer-1", 0, 3, 1)
    h.poll("consumer-0", {0: [(0, 1), (1, 3)]})
    h.send("producer-0", 0, 4, op_type=FAIL)
    h.poll("consumer-1", {0: [(2, 4)]})
    table = render_table(check(h.ops, LOOSE))
    lines = table.splitlines()
    assert lines[0].split() == ["ANOMALY", "COUNT", "ALLOWED?", "EXAMPLE"]
    rows = {line.split()[0]: line.split()[1:3] for line in lines[1:11]}
    assert list(rows) == [str(a) for a in Anomaly]
    assert rows["lost-write"] == ["1", "yes"]
    assert rows["aborted-read"] == ["1", "no"]
    assert rows["duplicate"] == ["0", "-"]
    assert "p0@1 value 2: acknowledged by op 3, never read" in lines[1]
    assert "promised: clean elections" in table
    assert "sends: 3 ok, 1 fail, 0 info" in table
    assert lines[-1] == "INVALID: aborted-read break what the settings promise"


def test_mixed_findings_count_only_the_forbidden_ones_as_violations() -> None:
    # one inconsistency between two reads (always forbidden), one between an ack and a read
    h = H()
    h.send("producer-0", 0, 1, 0)
    h.send("producer-1", 0, 2, op_type=INFO)
    h.send("producer-0", 1, 3, 0)
    h.send("producer-1", 1, 4, 0)
    h.poll("consumer-0", {0: [(0, 1)], 1: [(0, 4)]})
    h.poll("consumer-1", {0: [(0, 2)]})
    verdict = check(h.ops, LOOSE)
    rep = verdict.anomalies[Anomaly.INCONSISTENT_OFFSETS]
    assert (rep.count, rep.violations, rep.allowed) == (2, 1, "no (1 of 2)")
    assert rep.examples[0].partition == 0  # violations come first


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda h: (h.send("p", 0, 1, 0), h.send("q", 0, 1, 1)), "already sent"),
        (
            lambda h: (
                h.op("p", OpType.INVOKE, F.SEND, Send(0, 1)),
                h.op("p", OpType.INVOKE, F.SEND, Send(0, 2)),
            ),
            "invokes again",
        ),
        (lambda h: h.op("p", OK, F.SEND, Send(0, 1, 0)), "no invoke"),
        (
            lambda h: (
                h.op("p", OpType.INVOKE, F.SEND, Send(0, 1)),
                h.op("p", OK, F.POLL, Poll()),
            ),
            "completes a poll",
        ),
        (lambda h: h.send("p", 0, 1, 0, op_type=INFO), "only an ok send has an offset"),
        (lambda h: h.poll("c", {0: [(0, 1)]}, op_type=INFO), "only an ok poll has reads"),
        (
            lambda h: (h.txn("p", F.TXN_COMMIT, 1), h.txn("p", F.TXN_ABORT, 1)),
            "both committed and aborted",
        ),
        (lambda h: (h.txn("p", F.TXN_BEGIN, 1), h.txn("q", F.TXN_COMMIT, 1)), "belongs to p"),
    ],
)
def test_histories_that_cannot_be_judged_are_refused(build: object, message: str) -> None:
    h = H()
    build(h)  # type: ignore[operator]
    with pytest.raises(HistoryError, match=message):
        check(h.ops, STRICT)


def test_indices_must_increase() -> None:
    h = H()
    h.send("p", 0, 1, 0)
    ops = [h.ops[0], replace(h.ops[1], index=0)]
    with pytest.raises(HistoryError, match="indices must increase"):
        check(ops, STRICT)


def test_an_invoke_left_in_flight_is_indeterminate() -> None:
    h = H()
    h.op("p", OpType.INVOKE, F.SEND, Send(0, 1))
    h.poll("c", {0: [(0, 1)]})
    verdict = check(h.ops, STRICT)
    assert found(verdict) == set() and verdict.summary.sends["info"] == 1


# -- JSON lines --------------------------------------------------------------------------------


def _every_kind_of_op() -> list[Op]:
    h = H()
    h.send("producer-0", 0, 1, 0)
    h.send("producer-0", 1, 2, op_type=INFO)
    h.ops[-1] = replace(h.ops[-1], error="timed out")
    h.txn("txn-producer", F.TXN_BEGIN, 3)
    h.send("txn-producer", 2, 3, 0, txn=3)
    h.txn("txn-producer", F.TXN_COMMIT, 3, FAIL)
    h.txn("txn-producer", F.TXN_ABORT, 3)
    h.poll("consumer-0", {0: [(0, 1)], 2: []}, (0, 2), 4)
    h.poll("reader", {}, (), None)
    h.commit("consumer-0", {0: 1, 2: 1})
    h.commit("operator", {0: 0}, reset=True)
    h.seek("reader", {1: 0})
    h.end_offsets({0: 1, 1: 0, 2: 2})
    return h.ops


def test_json_lines_round_trip(tmp_path: Path) -> None:
    ops = _every_kind_of_op()
    path = tmp_path / "history.jsonl"
    write_jsonl(path, ops)
    assert read_jsonl(path) == ops
    lines = path.read_text().splitlines()
    assert len(lines) == len(ops)
    assert lines[1] == (
        '{"index":1,"time_ns":1000,"process":"producer-0","type":"ok","f":"send",'
        '"value":{"partition":0,"value":1,"offset":0}}'
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "history.jsonl:2"),
        ('{"index":true,"time_ns":0,"process":"p","type":"invoke","f":"poll","value":{}}', "index"),
        ('{"index":1,"time_ns":0,"process":"p","type":"done","f":"poll","value":{}}', "done"),
        ('{"index":1,"time_ns":0,"process":"p","type":"ok","f":"send","value":{}}', "partition"),
        (
            '{"index":1,"time_ns":0,"process":"p","type":"ok","f":"poll",'
            '"value":{"reads":{"x":[]}}}',
            "partition keys",
        ),
        (
            '{"index":1,"time_ns":0,"process":"p","type":"ok","f":"poll",'
            '"value":{"reads":{"0":[[1]]}}}',
            "offset, value",
        ),
    ],
)
def test_a_bad_line_is_refused_by_its_number(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "history.jsonl"
    good = '{"index":0,"time_ns":0,"process":"p","type":"invoke","f":"poll","value":{}}'
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(HistoryError, match=message) as error:
        read_jsonl(path)
    assert "history.jsonl:2" in str(error.value)


def test_an_op_value_must_fit_its_f() -> None:
    with pytest.raises(HistoryError, match="a send op carries a Send"):
        Op(0, 0, "p", OK, F.SEND, Poll())


# -- a model of a correct log --------------------------------------------------------------------

PRODUCERS = ("producer-0", "producer-1")
TXN_PRODUCERS = ("txn-producer-0", "txn-producer-1")
MEMBERS = ("consumer-0", "consumer-1")
DRAINS = (("drain-0", 3), ("drain-1", 2))  # two drains, so each value is read at least twice
GROUP = "g"


@dataclass
class Record:
    value: int | None  # None: a transaction marker
    txn: int | None = None


@dataclass
class Model:
    """A correct single-topic log and its clients, recording a history as they act."""

    partitions: int
    read_committed: bool
    h: H = field(default_factory=H)
    logs: list[list[Record]] = field(default_factory=list)
    txn_state: dict[int, str] = field(default_factory=dict)  # open / committed / aborted
    open_txn: dict[str, int] = field(default_factory=dict)  # producer -> its open transaction
    txn_partitions: dict[int, set[int]] = field(default_factory=dict)
    next_value: int = 0
    next_txn: int = 0
    generation: int = 0
    assignment: dict[str, tuple[int, ...]] = field(default_factory=dict)
    positions: dict[str, dict[int, int]] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)
    # values the history shows acknowledged and committed: (partition, offset)
    written: dict[int, tuple[int, int]] = field(default_factory=dict)
    aborted: dict[int, tuple[int, int]] = field(default_factory=dict)  # acked, txn aborted

    def __post_init__(self) -> None:
        self.logs = [[] for _ in range(self.partitions)]
        self.positions["reader"] = dict.fromkeys(range(self.partitions), 0)
        self.rebalance(0)

    def value(self) -> int:
        self.next_value += 1
        return self.next_value

    def lso(self, p: int) -> int:
        open_offsets = [
            o
            for o, record in enumerate(self.logs[p])
            if record.txn is not None and self.txn_state[record.txn] == "open"
        ]
        return min(open_offsets, default=len(self.logs[p]))

    def send(self, arg: int) -> None:
        producer, p = PRODUCERS[arg % 2], (arg // 2) % self.partitions
        outcome, value = (arg // (2 * self.partitions)) % 8, self.value()
        if outcome <= 5:  # ok, or indeterminate yet written
            self.logs[p].append(Record(value))
        if outcome <= 4:
            offset = len(self.logs[p]) - 1
            self.h.send(producer, p, value, offset)
            self.written[value] = (p, offset)
        else:
            self.h.send(producer, p, value, op_type=FAIL if outcome == 7 else INFO)

    def txn_send(self, arg: int) -> None:
        producer, p = TXN_PRODUCERS[arg % 2], (arg // 2) % self.partitions
        txn = self.open_txn.get(producer)
        if txn is None:
            txn = self.next_txn = self.next_txn + 1
            self.open_txn[producer] = txn
            self.txn_state[txn] = "open"
            self.txn_partitions[txn] = set()
            self.h.txn(producer, F.TXN_BEGIN, txn)
        value = self.value()
        self.logs[p].append(Record(value, txn))
        self.txn_partitions[txn].add(p)
        if (arg // (2 * self.partitions)) % 5 == 4:
            self.h.send(producer, p, value, op_type=INFO, txn=txn)
        else:
            self.h.send(producer, p, value, len(self.logs[p]) - 1, txn=txn)

    def txn_end(self, arg: int) -> None:
        producer = TXN_PRODUCERS[arg % 2]
        txn = self.open_txn.pop(producer, None)
        if txn is None:
            return
        choice = (arg // 2) % 5
        if choice <= 1:
            self.h.txn(producer, F.TXN_COMMIT, txn)
            commit = True
        elif choice == 2:
            self.h.txn(producer, F.TXN_ABORT, txn)
            commit = False
        elif choice == 3:  # indeterminate: the model decides
            self.h.txn(producer, F.TXN_COMMIT, txn, INFO)
            commit = (arg // 10) % 2 == 0
        else:
            self.h.txn(producer, F.TXN_COMMIT, txn, FAIL)
            self.h.txn(producer, F.TXN_ABORT, txn)
            commit = False
        self.txn_state[txn] = "committed" if commit else "aborted"
        for p in sorted(self.txn_partitions[txn]):
            self.logs[p].append(Record(None, txn))  # the marker takes an offset
        acked = [op for op in self.h.ops if isinstance(op.value, Send) and op.value.txn == txn]
        for op in acked:
            assert isinstance(op.value, Send)
            if op.type is OK and op.value.offset is not None:
                where = (op.value.partition, op.value.offset)
                if choice <= 1:
                    self.written[op.value.value] = where
                elif choice in (2, 4):  # the history shows the abort (not an info commit)
                    self.aborted[op.value.value] = where

    def read(self, consumer: str, partitions: tuple[int, ...], n: int) -> dict[int, list]:
        reads: dict[int, list[tuple[int, int]]] = {}
        for p in partitions:
            limit = self.lso(p) if self.read_committed else len(self.logs[p])
            position = self.positions[consumer].get(p, 0)
            while position < limit and len(reads.get(p, [])) < n:
                record = self.logs[p][position]
                position += 1
                hidden = record.txn is not None and self.txn_state[record.txn] == "aborted"
                if record.value is not None and not (self.read_committed and hidden):
                    reads.setdefault(p, []).append((position - 1, record.value))
            self.positions[consumer][p] = position
        return reads

    def group_poll(self, arg: int, op_type: OpType = OK) -> None:
        member, n = MEMBERS[arg % 2], 1 + (arg // 2) % 4
        reads = self.read(member, self.assignment[member], n)
        if op_type is INFO:  # it consumed what it read, but nobody saw it
            self.h.poll(member, {}, self.assignment[member], self.generation, INFO)
        else:
            self.h.poll(member, reads, self.assignment[member], self.generation)

    def group_commit(self, arg: int) -> None:
        member = MEMBERS[arg % 2]
        offsets = {p: self.positions[member][p] for p in self.assignment[member]}
        if offsets:
            self.h.commit(member, offsets, group=GROUP)
            self.committed.update(offsets)

    def rebalance(self, arg: int) -> None:
        self.generation += 1
        owners = [MEMBERS[(arg >> p) % 2] for p in range(self.partitions)]
        for member in MEMBERS:
            mine = tuple(p for p in range(self.partitions) if owners[p] == member)
            self.assignment[member] = mine
            self.positions[member] = {p: self.committed.get(p, 0) for p in mine}

    def reader_poll(self, arg: int) -> None:
        reads = self.read("reader", tuple(range(self.partitions)), 1 + arg % 4)
        self.h.poll("reader", reads, tuple(range(self.partitions)))

    def reader_seek(self, arg: int) -> None:
        p = arg % self.partitions
        offset = (arg // self.partitions) % (len(self.logs[p]) + 1)
        self.h.seek("reader", {p: offset})
        self.positions["reader"][p] = offset

    def act(self, action: int) -> None:
        kind, arg = action % 9, action // 9
        [
            self.send,
            self.txn_send,
            self.txn_end,
            self.group_poll,
            self.group_commit,
            self.rebalance,
            self.reader_poll,
            self.reader_seek,
            lambda a: self.group_poll(a, INFO),
        ][kind](arg)

    def finish(self) -> list[Op]:
        """End every transaction, make sure each mutation finds its material (an aborted
        transaction, three plain records a partition, commits), then drain twice."""
        for i, producer in enumerate(TXN_PRODUCERS):
            if producer in self.open_txn:
                self.txn_end(i)  # choice 0: commit
        for p in range(self.partitions):
            self.txn_send(2 * p)
        self.txn_end(2 * 2)  # txn-producer-0, choice 2: abort
        for p in range(self.partitions):
            for _ in range(3):
                self.send(2 * p)  # producer-0, ok
        self.rebalance(0b101)
        for i in range(len(MEMBERS)):
            self.group_poll(i + 2)  # two records
            self.group_commit(i)
        self.h.end_offsets({p: len(log) for p, log in enumerate(self.logs)})
        everything = tuple(range(self.partitions))
        for drain, chunk in DRAINS:
            self.positions[drain] = {}
            self.h.seek(drain, dict.fromkeys(everything, 0))
            while any(self.positions[drain].get(p, 0) < len(self.logs[p]) for p in everything):
                self.h.poll(drain, self.read(drain, everything, chunk), everything)
        return self.h.ops


@st.composite
def runs(draw: st.DrawFn, read_committed: bool | None = None) -> Model:
    rc = draw(st.booleans()) if read_committed is None else read_committed
    model = Model(draw(st.integers(1, 3)), rc)
    for action in draw(st.lists(st.integers(0, 2**12), max_size=60)):
        model.act(action)
    model.finish()
    return model


def promises_of(model: Model) -> Promises:
    return Promises(durable_acks=True, idempotence=True, read_committed=model.read_committed)


@settings(max_examples=80, deadline=None)
@given(runs())
def test_a_correct_log_gives_a_valid_verdict_with_no_anomalies(model: Model) -> None:
    verdict = check(model.h.ops, promises_of(model))
    assert verdict.valid, render_table(verdict)
    if model.read_committed:
        assert found(verdict) == set(), render_table(verdict)
    else:  # read_uncommitted consumers read aborted records: reported, and allowed
        assert found(verdict) <= {Anomaly.ABORTED_READ}
        aborted = findings(verdict, Anomaly.ABORTED_READ)
        assert all(f.breaks is Guarantee.READ_COMMITTED for f in aborted)
    assert verdict.summary.unseen == {}


@settings(max_examples=30, deadline=None)
@given(runs())
def test_model_histories_round_trip_through_json_lines(model: Model) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "history.jsonl"
        write_jsonl(path, model.h.ops)
        assert read_jsonl(path) == model.h.ops


# -- mutations: each flagged by exactly the detectors it breaks -------------------------------


def reindexed(ops: list[Op]) -> list[Op]:
    return [replace(op, index=i, time_ns=i * 1000) for i, op in enumerate(ops)]


def with_reads(op: Op, partition: int, reads: list[tuple[int, int]]) -> Op:
    assert isinstance(op.value, Poll)
    new = dict(op.value.reads)
    new[partition] = tuple(reads)
    return replace(op, value=replace(op.value, reads=new))


def polls_of(ops: list[Op], process: str, partition: int) -> list[int]:
    """Places in `ops` of `process`'s ok polls that read `partition`."""
    return [
        i
        for i, op in enumerate(ops)
        if op.process == process
        and op.type is OK
        and isinstance(op.value, Poll)
        and op.value.reads.get(partition)
    ]


def reads_at(op: Op, partition: int) -> list[tuple[int, int]]:
    assert isinstance(op.value, Poll)
    return list(op.value.reads.get(partition, ()))


def highest_offset(ops: list[Op], partition: int) -> int:
    """The highest offset any op shows in `partition`."""
    offsets = [-1]
    for op in ops:
        if isinstance(op.value, Send) and op.value.partition == partition and op.value.offset:
            offsets.append(op.value.offset)
        if isinstance(op.value, Poll):
            offsets += [o for o, _ in op.value.reads.get(partition, ())]
    return max(offsets)


def fresh_send(op_type: OpType, partition: int, value: int) -> list[Op]:
    h = H()
    h.send("producer-x", partition, value, op_type=op_type)
    return h.ops


FRESH = 10**9


def flagged(ops: list[Op], model: Model) -> Verdict:
    return check(reindexed(ops), promises_of(model))


def new_anomalies(verdict: Verdict) -> set[Anomaly]:
    """What a mutation added: every anomaly found but the aborted-reads a correct log shows to
    read_uncommitted consumers (reported, allowed)."""
    allowed_by_design = Anomaly.ABORTED_READ
    rest = found(verdict) - {allowed_by_design}
    examples = findings(verdict, allowed_by_design)
    broken = verdict.anomalies[allowed_by_design].violations
    if broken or any(f.breaks is not Guarantee.READ_COMMITTED for f in examples):
        rest.add(allowed_by_design)
    return rest


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 2))
def test_dropping_one_read_value_is_a_poll_skip(model: Model, p: int) -> None:
    assume(p < model.partitions)
    ops = list(model.h.ops)
    place = next(i for i in polls_of(ops, "drain-0", p) if len(reads_at(ops[i], p)) >= 3)
    reads = reads_at(ops[place], p)
    ops[place] = with_reads(ops[place], p, [reads[0], *reads[2:]])
    verdict = flagged(ops, model)
    assert new_anomalies(verdict) == {Anomaly.POLL_SKIP}, render_table(verdict)
    (example,) = findings(verdict, Anomaly.POLL_SKIP)
    assert example.offset == reads[2][0] and example.breaks is Guarantee.CLEAN_ELECTION


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 2))
def test_losing_an_acknowledged_write_is_a_lost_write(model: Model, p: int) -> None:
    assume(p < model.partitions)
    ops = list(model.h.ops)
    offsets = sorted(o for q, o in model.written.values() if q == p)
    # one with a written record before it and one after, so a drain reads across it
    lost_offset = offsets[1]
    (lost,) = [v for v, where in model.written.items() if where == (p, lost_offset)]
    for i, op in enumerate(ops):
        if isinstance(op.value, Poll) and op.type is OK:
            ops[i] = with_reads(op, p, [(o, v) for o, v in reads_at(op, p) if v != lost])
    verdict = flagged(ops, model)
    assert new_anomalies(verdict) == {Anomaly.LOST_WRITE, Anomaly.POLL_SKIP, Anomaly.UNSEEN}
    (example,) = findings(verdict, Anomaly.LOST_WRITE)
    assert (example.partition, example.offset, example.value) == (p, lost_offset, lost)
    assert not verdict.valid


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 2))
def test_swapping_two_reads_goes_back_and_skips(model: Model, p: int) -> None:
    assume(p < model.partitions)
    ops = list(model.h.ops)
    place = polls_of(ops, "drain-0", p)[0]
    reads = reads_at(ops[place], p)
    assume(len(reads) >= 2)
    ops[place] = with_reads(ops[place], p, [reads[1], reads[0], *reads[2:]])
    verdict = flagged(ops, model)
    # the consumer jumped over the first record, then went back for it
    assert new_anomalies(verdict) == {Anomaly.NONMONOTONIC_POLL, Anomaly.POLL_SKIP}
    (backward,) = findings(verdict, Anomaly.NONMONOTONIC_POLL)
    assert backward.offset == reads[0][0]


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 2))
def test_reading_a_record_again_is_a_nonmonotonic_poll(model: Model, p: int) -> None:
    assume(p < model.partitions)
    ops = list(model.h.ops)
    places = polls_of(ops, "drain-0", p)
    first = reads_at(ops[places[0]], p)[0]
    ops[places[-1]] = with_reads(ops[places[-1]], p, [*reads_at(ops[places[-1]], p), first])
    verdict = flagged(ops, model)
    assert new_anomalies(verdict) == {Anomaly.NONMONOTONIC_POLL}
    (example,) = findings(verdict, Anomaly.NONMONOTONIC_POLL)
    assert (example.offset, example.value) == first


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 2))
def test_a_value_at_a_second_offset_is_a_duplicate(model: Model, p: int) -> None:
    assume(p < model.partitions)
    ops = list(model.h.ops)
    places = polls_of(ops, "drain-0", p)
    offset, value = reads_at(ops[places[0]], p)[0]
    again = (highest_offset(ops, p) + 1, value)
    ops[places[-1]] = with_reads(ops[places[-1]], p, [*reads_at(ops[places[-1]], p), again])
    verdict = flagged(ops, model)
    assert new_anomalies(verdict) == {Anomaly.DUPLICATE}, render_table(verdict)
    (example,) = findings(verdict, Anomaly.DUPLICATE)
    assert (example.value, example.offset) == (value, offset)


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 2))
def test_reading_a_failed_send_is_an_aborted_read(model: Model, p: int) -> None:
    assume(p < model.partitions)
    ops = list(model.h.ops)
    places = polls_of(ops, "drain-0", p)
    read = (highest_offset(ops, p) + 1, FRESH)
    ops[places[-1]] = with_reads(ops[places[-1]], p, [*reads_at(ops[places[-1]], p), read])
    verdict = flagged(fresh_send(FAIL, p, FRESH) + ops, model)
    assert new_anomalies(verdict) == {Anomaly.ABORTED_READ}
    (example,) = [f for f in findings(verdict, Anomaly.ABORTED_READ) if f.value == FRESH]
    assert example.breaks is Guarantee.ALWAYS and not verdict.valid


@settings(max_examples=40, deadline=None)
@given(runs(read_committed=True))
def test_reading_an_aborted_transactions_value_is_an_aborted_read(model: Model) -> None:
    ops = list(model.h.ops)
    value, (p, offset) = min(model.aborted.items())
    places = polls_of(ops, "drain-0", p)
    for place in places:  # insert it where it belongs in the drain's reads
        reads = reads_at(ops[place], p)
        if place == places[-1] or reads[-1][0] > offset:
            at = next((i for i, (o, _) in enumerate(reads) if o > offset), len(reads))
            ops[place] = with_reads(ops[place], p, [*reads[:at], (offset, value), *reads[at:]])
            break
    verdict = flagged(ops, model)
    assert new_anomalies(verdict) == {Anomaly.ABORTED_READ}, render_table(verdict)
    (example,) = findings(verdict, Anomaly.ABORTED_READ)
    assert (example.value, example.breaks) == (value, Guarantee.READ_COMMITTED)
    assert not verdict.valid


@settings(max_examples=40, deadline=None)
@given(runs(), st.integers(0, 2))
def test_a_read_disagreeing_with_others_is_an_inconsistent_offset(model: Model, p: int) -> None:
    assume(p < model.partitions)
    ops = list(model.h.ops)
    place = polls_of(ops, "drain-0", p)[0]
    (offset, _), *rest = reads_at(ops[place], p)
    ops[place] = with_reads(ops[place], p, [(offset, FRESH), *rest])
    verdict = flagged(fresh_send(INFO, p, FRESH) + ops, model)
    assert new_anomalies(verdict) == {Anomaly.INCONSISTENT_OFFSETS}, render_table(verdict)
    (example,) = findings(verdict, Anomaly.INCONSISTENT_OFFSETS)
    assert (example.partition, example.offset) == (p, offset)
    assert example.breaks is Guarantee.CLEAN_ELECTION


@settings(max_examples=40, deadline=None)
@given(runs())
def test_committing_backwards_is_a_commit_regression(model: Model) -> None:
    ops = list(model.h.ops)
    p, offset = next((p, o) for p, o in sorted(model.committed.items()) if o >= 1)
    h = H()
    h.commit("consumer-x", {p: offset - 1}, group=GROUP)
    verdict = flagged(ops + h.ops, model)
    assert new_anomalies(verdict) == {Anomaly.COMMIT_REGRESSION}
    (example,) = findings(verdict, Anomaly.COMMIT_REGRESSION)
    assert (example.partition, example.offset) == (p, offset - 1)
    assert example.ops[-1] == len(ops) + 1
