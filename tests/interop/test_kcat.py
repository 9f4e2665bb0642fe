"""kcat (Debian's package, librdkafka underneath; fetched with apt-get download when it is not
installed) run as a user runs it against a 3-broker rlog cluster: metadata (-L), producing with
keys and headers (-P), reading them back (-C), offsets for a timestamp (-Q) and a balanced
consumer group (-G)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from support.cluster import HOST, Cluster
from support.kcat import Kcat

pytestmark = pytest.mark.integration

BROKER_IDS = [1, 2, 3]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def eventually(what: str, check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what}: not after {timeout_s} s"
        time.sleep(0.2)


# kcat -L asks as a producer, which by default lets Metadata create a topic it names.
NO_AUTO_CREATE = ("-X", "allow.auto.create.topics=false")


def metadata(kcat: Kcat, cluster: Cluster, topic: str) -> dict[str, Any]:
    """kcat -L -J for one topic."""
    return json.loads(kcat.ok("-b", cluster.bootstrap, "-L", "-J", "-t", topic, *NO_AUTO_CREATE))


def create_topic(kcat: Kcat, cluster: Cluster, topic: str, partitions: int) -> None:
    """kcat creates no topics: confluent-kafka's admin client does, with three replicas; then
    every partition has a leader in kcat's metadata."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=3)
    admin.create_topics([new_topic])[topic].result(timeout=30)

    def led() -> bool:
        [described] = metadata(kcat, cluster, topic)["topics"]
        return len(described["partitions"]) == partitions and all(
            p["leader"] in BROKER_IDS for p in described["partitions"]
        )

    eventually(f"{topic} to have leaders", led)


def produce(kcat: Kcat, cluster: Cluster, topic: str, lines: list[str], *args: str) -> None:
    """kcat -P of `lines`, each KEY:VALUE (-K:), with acks=all."""
    kcat.ok("-b", cluster.bootstrap, "-P", "-t", topic, "-K:", "-X", "acks=all", *args,
            input="".join(f"{line}\n" for line in lines))  # fmt: skip


