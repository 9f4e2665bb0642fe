"""Transactional offset commits (TxnOffsetCommit) in the group coordinator: pending until the
producer's transaction marker, committed or dropped by it, replayed from the log on load, and
wired through `GroupHosting` to a real partition log."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlog.core.broker.config import OFFSETS_TOPIC
from rlog.core.broker.group_hosting import GROUP_APIS, GroupHosting, Loaded
from rlog.core.broker.messages import AppendAnswer, Token
from rlog.core.groups import (
    Append,
    Caller,
    GroupConfig,
    GroupCoordinator,
    GroupEvent,
    GroupState,
    LoadedMarker,
    LoadedRecord,
    Respond,
)
from rlog.core.groups.records import GroupKey, OffsetKey, parse_key, parse_offset_value
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import CreatePartition, CreateTopic, RegisterBroker, UnfenceBroker
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import ControlType, build_end_txn_marker, decode_batch, iter_batches
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log

Body = dict[str, Any]
LogItem = LoadedRecord | LoadedMarker
GROUP = "payments"
TOPIC = "orders"
PRODUCER, EPOCH = 4000, 3
SESSION_MS = 10_000
PROTOCOLS = [{"name": "range", "metadata": b"sub"}]


def txn_body(
    offsets: dict[int, int],
    *,
    producer: int = PRODUCER,
    generation: int = -1,
    member_id: str = "",
    instance: str | None = None,
    metadata: str | None = None,
    topic: str = TOPIC,
    group: str = GROUP,
) -> Body:
    return {
        "transactional_id": f"txn-{producer}",
        "group_id": group,
        "producer_id": producer,
        "producer_epoch": EPOCH,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": instance,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "committed_offset": offset,
                        "committed_leader_epoch": 2,
                        "committed_metadata": metadata,
                    }
                    for partition, offset in offsets.items()
                ],
            }
        ],
    }


def on_the_wire(version: int, body: Body, kind: str = "Response") -> Body:
    """A TxnOffsetCommit body as the other side reads it: encoded at `version`, decoded again."""
    codec = codec_for(f"TxnOffsetCommit{kind}", version)
    encoded = codec.encode(body)
    decoded, end = codec.decode(encoded)
    assert end == len(encoded)
    return decoded


def errors_of(answer: Body) -> dict[tuple[str, int], ErrorCode]:
    return {
        (topic["name"], part["partition_index"]): ErrorCode(part["error_code"])
        for topic in answer["topics"]
        for part in topic["partitions"]
    }


class Driver:
    """The coordinator run as the broker runs it: each offsets partition a log of records and
    markers with offsets, acknowledgements that carry the batch's base offset."""

    def __init__(self, *, auto_ack: bool = True) -> None:
        ids = itertools.count(1)
        self.config = GroupConfig(offsets_partitions=4, initial_rebalance_delay_ms=0)
        self.coordinator = GroupCoordinator(self.config, lambda client: f"{client}-{next(ids)}")
        self.partition = self.coordinator.partition_for(GROUP)
        for partition in range(self.config.offsets_partitions):
            self.coordinator.start_loading(partition)
            self.coordinator.finish_loading(partition, [], 0)
        self.now = 1_000
        self.tokens = itertools.count(1)
        self.versions: dict[int, tuple[str, int]] = {}
        self.answers: dict[int, Body] = {}
        self.logs: dict[int, list[LogItem]] = {p: [] for p in range(self.config.offsets_partitions)}
        self.unacked: list[Append] = []
        self.auto_ack = auto_ack

    @property
    def log(self) -> list[LogItem]:
        return self.logs[self.partition]

    def run(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                assert effect.token not in self.answers, "answered twice"
                method, version = self.versions[effect.token]
                body = effect.body
                if method == "txn_offset_commit":
                    body = on_the_wire(version, body)
                self.answers[effect.token] = body
            elif isinstance(effect, GroupEvent):
                pass
            elif self.auto_ack:
                self.ack(effect)
            else:
                self.unacked.append(effect)

    def write(self, append: Append) -> int:
        """Put the batch in its partition's log; returns its base offset."""
        log = self.logs[append.partition]
        base = len(log)
        for index, (key, value) in enumerate(append.records):
            producer = append.producer_id if append.transactional else -1
            log.append(LoadedRecord(key, value, producer, append.transactional, base + index))
        return base

    def ack(self, append: Append, error: ErrorCode = ErrorCode.NONE) -> None:
        base = self.write(append) if error == ErrorCode.NONE else -1
        self.run(self.coordinator.append_done(append.append_id, error, self.now, base))

    def marker(self, committed: bool, producer: int = PRODUCER, partition: int = -1) -> None:
        """The broker writes the producer's marker to the partition, then tells the coordinator."""
        partition = self.partition if partition < 0 else partition
        log = self.logs[partition]
        log.append(LoadedMarker(producer, committed, len(log)))
        self.run(self.coordinator.complete_transaction(partition, producer, committed, self.now))

    def send(self, method: str, body: Body, version: int) -> int:
        token = next(self.tokens)
        self.versions[token] = (method, version)
        caller = Caller(token, version, "client", "/127.0.0.1")
        if method == "txn_offset_commit":
            body = on_the_wire(version, body, "Request")
        handle = getattr(self.coordinator, method)
        timed = method not in ("fetch_offsets", "describe_groups", "list_groups")
        self.run(handle(caller, body, self.now) if timed else handle(caller, body))
        return token

    def answer(self, token: int) -> Body:
        assert token in self.answers, f"request {token} is still waiting"
        return self.answers[token]

    def txn_commit(self, offsets: dict[int, int], version: int = 3, **kwargs: Any) -> int:
        return self.send("txn_offset_commit", txn_body(offsets, **kwargs), version)

    def txn_error(self, offsets: dict[int, int], version: int = 3, **kwargs: Any) -> ErrorCode:
        (error,) = set(errors_of(self.answer(self.txn_commit(offsets, version, **kwargs))).values())
        return error

    def commit(self, partition: int, offset: int) -> int:
        body = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": offset,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        return self.send("commit_offsets", body, 7)

    def committed(self, partition: int = 0) -> int:
        body = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [partition]}]}
        answer = self.answer(self.send("fetch_offsets", body, 5))
        return answer["topics"][0]["partitions"][0]["committed_offset"]

    def all_committed(self) -> list[tuple[str, int]]:
        """OffsetFetch v2+ with no topics: every partition with a committed offset."""
        answer = self.answer(self.send("fetch_offsets", {"group_id": GROUP, "topics": None}, 5))
        return [
            (t["name"], p["partition_index"]) for t in answer["topics"] for p in t["partitions"]
        ]

    def reload(self) -> GroupCoordinator:
        """A new coordinator takes the partition over and replays its log."""
        successor = GroupCoordinator(self.config, lambda client: f"{client}-new")
        for partition in range(self.config.offsets_partitions):
            successor.start_loading(partition)
            successor.finish_loading(partition, self.logs[partition], self.now)
        self.coordinator = successor
        return successor

    # ---- a member of a Stable group ----

    def stable_member(self, instance: str | None = None) -> tuple[str, int]:
        join = {
            "group_id": GROUP,
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": 30_000,
            "member_id": "",
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": PROTOCOLS,
        }
        first = self.answer(self.send("join_group", join, 5))
        if first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
            first = self.answer(
                self.send("join_group", join | {"member_id": first["member_id"]}, 5)
            )
        member, generation = first["member_id"], first["generation_id"]
        sync = {
            "group_id": GROUP,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": instance,
            "assignments": [{"member_id": member, "assignment": b"all"}],
        }
        assert self.answer(self.send("sync_group", sync, 3))["error_code"] == ErrorCode.NONE
        return member, generation


