"""rlog verify against a real 3-broker cluster: what acks=all with min.insync.replicas=2,
idempotence and transactions promise holds under leader kills and pauses, and the loss an acks=1
producer suffers when its leader is cut off is found and reported as allowed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlog.cli.terminal import ExitCode
from rlog.cli.verify.history import F, OpType, read_jsonl
from support.replication import CONFIG

pytestmark = pytest.mark.integration

RLOG = [sys.executable, "-m", "rlog.cli.app"]
RUN_TIMEOUT_S = 180  # the workload's seconds, healing, draining: well under this


def verify(cluster, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    history = tmp_path / "history.jsonl"
    command = [*RLOG, "--data-dir", str(cluster.data_dir), "verify", "--json"]
    done = subprocess.run(
        [*command, "--history", str(history), *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    print(done.stderr)
    verdict = json.loads(done.stdout) if done.stdout.strip() else {}
    return done, verdict


def found(verdict: dict) -> dict[str, int]:
    return {name: a["count"] for name, a in verdict["anomalies"].items() if a["count"]}


@pytest.mark.parametrize(
    ("scenario", "flags"),
    [
        ("kill-leader", ["--idempotent"]),
        ("pause-leader", ["--idempotent"]),
        ("kill-leader", ["--transactional"]),
    ],
)
def test_promised_guarantees_hold_under_faults(
    cluster_factory, tmp_path: Path, scenario: str, flags: list[str]
) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    done, verdict = verify(
        cluster, tmp_path, "--seconds", "8", "--seed", "3", "--scenario", scenario, *flags
    )
    assert done.returncode == ExitCode.OK, done.stderr
    assert verdict["valid"] and found(verdict) == {}, verdict
    assert verdict["faults"] >= 2, "the nemesis did break something"
    summary = verdict["summary"]
    assert summary["sends"]["ok"] > 100 and summary["commits"]["ok"] > 0
    # every value acknowledged (and committed) was read; a group member read some of them
    history = read_jsonl(tmp_path / "history.jsonl")
    members = {op.process for op in history if op.f is F.POLL and op.process.startswith("con")}
    assert members == {"consumer-0", "consumer-1"}
    if "--transactional" in flags:
        assert verdict["promised"].endswith("read_committed")
        assert summary["transactions"]["committed"] > 0
        assert summary["transactions"]["aborted"] > 0  # one in ten, hidden from the readers
        assert summary["values_read"] < summary["sends"]["ok"]
    else:
        # Every acknowledged value was read; a send whose answer a kill cut off (info) may have
        # landed too, and then it is read as well.
        sends = summary["sends"]
        assert sends["ok"] <= summary["values_read"] <= sends["ok"] + sends["info"], summary


def test_an_acks_1_producer_cut_off_with_its_leader_loses_writes_reported_as_allowed(
    cluster_factory, tmp_path: Path
) -> None:
    """The isolated leader keeps taking acks=1 writes until its session ends; the new leader
    never had them, and the old one truncates them when it rejoins."""
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    args = ["--seconds", "6", "--seed", "5", "--scenario", "isolate-leader", "--acks", "1"]
    done, verdict = verify(cluster, tmp_path, *args)
    assert done.returncode == ExitCode.OK, done.stderr  # acks=1 promises no durability
    lost = verdict["anomalies"]["lost-write"]
    assert lost["count"] > 0 and lost["violations"] == 0, verdict
    assert "acknowledged by op" in lost["examples"][0]
    assert verdict["promised"] == "clean elections"
    # the same history judged as if acks=all had been asked for is a violation
    from rlog.cli.verify.checker import check
    from rlog.cli.verify.promises import Promises

    history = read_jsonl(tmp_path / "history.jsonl")
    strict = check(history, Promises.from_settings(acks="all", min_insync_replicas=2))
    assert not strict.valid and "lost-write" in strict.violated
    assert any(op.type is OpType.OK and op.f is F.SEND for op in history)


def test_the_table_names_every_anomaly_and_the_verdict(cluster_factory, tmp_path: Path) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    history = tmp_path / "h.jsonl"
    command = [*RLOG, "--data-dir", str(cluster.data_dir), "verify", "--seconds", "2"]
    done = subprocess.run(
        [*command, "--history", str(history), "--partitions", "2", "--producers", "1"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["ANOMALY", "COUNT", "ALLOWED?", "EXAMPLE"]
    names = [line.split()[0] for line in lines[1:11]]
    assert names == [
        "lost-write",
        "duplicate",
        "inconsistent-offsets",
        "nonmonotonic-send",
        "nonmonotonic-poll",
        "poll-skip",
        "aborted-read",
        "commit-regression",
        "unwritten-read",
        "unseen",
    ]
    assert lines[-1].startswith("VALID")
    assert "seed " in done.stderr and str(history) in done.stderr
    assert read_jsonl(history), "the history was written"


def test_bad_settings_are_refused_before_anything_runs(cluster_factory, tmp_path: Path) -> None:
    cluster = cluster_factory(brokers=1)
    base = [*RLOG, "--data-dir", str(cluster.data_dir), "verify", "--seconds", "1"]
    cases = [
        (["--scenario", "flood"], ExitCode.USAGE, "--scenario must be one of none, kill-leader"),
        (["--transactional", "--acks", "1"], ExitCode.USAGE, "--transactional needs --acks all"),
        (["--idempotent", "--acks", "0"], ExitCode.USAGE, "--idempotent needs --acks all"),
    ]
    for args, code, message in cases:
        done = subprocess.run([*base, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == code and message in done.stderr, (args, done.stderr)
    # a nemesis needs rlogd: against a bare bootstrap and a data dir with no cluster it says so
    empty = tmp_path / "elsewhere"
    command = [*RLOG, "--data-dir", str(empty), "--bootstrap", cluster.bootstrap, "verify"]
    done = subprocess.run(
        [*command, "--seconds", "1", "--scenario", "kill-leader"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == ExitCode.NOT_RUNNING, done.stderr
    assert "against another Kafka use --scenario none" in done.stderr
