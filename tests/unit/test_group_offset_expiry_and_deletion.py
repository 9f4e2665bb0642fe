"""The group coordinator's offset housekeeping, as Kafka's: OffsetDelete, the offsets of a
deleted topic, and expiry after offsets.retention.minutes (KIP-211). Each deletion is a
tombstone in the log, so a coordinator that replays the log afterwards agrees."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlog.core.broker.config import OFFSETS_TOPIC
from rlog.core.broker.group_hosting import GROUP_APIS, GroupHosting
from rlog.core.broker.messages import AppendAnswer, Token
from rlog.core.groups import (
    Append,
    Caller,
    GroupConfig,
    GroupCoordinator,
    GroupEvent,
    LoadedMarker,
    LoadedRecord,
    Respond,
)
from rlog.core.groups.group import subscription_topics
from rlog.core.groups.records import (
    CommittedOffset,
    GroupKey,
    OffsetKey,
    offset_value,
    parse_key,
    parse_offset_value,
)
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log
from rlog.daemon.broker.groups import group_config
from rlog.daemon.config import ConfigError, broker_settings

Body = dict[str, Any]
LogItem = LoadedRecord | LoadedMarker
GROUP = "billing"
ORDERS, REFUNDS = "orders", "refunds"
MINUTE = 60_000
RETENTION_MS = 60 * MINUTE
CHECK_MS = 5 * MINUTE
SESSION_MS = 10_000
LONG_SESSION_MS = 20 * MINUTE  # outlives a check interval
PRODUCER = 7_000


def subscription(*topics: str, version: int = 1) -> bytes:
    """A consumer protocol subscription (ConsumerProtocolSubscription), as Java, librdkafka and
    kafka-python send it in JoinGroup."""
    out = struct.pack(">hi", version, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", -1)  # user_data: null
    if version >= 1:
        out += struct.pack(">i", 0)  # owned_partitions: none
    return out


def on_the_wire(body: Body, kind: str = "Response") -> Body:
    """An OffsetDelete v0 body as the other side reads it: encoded, decoded again."""
    codec = codec_for(f"OffsetDelete{kind}", 0)
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


def delete_body(topics: dict[str, list[int]], group: str = GROUP) -> Body:
    return {
        "group_id": group,
        "topics": [
            {"name": name, "partitions": [{"partition_index": p} for p in partitions]}
            for name, partitions in topics.items()
        ],
    }


class Driver:
    """A coordinator run as the broker runs it: a log per offsets partition, acknowledgements
    in log order with the batch's base offset, a clock that only moves when told."""

    def __init__(self, *, auto_ack: bool = True, **settings: int) -> None:
        self.config = GroupConfig(
            offsets_partitions=2,
            initial_rebalance_delay_ms=0,
            offsets_retention_ms=RETENTION_MS,
            offsets_retention_check_interval_ms=CHECK_MS,
            **settings,
        )
        self.ids = itertools.count(1)
        self.now = 1_000
        self.logs: dict[int, list[LogItem]] = {p: [] for p in range(self.config.offsets_partitions)}
        self.coordinator = self.reload()
        self.partition = self.coordinator.partition_for(GROUP)
        self.tokens = itertools.count(1)
        self.answers: dict[int, Body] = {}
        self.unacked: list[Append] = []
        self.auto_ack = auto_ack

    @property
    def log(self) -> list[LogItem]:
        return self.logs[self.partition]

    def reload(self) -> GroupCoordinator:
        """A new coordinator takes every partition over and replays its log (a failover)."""
        coordinator = GroupCoordinator(self.config, lambda client: f"{client}-{next(self.ids)}")
        for partition, log in self.logs.items():
            coordinator.start_loading(partition)
            coordinator.finish_loading(partition, list(log), self.now)
        self.coordinator = coordinator
        return coordinator

    def run(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                assert effect.token not in self.answers, "answered twice"
                self.answers[effect.token] = effect.body
            elif isinstance(effect, GroupEvent):
                pass
            elif self.auto_ack:
                self.ack(effect)
            else:
                self.unacked.append(effect)

    def ack(
        self, append: Append, error: ErrorCode = ErrorCode.NONE, *, landed: bool = False
    ) -> None:
        """The write's outcome; `landed`: a failed write whose batch is in the log all the same
        (it timed out waiting for the ISR, which took it later)."""
        base = -1
        if error == ErrorCode.NONE or landed:
            log = self.logs[append.partition]
            base = len(log)
            producer = append.producer_id if append.transactional else -1
            for index, (key, value) in enumerate(append.records):
                log.append(LoadedRecord(key, value, producer, append.transactional, base + index))
        base = base if error == ErrorCode.NONE else -1
        self.run(self.coordinator.append_done(append.append_id, error, self.now, base))

    def ack_all(self) -> None:
        while self.unacked:
            self.ack(self.unacked.pop(0))

    def marker(self, committed: bool) -> None:
        self.log.append(LoadedMarker(PRODUCER, committed, len(self.log)))
        effects = self.coordinator.complete_transaction(
            self.partition, PRODUCER, committed, self.now
        )
        self.run(effects)

    def send(self, method: str, body: Body, version: int) -> int:
        token = next(self.tokens)
        caller = Caller(token, version, "client", "/127.0.0.1")
        if method == "delete_offsets":
            body = on_the_wire(body, "Request")
        handle = getattr(self.coordinator, method)
        timed = method not in ("fetch_offsets", "describe_groups", "list_groups")
        self.run(handle(caller, body, self.now) if timed else handle(caller, body))
        return token

    def answer(self, token: int) -> Body:
        assert token in self.answers, f"request {token} is still waiting"
        return self.answers[token]

    def tick(self, ms: int) -> None:
        self.now += ms
        self.run(self.coordinator.tick(self.now))

    # ---- requests ----

    def commit(
        self,
        offsets: dict[int, int],
        topic: str = ORDERS,
        *,
        member: str = "",
        generation: int = -1,
        version: int = 7,
        retention_ms: int = -1,
    ) -> int:
        body = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "retention_time_ms": retention_ms,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for partition, offset in offsets.items()
                    ],
                }
            ],
        }
        return self.send("commit_offsets", body, version)

    def txn_commit(self, offsets: dict[int, int], topic: str = ORDERS) -> int:
        body = {
            "transactional_id": "txn",
            "group_id": GROUP,
            "producer_id": PRODUCER,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
                        for p, o in offsets.items()
                    ],
                }
            ],
        }
        return self.send("txn_offset_commit", body, 3)

    def delete(self, topics: dict[str, list[int]], group: str = GROUP) -> int:
        return self.send("delete_offsets", delete_body(topics, group), 0)

    def deleted(self, topics: dict[str, list[int]], group: str = GROUP) -> Body:
        return on_the_wire(self.answer(self.delete(topics, group)))

    def offsets(self) -> dict[tuple[str, int], int]:
        """OffsetFetch of every partition the group has an offset for."""
        answer = self.answer(self.send("fetch_offsets", {"group_id": GROUP, "topics": None}, 5))
        return {
            (topic["name"], part["partition_index"]): part["committed_offset"]
            for topic in answer["topics"]
            for part in topic["partitions"]
        }

    def group_state(self) -> str:
        answer = self.answer(self.send("describe_groups", {"groups": [GROUP]}, 4))
        return str(answer["groups"][0]["group_state"])

    def tombstones(self) -> list[OffsetKey | GroupKey]:
        return [
            parse_key(item.key)
            for item in self.log
            if isinstance(item, LoadedRecord) and item.value is None
        ]

    def member(
        self, metadata: bytes, protocol_type: str = "consumer", session_ms: int = SESSION_MS
    ) -> tuple[str, int]:
        """A member joins alone and syncs: (member id, generation)."""
        join = {
            "group_id": GROUP,
            "session_timeout_ms": session_ms,
            "rebalance_timeout_ms": session_ms,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": protocol_type,
            "protocols": [{"name": "range", "metadata": metadata}],
        }
        first = self.answer(self.send("join_group", join, 5))
        if first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
            first = self.answer(
                self.send("join_group", {**join, "member_id": first["member_id"]}, 5)
            )
        assert first["error_code"] == ErrorCode.NONE, first
        member, generation = first["member_id"], first["generation_id"]
        sync = {
            "group_id": GROUP,
            "generation_id": generation,
            "member_id": member,
            "group_instance_id": None,
            "assignments": [{"member_id": member, "assignment": b"all"}],
        }
        assert self.answer(self.send("sync_group", sync, 3))["error_code"] == ErrorCode.NONE
        return member, generation

    def heartbeat(self, member: str, generation: int) -> ErrorCode:
        body = {"group_id": GROUP, "generation_id": generation, "member_id": member}
        return ErrorCode(self.answer(self.send("heartbeat", body, 3))["error_code"])

    def leave(self, member: str) -> None:
        body = {"group_id": GROUP, "members": [{"member_id": member, "group_instance_id": None}]}
        assert self.answer(self.send("leave_group", body, 3))["error_code"] == ErrorCode.NONE


