"""``rlog chaos`` against a real rlogd: each verb does to the process what it says, rlogd's
restart policy then applies, and every refusal is one line with an exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlog.daemon import control
from rlog.daemon.events import read_events
from support.cluster import Cluster

pytestmark = pytest.mark.integration

RLOG = [sys.executable, "-m", "rlog.cli.app"]
COMMAND_TIMEOUT_S = 120
FAST_RESTARTS = "[cluster]\nrestart_backoff_ms = 100\n"


@dataclass
class Result:
    code: int
    out: str
    err: str


def cli_env(data_dir: Path) -> dict[str, str]:
    """The environment an `rlog` command runs in: this cluster's data dir, no other RLOG_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLOG_")}
    env.update(RLOG_DATA_DIR=str(data_dir), NO_COLOR="1")
    return env


def rlog(data_dir: Path, *args: str) -> Result:
    done = subprocess.run(
        [*RLOG, *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        env=cli_env(data_dir),
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return Result(done.returncode, done.stdout, done.stderr)


def ok_line(result: Result) -> str:
    """The command succeeded and printed exactly one line; that line."""
    assert result.code == 0, f"exit {result.code}: {result.err}"
    lines = result.out.strip().splitlines()
    assert len(lines) == 1, result.out
    return lines[0]


def error_line(result: Result, code: int) -> str:
    lines = result.err.strip().splitlines()
    assert result.code == code, f"exit {result.code}, want {code}: {result.err!r}"
    assert len(lines) == 1 and lines[0].startswith("rlog: error: "), result.err
    return lines[0]


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (T = stopped by a signal)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def broker(cluster: Cluster, broker_id: int = 1) -> dict:
    return cluster.status()["brokers"][broker_id - 1]


def test_kill_is_a_crash_the_restart_policy_repairs(cluster_factory) -> None:
    cluster = cluster_factory(config_text=FAST_RESTARTS)
    victim = cluster.broker_pid(1)
    line = ok_line(rlog(cluster.data_dir, "chaos", "kill", "broker-1"))
    assert line.startswith(f"killed broker-1 (pid {victim}) with SIGKILL")
    assert "on-failure" in line
    cluster.wait_until_running(not_pid=victim)
    status = broker(cluster)
    assert status["restarts"] == 1 and status["last_exit"] == -9


def test_kills_asked_for_do_not_grow_the_crash_backoff(cluster_factory) -> None:
    """A nemesis that kills the controller as soon as it is back: rlogd restarts it within
    restart_backoff_ms every time, as after one crash. Were each requested kill a crash in a
    row, the sixth restart would wait 200 ms * 2^4 = 3.2 s and the eighth 12.8 s."""
    config = "[cluster]\nrestart_backoff_ms = 200\nrestart_backoff_max_ms = 60000\n"
    cluster = cluster_factory(config_text=config)
    kills = 8
    for _ in range(kills):
        victim = cluster.controller_pid()
        cluster.chaos("kill", "controller")
        cluster.wait_until_running(not_pid=victim)
    controller = [e for e in read_events(cluster.data_dir) if e.get("process") == "controller"]
    exits = [e["ts"] for e in controller if e["kind"] == "process_exited"]
    restarts = [e["ts"] for e in controller if e["kind"] == "process_restarted"]
    assert len(exits) == len(restarts) == kills, controller
    waits = [round(start - end, 3) for end, start in zip(exits, restarts, strict=True)]
    assert max(waits) < 1.5, f"seconds from each exit to its restart: {waits}"
    assert cluster.status()["controller"]["restarts"] == kills


def test_an_admin_request_waits_out_a_controller_restart(cluster_factory) -> None:
    """`rlog topic create` while the controller is down: the broker holds the request and
    sends it again once the controller is back (as Kafka's brokers do), so the command waits
    and succeeds instead of failing at once with REQUEST_TIMED_OUT."""
    cluster = cluster_factory(config_text=FAST_RESTARTS)
    down = cluster.chaos_request({"op": "kill", "target": "controller", "stay_down": True})
    assert down["ok"], down
    create = subprocess.Popen(
        [*RLOG, "--timeout", "60", "topic", "create", "made-while-down"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(cluster.data_dir),
        stdin=subprocess.DEVNULL,
    )
    try:
        time.sleep(3)
        assert create.poll() is None, create.communicate()
        cluster.chaos("restart", "controller")
        out, err = create.communicate(timeout=COMMAND_TIMEOUT_S)
    finally:
        if create.poll() is None:
            create.kill()
            create.wait()
    assert create.returncode == 0, err
    assert out.strip() == "Created topic made-while-down."


def test_terminate_leaves_a_broker_stopped_until_restart(cluster_factory) -> None:
    cluster = cluster_factory(config_text=FAST_RESTARTS)
    victim = cluster.broker_pid(1)
    line = ok_line(rlog(cluster.data_dir, "chaos", "terminate", "broker-1"))
    assert f"terminated broker-1 (pid {victim}) with SIGTERM" in line and "code 0" in line
    status = broker(cluster)
    assert status["state"] == "stopped" and status["pid"] is None and status["last_exit"] == 0
    time.sleep(1)  # well past the backoff: on-failure does not restart a clean exit
    assert broker(cluster)["state"] == "stopped"
    # Its only broker is down by request, not given up on: rlogd stays up for the restart.
    assert cluster.process.poll() is None
    error_line(rlog(cluster.data_dir, "chaos", "pause", "broker-1"), 1)
    assert ok_line(rlog(cluster.data_dir, "chaos", "restart", "broker-1")).startswith(
        "started broker-1 (pid "
    )
    cluster.wait_until_running()
    assert broker(cluster)["restarts"] == 1


def test_pause_and_resume_stop_and_continue_the_process(cluster_factory) -> None:
    cluster = cluster_factory()
    pid = cluster.broker_pid(1)
    assert "SIGSTOP" in ok_line(rlog(cluster.data_dir, "chaos", "pause", "broker-1"))
    assert broker(cluster)["state"] == "paused"
    wait_for("the broker to be stopped", lambda: process_state(pid) == "T")
    assert "already paused" in error_line(rlog(cluster.data_dir, "chaos", "pause", "broker-1"), 1)
    assert "SIGCONT" in ok_line(rlog(cluster.data_dir, "chaos", "resume", "broker-1"))
    wait_for("the broker to run again", lambda: process_state(pid) != "T")
    assert broker(cluster)["state"] == "running" and cluster.broker_pid(1) == pid
    assert "not paused" in error_line(rlog(cluster.data_dir, "chaos", "resume", "broker-1"), 1)


def test_restart_a_paused_broker_and_the_controller(cluster_factory) -> None:
    cluster = cluster_factory()
    old_broker = cluster.broker_pid(1)
    cluster.chaos("pause", "broker-1")
    line = ok_line(rlog(cluster.data_dir, "chaos", "restart", "broker-1"))
    assert line.startswith(f"restarted broker-1 (pid {old_broker} -> ")
    cluster.wait_until_running(not_pid=old_broker)
    old_controller = cluster.controller_pid()
    reply = cluster.chaos("restart", "controller")
    assert reply["target"] == "controller" and reply["pid"] not in (None, old_controller)
    cluster.wait_until_running(not_pid=old_controller)
    assert cluster.status()["controller"]["restarts"] == 1
    assert cluster.status()["controller"]["last_exit"] == 0  # stopped cleanly by SIGTERM
    cluster.wait_until_registered()


def test_never_policy_kill_keeps_rlogd_up_for_a_restart(cluster_factory) -> None:
    cluster = cluster_factory(config_text='[cluster]\nrestart_policy = "never"\n')
    victim = cluster.broker_pid(1)
    assert "leaving it down" in ok_line(rlog(cluster.data_dir, "chaos", "kill", "broker-1"))
    wait_for("the broker to be marked failed", lambda: broker(cluster)["state"] == "failed")
    assert cluster.process.poll() is None
    cluster.chaos("restart", "broker-1")
    cluster.wait_until_running(not_pid=victim)


def test_kill_stay_down_keeps_a_process_down_whatever_the_policy(cluster_factory) -> None:
    # "always" restarts any exit after a 100 ms backoff: only --stay-down keeps these down.
    always = '[cluster]\nrestart_policy = "always"\nrestart_backoff_ms = 100\n'
    cluster = cluster_factory(brokers=2, config_text=always)
    data_dir = cluster.data_dir
    ok_line(rlog(data_dir, "topic", "create", "orders", "-p", "1", "-r", "2"))
    victim = cluster.broker_pid(2)
    line = ok_line(rlog(data_dir, "chaos", "kill", "broker-2", "--stay-down"))
    assert line == (
        f"killed broker-2 (pid {victim}) with SIGKILL; "
        "staying down until rlog chaos restart broker-2"
    )
    time.sleep(1)  # ten backoffs: the policy would have restarted it by now
    down = broker(cluster, 2)
    assert down["state"] == "failed" and down["pid"] is None and down["last_exit"] == -9
    assert down["restarts"] == 0 and cluster.process.poll() is None
    # cluster status: broker-2 failed and not answering (exit 8, DEGRADED).
    status = rlog(data_dir, "cluster", "status", "--json")
    assert status.code == 8, status.err
    listed = {b["name"]: b for b in json.loads(status.out)["brokers"]}
    assert listed["broker-2"]["state"] == "failed" and listed["broker-2"]["pid"] is None
    assert listed["broker-1"]["state"] == "running"
    # topic describe: its replica is down as rlogd says.
    described = rlog(data_dir, "topic", "describe", "orders", "--json")
    assert described.code == 0, described.err
    (partition,) = json.loads(described.out)["partitions"]
    assert partition["offline"] == {"2": "down"}, partition
    # A plain kill of a process that is down is refused; restart starts it.
    assert "not running" in error_line(rlog(data_dir, "chaos", "kill", "broker-2"), 1)
    assert ok_line(rlog(data_dir, "chaos", "restart", "broker-2")).startswith(
        "started broker-2 (pid "
    )
    cluster.wait_until_running()
    assert broker(cluster, 2)["restarts"] == 1
    # Once started again, a plain kill goes back to the policy.
    restarted = cluster.broker_pid(2)
    assert "restart policy always: restarting it" in ok_line(
        rlog(data_dir, "chaos", "kill", "broker-2")
    )
    cluster.wait_until_running(not_pid=restarted)

    # The controller too.
    controller = cluster.controller_pid()
    reply = rlog(data_dir, "chaos", "kill", "controller", "--stay-down", "--json")
    assert reply.code == 0, reply.err
    document = json.loads(reply.out)
    assert document["state"] == "failed" and document["pid"] is None
    time.sleep(1)
    assert cluster.status()["controller"]["state"] == "failed"
    cluster.chaos("restart", "controller")
    cluster.wait_until_running(not_pid=controller)
    assert cluster.status()["controller"]["restarts"] == 1


def test_stay_down_is_refused_on_other_ops(cluster) -> None:
    pause = {"op": "pause", "target": "broker-1", "stay_down": True}
    reply = control.request(cluster.data_dir, pause, 10)
    assert reply["ok"] is False and reply["reason"] == "bad-request", reply
    assert "kill only" in reply["error"]
    not_bool = {"op": "kill", "target": "broker-1", "stay_down": "yes"}
    reply = control.request(cluster.data_dir, not_bool, 10)
    assert reply["ok"] is False and reply["reason"] == "bad-request", reply
    assert broker(cluster)["state"] == "running"


def test_json_reply_and_one_line_errors(cluster) -> None:
    data_dir = cluster.data_dir
    unknown = error_line(rlog(data_dir, "chaos", "kill", "broker-7"), 5)
    assert "unknown target 'broker-7'" in unknown and "broker-1" in unknown
    error_line(rlog(data_dir, "chaos", "explode", "broker-1"), 2)
    reply = rlog(data_dir, "chaos", "pause", "controller", "--json")
    assert reply.code == 0, reply.err
    document = json.loads(reply.out)
    assert document["ok"] is True and document["state"] == "paused"
    assert document["name"] == "controller" and document["pid"] == cluster.controller_pid()
    cluster.chaos("resume", "controller")
    assert cluster.process.poll() is None


def test_chaos_without_a_running_cluster(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-started"
    line = error_line(rlog(data_dir, "chaos", "kill", "broker-1"), 3)
    assert "not running" in line and str(data_dir) in line