# ---- the live path ----


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_offsets_are_invisible_until_the_commit_marker(version: int) -> None:
    driver = Driver()
    answer = driver.answer(driver.txn_commit({0: 42, 1: 7}, version=version))
    assert errors_of(answer) == {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.NONE}
    assert driver.committed(0) == -1 and driver.all_committed() == []
    assert set(driver.coordinator.pending(GROUP)[PRODUCER]) == {(TOPIC, 0), (TOPIC, 1)}
    driver.marker(committed=True)
    assert (driver.committed(0), driver.committed(1)) == (42, 7)
    assert driver.coordinator.pending(GROUP) == {}
    committed = driver.coordinator.committed(GROUP)[(TOPIC, 0)]
    assert (committed.leader_epoch, committed.commit_timestamp) == (
        2 if version >= 2 else -1,
        driver.now,
    )


def test_an_abort_marker_drops_them() -> None:
    driver = Driver()
    driver.answer(driver.commit(0, 5))
    driver.answer(driver.txn_commit({0: 42}))
    driver.marker(committed=False)
    assert driver.committed(0) == 5
    assert driver.coordinator.pending(GROUP) == {}
    driver.marker(committed=True)  # a later marker of the producer finds nothing pending
    assert driver.committed(0) == 5


def test_the_offsets_are_one_transactional_batch_of_the_producer() -> None:
    driver = Driver(auto_ack=False)
    token = driver.txn_commit({0: 42, 3: 9}, metadata="why")
    assert token not in driver.answers  # answered once the ISR has the batch
    (append,) = driver.unacked
    assert (append.partition, append.producer_id, append.producer_epoch) == (
        driver.partition,
        PRODUCER,
        EPOCH,
    )
    assert append.transactional
    keys = [parse_key(key) for key, _ in append.records]
    assert keys == [OffsetKey(GROUP, TOPIC, 0), OffsetKey(GROUP, TOPIC, 3)]
    value = append.records[0][1]
    assert value is not None and parse_offset_value(value).metadata == "why"
    assert driver.coordinator.pending(GROUP) == {}  # not pending before it is written
    driver.ack(append)
    assert errors_of(driver.answer(token)) == {
        (TOPIC, 0): ErrorCode.NONE,
        (TOPIC, 3): ErrorCode.NONE,
    }
    assert set(driver.coordinator.pending(GROUP)[PRODUCER]) == {(TOPIC, 0), (TOPIC, 3)}


