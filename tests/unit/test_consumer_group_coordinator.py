"""The consumer group protocol (KIP-848) in the group coordinator: heartbeats answered once their
records are acknowledged, the records a new coordinator replays, and how these groups meet
offsets, the classic protocol and the admin APIs."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import replace
from typing import Any

import pytest
from test_admin_answers import missing_fields

from rlog.core.groups import Append, Caller, GroupConfig, GroupCoordinator, LoadedRecord, Respond
from rlog.core.groups.consumer_group import TopicIds
from rlog.core.groups.consumer_protocol import encode_assignment
from rlog.core.groups.consumer_records import (
    GROUP_EPOCH_KEY,
    ConsumerGroupLog,
    ConsumerKey,
)
from rlog.core.groups.records import parse_key
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.protocol.schema import load_message
from rlog.daemon.broker.groups import group_config
from rlog.daemon.config import ConfigError, broker_settings

Body = dict[str, Any]
GROUP = "payments"
ORDERS, REFUNDS = "orders", "refunds"
TOPICS = TopicIds({ORDERS: (uuid.uuid4(), 4), REFUNDS: (uuid.uuid4(), 2)})
SESSION_MS = 10_000


class Driver:
    """A coordinator as the broker runs it: one log per offsets partition, writes acknowledged
    when the test says (or at once), a clock that moves only when told."""

    def __init__(self, *, auto_ack: bool = True) -> None:
        self.config = GroupConfig(
            offsets_partitions=2,
            initial_rebalance_delay_ms=0,
            consumer_session_timeout_ms=SESSION_MS,
            consumer_heartbeat_interval_ms=1_000,
        )
        self.ids = itertools.count(1)
        self.tokens = itertools.count(1)
        self.now = 1_000
        self.logs: dict[int, list[LoadedRecord]] = {0: [], 1: []}
        self.answers: dict[int, Body] = {}
        self.unacked: list[Append] = []
        self.auto_ack = auto_ack
        self.coordinator = self.failover()

    def failover(self) -> GroupCoordinator:
        """A new coordinator takes every partition over, replaying its log."""
        coordinator = GroupCoordinator(self.config, lambda client: f"{client}-{next(self.ids)}")
        coordinator.set_topics(TOPICS)
        for partition, log in self.logs.items():
            coordinator.start_loading(partition)
            coordinator.finish_loading(partition, list(log), self.now)
        self.coordinator = coordinator
        return coordinator

    @property
    def log(self) -> list[LoadedRecord]:
        return self.logs[self.coordinator.partition_for(GROUP)]

    def run(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                assert effect.token not in self.answers, "answered twice"
                self.answers[effect.token] = effect.body
            elif isinstance(effect, Append):
                if self.auto_ack:
                    self.ack(effect)
                else:
                    self.unacked.append(effect)

    def ack(self, append: Append, error: ErrorCode = ErrorCode.NONE, landed: bool = False) -> None:
        if error == ErrorCode.NONE or landed:
            log = self.logs[append.partition]
            for key, value in append.records:
                log.append(LoadedRecord(key, value, offset=len(log)))
        base = len(self.logs[append.partition]) if error == ErrorCode.NONE else -1
        self.run(self.coordinator.append_done(append.append_id, error, self.now, base))

    def send(self, method: str, body: Body, version: int) -> int:
        token = next(self.tokens)
        caller = Caller(token, version, "app", "/127.0.0.1")
        handle = getattr(self.coordinator, method)
        untimed = ("fetch_offsets", "describe_groups", "list_groups", "consumer_group_describe")
        self.run(handle(caller, body) if method in untimed else handle(caller, body, self.now))
        return token

    def answer(self, token: int) -> Body:
        assert token in self.answers, f"request {token} is still waiting"
        return self.answers[token]

    def tick(self, ms: int) -> None:
        self.now += ms
        self.run(self.coordinator.tick(self.now))

    # ---- requests ----

    def heartbeat(
        self,
        member: str,
        epoch: int,
        owned: dict[str, list[int]] | None = None,
        topics: list[str] | None = None,
        version: int = 1,
    ) -> int:
        body: Body = {
            "group_id": GROUP,
            "member_id": member,
            "member_epoch": epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": 30_000 if epoch == 0 else -1,
            "subscribed_topic_names": topics if topics is not None or epoch != 0 else [ORDERS],
            "server_assignor": None,
            "topic_partitions": (
                None
                if owned is None
                else [{"topic_id": TOPICS.by_name[t][0], "partitions": p} for t, p in owned.items()]
            ),
        }
        if epoch == 0:
            body["topic_partitions"] = []
        return self.send(
            "consumer_group_heartbeat", wire("ConsumerGroupHeartbeat", body, version), version
        )

    def join(self, member: str) -> Body:
        return self.answer(self.heartbeat(member, 0))

    def commit(self, member: str, epoch: int, offsets: dict[int, int], version: int = 9) -> Body:
        body = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": ORDERS,
                    "partitions": [
                        {"partition_index": p, "committed_offset": o,
                         "committed_leader_epoch": -1, "committed_metadata": ""}
                        for p, o in offsets.items()
                    ],
                }
            ],
        }  # fmt: skip
        return self.answer(self.send("commit_offsets", body, version))


def wire(api: str, body: Body, version: int) -> Body:
    """A request body as the coordinator gets it: encoded by a client, decoded by the broker."""
    codec = codec_for(f"{api}Request", version)
    decoded, _end = codec.decode(codec.encode(body))
    return decoded


def owned(answer: Body) -> dict[str, list[int]]:
    """The partitions a heartbeat's answer gives its member (by topic name)."""
    return {
        TOPICS.name_of(t["topic_id"]) or "?": sorted(t["partitions"])
        for t in answer["assignment"]["topic_partitions"]
    }


