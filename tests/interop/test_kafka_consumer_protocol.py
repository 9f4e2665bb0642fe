"""Kafka's consumer group protocol (KIP-848) as Kafka's own Java client and tools (kafka-tools
4.4) use it against a 3-broker rlog cluster: the console consumer and the verifiable consumer
with `group.protocol=consumer` (the broker assigns the partitions, `uniform` by default), and
`kafka-consumer-groups` describing and listing such a group. The cluster's members heartbeat
every 500 ms (tests/interop/conftest.py), so assignment changes reach them within a second."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlog.core.groups import group_partition
from support.cluster import Cluster
from support.kafka_tools import KafkaTools
from support.replication import partition_state

pytestmark = pytest.mark.integration

STOP_TIMEOUT_S = 30.0
OFFSETS_PARTITIONS = 16  # the brokers' default offsets.topic.num.partitions
# A JVM that ends on SIGTERM after running its shutdown hooks exits 128 + 15.
SIGTERM_EXIT = (0, 128 + signal.SIGTERM)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.2)


def stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM (a Java tool's shutdown hook closes its consumer: a last commit, then it leaves
    the group), then SIGKILL if it has not ended in time; its exit code (see SIGTERM_EXIT)."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)
    return process.returncode


def create_topic(tools: KafkaTools, cluster: Cluster, topic: str, partitions: int) -> None:
    tools.ok("kafka-topics", "--bootstrap-server", cluster.bootstrap, "--create", "--topic", topic,
             "--partitions", str(partitions), "--replication-factor", "3")  # fmt: skip


def produce(tools: KafkaTools, cluster: Cluster, topic: str, indexes: range) -> None:
    """Records key-<i>/<i> for each i, acks=all; keys spread them over the partitions."""
    tools.ok("kafka-console-producer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
             "--command-property", "acks=all", "--reader-property", "parse.key=true",
             input="".join(f"key-{i}\t{i}\n" for i in indexes))  # fmt: skip


def end_offsets(tools: KafkaTools, cluster: Cluster, topic: str) -> dict[int, int]:
    out = tools.ok("kafka-get-offsets", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                   "--time", "-1")  # fmt: skip
    return {int(line.split(":")[1]): int(line.split(":")[2]) for line in out.split()}


def group_offsets(tools: KafkaTools, cluster: Cluster, group: str) -> dict[int, list[str]]:
    """kafka-consumer-groups --describe: partition -> its row (GROUP TOPIC PARTITION
    CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID)."""
    out = tools.ok("kafka-consumer-groups", "--bootstrap-server", cluster.bootstrap,
                   "--describe", "--group", group)  # fmt: skip
    rows = [line.split() for line in out.splitlines() if line.startswith(group + " ")]
    return {int(row[2]): row for row in rows}


def group_state(tools: KafkaTools, cluster: Cluster, group: str) -> dict[str, str]:
    """kafka-consumer-groups --describe --state: coordinator id, assignor, state, members."""
    out = tools.ok("kafka-consumer-groups", "--bootstrap-server", cluster.bootstrap,
                   "--describe", "--group", group, "--state")  # fmt: skip
    [row] = [line for line in out.splitlines() if line.startswith(group + " ")]
    found = re.fullmatch(r"(\S+)\s+\S+\s+\((\d+)\)\s+(\S+)\s+(\S+)\s+(\d+)", row.strip())
    assert found, row
    _, coordinator, assignor, state, members = found.groups()
    return {"coordinator": coordinator, "assignor": assignor, "state": state, "members": members}


def listed_groups(tools: KafkaTools, cluster: Cluster, types: str) -> dict[str, str]:
    """kafka-consumer-groups --list --type TYPES: group -> its type."""
    out = tools.ok("kafka-consumer-groups", "--bootstrap-server", cluster.bootstrap, "--list",
                   "--type", types)  # fmt: skip
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return {row[0]: row[1] for row in rows}


class VerifiableMember:
    """One `kafka-verifiable-consumer --group-protocol consumer`: manual commits (commitSync
    after each batch it processed), every record and rebalance printed as a JSON event."""

    def __init__(self, tools: KafkaTools, cluster: Cluster, directory: Path, name: str,
                 topic: str, group: str) -> None:  # fmt: skip
        self.name = name
        self.output = directory / f"{name}.jsonl"
        self.process = tools.start(
            "kafka-verifiable-consumer", "--bootstrap-server", cluster.bootstrap,
            "--topic", topic, "--group-id", group, "--group-protocol", "consumer",
            "--reset-policy", "earliest", "--verbose", stdout=self.output,
        )  # fmt: skip

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        found = []
        if not self.output.exists():
            return found
        for line in self.output.read_text().splitlines():
            if not line.startswith("{"):
                continue  # the client's warnings
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line being written
            if name is None or event["name"] == name:
                found.append(event)
        return found

    def owned(self) -> set[int]:
        """Its partitions now: the consumer protocol's callbacks name only what changed."""
        partitions: set[int] = set()
        for event in self.events():
            changed = {p["partition"] for p in event.get("partitions", [])}
            if event["name"] == "partitions_assigned":
                partitions |= changed
            elif event["name"] in ("partitions_revoked", "partitions_lost"):
                partitions -= changed
        return partitions

    def values(self) -> list[str]:
        return [event["value"] for event in self.events("record_data")]

    def commits(self) -> list[dict[str, Any]]:
        return self.events("offsets_committed")

    def alive(self) -> None:
        assert self.process.poll() is None, (
            f"{self.name} exited {self.process.returncode}: {self.output.read_text()[-2000:]}"
        )

    def stop(self) -> None:
        assert stop(self.process) in SIGTERM_EXIT, self.output.read_text()[-2000:]
        assert self.events("shutdown_complete"), f"{self.name} did not close its consumer"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def last_commits(members: list[VerifiableMember]) -> dict[int, int]:
    """Each partition's last committed offset, in the order the commits were made."""
    commits = sorted((c for m in members for c in m.commits()), key=lambda c: c["timestamp"])
    failed = [c for c in commits if not c["success"]]
    assert not failed, f"commits failed: {failed[:3]}"
    last: dict[int, int] = {}
    for commit in commits:
        for offset in commit["offsets"]:
            last[offset["partition"]] = offset["offset"]
    return last


