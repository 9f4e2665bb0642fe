"""The transaction coordinator's rules, driven without a broker: requests in, answers, writes,
producer-id allocations and markers out."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.groups import Caller
from rlog.core.groups.partitioner import group_partition
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.protocol.schema import load_message
from rlog.core.transactions import (
    AllocateProducerId,
    Append,
    Respond,
    TxnConfig,
    TxnCoordinator,
    TxnEvent,
    TxnLogValue,
    TxnState,
    WriteMarkers,
    transaction_partition,
)
from rlog.core.transactions.records import parse_txn_key, parse_txn_value, txn_key, txn_value

Body = dict[str, Any]
Record = tuple[bytes, bytes | None]
TXN = "orders-txn"
TIMEOUT_MS = 60_000
COORDINATOR_EPOCH = 7


class Driver:
    """Runs a coordinator the way a broker does: a log per partition, a controller handing out
    producer ids, marker writes, a clock. Each kind of effect completes at once unless told to
    wait; waiting ones are kept in order and completed by hand."""

    def __init__(self, config: TxnConfig | None = None) -> None:
        # Kafka's timing by default: EndTxn answered once the decision is stored.
        self.config = config or TxnConfig(
            state_partitions=4, offsets_partitions=5, end_txn_hold_ms=0
        )
        self.coordinator = TxnCoordinator(self.config)
        self.now = 1_000
        for partition in range(self.config.state_partitions):
            self.coordinator.start_loading(partition)
            self.coordinator.finish_loading(partition, COORDINATOR_EPOCH, [], self.now)
        self.tokens = itertools.count(1)
        self.producer_ids = itertools.count(1000)
        self.answers: dict[int, Body] = {}
        self.logs: dict[int, list[Record]] = {}
        self.events: list[TxnEvent] = []
        self.appends: list[Append] = []
        self.allocations: list[AllocateProducerId] = []
        self.markers: list[WriteMarkers] = []
        self.sent_markers: list[WriteMarkers] = []  # every WriteMarkers ever emitted
        self.hold_appends = False
        self.hold_allocations = False
        self.hold_markers = False

    # ---- the broker's side ----

    def run(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                assert effect.token not in self.answers, "answered twice"
                self.answers[effect.token] = effect.body
            elif isinstance(effect, TxnEvent):
                self.events.append(effect)
            elif isinstance(effect, Append):
                self.appends.append(effect)
                if not self.hold_appends:
                    self.ack(effect)
            elif isinstance(effect, AllocateProducerId):
                self.allocations.append(effect)
                if not self.hold_allocations:
                    self.allocate(effect)
            elif isinstance(effect, WriteMarkers):
                self.markers.append(effect)
                self.sent_markers.append(effect)
                if not self.hold_markers:
                    self.finish_markers(effect)
            else:
                raise AssertionError(f"unknown effect {effect}")

    def ack(self, append: Append, error: ErrorCode = ErrorCode.NONE) -> None:
        self.appends.remove(append)
        if error == ErrorCode.NONE:
            self.logs.setdefault(append.partition, []).extend(append.records)
        self.run(self.coordinator.append_done(append.append_id, error, self.now))

    def allocate(self, request: AllocateProducerId, producer_id: int | None = -1) -> None:
        self.allocations.remove(request)
        if producer_id == -1:
            producer_id = next(self.producer_ids)
        self.run(self.coordinator.producer_id_allocated(request.request_id, producer_id, self.now))

    def finish_markers(self, markers: WriteMarkers) -> None:
        self.markers.remove(markers)
        self.run(self.coordinator.markers_done(markers.marker_id, self.now))

    def tick(self, ms: int) -> None:
        self.now += ms
        self.run(self.coordinator.tick(self.now))

    # ---- the clients' side ----

    def send(self, method: str, body: Body, version: int) -> int:
        token = next(self.tokens)
        handle = getattr(self.coordinator, method)
        caller = Caller(token, version, "client", "/127.0.0.1")
        if method == "describe_transactions":
            self.run(handle(caller, body))
        else:
            self.run(handle(caller, body, self.now))
        return token

    def answer(self, token: int) -> Body:
        assert token in self.answers, f"request {token} is still waiting"
        return self.answers[token]

    def error(self, token: int) -> ErrorCode:
        return ErrorCode(self.answer(token)["error_code"])

    def init(
        self,
        transactional_id: str = TXN,
        *,
        version: int = 1,
        timeout_ms: int = TIMEOUT_MS,
        producer: tuple[int, int] = (-1, -1),
    ) -> int:
        body = {
            "transactional_id": transactional_id,
            "transaction_timeout_ms": timeout_ms,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
        }
        return self.send("init_producer_id", body, version)

    def producer(self, transactional_id: str = TXN, version: int = 1) -> tuple[int, int]:
        answer = self.answer(self.init(transactional_id, version=version))
        assert answer["error_code"] == ErrorCode.NONE, answer
        return answer["producer_id"], answer["producer_epoch"]

    def add(
        self,
        producer: tuple[int, int],
        partitions: list[tuple[str, int]],
        *,
        transactional_id: str = TXN,
        version: int = 3,
    ) -> int:
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        body = {
            "v3_and_below_transactional_id": transactional_id,
            "v3_and_below_producer_id": producer[0],
            "v3_and_below_producer_epoch": producer[1],
            "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        }
        return self.send("add_partitions_to_txn", body, version)

    def add_errors(self, token: int) -> dict[tuple[str, int], ErrorCode]:
        return {
            (topic["name"], part["partition_index"]): ErrorCode(part["partition_error_code"])
            for topic in self.answer(token)["results_by_topic_v3_and_below"]
            for part in topic["results_by_partition"]
        }

    def add_error(self, token: int) -> ErrorCode:
        (error,) = set(self.add_errors(token).values())
        return error

    def add_offsets(
        self, producer: tuple[int, int], group: str, transactional_id: str = TXN, version: int = 3
    ) -> int:
        body = {
            "transactional_id": transactional_id,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "group_id": group,
        }
        return self.send("add_offsets_to_txn", body, version)

    def end(
        self,
        producer: tuple[int, int],
        committed: bool,
        *,
        version: int = 3,
        transactional_id: str = TXN,
    ) -> int:
        body = {
            "transactional_id": transactional_id,
            "producer_id": producer[0],
            "producer_epoch": producer[1],
            "committed": committed,
        }
        return self.send("end_txn", body, version)

    # ---- what is stored ----

    def stored(self, transactional_id: str = TXN) -> list[TxnLogValue | None]:
        """The values written for this id, oldest first (None for a tombstone)."""
        partition = self.coordinator.partition_for(transactional_id)
        return [
            parse_txn_value(value)
            for key, value in self.logs.get(partition, [])
            if parse_txn_key(key) == transactional_id
        ]

    def stored_states(self, transactional_id: str = TXN) -> list[TxnState | None]:
        return [v.state if v else None for v in self.stored(transactional_id)]

    def state(self, transactional_id: str = TXN) -> TxnState:
        view = self.coordinator.transaction(transactional_id)
        assert view is not None
        return view.state


def started(driver: Driver, partitions: list[tuple[str, int]]) -> tuple[int, int]:
    """A producer with an Ongoing transaction over these partitions."""
    producer = driver.producer()
    assert driver.add_error(driver.add(producer, partitions)) == ErrorCode.NONE
    return producer


# ---- partitioning --------------------------------------------------------------------------


def test_the_state_partition_is_kafkas_abs_hash_modulo() -> None:
    # "my-group".hashCode() is -1906497762: Kafka's Utils.abs makes it 1906497762, so
    # partition 12 of 50 (masking the sign bit would give 36).
    assert transaction_partition("my-group", 50) == 12
    # Java's famous Integer.MIN_VALUE hash: Utils.abs maps it to 0.
    assert transaction_partition("polygenelubricants", 50) == 0
    assert transaction_partition("hello", 50) == 99162322 % 50
    assert TxnCoordinator(TxnConfig(state_partitions=50)).partition_for("my-group") == 12


# ---- InitProducerId ------------------------------------------------------------------------


def test_a_new_id_gets_a_producer_id_at_epoch_0_once_it_is_stored() -> None:
    driver = Driver()
    driver.hold_allocations = driver.hold_appends = True
    token = driver.init()
    assert token not in driver.answers and len(driver.allocations) == 1
    driver.allocate(driver.allocations[0], 4242)
    assert token not in driver.answers and len(driver.appends) == 1  # waiting for the ISR
    (append,) = driver.appends
    assert append.partition == driver.coordinator.partition_for(TXN)
    assert driver.coordinator.transaction(TXN) is None  # nothing until it is stored
    driver.ack(append)
    answer = driver.answer(token)
    assert (answer["error_code"], answer["producer_id"], answer["producer_epoch"]) == (0, 4242, 0)
    (stored,) = driver.stored()
    assert stored == TxnLogValue(4242, 0, TIMEOUT_MS, TxnState.EMPTY, None, driver.now, -1)
    view = driver.coordinator.transaction(TXN)
    assert view is not None and (view.producer_id, view.producer_epoch) == (4242, 0)


def test_reinit_bumps_the_epoch_and_fences_the_old_producer() -> None:
    driver = Driver()
    old = driver.producer()
    new = driver.producer()
    assert new == (old[0], old[1] + 1)
    assert driver.events[-1].kind == "producer_fenced"
    assert f"epoch {old[1]} of {TXN} fenced" in driver.events[-1].message
    assert driver.add_error(driver.add(old, [("t", 0)])) == ErrorCode.PRODUCER_FENCED
    # Clients before AddPartitionsToTxn v2 know only INVALID_PRODUCER_EPOCH.
    assert driver.add_error(driver.add(old, [("t", 0)], version=1)) == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    assert driver.error(driver.end(old, True)) == ErrorCode.PRODUCER_FENCED
    assert driver.error(driver.end(old, True, version=1)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert driver.add_error(driver.add(new, [("t", 0)])) == ErrorCode.NONE


def test_bad_init_requests_are_refused_without_a_write() -> None:
    driver = Driver()
    assert driver.error(driver.init(timeout_ms=0)) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    too_long = driver.config.max_timeout_ms + 1
    assert driver.error(driver.init(timeout_ms=too_long)) == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert driver.error(driver.init("")) == ErrorCode.INVALID_REQUEST
    assert driver.error(driver.init(version=3, producer=(5, -1))) == ErrorCode.INVALID_REQUEST
    assert not driver.appends and not driver.allocations and not driver.logs


def test_no_producer_id_from_the_controller_is_retriable_and_leaves_nothing() -> None:
    driver = Driver()
    driver.hold_allocations = True
    token = driver.init()
    driver.allocate(driver.allocations[0], None)
    assert driver.error(token) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert driver.coordinator.transaction(TXN) is None and not driver.logs
    driver.hold_allocations = False
    assert driver.producer() == (1000, 0)


def test_an_idempotent_producer_gets_a_fresh_id_and_nothing_is_stored() -> None:
    driver = Driver()
    token = driver.send(
        "init_producer_id", {"transactional_id": None, "transaction_timeout_ms": 0}, 1
    )
    assert driver.answer(token) == {
        "throttle_time_ms": 0,
        "error_code": 0,
        "producer_id": 1000,
        "producer_epoch": 0,
    }
    assert not driver.logs


def test_kip_360_the_producer_bumps_its_own_epoch_and_a_lost_answer_is_repeated() -> None:
    driver = Driver()
    first = driver.producer(version=4)
    bumped = driver.answer(driver.init(version=4, producer=first))
    assert (bumped["producer_id"], bumped["producer_epoch"]) == (first[0], first[1] + 1)
    assert not [e for e in driver.events if e.kind == "producer_fenced"]  # its own bump
    # The answer was lost: the producer asks again with the epoch it still has.
    again = driver.answer(driver.init(version=4, producer=first))
    assert (again["error_code"], again["producer_epoch"]) == (0, first[1] + 1)
    stale = (first[0], first[1] + 5)
    assert driver.error(driver.init(version=4, producer=stale)) == ErrorCode.PRODUCER_FENCED
    assert driver.error(driver.init(version=3, producer=stale)) == (
        ErrorCode.INVALID_PRODUCER_EPOCH
    )
    other = (first[0] + 77, first[1])
    assert driver.error(driver.init(version=4, producer=other)) == ErrorCode.PRODUCER_FENCED


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    driver = Driver()
    partition = driver.coordinator.partition_for(TXN)
    exhausted = TxnLogValue(55, 2**15 - 2, TIMEOUT_MS, TxnState.COMPLETE_COMMIT, (), 1, 1)
    driver.coordinator.start_loading(partition)
    driver.coordinator.finish_loading(
        partition, COORDINATOR_EPOCH, [(txn_key(TXN), txn_value(exhausted))], driver.now
    )
    driver.hold_allocations = True
    token = driver.init(version=4, producer=(55, 2**15 - 2))
    assert token not in driver.answers
    assert driver.error(driver.init()) == ErrorCode.CONCURRENT_TRANSACTIONS  # one at a time
    driver.allocate(driver.allocations[0], 9000)
    answer = driver.answer(token)
    assert (answer["producer_id"], answer["producer_epoch"]) == (9000, 0)
    # The same request again (its answer lost): the old id at the exhausted epoch is known.
    again = driver.answer(driver.init(version=4, producer=(55, 2**15 - 2)))
    assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == (0, 9000, 0)
    assert driver.add_error(driver.add((55, 2**15 - 2), [("t", 0)])) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )


def test_init_while_a_transaction_is_open_aborts_it_and_asks_for_a_retry() -> None:
    driver = Driver()
    old = started(driver, [("t", 0), ("t", 1)])
    driver.hold_markers = True
    token = driver.init()
    # Answered once PrepareAbort (under the fencing epoch) is stored: the client retries.
    assert driver.error(token) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert driver.stored()[-1] is not None
    assert driver.stored()[-1] == TxnLogValue(
        old[0], old[1] + 1, TIMEOUT_MS, TxnState.PREPARE_ABORT, (("t", 0), ("t", 1)),
        driver.now, driver.now,
    )  # fmt: skip
    (markers,) = driver.markers
    assert (markers.producer_epoch, markers.committed) == (old[1] + 1, False)
    assert markers.partitions == (("t", 0), ("t", 1))
    assert driver.events[-1].kind == "producer_fenced"
    assert driver.error(driver.init()) == ErrorCode.CONCURRENT_TRANSACTIONS  # still ending
    assert driver.add_error(driver.add(old, [("t", 2)])) == ErrorCode.PRODUCER_FENCED
    driver.finish_markers(markers)
    assert driver.state() == TxnState.COMPLETE_ABORT
    assert driver.producer() == (old[0], old[1] + 2)  # the fencing epoch is never handed out


# ---- a whole transaction -------------------------------------------------------------------


@pytest.mark.parametrize("committed", [True, False])
def test_a_transaction_ends_with_markers_on_exactly_its_partitions(committed: bool) -> None:
    driver = Driver()
    producer = driver.producer()
    driver.hold_appends = True
    token = driver.add(producer, [("orders", 0), ("orders", 2)])
    assert token not in driver.answers  # answered once Ongoing is stored
    driver.ack(driver.appends[0])
    assert driver.add_error(token) == ErrorCode.NONE
    assert driver.state() == TxnState.ONGOING
    driver.hold_appends = False
    offsets = driver.add_offsets(producer, "billing")
    assert driver.error(offsets) == ErrorCode.NONE
    already = driver.add(producer, [("orders", 2)])  # nothing new: no write
    writes = len(driver.stored())
    assert driver.add_error(already) == ErrorCode.NONE and len(driver.stored()) == writes
    driver.hold_appends = driver.hold_markers = True
    end = driver.end(producer, committed)
    assert end not in driver.answers and not driver.markers  # the decision is not stored yet
    driver.ack(driver.appends[0])
    answer = driver.answer(end)
    assert (answer["error_code"], answer["producer_id"]) == (0, producer[0])
    group_part = group_partition("billing", driver.config.offsets_partitions)
    (markers,) = driver.markers
    assert markers.partitions == (("__consumer_offsets", group_part), ("orders", 0), ("orders", 2))
    assert markers.committed is committed
    assert (markers.producer_id, markers.producer_epoch) == producer
    assert (markers.transactional_id, markers.coordinator_epoch) == (TXN, COORDINATOR_EPOCH)
    assert not driver.appends  # Complete waits for the markers
    prepared = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
    assert driver.state() == prepared
    driver.finish_markers(markers)
    (complete,) = driver.appends
    driver.ack(complete)
    done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
    assert driver.stored_states() == [
        TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING, prepared, done,
    ]  # fmt: skip
    view = driver.coordinator.transaction(TXN)
    assert view is not None and view.state == done and view.partitions == ()
    assert view.pending_state is None
    event = driver.events[-1]
    assert event.kind == ("txn_committed" if committed else "txn_aborted")
    assert "on 3 partition(s)" in event.message
    # The id is ready for its next transaction, which starts a new clock.
    driver.hold_appends = driver.hold_markers = False
    driver.now += 500
    assert driver.add_error(driver.add(producer, [("orders", 1)])) == ErrorCode.NONE
    view = driver.coordinator.transaction(TXN)
    assert view is not None and view.partitions == (("orders", 1),)
    assert view.start_ms == driver.now


def test_a_retried_end_is_answered_by_where_the_transaction_is() -> None:
    driver = Driver()
    producer = started(driver, [("t", 0)])
    driver.hold_markers = True
    assert driver.error(driver.end(producer, True)) == ErrorCode.NONE
    # Markers still being written.
    assert driver.error(driver.end(producer, True)) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert driver.error(driver.end(producer, False)) == ErrorCode.CONCURRENT_TRANSACTIONS
    driver.finish_markers(driver.markers[0])
    assert driver.error(driver.end(producer, True)) == ErrorCode.NONE  # the lost answer
    assert driver.error(driver.end(producer, False)) == ErrorCode.INVALID_TXN_STATE
    assert len(driver.sent_markers) == 1  # the retries wrote nothing more


def test_end_without_a_transaction_is_an_invalid_state() -> None:
    driver = Driver()
    producer = driver.producer()
    assert driver.error(driver.end(producer, True)) == ErrorCode.INVALID_TXN_STATE
    assert driver.error(driver.end((producer[0] + 1, 0), True)) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    assert driver.error(driver.end(producer, True, transactional_id="nobody")) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING
    )
    unknown = driver.add((1, 0), [("t", 0)], transactional_id="nobody")
    assert driver.add_error(unknown) == ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_a_second_change_while_one_is_in_flight_is_concurrent() -> None:
    driver = Driver()
    producer = driver.producer()
    driver.hold_appends = True
    first = driver.add(producer, [("t", 0)])
    second = driver.add(producer, [("t", 1)])
    assert driver.add_error(second) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert driver.error(driver.end(producer, True)) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert driver.error(driver.init()) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert len(driver.appends) == 1
    driver.ack(driver.appends[0])
    assert driver.add_error(first) == ErrorCode.NONE
    driver.hold_appends = False
    assert driver.add_error(driver.add(producer, [("t", 1)])) == ErrorCode.NONE


def test_a_second_init_of_a_new_id_waits_for_the_first() -> None:
    driver = Driver()
    driver.hold_allocations = True
    first = driver.init()
    assert driver.error(driver.init()) == ErrorCode.CONCURRENT_TRANSACTIONS
    driver.allocate(driver.allocations[0])
    assert driver.error(first) == ErrorCode.NONE
    assert len(driver.allocations) == 0


# ---- failures ----------------------------------------------------------------------------


def test_a_failed_write_changes_nothing() -> None:
    driver = Driver()
    producer = started(driver, [("t", 0)])
    before = driver.coordinator.transaction(TXN)
    driver.hold_appends = True
    token = driver.add(producer, [("t", 1)])
    driver.ack(driver.appends[0], ErrorCode.NOT_ENOUGH_REPLICAS)
    assert driver.add_error(token) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert driver.coordinator.transaction(TXN) == before
    token = driver.end(producer, True)
    driver.ack(driver.appends[0], ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert driver.error(token) == ErrorCode.NOT_COORDINATOR
    assert driver.coordinator.transaction(TXN) == before and not driver.markers
    token = driver.init()  # the fence of the open transaction fails too
    driver.ack(driver.appends[0], ErrorCode.REQUEST_TIMED_OUT)
    assert driver.error(token) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert driver.coordinator.transaction(TXN) == before
    driver.hold_appends = False
    assert driver.add_error(driver.add(producer, [("t", 1)])) == ErrorCode.NONE


def test_a_failed_bump_keeps_the_old_epoch() -> None:
    driver = Driver()
    producer = driver.producer()
    driver.hold_appends = True
    token = driver.init()
    driver.ack(driver.appends[0], ErrorCode.KAFKA_STORAGE_ERROR)
    assert driver.error(token) == ErrorCode.NOT_COORDINATOR
    view = driver.coordinator.transaction(TXN)
    assert view is not None and view.producer_epoch == producer[1]
    driver.hold_appends = False
    assert driver.add_error(driver.add(producer, [("t", 0)])) == ErrorCode.NONE


def test_a_failed_complete_write_is_retried_on_the_next_tick() -> None:
    driver = Driver()
    producer = started(driver, [("t", 0)])
    driver.hold_appends = True
    end = driver.end(producer, True)
    driver.ack(driver.appends[0])
    assert driver.error(end) == ErrorCode.NONE
    driver.ack(driver.appends[0], ErrorCode.NOT_ENOUGH_REPLICAS)  # the Complete record
    assert driver.state() == TxnState.PREPARE_COMMIT and not driver.appends
    assert not [e for e in driver.events if e.kind == "txn_committed"]
    driver.tick(1)
    (retry,) = driver.appends
    driver.ack(retry)
    assert driver.state() == TxnState.COMPLETE_COMMIT
    assert driver.events[-1].kind == "txn_committed"


# ---- ownership ---------------------------------------------------------------------------


def test_unloading_answers_the_waiting_requests_and_ignores_late_completions() -> None:
    driver = Driver()
    producer = driver.producer()
    partition = driver.coordinator.partition_for(TXN)
    driver.hold_appends = True
    token = driver.add(producer, [("t", 0)])
    (append,) = driver.appends
    driver.run(driver.coordinator.unload(partition))
    assert driver.add_error(token) == ErrorCode.NOT_COORDINATOR
    driver.ack(append)  # the write did land, but the new coordinator owns the id now
    assert driver.coordinator.transaction(TXN) is None
    assert driver.error(driver.init()) == ErrorCode.NOT_COORDINATOR
    assert driver.add_error(driver.add(producer, [("t", 0)])) == ErrorCode.NOT_COORDINATOR
    driver.coordinator.start_loading(partition)
    assert driver.error(driver.init()) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    listed = driver.answer(driver.send("list_transactions", {}, 1))
    assert listed["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_unloading_drops_a_pending_allocation_and_stale_markers() -> None:
    driver = Driver()
    partition = driver.coordinator.partition_for(TXN)
    driver.hold_allocations = True
    token = driver.init()
    (request,) = driver.allocations
    driver.run(driver.coordinator.unload(partition))
    assert driver.error(token) == ErrorCode.NOT_COORDINATOR
    driver.allocate(request)  # a late answer changes nothing
    assert driver.coordinator.transaction(TXN) is None
    driver.coordinator.start_loading(partition)
    driver.coordinator.finish_loading(partition, COORDINATOR_EPOCH, [], driver.now)
    driver.hold_allocations = False
    producer = started(driver, [("t", 0)])
    driver.hold_markers = True
    driver.error(driver.end(producer, True))
    (markers,) = driver.markers
    driver.run(driver.coordinator.unload(partition))
    driver.finish_markers(markers)  # stale: nothing written
    assert not driver.appends and driver.stored_states()[-1] == TxnState.PREPARE_COMMIT


def test_a_new_coordinator_reproduces_the_state_from_the_log() -> None:
    driver = Driver()
    a = started(driver, [("t", 0), ("u", 3)])
    driver.error(driver.end(a, True))
    driver.add(a, [("t", 1)])
    other = "payments-txn"
    b = driver.producer(other)
    driver.producer(other)  # b fenced
    assert driver.add_error(driver.add(b, [("t", 0)], transactional_id=other)) == (
        ErrorCode.PRODUCER_FENCED
    )
    successor = TxnCoordinator(driver.config)
    for partition in range(driver.config.state_partitions):
        successor.start_loading(partition)
        summary, effects = successor.finish_loading(
            partition, COORDINATOR_EPOCH + 1, driver.logs.get(partition, []), driver.now
        )
        assert effects == [] and summary.corrupt_records == 0
    assert successor.transactions() == driver.coordinator.transactions()
    assert {v.transactional_id for v in successor.transactions()} == {TXN, other}
    driver.coordinator = successor
    assert driver.state() == TxnState.ONGOING
    assert driver.error(driver.end(a, True)) == ErrorCode.NONE
    assert driver.sent_markers[-1].coordinator_epoch == COORDINATOR_EPOCH + 1


@pytest.mark.parametrize("committed", [True, False])
def test_a_decided_transaction_found_on_load_is_finished(committed: bool) -> None:
    driver = Driver()
    producer = started(driver, [("t", 0), ("t", 1)])
    driver.hold_markers = True
    assert driver.error(driver.end(producer, committed)) == ErrorCode.NONE
    partition = driver.coordinator.partition_for(TXN)
    log = [*driver.logs[partition], (b"\x00\x07junk", b"")]
    successor = TxnCoordinator(driver.config)
    successor.start_loading(partition)
    summary, effects = successor.finish_loading(partition, 9, log, driver.now)
    assert (summary.transactions, summary.resumed, summary.corrupt_records) == (1, 1, 1)
    (markers,) = effects
    assert isinstance(markers, WriteMarkers)
    assert (markers.coordinator_epoch, markers.committed) == (9, committed)
    assert markers.partitions == (("t", 0), ("t", 1))
    assert markers.producer_epoch == producer[1]
    driver.coordinator = successor
    assert driver.error(driver.end(producer, committed)) == ErrorCode.CONCURRENT_TRANSACTIONS
    driver.hold_markers = False
    driver.run(effects)
    done = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
    assert driver.state() == done
    assert driver.stored_states()[-1] == done
    assert driver.error(driver.end(producer, committed)) == ErrorCode.NONE


def test_a_stored_epoch_fence_is_finished_as_an_abort() -> None:
    driver = Driver()
    partition = driver.coordinator.partition_for(TXN)
    fence = TxnLogValue(5, 3, TIMEOUT_MS, TxnState.PREPARE_EPOCH_FENCE, (("t", 0),), 10, 10)
    driver.coordinator.start_loading(partition)
    summary, effects = driver.coordinator.finish_loading(
        partition, COORDINATOR_EPOCH, [(txn_key(TXN), txn_value(fence))], driver.now
    )
    assert summary.resumed == 1
    driver.run(effects)
    assert driver.stored_states() == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]
    assert driver.sent_markers[-1].producer_epoch == 3  # already the fencing epoch
    assert driver.state() == TxnState.COMPLETE_ABORT


def test_a_stored_fence_whose_abort_failed_is_tried_again() -> None:
    driver = Driver()
    partition = driver.coordinator.partition_for(TXN)
    fence = TxnLogValue(5, 3, TIMEOUT_MS, TxnState.PREPARE_EPOCH_FENCE, (("t", 0),), 10, 10)
    driver.coordinator.start_loading(partition)
    _, effects = driver.coordinator.finish_loading(
        partition, COORDINATOR_EPOCH, [(txn_key(TXN), txn_value(fence))], driver.now
    )
    driver.hold_appends = True
    driver.run(effects)
    driver.ack(driver.appends[0], ErrorCode.NOT_ENOUGH_REPLICAS)
    assert driver.state() == TxnState.PREPARE_EPOCH_FENCE and not driver.appends
    driver.hold_appends = False
    driver.tick(1)
    assert driver.state() == TxnState.COMPLETE_ABORT


def test_tombstones_on_load_remove_the_id() -> None:
    driver = Driver()
    partition = driver.coordinator.partition_for(TXN)
    value = TxnLogValue(5, 0, TIMEOUT_MS, TxnState.EMPTY, None, 10, -1)
    log: list[Record] = [(txn_key(TXN), txn_value(value)), (txn_key(TXN), None)]
    driver.coordinator.start_loading(partition)
    summary, _ = driver.coordinator.finish_loading(partition, 1, log, driver.now)
    assert summary.transactions == 0 and driver.coordinator.transaction(TXN) is None


# ---- time ----------------------------------------------------------------------------------


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    driver = Driver()
    producer = started(driver, [("t", 0)])
    driver.tick(TIMEOUT_MS)  # not past it yet
    assert driver.state() == TxnState.ONGOING
    driver.tick(driver.config.abort_check_interval_ms)
    assert driver.state() == TxnState.COMPLETE_ABORT
    markers = driver.sent_markers[-1]
    assert (markers.committed, markers.producer_epoch) == (False, producer[1] + 1)
    kinds = [e.kind for e in driver.events]
    assert kinds[-2:] == ["txn_timed_out", "txn_aborted"]
    assert f"{TIMEOUT_MS} ms timeout" in driver.events[-2].message
    assert driver.error(driver.end(producer, True)) == ErrorCode.PRODUCER_FENCED
    assert driver.producer() == (producer[0], producer[1] + 2)


def test_the_timeout_check_runs_every_interval_only() -> None:
    driver = Driver(TxnConfig(state_partitions=2, abort_check_interval_ms=50_000))
    driver.tick(1)  # the first check, at 1001; nothing open
    started(driver, [("t", 0)])  # times out after 61001
    driver.tick(60_001)  # 61002: past the timeout, and the check due at 51001 runs
    assert driver.state() == TxnState.COMPLETE_ABORT
    producer = driver.producer()
    assert driver.add_error(driver.add(producer, [("t", 0)])) == ErrorCode.NONE  # until 121002
    driver.tick(50_000)  # 111002: a check, not past the timeout yet
    assert driver.state() == TxnState.ONGOING
    driver.tick(10_001)  # 121003: past it, but the next check is at 161002
    assert driver.state() == TxnState.ONGOING
    driver.tick(39_999)
    assert driver.state() == TxnState.COMPLETE_ABORT


def test_idle_ids_expire_with_a_tombstone() -> None:
    config = TxnConfig(state_partitions=2, id_expiration_ms=100_000, abort_check_interval_ms=10**12)
    driver = Driver(config)
    driver.producer()
    started_id = "busy-txn"
    producer = driver.producer(started_id)
    driver.add(producer, [("t", 0)], transactional_id=started_id)
    driver.tick(1)  # the first expiry check: nothing old enough
    driver.tick(config.remove_expired_interval_ms)
    assert driver.coordinator.transaction(TXN) is None
    assert driver.stored()[-1] is None  # a tombstone, so compaction forgets the id
    assert driver.coordinator.transaction(started_id) is not None  # Ongoing never expires
    described = driver.answer(driver.send("describe_transactions", {"transactional_ids": [TXN]}, 0))
    assert described["transaction_states"][0]["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert driver.producer() == (1002, 0)  # a new id from scratch


def test_a_failed_tombstone_keeps_the_id() -> None:
    config = TxnConfig(state_partitions=2, id_expiration_ms=10)
    driver = Driver(config)
    producer = driver.producer()
    driver.hold_appends = True
    driver.tick(100)
    (tombstone,) = driver.appends
    assert tombstone.records == ((txn_key(TXN), None),)
    assert driver.error(driver.init()) == ErrorCode.CONCURRENT_TRANSACTIONS  # being removed
    driver.ack(tombstone, ErrorCode.NOT_ENOUGH_REPLICAS)
    view = driver.coordinator.transaction(TXN)
    assert view is not None and (view.producer_id, view.producer_epoch) == producer
    assert view.pending_state is None


def test_an_id_with_a_change_in_flight_does_not_expire() -> None:
    config = TxnConfig(state_partitions=2, id_expiration_ms=10)
    driver = Driver(config)
    producer = driver.producer()
    driver.hold_appends = True
    token = driver.init()  # a bump on its way to the log
    driver.tick(100)  # the id is idle past its expiration, but busy
    (bump,) = driver.appends
    assert bump.records[0][1] is not None
    driver.ack(bump)
    assert driver.answer(token)["producer_epoch"] == producer[1] + 1
    assert driver.coordinator.transaction(TXN) is not None


# ---- v4+: the brokers' batches and verification ----------------------------------------------


def _v4_body(transactions: list[tuple[str, tuple[int, int], bool, list[tuple[str, int]]]]) -> Body:
    return {
        "transactions": [
            {
                "transactional_id": tid,
                "producer_id": producer[0],
                "producer_epoch": producer[1],
                "verify_only": verify,
                "topics": [{"name": t, "partitions": [p]} for t, p in partitions],
            }
            for tid, producer, verify, partitions in transactions
        ]
    }


def _v4_errors(answer: Body) -> dict[str, dict[tuple[str, int], ErrorCode]]:
    return {
        result["transactional_id"]: {
            (topic["name"], part["partition_index"]): ErrorCode(part["partition_error_code"])
            for topic in result["topic_results"]
            for part in topic["results_by_partition"]
        }
        for result in answer["results_by_transaction"]
    }


@pytest.mark.parametrize(
    ("version", "absent"), [(4, "INVALID_TXN_STATE"), (5, "TRANSACTION_ABORTABLE")]
)
def test_verify_only_checks_the_partitions_without_writing(version: int, absent: str) -> None:
    driver = Driver()
    producer = started(driver, [("t", 0)])
    writes = len(driver.stored())
    body = _v4_body([(TXN, producer, True, [("t", 0), ("t", 1)])])
    answer = driver.answer(driver.send("add_partitions_to_txn", body, version))
    assert answer["results_by_topic_v3_and_below"] == []
    assert _v4_errors(answer) == {TXN: {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode[absent]}}
    assert len(driver.stored()) == writes and not driver.appends
    stale = _v4_body([(TXN, (producer[0], producer[1] - 1), True, [("t", 0)])])
    answer = driver.answer(driver.send("add_partitions_to_txn", stale, version))
    assert _v4_errors(answer) == {TXN: {("t", 0): ErrorCode.PRODUCER_FENCED}}
    nobody = _v4_body([("nobody", producer, True, [("t", 0)])])
    answer = driver.answer(driver.send("add_partitions_to_txn", nobody, version))
    assert _v4_errors(answer) == {"nobody": {("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}}


def test_a_v4_batch_is_answered_once_every_transaction_is_done() -> None:
    driver = Driver()
    a = driver.producer()
    b = driver.producer("second-txn")
    driver.hold_appends = True
    body = _v4_body(
        [
            (TXN, a, False, [("t", 0)]),
            ("second-txn", b, False, [("u", 1)]),
            ("nobody", b, False, [("u", 2)]),
        ]
    )
    token = driver.send("add_partitions_to_txn", body, 4)
    assert len(driver.appends) == 2 and token not in driver.answers
    driver.ack(driver.appends[1])
    assert token not in driver.answers
    driver.ack(driver.appends[0], ErrorCode.NOT_ENOUGH_REPLICAS)
    assert _v4_errors(driver.answer(token)) == {
        TXN: {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE},
        "second-txn": {("u", 1): ErrorCode.NONE},
        "nobody": {("u", 2): ErrorCode.INVALID_PRODUCER_ID_MAPPING},
    }


def test_an_unknown_partition_refuses_the_whole_transaction() -> None:
    driver = Driver()
    producer = driver.producer()
    body = {
        "v3_and_below_transactional_id": TXN,
        "v3_and_below_producer_id": producer[0],
        "v3_and_below_producer_epoch": producer[1],
        "v3_and_below_topics": [{"name": "t", "partitions": [0, 9]}],
    }
    token = next(driver.tokens)
    caller = Caller(token, 3)
    driver.run(
        driver.coordinator.add_partitions_to_txn(
            caller, body, driver.now, partition_exists=lambda topic, index: index < 4
        )
    )
    assert driver.add_errors(token) == {
        ("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("t", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert driver.state() == TxnState.EMPTY


# ---- describe and list, through the real codec -----------------------------------------------


def _round_trip(schema: str, version: int, body: Body) -> Body:
    codec = codec_for(schema, version)
    encoded = codec.encode(body)
    decoded, end = codec.decode(encoded)
    assert end == len(encoded)
    return decoded


def test_describe_answers_encode_and_show_kafkas_view() -> None:
    driver = Driver()
    producer = started(driver, [("t", 1), ("t", 0), ("u", 2)])
    body = {"transactional_ids": [TXN, "nobody", ""]}
    answer = driver.answer(driver.send("describe_transactions", body, 0))
    decoded = _round_trip("DescribeTransactionsResponse", 0, answer)
    found, missing, empty = decoded["transaction_states"]
    assert found == {
        "error_code": 0,
        "transactional_id": TXN,
        "transaction_state": "Ongoing",
        "transaction_timeout_ms": TIMEOUT_MS,
        "transaction_start_time_ms": driver.now,
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "topics": [{"topic": "t", "partitions": [0, 1]}, {"topic": "u", "partitions": [2]}],
    }
    assert missing["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    assert empty["error_code"] == ErrorCode.INVALID_REQUEST


def test_list_filters_by_state_producer_and_duration_and_encodes() -> None:
    driver = Driver()
    ongoing = started(driver, [("t", 0)])
    driver.producer("idle-txn")
    driver.now += 5_000

    def listed(body: Body, version: int) -> Body:
        answer = driver.answer(driver.send("list_transactions", body, version))
        return _round_trip("ListTransactionsResponse", version, answer)

    every = listed({}, 0)
    assert every["error_code"] == 0
    assert {
        (s["transactional_id"], s["transaction_state"]) for s in every["transaction_states"]
    } == {
        (TXN, "Ongoing"),
        ("idle-txn", "Empty"),
    }
    by_state = listed({"state_filters": ["Ongoing", "Bogus"]}, 1)
    assert [s["transactional_id"] for s in by_state["transaction_states"]] == [TXN]
    assert by_state["unknown_state_filters"] == ["Bogus"]
    by_producer = listed({"producer_id_filters": [ongoing[0]]}, 0)
    assert [s["producer_id"] for s in by_producer["transaction_states"]] == [ongoing[0]]
    # v1: only transactions running longer than the duration (an Empty id has no start, so
    # Kafka counts it as running since forever).
    longer = listed({"duration_filter": 10_000, "state_filters": ["Ongoing"]}, 1)
    assert longer["transaction_states"] == []
    exactly = listed({"duration_filter": 5_000, "state_filters": ["Ongoing"]}, 1)
    assert exactly["transaction_states"] == []  # "longer than", strictly
    shorter = listed({"duration_filter": 1_000, "state_filters": ["Ongoing"]}, 1)
    assert [s["transactional_id"] for s in shorter["transaction_states"]] == [TXN]


@pytest.mark.parametrize(
    ("schema", "versions"),
    [
        ("InitProducerIdResponse", range(6)),
        ("AddPartitionsToTxnResponse", range(6)),
        ("AddOffsetsToTxnResponse", range(5)),
        ("EndTxnResponse", range(6)),
    ],
)
def test_every_answer_encodes_at_every_version(schema: str, versions: range) -> None:
    driver = Driver()
    producer = driver.producer()
    add = driver.add(producer, [("t", 0)])
    offsets = driver.add_offsets(producer, "g")
    end = driver.end(producer, True)
    v4 = driver.send("add_partitions_to_txn", _v4_body([(TXN, producer, True, [("t", 0)])]), 4)
    bodies = {
        "InitProducerIdResponse": driver.answer(driver.init()),
        "AddPartitionsToTxnResponse": driver.answer(add),
        "AddOffsetsToTxnResponse": driver.answer(offsets),
        "EndTxnResponse": driver.answer(end),
    }
    fields = load_message(schema).struct.fields
    for version in versions:
        body = bodies[schema]
        if schema == "AddPartitionsToTxnResponse" and version >= 4:
            body = driver.answer(v4)
        decoded = _round_trip(schema, version, body)
        present = [f.key for f in fields if f.present(version)]
        assert present and {k: decoded[k] for k in present} == {k: body[k] for k in present}


# ---- the log always says what the coordinator knows ------------------------------------------

_IDS = ("alpha", "beta")
_FAILURES = (
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT,
)
_STEPS = st.tuples(
    st.sampled_from(["init", "add", "add", "add", "offsets", "commit", "abort", "tick", "reload"]),
    st.sampled_from(_IDS),
    st.integers(0, 3),  # a partition, or how far the clock moves
    st.sampled_from([*[None] * 8, *_FAILURES]),  # the fate of the step's writes
)


def _assert_log_matches_memory(driver: Driver) -> None:
    for transactional_id in _IDS:
        view = driver.coordinator.transaction(transactional_id)
        stored = driver.stored(transactional_id)
        last = stored[-1] if stored else None
        if view is None:
            assert last is None, transactional_id
            continue
        if view.pending_state is not None:
            continue  # a Complete record being retried
        assert last is not None
        assert (last.producer_id, last.producer_epoch, last.state) == (
            view.producer_id,
            view.producer_epoch,
            view.state,
        )
        assert tuple(sorted(last.partitions or ())) == view.partitions
        assert (last.start_ms, last.last_update_ms, last.timeout_ms) == (
            view.start_ms,
            view.last_update_ms,
            view.timeout_ms,
        )


@settings(max_examples=60, deadline=None)
@given(st.lists(_STEPS, max_size=40))
def test_every_acknowledged_change_is_the_last_record_of_its_id(steps: list[Any]) -> None:
    """Random requests, writes failing at random, time passing, partitions reloaded: after
    each step the last record of each id is exactly the state the coordinator serves."""
    config = TxnConfig(
        state_partitions=2, id_expiration_ms=200_000, remove_expired_interval_ms=50_000
    )
    driver = Driver(config)
    producers = {transactional_id: driver.producer(transactional_id) for transactional_id in _IDS}
    for kind, transactional_id, number, failure in steps:
        driver.hold_appends = failure is not None
        producer = producers[transactional_id]
        token = None
        if kind == "init":
            token = driver.init(transactional_id)
        elif kind == "add":
            token = driver.add(producer, [("t", number)], transactional_id=transactional_id)
        elif kind == "offsets":
            token = driver.add_offsets(producer, f"group-{number}", transactional_id)
        elif kind in ("commit", "abort"):
            token = driver.end(producer, kind == "commit", transactional_id=transactional_id)
        elif kind == "tick":
            driver.tick(number * 40_000)
        else:  # another coordinator epoch of one partition: the same state from the log
            partition = number % config.state_partitions
            driver.run(driver.coordinator.start_loading(partition))
            _, effects = driver.coordinator.finish_loading(
                partition, COORDINATOR_EPOCH, driver.logs.get(partition, []), driver.now
            )
            driver.run(effects)
        while driver.appends:  # a failed Complete waits for the next tick: this ends
            driver.ack(driver.appends[0], failure or ErrorCode.NONE)
        driver.hold_appends = False
        if token is not None:
            assert token in driver.answers  # every request is answered once its writes are
            answer = driver.answers[token]
            if kind == "init" and answer["error_code"] == ErrorCode.NONE:
                producers[transactional_id] = (answer["producer_id"], answer["producer_epoch"])
        _assert_log_matches_memory(driver)
    driver.tick(1)  # retries of Complete records
    assert all(v.pending_state is None for v in driver.coordinator.transactions())
    _assert_log_matches_memory(driver)
    assert not driver.appends and not driver.allocations and not driver.markers


# ---- the EndTxn answer held until the transaction is complete ----


def _holding(hold_ms: int = 500) -> Driver:
    return Driver(TxnConfig(state_partitions=4, offsets_partitions=5, end_txn_hold_ms=hold_ms))


def test_the_end_answer_waits_for_the_markers_and_complete_so_the_next_add_finds_the_id_free() -> (
    None
):
    driver = _holding()
    producer = started(driver, [("t", 0)])
    driver.hold_markers = True
    end = driver.end(producer, True)
    assert end not in driver.answers  # decided (PrepareCommit stored), markers still out
    (markers,) = driver.markers
    driver.finish_markers(markers)  # then Complete is written and acknowledged
    assert driver.error(end) == ErrorCode.NONE
    assert driver.state() == TxnState.COMPLETE_COMMIT
    assert driver.add_error(driver.add(producer, [("t", 1)])) == ErrorCode.NONE


def test_a_held_end_answer_goes_out_at_its_deadline_if_the_markers_are_slow() -> None:
    driver = _holding(500)
    producer = started(driver, [("t", 0)])
    driver.hold_markers = True
    end = driver.end(producer, False)
    driver.tick(499)
    assert end not in driver.answers
    driver.tick(1)
    assert driver.error(end) == ErrorCode.NONE  # the decision is stored: the answer stands
    assert driver.state() == TxnState.PREPARE_ABORT


def test_a_held_end_answer_goes_out_when_the_coordinator_moves() -> None:
    driver = _holding()
    producer = started(driver, [("t", 0)])
    driver.hold_markers = True
    end = driver.end(producer, True)
    partition = driver.coordinator.partition_for(TXN)
    driver.run(driver.coordinator.unload(partition))
    assert driver.error(end) == ErrorCode.NONE
