"""Consumer groups with the three real clients, members as processes a test can kill.

3 brokers, RF=3, `__consumer_offsets` with 4 partitions, a 3 s member session timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, NewTopic

from rlog.daemon.events import read_events
from support.cluster import Cluster
from support.groups import GROUP_CONFIG, MemberProcess, split_evenly, wait_until
from support.replication import every_broker

T = TypeVar("T")
PARTITIONS = 6
RETRY_CODES = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
               KafkaError.COORDINATOR_LOAD_IN_PROGRESS)  # fmt: skip
CLIENTS = ["confluent", "kafka-python", "aiokafka"]


@pytest.fixture
def cluster3(cluster_factory) -> Cluster:
    return cluster_factory(brokers=3, config_text=GROUP_CONFIG)


@pytest.fixture
def members(tmp_path: Path) -> Iterator[list[MemberProcess]]:
    started: list[MemberProcess] = []
    yield started
    for member in started:
        member.kill()


def make_topic(cluster: Cluster, name: str, partitions: int = PARTITIONS) -> None:
    """Create the topic and wait until every broker's metadata has it with leaders: a member
    whose first Metadata misses it (kafka-python) would not ask again for minutes."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(timeout=30)
    for address in cluster.bootstrap.split(","):
        one = AdminClient({"bootstrap.servers": address})

        def known(one: AdminClient = one) -> bool:
            topic = one.list_topics(name, timeout=10).topics.get(name)
            return (
                topic is not None
                and topic.error is None
                and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())
            )

        wait_until(f"{name} in the metadata of {address}", known)


def produce_numbers(cluster: Cluster, topic: str, numbers: range, partition: int = -1) -> None:
    producer = Producer(
        {"bootstrap.servers": every_broker(cluster), "acks": "all", "enable.idempotence": True}
    )
    for number in numbers:
        producer.produce(topic, value=str(number).encode(), key=str(number).encode(),
                         partition=partition)  # fmt: skip
    assert producer.flush(30) == 0