@pytest.mark.parametrize(
    ("written", "answered"),
    [
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.INVALID_COMMIT_OFFSET_SIZE),
        (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH),
    ],
)
def test_a_failed_write_answers_the_mapped_error_and_leaves_nothing_pending(
    written: ErrorCode, answered: ErrorCode
) -> None:
    driver = Driver(auto_ack=False)
    token = driver.txn_commit({0: 42})
    driver.ack(driver.unacked.pop(), written)
    assert errors_of(driver.answer(token)) == {(TOPIC, 0): answered}
    assert driver.coordinator.pending(GROUP) == {}
    driver.marker(committed=True)
    assert driver.committed(0) == -1


def test_a_regular_commit_written_after_the_transactional_one_wins() -> None:
    driver = Driver()
    driver.answer(driver.txn_commit({0: 10, 1: 10}))
    driver.answer(driver.commit(0, 20))  # later in the log than the transactional record
    driver.marker(committed=True)
    assert (driver.committed(0), driver.committed(1)) == (20, 10)
    driver.answer(driver.commit(1, 30))  # after the marker: a plain overwrite
    assert driver.committed(1) == 30
    # The replayed log agrees with the live coordinator.
    driver.reload()
    assert (driver.committed(0), driver.committed(1)) == (20, 30)


def test_a_transactional_commit_written_after_a_regular_one_wins() -> None:
    driver = Driver()
    driver.answer(driver.commit(0, 20))
    driver.answer(driver.txn_commit({0: 10}))  # an older position, but written later
    assert driver.committed(0) == 20
    driver.marker(committed=True)
    assert driver.committed(0) == 10
    driver.reload()
    assert driver.committed(0) == 10