# ---- OffsetDelete ----


def test_offset_delete_is_served_and_advertised() -> None:
    assert GROUP_APIS[ApiKey.OFFSET_DELETE] == ("delete_offsets", True)
    assert SUPPORTED[ApiKey.OFFSET_DELETE] == (0, 0)


def test_an_empty_groups_offsets_are_deleted_once_the_tombstones_are_written() -> None:
    driver = Driver(auto_ack=False)
    driver.commit({0: 10, 1: 11})
    driver.commit({0: 5}, topic=REFUNDS)
    driver.ack_all()
    token = driver.delete({ORDERS: [0, 1]})
    assert token not in driver.answers, "answered before the tombstones are written"
    assert driver.offsets() == {(ORDERS, 0): 10, (ORDERS, 1): 11, (REFUNDS, 0): 5}
    driver.ack_all()
    assert errors_of(on_the_wire(driver.answer(token))) == {
        (ORDERS, 0): ErrorCode.NONE,
        (ORDERS, 1): ErrorCode.NONE,
    }
    assert driver.offsets() == {(REFUNDS, 0): 5}
    assert driver.tombstones() == [OffsetKey(GROUP, ORDERS, 0), OffsetKey(GROUP, ORDERS, 1)]
    # A new coordinator replays the tombstones: the offsets stay deleted, the group stays.
    driver.reload()
    assert driver.offsets() == {(REFUNDS, 0): 5}
    assert driver.group_state() == "Empty"


