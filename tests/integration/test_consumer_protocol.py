"""The consumer group protocol (KIP-848, `group.protocol=consumer`) with librdkafka members as
processes a test can kill: the broker assigns, times sessions, fences stale commits, and a new
coordinator carries the group on from `__consumer_offsets`.

3 brokers, RF=3, `__consumer_offsets` with 4 partitions; members heartbeat every 500 ms and
leave after 6 s without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, NewTopic

from rlog.core.groups import group_partition
from support.cluster import Cluster
from support.groups import GROUP_CONFIG, MemberProcess, split_evenly, wait_until
from support.replication import every_broker, partition_state

PARTITIONS = 6
OFFSETS_PARTITIONS = 4  # GROUP_CONFIG's offsets.topic.num.partitions
RECORDS = 600
CONFIG = (
    GROUP_CONFIG
    + """"group.consumer.session.timeout.ms" = 6000
"group.consumer.heartbeat.interval.ms" = 500
"""
)


@pytest.fixture
def cluster3(cluster_factory) -> Cluster:
    return cluster_factory(brokers=3, config_text=CONFIG)


@pytest.fixture
def members() -> Iterator[list[MemberProcess]]:
    started: list[MemberProcess] = []
    yield started
    for member in started:
        member.kill()


def make_topic(cluster: Cluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    admin.create_topics([NewTopic(name, PARTITIONS, 3)])[name].result(timeout=30)

    def known() -> bool:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        return topic is not None and len(topic.partitions) == PARTITIONS

    wait_until(f"{name} in the metadata", known)


def produce(cluster: Cluster, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": every_broker(cluster), "acks": "all"})
    for i in values:
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def start(
    tmp_path: Path, cluster: Cluster, members: list[MemberProcess], name: str, group: str
) -> MemberProcess:
    member = MemberProcess(
        tmp_path, name, client="confluent", bootstrap=every_broker(cluster), group=group,
        topic="orders", protocol="consumer",
    )  # fmt: skip
    members.append(member)
    return member


def describe(cluster: Cluster, group: str) -> ConsumerGroupDescription:
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)


def values_seen(members: list[MemberProcess]) -> list[int]:
    return sorted(int(r["value"]) for m in members for r in m.records())


def test_members_split_the_partitions_and_read_each_record_once(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path
) -> None:
    make_topic(cluster3, "orders")
    produce(cluster3, "orders", range(RECORDS))
    first = start(tmp_path, cluster3, members, "first", "billing")
    second = start(tmp_path, cluster3, members, "second", "billing")
    wait_until(
        "the partitions split between the two members",
        lambda: split_evenly(members, PARTITIONS),
        members=members,
    )
    wait_until("every record read", lambda: len(values_seen(members)) >= RECORDS, members=members)
    assert values_seen(members) == list(range(RECORDS)), "each record once, none lost"
    described = describe(cluster3, "billing")
    assert str(described.type) == "ConsumerGroupType.CONSUMER"
    assert {m.assignment.topic_partitions[0].topic for m in described.members} == {"orders"}
    # The second member leaves (SIGTERM: its client sends epoch -1); the first gets all, and
    # reads what comes next from the second's commits on.
    second.stop()
    wait_until(
        "the first member alone with every partition",
        lambda: sorted(first.assignment or []) == list(range(PARTITIONS)),
        members=members,
    )
    produce(cluster3, "orders", range(RECORDS, RECORDS + 60))
    wait_until(
        "the new records read",
        lambda: len(values_seen(members)) >= RECORDS + 60,
        members=members,
    )
    assert values_seen(members) == list(range(RECORDS + 60))


def test_a_killed_member_leaves_after_its_session(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path
) -> None:
    make_topic(cluster3, "orders")
    first = start(tmp_path, cluster3, members, "first", "audit")
    second = start(tmp_path, cluster3, members, "second", "audit")
    wait_until("the split", lambda: split_evenly(members, PARTITIONS), members=members)
    second.kill()  # no goodbye: the broker notices the missing heartbeats
    wait_until(
        "the survivor owning every partition",
        lambda: sorted(first.assignment or []) == list(range(PARTITIONS)),
        timeout_s=30,
        members=members,
    )
    assert len(describe(cluster3, "audit").members) == 1


def test_a_new_coordinator_keeps_the_group_and_its_members(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path
) -> None:
    make_topic(cluster3, "orders")
    produce(cluster3, "orders", range(RECORDS))
    start(tmp_path, cluster3, members, "first", "ledger")
    start(tmp_path, cluster3, members, "second", "ledger")
    wait_until("the split", lambda: split_evenly(members, PARTITIONS), members=members)
    wait_until("every record read", lambda: len(values_seen(members)) >= RECORDS, members=members)
    before = describe(cluster3, "ledger")
    ids = {m.member_id for m in before.members}
    # Killing the last ISR member would take the partition offline (no unclean election).
    partition = group_partition("ledger", OFFSETS_PARTITIONS)
    wait_until(
        "a full ISR for the group's offsets partition",
        lambda: len(partition_state(cluster3, "__consumer_offsets", partition)["isr"]) == 3,
        timeout_s=60,
    )
    cluster3.chaos("kill", f"broker-{before.coordinator.id}")

    def moved() -> bool:
        try:
            return describe(cluster3, "ledger").coordinator.id != before.coordinator.id
        except (KafkaException, TimeoutError):  # the coordinator is moving
            return False

    wait_until("another coordinator", moved, timeout_s=60, members=members)
    after = describe(cluster3, "ledger")
    assert {m.member_id for m in after.members} == ids, "the same members, not rejoined"
    produce(cluster3, "orders", range(RECORDS, RECORDS + 60))
    wait_until(
        "records after the failover read",
        lambda: len(values_seen(members)) >= RECORDS + 60,
        timeout_s=60,
        members=members,
    )
    assert set(values_seen(members)) == set(range(RECORDS + 60)), "nothing lost"
    assert split_evenly(members, PARTITIONS), "each member still holds its share"


def test_a_regex_subscription_takes_topics_made_later(cluster3: Cluster) -> None:
    """The broker resolves the regex (KIP-848): a topic made after the member joined is
    assigned to it without the client asking for metadata of it first."""
    make_topic(cluster3, "orders-eu")
    produce(cluster3, "orders-eu", range(10))
    consumer = Consumer(
        {"bootstrap.servers": every_broker(cluster3), "group.id": "regional",
         "group.protocol": "consumer", "auto.offset.reset": "earliest"}
    )  # fmt: skip
    seen: dict[str, set[int]] = {}

    def poll_for(topic: str, count: int) -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.setdefault(message.topic(), set()).add(int(message.value()))
        return len(seen.get(topic, ())) >= count

    try:
        consumer.subscribe(["^orders-.*"])
        wait_until("orders-eu read", lambda: poll_for("orders-eu", 10))
        make_topic(cluster3, "orders-us")
        make_topic(cluster3, "refunds-us")
        produce(cluster3, "orders-us", range(10))
        produce(cluster3, "refunds-us", range(10))
        wait_until("orders-us read", lambda: poll_for("orders-us", 10), timeout_s=60)
        assert "refunds-us" not in seen
        assert {tp.topic for tp in consumer.assignment()} == {"orders-eu", "orders-us"}
    finally:
        consumer.close()


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
def test_classic_and_consumer_members_share_a_group(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path, assignor: str
) -> None:
    """Kafka 4's mixed group: a classic consumer (JoinGroup, SyncGroup) in a group of the
    consumer protocol is assigned by the broker like the others; eager (range) or cooperative."""
    make_topic(cluster3, "orders")
    produce(cluster3, "orders", range(RECORDS))
    modern = start(tmp_path, cluster3, members, "modern", "mixed")
    wait_until(
        "the consumer-protocol member with every partition",
        lambda: sorted(modern.assignment or []) == list(range(PARTITIONS)),
        members=members,
    )
    classic = MemberProcess(
        tmp_path, "classic", client="confluent", bootstrap=every_broker(cluster3), group="mixed",
        topic="orders", assignor=assignor, session_timeout_ms=6000,
    )  # fmt: skip
    members.append(classic)
    wait_until("the partitions split", lambda: split_evenly(members, PARTITIONS), members=members)
    wait_until("every record read", lambda: len(values_seen(members)) >= RECORDS, members=members)
    assert sorted(set(values_seen(members))) == list(range(RECORDS)), "none lost"
    described = describe(cluster3, "mixed")
    assert str(described.type) == "ConsumerGroupType.CONSUMER" and len(described.members) == 2
    classic.stop()  # LeaveGroup
    wait_until(
        "the consumer-protocol member alone with every partition",
        lambda: sorted(modern.assignment or []) == list(range(PARTITIONS)),
        members=members,
    )
    produce(cluster3, "orders", range(RECORDS, RECORDS + 60))
    wait_until(
        "the new records read",
        lambda: set(range(RECORDS, RECORDS + 60)) <= set(values_seen(members)),
        members=members,
    )


def test_a_classic_group_upgrades_and_downgrades_while_its_members_consume(
    cluster3: Cluster, members: list[MemberProcess], tmp_path: Path
) -> None:
    """A rolling upgrade as Kafka 4 allows it: a classic group with a member; a member with
    group.protocol=consumer joins (the group becomes a consumer group, the classic member
    stays); it leaves again (the group is classic again). Nothing is lost on the way."""
    make_topic(cluster3, "orders")
    produce(cluster3, "orders", range(RECORDS))
    classic = MemberProcess(
        tmp_path, "classic", client="confluent", bootstrap=every_broker(cluster3), group="rolling",
        topic="orders", assignor="cooperative-sticky", session_timeout_ms=6000,
    )  # fmt: skip
    members.append(classic)
    wait_until(
        "the classic member with every partition",
        lambda: sorted(classic.assignment or []) == list(range(PARTITIONS)),
        members=members,
    )
    assert str(describe(cluster3, "rolling").type) == "ConsumerGroupType.CLASSIC"
    modern = start(tmp_path, cluster3, members, "modern", "rolling")
    wait_until("the partitions split", lambda: split_evenly(members, PARTITIONS), members=members)
    assert str(describe(cluster3, "rolling").type) == "ConsumerGroupType.CONSUMER"
    wait_until(
        "every record read", lambda: len(set(values_seen(members))) >= RECORDS, members=members
    )
    modern.stop()
    wait_until(
        "the classic member alone with every partition",
        lambda: sorted(classic.assignment or []) == list(range(PARTITIONS)),
        timeout_s=45,
        members=members,
    )
    assert str(describe(cluster3, "rolling").type) == "ConsumerGroupType.CLASSIC"
    produce(cluster3, "orders", range(RECORDS, RECORDS + 60))
    wait_until(
        "the new records read",
        lambda: set(range(RECORDS + 60)) <= set(values_seen(members)),
        members=members,
    )