def test_the_positions_decide_whatever_order_the_acknowledgements_come_in() -> None:
    driver = Driver(auto_ack=False)
    txn = driver.txn_commit({0: 10})
    regular = driver.commit(0, 20)
    txn_write, regular_write = driver.unacked
    base = driver.write(txn_write)
    assert driver.write(regular_write) == base + 1
    # The marker arrives after both writes are in the log, before either is acknowledged.
    driver.marker(committed=True)
    driver.run(driver.coordinator.append_done(regular_write.append_id, ErrorCode.NONE, 0, base + 1))
    driver.run(driver.coordinator.append_done(txn_write.append_id, ErrorCode.NONE, 0, base))
    assert {errors_of(driver.answer(t))[(TOPIC, 0)] for t in (txn, regular)} == {ErrorCode.NONE}
    assert driver.committed(0) == 20
    assert driver.coordinator.pending(GROUP) == {}


@pytest.mark.parametrize("committed", [True, False])
def test_a_marker_that_comes_before_the_acknowledgement_still_ends_the_write(
    committed: bool,
) -> None:
    driver = Driver(auto_ack=False)
    token = driver.txn_commit({0: 42})
    (append,) = driver.unacked
    base = driver.write(append)  # in the log, not yet acknowledged by the ISR
    driver.marker(committed)
    driver.run(driver.coordinator.append_done(append.append_id, ErrorCode.NONE, 0, base))
    assert errors_of(driver.answer(token)) == {(TOPIC, 0): ErrorCode.NONE}
    assert driver.committed(0) == (42 if committed else -1)
    assert driver.coordinator.pending(GROUP) == {}


def test_a_marker_ends_only_that_producers_offsets_in_that_partition() -> None:
    driver = Driver()
    other_group = next(
        f"g{i}"
        for i in itertools.count()
        if driver.coordinator.partition_for(f"g{i}") != driver.partition
    )
    driver.answer(driver.txn_commit({0: 1}))
    driver.answer(driver.txn_commit({1: 2}, producer=PRODUCER + 1))
    driver.answer(driver.txn_commit({0: 3}, group=other_group))
    driver.marker(committed=True)
    assert driver.committed(0) == 1 and driver.committed(1) == -1
    assert set(driver.coordinator.pending(GROUP)) == {PRODUCER + 1}
    assert set(driver.coordinator.pending(other_group)) == {PRODUCER}
    other = driver.coordinator.partition_for(other_group)
    driver.marker(committed=True, partition=other)
    assert driver.coordinator.committed(other_group)[(TOPIC, 0)].offset == 3


def test_a_producer_creates_an_empty_group() -> None:
    driver = Driver()
    assert driver.txn_error({0: 42}) == ErrorCode.NONE
    group = driver.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.EMPTY and not group.members
    listed = driver.answer(driver.send("list_groups", {}, 2))["groups"]
    assert [g["group_id"] for g in listed] == [GROUP]


# ---- who may commit ----


def test_v3_checks_the_members_generation() -> None:
    driver = Driver()
    member, generation = driver.stable_member()
    good = {"generation": generation, "member_id": member}
    assert driver.txn_error({0: 1}, **good) == ErrorCode.NONE
    stale = driver.txn_error({0: 1}, generation=generation - 1, member_id=member)
    assert stale == ErrorCode.ILLEGAL_GENERATION
    unknown = driver.txn_error({0: 1}, generation=generation, member_id="stranger")
    assert unknown == ErrorCode.UNKNOWN_MEMBER_ID
    nameless = driver.txn_error({0: 1}, generation=generation)
    assert nameless == ErrorCode.UNKNOWN_MEMBER_ID
    # Versions before 3 carry no member: a producer may commit to a group that has members.
    assert driver.txn_error({0: 1}, version=2) == ErrorCode.NONE
    assert driver.txn_error({0: 1}) == ErrorCode.NONE  # v3 without member and generation


def test_v3_fences_a_replaced_static_member() -> None:
    driver = Driver()
    member, generation = driver.stable_member(instance="host-a")
    ok = driver.txn_error({0: 1}, generation=generation, member_id=member, instance="host-a")
    assert ok == ErrorCode.NONE
    fenced = driver.txn_error({0: 1}, generation=generation, member_id="old", instance="host-a")
    assert fenced == ErrorCode.FENCED_INSTANCE_ID
    unknown = driver.txn_error({0: 1}, generation=generation, member_id=member, instance="host-b")
    assert unknown == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_generation_for_a_group_that_does_not_exist_is_illegal() -> None:
    driver = Driver()
    assert driver.txn_error({0: 1}, generation=1, member_id="m") == ErrorCode.ILLEGAL_GENERATION
    assert driver.coordinator.group(GROUP) is None