def test_a_failed_write_deletes_nothing_and_says_why() -> None:
    driver = Driver()
    driver.commit({0: 10})
    driver.auto_ack = False
    token = driver.delete({ORDERS: [0]})
    driver.ack(driver.unacked.pop(), ErrorCode.NOT_ENOUGH_REPLICAS)
    answer = on_the_wire(driver.answer(token))
    assert (answer["error_code"], answer["topics"]) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, [])
    assert driver.offsets() == {(ORDERS, 0): 10}
    token = driver.delete({ORDERS: [0]})
    driver.ack(driver.unacked.pop(), ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert driver.answer(token)["error_code"] == ErrorCode.NOT_COORDINATOR


def test_partitions_without_an_offset_succeed_without_a_write() -> None:
    driver = Driver()
    driver.commit({0: 10})
    written = len(driver.log)
    answer = driver.deleted({ORDERS: [3], REFUNDS: [0]})
    assert errors_of(answer) == {(ORDERS, 3): ErrorCode.NONE, (REFUNDS, 0): ErrorCode.NONE}
    assert len(driver.log) == written and driver.offsets() == {(ORDERS, 0): 10}


@pytest.mark.parametrize(
    ("group", "expected"),
    [("", ErrorCode.INVALID_GROUP_ID), ("nobody", ErrorCode.GROUP_ID_NOT_FOUND)],
)
def test_a_group_that_is_not_there_is_a_top_level_error(group: str, expected: ErrorCode) -> None:
    driver = Driver()
    driver.commit({0: 10})
    answer = driver.deleted({ORDERS: [0]}, group=group)
    assert (answer["error_code"], answer["topics"]) == (expected, [])


def test_a_group_deleted_by_delete_groups_is_not_found() -> None:
    driver = Driver()
    driver.commit({0: 10})
    deleted = driver.answer(driver.send("delete_groups", {"groups_names": [GROUP]}, 1))
    assert deleted["results"][0]["error_code"] == ErrorCode.NONE
    assert driver.deleted({ORDERS: [0]})["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_partition_led_elsewhere_or_loading_answers_the_coordinator_error() -> None:
    driver = Driver()
    driver.commit({0: 10})
    driver.run(driver.coordinator.unload(driver.partition))
    assert driver.deleted({ORDERS: [0]})["error_code"] == ErrorCode.NOT_COORDINATOR
    driver.coordinator.start_loading(driver.partition)
    assert driver.deleted({ORDERS: [0]})["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_a_consumer_group_with_members_keeps_only_its_subscribed_topics() -> None:
    driver = Driver()
    member, generation = driver.member(subscription(ORDERS))
    driver.commit({0: 10}, member=member, generation=generation)
    driver.commit({0: 3}, topic=REFUNDS, member=member, generation=generation)
    answer = driver.deleted({ORDERS: [0], REFUNDS: [0]})
    assert answer["error_code"] == ErrorCode.NONE
    assert errors_of(answer) == {
        (ORDERS, 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        (REFUNDS, 0): ErrorCode.NONE,
    }
    assert driver.offsets() == {(ORDERS, 0): 10}
    # Once the members are gone the subscription no longer protects the offsets.
    driver.leave(member)
    assert driver.group_state() == "Empty"
    assert errors_of(driver.deleted({ORDERS: [0]})) == {(ORDERS, 0): ErrorCode.NONE}
    assert driver.offsets() == {}


def test_a_subscription_that_does_not_parse_protects_every_topic() -> None:
    driver = Driver()
    member, generation = driver.member(b"not a subscription")
    driver.commit({0: 3}, topic=REFUNDS, member=member, generation=generation)
    answer = driver.deleted({REFUNDS: [0]})
    assert errors_of(answer) == {(REFUNDS, 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
    assert driver.offsets() == {(REFUNDS, 0): 3}


def test_a_group_with_members_of_another_protocol_type_is_refused() -> None:
    driver = Driver()
    member, generation = driver.member(b"worker", protocol_type="connect")
    driver.commit({0: 3}, member=member, generation=generation)
    answer = driver.deleted({ORDERS: [0]})
    assert (answer["error_code"], answer["topics"]) == (ErrorCode.NON_EMPTY_GROUP, [])
    assert driver.offsets() == {(ORDERS, 0): 3}


def test_a_pending_transactional_offset_is_deleted_and_its_commit_brings_nothing_back() -> None:
    driver = Driver()
    driver.txn_commit({0: 42})
    assert driver.offsets() == {}
    assert errors_of(driver.deleted({ORDERS: [0]})) == {(ORDERS, 0): ErrorCode.NONE}
    assert driver.tombstones() == [OffsetKey(GROUP, ORDERS, 0)]
    driver.marker(committed=True)
    assert driver.offsets() == {}
    driver.reload()
    assert driver.offsets() == {}


def test_a_commit_still_being_written_is_deleted_too() -> None:
    """The tombstone lands after the commit's record, so a replay finds no offset: the live
    coordinator must not keep it either."""
    driver = Driver(auto_ack=False)
    driver.commit({0: 10})
    commit = driver.unacked.pop()
    delete = driver.delete({ORDERS: [0]})
    [tombstones] = driver.unacked
    driver.unacked = [commit, tombstones]
    driver.ack_all()
    assert errors_of(on_the_wire(driver.answer(delete))) == {(ORDERS, 0): ErrorCode.NONE}
    assert driver.offsets() == {}
    driver.reload()
    assert driver.offsets() == {}


def test_a_commit_written_after_the_tombstone_is_kept() -> None:
    driver = Driver()
    driver.commit({0: 10})
    driver.auto_ack = False
    delete = driver.delete({ORDERS: [0]})
    driver.commit({0: 11})
    driver.ack_all()
    assert on_the_wire(driver.answer(delete))["error_code"] == ErrorCode.NONE
    assert driver.offsets() == {(ORDERS, 0): 11}
    driver.reload()
    assert driver.offsets() == {(ORDERS, 0): 11}


def landed_after_failing(driver: Driver, offsets: dict[int, int]) -> None:
    """A commit the client was told failed (REQUEST_TIMED_OUT) whose record is in the log."""
    driver.auto_ack = False
    token = driver.commit(offsets)
    driver.ack(driver.unacked.pop(), ErrorCode.REQUEST_TIMED_OUT, landed=True)
    assert set(errors_of(driver.answer(token)).values()) == {ErrorCode.COORDINATOR_NOT_AVAILABLE}
    driver.auto_ack = True


def test_a_commit_that_failed_but_landed_is_deleted_too() -> None:
    """Found by the cluster simulation: the coordinator does not hold a failed commit, but its
    record may be in the log; a delete without its tombstone was undone by the next coordinator
    replaying it."""
    driver = Driver()
    landed_after_failing(driver, {0: 12})
    assert driver.offsets() == {}
    assert errors_of(driver.deleted({ORDERS: [0]})) == {(ORDERS, 0): ErrorCode.NONE}
    assert driver.tombstones() == [OffsetKey(GROUP, ORDERS, 0)]
    driver.reload()
    assert driver.offsets() == {}


def test_deleting_the_group_covers_a_commit_that_failed_but_landed() -> None:
    driver = Driver()
    driver.commit({1: 3})
    landed_after_failing(driver, {0: 12})
    deleted = driver.answer(driver.send("delete_groups", {"groups_names": [GROUP]}, 1))
    assert deleted["results"][0]["error_code"] == ErrorCode.NONE
    driver.reload()
    assert driver.coordinator.group(GROUP) is None


def test_a_commit_that_failed_keeps_its_group_from_expiring_until_settled() -> None:
    driver = Driver()
    driver.commit({1: 3})
    landed_after_failing(driver, {0: 12})
    driver.tick(RETENTION_MS + CHECK_MS)
    assert driver.offsets() == {}  # the known offset expired ...
    assert driver.group_state() == "Empty"  # ... but the group may have another in the log
    driver.reload()  # a coordinator that replays the log knows
    assert driver.offsets() == {(ORDERS, 0): 12}
    driver.tick(CHECK_MS)  # committed at the failed write's time: long expired
    assert driver.offsets() == {}
    assert driver.group_state() == "Dead"


# ---- a deleted topic ----


def test_a_deleted_topics_offsets_go_in_every_loaded_group_and_stay_gone() -> None:
    driver = Driver()
    driver.commit({0: 10, 1: 11})
    driver.commit({0: 5}, topic=REFUNDS)
    driver.txn_commit({2: 7})
    driver.run(driver.coordinator.on_topics_deleted([ORDERS], driver.now))
    assert driver.offsets() == {(REFUNDS, 0): 5}
    assert set(driver.tombstones()) == {OffsetKey(GROUP, ORDERS, p) for p in (0, 1, 2)}
    driver.marker(committed=True)  # the transaction of the deleted topic commits: nothing back
    assert driver.offsets() == {(REFUNDS, 0): 5}
    driver.reload()
    assert driver.offsets() == {(REFUNDS, 0): 5}
    # The topic made again under the same name starts without offsets, then keeps new ones.
    driver.commit({0: 1})
    driver.reload()
    assert driver.offsets() == {(ORDERS, 0): 1, (REFUNDS, 0): 5}


def test_a_deleted_topic_writes_nothing_for_groups_without_its_offsets() -> None:
    driver = Driver()
    driver.commit({0: 5}, topic=REFUNDS)
    written = len(driver.log)
    driver.run(driver.coordinator.on_topics_deleted([ORDERS], driver.now))
    assert len(driver.log) == written


# ---- expiry (offsets.retention.minutes, KIP-211) ----


def test_a_standalone_committers_offsets_expire_from_their_commit_at_a_check() -> None:
    driver = Driver()
    driver.commit({0: 10})  # at 1_000, when the partitions were loaded
    driver.tick(RETENTION_MS // 2)  # a check: nothing is old enough
    driver.commit({1: 20})
    driver.tick(RETENTION_MS // 2 - 1)  # a check one ms too early for the first offset
    assert driver.offsets() == {(ORDERS, 0): 10, (ORDERS, 1): 20}
    driver.tick(1)  # its retention has passed, but the next check is not due
    assert driver.offsets() == {(ORDERS, 0): 10, (ORDERS, 1): 20}
    driver.tick(CHECK_MS)
    assert driver.offsets() == {(ORDERS, 1): 20}
    assert driver.tombstones() == [OffsetKey(GROUP, ORDERS, 0)]
    driver.tick(RETENTION_MS // 2)
    # The last offset gone, the group (Empty) is deleted as well.
    assert driver.offsets() == {}
    assert driver.tombstones()[-2:] == [OffsetKey(GROUP, ORDERS, 1), GroupKey(GROUP)]
    assert driver.group_state() == "Dead"
    driver.reload()
    assert driver.coordinator.group(GROUP) is None


def test_nothing_expires_before_the_retention_has_passed() -> None:
    driver = Driver()
    driver.commit({0: 10})
    for _ in range(RETENTION_MS // CHECK_MS - 1):
        driver.tick(CHECK_MS)
    assert driver.offsets() == {(ORDERS, 0): 10}
    assert driver.tombstones() == []


def test_an_empty_groups_offsets_expire_counting_from_when_it_became_empty() -> None:
    driver = Driver()
    member, generation = driver.member(subscription(ORDERS))
    driver.commit({0: 10}, member=member, generation=generation)
    driver.tick(2 * RETENTION_MS)  # a consumer's offset never expires while it subscribes
    assert driver.offsets() == {(ORDERS, 0): 10}
    driver.leave(member)
    became_empty = driver.now
    while driver.now + CHECK_MS < became_empty + RETENTION_MS:
        driver.tick(CHECK_MS)
        assert driver.offsets() == {(ORDERS, 0): 10}
        if driver.now - became_empty == RETENTION_MS // 2:
            # A coordinator loading the group counts from the same moment: its record says.
            driver.reload()
    driver.tick(CHECK_MS)
    assert driver.offsets() == {}
    assert driver.group_state() == "Dead"


def test_a_stable_consumer_groups_unsubscribed_offsets_expire_from_their_commit() -> None:
    driver = Driver()
    member, generation = driver.member(subscription(ORDERS), session_ms=LONG_SESSION_MS)
    driver.commit({0: 10}, member=member, generation=generation)
    driver.commit({0: 3}, topic=REFUNDS, member=member, generation=generation)
    for _ in range(RETENTION_MS // CHECK_MS - 1):
        driver.tick(CHECK_MS)
        assert driver.heartbeat(member, generation) == ErrorCode.NONE
    assert driver.offsets() == {(ORDERS, 0): 10, (REFUNDS, 0): 3}
    driver.tick(CHECK_MS)
    assert driver.offsets() == {(ORDERS, 0): 10}, "only the unsubscribed topic's offset goes"
    for _ in range(2 * RETENTION_MS // CHECK_MS):
        driver.tick(CHECK_MS)
        assert driver.heartbeat(member, generation) == ErrorCode.NONE
    assert driver.offsets() == {(ORDERS, 0): 10}
    assert driver.group_state() == "Stable"


def test_a_rebalancing_groups_offsets_do_not_expire() -> None:
    driver = Driver()
    member, generation = driver.member(subscription(ORDERS), session_ms=LONG_SESSION_MS)
    driver.commit({0: 3}, topic=REFUNDS, member=member, generation=generation)
    driver.now += RETENTION_MS
    assert driver.heartbeat(member, generation) == ErrorCode.NONE
    # A second member's join starts a rebalance the first one does not answer for a while.
    joining = {
        "group_id": GROUP,
        "session_timeout_ms": LONG_SESSION_MS,
        "rebalance_timeout_ms": LONG_SESSION_MS,
        "member_id": "",
        "group_instance_id": "second",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(ORDERS)}],
    }
    driver.send("join_group", joining, 5)
    assert driver.group_state() == "PreparingRebalance"
    driver.tick(CHECK_MS)
    assert driver.group_state() == "PreparingRebalance"
    assert driver.offsets() == {(REFUNDS, 0): 3}


def test_an_offset_committed_with_its_own_retention_expires_then() -> None:
    driver = Driver()
    driver.commit({0: 10}, version=2, retention_ms=2 * MINUTE)
    driver.commit({1: 11}, version=2)  # -1: the broker's retention
    [first, second] = [item for item in driver.log if isinstance(item, LoadedRecord)]
    assert first.value is not None and parse_offset_value(first.value).expire_timestamp == (
        1_000 + 2 * MINUTE
    )
    assert second.value is not None and parse_offset_value(second.value).expire_timestamp == -1
    driver.reload()  # the expire timestamp survives a reload (value version 1)
    driver.tick(CHECK_MS)
    assert driver.offsets() == {(ORDERS, 1): 11}


def test_a_pending_transaction_keeps_its_partition_and_its_group() -> None:
    driver = Driver()
    driver.commit({0: 10, 1: 11})
    driver.txn_commit({1: 12})
    driver.tick(RETENTION_MS + CHECK_MS)
    assert driver.offsets() == {(ORDERS, 1): 11}
    assert driver.group_state() == "Empty"
    driver.marker(committed=True)
    assert driver.offsets() == {(ORDERS, 1): 12}
    # Its commit time is the TxnOffsetCommit's, as in Kafka: the next check expires it.
    driver.tick(CHECK_MS)
    assert driver.offsets() == {}
    assert driver.group_state() == "Dead"


def test_a_group_with_a_write_in_flight_waits_for_the_next_check() -> None:
    driver = Driver()
    driver.commit({0: 10})
    driver.now += RETENTION_MS
    driver.auto_ack = False
    driver.commit({1: 11})
    driver.tick(CHECK_MS)
    assert len(driver.unacked) == 1, "expiry wrote while a commit was in flight"
    driver.ack_all()
    driver.auto_ack = True
    driver.tick(CHECK_MS)
    assert driver.offsets() == {(ORDERS, 1): 11}


def test_a_group_that_comes_back_while_its_tombstone_is_written_stays() -> None:
    driver = Driver()
    driver.commit({0: 10})
    driver.tick(RETENTION_MS - 1)  # a check just too early
    driver.auto_ack = False
    driver.tick(CHECK_MS)
    [tombstones] = driver.unacked
    assert [parse_key(key) for key, _ in tombstones.records] == [
        OffsetKey(GROUP, ORDERS, 0),
        GroupKey(GROUP),
    ]
    driver.commit({1: 5})  # lands after the tombstones
    driver.ack_all()
    assert driver.offsets() == {(ORDERS, 1): 5}
    assert driver.group_state() == "Empty"
    driver.reload()
    assert driver.offsets() == {(ORDERS, 1): 5}


def test_an_empty_group_without_offsets_is_deleted_at_the_next_check() -> None:
    driver = Driver()
    member, _generation = driver.member(subscription(ORDERS))
    driver.leave(member)
    driver.tick(CHECK_MS)
    assert driver.tombstones() == [GroupKey(GROUP)]
    assert driver.group_state() == "Dead"


def test_a_failed_expiry_write_leaves_the_offsets_for_the_next_check() -> None:
    driver = Driver()
    driver.commit({0: 10})
    driver.now += RETENTION_MS
    driver.auto_ack = False
    driver.tick(CHECK_MS)
    driver.ack(driver.unacked.pop(), ErrorCode.REQUEST_TIMED_OUT)
    assert driver.offsets() == {(ORDERS, 0): 10}
    driver.auto_ack = True
    driver.tick(CHECK_MS)
    assert driver.offsets() == {}


# ---- records and subscriptions ----


def test_an_offset_with_an_expire_timestamp_is_kafkas_value_v1() -> None:
    committed = CommittedOffset(5, -1, "meta", 1_000, 61_000)
    data = offset_value(committed)
    assert data[:2] == b"\x00\x01"
    assert parse_offset_value(data) == committed
    assert offset_value(CommittedOffset(5, 2, "", 1_000))[:2] == b"\x00\x03"


@pytest.mark.parametrize("version", [0, 1, 3])
def test_consumer_subscriptions_parse_as_kafka_reads_them(version: int) -> None:
    assert subscription_topics(subscription(ORDERS, REFUNDS, version=version)) == {ORDERS, REFUNDS}
    assert subscription_topics(subscription(version=version)) == set()


@pytest.mark.parametrize(
    "metadata", [b"", b"\x00\x00", b"\xff\xff\x00\x00\x00\x00", subscription(ORDERS)[:-9]]
)
def test_a_broken_subscription_is_not_known(metadata: bytes) -> None:
    assert subscription_topics(metadata) is None


# ---- settings ----


def test_the_retention_settings_are_kafkas_and_reach_the_coordinator() -> None:
    defaults = group_config(broker_settings({}))
    assert defaults.offsets_retention_ms == 10_080 * MINUTE
    assert defaults.offsets_retention_check_interval_ms == 600_000
    configured = group_config(
        broker_settings(
            {"offsets.retention.minutes": 3, "offsets.retention.check.interval.ms": 1_500}
        )
    )
    assert configured.offsets_retention_ms == 3 * MINUTE
    assert configured.offsets_retention_check_interval_ms == 1_500


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("offsets.retention.minutes", 0),
        ("offsets.retention.check.interval.ms", 0),
        ("offsets.retention.minutes", "10"),
    ],
)
def test_bad_retention_settings_are_refused_by_name(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        broker_settings({key: value})


# ---- through GroupHosting, on a real log ----


@dataclass
class FakeReplica:
    log: Log
    is_leader: bool = True
    leader_epoch: int = 0


class Hosting:
    """GroupHosting over one offsets partition whose log is a real `Log`; appends are written
    there and acknowledged at once; the metadata image changes as the controller's would."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = Log(
            str(tmp_path / f"{OFFSETS_TOPIC}-0"),
            LogConfig(),
            RealFileSystem(),
            recovery_point=0,
            log_start_offset=0,
            now_ms=0,
        )
        self.image = MetadataImage()
        self.metadata_offset = 0
        self.apply(
            RegisterBroker(1, "x", 0, "h", 1, None),
            UnfenceBroker(1, 0),
            CreateTopic(OFFSETS_TOPIC, "a" * 32, {}),
            CreatePartition(OFFSETS_TOPIC, 0, (1,), (1,), 1, 0, 0),
        )
        self.create(ORDERS, "b", 2)
        self.answers: dict[Token, Body] = {}
        self.now = 5_000
        self.hosting = self.start()

    def apply(self, *records: Any) -> None:
        for record in records:
            self.image.apply(self.metadata_offset, record)
            self.metadata_offset += 1

    def create(self, topic: str, id_digit: str, partitions: int) -> None:
        self.apply(CreateTopic(topic, id_digit * 32, {}))
        for partition in range(partitions):
            self.apply(CreatePartition(topic, partition, (1,), (1,), 1, 0, 0))

    def start(self) -> GroupHosting:
        hosting = GroupHosting(GroupConfig(offsets_partitions=1), str, self.write, self.respond)
        hosting.observe_clock(self.now)
        hosting.on_metadata(self.image, self.replica, self.now)
        return hosting

    def metadata_changed(self) -> None:
        self.hosting.on_metadata(self.image, self.replica, self.now)

    def replica(self, partition: int) -> Any:  # the parts of a `Replica` loading reads
        return FakeReplica(self.log)

    def write(self, partition: int, batch: bytes, on_done: Any) -> None:
        info = self.log.append(batch, self.now)
        on_done(AppendAnswer(ErrorCode.NONE, base_offset=info.first_offset))

    def respond(self, token: Token, body: Body) -> None:
        self.answers[token] = body

    def serve(self, api_key: ApiKey, version: int, body: Body) -> Body:
        token = ("client", len(self.answers))
        self.hosting.serve(token, api_key, version, body, "c", "/h", self.image, self.now)
        return self.answers[token]

    def commit(self, partitions: list[int], topic: str = ORDERS) -> None:
        body = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": 100 + p} for p in partitions
                    ],
                }
            ],
        }
        answer = self.serve(ApiKey.OFFSET_COMMIT, 7, body)
        assert set(errors_of(answer).values()) == {ErrorCode.NONE}

    def offsets(self) -> dict[tuple[str, int], int]:
        answer = self.serve(ApiKey.OFFSET_FETCH, 5, {"group_id": GROUP, "topics": None})
        return {
            (t["name"], p["partition_index"]): p["committed_offset"]
            for t in answer["topics"]
            for p in t["partitions"]
        }


def test_hosting_refuses_unknown_partitions_beside_the_coordinators_answer(
    tmp_path: Path,
) -> None:
    host = Hosting(tmp_path)
    host.commit([0, 1])
    answer = on_the_wire(
        host.serve(ApiKey.OFFSET_DELETE, 0, delete_body({ORDERS: [0, 7], "nope": [0]}))
    )
    assert answer["error_code"] == ErrorCode.NONE
    assert errors_of(answer) == {
        (ORDERS, 0): ErrorCode.NONE,
        (ORDERS, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert [t["name"] for t in answer["topics"]] == [ORDERS, "nope"]  # one entry per topic
    assert host.offsets() == {(ORDERS, 1): 101}


def test_hosting_checks_the_group_even_when_no_topic_exists(tmp_path: Path) -> None:
    host = Hosting(tmp_path)
    missing = host.serve(ApiKey.OFFSET_DELETE, 0, delete_body({"nope": [0]}, group="nobody"))
    assert (missing["error_code"], missing["topics"]) == (ErrorCode.GROUP_ID_NOT_FOUND, [])
    host.commit([0])
    answer = host.serve(ApiKey.OFFSET_DELETE, 0, delete_body({"nope": [0]}))
    assert answer["error_code"] == ErrorCode.NONE
    assert errors_of(answer) == {("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_hosting_deletes_the_offsets_of_a_topic_gone_from_the_image(tmp_path: Path) -> None:
    host = Hosting(tmp_path)
    host.create(REFUNDS, "c", 1)
    host.metadata_changed()
    host.commit([0, 1])
    host.commit([0], topic=REFUNDS)
    host.apply(DeleteTopic(ORDERS))
    host.metadata_changed()
    assert host.offsets() == {(REFUNDS, 0): 100}
    host.hosting = host.start()  # a new coordinator replays the log: the tombstones are there
    assert host.offsets() == {(REFUNDS, 0): 100}
    # Deleted and made again between two images: the old topic's offsets go all the same.
    host.commit([0], topic=REFUNDS)
    host.apply(DeleteTopic(REFUNDS))
    host.create(REFUNDS, "d", 1)
    host.metadata_changed()
    assert host.offsets() == {}
    host.commit([0], topic=REFUNDS)
    host.hosting = host.start()
    assert host.offsets() == {(REFUNDS, 0): 100}


def test_hosting_runs_expiry_in_its_tick(tmp_path: Path) -> None:
    host = Hosting(tmp_path)  # loaded at host.now: the first check is an interval later
    host.commit([0])
    default = GroupConfig(offsets_partitions=1)
    check_ms, retention_ms = (
        default.offsets_retention_check_interval_ms,
        default.offsets_retention_ms,
    )
    host.hosting.tick(host.now + check_ms)
    host.hosting.tick(host.now + retention_ms - 1)
    assert host.offsets() == {(ORDERS, 0): 100}
    host.hosting.tick(host.now + retention_ms + check_ms)
    assert host.offsets() == {}
    host.hosting = host.start()  # the expiry's tombstones are in the log
    assert host.offsets() == {}
