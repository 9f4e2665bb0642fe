"""``rlog consume --group`` and ``rlog group ...`` against a real cluster's group coordinator.

Each test starts its own cluster (``cluster_factory``) and runs the real ``rlog`` command in a
subprocess, as tests/integration/test_cli.py does; every subprocess has a timeout. The live
member of the "refused while it has members" test is a confluent-kafka Consumer of the test's
own, closed in a ``finally``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.connection import ClientConnection
from support.cli_runner import COMMAND_TIMEOUT_S, RLOG, Result, clean_env, ok, one_line_error, rlog
from support.cluster import Cluster
from support.raw_wire import request

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        ApiKey.FIND_COORDINATOR not in SUPPORTED,
        reason="the brokers have no group coordinator yet (FindCoordinator not in SUPPORTED)",
    ),
]

# No wait for more members before the first rebalance: each `consume --group` joins at once.
FAST_GROUPS = '[broker]\n"group.initial.rebalance.delay.ms" = 0\n'
DESCRIBE_HEADERS = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]


def run(cluster: Cluster, *args: str, stdin: str | None = None) -> Result:
    return rlog("--bootstrap", cluster.bootstrap, *args, stdin=stdin)


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def topic_with(cluster: Cluster, records: int, partitions: int = 1) -> str:
    """A new topic with ``records`` records 0..N-1 (round-robin over partitions)."""
    name = new_name("t")
    ok(run(cluster, "topic", "create", name, "-p", str(partitions), "-r", "1"))
    for p in range(partitions):
        values = [str(i) for i in range(records) if i % partitions == p]
        if values:
            stdin = "".join(f"{v}\n" for v in values)
            ok(run(cluster, "produce", name, "--partition", str(p), "--acks", "all", stdin=stdin))
    return name


def consume_values(cluster: Cluster, topic: str, *args: str) -> list[int]:
    return [int(v) for v in ok(run(cluster, "consume", topic, *args)).out.split()]


def describe(cluster: Cluster, group: str) -> dict[str, Any]:
    return json.loads(ok(run(cluster, "group", "describe", group, "--json")).out)


def current_offsets(cluster: Cluster, group: str) -> dict[int, int | None]:
    return {p["partition"]: p["current_offset"] for p in describe(cluster, group)["partitions"]}


@pytest.fixture
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory(config_text=FAST_GROUPS)


def test_commits_continue_where_the_last_consume_stopped(cluster: Cluster) -> None:
    topic = topic_with(cluster, 20)
    group = new_name("g")
    at_least_once = ["-g", group, "--no-auto-commit"]
    assert consume_values(cluster, topic, *at_least_once, "--from-beginning", "-n", "5") == [
        0,
        1,
        2,
        3,
        4,
    ]

    document = describe(cluster, group)
    assert document["group"] == group
    assert document["state"] == "Empty" and document["member_count"] == 0
    assert document["partitions"] == [
        {
            "topic": topic,
            "partition": 0,
            "current_offset": 5,
            "log_end_offset": 20,
            "lag": 15,
            "consumer_id": None,
            "host": None,
            "client_id": None,
        }
    ]
    text = ok(run(cluster, "group", "describe", group))
    header, row = text.out.splitlines()
    assert header.split() == DESCRIBE_HEADERS
    assert row.split() == [group, topic, "0", "5", "20", "15", "-", "-", "-"]
    assert text.err.strip() == f"Consumer group '{group}' has no active members."

    # the committed offset wins over --from-beginning (which only applies without one)
    second = consume_values(cluster, topic, *at_least_once, "--from-beginning", "-n", "5")
    assert second == [5, 6, 7, 8, 9]
    # auto-commit (the default) commits what was printed when the consumer closes
    assert consume_values(cluster, topic, "-g", group, "-n", "4") == [10, 11, 12, 13]
    assert current_offsets(cluster, group) == {0: 14}
    # -o stored: the committed offset; -e ends at the end of the member's partitions
    rest = ok(run(cluster, "consume", topic, "-g", group, "-o", "stored", "-e"))
    assert [int(v) for v in rest.out.split()] == list(range(14, 20))
    assert rest.err.strip() == f"% Reached end of topic {topic} [0] at offset 20: exiting"
    assert current_offsets(cluster, group) == {0: 20}

    assert group in ok(run(cluster, "group", "list")).out.splitlines()
    listed = json.loads(ok(run(cluster, "group", "list", "--json")).out)
    assert {"group": group, "state": "Empty"} in listed  # ListGroups v4 carries the state


def test_group_over_several_partitions_reads_each_record_once(cluster: Cluster) -> None:
    topic = topic_with(cluster, 30, partitions=3)
    group = new_name("g")
    first = consume_values(
        cluster, topic, "-g", group, "--no-auto-commit", "-o", "start", "-n", "12"
    )
    assert len(first) == 12
    # -o start for the partitions the first member may not have read from at all (no commit)
    second = consume_values(cluster, topic, "-g", group, "--no-auto-commit", "-o", "start", "-e")
    assert sorted(first + second) == list(range(30)), "a record was repeated or skipped"
    rows = describe(cluster, group)["partitions"]
    assert [(r["partition"], r["current_offset"], r["lag"]) for r in rows] == [
        (0, 10, 0),
        (1, 10, 0),
        (2, 10, 0),
    ]
    # -n counts records across partitions and commits only those printed
    ok(run(cluster, "produce", topic, "--partition", "1", stdin="100\n101\n102\n"))
    assert consume_values(cluster, topic, "-g", group, "--no-auto-commit", "-n", "2") == [100, 101]
    assert consume_values(cluster, topic, "-g", group, "-e") == [102]


def test_reset_offsets(cluster: Cluster) -> None:
    topic = topic_with(cluster, 10)
    group = new_name("g")
    consume_values(cluster, topic, "-g", group, "--no-auto-commit", "-o", "start", "-n", "6")

    reset = ok(
        run(
            cluster, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute"
        )
    )
    assert [line.split() for line in reset.out.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [group, topic, "0", "0"],
    ]
    assert current_offsets(cluster, group) == {0: 0}
    assert consume_values(cluster, topic, "-g", group, "--no-auto-commit", "-n", "3") == [0, 1, 2]

    def new_offset(*strategy: str) -> tuple[int, str]:
        result = ok(
            run(cluster, "group", "reset-offsets", group, "-t", topic, *strategy, "--json",
                "--execute")
        )  # fmt: skip
        [plan] = json.loads(result.out)
        return plan["new_offset"], result.err

    # --shift-by clamps into [log start, log end], as Kafka does, and says so
    offset, err = new_offset("--shift-by", "-100")
    assert offset == 0 and "lower than earliest" in err and "(-97)" in err
    offset, err = new_offset("--shift-by", "4")
    assert (offset, err) == (4, "")
    offset, err = new_offset("--shift-by", "1000")
    assert offset == 10 and "higher than latest" in err
    assert new_offset("--to-offset", "7")[0] == 7
    assert new_offset("--to-latest")[0] == 10
    assert new_offset("--to-datetime", "2000-01-01T00:00:00Z")[0] == 0
    assert new_offset("--to-datetime", "2999-01-01T00:00:00.000+01:00")[0] == 10
    assert new_offset("--by-duration", "P1D")[0] == 0
    assert new_offset("--to-offset", "3")[0] == 3

    dry = ok(run(cluster, "group", "reset-offsets", group, "-t", topic, "--to-latest", "--dry-run"))
    assert dry.out.splitlines()[1].split() == [group, topic, "0", "10"]
    assert "Dry run" in dry.err
    assert current_offsets(cluster, group) == {0: 3}
    assert consume_values(cluster, topic, "-g", group, "-e") == list(range(3, 10))

    one_line_error(
        run(cluster, "group", "reset-offsets", group, "-t", "no-such-topic", "--to-earliest"),
        5,
        "unknown topic 'no-such-topic'",
    )
    one_line_error(
        run(cluster, "group", "reset-offsets", group, "-t", topic, "-p", "3", "--to-earliest"),
        5,
        "no partition 3",
    )
    fresh = new_name("g")
    one_line_error(
        run(cluster, "group", "reset-offsets", fresh, "-t", topic, "--shift-by", "1"),
        1,
        "no committed offset",
        fresh,
    )
    # As kafka-consumer-groups.sh: a reset creates a group that does not exist yet.
    ok(run(cluster, "group", "reset-offsets", fresh, "-t", topic, "--to-offset", "8", "--execute"))
    assert consume_values(cluster, topic, "-g", fresh, "-e") == [8, 9]


def commit_raw(cluster: Cluster, group: str, topic: str, offsets: dict[int, int]) -> None:
    """OffsetCommit v7 without a member, as kafkajs's admin.resetOffsets sends it: its
    ``earliest`` commits -2 as the offset (no client here commits a negative offset)."""
    partitions = [
        {
            "partition_index": partition,
            "committed_offset": offset,
            "committed_leader_epoch": -1,
            "committed_metadata": "",
        }
        for partition, offset in offsets.items()
    ]
    body = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{"name": topic, "partitions": partitions}],
    }
    answer = request(ClientConnection(), ("127.0.0.1", cluster.base_port), ApiKey.OFFSET_COMMIT,
                     7, body).body  # fmt: skip
    errors = [p["error_code"] for t in answer["topics"] for p in t["partitions"]]
    assert errors == [0] * len(offsets), answer


def test_describe_shows_an_offset_reset_to_earliest_as_kafkajs_commits_it(
    cluster: Cluster,
) -> None:
    topic = topic_with(cluster, 10, partitions=2)  # 5 records in each partition
    group = new_name("g")
    # A real commit first: the coordinator is found and loaded (the cluster has one broker).
    consume_values(cluster, topic, "-g", group, "-o", "start", "-e")
    assert current_offsets(cluster, group) == {0: 5, 1: 5}
    commit_raw(cluster, group, topic, {0: -2, 1: 3})

    rows = describe(cluster, group)["partitions"]
    # CURRENT-OFFSET "-" as kafka-consumer-groups.sh shows it; the lag from the log start (0).
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows] == [
        (0, None, 5, 5),
        (1, 3, 5, 2),
    ]
    text = ok(run(cluster, "group", "describe", group)).out.splitlines()
    assert [line.split() for line in text[1:]] == [
        [group, topic, "0", "-", "5", "5", "-", "-", "-"],
        [group, topic, "1", "3", "5", "2", "-", "-", "-"],
    ]
    # The next member starts partition 0 (0, 2, .., 8) at the log start, as the -2 asks, and
    # partition 1 (1, 3, .., 9) at offset 3.
    assert sorted(consume_values(cluster, topic, "-g", group, "-e")) == [0, 2, 4, 6, 7, 8, 9]


def test_ctrl_c_leaves_the_group_and_commits_what_was_printed(cluster: Cluster) -> None:
    topic = topic_with(cluster, 5)
    group = new_name("g")
    process = subprocess.Popen(
        [*RLOG, "--bootstrap", cluster.bootstrap, "consume", topic, "-g", group, "-o", "start"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
    )
    watchdog = threading.Timer(COMMAND_TIMEOUT_S, process.kill)  # only the process started here
    watchdog.start()
    try:
        assert process.stdout is not None
        printed = [process.stdout.readline().strip() for _ in range(5)]
        assert printed == ["0", "1", "2", "3", "4"]
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=COMMAND_TIMEOUT_S)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    document = describe(cluster, group)
    assert document["member_count"] == 0  # it left the group on the way out
    assert current_offsets(cluster, group) == {0: 5}  # and auto-commit committed on close


def test_delete_and_unknown_groups(cluster: Cluster) -> None:
    topic = topic_with(cluster, 3)
    group = new_name("g")
    consume_values(cluster, topic, "-g", group, "-o", "start", "-e")
    assert current_offsets(cluster, group) == {0: 3}

    deleted = ok(run(cluster, "group", "delete", group))
    assert (
        deleted.out.strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    )
    assert group not in ok(run(cluster, "group", "list")).out.splitlines()
    one_line_error(
        run(cluster, "group", "describe", group), 5, f"consumer group '{group}' does not exist"
    )
    one_line_error(
        run(cluster, "group", "describe", group, "--json"), 5, f"consumer group '{group}'"
    )
    one_line_error(
        run(cluster, "group", "delete", group), 5, f"consumer group '{group}' does not exist"
    )
    assert ok(run(cluster, "group", "delete", group, "--if-exists")).out == ""
    # its offsets went with it: the group starts over (here from the start)
    assert consume_values(cluster, topic, "-g", group, "-o", "start", "-e") == [0, 1, 2]


@pytest.fixture
def live_member(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """(topic, group) with a confluent-kafka consumer that is a member of the group and owns
    the topic's partitions until the test ends."""
    topic = topic_with(cluster, 4, partitions=2)
    group = new_name("g")
    assigned: list[TopicPartition] = []
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "client.id": "live-member",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,  # only the commit below
            "session.timeout.ms": 10_000,
        }
    )
    try:
        consumer.subscribe([topic], on_assign=lambda _c, parts: assigned.extend(parts))
        deadline = time.monotonic() + 30
        while not assigned and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert assigned, "the consumer was never assigned a partition"
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 2)],
            asynchronous=False,
        )
        yield topic, group
    finally:
        consumer.close()


