"""The group coordinator's offset housekeeping against a real cluster, with real clients.

- OffsetDelete through kafka-python's KafkaAdminClient and ``rlog group delete-offsets``:
  Kafka's answers (unknown partitions, unknown group, a live group's subscribed topic), and
  the deletion outliving the coordinator's broker (killed: the next coordinator replays the
  tombstones).
- A deleted topic takes the groups' offsets with it; a topic made again under its name starts
  without them.
- offsets.retention.minutes (1 here, checked every 500 ms): a standalone committer's offsets
  expire a minute after their commit; a live consumer's stay, and expire a minute after its
  group became empty, after which the group itself is gone.

3 brokers, RF=3, `__consumer_offsets` with 4 partitions (support.groups.GROUP_CONFIG).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NoError,
    UnknownTopicOrPartitionError,
)
from kafka.errors import (
    KafkaError as KafkaPythonError,
)

from rlog.core.groups import group_partition
from support.cli_runner import clean_env, ok, one_line_error, rlog
from support.cluster import Cluster
from support.groups import GROUP_CONFIG, wait_until
from support.replication import every_broker, partition_state

pytestmark = pytest.mark.integration

T = TypeVar("T")
RETENTION_CONFIG = (
    GROUP_CONFIG
    + """"offsets.retention.minutes" = 1
