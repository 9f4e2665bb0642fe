"""The sans-IO controller: placement, broker sessions and fencing, failover, ISR changes,
elections, topic admin, and persist-before-send — as scenario scripts, tables, and a
model-based random test that checks the invariants after every step.
"""

from __future__ import annotations

import ast
import itertools
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlog.core.controller import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerProcessExitedRequest,
    Controller,
    ControllerConfig,
    ControllerResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ErrorResponse,
    NewTopic,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    ReplicaLogEnd,
)
from rlog.core.controller.brokers import BrokerAction, heartbeat_action
from rlog.core.controller.placement import assign_replicas, placement_seed
from rlog.core.metadata.image import MetadataImage, PartitionInfo
from rlog.core.metadata.log_store import (
    METADATA_PARTITION_DIR,
    append_records,
    metadata_log_config,
    replay,
)
from rlog.core.metadata.records import (
    NO_LEADER,
    ChangePartition,
    FenceBroker,
    MetadataRecord,
    RegisterBroker,
)
from rlog.core.protocol.errors import ErrorCode
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log

HEARTBEAT_INTERVAL_MS = 1000
LOG_START: dict[str, int] = {"recovery_point": 0, "log_start_offset": 0, "now_ms": 0}

ERROR_NAMES = {code.name: int(code) for code in ErrorCode} | {
    "DUPLICATE_BROKER_REGISTRATION": ErrorCode.DUPLICATE_BROKER_REGISTRATION,
    "BROKER_ID_NOT_REGISTERED": ErrorCode.BROKER_ID_NOT_REGISTERED,
    "INELIGIBLE_REPLICA": ErrorCode.INELIGIBLE_REPLICA,
}


class Driver:
    """Plays the daemon: persists each Ready's records (a list standing in for the fsync'd log)
    before it delivers the responses, then advances. Brokers in `heartbeating` heartbeat (caught
    up) every second while time passes.
    """

    def __init__(self, config: ControllerConfig | None = None, **settings_: Any) -> None:
        self.config = config or ControllerConfig(**settings_)
        self.controller = Controller(self.config, MetadataImage(), 0)
        self.durable: list[MetadataRecord] = []
        self.durable_image = MetadataImage()  # folded here independently of the controller
        self.now_ms = 0
        self.epochs: dict[int, int] = {}
        self.incarnations: dict[int, str] = {}
        self.heartbeating: set[int] = set()
        self._tokens = itertools.count()

    # -- the daemon's loop --

    def flush(self) -> list[tuple[Any, ControllerResponse]]:
        ready = self.controller.ready()
        assert ready.base_offset == len(self.durable)
        for index, record in enumerate(ready.records):  # "append + fsync"
            self.durable.append(record)
            self.durable_image.apply(ready.base_offset + index, record)
        for _, response in ready.responses:  # "send": each claim holds in what is durable
            check_claims_hold(self.durable_image, response)
        self.controller.advance(ready)
        assert self.controller.image == self.durable_image
        return ready.responses

    def call(self, request_type: type, **fields: Any) -> Any:
        token = next(self._tokens)
        self.controller.step(request_type(token=token, **fields), self.now_ms)
        responses = self.flush()
        assert [t for t, _ in responses] == [token]
        return responses[0][1]

    def tick(self) -> list[MetadataRecord]:
        start = len(self.durable)
        self.controller.tick(self.now_ms)
        self.flush()
        return self.durable[start:]

    def pass_time(self, ms: int, *, beats: Sequence[int]) -> None:
        """Let `ms` pass with no tick, the controller seeing the time (every 100 ms, closer than
        its STALL_MS) only through heartbeats from `beats`."""
        end = self.now_ms + ms
        while self.now_ms < end:
            self.now_ms = min(end, self.now_ms + 100)
            for broker_id in beats:
                self.heartbeat(broker_id)

    # -- brokers --

    def register(
        self, broker_id: int, incarnation: str | None = None, *, previous_broker_epoch: int = -1
    ) -> RegisterBrokerResponse:
        incarnation = incarnation or self.incarnations.get(broker_id) or f"incarnation-{broker_id}"
        response = self.call(
            RegisterBrokerRequest,
            broker_id=broker_id,
            incarnation_id=incarnation,
            host="localhost",
            port=9090 + broker_id,
            previous_broker_epoch=previous_broker_epoch,
        )
        if response.error == ErrorCode.NONE:
            self.epochs[broker_id] = response.broker_epoch
            self.incarnations[broker_id] = incarnation
        return response

    def heartbeat(
        self,
        broker_id: int,
        *,
        offset: int | None = None,
        want_fence: bool = False,
        want_shutdown: bool = False,
        told: tuple[ReplicaLogEnd, ...] | None = None,
    ) -> BrokerHeartbeatResponse:
        """`told`: the log ends it tells; by default, as a broker does, one in each recovering
        partition it hosts (here its id, so the highest id is the longest log)."""
        recovering = told
        if recovering is None:
            recovering = tuple(
                ReplicaLogEnd(topic, index, 0, broker_id)
                for topic, index, state in self.controller.image.iter_partitions()
                if state.recovering and broker_id in state.replicas
            )
        return self.call(
            BrokerHeartbeatRequest,
            broker_id=broker_id,
            broker_epoch=self.epochs[broker_id],
            current_metadata_offset=len(self.durable) - 1 if offset is None else offset,
            want_fence=want_fence,
            want_shutdown=want_shutdown,
            recovering_replicas=recovering,
        )

    def start_brokers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            assert self.register(broker_id).error == ErrorCode.NONE
            assert not self.heartbeat(broker_id).is_fenced
            self.heartbeating.add(broker_id)

    def wait(self, duration_ms: int) -> None:
        end_ms = self.now_ms + duration_ms
        while self.now_ms < end_ms:
            self.now_ms = min(end_ms, self.now_ms + HEARTBEAT_INTERVAL_MS)
            for broker_id in sorted(self.heartbeating):
                self.heartbeat(broker_id)
            self.tick()

    # -- admin --

    def create(self, name: str, partitions: int = 1, rf: int = 1, **kwargs: Any) -> Any:
        response = self.call(CreateTopicsRequest, topics=[NewTopic(name, partitions, rf, **kwargs)])
        return response.topics[0]

    def partition(self, topic: str, index: int = 0) -> PartitionInfo:
        state = self.controller.image.partition(topic, index)
        assert state is not None
        return state

    def alter_isr(self, topic: str, index: int, by: int, isr: Iterable[int], **epochs: int) -> Any:
        state = self.partition(topic, index)
        return self.call(
            AlterPartitionRequest,
            broker_id=by,
            broker_epoch=epochs.get("broker_epoch", self.epochs.get(by, 0)),
            topic=topic,
            partition=index,
            leader_epoch=epochs.get("leader_epoch", state.leader_epoch),
            new_isr=list(isr),
            partition_epoch=epochs.get("partition_epoch", state.partition_epoch),
        )

    def last_change(self, topic: str, index: int) -> ChangePartition:
        changes = [
            r
            for r in self.durable
            if isinstance(r, ChangePartition) and (r.topic, r.partition) == (topic, index)
        ]
        return changes[-1]