def test_reset_and_delete_refused_while_the_group_has_members(
    cluster: Cluster, live_member: tuple[str, str]
) -> None:
    topic, group = live_member
    text = ok(run(cluster, "group", "describe", group))
    rows = [line.split() for line in text.out.splitlines()[1:]]
    assert [(r[2], r[3], r[8]) for r in rows] == [
        ("0", "1", "live-member"),
        ("1", "2", "live-member"),
    ]
    assert all(r[6].startswith("live-member-") for r in rows), rows
    assert text.err.strip() == f"Consumer group '{group}' is Stable with 1 active member."
    members = ok(run(cluster, "group", "describe", group, "--members")).out.splitlines()
    assert members[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert members[1].split()[3:] == ["live-member", "2"]
    state = ok(run(cluster, "group", "describe", group, "--state")).out.splitlines()[1].split()
    assert state[-2:] == ["Stable", "1"]

    refused = run(cluster, "group", "reset-offsets", group, "-t", topic, "--to-earliest")
    one_line_error(refused, 1, f"consumer group '{group}'", "1 active member")
    assert refused.out == ""
    one_line_error(
        run(cluster, "group", "delete", group), 1, f"consumer group '{group}'", "1 active member"
    )
    # nothing changed
    assert current_offsets(cluster, group) == {0: 1, 1: 2}
