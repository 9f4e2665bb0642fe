"""The real ``rlog`` command with idempotent and transactional producers: ``produce
--transactional-id/--txn-size/--abort``, ``consume --isolation``, ``txn list|describe`` and the
LSO in ``topic describe``, against one real cluster for the whole module."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from support.cli_runner import Result, ok, one_line_error, rlog
from support.cluster import Cluster, start_cluster

pytestmark = pytest.mark.integration

WAIT_S = 20.0  # bound on waiting for a coordinator to finish writing markers


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("rlog-txn") / "data", brokers=1)
    try:
        yield cluster
    finally:
        cluster.stop()


def run(cluster: Cluster, *args: str, stdin: str | None = None) -> Result:
    return rlog(*args, data_dir=cluster.data_dir, stdin=stdin)


def unique(prefix: str) -> str:
    return f"{prefix}-{random.randrange(1 << 30):x}"


def new_topic(cluster: Cluster, partitions: int = 1) -> str:
    name = unique("txn")
    ok(run(cluster, "topic", "create", name, "-p", str(partitions), "-r", "1"))
    return name


def values(cluster: Cluster, topic: str, *args: str) -> list[str]:
    """Every record value of ``topic`` from the start, with the given consume flags."""
    return ok(run(cluster, "consume", topic, "-o", "start", "-e", "-f", r"%v\n", *args)).out.split()


def wait_for(what: str, probe: Callable[[], Any], check: Callable[[Any], bool]) -> Any:
    """Call ``probe`` until ``check`` accepts its answer; bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    seen = probe()
    while not check(seen):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last seen: {seen!r}")
        time.sleep(0.2)
        seen = probe()
    return seen


def listed(cluster: Cluster, *args: str) -> dict[str, dict[str, Any]]:
    """``rlog txn list --json``, by transactional id."""
    documents = json.loads(ok(run(cluster, "txn", "list", "--json", *args)).out)
    return {d["transactional_id"]: d for d in documents}


def partitions(cluster: Cluster, topic: str) -> list[dict[str, Any]]:
    return json.loads(ok(run(cluster, "topic", "describe", topic, "--json")).out)["partitions"]


def settled(cluster: Cluster, topic: str) -> list[dict[str, Any]]:
    """The topic's partitions once every LSO has caught up with its HW (markers written)."""
    return wait_for(
        f"LSO == HW in {topic}",
        lambda: partitions(cluster, topic),
        lambda ps: all(p["last_stable_offset"] == p["high_watermark"] for p in ps),
    )


# -- produce and consume ------------------------------------------------------------------


def test_committed_transactions_are_read_committed(txn_cluster: Cluster) -> None:
    topic = new_topic(txn_cluster)
    tid = unique("commit")
    lines = [f"c{i}" for i in range(5)]
    produced = ok(
        run(
            txn_cluster,
            "produce",
            topic,
            "--transactional-id",
            tid,
            "--txn-size",
            "2",
            stdin="\n".join(lines) + "\n",
        )
    )
    assert produced.out == ""
    assert produced.err.splitlines() == [
        "% Committed transaction 1: 2 records",
        "% Committed transaction 2: 2 records",
        "% Committed transaction 3: 1 record",
    ]
    settled(txn_cluster, topic)
    assert values(txn_cluster, topic, "--isolation", "read_committed") == lines
    assert values(txn_cluster, topic, "--isolation", "read_uncommitted") == lines  # no markers


def test_aborted_transaction_is_read_uncommitted_only(txn_cluster: Cluster) -> None:
    topic = new_topic(txn_cluster)
    tid = unique("abort")
    ok(run(txn_cluster, "produce", topic, "--transactional-id", tid, stdin="c1\nc2\n"))
    aborted = ok(
        run(
            txn_cluster,
            "produce",
            topic,
            "--transactional-id",
            tid,
            "--abort",
            "--txn-size",
            "3",
            stdin="a1\na2\na3\n",
        )
    )
    assert aborted.err.splitlines() == ["% Aborted transaction 1: 3 records"]
    ok(run(txn_cluster, "produce", topic, "--idempotent", stdin="i1\n"))
    settled(txn_cluster, topic)
    committed = values(txn_cluster, topic, "--isolation-level", "READ_COMMITTED")
    assert committed == ["c1", "c2", "i1"]
    everything = ["c1", "c2", "a1", "a2", "a3", "i1"]
    assert values(txn_cluster, topic) == everything  # the default: read_uncommitted


# -- txn list, txn describe -----------------------------------------------------------------