def end_offsets(kcat: Kcat, cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset: -Q at the logical time -1 (latest)."""
    queries = [arg for p in range(partitions) for arg in ("-t", f"{topic}:{p}:-1")]
    answer = json.loads(kcat.ok("-b", cluster.bootstrap, "-Q", "-J", *queries))
    return {int(p): answer[topic][p]["offset"] for p in map(str, range(partitions))}


def test_metadata_lists_the_brokers_and_each_partitions_leader_replicas_and_isr(
    kcat_tool: Kcat, cluster: Cluster
):
    topic = unique("kcat-metadata")
    create_topic(kcat_tool, cluster, topic, partitions=3)

    described = metadata(kcat_tool, cluster, topic)
    assert sorted(described["brokers"], key=lambda b: b["id"]) == [
        {"id": node, "name": f"{HOST}:{cluster.base_port + node - 1}"} for node in BROKER_IDS
    ]
    assert described["controllerid"] in BROKER_IDS
    [described_topic] = described["topics"]
    assert described_topic["topic"] == topic
    assert "error" not in described_topic
    partitions = described_topic["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        replicas = [r["id"] for r in p["replicas"]]
        assert sorted(replicas) == BROKER_IDS
        assert sorted(r["id"] for r in p["isrs"]) == BROKER_IDS
        assert p["leader"] in replicas and "error" not in p

    # A topic that does not exist is reported, not created.
    [unknown] = metadata(kcat_tool, cluster, unique("kcat-absent"))["topics"]
    assert (unknown["error"], unknown["partitions"]) == ("Broker: Unknown topic or partition", [])

    # The plain listing says the same.
    text = kcat_tool.ok("-b", cluster.bootstrap, "-L", "-t", topic, *NO_AUTO_CREATE)
    assert " 3 brokers:\n" in text
    for node in BROKER_IDS:
        assert re.search(
            rf"^  broker {node} at {HOST}:{cluster.base_port + node - 1}\b", text, re.M
        )
    assert f'  topic "{topic}" with 3 partitions:\n' in text
    listed = re.findall(
        r"^    partition (\d+), leader (\d+), replicas: ([\d,]+), isrs: ([\d,]+)$", text, re.M
    )
    assert listed == [
        (
            str(p["partition"]),
            str(p["leader"]),
            ",".join(str(r["id"]) for r in p["replicas"]),
            ",".join(str(r["id"]) for r in p["isrs"]),
        )
        for p in partitions
    ]


def test_records_produced_with_keys_and_headers_read_back_exactly(
    kcat_tool: Kcat, cluster: Cluster
):
    topic = unique("kcat-records")
    create_topic(kcat_tool, cluster, topic, partitions=1)
    # -K: splits at the first colon only; an empty key and an empty value stay empty.
    lines = ["k1:v1", "k2:value:with:colons", ":no-key", "k4:", "k5:v5"]
    produce(kcat_tool, cluster, topic, lines, "-p", "0", "-H", "trace=abc", "-H", "source=kcat",
            "-z", "zstd", "-X", "enable.idempotence=true")  # fmt: skip

    out = kcat_tool.ok("-b", cluster.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                       "-e", "-q", "-f", "%k:%s:%o:%h\n")  # fmt: skip
    assert out.splitlines() == [
        "k1:v1:0:trace=abc,source=kcat",
        "k2:value:with:colons:1:trace=abc,source=kcat",
        ":no-key:2:trace=abc,source=kcat",
        "k4::3:trace=abc,source=kcat",
        "k5:v5:4:trace=abc,source=kcat",
    ]
    # Reading from an offset starts exactly there.
    tail = kcat_tool.ok("-b", cluster.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "3",
                        "-e", "-q", "-f", "%o=%s\n")  # fmt: skip
    assert tail.splitlines() == ["3=", "4=v5"]


def test_offsets_for_a_timestamp(kcat_tool: Kcat, cluster: Cluster):
    topic = unique("kcat-query")
    create_topic(kcat_tool, cluster, topic, partitions=1)
    produce(kcat_tool, cluster, topic, ["a:1", "b:2", "c:3"], "-p", "0")
    time.sleep(0.05)  # the second batch's timestamps are later than every one of the first's
    produce(kcat_tool, cluster, topic, ["d:4", "e:5", "f:6"], "-p", "0")
    out = kcat_tool.ok("-b", cluster.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                       "-e", "-q", "-f", "%o %T\n")  # fmt: skip
    timestamps = [int(line.split()[1]) for line in out.splitlines()]
    assert len(timestamps) == 6 and max(timestamps[:3]) < timestamps[3]

    def offset_for(timestamp: int) -> str:
        return kcat_tool.ok("-b", cluster.bootstrap, "-Q", "-t", f"{topic}:0:{timestamp}")

    # The first offset whose timestamp is at or after the one asked for.
    assert offset_for(timestamps[3]) == f"{topic} [0] offset 3\n"
    assert offset_for(timestamps[3] - 1) == f"{topic} [0] offset 3\n"
    assert offset_for(timestamps[0]) == f"{topic} [0] offset 0\n"
    assert offset_for(timestamps[5] + 3_600_000) == f"{topic} [0] offset -1\n"  # none that late
    answer = kcat_tool.ok("-b", cluster.bootstrap, "-Q", "-J", "-t", f"{topic}:0:{timestamps[3]}")
    assert json.loads(answer) == {topic: {"topic": topic, "0": {"partition": 0, "offset": 3}}}
    assert end_offsets(kcat_tool, cluster, topic, 1) == {0: 6}


def test_balanced_consumer_group_commits_and_the_next_member_resumes(
    kcat_tool: Kcat, cluster: Cluster
):
    topic, group = unique("kcat-group"), unique("kcat-group")
    create_topic(kcat_tool, cluster, topic, partitions=3)

    def consume_group() -> tuple[list[tuple[int, int, str, str]], str]:
        """One member of `group` reads until every partition's end, commits and leaves:
        ((partition, offset, key, value) of each record, kcat's messages)."""
        done = kcat_tool.run("-b", cluster.bootstrap, "-G", group, "-X",
                             "auto.offset.reset=earliest", "-e", "-f", "%p %o %k %s\n",
                             topic)  # fmt: skip
        assert done.returncode == 0, done.stderr
        records = [line.split(" ") for line in done.stdout.splitlines()]
        return [(int(p), int(o), k, s) for p, o, k, s in records], done.stderr

    produce(kcat_tool, cluster, topic, [f"key-{i}:value-{i}" for i in range(9)])
    first_end = end_offsets(kcat_tool, cluster, topic, 3)
    assert sum(first_end.values()) == 9
    records, _ = consume_group()
    assert sorted((k, s) for _p, _o, k, s in records) == sorted(
        (f"key-{i}", f"value-{i}") for i in range(9)
    )
    assert sorted((p, o) for p, o, _k, _s in records) == sorted(
        (p, o) for p, end in first_end.items() for o in range(end)
    )

    # The next member starts where the first committed: only the new records.
    produce(kcat_tool, cluster, topic, [f"key-{i}:value-{i}" for i in range(9, 15)])
    second_end = end_offsets(kcat_tool, cluster, topic, 3)
    records, _ = consume_group()
    assert sorted((k, s) for _p, _o, k, s in records) == sorted(
        (f"key-{i}", f"value-{i}") for i in range(9, 15)
    )
    assert sorted((p, o) for p, o, _k, _s in records) == sorted(
        (p, o) for p, end in second_end.items() for o in range(first_end[p], end)
    )

    # And one more finds nothing left: each partition ends at the offset committed.
    records, messages = consume_group()
    assert records == []
    reached = re.findall(rf"Reached end of topic {re.escape(topic)} \[(\d)\] at offset (\d+)",
                         messages)  # fmt: skip
    assert {int(p): int(o) for p, o in reached} == second_end