def retrying(call: Callable[[], T]) -> T:
    """An admin call, retried while the group's coordinator moves (as kafka-consumer-groups.sh
    does): NOT_COORDINATOR and friends are answers a client must expect during a failover."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return call()
        except KafkaException as error:
            retry = error.args[0].retriable() or error.args[0].code() in RETRY_CODES
            if not retry or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def committed_offsets(cluster: Cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )
    result = retrying(
        lambda: admin.list_consumer_group_offsets([request])[group].result(timeout=30)
    )
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def describe_group(cluster: Cluster, group: str) -> ConsumerGroupDescription:
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    return retrying(lambda: admin.describe_consumer_groups([group])[group].result(timeout=30))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_group_splits_partitions_and_rebalances_on_join_leave_and_crash(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path, client: str
) -> None:
    make_topic(cluster3, "orders")

    def member(name: str) -> MemberProcess:
        started = MemberProcess(
            tmp_path, name, client=client, bootstrap=cluster3.bootstrap, group="billing",
            topic="orders",
        )  # fmt: skip
        members.append(started)
        return started

    first = member("first")
    first.wait_for("all partitions", lambda: first.assignment == list(range(PARTITIONS)))
    second = member("second")
    wait_until(
        "a split on join",
        lambda: split_evenly([first, second], PARTITIONS),
        members=[first, second],
    )
    second.stop()  # closes its consumer: LeaveGroup
    first.wait_for("all partitions after a leave", lambda: first.assignment == list(range(6)))
    third = member("third")
    wait_until(
        "a split on the next join",
        lambda: split_evenly([first, third], PARTITIONS),
        members=[first, third],
    )
    third.kill()  # no LeaveGroup: the coordinator notices when its session times out
    first.wait_for(
        "all partitions after a crash", lambda: first.assignment == list(range(6)), timeout_s=20
    )
    # rlog events tells the story: the crashed member's session ran out, and the group healed.
    kinds = [(e["kind"], e["message"]) for e in read_events(cluster3.data_dir)]
    expired = [m for k, m in kinds if k == "group_member_removed" and "no heartbeat" in m]
    assert len(expired) == 1, kinds
    assert any(k == "group_stable" for k, _ in kinds[kinds.index(("group_member_removed",
                                                                    expired[0])):])  # fmt: skip


@pytest.mark.parametrize(
    ("client", "assignor"),
    [("confluent", "roundrobin"), ("confluent", "cooperative-sticky"), ("kafka-python", "range")],
)
def test_the_client_side_assignors_work(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path, client: str, assignor: str
) -> None:
    """The coordinator only relays assignments, so every assignor works; cooperative-sticky
    also rebalances incrementally (members keep partitions across the extra round)."""
    make_topic(cluster3, "events")
    common = {"client": client, "bootstrap": cluster3.bootstrap, "group": "etl", "topic": "events",
              "assignor": assignor}  # fmt: skip
    trio = []
    for name in ("a", "b", "c"):
        trio.append(MemberProcess(tmp_path, name, **common))
        members.append(trio[-1])
        wait_until(
            f"a split with {len(trio)}", lambda: split_evenly(trio, PARTITIONS), members=trio
        )
    trio[0].stop()
    wait_until(
        "a split after a leave", lambda: split_evenly(trio[1:], PARTITIONS), members=trio[1:]
    )


def test_a_restarted_static_member_gets_its_partitions_back_without_a_rebalance(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path
) -> None:
    make_topic(cluster3, "audit")
    common = {"client": "confluent", "bootstrap": cluster3.bootstrap, "group": "auditors",
              "topic": "audit", "session_timeout_ms": 10_000}  # fmt: skip
    steady = MemberProcess(tmp_path, "steady", instance_id="host-1", **common)
    members.append(steady)
    steady.wait_for("all partitions", lambda: steady.assignment == list(range(PARTITIONS)))
    bouncing = MemberProcess(tmp_path, "bouncing", instance_id="host-2", **common)
    members.append(bouncing)
    wait_until("a split", lambda: split_evenly([steady, bouncing], PARTITIONS))
    owned, kept = bouncing.assignment, steady.assignment
    steady_changes = len(steady.events("assigned"))
    bouncing.kill()  # within its 10 s session: the coordinator keeps its place
    back = MemberProcess(tmp_path, "back", instance_id="host-2", **common)
    members.append(back)
    back.wait_for("its old partitions", lambda: back.assignment == owned, timeout_s=8)
    time.sleep(1)
    assert steady.assignment == kept
    assert len(steady.events("assigned")) == steady_changes  # the other member never rebalanced


@pytest.mark.parametrize("heir_client", ["kafka-python", "aiokafka"])
def test_a_killed_member_hands_over_at_its_last_committed_offset(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path, heir_client: str
) -> None:
    make_topic(cluster3, "payments", partitions=3)
    produce_numbers(cluster3, "payments", range(300))
    common = {"bootstrap": cluster3.bootstrap, "group": "ledger", "topic": "payments"}
    doomed = MemberProcess(tmp_path, "doomed", client="confluent", slow_value="150", **common)
    members.append(doomed)
    doomed.wait_for("the slow record", lambda: bool(doomed.events("slow")))
    doomed.kill()
    processed_before = doomed.records()
    last_commit: dict[int, int] = {}
    for event in doomed.events("committed"):
        last_commit[event["partition"]] = event["offset"]

    heir = MemberProcess(tmp_path, "heir", client=heir_client, **common)
    members.append(heir)
    heir.wait_for(
        "every number",
        lambda: (
            {r["value"] for r in processed_before + heir.records()} >= {str(n) for n in range(300)}
        ),
        timeout_s=45,
    )
    first_offset: dict[int, int] = {}
    for record in heir.records():
        first_offset.setdefault(record["partition"], record["offset"])
    for partition, offset in first_offset.items():
        done = [r["offset"] for r in processed_before if r["partition"] == partition]
        # The heir starts exactly at the commit: the last one the doomed member saw confirmed,
        # or the one after if it died between the commit and printing it. Nothing is skipped.
        assert offset >= last_commit.get(partition, 0)
        assert offset <= (max(done) + 1 if done else 0)
    assert str(150) in {r["value"] for r in heir.records()}  # the record it died processing


def test_the_group_carries_on_when_its_coordinators_broker_is_killed(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path
) -> None:
    make_topic(cluster3, "clicks")
    produce_numbers(cluster3, "clicks", range(600))
    common = {"bootstrap": every_broker(cluster3), "group": "stats", "topic": "clicks"}
    pair = [MemberProcess(tmp_path, f"m{i}", client="confluent", **common) for i in range(2)]
    members.extend(pair)
    wait_until("600 records", lambda: sum(len(m.records()) for m in pair) >= 600)
    before = committed_offsets(cluster3, "stats", "clicks", PARTITIONS)
    assert sum(before.values()) == 600

    coordinator = describe_group(cluster3, "stats").coordinator.id
    cluster3.chaos("kill", f"broker-{coordinator}")
    produce_numbers(cluster3, "clicks", range(600, 1200))
    wait_until(
        "1200 records after the failover",
        lambda: sum(len(m.records()) for m in pair) >= 1200,
        timeout_s=60,
    )
    values = [r["value"] for m in pair for r in m.records()]
    assert set(values) == {str(n) for n in range(1200)}  # nothing lost across the failover
    wait_until(
        "every offset committed to the new coordinator",
        lambda: sum(committed_offsets(cluster3, "stats", "clicks", PARTITIONS).values()) == 1200,
    )
    assert describe_group(cluster3, "stats").coordinator.id != coordinator


def test_auto_commit_before_processing_loses_what_manual_commit_after_keeps(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path
) -> None:
    """Kill a member while it processes record 5. Auto-commit has already committed past it:
    the next member never sees it. Committing after processing hands it over again."""
    lost: dict[str, set[str]] = {}
    for mode in ("auto", "manual"):
        topic = f"jobs-{mode}"
        make_topic(cluster3, topic, partitions=1)
        produce_numbers(cluster3, topic, range(20), partition=0)
        common = {"bootstrap": cluster3.bootstrap, "group": f"workers-{mode}", "topic": topic}
        worker = MemberProcess(tmp_path, f"worker-{mode}", client="confluent", commit=mode,
                               slow_value="5", **common)  # fmt: skip
        members.append(worker)
        worker.wait_for("record 5", lambda worker=worker: bool(worker.events("slow")))
        if mode == "auto":  # the auto-commit (every 100 ms) passes record 5 while it works
            wait_until(
                "the auto-commit",
                lambda topic=topic, mode=mode: (
                    committed_offsets(cluster3, f"workers-{mode}", topic, 1)[0] > 5
                ),
            )
        worker.kill()
        successor = MemberProcess(tmp_path, f"next-{mode}", client="confluent", **common)
        members.append(successor)
        successor.wait_for(
            "the last record", lambda s=successor: "19" in {r["value"] for r in s.records()}
        )
        seen = {r["value"] for r in worker.records() + successor.records()}
        lost[mode] = {str(n) for n in range(20)} - seen
    assert lost == {"auto": {"5"}, "manual": set()}