def test_txn_list_and_describe(txn_cluster: Cluster) -> None:
    topic = new_topic(txn_cluster)
    committer, aborter = unique("listed-commit"), unique("listed-abort")
    ok(run(txn_cluster, "produce", topic, "--transactional-id", committer, stdin="x\n"))
    ok(run(txn_cluster, "produce", topic, "--transactional-id", aborter, "--abort", stdin="y\n"))
    by_id = wait_for(
        "both transactions complete",
        lambda: listed(txn_cluster),
        lambda found: (
            found.get(committer, {}).get("state") == "CompleteCommit"
            and found.get(aborter, {}).get("state") == "CompleteAbort"
        ),
    )
    assert by_id[committer]["coordinator_id"] == 1

    text = ok(run(txn_cluster, "txn", "list")).out.splitlines()
    assert text[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    rows = {line.split()[0]: line.split() for line in text[1:]}
    assert rows[committer] == [
        committer,
        "1",
        str(by_id[committer]["producer_id"]),
        "CompleteCommit",
    ]
    assert rows[aborter][3] == "CompleteAbort"

    only_aborted = listed(txn_cluster, "--state", "CompleteAbort")
    assert aborter in only_aborted and committer not in only_aborted
    assert all(d["state"] == "CompleteAbort" for d in only_aborted.values())
    assert committer in listed(txn_cluster, "-s", "completecommit", "-s", "Ongoing")

    described = ok(run(txn_cluster, "txn", "describe", committer)).out.splitlines()
    assert described[0].split() == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    cells = described[1].split()
    assert cells[:3] == ["1", committer, str(by_id[committer]["producer_id"])]
    assert cells[4] == "CompleteCommit" and cells[5] == "60000"
    assert cells[8] == "-"  # no partitions: the transaction is complete

    documents = json.loads(
        ok(run(txn_cluster, "txn", "describe", committer, aborter, "--json")).out
    )
    assert [d["transactional_id"] for d in documents] == [committer, aborter]
    assert documents[0]["producer_id"] == by_id[committer]["producer_id"]
    assert documents[1]["producer_id"] == by_id[aborter]["producer_id"]
    assert documents[1]["state"] == "CompleteAbort"
    assert documents[0]["transaction_start_time_ms"] > 1_600_000_000_000

    missing = unique("never-used")
    partial = run(txn_cluster, "txn", "describe", committer, missing)
    one_line_error(partial, 5, f"'{missing}'", "does not exist")
    assert committer in partial.out  # the known one is still printed


def test_open_transaction_holds_the_lso_back(txn_cluster: Cluster) -> None:
    topic = new_topic(txn_cluster)
    ok(run(txn_cluster, "produce", topic, stdin="before\n"))
    tid = unique("open")
    producer = Producer({"bootstrap.servers": txn_cluster.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    try:
        for value in ("o1", "o2"):
            producer.produce(topic, value.encode(), partition=0)
        assert producer.flush(10) == 0
        (partition,) = partitions(txn_cluster, topic)
        assert partition["high_watermark"] == 3
        assert partition["last_stable_offset"] == 1  # the open transaction's first offset
        line = ok(run(txn_cluster, "topic", "describe", topic)).out.splitlines()[1]
        assert "\tLSO: 1\tHW: 3\tLEO: 1=3\t" in line

        cells = ok(run(txn_cluster, "txn", "describe", tid)).out.splitlines()[1].split()
        assert cells[1] == tid and cells[4] == "Ongoing" and cells[8] == f"{topic}-0"
        assert int(cells[7]) >= 0  # TransactionDurationMs
        assert tid in listed(txn_cluster, "--state", "Ongoing")

        assert values(txn_cluster, topic, "--isolation", "read_committed") == ["before"]
        assert values(txn_cluster, topic) == ["before", "o1", "o2"]
    finally:
        producer.abort_transaction(10)
    (partition,) = settled(txn_cluster, topic)
    assert partition["high_watermark"] == 4  # and the abort marker


def test_topic_describe_lso_equals_hw_without_open_transactions(txn_cluster: Cluster) -> None:
    topic = new_topic(txn_cluster, partitions=2)
    ok(
        run(
            txn_cluster,
            "produce",
            topic,
            "--transactional-id",
            unique("lso"),
            "--partition",
            "1",
            stdin="a\nb\n",
        )
    )
    views = settled(txn_cluster, topic)
    assert [(p["last_stable_offset"], p["high_watermark"]) for p in views] == [(0, 0), (3, 3)]
    text = ok(run(txn_cluster, "topic", "describe", topic)).out.splitlines()
    assert "\tLSO: 0\tHW: 0\t" in text[1]
    assert "\tLSO: 3\tHW: 3\t" in text[2]


# -- bad flags --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["produce", "t", "--txn-size", "2"], ["--txn-size", "--transactional-id"]),
        (["produce", "t", "--abort"], ["--abort", "--transactional-id"]),
        (["produce", "t", "--transactional-id", ""], ["--transactional-id", "non-empty"]),
        (["produce", "t", "--idempotent", "--acks", "1"], ["--acks 1", "--idempotent", "all"]),
        (["produce", "t", "--transactional-id", "x", "--acks", "0"], ["--acks 0", "all"]),
        (["produce", "t", "--transactional-id", "x", "--txn-size", "0"], ["--txn-size", "1"]),
        (["consume", "t", "--isolation", "bogus"], ["--isolation", "read_committed"]),
        (["txn", "list", "--state", "bogus"], ["--state", "CompleteCommit", "bogus"]),
        (["txn", "describe", ""], ["non-empty"]),
    ],
)
def test_bad_flags_are_one_line(tmp_path: Path, args: list[str], words: list[str]) -> None:
    # No cluster at all: the flags are refused before one is looked for (else exit 3).
    result = rlog(*args, data_dir=tmp_path / "never-started", stdin="x\n")
    one_line_error(result, 2, *words)


def test_txn_commands_with_cluster_down(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-started"
    for args in (["txn", "list"], ["txn", "describe", "x"]):
        one_line_error(rlog(*args, data_dir=data_dir), 3, "not running", "rlog cluster up")
