"""``rlog topic describe`` shows offline replicas and why: a paused leader (rlogd knows at once,
while the controller still counts it live and it still leads), and a stopped broker (fenced by
the controller, its leaderships moved), with and without rlogd's view."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support.cli_runner import Result, clean_env, ok, rlog
from support.cluster import Cluster

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., Cluster]
# The session timeout is long so a paused leader stays leader (and in every ISR) for the whole
# check: only rlogd can tell it is paused. A clean stop fences a broker at once regardless.
CONFIG = """
[cluster]
restart_backoff_ms = 200

[broker]
"broker.session.timeout.ms" = 60000
"broker.heartbeat.interval.ms" = 500
"replica.lag.time.max.ms" = 60000
"replica.fetch.backoff.ms" = 100
"auto.leader.rebalance.enable" = false
"""
TOPIC = "orders"
PARTITIONS = 3
WAIT_S = 60.0
# Brokers rlogd says are not running are not asked; with --bootstrap alone a paused one is, and
# costs this long once.
BOOTSTRAP_TIMEOUT = "3"


def describe(cluster: Cluster, *args: str) -> Result:
    return ok(rlog("topic", "describe", TOPIC, *args, data_dir=cluster.data_dir))


def describe_json(cluster: Cluster) -> list[dict[str, Any]]:
    return json.loads(describe(cluster, "--json").out)["partitions"]


def describe_bootstrap_only(cluster: Cluster, tmp_path: Path, *args: str) -> Result:
    """Without rlogd: an empty data dir and --bootstrap, so the metadata alone."""
    env = clean_env(tmp_path / "no-rlogd-here")
    return ok(
        rlog(
            "--timeout",
            BOOTSTRAP_TIMEOUT,
            "topic",
            "describe",
            TOPIC,
            "--bootstrap",
            cluster.bootstrap,
            *args,
            env=env,
        )
    )


def wait_describe(
    cluster: Cluster, what: str, check: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + WAIT_S
    partitions: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        partitions = describe_json(cluster)
        if check(partitions):
            return partitions
        time.sleep(0.3)
    raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}; last: {partitions}")


def lines_by_partition(result: Result) -> dict[int, str]:
    """The partition lines of a describe's text output, by partition number."""
    found = {}
    for line in result.out.splitlines():
        if "\tPartition: " in line:
            found[int(line.split("\tPartition: ")[1].split("\t")[0])] = line
    return found


def field(line: str, name: str) -> str:
    """One ``Name: value`` field of a partition line (empty when the value is)."""
    return line.split(f"\t{name}: ", 1)[1].split("\t", 1)[0]


def healthy(partitions: list[dict[str, Any]]) -> bool:
    return len(partitions) == PARTITIONS and all(
        p["leader"] >= 1 and sorted(p["isr"]) == [1, 2, 3] and not p["offline"] for p in partitions
    )


def test_a_paused_leader_is_offline_while_it_still_leads(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    ok(rlog("topic", "create", TOPIC, "-p", str(PARTITIONS), "-r", "3", data_dir=cluster.data_dir))
    before = wait_describe(cluster, "leaders and full ISRs", healthy)
    paused = before[0]["leader"]
    led = sorted(p["partition"] for p in before if p["leader"] == paused)
    text = lines_by_partition(describe(cluster))
    assert all(field(line, "Offline") == "" for line in text.values()), text

    ok(rlog("chaos", "pause", f"broker-{paused}", data_dir=cluster.data_dir))
    try:
        started = time.monotonic()
        partitions = describe_json(cluster)
        # rlogd's view is asked first, so the paused broker costs no timeout.
        assert time.monotonic() - started < 8, "describe waited on the paused broker"
        for p in partitions:
            assert p["offline"] == {str(paused): "paused"}, p
            assert paused in p["isr"], p  # the controller has not noticed
        assert [p["partition"] for p in partitions if p["leader"] == paused] == led
        lines = lines_by_partition(describe(cluster))
        for line in lines.values():
            assert field(line, "Offline") == f"{paused}(paused)", line
            assert line.index("\tIsr: ") < line.index("\tOffline: ") < line.index("\tLeaderEpoch:")
        # Kafka's rule: a leader not among the live brokers makes a partition unavailable.
        unavailable = describe(cluster, "--unavailable-partitions").out.splitlines()
        assert unavailable == [lines[number] for number in led]
        document = json.loads(describe(cluster, "--unavailable-partitions", "--json").out)
        assert [p["partition"] for p in document["partitions"]] == led
        assert all(p["leader"] == paused for p in document["partitions"])
        # Without rlogd (only --bootstrap) the metadata alone: the controller still counts the
        # paused broker live, so nothing is offline yet.
        alone = lines_by_partition(describe_bootstrap_only(cluster, tmp_path))
        assert sorted(alone) == list(range(PARTITIONS))
        assert all(field(line, "Offline") == "" for line in alone.values()), alone
    finally:
        ok(rlog("chaos", "resume", f"broker-{paused}", data_dir=cluster.data_dir))

    after = wait_describe(cluster, "the paused broker back online", healthy)
    assert [p["partition"] for p in after if p["leader"] == paused] == led
    assert describe(cluster, "--unavailable-partitions").out == ""


def test_a_stopped_broker_is_down_per_rlogd_and_fenced_per_the_metadata(
    cluster_factory: ClusterFactory, tmp_path: Path
) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    ok(rlog("topic", "create", TOPIC, "-p", str(PARTITIONS), "-r", "3", data_dir=cluster.data_dir))
    before = wait_describe(cluster, "leaders and full ISRs", healthy)
    stopped = before[0]["leader"]
    # terminate: SIGTERM, a controlled shutdown (fenced at once, leaderships moved), and the
    # on-failure policy leaves a clean exit stopped.
    ok(rlog("chaos", "terminate", f"broker-{stopped}", data_dir=cluster.data_dir))
    partitions = wait_describe(
        cluster,
        f"broker {stopped} out of every ISR and leadership",
        lambda ps: all(p["leader"] not in (stopped, -1) and stopped not in p["isr"] for p in ps),
    )
    for p in partitions:
        assert p["offline"] == {str(stopped): "down"}, p
        assert p["log_end_offsets"][str(stopped)] is None
    assert partitions[0]["leader"] != stopped  # moved
    lines = lines_by_partition(describe(cluster))
    assert all(field(line, "Offline") == f"{stopped}(down)" for line in lines.values()), lines
    # Leaders moved: every partition is available.
    assert describe(cluster, "--unavailable-partitions").out == ""

    # Without rlogd: the controller's word, Metadata's offline replicas.
    alone = describe_bootstrap_only(cluster, tmp_path)
    for line in lines_by_partition(alone).values():
        assert field(line, "Offline") == f"{stopped}(fenced)", line
    document = json.loads(describe_bootstrap_only(cluster, tmp_path, "--json").out)
    assert all(p["offline"] == {str(stopped): "fenced"} for p in document["partitions"])

    ok(rlog("chaos", "restart", f"broker-{stopped}", data_dir=cluster.data_dir))
    wait_describe(cluster, "the broker back in every ISR", healthy)