def test_a_rebalance_in_progress_does_not_stop_a_transactional_commit() -> None:
    driver = Driver()
    member, generation = driver.stable_member()
    body = {
        "group_id": GROUP,
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": 30_000,
        "member_id": member,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"new subscription"}],
    }
    driver.send("join_group", body, 5)  # alone: straight to CompletingRebalance
    group = driver.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.COMPLETING_REBALANCE
    ok = driver.txn_error({0: 1}, generation=generation + 1, member_id=member)
    assert ok == ErrorCode.NONE


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_coordinator_errors_per_version(version: int) -> None:
    driver = Driver()
    driver.run(driver.coordinator.unload(driver.partition))
    assert driver.txn_error({0: 1}, version) == ErrorCode.NOT_COORDINATOR
    driver.coordinator.start_loading(driver.partition)
    loading = driver.txn_error({0: 1}, version)
    # Producers before 2.0 (v0, v1) cannot handle COORDINATOR_LOAD_IN_PROGRESS here.
    expected = (
        ErrorCode.COORDINATOR_NOT_AVAILABLE
        if version < 2
        else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    )
    assert loading == expected
    driver.coordinator.finish_loading(driver.partition, [], driver.now)
    assert driver.txn_error({0: 1}, version, group="") == ErrorCode.INVALID_GROUP_ID


def test_metadata_too_large_is_refused_per_partition() -> None:
    driver = Driver()
    body = txn_body({0: 1})
    body["topics"][0]["partitions"].append(
        {"partition_index": 1, "committed_offset": 2, "committed_metadata": "x" * 5000}
    )
    answer = driver.answer(driver.send("txn_offset_commit", body, 3))
    assert errors_of(answer) == {
        (TOPIC, 0): ErrorCode.NONE,
        (TOPIC, 1): ErrorCode.OFFSET_METADATA_TOO_LARGE,
    }
    assert set(driver.coordinator.pending(GROUP)[PRODUCER]) == {(TOPIC, 0)}
    only_large = driver.txn_error({2: 1}, metadata="x" * 5000)
    assert only_large == ErrorCode.OFFSET_METADATA_TOO_LARGE


# ---- loading, unloading, deleting ----


def test_loading_replays_the_markers() -> None:
    driver = Driver()
    driver.answer(driver.commit(3, 1))
    driver.answer(driver.txn_commit({0: 10}, producer=1))
    driver.answer(driver.txn_commit({1: 11}, producer=2))
    driver.answer(driver.txn_commit({2: 12}, producer=3))
    driver.marker(committed=True, producer=1)
    driver.marker(committed=False, producer=2)  # producer 3's marker is not written yet
    successor = GroupCoordinator(driver.config, str)
    successor.start_loading(driver.partition)
    summary = successor.finish_loading(driver.partition, driver.log, driver.now)
    assert (summary.groups, summary.offsets, summary.pending_offsets) == (1, 2, 1)
    driver.coordinator = successor
    assert [driver.committed(p) for p in range(4)] == [10, -1, -1, 1]
    assert set(successor.pending(GROUP)) == {3}
    driver.marker(committed=True, producer=3)  # the transaction coordinator finishes it
    assert driver.committed(2) == 12
    assert successor.pending(GROUP) == {}


def test_a_group_with_only_aborted_offsets_is_loaded_as_the_live_one_had_it() -> None:
    driver = Driver()
    driver.answer(driver.txn_commit({0: 10}))
    driver.marker(committed=False)
    live = driver.coordinator.group(GROUP)
    assert live is not None and live.state == GroupState.EMPTY
    reloaded = driver.reload().group(GROUP)
    assert reloaded is not None and reloaded.state == GroupState.EMPTY