def check_claims_hold(image: MetadataImage, response: ControllerResponse) -> None:
    """Persist before send: a response is only ever about metadata already durable."""
    if isinstance(response, RegisterBrokerResponse) and response.error == ErrorCode.NONE:
        assert any(b.epoch == response.broker_epoch for b in image.brokers.values())
    elif isinstance(response, AlterPartitionResponse) and response.error == ErrorCode.NONE:
        state = (response.leader, response.leader_epoch, response.isr, response.partition_epoch)
        assert any(
            (info.leader, info.leader_epoch, info.isr, info.partition_epoch) == state
            for _, _, info in image.iter_partitions()
        )
    elif isinstance(response, CreateTopicsResponse):
        for result in response.topics:
            if result.error == ErrorCode.NONE and result.topic_id is not None:
                assert image.topic_names_by_id[result.topic_id] == result.name
    elif isinstance(response, ElectLeadersResponse):
        for result in response.results:
            if result.error == ErrorCode.NONE:
                state = image.partition(result.topic, result.partition)
                assert state is not None and state.leader != NO_LEADER
    elif isinstance(response, AllocateProducerIdsResponse) and response.error == ErrorCode.NONE:
        assert image.next_producer_id >= response.producer_id_start + response.producer_id_len


# ---- scenario scripts ----


def run_script(script: str, driver: Driver | None = None) -> Driver:
    """Run a scenario, one command a line ('#' starts a comment):

    brokers 1 2 3               register, catch up, unfence; they heartbeat from now on
    create T partitions=N rf=R [key=value ...]
    stop B / start B            B stops / resumes heartbeating (resuming: caught up)
    wait MS                     time passes in 1 s steps: heartbeats, then a tick
    alter T-P by B isr=1,2 [leader_epoch=E partition_epoch=E] -> ERROR
    elect preferred|unclean T-P -> ERROR
    config T key=value          a topic config (config cluster key=value: the cluster default)
    expect T-P field=value ...  replicas, isr, leader, leader_epoch, partition_epoch, unclean
    expect broker B fenced|unfenced
    """
    driver = driver or Driver()
    for number, raw in enumerate(script.splitlines(), 1):
        line = raw.split("#")[0].strip()
        if line:
            try:
                _run_line(driver, line)
            except AssertionError as error:
                raise AssertionError(f"line {number}: {line}: {error}") from error
    return driver


def _run_line(driver: Driver, line: str) -> None:
    words, _, expected = line.partition("->")
    command, *args = shlex.split(words)
    options = dict(arg.split("=", 1) for arg in args if "=" in arg)
    plain = [arg for arg in args if "=" not in arg]
    error: int | None = None
    if command == "brokers":
        driver.start_brokers(int(arg) for arg in plain)
    elif command == "create":
        counts = {"partitions": int(options.pop("partitions")), "rf": int(options.pop("rf"))}
        error = driver.create(plain[0], **counts, configs=options).error
        expected = expected or "NONE"
    elif command == "stop":
        driver.heartbeating.discard(int(plain[0]))
    elif command == "start":
        driver.heartbeating.add(int(plain[0]))
    elif command == "wait":
        driver.wait(int(plain[0]))
    elif command == "alter":
        topic, index = _topic_partition(plain[0])
        epochs = {k: int(v) for k, v in options.items() if k.endswith("epoch")}
        isr = _ints(options["isr"])
        error = driver.alter_isr(topic, index, int(plain[2]), isr, **epochs).error
    elif command == "elect":
        partition = _topic_partition(plain[1])
        response = driver.call(ElectLeadersRequest, kind=plain[0], partitions=[partition])
        error = response.results[0].error
    elif command == "config":
        resource_type, name = ("broker", "") if plain[0] == "cluster" else ("topic", plain[0])
        response = driver.call(
            AlterConfigsRequest, resource_type=resource_type, resource_name=name, changes=options
        )
        error = response.error
        expected = expected or "NONE"
    elif command == "expect":
        _expect(driver, plain, options)
    else:
        raise AssertionError(f"unknown command {command}")
    if expected.strip():
        assert error == ERROR_NAMES[expected.strip()], f"error {error}, expected {expected}"


def _expect(driver: Driver, plain: list[str], options: dict[str, str]) -> None:
    if plain[0] == "broker":
        broker = driver.controller.image.brokers[int(plain[1])]
        assert broker.fenced == (plain[2] == "fenced"), broker
        return
    topic, index = _topic_partition(plain[0])
    state = driver.partition(topic, index)
    for key, text in options.items():
        if key == "unclean":
            actual: object = driver.last_change(topic, index).unclean
            wanted: object = text == "yes"
        elif key in ("replicas", "isr"):
            actual, wanted = getattr(state, key), _ints(text)
        else:
            actual, wanted = getattr(state, key), int(text)
        assert actual == wanted, f"{key}: {actual}, expected {wanted} in {state}"


def _topic_partition(text: str) -> tuple[str, int]:
    topic, _, index = text.rpartition("-")
    return topic, int(index)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


def test_placement_spreads_replicas_and_rotates_leaders() -> None:
    run_script("""
        brokers 1 2 3
        create orders partitions=6 rf=3
        expect orders-0 replicas=1,2,3 isr=1,2,3 leader=1 leader_epoch=0 partition_epoch=0
        expect orders-1 replicas=2,3,1 leader=2
        expect orders-2 replicas=3,1,2 leader=3
        expect orders-3 replicas=1,3,2 leader=1   # wrapped around: followers shift by one
        expect orders-4 replicas=2,1,3 leader=2
        expect orders-5 replicas=3,2,1 leader=3
        create payments partitions=3 rf=2         # the next topic starts one broker later
        expect payments-0 replicas=2,3 isr=2,3 leader=2
        expect payments-1 replicas=3,1 leader=3
        expect payments-2 replicas=1,2 leader=1
    """)


def test_failover_return_and_preferred_rebalance() -> None:
    run_script("""
        brokers 1 2 3
        create orders partitions=1 rf=3
        stop 1                      # the leader's broker goes silent
        wait 9000
        expect broker 1 unfenced    # the session (9 s) has not expired yet
        expect orders-0 leader=1 leader_epoch=0
        wait 1000
        expect broker 1 fenced
        expect orders-0 leader=2 leader_epoch=1 isr=2,3 partition_epoch=1
        start 1                     # back, and caught up on metadata
        wait 1000
        expect broker 1 unfenced
        expect orders-0 leader=2 isr=2,3    # only the leader grows the ISR
        alter orders-0 by 2 isr=2,3,1 -> NONE
        expect orders-0 leader=2 leader_epoch=1 isr=2,3,1 partition_epoch=2
        wait 300000                 # leader.imbalance.check.interval.ms
        expect orders-0 leader=1 leader_epoch=2 isr=2,3,1 partition_epoch=3
    """)


def test_last_isr_member_fenced_goes_offline_then_returns_cleanly() -> None:
    run_script("""
        brokers 1 2 3
        create logs partitions=1 rf=3
        alter logs-0 by 1 isr=1 -> NONE     # the followers fell behind
        stop 1
        wait 10000
        expect broker 1 fenced
        expect logs-0 leader=-1 isr=1 leader_epoch=1 partition_epoch=2   # offline, ISR kept
        wait 60000
        expect logs-0 leader=-1 isr=1       # unclean election is off: it stays offline
        elect preferred logs-0 -> PREFERRED_LEADER_NOT_AVAILABLE
        start 1
        wait 1000
        expect logs-0 leader=1 isr=1 leader_epoch=2 partition_epoch=3 unclean=no
    """)


