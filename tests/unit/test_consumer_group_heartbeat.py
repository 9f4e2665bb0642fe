"""ConsumerGroupHeartbeat on one group of the consumer protocol (KIP-848), alone: members that
join, give partitions up when told, leave, crash and come back, as Kafka's coordinator treats
them."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.groups.consumer_group import (
    ConsumerGroup,
    ConsumerGroupSettings,
    ConsumerGroupState,
    TopicIds,
)
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
ORDERS, REFUNDS = uuid.UUID(int=1), uuid.UUID(int=2)
SETTINGS = ConsumerGroupSettings(session_timeout_ms=45_000, heartbeat_interval_ms=5_000)


def topics(orders: int = 4, refunds: int = 2) -> TopicIds:
    return TopicIds({"orders": (ORDERS, orders), "refunds": (REFUNDS, refunds)})


def join(group: ConsumerGroup, member_id: str, now: int = 0, **fields: Any) -> Body:
    ids = fields.pop("ids", None) or topics()
    body = {
        "group_id": "g",
        "member_id": member_id,
        "member_epoch": 0,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": ["orders"],
        "topic_partitions": [],
        **fields,
    }
    return group.heartbeat(body, "client", "/127.0.0.1", ids, now)


def beat(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    owned: dict[uuid.UUID, list[int]] | None,
    now: int = 0,
    ids: TopicIds | None = None,
    **fields: Any,
) -> Body:
    wire = None if owned is None else [{"topic_id": t, "partitions": p} for t, p in owned.items()]
    body = {"group_id": "g", "member_id": member_id, "member_epoch": epoch,
            "topic_partitions": wire, **fields}  # fmt: skip
    return group.heartbeat(body, "client", "/127.0.0.1", ids or topics(), now)


def assigned(answer: Body) -> dict[uuid.UUID, list[int]] | None:
    if answer["assignment"] is None:
        return None
    return {t["topic_id"]: t["partitions"] for t in answer["assignment"]["topic_partitions"]}


def test_the_first_member_gets_every_partition_at_epoch_one() -> None:
    group = ConsumerGroup("g", SETTINGS)
    answer = join(group, "a")
    assert (answer["error_code"], answer["member_id"], answer["member_epoch"]) == (0, "a", 1)
    assert answer["heartbeat_interval_ms"] == 5_000
    assert assigned(answer) == {ORDERS: [0, 1, 2, 3]}
    assert group.state is ConsumerGroupState.STABLE
    generated = join(ConsumerGroup("g", SETTINGS), "")  # v0: the coordinator names it
    assert uuid.UUID(generated["member_id"])


def test_a_second_member_gets_its_share_only_after_the_first_gave_it_up() -> None:
    group = ConsumerGroup("g", SETTINGS)
    join(group, "a")
    second = join(group, "b")
    assert (second["member_epoch"], assigned(second)) == (2, {})  # its share is still a's
    assert group.state is ConsumerGroupState.RECONCILING
    first = beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]})
    kept = assigned(first)
    assert first["member_epoch"] == 1 and kept is not None and len(kept[ORDERS]) == 2
    # a still owns everything: b gets nothing yet.
    assert assigned(beat(group, "b", 2, {})) is None
    done = beat(group, "a", 1, kept)
    assert (done["member_epoch"], assigned(done)) == (2, None)
    taken = assigned(beat(group, "b", 2, {}))
    assert taken is not None
    assert sorted(taken[ORDERS] + kept[ORDERS]) == [0, 1, 2, 3]
    assert group.state is ConsumerGroupState.STABLE


def test_requests_are_checked_as_kafka_checks_them() -> None:
    group = ConsumerGroup("g", SETTINGS)
    cases = [
        (join(group, "a", group_id=""), "GroupId can't be empty."),
        (join(group, "a", rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided"),
        (join(group, "a", topic_partitions=None), "TopicPartitions must be empty"),
        (
            join(group, "a", subscribed_topic_names=[]),
            "SubscribedTopicNames or SubscribedTopicRegex",
        ),
        (join(group, "a", instance_id=""), "InstanceId can't be empty."),
        (beat(group, "", 3, None), "MemberId can't be empty."),
        (beat(group, "a", -3, None), "MemberEpoch is invalid."),
        (beat(group, "a", -2, None), "InstanceId can't be null."),
    ]
    for answer, message in cases:
        assert answer["error_code"] == ErrorCode.INVALID_REQUEST
        assert answer["error_message"].startswith(message)
    odd = join(group, "a", server_assignor="sticky")
    assert odd["error_code"] == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert "uniform, range" in odd["error_message"]
    assert beat(group, "ghost", 4, None)["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
    assert not group.members


def test_an_epoch_the_group_never_gave_is_fenced_but_a_lost_answer_is_forgiven() -> None:
    group = ConsumerGroup("g", SETTINGS)
    join(group, "a")
    assert beat(group, "a", 7, None)["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    join(group, "b")
    first = beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]})
    beat(group, "a", 1, assigned(first))  # now at epoch 2; say that answer was lost
    again = beat(group, "a", 1, assigned(first))
    assert (again["error_code"], again["member_epoch"]) == (0, 2)
    stale = beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]})  # owning more than it was given
    assert stale["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH


def test_a_member_whose_heartbeats_stop_is_removed_and_its_partitions_move() -> None:
    group = ConsumerGroup("g", SETTINGS)
    join(group, "a", now=0)
    join(group, "b", now=0)
    a = beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]}, now=1_000)
    beat(group, "a", 1, assigned(a), now=1_000)
    assert group.expire(40_000, topics()) == []
    beat(group, "b", 2, {}, now=40_000)  # b heartbeats, a does not
    assert group.expire(46_000, topics()) == [("a", "no heartbeat within the session timeout")]
    answer = beat(group, "b", 2, None, now=46_000)
    assert (answer["member_epoch"], assigned(answer)) == (3, {ORDERS: [0, 1, 2, 3]})


def test_a_member_that_never_gives_up_partitions_is_removed_at_its_rebalance_timeout() -> None:
    group = ConsumerGroup("g", SETTINGS)
    join(group, "a", now=0, rebalance_timeout_ms=10_000)
    join(group, "b", now=0)
    beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]}, now=0)  # told to give two up
    beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]}, now=5_000)  # still holds them
    beat(group, "b", 2, {}, now=9_000)
    gone = group.expire(10_000, topics())
    assert gone == [("a", "partitions not revoked within the rebalance timeout")]
    assert assigned(beat(group, "b", 2, {}, now=10_000)) == {ORDERS: [0, 1, 2, 3]}


def test_leaving_frees_the_partitions_and_a_static_member_keeps_them_across_a_restart() -> None:
    group = ConsumerGroup("g", SETTINGS)
    join(group, "a", instance_id="host-1")
    join(group, "b")
    a = beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]})
    kept = assigned(a)
    beat(group, "a", 1, kept)
    beat(group, "b", 2, {})
    left = beat(group, "a", -2, kept, instance_id="host-1")
    assert (left["error_code"], left["member_epoch"]) == (0, -2)
    refused = join(group, "a2", instance_id="host-1")
    assert refused["error_code"] == 0  # it left for a while: the new incarnation takes over
    assert assigned(refused) == kept
    taken = join(group, "a3", instance_id="host-1")
    assert taken["error_code"] == ErrorCode.UNRELEASED_INSTANCE_ID
    gone = beat(group, "b", group.members["b"].epoch, None)
    assert gone["error_code"] == 0
    leave = beat(group, "b", -1, None)
    assert (leave["error_code"], leave["member_epoch"]) == (0, -1)
    assert "b" not in group.members


def test_more_partitions_move_the_group_epoch_and_are_assigned() -> None:
    group = ConsumerGroup("g", SETTINGS)
    join(group, "a")
    grown = beat(group, "a", 1, {ORDERS: [0, 1, 2, 3]}, ids=topics(orders=6))
    assert (grown["member_epoch"], assigned(grown)) == (2, {ORDERS: [0, 1, 2, 3, 4, 5]})
    subscribe = beat(group, "a", 2, {ORDERS: [0, 1, 2, 3, 4, 5]}, ids=topics(orders=6),
                     subscribed_topic_names=["orders", "refunds"])  # fmt: skip
    assert assigned(subscribe) == {ORDERS: [0, 1, 2, 3, 4, 5], REFUNDS: [0, 1]}
    # Fewer partitions (a topic re-created smaller): the ones gone are given up first.
    shrunk = beat(group, "a", 3, None)
    assert (shrunk["member_epoch"], assigned(shrunk)) == (
        3,
        {ORDERS: [0, 1, 2, 3], REFUNDS: [0, 1]},
    )


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_members_that_obey_never_own_a_partition_together_and_settle(data: st.DataObject) -> None:
    """Random joins, leaves, crashes and heartbeats of members that do what they are told:
    no partition is ever owned by two of them, and once they stop changing, every member ends
    stable, owning its share, all partitions owned."""
    group = ConsumerGroup("g", SETTINGS)
    ids = topics(orders=5, refunds=3)
    owned: dict[str, dict[uuid.UUID, list[int]]] = {}
    epochs: dict[str, int] = {}
    now = 0

    def heartbeat(name: str) -> None:
        answer = beat(group, name, epochs[name], owned[name], now=now, ids=ids)
        if answer["error_code"] != 0:  # fenced or removed: it gives everything up and rejoins
            owned.pop(name)
            epochs.pop(name)
            return
        epochs[name] = answer["member_epoch"]
        if answer["assignment"] is not None:
            owned[name] = assigned(answer) or {}

    for step in range(data.draw(st.integers(5, 40))):
        now += 1_000
        action = data.draw(st.sampled_from(["join", "beat", "beat", "beat", "leave", "crash"]))
        names = sorted(owned)
        if action == "join" or not names:
            name = f"m{step}"
            subscribed = data.draw(
                st.sampled_from([["orders"], ["refunds"], ["orders", "refunds"]])
            )
            answer = join(group, name, now=now, subscribed_topic_names=subscribed, ids=ids)
            owned[name], epochs[name] = assigned(answer) or {}, answer["member_epoch"]
        elif action == "beat":
            heartbeat(data.draw(st.sampled_from(names)))
        elif action == "leave":
            name = data.draw(st.sampled_from(names))
            beat(group, name, -1, None, now=now, ids=ids)
            owned.pop(name), epochs.pop(name)
        else:  # crash: it stops, and the coordinator notices later
            name = data.draw(st.sampled_from(names))
            group.remove(name, ids)
            owned.pop(name), epochs.pop(name)
        pairs = [(t, p) for parts in owned.values() for t, ps in parts.items() for p in ps]
        assert len(pairs) == len(set(pairs)), f"a partition owned twice: {owned}"
    for _ in range(3 * len(owned) + 3):
        for name in sorted(owned):
            heartbeat(name)
            pairs = [(t, p) for parts in owned.values() for t, ps in parts.items() for p in ps]
            assert len(pairs) == len(set(pairs)), f"a partition owned twice: {owned}"
    if owned:
        assert group.state is ConsumerGroupState.STABLE
        subscribed = set().union(*(m.subscribed for m in group.members.values()))
        wanted = {(ORDERS if t == "orders" else REFUNDS, p)
                  for t in subscribed for p in range(5 if t == "orders" else 3)}  # fmt: skip
        pairs = {(t, p) for parts in owned.values() for t, ps in parts.items() for p in ps}
        assert pairs == wanted


def test_a_regex_subscribes_to_every_matching_topic_made_before_or_after() -> None:
    group = ConsumerGroup("g", SETTINGS)
    internal = uuid.UUID(int=9)
    ids = TopicIds({"orders": (ORDERS, 2), "refunds": (REFUNDS, 2), "__orders": (internal, 1)})
    answer = join(group, "a", ids=ids, subscribed_topic_names=None, subscribed_topic_regex="or.*")
    assert assigned(answer) == {ORDERS: [0, 1]}, "matched whole; internal topics never"
    assert group.is_subscribed_to("orders") and not group.is_subscribed_to("refunds")
    epoch = answer["member_epoch"]
    later = uuid.UUID(int=3)
    grown = TopicIds({**ids.by_name, "orders-eu": (later, 1)})
    answer = beat(group, "a", epoch, {ORDERS: [0, 1]}, ids=grown)
    assert answer["member_epoch"] > epoch, "a new matching topic moves the group epoch"
    assert assigned(answer) == {ORDERS: [0, 1], later: [0]}
    # librdkafka sends "" when it subscribes by name: no regex.
    answer = beat(group, "a", answer["member_epoch"], None, ids=grown,
                  subscribed_topic_names=["refunds"], subscribed_topic_regex="")  # fmt: skip
    assert assigned(answer) == {}, "what it had is revoked first"
    answer = beat(group, "a", answer["member_epoch"], {}, ids=grown)
    assert assigned(answer) == {REFUNDS: [0, 1]}


def test_a_regex_that_does_not_compile_is_refused() -> None:
    answer = join(ConsumerGroup("g", SETTINGS), "a", subscribed_topic_regex="orders[")
    assert answer["error_code"] == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert "orders[" in answer["error_message"]


def test_a_member_that_missed_its_assignment_is_told_again() -> None:
    """Its answer was lost (or a second copy of its request was answered first, with nothing
    new in it): it says it owns less than it was given, and hears its assignment again."""
    group = ConsumerGroup("g", SETTINGS)
    epoch = join(group, "a")["member_epoch"]
    steady = beat(group, "a", epoch, {ORDERS: [0, 1, 2, 3]})
    assert steady["assignment"] is None, "nothing new: no assignment"
    missed = beat(group, "a", epoch, {})
    assert assigned(missed) == {ORDERS: [0, 1, 2, 3]}
    assert beat(group, "a", epoch, None)["assignment"] is None, "no word on what it owns"