def settle(
    driver: Driver, members: dict[str, int], holding: dict[str, dict[str, list[int]]] | None = None
) -> dict[str, Body]:
    """Heartbeat every member until nothing changes; members report what they were given
    (`holding`: what they own to start with). Returns each member's last answer, with what it
    owns then as "owned"; `members` holds their epochs."""
    holding = holding or {m: {} for m in members}
    last: dict[str, Body] = {}
    for _ in range(10):
        changed = False
        for member, epoch in members.items():
            answer = driver.answer(driver.heartbeat(member, epoch, holding[member]))
            assert answer["error_code"] == ErrorCode.NONE, answer
            if answer["assignment"] is not None and owned(answer) != holding[member]:
                holding[member], changed = owned(answer), True
            if answer["member_epoch"] != epoch:
                members[member], changed = answer["member_epoch"], True
            last[member] = answer | {"owned": holding[member]}
        if not changed:
            return last
    raise AssertionError(f"did not settle: {last}")


def test_a_join_is_answered_once_its_records_are_acknowledged() -> None:
    driver = Driver(auto_ack=False)
    token = driver.heartbeat("m1", 0)
    assert token not in driver.answers and len(driver.unacked) == 1
    driver.ack(driver.unacked.pop())
    answer = driver.answer(token)
    assert answer["error_code"] == ErrorCode.NONE
    assert answer["member_id"] == "m1" and answer["member_epoch"] == 1
    assert owned(answer) == {ORDERS: [0, 1, 2, 3]}
    assert answer["heartbeat_interval_ms"] == 1_000


def test_a_failed_write_leaves_the_group_as_it_was_and_the_next_write_says_it_all() -> None:
    driver = Driver(auto_ack=False)
    token = driver.heartbeat("m1", 0)
    driver.ack(driver.unacked.pop(), ErrorCode.REQUEST_TIMED_OUT, landed=True)
    assert driver.answer(token)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert GROUP not in driver.coordinator.consumer.groups  # as before the heartbeat
    # The client tries again under another id; the write that timed out did land.
    driver.auto_ack = True
    assert driver.join("m2")["member_epoch"] >= 1
    replayed = driver.failover().consumer.groups[GROUP]
    assert set(replayed.members) == {"m2"}, "the failed write's member is tombstoned"


def test_heartbeats_wait_for_their_groups_write_in_flight() -> None:
    driver = Driver(auto_ack=False)
    first = driver.heartbeat("m1", 0)
    second = driver.heartbeat("m2", 0)
    assert len(driver.unacked) == 1, "one write of a group at a time"
    driver.ack(driver.unacked.pop())
    assert driver.answer(first)["error_code"] == ErrorCode.NONE
    assert second not in driver.answers and len(driver.unacked) == 1
    driver.ack(driver.unacked.pop())
    assert driver.answer(second)["member_id"] == "m2"


