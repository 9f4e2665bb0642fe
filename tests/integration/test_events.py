"""The event journal and psutil stats of a real cluster: a killed partition leader shows up in
`rlog events` as its exit, its restart, its fencing, the new leader, the ISR shrinking and
expanding again, in that order; rlogd's status carries each process's CPU, memory, open files
and uptime."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from rlog.daemon import control
from rlog.daemon.events import read_events
from support.cluster import Cluster
from support.replication import CONFIG, create_replicated_topic, partition_state, wait_for

pytestmark = pytest.mark.integration

RLOG = [sys.executable, "-m", "rlog.cli.app"]
PROCESS_STATES = {"running", "sleeping", "disk-sleep", "idle"}


def rlog_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLOG_")}
    env.update(RLOG_DATA_DIR=str(data_dir), NO_COLOR="1")
    return env


def processes(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [status["controller"], *status["brokers"]]


def first_index(events: list[dict[str, Any]], kind: str, **fields: Any) -> int:
    """The position of the first event of `kind` with these fields; AssertionError if none."""
    for index, event in enumerate(events):
        if event["kind"] == kind and all(event.get(k) == v for k, v in fields.items()):
            return index
    raise AssertionError(f"no {kind} {fields} in the journal:\n" + "\n".join(map(str, events)))


def check_stats(cluster: Cluster) -> None:
    """Every process has psutil stats, from the file and from the control API; uptime grows."""
    # rlogd samples each second: the first sample of a broker may predate its listening socket.
    wait_for(
        "a psutil sample of every process up and listening",
        lambda: all(p["rss_bytes"] and p["open_files"] > 3 for p in processes(cluster.status())),
        timeout_s=5,
    )
    before = {p["name"]: p["uptime_s"] for p in processes(cluster.status())}
    for process in processes(cluster.status()):
        assert process["rss_bytes"] > 1_000_000, process
        assert process["open_files"] > 3, process  # stdin/out/err and a listening socket
        assert 0 <= process["cpu_percent"] < 100 * (os.cpu_count() or 1), process
        assert process["psutil_status"] in PROCESS_STATES, process
        assert process["uptime_s"] > 0 and process["started_at_ms"] > 0, process
    time.sleep(1.2)
    reply = control.request(cluster.data_dir, {"op": "status"})
    for process in processes(reply):
        assert process["uptime_s"] >= before[process["name"]] + 1.0, (process, before)
        assert process["rss_bytes"] > 1_000_000, process


def _status(pid: int) -> str:
    """The process's state and its signal masks (SigPnd, SigBlk, SigIgn: was Ctrl-C held back,
    blocked or ignored?)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            masks = [line.strip() for line in status if line.startswith(("Sig", "ShdPnd"))]
        return f"{psutil.Process(pid).status()}, {', '.join(masks)}"
    except (OSError, psutil.Error) as error:
        return repr(error)


def check_follow_and_pause(cluster: Cluster, broker: str) -> None:
    """`rlog events --follow --json` prints history, then a pause and resume as they happen
    (the paused process's psutil status is "stopped"), and Ctrl-C ends it with exit 0."""
    # Its stderr goes to a file: a pipe nobody reads until the end could fill and stall it.
    with tempfile.TemporaryFile("w+") as errors:
        follower = subprocess.Popen(
            [*RLOG, "events", "--follow", "--json", "--kind", "process_paused"],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            # So that a follower still running after Ctrl-C can be made to say where it is: an
            # abort then prints every thread's stack to stderr.
            env=rlog_env(cluster.data_dir) | {"PYTHONFAULTHANDLER": "1"},
        )
        try:
            cluster.chaos("pause", broker)
            try:
                wait_for(
                    f"{broker} to be sampled stopped",
                    lambda: (
                        cluster.status()["brokers"][int(broker.split("-")[1]) - 1]["psutil_status"]
                        == "stopped"
                    ),
                    timeout_s=2.5,
                    every_s=0.1,
                )
            finally:
                cluster.chaos("resume", broker)
            assert follower.stdout is not None
            line = follower.stdout.readline()  # blocks until the pause is journaled and followed
            event = json.loads(line)
            assert (event["kind"], event["process"], event["source"]) == (
                "process_paused",
                broker,
                "rlogd",
            )
            follower.send_signal(signal.SIGINT)
            state = "exited"
            try:
                code: int | None = follower.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code, state = None, _status(follower.pid)
                follower.send_signal(signal.SIGABRT)  # faulthandler: the stacks, then the end
                follower.send_signal(signal.SIGCONT)  # if it was stopped, so that it aborts
                with contextlib.suppress(subprocess.TimeoutExpired):
                    follower.wait(timeout=10)
            errors.seek(0)
            assert code == 0, (
                f"exit {code} 10 s after Ctrl-C (process state {state}); stderr: {errors.read()}"
            )
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()