def test_unclean_election_elects_a_stale_live_replica() -> None:
    run_script("""
        brokers 1 2 3
        create logs partitions=1 rf=3
        alter logs-0 by 1 isr=1 -> NONE
        stop 1
        wait 10000
        expect logs-0 leader=-1 isr=1
        config logs unclean.leader.election.enable=true
        expect logs-0 leader=2 isr=2 leader_epoch=2 partition_epoch=3 unclean=yes
    """)


def test_unclean_topic_elects_at_once_when_the_last_isr_member_is_fenced() -> None:
    run_script("""
        brokers 1 2 3
        create logs partitions=1 rf=3 unclean.leader.election.enable=true
        alter logs-0 by 1 isr=1 -> NONE
        stop 1
        wait 10000
        expect logs-0 leader=2 isr=2 leader_epoch=1 partition_epoch=2 unclean=yes
    """)


def test_cluster_default_allows_unclean_election() -> None:
    run_script("""
        brokers 1 2
        create logs partitions=1 rf=2
        alter logs-0 by 1 isr=1 -> NONE
        stop 1
        wait 10000
        expect logs-0 leader=-1
        config cluster unclean.leader.election.enable=true
        expect logs-0 leader=2 isr=2 unclean=yes
    """)


def test_unclean_election_on_request_ignores_the_topic_setting() -> None:
    run_script("""
        brokers 1 2 3
        create logs partitions=1 rf=3
        elect unclean logs-0 -> ELECTION_NOT_NEEDED
        alter logs-0 by 1 isr=1 -> NONE
        stop 1
        wait 10000
        elect unclean logs-0 -> NONE
        expect logs-0 leader=2 isr=2 unclean=yes
    """)


# ---- AlterPartition ----


def _after_failover() -> Driver:
    """orders-0: replicas 1,2,3; broker 1 failed and came back fenced-by-request; broker 4 live.
    Leader 2, leader epoch 1, ISR 2,3, partition epoch 1.
    """
    driver = run_script("""
        brokers 1 2 3
        create orders partitions=1 rf=3
        stop 1
        wait 10000
        start 1
        wait 1000
        brokers 4
    """)
    driver.heartbeat(1, want_fence=True)
    assert driver.controller.image.brokers[1].fenced
    assert driver.partition("orders") == PartitionInfo((1, 2, 3), (2, 3), 2, 1, 1)
    return driver


ALTER_PARTITION_CASES = [
    # (why, sender, new ISR, overrides, expected error)
    ("stale broker epoch", 2, (2, 3), {"broker_epoch": 0}, "STALE_BROKER_EPOCH"),
    ("unknown broker", 9, (2, 3), {}, "STALE_BROKER_EPOCH"),
    ("old leader, old epoch", 1, (1, 2, 3), {"leader_epoch": 0}, "FENCED_LEADER_EPOCH"),
    ("epoch from the future", 2, (2,), {"leader_epoch": 2}, "FENCED_LEADER_EPOCH"),
    ("follower at the current epoch", 3, (3,), {}, "NOT_LEADER_OR_FOLLOWER"),
    ("stale partition epoch", 2, (2,), {"partition_epoch": 0}, "INVALID_UPDATE_VERSION"),
    ("future partition epoch", 2, (2,), {"partition_epoch": 7}, "INVALID_UPDATE_VERSION"),
    ("ISR without the leader", 2, (3,), {}, "INVALID_REQUEST"),
    ("repeated member", 2, (2, 2, 3), {}, "INVALID_REQUEST"),
    ("fenced member", 2, (2, 3, 1), {}, "INELIGIBLE_REPLICA"),
    ("not a replica", 2, (2, 3, 4), {}, "INELIGIBLE_REPLICA"),
]


@pytest.mark.parametrize(
    ("why", "sender", "isr", "overrides", "error"),
    ALTER_PARTITION_CASES,
    ids=[case[0] for case in ALTER_PARTITION_CASES],
)
def test_alter_partition_refused(
    why: str, sender: int, isr: tuple[int, ...], overrides: dict[str, int], error: str
) -> None:
    driver = _after_failover()
    before, records = driver.partition("orders"), len(driver.durable)
    response = driver.alter_isr("orders", 0, sender, isr, **overrides)
    assert response.error == ERROR_NAMES[error]
    assert len(driver.durable) == records  # nothing changed
    assert driver.partition("orders") == before
    assert (response.leader, response.leader_epoch, response.isr) == (2, 1, (2, 3))


def test_alter_partition_unknown_partition() -> None:
    driver = _after_failover()
    response = driver.call(
        AlterPartitionRequest,
        broker_id=2,
        broker_epoch=driver.epochs[2],
        topic="nope",
        partition=0,
        leader_epoch=0,
        new_isr=[2],
        partition_epoch=0,
    )
    assert response == AlterPartitionResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_alter_partition_accepted_and_idempotent() -> None:
    driver = _after_failover()
    response = driver.alter_isr("orders", 0, 2, (2,))
    assert response == AlterPartitionResponse(ErrorCode.NONE, 2, 1, (2,), 2)
    assert driver.durable[-1] == ChangePartition(
        "orders", 0, None, (2,), 1, 2, "AlterPartition from leader 2"
    )
    records = len(driver.durable)
    again = driver.alter_isr("orders", 0, 2, (2,))  # the ISR it already has: no record
    assert again == response and len(driver.durable) == records


# ---- brokers ----


def test_heartbeat_transition_table() -> None:
    for fenced, shutdown, fence, caught_up in itertools.product((False, True), repeat=4):
        action = heartbeat_action(fenced, shutdown, fence, caught_up)
        if shutdown:
            expected = BrokerAction.STAY if fenced else BrokerAction.SHUT_DOWN
        elif fence:
            expected = BrokerAction.STAY if fenced else BrokerAction.FENCE
        elif fenced:
            expected = BrokerAction.UNFENCE if caught_up else BrokerAction.STAY
        else:
            expected = BrokerAction.STAY
        assert action is expected, (fenced, shutdown, fence, caught_up)


def test_registration_starts_fenced_until_caught_up() -> None:
    driver = Driver()
    response = driver.register(1)
    assert response == RegisterBrokerResponse(ErrorCode.NONE, 0)
    assert driver.controller.image.brokers[1].fenced
    behind = driver.heartbeat(1, offset=-1)
    assert behind == BrokerHeartbeatResponse(ErrorCode.NONE, False, True, False)
    assert driver.heartbeat(1, offset=0, want_fence=True).is_fenced  # still starting up
    caught_up = driver.heartbeat(1, offset=0)
    assert caught_up == BrokerHeartbeatResponse(ErrorCode.NONE, True, False, False)


def test_heartbeat_errors() -> None:
    driver = Driver()
    driver.start_brokers([1])
    assert driver.heartbeat(1, offset=0).error == ErrorCode.NONE
    driver.epochs[1] -= 1
    assert driver.heartbeat(1).error == ErrorCode.STALE_BROKER_EPOCH
    driver.epochs[7] = 0
    assert driver.heartbeat(7).error == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_duplicate_registration_while_the_session_lives() -> None:
    driver = Driver()
    driver.start_brokers([1])
    duplicate = driver.register(1, incarnation="impostor")
    assert duplicate.error == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    retry = driver.register(1)  # the same incarnation may register again: a new epoch
    assert retry.error == ErrorCode.NONE and retry.broker_epoch > 0
    driver.heartbeating.discard(1)  # it stopped
    driver.wait(driver.config.broker_session_timeout_ms + 1)
    restarted = driver.register(1, incarnation="after-restart")
    assert restarted.error == ErrorCode.NONE and restarted.broker_epoch > retry.broker_epoch


