"""``rlog group describe`` and ``rlog group list --type`` against a real 3-broker cluster whose
group coordinators serve the consumer group protocol (KIP-848) to real confluent-kafka consumers
(``group.protocol=consumer``), next to a classic group made by ``rlog consume --group``.

The consumers are the test's own, closed in a ``finally``; every ``rlog`` is a subprocess with a
timeout (support.cli_runner). Member "a" owns the whole topic first, then stops polling while "b"
joins: librdkafka waits for the application (its on_revoke callback, served by poll) before it
releases partitions, so the group stays Reconciling, with "b" short of its target assignment,
until the test lets "a" poll again.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from rlog.core.protocol.apis import SUPPORTED, ApiKey
from support.cli_runner import Result, ok, rlog
from support.cluster import Cluster
from support.groups import GROUP_CONFIG

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        ApiKey.CONSUMER_GROUP_DESCRIBE not in SUPPORTED,
        reason="the brokers do not serve ConsumerGroupDescribe",
    ),
]

CONFIG = (
    GROUP_CONFIG
    + """"group.consumer.heartbeat.interval.ms" = 500
"group.consumer.session.timeout.ms" = 6000
"""
)
PARTITIONS = 4
DESCRIBE_HEADERS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip
MEMBERS_HEADERS = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH",
                   "SUBSCRIPTION", "ASSIGNMENT", "TARGET-ASSIGNMENT", "PENDING"]  # fmt: skip


@pytest.fixture
def cluster3(cluster_factory) -> Cluster:
    return cluster_factory(brokers=3, config_text=CONFIG)


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    made: list[Consumer] = []
    yield made
    for consumer in made:
        consumer.close()


def run(cluster: Cluster, *args: str, stdin: str | None = None) -> Result:
    return rlog("--bootstrap", cluster.bootstrap, *args, stdin=stdin)


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def describe(cluster: Cluster, group: str) -> dict[str, Any]:
    return json.loads(ok(run(cluster, "group", "describe", group, "--json")).out)


def poll_until(
    what: str,
    polling: list[Consumer],
    check: Callable[[], Any],
    timeout_s: float = 30,
) -> Any:
    """Poll ``polling`` (and only those) until ``check`` answers something true; that answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for consumer in polling:
            consumer.poll(0.1)
        found = check()
        if found:
            return found
    raise AssertionError(f"no {what} within {timeout_s} s")