def test_console_consumer_in_a_consumer_group_and_the_group_described(
    kafka_tools: KafkaTools, cluster: Cluster, tmp_path: Path
):
    topic, group = unique("cp-console"), unique("cp-console")
    create_topic(kafka_tools, cluster, topic, 3)
    produce(kafka_tools, cluster, topic, range(30))
    out = tmp_path / "console.txt"
    consumer = kafka_tools.start(
        "kafka-console-consumer", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
        "--group", group, "--from-beginning", "--timeout-ms", "60000",
        "--command-property", "group.protocol=consumer",
        "--command-property", "auto.commit.interval.ms=500",
        "--formatter-property", "print.key=true", stdout=out,
    )  # fmt: skip
    try:
        wait_until(
            "30 records read",
            lambda: (
                consumer.poll() is None
                and len([line for line in out.read_text().splitlines() if "\t" in line]) >= 30
            ),
        )
        read = [line for line in out.read_text().splitlines() if "\t" in line]
        assert sorted(read) == sorted(f"key-{i}\t{i}" for i in range(30))

        # The live member, with its assignment as the coordinator gave it: all three
        # partitions, its current epoch the target one (no reconciliation in flight).
        members = kafka_tools.ok("kafka-consumer-groups", "--bootstrap-server",
                                 cluster.bootstrap, "--describe", "--group", group,
                                 "--members", "--verbose")  # fmt: skip
        [row] = [line.split() for line in members.splitlines() if line.startswith(group + " ")]
        # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS CURRENT-EPOCH CURRENT-ASSIGNMENT
        # TARGET-EPOCH TARGET-ASSIGNMENT
        member_id, host, partitions = row[1], row[2], row[4]
        current_epoch, current, target_epoch, target = row[5:9]
        assert host == "/127.0.0.1" and partitions == "3"
        assert current == target == f"{topic}:0,1,2"
        assert int(current_epoch) == int(target_epoch) >= 1
        state = group_state(kafka_tools, cluster, group)
        assert (state["assignor"], state["state"], state["members"]) == ("uniform", "Stable", "1")
        assert int(state["coordinator"]) in (1, 2, 3)

        # Its auto-commits reach each partition's end; the member owns every partition.
        ends = end_offsets(kafka_tools, cluster, topic)
        assert sum(ends.values()) == 30

        def committed_to_the_end() -> bool:
            rows = group_offsets(kafka_tools, cluster, group)
            return {p: (r[1], r[3], r[4], r[5], r[6]) for p, r in rows.items()} == {
                p: (topic, str(end), str(end), "0", member_id) for p, end in ends.items()
            }

        wait_until("the member's commits at each partition's end", committed_to_the_end)
    finally:
        assert stop(consumer) in SIGTERM_EXIT, out.read_text()[-2000:]
    assert "Processed a total of 30 messages" in out.read_text()  # it closed its consumer

    # It left (its heartbeat with epoch -1): the group is empty, its offsets kept.
    state = group_state(kafka_tools, cluster, group)
    assert (state["state"], state["members"]) == ("Empty", "0")
    rows = group_offsets(kafka_tools, cluster, group)
    assert {p: (r[3], r[5], r[6]) for p, r in rows.items()} == {
        p: (str(end), "0", "-") for p, end in ends.items()
    }
    # ListGroups v5 carries each group's type.
    assert listed_groups(kafka_tools, cluster, "consumer").get(group) == "Consumer"
    assert group not in listed_groups(kafka_tools, cluster, "classic")