def test_register_refuses_bad_input() -> None:
    driver = Driver()
    assert driver.register(-1).error == ErrorCode.INVALID_REQUEST
    bad_port = driver.call(RegisterBrokerRequest, broker_id=1, incarnation_id="i", host="h", port=0)
    assert bad_port.error == ErrorCode.INVALID_REQUEST
    assert driver.durable == []


def test_reregistering_leader_moves_its_leadership_first() -> None:
    driver = run_script("""
        brokers 1 2 3
        create orders partitions=1 rf=3
    """)
    # Brokers 2 and 3 heartbeat (the controller sees the time pass), no tick has run yet.
    driver.pass_time(driver.config.broker_session_timeout_ms + 1, beats=(2, 3))
    start = len(driver.durable)
    epoch = driver.register(1, incarnation="restarted").broker_epoch
    new_records = driver.durable[start:]
    assert [type(r) for r in new_records] == [ChangePartition, RegisterBroker]
    assert epoch == start + 1
    assert driver.partition("orders") == PartitionInfo((1, 2, 3), (2, 3), 2, 1, 1)
    assert driver.controller.image.brokers[1].fenced


def test_controlled_shutdown() -> None:
    driver = run_script("""
        brokers 1 2 3
        create orders partitions=3 rf=3
    """)
    behind = len(driver.durable) - 1  # broker 1 has applied everything so far
    first = driver.heartbeat(1, offset=behind, want_shutdown=True)
    # Fenced, leaderships moved, but it must apply those records before it stops.
    assert first == BrokerHeartbeatResponse(ErrorCode.NONE, True, True, False)
    assert isinstance(driver.durable[-1], FenceBroker)
    assert driver.controller.image.partitions_led_by(1) == []
    for _, _, state in driver.controller.image.iter_partitions():
        assert 1 not in state.isr and state.leader in (2, 3)
    second = driver.heartbeat(1, want_shutdown=True)  # caught up
    assert second == BrokerHeartbeatResponse(ErrorCode.NONE, True, True, True)


def test_restarted_controller_fences_silent_brokers_after_a_full_session() -> None:
    driver = run_script("brokers 1 2\ncreate t partitions=2 rf=2")
    image = MetadataImage()
    for offset, record in enumerate(driver.durable):
        image.apply(offset, record)
    restarted = Controller(driver.config, image, len(driver.durable))
    restarted.tick(1_000_000)
    ready = restarted.ready()
    assert ready.records == []
    restarted.advance(ready)
    for now_ms in range(1_000_100, 1_000_000 + driver.config.broker_session_timeout_ms, 100):
        restarted.tick(now_ms)  # every 100 ms, as the daemon ticks
        restarted.advance(restarted.ready())
    restarted.tick(1_000_000 + driver.config.broker_session_timeout_ms + 1)
    ready = restarted.ready()
    assert [r for r in ready.records if isinstance(r, FenceBroker)] == [
        FenceBroker(1, driver.epochs[1]),
        FenceBroker(2, driver.epochs[2]),
    ]
    restarted.advance(ready)
    assert all(s.leader == NO_LEADER for _, _, s in restarted.image.iter_partitions())


def test_a_process_exit_fences_at_once_and_its_successor_registers_at_once() -> None:
    driver = run_script("""
        brokers 1 2 3
        create orders partitions=3 rf=3
    """)
    led = driver.controller.image.partitions_led_by(1)
    assert led
    exited = driver.call(
        BrokerProcessExitedRequest, broker_id=1, incarnation_id=driver.incarnations[1]
    )
    assert exited.fenced
    image = driver.controller.image
    assert image.brokers[1].fenced and image.partitions_led_by(1) == []
    assert all(1 not in info.isr for _, _, info in image.iter_partitions())
    # Well inside broker.session.timeout.ms, the restarted process is not a duplicate.
    driver.now_ms += 100
    restarted = driver.register(1, incarnation="restarted")
    assert restarted.error == ErrorCode.NONE


def test_a_late_exit_notice_does_not_touch_the_next_incarnation() -> None:
    driver = run_script("brokers 1 2\ncreate t partitions=2 rf=2")
    driver.heartbeating.discard(1)  # its first process stopped
    driver.wait(driver.config.broker_session_timeout_ms + 1)
    driver.register(1, incarnation="second")
    driver.heartbeat(1)  # caught up: unfenced again
    assert not driver.controller.image.brokers[1].fenced
    late = driver.call(BrokerProcessExitedRequest, broker_id=1, incarnation_id="incarnation-1")
    assert not late.fenced
    assert not driver.controller.image.brokers[1].fenced
    # A second process with the same id is still refused while the session lives.
    assert driver.register(1, incarnation="impostor").error == (
        ErrorCode.DUPLICATE_BROKER_REGISTRATION
    )
    unknown = driver.call(BrokerProcessExitedRequest, broker_id=9, incarnation_id="x")
    assert not unknown.fenced


def test_time_the_controller_did_not_run_does_not_count_against_sessions() -> None:
    """A controller stalled past a session (a starved CPU, a SIGSTOP) fences nobody for its
    own absence; a broker still silent a full session after it is fenced."""
    driver = run_script("brokers 1 2\ncreate t partitions=2 rf=2")
    driver.heartbeating.discard(2)  # broker 2 dies during the stall
    driver.now_ms += 3 * driver.config.broker_session_timeout_ms  # the controller did not run
    assert driver.tick() == []
    assert not driver.controller.image.brokers[1].fenced
    start = len(driver.durable)
    driver.wait(driver.config.broker_session_timeout_ms + 1000)  # broker 1 heartbeats again
    fenced = [r for r in driver.durable[start:] if isinstance(r, FenceBroker)]
    assert fenced == [FenceBroker(2, driver.epochs[2])]
    assert not driver.controller.image.brokers[1].fenced
    assert driver.controller.image.brokers[2].fenced


def test_a_finished_controlled_shutdown_ends_the_session() -> None:
    driver = run_script("""
        brokers 1 2 3
        create orders partitions=3 rf=3
    """)
    driver.heartbeat(1, want_shutdown=True)
    assert driver.heartbeat(1, want_shutdown=True).should_shutdown
    driver.now_ms += 100
    assert driver.register(1, incarnation="after-clean-stop").error == ErrorCode.NONE


def test_a_restarted_controller_gives_fenced_brokers_no_session() -> None:
    """After a clean stop of the whole cluster every broker is fenced: the controller that
    starts next must let their new processes register at once."""
    driver = run_script("brokers 1 2\ncreate t partitions=2 rf=2")
    for broker_id in (1, 2):
        driver.heartbeat(broker_id, want_shutdown=True)
        driver.heartbeat(broker_id, want_shutdown=True)
    image = MetadataImage()
    for offset, record in enumerate(driver.durable):
        image.apply(offset, record)
    assert all(broker.fenced for broker in image.brokers.values())
    restarted = Controller(driver.config, image, len(driver.durable))
    restarted.step(
        RegisterBrokerRequest(
            token="t", broker_id=1, incarnation_id="new", host="localhost", port=9091
        ),
        1_000_000,
    )
    ready = restarted.ready()
    assert ready.responses[0][1].error == ErrorCode.NONE