"offsets.retention.check.interval.ms" = 500
"""
)
RETENTION_S = 60
LIVE_S = 20  # how long the retention test's consumer stays in its group
OFFSETS_PARTITIONS = 4  # GROUP_CONFIG's offsets.topic.num.partitions
RETRY_CODES = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError._TIMED_OUT,  # librdkafka's own: a request to a broker just killed
)
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no offset for the partition


@pytest.fixture
def cluster3(cluster_factory: Any) -> Cluster:
    return cluster_factory(brokers=3, config_text=GROUP_CONFIG)


@pytest.fixture
def kafka_python(cluster3: Cluster) -> Iterator[KafkaAdminClient]:
    admin = KafkaAdminClient(bootstrap_servers=every_broker(cluster3).split(","))
    yield admin
    admin.close()


def retrying(call: Callable[[], T]) -> T:
    """An admin call, retried while the group's coordinator moves or loads (a request to a
    broker just killed may also go unanswered)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except KafkaException as error:
            retry = error.args[0].retriable() or error.args[0].code() in RETRY_CODES
            if not retry or time.monotonic() > deadline:
                raise
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def make_topic(cluster: Cluster, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    admin.create_topics([NewTopic(name, partitions, 3)])[name].result(timeout=30)
    for address in every_broker(cluster).split(","):
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


def commit(cluster: Cluster, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """OffsetCommit without a member (a standalone committer, or a reset)."""
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    )
    result = retrying(lambda: admin.alter_consumer_group_offsets([request])[group].result(30))
    assert all(tp.error is None for tp in result.topic_partitions)


def offsets_of(cluster: Cluster, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of the group (OffsetFetch with no partitions, confluent-kafka)."""
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    request = ConsumerGroupTopicPartitions(group)
    result = retrying(lambda: admin.list_consumer_group_offsets([request])[group].result(30))
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []}


def kafka_python_offsets(admin: KafkaAdminClient, group: str) -> dict[tuple[str, int], int]:
    found = admin.list_group_offsets({group: None})[group]
    return {(tp.topic, tp.partition): meta.offset for tp, meta in found.items()}


def delete_offsets(
    admin: KafkaAdminClient, group: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], type[KafkaPythonError]]:
    """kafka-python's OffsetDelete: each partition's error class (NoError when deleted)."""
    answer = admin.delete_group_offsets(group, [KafkaTopicPartition(t, p) for t, p in partitions])
    return {(tp.topic, tp.partition): error for tp, error in answer.items()}


def coordinator_of(cluster: Cluster, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    described = retrying(
        lambda: admin.describe_consumer_groups([group], request_timeout=5)[group].result(10)
    )
    return int(described.coordinator.id)


def move_the_coordinator(cluster: Cluster, group: str) -> None:
    """Kill the group's coordinator's broker and wait until another broker coordinates the group
    (it loaded the group's offsets partition from its own log), then until rlogd has the killed
    one back."""
    before = coordinator_of(cluster, group)
    # Under load a follower may have dropped out of the ISR: killing the last ISR member would
    # take the partition offline (no unclean election), which is not what this checks.
    partition = group_partition(group, OFFSETS_PARTITIONS)
    wait_until(
        "every replica of the group's offsets partition in its ISR",
        lambda: len(partition_state(cluster, "__consumer_offsets", partition)["isr"]) == 3,
        timeout_s=60,
    )
    cluster.chaos("kill", f"broker-{before}")
    last = "none yet"  # what the last look saw, for the message if none succeeds

    def moved() -> bool:
        nonlocal last
        # A new client for each look, as each run of a tool is: one client for all of them can
        # stay stuck on the killed coordinator for minutes (cli/tui/groups.py's GroupsSource
        # says how).
        admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
        try:
            described = admin.describe_consumer_groups([group], request_timeout=5)[group]
            found = described.result(10)
        except (KafkaException, TimeoutError) as error:
            last = f"{type(error).__name__}: {error}"
            return False  # not loaded yet, or asked of the broker just killed
        last = f"coordinator {found.coordinator}, state {found.state}"
        return int(found.coordinator.id) != before

    try:
        wait_until(f"a coordinator for {group} other than broker {before}", moved, timeout_s=60)
    except AssertionError as error:
        state = partition_state(cluster, "__consumer_offsets", partition)
        raise AssertionError(f"{error}\nlast look: {last}\n{group}'s offsets partition: {state}\n"
                             f"{cluster.log_tail()}") from None  # fmt: skip
    cluster.wait_until_running()  # the killed broker is back, for what follows
    cluster.wait_until_registered()


def group_ids(cluster: Cluster) -> set[str]:
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    listed = retrying(lambda: admin.list_consumer_groups().result(30))
    return {group.group_id for group in listed.valid}


@contextmanager
def consumer_of(cluster: Cluster, group: str, topic: str) -> Iterator[Consumer]:
    """A live member of ``group`` subscribed to ``topic``, assigned; closed (LeaveGroup) after."""
    consumer = Consumer(
        {
            "bootstrap.servers": every_broker(cluster),
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, f"no assignment for {group} within 30 s"
            consumer.poll(0.2)
        yield consumer
    finally:
        consumer.close()


def test_deleted_offsets_stay_deleted_when_the_coordinator_moves(
    cluster3: Cluster, kafka_python: KafkaAdminClient
) -> None:
    make_topic(cluster3, "orders", 3)
    commit(cluster3, "billing", {("orders", 0): 10, ("orders", 1): 11, ("orders", 2): 12})
    answer = delete_offsets(kafka_python, "billing", [("orders", 0), ("orders", 9), ("nowhere", 0)])
    assert answer == {
        ("orders", 0): NoError,
        ("orders", 9): UnknownTopicOrPartitionError,
        ("nowhere", 0): UnknownTopicOrPartitionError,
    }
    assert kafka_python_offsets(kafka_python, "billing") == {("orders", 1): 11, ("orders", 2): 12}
    with pytest.raises(GroupIdNotFoundError):
        delete_offsets(kafka_python, "nobody", [("orders", 0)])

    move_the_coordinator(cluster3, "billing")
    assert offsets_of(cluster3, "billing") == {("orders", 1): 11, ("orders", 2): 12}
    # The rlog CLI deletes through the new coordinator; the next one agrees again.
    result = ok(rlog("--bootstrap", cluster3.bootstrap, "group", "delete-offsets", "billing",
                     "--topic", "orders:1", env=clean_env()))  # fmt: skip
    assert result.out.split("\n")[1].split() == ["orders", "1", "Successful"]
    move_the_coordinator(cluster3, "billing")
    assert offsets_of(cluster3, "billing") == {("orders", 2): 12}
    assert kafka_python_offsets(kafka_python, "billing") == {("orders", 2): 12}


def test_a_live_consumer_keeps_the_offsets_of_the_topic_it_subscribes_to(
    cluster3: Cluster, kafka_python: KafkaAdminClient
) -> None:
    make_topic(cluster3, "orders", 2)
    make_topic(cluster3, "refunds", 1)
    commit(cluster3, "live", {("orders", 0): 5, ("refunds", 0): 7})
    with consumer_of(cluster3, "live", "orders"):
        answer = delete_offsets(kafka_python, "live", [("orders", 0), ("refunds", 0)])
        assert answer == {
            ("orders", 0): GroupSubscribedToTopicError,
            ("refunds", 0): NoError,
        }
        refused = rlog("--bootstrap", cluster3.bootstrap, "group", "delete-offsets", "live",
                       "-t", "orders", env=clean_env())  # fmt: skip
        one_line_error(refused, 1, "'live'", "'orders'", "subscribe")
        assert offsets_of(cluster3, "live") == {("orders", 0): 5}
    # Its member gone (LeaveGroup on close), the group is Empty: the offsets may go.
    result = ok(rlog("--bootstrap", cluster3.bootstrap, "group", "delete-offsets", "live",
                     "-t", "orders", env=clean_env()))  # fmt: skip
    assert "Error" not in result.out
    assert offsets_of(cluster3, "live") == {}


def test_a_deleted_topic_takes_its_offsets_and_a_new_one_starts_without_them(
    cluster3: Cluster, kafka_python: KafkaAdminClient
) -> None:
    make_topic(cluster3, "temp", 2)
    make_topic(cluster3, "keep", 1)
    commit(cluster3, "reader", {("temp", 0): 5, ("temp", 1): 6, ("keep", 0): 3})
    admin = AdminClient({"bootstrap.servers": every_broker(cluster3)})
    admin.delete_topics(["temp"])["temp"].result(30)
    wait_until(
        "the deleted topic's offsets gone",
        lambda: offsets_of(cluster3, "reader") == {("keep", 0): 3},
    )
    assert kafka_python_offsets(kafka_python, "reader") == {("keep", 0): 3}
    move_the_coordinator(cluster3, "reader")  # the tombstones are in the log
    assert offsets_of(cluster3, "reader") == {("keep", 0): 3}
    make_topic(cluster3, "temp", 2)
    request = ConsumerGroupTopicPartitions(
        "reader", [TopicPartition("temp", 0), TopicPartition("temp", 1)]
    )
    fetched = retrying(lambda: admin.list_consumer_group_offsets([request])["reader"].result(30))
    assert [tp.offset for tp in fetched.topic_partitions] == [NO_OFFSET, NO_OFFSET]


def test_retention_expires_offsets_by_kip_211s_rules(cluster_factory: Any) -> None:
    """Two groups commit at once: "solo" has no members, "consumers" a live member that leaves
    LIVE_S later. A minute after the commits solo's offset has expired and solo is gone, while
    consumers keeps its offsets (its minute runs from when it became Empty, not from the commit);
    they expire a minute after it became Empty. The timelines overlap, so the test waits about
    LIVE_S plus a minute, not two minutes."""
    cluster = cluster_factory(brokers=3, config_text=RETENTION_CONFIG)
    make_topic(cluster, "orders", 2)
    consumers_offsets = {("orders", 0): 4, ("orders", 1): 2}
    with consumer_of(cluster, "consumers", "orders") as consumer:
        consumer.commit(
            offsets=[TopicPartition("orders", 0, 4), TopicPartition("orders", 1, 2)],
            asynchronous=False,
        )
        committed_at = time.monotonic()
        commit(cluster, "solo", {("orders", 0): 9})  # a standalone committer, no members
        while time.monotonic() - committed_at < LIVE_S:
            consumer.poll(0.5)  # the member stays: heartbeats run while it polls
        assert offsets_of(cluster, "consumers") == consumers_offsets
    became_empty = time.monotonic()
    wait_until(
        "the standalone committer's offset expired",
        lambda: offsets_of(cluster, "solo") == {},
        timeout_s=RETENTION_S + 30,
    )
    assert time.monotonic() - committed_at >= RETENTION_S - 5
    wait_until("the group 'solo' deleted", lambda: "solo" not in group_ids(cluster))
    # More than a minute after its commit, less than a minute after it became Empty.
    assert offsets_of(cluster, "consumers") == consumers_offsets
    assert time.monotonic() - became_empty < RETENTION_S - 2, "checked too late to mean much"
    wait_until(
        "the empty group's offsets expired",
        lambda: offsets_of(cluster, "consumers") == {},
        timeout_s=RETENTION_S + 30,
    )
    assert time.monotonic() - became_empty >= RETENTION_S - 5
    wait_until("the group 'consumers' deleted", lambda: "consumers" not in group_ids(cluster))
    # The expiry's tombstones are in the log: a new coordinator finds nothing either.
    move_the_coordinator(cluster, "consumers")
    admin = AdminClient({"bootstrap.servers": every_broker(cluster)})
    request = ConsumerGroupTopicPartitions("consumers", [TopicPartition("orders", 0)])
    fetched = retrying(lambda: admin.list_consumer_group_offsets([request])["consumers"].result(30))
    assert [tp.offset for tp in fetched.topic_partitions] == [NO_OFFSET]