def test_verifiable_consumers_split_the_partitions_and_consume_each_record_once(
    kafka_tools: KafkaTools, cluster: Cluster, tmp_path: Path
):
    topic, group = unique("cp-verifiable"), unique("cp-verifiable")
    create_topic(kafka_tools, cluster, topic, 4)
    produce(kafka_tools, cluster, topic, range(0, 300))
    first = VerifiableMember(kafka_tools, cluster, tmp_path, "first", topic, group)
    second: VerifiableMember | None = None
    try:
        wait_until("the first member owning every partition", lambda: first.owned() == {0, 1, 2, 3})
        wait_until("the first member reading the first records", lambda: len(first.values()) == 300)

        second = VerifiableMember(kafka_tools, cluster, tmp_path, "second", topic, group)
        pair = (first, second)

        def split() -> bool:
            for member in pair:
                member.alive()
            owned = [member.owned() for member in pair]
            return all(len(share) == 2 for share in owned) and owned[0] | owned[1] == {0, 1, 2, 3}

        wait_until("the two members owning two partitions each", split)
        produce(kafka_tools, cluster, topic, range(300, 600))
        wait_until("both members reading the new records",
                   lambda: len(first.values()) + len(second.values()) >= 600)  # fmt: skip
        # Each member read only from its own partitions since the split.
        assert second.owned().isdisjoint(first.owned())

        second.stop()  # it leaves; its partitions go back to the first member
        wait_until("the first member owning every partition again",
                   lambda: first.owned() == {0, 1, 2, 3})  # fmt: skip
        produce(kafka_tools, cluster, topic, range(600, 900))
        wait_until("the remaining member reading the last records",
                   lambda: len(first.values()) + len(second.values()) >= 900)  # fmt: skip
        time.sleep(1.0)  # a duplicate would show up here
        first.stop()
    finally:
        first.kill()
        if second is not None:
            second.kill()

    values = first.values() + second.values()
    duplicates = [value for value, count in Counter(values).items() if count > 1]
    assert not duplicates, f"records consumed twice: {duplicates[:10]}"
    assert sorted(values, key=int) == [str(i) for i in range(900)]
    assert second.values(), "the second member read nothing"
    ends = end_offsets(kafka_tools, cluster, topic)
    assert last_commits([first, second]) == ends  # the manual commits reached each end
    rows = group_offsets(kafka_tools, cluster, group)
    assert {p: int(r[3]) for p, r in rows.items()} == ends


def test_a_member_keeps_consuming_and_committing_across_a_killed_coordinator(
    kafka_tools: KafkaTools, cluster: Cluster, tmp_path: Path
):
    topic, group = unique("cp-failover"), unique("cp-failover")
    create_topic(kafka_tools, cluster, topic, 3)
    produce(kafka_tools, cluster, topic, range(0, 200))
    member = VerifiableMember(kafka_tools, cluster, tmp_path, "member", topic, group)
    try:
        wait_until("the member reading the first records", lambda: len(member.values()) == 200)
        wait_until(
            "its commits at each partition's end",
            lambda: last_commits([member]) == end_offsets(kafka_tools, cluster, topic),
        )
        before = group_state(kafka_tools, cluster, group)
        assert (before["state"], before["members"]) == ("Stable", "1")
        assigned_before = len(member.events("partitions_assigned"))
        commits_before = len(member.commits())

        # Killing the last ISR member would take the partition offline (no unclean election).
        partition = group_partition(group, OFFSETS_PARTITIONS)
        wait_until(
            "a full ISR for the group's offsets partition",
            lambda: len(partition_state(cluster, "__consumer_offsets", partition)["isr"]) == 3,
        )
        cluster.chaos("kill", f"broker-{before['coordinator']}")

        # The group's state is in __consumer_offsets: the new coordinator knows the member.
        def moved() -> bool:
            # The tool may fail while the group's offsets partition has no leader yet.
            try:
                after = group_state(kafka_tools, cluster, group)
            except AssertionError:
                return False
            return after["coordinator"] != before["coordinator"] and after["members"] == "1"

        wait_until("a new coordinator with the member", moved, timeout_s=40)
        produce(kafka_tools, cluster, topic, range(200, 400))
        wait_until("the member reading past the failover", lambda: len(member.values()) >= 400,
                   timeout_s=40)  # fmt: skip
        wait_until("its commits at each partition's end again",
                   lambda: last_commits([member]) == end_offsets(kafka_tools, cluster, topic),
                   timeout_s=40)  # fmt: skip
        member.alive()
        assert len(member.commits()) > commits_before
        # No rebalance: the member kept its partitions (none revoked, lost or reassigned).
        assert member.owned() == {0, 1, 2}
        assert len(member.events("partitions_assigned")) == assigned_before
        assert not member.events("partitions_revoked") and not member.events("partitions_lost")
        member.stop()
    finally:
        member.kill()
        cluster.wait_until_running(60)
    values = member.values()
    assert sorted(values, key=int) == [str(i) for i in range(400)]  # each once