def test_producer_id_blocks() -> None:
    driver = Driver()
    driver.start_brokers([1, 2])
    first = driver.call(AllocateProducerIdsRequest, broker_id=1, broker_epoch=driver.epochs[1])
    second = driver.call(AllocateProducerIdsRequest, broker_id=2, broker_epoch=driver.epochs[2])
    assert first == AllocateProducerIdsResponse(ErrorCode.NONE, 0, 1000)
    assert second == AllocateProducerIdsResponse(ErrorCode.NONE, 1000, 1000)
    stale = driver.call(AllocateProducerIdsRequest, broker_id=1, broker_epoch=-5)
    assert stale.error == ErrorCode.STALE_BROKER_EPOCH
    unknown = driver.call(AllocateProducerIdsRequest, broker_id=8, broker_epoch=0)
    assert unknown.error == ErrorCode.BROKER_ID_NOT_REGISTERED


# ---- topics ----


def _three_brokers_two_topics() -> Driver:
    return run_script("""
        brokers 1 2 3
        create orders partitions=1 rf=1
        create web.logs partitions=1 rf=1
    """)


CREATE_TOPIC_CASES: list[tuple[str, NewTopic, str]] = [
    ("exists", NewTopic("orders", 1, 1), "TOPIC_ALREADY_EXISTS"),
    ("bad character", NewTopic("bad name!", 1, 1), "INVALID_TOPIC_EXCEPTION"),
    ("empty name", NewTopic("", 1, 1), "INVALID_TOPIC_EXCEPTION"),
    ("dot", NewTopic(".", 1, 1), "INVALID_TOPIC_EXCEPTION"),
    ("too long", NewTopic("x" * 250, 1, 1), "INVALID_TOPIC_EXCEPTION"),
    ("metadata topic", NewTopic("__cluster_metadata", 1, 1), "INVALID_TOPIC_EXCEPTION"),
    ("collides . and _", NewTopic("web_logs", 1, 1), "INVALID_TOPIC_EXCEPTION"),
    ("no partitions", NewTopic("t", 0, 1), "INVALID_PARTITIONS"),
    ("too many partitions", NewTopic("t", 10_001, 1), "INVALID_PARTITIONS"),
    ("replication factor 0", NewTopic("t", 1, 0), "INVALID_REPLICATION_FACTOR"),
    ("more replicas than brokers", NewTopic("t", 1, 4), "INVALID_REPLICATION_FACTOR"),
    ("bad storage config", NewTopic("t", 1, 1, configs={"retention.ms": "x"}), "INVALID_CONFIG"),
    ("unknown config", NewTopic("t", 1, 1, configs={"nope": "1"}), "INVALID_CONFIG"),
    ("min.insync 0", NewTopic("t", 1, 1, configs={"min.insync.replicas": "0"}), "INVALID_CONFIG"),
    (
        "unclean not boolean",
        NewTopic("t", 1, 1, configs={"unclean.leader.election.enable": "maybe"}),
        "INVALID_CONFIG",
    ),
    ("counts and assignment", NewTopic("t", 1, -1, assignments={0: [1]}), "INVALID_REQUEST"),
    ("repeated replica", NewTopic("t", assignments={0: [1, 1]}), "INVALID_REPLICA_ASSIGNMENT"),
    ("unknown broker", NewTopic("t", assignments={0: [9]}), "INVALID_REPLICA_ASSIGNMENT"),
    ("partition gap", NewTopic("t", assignments={1: [1]}), "INVALID_REPLICA_ASSIGNMENT"),
    ("uneven", NewTopic("t", assignments={0: [1], 1: [1, 2]}), "INVALID_REPLICA_ASSIGNMENT"),
    ("empty replicas", NewTopic("t", assignments={0: []}), "INVALID_REPLICA_ASSIGNMENT"),
    ("empty assignment", NewTopic("t", assignments={}), "INVALID_REPLICA_ASSIGNMENT"),
]


@pytest.mark.parametrize(
    ("why", "topic", "error"), CREATE_TOPIC_CASES, ids=[case[0] for case in CREATE_TOPIC_CASES]
)
def test_create_topic_refused(why: str, topic: NewTopic, error: str) -> None:
    driver = _three_brokers_two_topics()
    records = len(driver.durable)
    result = driver.call(CreateTopicsRequest, topics=[topic]).topics[0]
    assert result.error == ERROR_NAMES[error], result
    assert result.message
    assert len(driver.durable) == records


def test_replication_factor_message_names_the_live_brokers() -> None:
    driver = run_script("brokers 1 2\nbrokers 3\nstop 3\nwait 10000")
    result = driver.create("t", 1, 3)
    assert result.message == "Replication factor: 3 larger than available brokers: 2."


def test_create_topic_defaults_validate_only_and_duplicates() -> None:
    driver = Driver(num_partitions=3, default_replication_factor=2)
    driver.start_brokers([1, 2, 3])
    dry = driver.call(CreateTopicsRequest, topics=[NewTopic("t")], validate_only=True)
    assert dry.topics[0].error == ErrorCode.NONE and dry.topics[0].topic_id is None
    assert (dry.topics[0].num_partitions, dry.topics[0].replication_factor) == (3, 2)
    assert "t" not in driver.controller.image.topics
    created = driver.create("t", -1, -1)
    assert (created.num_partitions, created.replication_factor) == (3, 2)
    topic = driver.controller.image.topics["t"]
    assert topic.topic_id == created.topic_id and len(topic.topic_id) == 32
    twice = driver.call(CreateTopicsRequest, topics=[NewTopic("u"), NewTopic("u")])
    assert [r.error for r in twice.topics] == [ErrorCode.INVALID_REQUEST] * 2
    assert "u" not in driver.controller.image.topics


def test_manual_assignment_leads_with_the_first_live_replica() -> None:
    driver = run_script("brokers 1 2 3\nstop 1\nwait 10000")
    result = driver.create("t", -1, -1, assignments={0: [1, 2], 1: [3, 1]})
    assert result.error == ErrorCode.NONE
    assert driver.partition("t", 0) == PartitionInfo((1, 2), (2,), 2, 0, 0)
    assert driver.partition("t", 1) == PartitionInfo((3, 1), (3,), 3, 0, 0)
    all_fenced = driver.create("u", -1, -1, assignments={0: [1]})
    assert all_fenced.error == ErrorCode.INVALID_REPLICA_ASSIGNMENT