def test_two_members_split_the_topic_and_a_new_coordinator_keeps_them() -> None:
    driver = Driver()
    driver.join("m1")
    driver.join("m2")
    last = settle(driver, {"m1": 1, "m2": 2})
    given = [set(last[m]["owned"].get(ORDERS, [])) for m in ("m1", "m2")]
    assert given[0].isdisjoint(given[1]) and given[0] | given[1] == {0, 1, 2, 3}
    assert all(len(parts) == 2 for parts in given)
    before = driver.coordinator.consumer.describe(GROUP)
    written = len(driver.log)
    driver.failover()
    after = driver.coordinator.consumer.describe(GROUP)
    assert after == before, "a replay of the log gives the same group"
    for member in ("m1", "m2"):
        epoch = last[member]["member_epoch"]
        answer = driver.answer(driver.heartbeat(member, epoch, last[member]["owned"]))
        assert answer["error_code"] == ErrorCode.NONE and answer["member_epoch"] == epoch
    assert len(driver.log) == written, "steady heartbeats write nothing"


def test_a_member_whose_session_lapses_leaves_and_its_partitions_move() -> None:
    driver = Driver()
    driver.join("m1")
    driver.join("m2")
    holding = {"m1": settle(driver, {"m1": 1, "m2": 2})["m1"]["owned"]}
    for _ in range(3):  # m1 keeps beating; m2 went quiet
        driver.tick(SESSION_MS // 2)
        epoch = driver.coordinator.consumer.groups[GROUP].members["m1"].epoch
        answer = driver.answer(driver.heartbeat("m1", epoch, holding["m1"]))
        if answer["assignment"] is not None:
            holding["m1"] = owned(answer)
    group = driver.coordinator.consumer.groups[GROUP]
    assert set(group.members) == {"m1"}
    last = settle(driver, {"m1": group.members["m1"].epoch}, holding)
    assert last["m1"]["owned"] == {ORDERS: [0, 1, 2, 3]}
    assert set(driver.failover().consumer.groups[GROUP].members) == {"m1"}


def test_offset_commits_of_a_consumer_group_are_fenced_by_member_epoch() -> None:
    driver = Driver()
    epoch = driver.join("m1")["member_epoch"]

    def error(answer: Body) -> ErrorCode:
        return ErrorCode(answer["topics"][0]["partitions"][0]["error_code"])

    assert error(driver.commit("m1", epoch, {0: 5})) == ErrorCode.NONE
    assert error(driver.commit("m1", epoch - 1, {0: 6})) == ErrorCode.STALE_MEMBER_EPOCH
    assert error(driver.commit("stranger", epoch, {0: 6})) == ErrorCode.UNKNOWN_MEMBER_ID
    assert error(driver.commit("m1", epoch, {0: 6}, version=8)) == ErrorCode.UNSUPPORTED_VERSION
    assert error(driver.commit("", -1, {0: 6})) == ErrorCode.UNKNOWN_MEMBER_ID, (
        "not while it has members"
    )
    assert driver.coordinator.committed(GROUP)[(ORDERS, 0)].offset == 5


def test_offset_fetch_v9_checks_the_member_and_tools_need_none() -> None:
    driver = Driver()
    epoch = driver.join("m1")["member_epoch"]
    driver.commit("m1", epoch, {1: 7})

    def fetch(member: str | None, member_epoch: int) -> Body:
        group = {"group_id": GROUP, "member_id": member, "member_epoch": member_epoch,
                 "topics": [{"name": ORDERS, "partition_indexes": [1]}]}  # fmt: skip
        body = wire("OffsetFetch", {"groups": [group], "require_stable": True}, 9)
        return driver.answer(driver.send("fetch_offsets", body, 9))["groups"][0]

    assert fetch("m1", epoch)["topics"][0]["partitions"][0]["committed_offset"] == 7
    assert fetch(None, -1)["topics"][0]["partitions"][0]["committed_offset"] == 7
    assert fetch("m1", epoch + 1)["error_code"] == ErrorCode.STALE_MEMBER_EPOCH
    assert fetch("nobody", epoch)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_an_empty_classic_group_becomes_a_consumer_group_with_its_offsets() -> None:
    driver = Driver()
    driver.commit("", -1, {0: 3}, version=8)  # a standalone committer: an empty classic group
    assert driver.coordinator.group(GROUP) is not None
    driver.join("m1")
    assert driver.coordinator.group(GROUP) is None and GROUP in driver.coordinator.consumer.groups
    assert driver.coordinator.committed(GROUP)[(ORDERS, 0)].offset == 3
    replayed = driver.failover()
    assert replayed.group(GROUP) is None, "the classic group's record is tombstoned"
    assert replayed.consumer.groups[GROUP].members.keys() == {"m1"}
    assert replayed.committed(GROUP)[(ORDERS, 0)].offset == 3


def classic_join_body(member: str, owned: dict[str, list[int]] | None = None) -> Body:
    """A classic consumer's JoinGroup v5 (cooperative-sticky: it lists what it still owns)."""
    listed = [{"topic": t, "partitions": p} for t, p in (owned or {}).items()]
    subscription = {"topics": [ORDERS], "user_data": None, "generation_id": -1,
                    "rack_id": None, "owned_partitions": listed}  # fmt: skip
    metadata = (3).to_bytes(2, "big") + codec_for("ConsumerProtocolSubscription", 3).encode(
        subscription
    )
    return {"group_id": GROUP, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": member, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "cooperative-sticky", "metadata": metadata}]}  # fmt: skip


def classic_sync(driver: Driver, member: str, generation: int) -> Body:
    body = {"group_id": GROUP, "generation_id": generation, "member_id": member,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocol_name": "cooperative-sticky", "assignments": []}  # fmt: skip
    return driver.answer(driver.send("sync_group", body, 5))


def assigned_by_sync(answer: Body) -> dict[str, list[int]]:
    data = bytes(answer["assignment"])
    version = int.from_bytes(data[:2], "big")
    body, _end = codec_for("ConsumerProtocolAssignment", version).decode(data, 2)
    return {t["topic"]: sorted(t["partitions"]) for t in body["assigned_partitions"]}


def classic_beat(driver: Driver, member: str, generation: int) -> ErrorCode:
    body = {"group_id": GROUP, "generation_id": generation, "member_id": member,
            "group_instance_id": None}  # fmt: skip
    return ErrorCode(driver.answer(driver.send("heartbeat", body, 3))["error_code"])


def classic_member_settles(driver: Driver, member: str, owned: dict[str, list[int]]) -> tuple:
    """A cooperative classic member: join (with what it owns), sync, and again while the
    broker says REBALANCE_IN_PROGRESS. Returns (generation, what it owns)."""
    for _ in range(10):
        answer = driver.answer(driver.send("join_group", classic_join_body(member, owned), 5))
        assert answer["error_code"] == ErrorCode.NONE, answer
        assert (answer["leader"], answer["members"]) == ("", []), "the broker assigns"
        generation = answer["generation_id"]
        synced = classic_sync(driver, member, generation)
        if synced["error_code"] == ErrorCode.REBALANCE_IN_PROGRESS:
            continue
        assert synced["error_code"] == ErrorCode.NONE, synced
        owned = assigned_by_sync(synced)  # revokes what it was not given, keeps the rest
        if classic_beat(driver, member, generation) == ErrorCode.NONE:
            return generation, owned
    raise AssertionError("the classic member did not settle")


def test_a_classic_member_joins_a_consumer_group_and_the_broker_assigns_it() -> None:
    driver = Driver()
    driver.join("m1")  # a consumer-protocol member holds every partition
    first = driver.answer(driver.send("join_group", classic_join_body(""), 5))
    assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
    classic = first["member_id"]
    generation, owned_classic = classic_member_settles(driver, classic, {})
    last = settle(driver, {"m1": driver.coordinator.consumer.groups[GROUP].members["m1"].epoch},
                  {"m1": {ORDERS: [0, 1, 2, 3]}})  # fmt: skip
    generation, owned_classic = classic_member_settles(driver, classic, owned_classic)
    mine, theirs = set(last["m1"]["owned"].get(ORDERS, [])), set(owned_classic.get(ORDERS, []))
    assert mine.isdisjoint(theirs) and mine | theirs == {0, 1, 2, 3} and len(theirs) == 2
    assert classic_beat(driver, classic, generation - 1) == ErrorCode.ILLEGAL_GENERATION
    # Its commits are a classic member's: any version, its generation.
    assert (
        driver.commit(classic, generation, {0: 1}, version=7)["topics"][0]["partitions"][0][
            "error_code"
        ]
        == ErrorCode.NONE
    )
    wrong = driver.commit(classic, generation + 5, {0: 1}, version=7)
    assert wrong["topics"][0]["partitions"][0]["error_code"] == ErrorCode.ILLEGAL_GENERATION
    # A new coordinator knows it as a classic member, at its generation.
    driver.failover()
    assert classic_beat(driver, classic, generation) == ErrorCode.NONE
    assert assigned_by_sync(classic_sync(driver, classic, generation)) == owned_classic
    described = driver.coordinator.consumer.describe(GROUP)
    assert {m["member_id"] for m in described["members"]} == {"m1", classic}


def test_a_classic_member_that_leaves_gives_its_partitions_back() -> None:
    driver = Driver()
    driver.join("m1")
    classic = driver.answer(driver.send("join_group", classic_join_body(""), 5))["member_id"]
    classic_member_settles(driver, classic, {})
    leave = {"group_id": GROUP, "members": [{"member_id": classic, "group_instance_id": None}]}
    answer = driver.answer(driver.send("leave_group", leave, 3))
    assert answer["members"][0]["error_code"] == ErrorCode.NONE
    group = driver.coordinator.consumer.groups[GROUP]
    assert set(group.members) == {"m1"}
    assert group.target["m1"] == {ORDERS: frozenset({0, 1, 2, 3})}


def test_a_classic_member_that_never_rejoins_is_removed() -> None:
    driver = Driver()
    driver.join("m1")
    classic = driver.answer(driver.send("join_group", classic_join_body(""), 5))["member_id"]
    generation, _owned = classic_member_settles(driver, classic, {})
    driver.join("m3")  # the group moves on: the classic member is told to rejoin
    assert classic_beat(driver, classic, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    for _ in range(4):  # it keeps heartbeating but never rejoins
        driver.tick(4_000)
        classic_beat(driver, classic, generation)
        for member in ("m1", "m3"):
            driver.heartbeat(
                member, driver.coordinator.consumer.groups[GROUP].members[member].epoch
            )
    assert classic not in driver.coordinator.consumer.groups[GROUP].members


def classic_group_with_one_member(driver: Driver) -> tuple[str, int]:
    """A classic group, Stable, whose one (cooperative) member leads and took every partition."""
    member = driver.answer(driver.send("join_group", classic_join_body(""), 5))["member_id"]
    joined = driver.answer(driver.send("join_group", classic_join_body(member), 5))
    assert joined["leader"] == member, joined
    generation = joined["generation_id"]
    everything = encode_assignment({ORDERS: frozenset({0, 1, 2, 3})}, 3)
    body = {"group_id": GROUP, "generation_id": generation, "member_id": member,
            "group_instance_id": None, "protocol_type": "consumer",
            "protocol_name": "cooperative-sticky",
            "assignments": [{"member_id": member, "assignment": everything}]}  # fmt: skip
    assert driver.answer(driver.send("sync_group", body, 5))["error_code"] == ErrorCode.NONE
    return member, generation


def test_a_consumer_member_upgrades_a_classic_group_whose_members_stay() -> None:
    """Kafka 4's online upgrade: the first group.protocol=consumer member of a classic group
    makes it a consumer group; the classic members keep their partitions until they rejoin."""
    driver = Driver()
    classic, generation = classic_group_with_one_member(driver)
    answer = driver.join("m1")
    assert answer["error_code"] == ErrorCode.NONE
    assert driver.coordinator.group(GROUP) is None and GROUP in driver.coordinator.consumer.groups
    assert owned(answer) == {}, "partitions the classic member holds are not given away"
    assert classic_beat(driver, classic, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    _generation, theirs = classic_member_settles(driver, classic, {ORDERS: [0, 1, 2, 3]})
    last = settle(driver, {"m1": answer["member_epoch"]})
    mine = set(last["m1"]["owned"].get(ORDERS, []))
    _generation, theirs = classic_member_settles(driver, classic, theirs)
    assert mine.isdisjoint(theirs[ORDERS]) and mine | set(theirs[ORDERS]) == {0, 1, 2, 3}
    replayed = driver.failover()
    assert replayed.group(GROUP) is None, "the classic group's record is tombstoned"
    assert set(replayed.consumer.groups[GROUP].members) == {"m1", classic}


def test_the_last_consumer_member_leaving_downgrades_the_group() -> None:
    driver = Driver()
    classic, generation = classic_group_with_one_member(driver)
    epoch = driver.join("m1")["member_epoch"]
    generation, theirs = classic_member_settles(driver, classic, {ORDERS: [0, 1, 2, 3]})
    driver.heartbeat("m1", -1)  # leaves; only a classic member remains
    group = driver.coordinator.group(GROUP)
    assert group is not None and GROUP not in driver.coordinator.consumer.groups
    assert group.state.value == "PreparingRebalance" and set(group.members) == {classic}
    assert epoch >= 1
    beat = classic_beat(driver, classic, generation)
    assert beat in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION)
    joined = driver.answer(driver.send("join_group", classic_join_body(classic, theirs), 5))
    assert joined["error_code"] == ErrorCode.NONE and joined["leader"] == classic
    replayed = driver.failover()
    assert GROUP not in replayed.consumer.groups and replayed.group(GROUP) is not None


def test_an_empty_consumer_group_becomes_classic_on_a_join() -> None:
    driver = Driver()
    driver.join("m1")
    driver.heartbeat("m1", -1)  # leaves: the group is empty
    join = {"group_id": GROUP, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}  # fmt: skip
    driver.send("join_group", join, 3)
    assert GROUP not in driver.coordinator.consumer.groups
    assert driver.coordinator.group(GROUP) is not None
    keys = [parse_key(r.key) for r in driver.log]
    epoch_keys = [k for k in keys if isinstance(k, ConsumerKey) and k.version == GROUP_EPOCH_KEY]
    assert epoch_keys, "the consumer group's records were written"
    tombstoned = ConsumerGroupLog()
    for record in driver.log:
        key = parse_key(record.key)
        if isinstance(key, ConsumerKey):
            tombstoned.apply(key, record.value)
    assert GROUP not in tombstoned.groups, "every record of it tombstoned"
    assert driver.failover().consumer.groups == {}


def test_admin_apis_tell_the_two_kinds_apart() -> None:
    driver = Driver()
    driver.join("m1")
    listed = driver.answer(driver.send("list_groups", {"states_filter": [], "types_filter": []}, 5))
    assert [(g["group_id"], g["group_type"], g["protocol_type"]) for g in listed["groups"]] == [
        (GROUP, "consumer", "consumer")
    ]
    only_classic = {"states_filter": [], "types_filter": ["Classic"]}
    assert driver.answer(driver.send("list_groups", only_classic, 5))["groups"] == []
    described = driver.answer(
        driver.send("consumer_group_describe", {"group_ids": [GROUP, "nobody"]}, 0)
    )["groups"]
    assert described[0]["error_code"] == ErrorCode.NONE
    assert described[0]["group_state"] == "Stable" and described[0]["assignor_name"] == "uniform"
    member = described[0]["members"][0]
    assert member["client_id"] == "app" and member["subscribed_topic_names"] == [ORDERS]
    names = [t["topic_name"] for t in member["target_assignment"]["topic_partitions"]]
    assert names == [ORDERS]
    assert described[1]["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    classic = driver.answer(driver.send("describe_groups", {"groups": [GROUP]}, 4))["groups"][0]
    assert classic["group_state"] == "Dead", "DescribeGroups knows only classic groups"
    codec_for("ConsumerGroupDescribeResponse", 0).encode(
        {"throttle_time_ms": 0, "groups": described}
    )


def test_deleting_an_empty_consumer_group_tombstones_all_of_it() -> None:
    driver = Driver()
    epoch = driver.join("m1")["member_epoch"]
    driver.commit("m1", epoch, {0: 4})
    delete = {"groups_names": [GROUP]}
    answer = driver.answer(driver.send("delete_groups", delete, 1))
    assert answer["results"][0]["error_code"] == ErrorCode.NON_EMPTY_GROUP
    driver.heartbeat("m1", -1)
    answer = driver.answer(driver.send("delete_groups", delete, 1))
    assert answer["results"][0]["error_code"] == ErrorCode.NONE
    replayed = driver.failover()
    assert GROUP not in replayed.consumer.groups and replayed.committed(GROUP) == {}


@pytest.mark.parametrize("epoch_seen", ["new", "previous"])
def test_a_lost_answer_is_forgiven_after_a_failover(epoch_seen: str) -> None:
    """A member that did not get its last answer heartbeats with its previous epoch; a new
    coordinator knows that epoch from the log too."""
    driver = Driver()
    driver.join("m1")
    driver.join("m2")
    last = settle(driver, {"m1": 1, "m2": 2})
    group = driver.coordinator.consumer.groups[GROUP]
    current = group.members["m1"].reconciled
    driver.failover()
    epoch = current.member_epoch if epoch_seen == "new" else current.previous_member_epoch
    mine = last["m1"]["owned"]
    answer = driver.answer(driver.heartbeat("m1", epoch, mine))
    assert answer["error_code"] == ErrorCode.NONE


# ---- every field of the answers' schemas, at every advertised version ---------------------


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_answers_name_every_field_of_their_schema(version: int) -> None:
    driver = Driver()
    joined = driver.join("m1")
    refused = driver.answer(driver.heartbeat("nobody", 5, {}, version=version))
    assert refused["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    response = load_message("ConsumerGroupHeartbeatResponse").struct
    for answer in (joined, refused):
        assert missing_fields(response, version, answer, "ConsumerGroupHeartbeat", set()) == []


def test_describe_and_list_answers_name_every_field_of_their_schemas() -> None:
    driver = Driver()
    driver.join("m1")
    described = driver.answer(
        driver.send("consumer_group_describe", {"group_ids": [GROUP, "nobody"]}, 0)
    )
    response = load_message("ConsumerGroupDescribeResponse").struct
    assert missing_fields(response, 0, described, "ConsumerGroupDescribe", set()) == []
    listed = driver.answer(driver.send("list_groups", {"states_filter": [], "types_filter": []}, 5))
    response = load_message("ListGroupsResponse").struct
    assert missing_fields(response, 5, listed, "ListGroups", set()) == []


def test_requests_waiting_for_a_write_are_refused_in_their_own_shape_on_unload() -> None:
    driver = Driver(auto_ack=False)
    driver.heartbeat("m1", 0)  # its write stays in flight: the group is busy
    beat = driver.heartbeat("m2", 0)
    join = driver.send("join_group", classic_join_body("c1"), 5)
    assert beat not in driver.answers and join not in driver.answers, "they wait in line"
    driver.run(driver.coordinator.unload(driver.coordinator.partition_for(GROUP)))
    for token, api in ((beat, "ConsumerGroupHeartbeat"), (join, "JoinGroup")):
        answer = driver.answer(token)
        assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
        version = 1 if api == "ConsumerGroupHeartbeat" else 5
        response = load_message(f"{api}Response").struct
        assert missing_fields(response, version, answer, api, set()) == []


def test_the_migration_policy_decides_whether_groups_with_members_change_protocol() -> None:
    """group.consumer.migration.policy: "downgrade" refuses the upgrade of a classic group with
    members (the consumer member is told GROUP_ID_NOT_FOUND and the group is untouched);
    "upgrade" upgrades it but keeps it a consumer group when the last consumer member leaves."""
    downgrade_only = Driver()
    downgrade_only.config = replace(downgrade_only.config, consumer_migration_policy="downgrade")
    downgrade_only.coordinator = downgrade_only.failover()
    classic_group_with_one_member(downgrade_only)
    refused = downgrade_only.join("m1")
    assert refused["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
    assert "group.consumer.migration.policy" in refused["error_message"]
    assert downgrade_only.coordinator.group(GROUP) is not None
    assert GROUP not in downgrade_only.coordinator.consumer.groups

    upgrade_only = Driver()
    upgrade_only.config = replace(upgrade_only.config, consumer_migration_policy="upgrade")
    upgrade_only.coordinator = upgrade_only.failover()
    classic, _generation = classic_group_with_one_member(upgrade_only)
    assert upgrade_only.join("m1")["error_code"] == ErrorCode.NONE
    classic_member_settles(upgrade_only, classic, {ORDERS: [0, 1, 2, 3]})
    upgrade_only.heartbeat("m1", -1)  # leaves; only the classic member remains
    assert upgrade_only.coordinator.group(GROUP) is None
    assert set(upgrade_only.coordinator.consumer.groups[GROUP].members) == {classic}


def test_the_migration_policy_setting_reaches_the_coordinator_in_any_case() -> None:
    assert group_config(broker_settings({})).consumer_migration_policy == "bidirectional"
    configured = broker_settings({"group.consumer.migration.policy": "Disabled"})
    assert not group_config(configured).upgrade_enabled
    assert not group_config(configured).downgrade_enabled
    with pytest.raises(ConfigError, match=r"group\.consumer\.migration\.policy: 'sideways'"):
        broker_settings({"group.consumer.migration.policy": "sideways"})
