"""The group coordinator's rules, driven without a broker: requests in, answers and writes out."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.groups import (
    Append,
    Caller,
    GroupConfig,
    GroupCoordinator,
    GroupEvent,
    GroupState,
    Respond,
    group_partition,
)
from rlog.core.groups.partitioner import java_string_hash
from rlog.core.groups.records import (
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    group_value,
    offset_key,
    offset_value,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
GROUP = "orders-app"
SESSION_MS = 10_000
PROTOCOLS = [{"name": "range", "metadata": b"sub-a"}, {"name": "roundrobin", "metadata": b"sub-b"}]


class Driver:
    """Runs a coordinator the way the broker does, with a log per partition and a clock."""

    def __init__(self, *, delay_ms: int = 0, auto_ack: bool = True) -> None:
        ids = itertools.count(1)
        self.config = GroupConfig(offsets_partitions=4, initial_rebalance_delay_ms=delay_ms)
        self.coordinator = GroupCoordinator(self.config, lambda client: f"{client}-{next(ids)}")
        self.partition = self.coordinator.partition_for(GROUP)
        for partition in range(self.config.offsets_partitions):
            self.coordinator.start_loading(partition)
            self.coordinator.finish_loading(partition, [], 0)
        self.now = 0
        self.tokens = itertools.count(1)
        self.answers: dict[int, Body] = {}
        self.log: list[tuple[bytes, bytes | None]] = []
        self.unacked: list[Append] = []
        self.events: list[GroupEvent] = []
        self.auto_ack = auto_ack

    def run(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                assert effect.token not in self.answers, "answered twice"
                self.answers[effect.token] = effect.body
            elif isinstance(effect, GroupEvent):
                self.events.append(effect)
            elif self.auto_ack:
                self.ack(effect)
            else:
                self.unacked.append(effect)

    def ack(self, append: Append, error: ErrorCode = ErrorCode.NONE) -> None:
        if error == ErrorCode.NONE:
            self.log += list(append.records)
        self.run(self.coordinator.append_done(append.append_id, error, self.now))

    def send(self, method: str, body: Body, version: int, client: str = "c") -> int:
        token = next(self.tokens)
        handle = getattr(self.coordinator, method)
        caller = Caller(token, version, client, "/127.0.0.1")
        timed = method not in ("fetch_offsets", "describe_groups", "list_groups")
        self.run(handle(caller, body, self.now) if timed else handle(caller, body))
        return token

    def answer(self, token: int) -> Body:
        assert token in self.answers, f"request {token} is still waiting"
        return self.answers[token]

    def tick(self, ms: int) -> None:
        self.now += ms
        self.run(self.coordinator.tick(self.now))

    # ---- the protocol steps a consumer takes ----

    def join(self, member_id: str = "", instance: str | None = None, version: int = 5) -> int:
        body = {
            "group_id": GROUP,
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": 30_000,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": PROTOCOLS,
        }
        return self.send("join_group", body, version)

    def join_new_member(self) -> tuple[str, int]:
        """KIP-394: the first join gets a member id, the second one waits for the rebalance."""
        first = self.answer(self.join())
        assert first["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
        return first["member_id"], self.join(first["member_id"])

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes]) -> int:
        body = {
            "group_id": GROUP,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": None,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()],
        }
        return self.send("sync_group", body, 3)

    def heartbeat(self, member_id: str, generation: int) -> ErrorCode:
        body = {"group_id": GROUP, "generation_id": generation, "member_id": member_id}
        return ErrorCode(self.answer(self.send("heartbeat", body, 3))["error_code"])

    def commit(self, member_id: str, generation: int, offset: int, partition: int = 0) -> int:
        body = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": generation,
            "member_id": member_id,
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": offset,
                            "committed_leader_epoch": 3,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        return self.send("commit_offsets", body, 7)

    def committed(self, partition: int = 0) -> int:
        body = {"group_id": GROUP, "topics": [{"name": "orders", "partition_indexes": [partition]}]}
        answer = self.answer(self.send("fetch_offsets", body, 5))
        return answer["topics"][0]["partitions"][0]["committed_offset"]


def commit_error(answer: Body) -> ErrorCode:
    return ErrorCode(answer["topics"][0]["partitions"][0]["error_code"])


def stable_pair(driver: Driver) -> tuple[str, str, int]:
    """Two members in a Stable group: (leader, follower, generation)."""
    first, first_join = driver.join_new_member()
    joined = driver.answer(first_join)  # no initial delay: the first member is alone
    assert joined["error_code"] == ErrorCode.NONE and joined["generation_id"] == 1
    driver.answer(driver.sync(first, 1, {first: b"all"}))
    second, second_join = driver.join_new_member()
    rejoin = driver.join(first)
    leader_view, follower_view = driver.answer(rejoin), driver.answer(second_join)
    assert leader_view["generation_id"] == follower_view["generation_id"] == 2
    assert leader_view["leader"] == first
    assert {m["member_id"] for m in leader_view["members"]} == {first, second}
    assert follower_view["members"] == []  # only the leader sees the subscriptions
    follower_sync = driver.sync(second, 2, {})
    leader_sync = driver.sync(first, 2, {first: b"p0", second: b"p1"})
    assert driver.answer(leader_sync)["assignment"] == b"p0"
    assert driver.answer(follower_sync)["assignment"] == b"p1"
    return first, second, 2


def test_members_join_sync_and_get_the_leaders_assignment() -> None:
    driver = Driver()
    _leader, follower, generation = stable_pair(driver)
    group = driver.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.STABLE
    assert group.protocol == "range"  # every member's first choice
    assert driver.heartbeat(follower, generation) == ErrorCode.NONE
    assert driver.heartbeat(follower, generation - 1) == ErrorCode.ILLEGAL_GENERATION
    assert driver.heartbeat("stranger", generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_the_assignment_is_only_given_once_it_is_stored() -> None:
    driver = Driver(auto_ack=False)
    member, join = driver.join_new_member()
    driver.answer(join)
    sync = driver.sync(member, 1, {member: b"mine"})
    assert sync not in driver.answers  # waiting for the ISR
    (write,) = driver.unacked
    driver.ack(write)
    assert driver.answer(sync)["assignment"] == b"mine"


def test_a_failed_write_of_the_assignment_makes_the_group_rebalance() -> None:
    driver = Driver(auto_ack=False)
    member, join = driver.join_new_member()
    driver.answer(join)
    sync = driver.sync(member, 1, {member: b"mine"})
    driver.ack(driver.unacked.pop(), ErrorCode.NOT_ENOUGH_REPLICAS)
    assert driver.answer(sync)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
    group = driver.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.PREPARING_REBALANCE


def test_a_new_member_makes_the_others_rejoin() -> None:
    driver = Driver()
    leader, follower, generation = stable_pair(driver)
    _newcomer, newcomer_join = driver.join_new_member()
    assert driver.heartbeat(follower, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    driver.join(leader)
    follower_join = driver.join(follower)
    assert driver.answer(newcomer_join)["generation_id"] == generation + 1
    assert driver.answer(follower_join)["generation_id"] == generation + 1


def test_a_member_that_stops_heartbeating_is_removed_after_its_session() -> None:
    driver = Driver()
    leader, follower, generation = stable_pair(driver)
    for _ in range(5):  # only the leader heartbeats
        driver.tick(SESSION_MS // 4)
        driver.heartbeat(leader, generation)
    group = driver.coordinator.group(GROUP)
    assert group is not None and follower not in group.members
    assert driver.heartbeat(leader, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    removed, rebalancing = driver.events[-2:]
    assert removed.kind == "group_member_removed" and rebalancing.kind == "group_rebalancing"
    assert f"member {follower} sent no heartbeat for {SESSION_MS} ms" in rebalancing.message
    answer = driver.answer(driver.join(leader))
    assert answer["generation_id"] == generation + 1
    assert [m["member_id"] for m in answer["members"]] == [leader]


def test_leaving_rebalances_at_once_and_the_last_one_out_empties_the_group() -> None:
    driver = Driver()
    leader, follower, generation = stable_pair(driver)
    body = {"group_id": GROUP, "members": [{"member_id": follower, "group_instance_id": None}]}
    left = driver.answer(driver.send("leave_group", body, 3))
    assert left["members"][0]["error_code"] == ErrorCode.NONE
    assert driver.answer(driver.join(leader))["generation_id"] == generation + 1
    body = {"group_id": GROUP, "member_id": leader}
    assert driver.answer(driver.send("leave_group", body, 1))["error_code"] == ErrorCode.NONE
    group = driver.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.EMPTY


def test_the_initial_delay_gathers_the_first_members_into_one_generation() -> None:
    driver = Driver(delay_ms=3000)
    _first, first_join = driver.join_new_member()
    driver.tick(1000)
    _second, second_join = driver.join_new_member()
    driver.tick(2500)  # the first delay ends; a member arrived meanwhile, so it waits again
    assert first_join not in driver.answers
    driver.tick(3000)
    assert driver.answer(first_join)["generation_id"] == 1
    assert driver.answer(second_join)["generation_id"] == 1


def test_offsets_commit_only_for_the_current_generation_and_only_once_stored() -> None:
    driver = Driver(auto_ack=False)
    driver.auto_ack = True
    _leader, follower, generation = stable_pair(driver)
    driver.auto_ack = False
    stale = driver.answer(driver.commit(follower, generation - 1, 10))
    assert commit_error(stale) == ErrorCode.ILLEGAL_GENERATION
    unknown = driver.answer(driver.commit("stranger", generation, 10))
    assert commit_error(unknown) == ErrorCode.UNKNOWN_MEMBER_ID
    token = driver.commit(follower, generation, 42)
    assert token not in driver.answers and driver.committed() == -1
    driver.ack(driver.unacked.pop())
    assert commit_error(driver.answer(token)) == ErrorCode.NONE
    assert driver.committed() == 42
    failed = driver.commit(follower, generation, 50)
    driver.ack(driver.unacked.pop(), ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert commit_error(driver.answer(failed)) == ErrorCode.NOT_COORDINATOR
    assert driver.committed() == 42  # a failed write moves nothing


def test_a_member_less_commit_creates_an_empty_group() -> None:
    driver = Driver()
    assert commit_error(driver.answer(driver.commit("", -1, 7))) == ErrorCode.NONE
    assert driver.committed() == 7
    group = driver.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.EMPTY


def test_a_new_coordinator_loads_the_groups_and_offsets_from_the_log() -> None:
    driver = Driver()
    leader, follower, generation = stable_pair(driver)
    driver.answer(driver.commit(follower, generation, 99, partition=1))
    successor = GroupCoordinator(driver.config, lambda client: f"{client}-new")
    successor.start_loading(driver.partition)
    summary = successor.finish_loading(driver.partition, driver.log, driver.now)
    assert (summary.groups, summary.offsets) == (1, 1)
    driver.coordinator = successor
    assert driver.committed(partition=1) == 99
    group = successor.group(GROUP)
    assert group is not None and group.state == GroupState.STABLE
    assert group.generation == generation and group.leader == leader
    # The members carry on with the new coordinator without a rebalance.
    assert driver.heartbeat(follower, generation) == ErrorCode.NONE
    assert driver.answer(driver.sync(follower, generation, {}))["assignment"] == b"p1"


def test_loading_another_partition_leaves_the_live_groups_alone() -> None:
    """Found by the cluster simulation: a coordinator that took over a second offsets
    partition re-created every group with offsets in any partition it led, from the new
    partition's (absent) metadata: a Stable group became a new one at generation 0, its members
    got UNKNOWN_MEMBER_ID and rebalanced from scratch after an unrelated broker failed."""
    driver = Driver()
    _leader, follower, generation = stable_pair(driver)
    driver.answer(driver.commit(follower, generation, 7, partition=1))
    other = next(p for p in range(driver.config.offsets_partitions) if p != driver.partition)
    driver.run(driver.coordinator.unload(other))
    driver.coordinator.start_loading(other)
    summary = driver.coordinator.finish_loading(other, [], driver.now)
    assert (summary.groups, summary.offsets) == (0, 0)
    group = driver.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.STABLE
    assert group.generation == generation
    assert driver.heartbeat(follower, generation) == ErrorCode.NONE
    assert driver.committed(partition=1) == 7


def test_groups_of_a_partition_this_broker_no_longer_leads_are_not_served() -> None:
    driver = Driver(auto_ack=False)
    member, join = driver.join_new_member()
    driver.answer(join)
    sync = driver.sync(member, 1, {member: b"x"})
    driver.run(driver.coordinator.unload(driver.partition))
    assert driver.answer(sync)["error_code"] == ErrorCode.NOT_COORDINATOR
    assert driver.heartbeat(member, 1) == ErrorCode.NOT_COORDINATOR
    driver.coordinator.start_loading(driver.partition)
    assert driver.heartbeat(member, 1) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_a_restarted_static_member_takes_its_place_without_a_rebalance() -> None:
    driver = Driver()
    first = driver.answer(driver.join(instance="host-a"))
    generation = first["generation_id"]
    driver.answer(driver.sync(first["member_id"], generation, {first["member_id"]: b"a"}))
    second_join = driver.join(instance="host-b")  # a rebalance for the newcomer
    driver.join(first["member_id"], instance="host-a")
    second = driver.answer(second_join)
    assert second["error_code"] == ErrorCode.NONE
    generation += 1
    leader = first["member_id"]
    driver.answer(driver.sync(leader, generation, {leader: b"a", second["member_id"]: b"b"}))
    # host-b restarts: a new member id, the same place, no new generation.
    back = driver.answer(driver.join(instance="host-b"))
    assert back["error_code"] == ErrorCode.NONE and back["generation_id"] == generation
    assert back["member_id"] != second["member_id"]
    assert driver.answer(driver.sync(back["member_id"], generation, {}))["assignment"] == b"b"
    assert driver.heartbeat(second["member_id"], generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_delete_refuses_a_group_with_members_and_removes_an_empty_one() -> None:
    driver = Driver()
    leader, follower, generation = stable_pair(driver)
    driver.answer(driver.commit(follower, generation, 5))
    body = {"groups_names": [GROUP, "never-seen"]}
    results = driver.answer(driver.send("delete_groups", body, 1))["results"]
    assert [r["error_code"] for r in results] == [
        ErrorCode.NON_EMPTY_GROUP,
        ErrorCode.GROUP_ID_NOT_FOUND,
    ]
    for member in (leader, follower):
        driver.send("leave_group", {"group_id": GROUP, "member_id": member}, 1)
    results = driver.answer(driver.send("delete_groups", {"groups_names": [GROUP]}, 1))["results"]
    assert results[0]["error_code"] == ErrorCode.NONE
    assert driver.committed() == -1
    assert driver.log[-1][1] is None  # tombstones, so compaction drops the group for good


def test_a_group_named_twice_is_deleted_and_answered_once() -> None:
    """As Kafka's set of names. Two tombstone writes answered when the first ended, NONE
    whatever the second's outcome."""
    driver = Driver()
    leader, follower, _ = stable_pair(driver)
    for member in (leader, follower):
        driver.send("leave_group", {"group_id": GROUP, "member_id": member}, 1)
    driver.auto_ack = False
    token = driver.send("delete_groups", {"groups_names": [GROUP, GROUP]}, 1)
    assert len(driver.unacked) == 1, driver.unacked
    driver.ack(driver.unacked.pop())
    assert driver.answer(token)["results"] == [{"group_id": GROUP, "error_code": ErrorCode.NONE}]