def test_delete_and_recreate_topic() -> None:
    driver = run_script("brokers 1 2\ncreate t partitions=1 rf=2\nstop 1\nwait 10000")
    old_id = driver.controller.image.topics["t"].topic_id
    deleted = driver.call(DeleteTopicsRequest, names=["t", "nope"])
    assert deleted == DeleteTopicsResponse(
        [
            DeleteTopicResult("t", ErrorCode.NONE, old_id),
            DeleteTopicResult("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
    )
    assert "t" not in driver.controller.image.topics
    # The same name again: a new id, and epochs start over (a different partition).
    created = driver.create("t", 1, 1)
    assert created.topic_id != old_id
    assert driver.partition("t").leader_epoch == 0


def test_create_partitions() -> None:
    driver = run_script("brokers 1 2 3\ncreate t partitions=2 rf=2")
    grow = driver.call(CreatePartitionsRequest, topic="t", new_total=4)
    assert grow == ErrorResponse(ErrorCode.NONE)
    states = [driver.partition("t", index) for index in range(4)]
    assert [s.replicas for s in states] == [(1, 2), (2, 3), (3, 1), (1, 3)]
    assert all(s.isr == s.replicas and s.leader == s.replicas[0] for s in states)
    cases = [
        ({"topic": "t", "new_total": 4}, ErrorCode.INVALID_PARTITIONS),
        ({"topic": "t", "new_total": 10_001}, ErrorCode.INVALID_PARTITIONS),
        ({"topic": "nope", "new_total": 5}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ({"topic": "t", "new_total": 5, "validate_only": True}, ErrorCode.NONE),
    ]
    for fields, error in cases:
        records = len(driver.durable)
        assert driver.call(CreatePartitionsRequest, **fields).error == error, fields
        assert len(driver.durable) == records
    driver.heartbeating = {1}
    driver.wait(10000)
    short = driver.call(CreatePartitionsRequest, topic="t", new_total=5)
    assert short.error == ErrorCode.INVALID_REPLICATION_FACTOR


ALTER_CONFIG_CASES = [
    # (resource type, name, changes, expected error, records written)
    ("topic", "t", {"retention.ms": "1000"}, ErrorCode.NONE, 1),
    ("topic", "t", {"retention.ms": "1000", "min.insync.replicas": "3"}, ErrorCode.NONE, 2),
    ("topic", "t", {"min.insync.replicas": "2"}, ErrorCode.NONE, 0),  # already 2
    ("topic", "t", {"min.insync.replicas": None}, ErrorCode.NONE, 1),
    ("topic", "t", {"nothing.set": None}, ErrorCode.INVALID_CONFIG, 0),
    ("topic", "t", {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG, 0),
    ("topic", "nope", {"retention.ms": "1"}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0),
    ("broker", "", {"unclean.leader.election.enable": "true"}, ErrorCode.NONE, 1),
    ("broker", "", {"min.insync.replicas": "x"}, ErrorCode.INVALID_CONFIG, 0),
    ("broker", "", {"log.retention.ms": "1"}, ErrorCode.NONE, 1),  # Kafka's name of retention.ms
    ("broker", "", {"replica.lag.time.max.ms": "5000"}, ErrorCode.NONE, 1),
    ("broker", "", {"retention.ms": "soon"}, ErrorCode.INVALID_CONFIG, 0),
    ("broker", "", {"segment.bytes": "1048576"}, ErrorCode.INVALID_CONFIG, 0),  # static
    ("broker", "1", {"min.insync.replicas": "2"}, ErrorCode.INVALID_REQUEST, 0),
    ("group", "g", {"x": "y"}, ErrorCode.INVALID_REQUEST, 0),
]


@pytest.mark.parametrize(
    ("resource_type", "name", "changes", "error", "written"), ALTER_CONFIG_CASES
)
def test_alter_configs(
    resource_type: str, name: str, changes: dict[str, str | None], error: int, written: int
) -> None:
    driver = run_script("brokers 1\ncreate t partitions=1 rf=1 min.insync.replicas=2")
    records = len(driver.durable)
    response = driver.call(
        AlterConfigsRequest, resource_type=resource_type, resource_name=name, changes=changes
    )
    assert response.error == error, response
    assert len(driver.durable) - records == written
    dry = driver.call(
        AlterConfigsRequest,
        resource_type=resource_type,
        resource_name=name,
        changes={"min.insync.replicas": "3"},
        validate_only=True,
    )
    assert len(driver.durable) - records == written, dry


def test_alter_configs_nothing_set_removed_is_fine() -> None:
    driver = run_script("brokers 1\ncreate t partitions=1 rf=1")
    response = driver.call(
        AlterConfigsRequest,
        resource_type="topic",
        resource_name="t",
        changes={"retention.ms": None},
    )
    assert response.error == ErrorCode.NONE


def test_elect_leaders() -> None:
    driver = run_script("""
        brokers 1 2 3
        create t partitions=3 rf=3
        stop 1
        wait 10000
        start 1
        wait 1000
        alter t-0 by 2 isr=2,3,1 -> NONE
    """)
    # t-0 is led by 2 with its preferred replica 1 back in the ISR; t-1 and t-2 are led by
    # their preferred replicas. With no partitions named, only t-0 is reported.
    everything = driver.call(ElectLeadersRequest, kind="preferred", partitions=None)
    assert everything == ElectLeadersResponse([ElectionResult("t", 0, ErrorCode.NONE)])
    assert driver.partition("t", 0) == PartitionInfo((1, 2, 3), (2, 3, 1), 1, 2, 3)
    driver.heartbeating.discard(3)
    driver.wait(10000)  # broker 3 fenced: t-2 (replicas 3,1,2) moves to 2, t-0 keeps 1
    named = driver.call(
        ElectLeadersRequest,
        kind="preferred",
        partitions=[("t", 0), ("t", 2), ("t", 0), ("t", 9), ("nope", 0)],
    )
    assert [(r.topic, r.partition, r.error) for r in named.results] == [
        ("t", 0, ErrorCode.ELECTION_NOT_NEEDED),
        ("t", 2, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE),
        ("t", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    bad_kind = driver.call(ElectLeadersRequest, kind="random", partitions=[("t", 0)])
    assert bad_kind.results[0].error == ErrorCode.INVALID_REQUEST


def test_unclean_election_without_live_replicas() -> None:
    driver = run_script("""
        brokers 1 2
        create t partitions=1 rf=2
        alter t-0 by 1 isr=1 -> NONE
        stop 1
        stop 2
        wait 10000
        elect unclean t-0 -> ELIGIBLE_LEADERS_NOT_AVAILABLE
        expect t-0 leader=-1 isr=1
    """)
    assert driver.controller.image.live_brokers() == []


# ---- the Ready protocol: persist before send ----


def test_records_and_responses_come_out_together() -> None:
    driver = Driver()
    driver.start_brokers([1])
    controller = driver.controller
    controller.step(CreateTopicsRequest("create", [NewTopic("t", 2, 1)]), 0)
    assert "t" in controller.pending_image.topics  # the next request sees it ...
    assert "t" not in controller.image.topics  # ... but it is not committed
    controller.step(CreateTopicsRequest("again", [NewTopic("t", 1, 1)]), 0)
    assert controller.has_ready()
    ready = controller.ready()
    assert not controller.has_ready()
    assert ready.base_offset == len(driver.durable)
    assert [type(r).__name__ for r in ready.records] == [
        "CreateTopic",
        "CreatePartition",
        "CreatePartition",
    ]
    assert [(token, r.topics[0].error) for token, r in ready.responses] == [
        ("create", ErrorCode.NONE),
        ("again", ErrorCode.TOPIC_ALREADY_EXISTS),
    ]
    # Work arriving meanwhile waits for the next Ready.
    controller.step(DeleteTopicsRequest("delete", ["t"]), 0)
    with pytest.raises(AssertionError, match="advance"):
        controller.ready()
    controller.advance(ready)
    assert "t" in controller.image.topics
    follow_up = controller.ready()
    assert follow_up.base_offset == ready.base_offset + 3
    assert [token for token, _ in follow_up.responses] == ["delete"]
    controller.advance(follow_up)
    assert "t" not in controller.image.topics
    with pytest.raises(AssertionError):
        controller.advance(follow_up)  # twice


def test_empty_ready_and_tick_records_without_responses() -> None:
    driver = Driver()
    driver.start_brokers([1])
    ready = driver.controller.ready()
    assert ready.is_empty
    driver.controller.advance(ready)
    driver.heartbeating.discard(1)
    start = len(driver.durable)
    driver.wait(20_000 - driver.now_ms)
    assert driver.durable[start:] == [FenceBroker(1, driver.epochs[1])]


def test_the_clock_never_goes_back() -> None:
    controller = Controller(ControllerConfig(), MetadataImage(), 0)
    controller.tick(100)
    with pytest.raises(AssertionError, match="clock"):
        controller.tick(99)


# ---- placement ----


PLACEMENT_CASES = [
    # (brokers, partitions, RF, start, shift, expected)
    ([1], 3, 1, 0, 0, [(1,), (1,), (1,)]),
    ([1, 2], 2, 2, 0, 0, [(1, 2), (2, 1)]),
    ([1, 2, 3], 3, 2, 1, 0, [(2, 3), (3, 1), (1, 2)]),
    ([1, 2, 3, 4], 5, 3, 0, 1, [(1, 3, 4), (2, 4, 1), (3, 1, 2), (4, 2, 3), (1, 4, 2)]),
    ([5, 7, 9], 2, 3, 0, 0, [(5, 7, 9), (7, 9, 5)]),
]


@pytest.mark.parametrize(("brokers", "count", "rf", "start", "shift", "expected"), PLACEMENT_CASES)
def test_assign_replicas_table(
    brokers: list[int], count: int, rf: int, start: int, shift: int, expected: list[tuple[int]]
) -> None:
    assert assign_replicas(brokers, count, rf, start_index=start, replica_shift=shift) == expected


@given(
    st.lists(st.integers(0, 100), min_size=1, max_size=8, unique=True),
    st.integers(1, 40),
    st.data(),
)
def test_assignment_properties(brokers: list[int], count: int, data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    counter = data.draw(st.integers(0, 1000))
    start, shift = placement_seed(counter, len(brokers))
    assignment = assign_replicas(brokers, count, rf, start_index=start, replica_shift=shift)
    assert len(assignment) == count
    for replicas in assignment:
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(brokers)
    leaders = [replicas[0] for replicas in assignment]
    led = [leaders.count(broker) for broker in brokers]
    assert max(led) - min(led) <= 1  # preferred leaders rotate evenly


# ---- model-based: random steps never break the invariants ----


TOPICS = ("a", "b", "c")
BROKER_IDS = (1, 2, 3, 4)
_alter_operations = st.tuples(
    st.just("alter"),
    st.sampled_from(TOPICS),
    st.integers(0, 2),
    st.sampled_from(["shrink", "expand", "anything", "stale"]),
    st.integers(0, 3),  # which member or replica
)
operations = st.one_of(
    _alter_operations,  # ISR changes are common in life: weigh them up
    _alter_operations,
    st.tuples(st.just("register"), st.sampled_from(BROKER_IDS), st.booleans()),
    st.tuples(
        st.just("heartbeat"),
        st.sampled_from(BROKER_IDS),
        st.booleans(),  # caught up
        st.sampled_from(["normal", "normal", "fence", "shutdown"]),
    ),
    st.tuples(st.just("stop"), st.sampled_from(BROKER_IDS)),
    st.tuples(st.just("start"), st.sampled_from(BROKER_IDS)),
    st.tuples(st.just("wait"), st.sampled_from([500, 3000, 10_000])),
    st.tuples(
        st.just("create"),
        st.sampled_from(TOPICS),
        st.integers(1, 3),
        st.integers(1, 3),
        st.booleans(),  # unclean election allowed
    ),
    st.tuples(st.just("delete"), st.sampled_from(TOPICS)),
    st.tuples(st.just("elect"), st.sampled_from(["preferred", "unclean"])),
    st.tuples(st.just("unclean"), st.sampled_from([None, "true", "false"])),
    st.tuples(st.just("restart"), st.booleans()),
)


def _apply_operation(driver: Driver, operation: tuple[Any, ...]) -> None:
    kind, *args = operation
    if kind == "register":
        broker_id, new_incarnation = args
        incarnation = f"i{len(driver.durable)}" if new_incarnation else None
        driver.register(broker_id, incarnation)
    elif kind == "heartbeat" and args[0] in driver.epochs:
        broker_id, caught_up, wish = args
        driver.heartbeat(
            broker_id,
            offset=None if caught_up else driver.epochs[broker_id] - 1,
            want_fence=wish == "fence",
            want_shutdown=wish == "shutdown",
        )
    elif kind == "stop":
        driver.heartbeating.discard(args[0])
    elif kind == "start" and args[0] in driver.epochs:
        driver.heartbeating.add(args[0])
    elif kind == "wait":
        driver.wait(args[0])
    elif kind == "create":
        name, partitions, rf, unclean = args
        configs = {"unclean.leader.election.enable": "true"} if unclean else {}
        driver.create(name, partitions, rf, configs=configs)
    elif kind == "delete":
        driver.call(DeleteTopicsRequest, names=[args[0]])
    elif kind == "alter":
        _random_alter(driver, *args)
    elif kind == "elect":
        driver.call(ElectLeadersRequest, kind=args[0], partitions=None)
    elif kind == "unclean":
        changes = {"unclean.leader.election.enable": args[0]}
        driver.call(AlterConfigsRequest, resource_type="broker", resource_name="", changes=changes)
    elif kind == "restart":
        _restart(driver, lose_sessions=args[0])


def _random_alter(driver: Driver, topic: str, index: int, mode: str, pick: int) -> None:
    """The leader proposes a shrink or an expansion by one, or anything; or a stale proposal."""
    state = driver.controller.image.partition(topic, index)
    if state is None:
        return
    sender = (
        state.leader if state.leader != NO_LEADER else state.replicas[pick % len(state.replicas)]
    )
    isr = list(state.isr)
    if mode == "shrink":
        followers = [member for member in isr if member != sender]
        isr = (
            [member for member in isr if member != followers[pick % len(followers)]]
            if followers
            else isr
        )
    elif mode == "expand":
        outside = [replica for replica in state.replicas if replica not in isr]
        isr += [outside[pick % len(outside)]] if outside else []
    elif mode == "anything":
        isr = list(state.replicas[: pick % len(state.replicas) + 1])
    stale = mode == "stale"
    driver.alter_isr(
        topic,
        index,
        sender,
        isr,
        leader_epoch=state.leader_epoch - stale,
        partition_epoch=state.partition_epoch - stale,
    )


def _restart(driver: Driver, lose_sessions: bool) -> None:
    """A new controller from the durable log (replayed from scratch)."""
    image = MetadataImage()
    for offset, record in enumerate(driver.durable):
        image.apply(offset, record)
    assert image == driver.controller.image  # replay equals the incremental fold
    driver.controller = Controller(driver.config, image, len(driver.durable))
    if lose_sessions:
        driver.now_ms += driver.config.broker_session_timeout_ms // 2


def _check_liveness(
    image: MetadataImage, config: ControllerConfig, told: set[int] | None = None
) -> None:
    """No election is missed: a leaderless partition has no live ISR member (and, where unclean
    election is allowed, no live replica at all). A recovering partition waits for every
    replica's log end: once the brokers in `told` have all heartbeated, it has a replica that is
    not live or not among them.
    """
    default = "true" if config.unclean_leader_election_default else "false"
    for topic, _, state in image.iter_partitions():
        if state.leader != NO_LEADER:
            continue
        if state.recovering:
            if told is not None:
                assert not all(
                    image.is_live(replica) and replica in told for replica in state.replicas
                ), state
            continue
        assert not any(image.is_live(member) for member in state.isr), state
        if image.topic_config(topic, "unclean.leader.election.enable", default) == "true":
            assert not any(image.is_live(replica) for replica in state.replicas), state


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(operations, min_size=20, max_size=60))
def test_random_steps_keep_the_invariants(steps: list[tuple[Any, ...]]) -> None:
    """Controller.advance asserts the invariants (leader in ISR in replicas, no fenced leader,
    one leader per epoch, epochs never back); the driver checks each response against durable
    metadata; here we add replay == fold and that no possible election is left undone.
    """
    driver = Driver(leader_imbalance_check_interval_ms=20_000)
    driver.start_brokers([1, 2, 3])
    for operation in steps:
        _apply_operation(driver, operation)
        _check_liveness(driver.controller.image, driver.config)
    driver.wait(2 * HEARTBEAT_INTERVAL_MS)  # every heartbeating broker tells its log ends
    _check_liveness(driver.controller.image, driver.config, told=set(driver.heartbeating))
    _restart(driver, lose_sessions=False)


# ---- sans-IO ----


def test_controller_and_metadata_are_sans_io() -> None:
    forbidden = {"socket", "asyncio", "threading", "time", "random", "selectors", "uvloop", "os"}
    root = Path(__file__).resolve().parents[2] / "core"
    paths = [*(root / "controller").glob("*.py"), *(root / "metadata").glob("*.py")]
    assert len(paths) >= 10
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, (path.name, name)
                assert not name.startswith(("rlog.daemon", "rlog.cli")), (path.name, name)


def test_controller_over_a_real_metadata_log(tmp_path: Path) -> None:
    """The daemon's loop with the real log: append + fsync, then respond, then advance; a new
    controller replays the log and carries on at its end.
    """
    directory = str(tmp_path / METADATA_PARTITION_DIR)
    log = Log(directory, metadata_log_config(), RealFileSystem(), **LOG_START)
    controller = Controller(ControllerConfig(), replay(log), log.log_end_offset)
    controller.step(RegisterBrokerRequest("r", 1, "i", "localhost", 9091), 0)
    controller.step(BrokerHeartbeatRequest("h", 1, 0, 0), 0)
    controller.step(CreateTopicsRequest("c", [NewTopic("t", 2, 1)]), 0)
    ready = controller.ready()
    offsets = append_records(log, ready.records, 0, base_offset=ready.base_offset)
    assert offsets == list(range(len(ready.records))) and log.recovery_point == len(offsets)
    controller.advance(ready)
    log.close()
    reopened = Log(directory, metadata_log_config(), RealFileSystem(), **LOG_START)
    restarted = Controller(ControllerConfig(), replay(reopened), reopened.log_end_offset)
    assert restarted.image == controller.image
    restarted.step(AllocateProducerIdsRequest("p", 1, 0), 10)
    ready = restarted.ready()
    assert ready.base_offset == len(offsets)
    assert append_records(reopened, ready.records, 10, base_offset=ready.base_offset) == [
        len(offsets)
    ]
    restarted.advance(ready)
    assert replay(reopened) == restarted.image
    reopened.close()


# ---- unclean shutdown of the last ISR member (KIP-966's unclean recovery) ----


def _everyone_fenced_but_the_last_isr_member_kept() -> Driver:
    """RF 3, every broker's session expires: brokers 1 and 2 leave the ISR, broker 3 stays as
    its last member of a leaderless partition."""
    driver = run_script("""
        brokers 1 2 3
        create logs partitions=1 rf=3
        stop 1
        stop 2
        stop 3
        wait 10000
        expect logs-0 leader=-1
    """)
    assert driver.partition("logs").isr == (3,)
    return driver


def _register_after_restart(driver: Driver, broker_id: int, *, clean: bool) -> None:
    previous = driver.epochs[broker_id] if clean else -1
    response = driver.register(broker_id, f"restarted-{broker_id}", previous_broker_epoch=previous)
    assert response.error == ErrorCode.NONE


def _tell(driver: Driver, broker_id: int, last_epoch: int, end_offset: int) -> None:
    driver.heartbeat(broker_id, told=(ReplicaLogEnd("logs", 0, last_epoch, end_offset),))


def test_the_last_isr_member_back_from_a_crash_does_not_lead_on_its_own_word() -> None:
    """It may have lost its unsynced tail in the crash, so its ISR membership proves nothing:
    the partition recovers, and once every replica has told its log end the longest leads."""
    driver = _everyone_fenced_but_the_last_isr_member_kept()
    _register_after_restart(driver, 3, clean=False)
    state = driver.partition("logs")
    assert state.recovering and state.leader == -1 and state.isr == (3,)
    assert "unclean shutdown" in driver.last_change("logs", 0).reason
    _tell(driver, 3, 0, 5)  # unfenced, and told its (short) log: not enough on its own
    assert driver.partition("logs").leader == -1
    for broker_id in (1, 2):
        _register_after_restart(driver, broker_id, clean=False)
    _tell(driver, 1, 0, 9)
    assert driver.partition("logs").leader == -1, "broker 2 has not told its log end yet"
    _tell(driver, 2, 0, 7)
    state = driver.partition("logs")
    assert (state.leader, state.isr, state.recovering) == (1, (1,), False)
    change = driver.last_change("logs", 0)
    assert not change.unclean and "longest log" in change.reason


def test_recovery_prefers_the_later_epoch_over_the_longer_log() -> None:
    driver = _everyone_fenced_but_the_last_isr_member_kept()
    for broker_id in (3, 1, 2):
        _register_after_restart(driver, broker_id, clean=False)
    _tell(driver, 1, 0, 50)  # a long tail of an old epoch: never acknowledged under epoch 1
    _tell(driver, 2, 1, 20)
    _tell(driver, 3, 1, 20)
    state = driver.partition("logs")
    assert (state.leader, state.isr) == (2, (2,)), "epoch first; a tie goes to assignment order"


def test_a_report_from_an_earlier_registration_does_not_count() -> None:
    driver = _everyone_fenced_but_the_last_isr_member_kept()
    for broker_id in (3, 1, 2):
        _register_after_restart(driver, broker_id, clean=False)
    _tell(driver, 1, 0, 9)
    _tell(driver, 2, 0, 7)
    # Broker 1 crashed again: the log end it told before may no longer hold.
    _register_after_restart(driver, 1, clean=False)
    _tell(driver, 3, 0, 5)
    assert driver.partition("logs").leader == -1
    _tell(driver, 1, 0, 4)
    assert driver.partition("logs").leader == 2


def test_the_last_isr_member_back_from_a_clean_shutdown_leads_as_before() -> None:
    driver = _everyone_fenced_but_the_last_isr_member_kept()
    _register_after_restart(driver, 3, clean=True)
    assert not driver.partition("logs").recovering
    driver.heartbeat(3)  # caught up: unfenced, and the clean election brings it back
    state = driver.partition("logs")
    assert (state.leader, state.isr) == (3, (3,))


def test_an_operator_may_still_elect_a_recovering_partition_uncleanly() -> None:
    driver = _everyone_fenced_but_the_last_isr_member_kept()
    _register_after_restart(driver, 3, clean=False)
    driver.heartbeat(3)
    assert driver.partition("logs").leader == -1
    response = driver.call(ElectLeadersRequest, kind="unclean", partitions=[("logs", 0)])
    assert [r.error for r in response.results] == [ErrorCode.NONE]
    state = driver.partition("logs")
    assert (state.leader, state.recovering) == (3, False) and driver.last_change("logs", 0).unclean