def test_a_killed_leader_is_journaled_from_exit_to_rejoining_the_isr(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    check_stats(cluster)
    topic = f"journal-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    before = partition_state(cluster, topic)
    leader = before["leader"]
    name = f"broker-{leader}"
    killed_at = time.time()
    cluster.chaos("kill", name)

    def rejoined() -> list[dict[str, Any]] | None:
        events = read_events(cluster.data_dir, since_ts=killed_at)
        expanded = [e for e in events if e["kind"] == "isr_expanded" and e["topic"] == topic]
        return events if expanded else None

    events = wait_for(f"{name} to rejoin the ISR of {topic}", rejoined, timeout_s=30)
    assert isinstance(events, list)
    part = {"topic": topic, "partition": 0}
    exited = first_index(events, "process_exited", process=name)
    restarted = first_index(events, "process_restarted", process=name)
    fenced = first_index(events, "broker_fenced", broker=leader)
    elected = first_index(events, "leader_elected", previous_leader=leader, **part)
    shrunk = first_index(events, "isr_shrunk", **part)
    expanded = first_index(events, "isr_expanded", **part)
    # rlogd tells the controller of the exit before it restarts the broker, so the fence
    # usually comes first; the two journals' clocks only promise each follows the exit.
    assert exited < fenced < elected < shrunk < expanded, events
    assert exited < restarted < expanded, events
    assert events[exited]["signal"] == "SIGKILL" and events[exited]["by_request"] is True
    assert events[restarted]["previous_pid"] == events[exited]["pid"]
    new_leader = events[elected]
    assert new_leader["leader"] not in (leader, -1)
    assert new_leader["leader_epoch"] > before["leader_epoch"]
    assert events[shrunk]["removed"] == [leader] and leader not in events[shrunk]["isr"]
    assert events[expanded]["added"] == [leader] and leader in events[expanded]["isr"]
    assert [e["source"] for e in (events[exited], events[fenced])] == ["rlogd", "controller"]

    # rlog events --json prints the same events, one JSON object per line.
    done = subprocess.run(
        [*RLOG, "events", "--json", "--since", "5m"],
        capture_output=True,
        text=True,
        timeout=60,
        env=rlog_env(cluster.data_dir),
    )
    assert done.returncode == 0, done.stderr
    printed = [json.loads(line) for line in done.stdout.splitlines()]
    wanted = [events[i] for i in sorted((exited, restarted, fenced, elected, shrunk, expanded))]
    assert [e for e in printed if e in wanted] == wanted
    # ... and as a table.
    table = subprocess.run(
        [*RLOG, "events", "--kind", "leader_elected"],
        capture_output=True,
        text=True,
        timeout=60,
        env=rlog_env(cluster.data_dir),
    )
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["TIME", "SOURCE", "KIND", "MESSAGE"]
    assert any(f"partition {topic}-0: leader" in line for line in table.stdout.splitlines())

    check_follow_and_pause(cluster, name)
