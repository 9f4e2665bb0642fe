"""franz-go (kgo and kadm, from the Go module proxy), through the Go program in
tests/interop/franz/, against a 3-broker rlog cluster: the idempotent acks=all producer, a
group consumer committing by hand under the classic protocol and under the consumer protocol
(KIP-848, kgo's ServerSideBalancer), and kadm's topic, config, offset and group
administration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.cluster import HOST, Cluster
from support.franz_go import FranzGo

pytestmark = pytest.mark.integration

BROKER_IDS = [1, 2, 3]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def eventually(what: str, check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    """Metadata reaches every broker a moment after the controller commits it."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.2)


def by_partition(offsets: dict[str, int]) -> dict[int, int]:
    """JSON object keys are strings: {"0": 5} -> {0: 5}."""
    return {int(partition): offset for partition, offset in offsets.items()}


def create_topic(franz: FranzGo, topic: str, *configs: str, partitions: int = 3) -> None:
    config_flags = [flag for config in configs for flag in ("-config", config)]
    created = franz.one("create-topic", "-topic", topic, "-partitions", str(partitions),
                        "-replication-factor", "3", *config_flags)  # fmt: skip
    assert created["topic"] == topic
    assert created["error"] == ""


def list_offsets(franz: FranzGo, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(start offsets, end offsets) by partition, from ListStartOffsets and ListEndOffsets."""
    listed = franz.one("list-offsets", "-topic", topic)
    return by_partition(listed["start"]), by_partition(listed["end"])


def produce(franz: FranzGo, topic: str, count: int, first: int = 0) -> list[dict[str, Any]]:
    """Produce key-<i>/value-<i>, i in [first, first + count); every record's acknowledgement."""
    acked = franz.lines("produce", "-topic", topic, "-count", str(count), "-first", str(first))
    assert sorted(line["key"] for line in acked) == sorted(
        f"key-{i}" for i in range(first, first + count)
    )
    assert [line["error"] for line in acked] == [""] * count
    return acked


def consume(
    franz: FranzGo, topic: str, group: str, count: int, commit: str
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Read `count` records in `group` and commit as `commit` says: (the records, the offsets
    the client says it committed)."""
    lines = franz.lines("consume", "-topic", topic, "-group", group, "-count", str(count),
                        "-commit", commit)  # fmt: skip
    records = [line for line in lines if line["event"] == "consumed"]
    [committed] = [line for line in lines if line["event"] == "committed"]
    assert len(records) == count
    return records, by_partition(committed["offsets"].get(topic, {}))


def committed_offsets(franz: FranzGo, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on `topic`, from kadm's FetchOffsets."""
    fetched = franz.one("fetch-offsets", "-group", group)
    assert fetched["errors"] == []
    return by_partition(fetched["offsets"].get(topic, {}))


def test_idempotent_producer_gets_every_record_acknowledged_with_its_offset(franz: FranzGo):
    topic = unique("franz-produce")
    create_topic(franz, topic)
    acked = produce(franz, topic, 60)

    # Idempotence: the broker gave the producer an id and epoch, the same for every record.
    assert {(line["producer_id"], line["producer_epoch"]) for line in acked} == {
        (acked[0]["producer_id"], acked[0]["producer_epoch"])
    }
    assert acked[0]["producer_id"] >= 0 and acked[0]["producer_epoch"] >= 0
    # Each partition's records got offsets 0, 1, 2, ... with none skipped or repeated, in the
    # order they were produced.
    by_offset: dict[int, dict[int, int]] = defaultdict(dict)
    for line in acked:
        by_offset[line["partition"]][line["offset"]] = int(line["key"].removeprefix("key-"))
    assert sorted(by_offset) == [0, 1, 2]
    for indexes in by_offset.values():
        assert sorted(indexes) == list(range(len(indexes)))
        in_offset_order = [indexes[offset] for offset in sorted(indexes)]
        assert in_offset_order == sorted(in_offset_order)
    start, end = list_offsets(franz, topic)
    assert start == {0: 0, 1: 0, 2: 0}
    assert end == {p: len(indexes) for p, indexes in by_offset.items()}

    # Every acknowledged offset holds the record acknowledged there, header included.
    records, _ = consume(franz, topic, unique("franz-check"), 60, "none")
    read = {(r["partition"], r["offset"]): (r["key"], r["value"], r["headers"]) for r in records}
    assert read == {
        (line["partition"], line["offset"]): (
            line["key"],
            line["value"],
            {"index": line["key"].removeprefix("key-")},
        )
        for line in acked
    }


def test_group_consumer_commits_by_hand_and_the_next_member_resumes_after_the_commit(
    franz: FranzGo,
):
    topic, group = unique("franz-group"), unique("franz-group")
    create_topic(franz, topic)
    produce(franz, topic, 30)
    _, first_end = list_offsets(franz, topic)

    # Autocommit is off: a member that reads everything and commits nothing leaves no offsets.
    unsaved = unique("franz-no-commit")
    _, nothing = consume(franz, topic, unsaved, 30, "none")
    assert nothing == {}
    assert committed_offsets(franz, unsaved, topic) == {}

    # CommitRecords: the offsets committed are each partition's last record read, plus one.
    records, committed = consume(franz, topic, group, 30, "records")
    assert sorted(r["key"] for r in records) == sorted(f"key-{i}" for i in range(30))
    assert committed == first_end
    assert committed_offsets(franz, group, topic) == first_end

    # The next member of the group starts at the committed offsets: only the new records.
    produce(franz, topic, 30, first=30)
    _, second_end = list_offsets(franz, topic)
    records, committed = consume(franz, topic, group, 30, "uncommitted")
    assert sorted(r["key"] for r in records) == sorted(f"key-{i}" for i in range(30, 60))
    first_read: dict[int, int] = {}
    for r in records:
        first_read[r["partition"]] = min(r["offset"], first_read.get(r["partition"], r["offset"]))
    assert first_read == {p: first_end[p] for p in first_read}
    # CommitUncommittedOffsets commits everything read so far.
    assert committed == second_end
    assert committed_offsets(franz, group, topic) == second_end


def test_admin_creates_describes_alters_and_deletes_topics(franz: FranzGo, cluster: Cluster):
    topic = unique("franz-admin-topic")
    create_topic(franz, topic, "retention.ms=3600000", "max.message.bytes=500000")
    again = franz.one("create-topic", "-topic", topic, "-partitions", "3")
    assert again["error"] == "TOPIC_ALREADY_EXISTS"

    metadata = franz.one("metadata", "-topic", topic)
    cluster_id = (cluster.data_dir / "meta.properties").read_text().split("cluster.id=")[1]
    assert metadata["cluster"] == cluster_id.split()[0]
    assert metadata["brokers"] == [
        {"node_id": node, "host": HOST, "port": cluster.base_port + node - 1} for node in BROKER_IDS
    ]
    [described] = metadata["topics"]
    assert (described["topic"], described["internal"], described["error"]) == (topic, False, "")
    partitions = described["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert sorted(p["replicas"]) == BROKER_IDS
        assert sorted(p["isr"]) == BROKER_IDS
        assert p["leader"] in p["replicas"] and p["leader_epoch"] >= 0 and p["error"] == ""
    assert sorted(p["leader"] for p in partitions) == BROKER_IDS  # leadership is spread

    listed = franz.one("list-topics")["topics"]
    names = [t["topic"] for t in listed]
    assert topic in names
    assert "__consumer_offsets" not in names  # kadm's ListTopics leaves internal topics out

    def configs() -> dict[str, tuple[str | None, str]]:
        described = franz.one("describe-configs", "-topic", topic)
        assert (described["name"], described["error"]) == (topic, "")
        return {key: (c["value"], c["source"]) for key, c in described["configs"].items()}

    before = configs()
    assert before["retention.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert before["max.message.bytes"] == ("500000", "DYNAMIC_TOPIC_CONFIG")
    assert before["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")
    assert before["min.insync.replicas"] == ("2", "STATIC_BROKER_CONFIG")  # the cluster's config

    # Incremental: what is named changes, every other override stays.
    altered = franz.one("alter-configs", "-topic", topic, "-set", "cleanup.policy=compact",
                        "-set", "segment.ms=600000", "-delete", "retention.ms")  # fmt: skip
    assert (altered["name"], altered["error"]) == (topic, "")
    after = configs()
    assert after["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
    assert after["segment.ms"] == ("600000", "DYNAMIC_TOPIC_CONFIG")
    assert after["retention.ms"] == ("604800000", "DEFAULT_CONFIG")
    assert after["max.message.bytes"] == ("500000", "DYNAMIC_TOPIC_CONFIG")
    refused = franz.one("alter-configs", "-topic", topic, "-set", "retention.ms=soon")
    assert refused["error"] == "INVALID_CONFIG"
    assert configs() == after
    missing = franz.one("alter-configs", "-topic", unique("franz-none"), "-set", "retention.ms=1")
    assert missing["error"] == "UNKNOWN_TOPIC_OR_PARTITION"

    assert franz.one("delete-topic", "-topic", topic) == {"topic": topic, "error": ""}
    eventually(
        f"{topic} gone from Metadata",
        lambda: (
            franz.one("metadata", "-topic", topic)["topics"][0]["error"]
            == "UNKNOWN_TOPIC_OR_PARTITION"
        ),
    )
    assert topic not in [t["topic"] for t in franz.one("list-topics")["topics"]]
    gone = franz.one("delete-topic", "-topic", topic)
    assert gone == {"topic": topic, "error": "UNKNOWN_TOPIC_OR_PARTITION"}


def test_admin_offsets_delete_records_and_groups(franz: FranzGo):
    topic, group = unique("franz-admin-offsets"), unique("franz-admin-group")
    create_topic(franz, topic)
    produce(franz, topic, 30)
    start, end = list_offsets(franz, topic)
    assert start == {0: 0, 1: 0, 2: 0}
    assert sum(end.values()) == 30

    with franz.held_consumer("-topic", topic, "-group", group, "-count", "30",
                             "-commit", "records"):  # fmt: skip
        # A live member: the group is Stable, with the member and its assignment.
        [described] = franz.lines("describe-group", "-group", group)
        assert (described["group"], described["error"]) == (group, "")
        assert (described["state"], described["protocol_type"]) == ("Stable", "consumer")
        assert described["protocol"] == "cooperative-sticky"  # kgo's default balancer
        [member] = described["members"]
        assert member["client_id"] == "rlog-interop-franz"
        assert member["client_host"] == f"/{HOST}"
        assert member["subscribed_topics"] == [topic]
        assert member["assigned"] == {topic: [0, 1, 2]}
        assert described["coordinator"] in BROKER_IDS
        # A group with a member cannot be deleted.
        refused = franz.one("delete-group", "-group", group)
        assert refused == {"group": group, "error": "NON_EMPTY_GROUP"}
        assert committed_offsets(franz, group, topic) == end

    # The member left (LeaveGroup on close): the group is Empty, its offsets kept.
    [described] = franz.lines("describe-group", "-group", group)
    assert (described["state"], described["members"]) == ("Empty", [])
    assert committed_offsets(franz, group, topic) == end

    # DeleteRecords: partition 0 up to offset 2, partition 1 entirely (-1: its high watermark).
    deleted = franz.lines("delete-records", "-topic", topic, "-offset", "0=2", "-offset", "1=-1")
    assert deleted == [
        {"topic": topic, "partition": 0, "low_watermark": 2, "error": ""},
        {"topic": topic, "partition": 1, "low_watermark": end[1], "error": ""},
    ]
    start, after_end = list_offsets(franz, topic)
    assert (start, after_end) == ({0: 2, 1: end[1], 2: 0}, end)
    beyond = franz.one("delete-records", "-topic", topic, "-offset", f"2={end[2] + 1}")
    assert (beyond["partition"], beyond["error"]) == (2, "OFFSET_OUT_OF_RANGE")
    assert list_offsets(franz, topic)[0] == {0: 2, 1: end[1], 2: 0}
    # A new group starting from the beginning reads only what is left.
    left = end[0] - 2 + end[2]
    records, _ = consume(franz, topic, unique("franz-after-delete"), left, "none")
    assert sorted((r["partition"], r["offset"]) for r in records) == sorted(
        [(0, o) for o in range(2, end[0])] + [(2, o) for o in range(end[2])]
    )

    assert franz.one("delete-group", "-group", group) == {"group": group, "error": ""}
    [described] = franz.lines("describe-group", "-group", group)
    assert (described["state"], described["members"]) == ("Dead", [])
    assert committed_offsets(franz, group, topic) == {}
    gone = franz.one("delete-group", "-group", group)
    assert gone == {"group": group, "error": "GROUP_ID_NOT_FOUND"}


class Member:
    """`franz member`: a group member under the consumer protocol that reads until its stdin
    closes, printing its assignment's changes, its records and its commits (main.go)."""

    def __init__(self, franz: FranzGo, directory: Path, name: str, *args: str) -> None:
        self.name = name
        self.output = directory / f"{name}.jsonl"
        self.errors = directory / f"{name}.err"
        command = franz.command("member", *args, timeout_s=120)
        with open(self.output, "wb") as out, open(self.errors, "wb") as err:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=out, stderr=err, start_new_session=True
            )

    def events(self, kind: str) -> list[dict[str, Any]]:
        found = []
        for line in self.output.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line being written
            if event["event"] == kind:
                found.append(event)
        return found

    def owned(self) -> list[int]:
        assigned = self.events("assigned")
        return assigned[-1]["partitions"] if assigned else []

    def keys(self) -> list[str]:
        return [record["key"] for record in self.events("consumed")]

    def alive(self) -> bool:
        assert self.process.poll() is None, (
            f"{self.name} exited {self.process.returncode}: {self.errors.read_text()[-2000:]}"
        )
        return True

    def leave(self) -> None:
        """Close its stdin: it stops reading, leaves the group and exits 0."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0, self.errors.read_text()[-2000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        if self.process.stdin is not None:
            self.process.stdin.close()


@pytest.mark.parametrize(
    ("assignor", "shares"),
    [("uniform", None), ("range", [[0, 1], [2, 3]])],
)
def test_consumer_protocol_members_split_the_partitions_and_commit_by_hand(
    franz: FranzGo, tmp_path: Path, assignor: str, shares: list[list[int]] | None
):
    topic, group = unique("franz-848"), unique("franz-848")
    create_topic(franz, topic, partitions=4)
    produce(franz, topic, 40)
    flags = ["-topic", topic, "-group", group, "-protocol", "consumer", "-assignor", assignor]
    first = Member(franz, tmp_path, "first", *flags)
    second: Member | None = None
    try:
        eventually(
            "the first member owning every partition and reading every record",
            lambda: first.alive() and first.owned() == [0, 1, 2, 3] and len(first.keys()) == 40,
        )
        second = Member(franz, tmp_path, "second", *flags)
        pair = (first, second)
        eventually(
            "the two members owning two partitions each",
            lambda: (
                all(m.alive() for m in pair)
                and sorted(first.owned() + second.owned()) == [0, 1, 2, 3]
                and len(first.owned()) == len(second.owned()) == 2
            ),
        )
        if shares is not None:
            assert sorted([first.owned(), second.owned()]) == shares

        # The broker's view (ConsumerGroupDescribe): a consumer-protocol group, with the
        # members' assignments as they reported them, each reconciled (current = target).
        [described] = franz.lines("describe-consumer-group", "-group", group)
        assert (described["error"], described["state"]) == ("", "Stable")
        assert described["assignor"] == assignor
        assert described["epoch"] == described["assignment_epoch"] >= 2
        members = described["members"]
        assert sorted(m["assigned"][topic] for m in members) == sorted(
            [first.owned(), second.owned()]
        )
        for m in members:
            assert m["assigned"] == m["target"]
            assert m["subscribed_topics"] == [topic]
            assert m["client_id"] == "rlog-interop-franz"
            assert 1 <= m["member_epoch"] <= described["epoch"]

        produce(franz, topic, 40, first=40)
        eventually("both members reading the new records",
                   lambda: len(first.keys()) + len(second.keys()) >= 80)  # fmt: skip
        assert second.keys(), "the second member read nothing"

        second.leave()
        eventually("the first member owning every partition again",
                   lambda: first.alive() and first.owned() == [0, 1, 2, 3])  # fmt: skip
        produce(franz, topic, 40, first=80)
        eventually("the first member reading the last records",
                   lambda: len(first.keys()) + len(second.keys()) >= 120)  # fmt: skip
        time.sleep(1.0)  # a duplicate would show up here
        first.leave()
    finally:
        first.kill()
        if second is not None:
            second.kill()

    # Every record once, across the split and the member that left.
    keys = first.keys() + second.keys()
    duplicates = [key for key, count in Counter(keys).items() if count > 1]
    assert not duplicates, f"records consumed twice: {duplicates[:10]}"
    assert sorted(keys) == sorted(f"key-{i}" for i in range(120))
    # The commits (made with each member's epoch) reached each partition's end.
    _, end = list_offsets(franz, topic)
    committed: dict[int, int] = {}
    for member in (first, second):
        for commit in member.events("committed"):
            for partition, offset in by_partition(commit["offsets"][topic]).items():
                committed[partition] = max(offset, committed.get(partition, 0))
    assert committed == end
    assert committed_offsets(franz, group, topic) == end
    # Both left: the group is empty, its offsets kept.
    [described] = franz.lines("describe-consumer-group", "-group", group)
    assert (described["state"], described["members"]) == ("Empty", [])