def owned(consumer: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


def keys(partitions: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(p["topic"], p["partition"]) for p in partitions}


def test_describe_and_list_show_the_consumer_protocol(
    cluster3: Cluster, consumers: list[Consumer]
) -> None:
    cluster = cluster3
    topic, group, classic = new_name("t"), new_name("g"), new_name("classic")
    ok(run(cluster, "topic", "create", topic, "-p", str(PARTITIONS), "-r", "3"))
    for p in range(PARTITIONS):  # partition p holds p + 2 records
        values = "".join(f"{p}-{i}\n" for i in range(p + 2))
        ok(run(cluster, "produce", topic, "--partition", str(p), "--acks", "all", stdin=values))
    everything = {(topic, p) for p in range(PARTITIONS)}
    # A classic group (rlog consume joins with JoinGroup/SyncGroup), Empty once it is done.
    ok(run(cluster, "consume", topic, "-g", classic, "-o", "start", "-e"))

    def member(client_id: str, **callbacks: Any) -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "client.id": client_id,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumers.append(consumer)
        consumer.subscribe([topic], **callbacks)
        return consumer

    revoked: list[Any] = []
    a = member("member-a", on_revoke=lambda _c, parts: revoked.append(parts))
    poll_until("assignment of every partition to a", [a], lambda: owned(a) == everything)
    a.commit(offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 3, 2)], asynchronous=False)

    # b joins; a does not poll, so it cannot release the partitions b's target holds.
    b = member("member-b")

    def reconciling() -> dict[str, Any] | None:
        document = describe(cluster, group)
        by_client = {m["client_id"]: m for m in document["members"]}
        joined = by_client.get("member-b")
        return document if joined and joined["target_partitions"] else None

    document = poll_until("b in a target assignment", [b], reconciling)
    assert document["type"] == "consumer" and document["state"] == "Reconciling", document
    a_view, b_view = sorted(document["members"], key=lambda m: m["client_id"])
    assert not revoked and owned(a) == everything  # a really still holds everything
    assert a_view["reconciling"] and b_view["reconciling"]
    # b owns nothing of its target yet: every partition of it is still to be assigned
    assert keys(b_view["partitions"]) == set()
    assert keys(b_view["partitions_to_assign"]) == keys(b_view["target_partitions"])
    # a's target leaves b's partitions out; its epoch stays behind until it releases them
    assert keys(a_view["target_partitions"]) == everything - keys(b_view["target_partitions"])
    assert a_view["member_epoch"] < document["assignment_epoch"]
    table = ok(run(cluster, "group", "describe", group, "--members"))
    rows = {line.split()[3]: line.split() for line in table.out.splitlines()[1:]}
    assert table.out.splitlines()[0].split() == MEMBERS_HEADERS
    assert rows["member-b"][7] == "-" and rows["member-b"][9].startswith("+")
    assert rows["member-a"][9].endswith(f"behind-epoch-{document['assignment_epoch']}")
    assert "Warning: Consumer group" in table.err and "is rebalancing." in table.err
    assert f"Member {b_view['consumer_id']} (client member-b" in table.err

    # a polls again: it releases, b takes its partitions, the group settles.
    def stable() -> dict[str, Any] | None:
        document = describe(cluster, group)
        settled = document["state"] == "Stable" and not any(
            m["reconciling"] for m in document["members"]
        )
        return document if settled and owned(a) and owned(b) else None

    document = poll_until("a Stable group", [a, b], stable)
    assert revoked, "a never gave up a partition"
    assert document["type"] == "consumer" and document["member_count"] == 2
    assert document["assignment_strategy"] and document["coordinator"]
    assert document["group_epoch"] == document["assignment_epoch"] >= 2
    a_view, b_view = sorted(document["members"], key=lambda m: m["client_id"])
    assert (a_view["client_id"], b_view["client_id"]) == ("member-a", "member-b")
    for view, consumer in ((a_view, a), (b_view, b)):
        assert view["host"] and view["subscribed_topics"] == [topic]
        assert view["member_epoch"] == document["assignment_epoch"]
        # what the coordinator says each owns is what each consumer says it owns
        assert keys(view["partitions"]) == keys(view["target_partitions"]) == owned(consumer)
        assert view["partitions_to_assign"] == view["partitions_to_revoke"] == []
    assert keys(a_view["partitions"]).isdisjoint(keys(b_view["partitions"]))
    assert keys(a_view["partitions"]) | keys(b_view["partitions"]) == everything
    # lag per partition: committed 1 of 2 on partition 0, 2 of 5 on partition 3
    lag = {r["partition"]: (r["current_offset"], r["log_end_offset"], r["lag"])
           for r in document["partitions"]}  # fmt: skip
    assert lag == {0: (1, 2, 1), 1: (None, 3, None), 2: (None, 4, None), 3: (2, 5, 3)}
    owner = {r["partition"]: r["client_id"] for r in document["partitions"]}
    assert {p for p, c in owner.items() if c == "member-b"} == {
        p for _, p in keys(b_view["partitions"])
    }

    text = ok(run(cluster, "group", "describe", group))
    assert text.out.splitlines()[0].split() == DESCRIBE_HEADERS
    rows = [line.split() for line in text.out.splitlines()[1:]]
    assert [(r[2], r[3], r[4], r[5]) for r in rows] == [
        ("0", "1", "2", "1"),
        ("1", "-", "3", "-"),
        ("2", "-", "4", "-"),
        ("3", "2", "5", "3"),
    ]
    assert text.err.splitlines() == [
        f"Consumer group '{group}' is Stable with 2 active members.",
        f"Consumer group '{group}' uses the consumer protocol: group epoch "
        f"{document['group_epoch']}, assignment epoch {document['assignment_epoch']}, "
        f"assignor {document['assignment_strategy']}.",
    ]
    state = ok(run(cluster, "group", "describe", group, "--state")).out.splitlines()
    assert state[0].split()[3:] == ["TYPE", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
                                    "ASSIGNMENT-EPOCH", "#MEMBERS"]  # fmt: skip
    epoch = str(document["group_epoch"])
    assert state[1].split()[3:] == ["consumer", document["assignment_strategy"], "Stable",
                                    epoch, epoch, "2"]  # fmt: skip
    members = ok(run(cluster, "group", "describe", group, "--members")).out.splitlines()
    for line in members[1:]:
        cells = line.split()
        assert cells[6:8] == [topic, cells[8]] and cells[9] == "-", cells  # no longer pending

    # list: plain ids as before; --type filters and adds the TYPE column (ListGroups v5)
    assert {group, classic} <= set(ok(run(cluster, "group", "list")).out.splitlines())
    consumer_only = ok(run(cluster, "group", "list", "--type", "consumer")).out.splitlines()
    assert consumer_only[0].split() == ["GROUP", "TYPE"]
    assert [group, "consumer"] in [line.split() for line in consumer_only[1:]]
    assert all(line.split()[1] == "consumer" for line in consumer_only[1:])
    assert classic not in {line.split()[0] for line in consumer_only}
    classic_only = ok(run(cluster, "group", "list", "--type", "classic")).out.splitlines()
    assert [classic, "classic"] in [line.split() for line in classic_only[1:]]
    assert group not in {line.split()[0] for line in classic_only}
    listed = json.loads(
        ok(run(cluster, "group", "list", "--type", "classic,consumer", "--json")).out
    )
    assert {"group": group, "state": "Stable", "type": "consumer"} in listed
    assert {"group": classic, "state": "Empty", "type": "classic"} in listed

    # The classic group: DescribeGroups after ConsumerGroupDescribe's GROUP_ID_NOT_FOUND.
    old = describe(cluster, classic)
    assert old["type"] == "classic" and old["state"] == "Empty" and old["member_count"] == 0
    assert "group_epoch" not in old
    assert [(r["partition"], r["current_offset"], r["lag"]) for r in old["partitions"]] == [
        (p, p + 2, 0) for p in range(PARTITIONS)
    ]
    text = ok(run(cluster, "group", "describe", classic))
    assert text.err.strip() == f"Consumer group '{classic}' has no active members."
    assert text.out.splitlines()[0].split() == DESCRIBE_HEADERS
    state = ok(run(cluster, "group", "describe", classic, "--state")).out.splitlines()
    assert state[0].split()[3:] == ["TYPE", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert state[1].split()[3:] == ["classic", "-", "Empty", "0"]