def test_unloading_forgets_the_pending_offsets_and_loading_finds_them_again() -> None:
    driver = Driver()
    driver.answer(driver.txn_commit({0: 10}))
    driver.run(driver.coordinator.unload(driver.partition))
    assert driver.coordinator.pending(GROUP) == {}
    driver.coordinator.start_loading(driver.partition)
    driver.coordinator.finish_loading(driver.partition, driver.log, driver.now)
    assert set(driver.coordinator.pending(GROUP)) == {PRODUCER}
    driver.marker(committed=True)
    assert driver.committed(0) == 10


def test_a_write_that_outlived_its_coordinator_leaves_the_reloaded_pending_offsets_alone() -> None:
    driver = Driver(auto_ack=False)
    token = driver.txn_commit({0: 10})
    (append,) = driver.unacked
    base = driver.write(append)
    driver.run(driver.coordinator.unload(driver.partition))
    driver.coordinator.start_loading(driver.partition)
    driver.coordinator.finish_loading(driver.partition, driver.log, driver.now)
    driver.run(driver.coordinator.append_done(append.append_id, ErrorCode.NONE, 0, base))
    assert errors_of(driver.answer(token)) == {(TOPIC, 0): ErrorCode.NOT_COORDINATOR}
    assert set(driver.coordinator.pending(GROUP)) == {PRODUCER}
    driver.marker(committed=True)
    assert driver.committed(0) == 10


def test_deleting_a_group_drops_its_pending_offsets_for_good() -> None:
    driver = Driver()
    driver.answer(driver.commit(0, 5))
    driver.answer(driver.txn_commit({0: 10, 1: 11}))
    results = driver.answer(driver.send("delete_groups", {"groups_names": [GROUP]}, 2))["results"]
    assert results == [{"group_id": GROUP, "error_code": ErrorCode.NONE}]
    tombstones = [parse_key(r.key) for r in driver.log[-3:] if isinstance(r, LoadedRecord)]
    assert tombstones == [GroupKey(GROUP), OffsetKey(GROUP, TOPIC, 0), OffsetKey(GROUP, TOPIC, 1)]
    assert driver.coordinator.pending(GROUP) == {}
    driver.marker(committed=True)  # the transaction commits after the group was deleted
    assert driver.coordinator.group(GROUP) is None
    assert driver.committed(0) == driver.committed(1) == -1
    reloaded = driver.reload()
    assert reloaded.group(GROUP) is None and reloaded.pending(GROUP) == {}


def test_deleting_a_group_covers_a_transactional_write_still_in_flight() -> None:
    driver = Driver(auto_ack=False)
    token = driver.txn_commit({0: 10})
    (txn_write,) = driver.unacked
    base = driver.write(txn_write)
    driver.unacked.clear()
    delete = driver.send("delete_groups", {"groups_names": [GROUP]}, 2)
    (tombstones,) = driver.unacked
    assert [parse_key(key) for key, _ in tombstones.records] == [
        GroupKey(GROUP),
        OffsetKey(GROUP, TOPIC, 0),
    ]
    driver.ack(tombstones)
    assert driver.answer(delete)["results"][0]["error_code"] == ErrorCode.NONE
    driver.marker(committed=True)
    driver.run(driver.coordinator.append_done(txn_write.append_id, ErrorCode.NONE, 0, base))
    assert errors_of(driver.answer(token)) == {(TOPIC, 0): ErrorCode.NONE}
    assert driver.coordinator.committed(GROUP) == {} and driver.coordinator.pending(GROUP) == {}
    assert driver.reload().committed(GROUP) == {}


def test_plain_key_value_pairs_still_load() -> None:
    driver = Driver()
    driver.answer(driver.commit(0, 5))
    pairs = [(r.key, r.value) for r in driver.log if isinstance(r, LoadedRecord)]
    successor = GroupCoordinator(driver.config, str)
    successor.start_loading(driver.partition)
    summary = successor.finish_loading(driver.partition, pairs, driver.now)
    assert (summary.groups, summary.offsets) == (1, 1)
    assert successor.committed(GROUP)[(TOPIC, 0)].offset == 5


# ---- through GroupHosting, on a real log ----


@dataclass
class FakeReplica:
    log: Log
    is_leader: bool = True
    leader_epoch: int = 0