def test_bad_joins_get_clear_errors_and_change_nothing() -> None:
    driver = Driver()
    body = {
        "group_id": GROUP,
        "session_timeout_ms": 10,  # below group.min.session.timeout.ms
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": PROTOCOLS,
    }
    answer = driver.answer(driver.send("join_group", body, 5))
    assert answer["error_code"] == ErrorCode.INVALID_SESSION_TIMEOUT
    answer = driver.answer(driver.send("join_group", body | {"group_id": ""}, 5))
    assert answer["error_code"] == ErrorCode.INVALID_GROUP_ID
    body |= {"session_timeout_ms": SESSION_MS, "protocols": []}
    answer = driver.answer(driver.send("join_group", body, 5))
    assert answer["error_code"] == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert driver.coordinator.group(GROUP) is None or not driver.coordinator.group(GROUP).members


def test_describe_and_list_show_the_group_as_kafka_does() -> None:
    driver = Driver()
    leader, follower, _generation = stable_pair(driver)
    described = driver.answer(driver.send("describe_groups", {"groups": [GROUP, "nope"]}, 4))
    group, unknown = described["groups"]
    assert (group["group_state"], group["protocol_type"], group["protocol_data"]) == (
        "Stable",
        "consumer",
        "range",
    )
    assert {m["member_id"]: m["member_assignment"] for m in group["members"]} == {
        leader: b"p0",
        follower: b"p1",
    }
    assert (unknown["error_code"], unknown["group_state"]) == (ErrorCode.NONE, "Dead")
    listed = driver.answer(driver.send("list_groups", {}, 2))["groups"]
    assert [(g["group_id"], g["protocol_type"]) for g in listed] == [(GROUP, "consumer")]