class Hosting:
    """GroupHosting over one offsets partition whose log is a real `Log`; appends are written
    there and acknowledged at once."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = Log(str(tmp_path / f"{OFFSETS_TOPIC}-0"), LogConfig(), RealFileSystem(),
            recovery_point=0, log_start_offset=0, now_ms=0,
        )  # fmt: skip
        self.image = MetadataImage()
        records = [
            RegisterBroker(1, "x", 0, "h", 1, None),
            UnfenceBroker(1, 0),
            CreateTopic(OFFSETS_TOPIC, "a" * 32, {}),
            CreatePartition(OFFSETS_TOPIC, 0, (1,), (1,), 1, 0, 0),
            CreateTopic(TOPIC, "b" * 32, {}),
            CreatePartition(TOPIC, 0, (1,), (1,), 1, 0, 0),
        ]
        for offset, record in enumerate(records):
            self.image.apply(offset, record)
        self.answers: dict[Token, Body] = {}
        self.now = 5_000
        self.hosting = self.start()

    def start(self) -> GroupHosting:
        hosting = GroupHosting(GroupConfig(offsets_partitions=1), str, self.write, self.respond)
        hosting.observe_clock(self.now)
        hosting.on_metadata(self.image, self.replica, self.now)
        return hosting

    def replica(self, partition: int) -> Any:  # the parts of a `Replica` loading reads
        return FakeReplica(self.log)

    def write(self, partition: int, batch: bytes, on_done: Any) -> None:
        info = self.log.append(batch, self.now)
        on_done(AppendAnswer(ErrorCode.NONE, base_offset=info.first_offset))

    def respond(self, token: Token, body: Body) -> None:
        self.answers[token] = body

    def serve(self, api_key: ApiKey, version: int, body: Body) -> Body:
        token = ("client", len(self.answers))
        if api_key == ApiKey.TXN_OFFSET_COMMIT:
            body = on_the_wire(version, body, "Request")
        self.hosting.serve(token, api_key, version, body, "c", "/h", self.image, self.now)
        return self.answers[token]

    def committed(self) -> int:
        body = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
        answer = self.serve(ApiKey.OFFSET_FETCH, 5, body)
        return answer["topics"][0]["partitions"][0]["committed_offset"]

    def marker(self, committed: bool) -> None:
        control = ControlType.COMMIT if committed else ControlType.ABORT
        marker = build_end_txn_marker(
            control, producer_id=PRODUCER, producer_epoch=EPOCH, coordinator_epoch=0,
            timestamp_ms=self.now,
        )  # fmt: skip
        self.log.append(marker, self.now)
        self.hosting.complete_transaction(0, PRODUCER, committed, self.now)


def test_hosting_serves_txn_offset_commit() -> None:
    assert GROUP_APIS[ApiKey.TXN_OFFSET_COMMIT] == ("txn_offset_commit", True)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_hosting_writes_a_transactional_batch_and_refuses_unknown_topics(
    tmp_path: Path, version: int
) -> None:
    host = Hosting(tmp_path)
    body = txn_body({0: 42, 9: 1})
    body["topics"].append(txn_body({0: 1}, topic="nope")["topics"][0])
    answer = on_the_wire(version, host.serve(ApiKey.TXN_OFFSET_COMMIT, version, body))
    assert errors_of(answer) == {
        (TOPIC, 0): ErrorCode.NONE,
        (TOPIC, 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    data = host.log.read(0, 1 << 20, host.log.log_end_offset).records
    assert data is not None
    buffer = data.read()
    [(position, header)] = list(iter_batches(buffer))
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        PRODUCER,
        EPOCH,
        -1,
    )
    [record] = decode_batch(buffer, position)
    assert record.key is not None and parse_key(record.key) == OffsetKey(GROUP, TOPIC, 0)
    assert host.committed() == -1
    host.marker(committed=True)
    assert host.committed() == 42


def test_hosting_answers_only_refusals_without_asking_the_coordinator(tmp_path: Path) -> None:
    host = Hosting(tmp_path)
    answer = host.serve(ApiKey.TXN_OFFSET_COMMIT, 3, txn_body({0: 1}, topic="nope"))
    assert errors_of(on_the_wire(3, answer)) == {("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert host.log.log_end_offset == 0


@pytest.mark.parametrize("committed", [True, False])
def test_hosting_loads_markers_from_the_log(tmp_path: Path, committed: bool) -> None:
    host = Hosting(tmp_path)
    host.serve(ApiKey.OFFSET_COMMIT, 7, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}],
    })  # fmt: skip
    host.serve(ApiKey.TXN_OFFSET_COMMIT, 3, txn_body({0: 42}))
    host.log.append(
        build_end_txn_marker(
            ControlType.COMMIT if committed else ControlType.ABORT,
            producer_id=PRODUCER, producer_epoch=EPOCH, coordinator_epoch=0,
            timestamp_ms=host.now,
        ),
        host.now,
    )  # fmt: skip
    host.hosting = host.start()  # a new broker leads the partition: it replays the log
    assert host.committed() == (42 if committed else 5)
    assert host.hosting.coordinator.pending(GROUP) == {}


def test_hosting_loads_an_unmarked_transaction_as_pending(tmp_path: Path) -> None:
    host = Hosting(tmp_path)
    host.serve(ApiKey.TXN_OFFSET_COMMIT, 3, txn_body({0: 42}))
    host.hosting = host.start()
    assert host.committed() == -1
    assert set(host.hosting.coordinator.pending(GROUP)) == {PRODUCER}
    (loaded,) = host.hosting.loaded
    assert isinstance(loaded, Loaded) and loaded.summary.pending_offsets == 1
    host.marker(committed=True)
    assert host.committed() == 42


# ---- OffsetFetch v7+ (require_stable) and v8+ (several groups) ----


def fetch_wire(driver: Driver, version: int, body: Body) -> Body:
    """An OffsetFetch through the codec both ways, as a client at `version` sees it."""
    request_codec = codec_for("OffsetFetchRequest", version)
    decoded, _ = request_codec.decode(request_codec.encode(body))
    token = driver.send("fetch_offsets", decoded, version)
    response_codec = codec_for("OffsetFetchResponse", version)
    answer, _ = response_codec.decode(response_codec.encode(driver.answer(token)))
    return answer


def test_require_stable_answers_unstable_while_a_transaction_holds_the_offset() -> None:
    driver = Driver()
    driver.answer(driver.commit(0, 5))
    driver.answer(driver.txn_commit({0: 42}))
    asked = {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    relaxed = fetch_wire(driver, 7, asked | {"require_stable": False})
    stable = fetch_wire(driver, 7, asked | {"require_stable": True})
    assert relaxed["topics"][0]["partitions"][0]["committed_offset"] == 5
    (part,) = stable["topics"][0]["partitions"]
    assert (part["error_code"], part["committed_offset"]) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    driver.marker(committed=True)
    after = fetch_wire(driver, 7, asked | {"require_stable": True})
    assert after["topics"][0]["partitions"][0]["committed_offset"] == 42


@pytest.mark.parametrize("version", [8, 9])
def test_one_offset_fetch_asks_for_several_groups_each_with_its_own_error(version: int) -> None:
    driver = Driver()
    driver.answer(driver.commit(0, 5))
    driver.answer(driver.commit(1, 9))
    elsewhere = "other-group"
    driver.coordinator.unload(driver.coordinator.partition_for(elsewhere))
    member = {"member_id": "", "member_epoch": -1} if version >= 9 else {}
    body = {
        "groups": [
            {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [1]}], **member},
            {"group_id": GROUP, "topics": None, **member},
            {"group_id": elsewhere, "topics": None, **member},
        ],
        "require_stable": True,
    }
    answer = fetch_wire(driver, version, body)
    one, every, other = answer["groups"]
    assert (one["group_id"], one["error_code"]) == (GROUP, ErrorCode.NONE)
    assert [p["committed_offset"] for p in one["topics"][0]["partitions"]] == [9]
    assert [
        (p["partition_index"], p["committed_offset"]) for p in every["topics"][0]["partitions"]
    ] == [(0, 5), (1, 9)]
    assert (other["group_id"], other["error_code"]) == (elsewhere, ErrorCode.NOT_COORDINATOR)