def test_java_string_hash_and_kafkas_partition_choice() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert group_partition("polygenelubricants", 50) == 0  # Kafka's Utils.abs masks the sign
    assert group_partition("hello", 50) == 99162322 % 50


@given(
    group=st.text(max_size=20),
    topic=st.text(min_size=1, max_size=20),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(-1, 2**63 - 1),
    metadata=st.text(max_size=30),
)
def test_offset_records_round_trip(
    group: str, topic: str, partition: int, offset: int, metadata: str
) -> None:
    key = parse_key(offset_key(group, topic, partition))
    assert (key.group, key.topic, key.partition) == (group, topic, partition)  # type: ignore[union-attr]
    committed = CommittedOffset(offset, 4, metadata, 1_700_000_000_000)
    assert parse_offset_value(offset_value(committed)) == committed


@given(
    members=st.lists(
        st.tuples(st.text(min_size=1, max_size=10), st.none() | st.text(max_size=5), st.binary()),
        max_size=4,
    )
)
def test_group_records_round_trip(members: list[tuple[str, str | None, bytes]]) -> None:
    record = GroupRecord(
        "consumer",
        7,
        "range",
        members[0][0] if members else None,
        123,
        tuple(MemberRecord(m, i, "client", "/h", 300, 45, s, s[::-1]) for m, i, s in members),
    )
    assert parse_group_value(group_value(record)) == record


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x09abc", b"\x00\x01\x00\x05ab"])
def test_corrupt_keys_are_skipped_when_loading(data: bytes) -> None:
    coordinator = GroupCoordinator(GroupConfig(offsets_partitions=1), str)
    coordinator.start_loading(0)
    summary = coordinator.finish_loading(0, [(data, b"x")], 0)
    assert summary.corrupt_records == 1 and summary.groups == 0
