"""SIGTERM ends ``rlog consume`` and ``rlog produce`` the way Ctrl-C does (a consumer leaves its
group and commits what it printed, an open transaction is aborted), with exit status 143
(128 + SIGTERM, as kafka-console-consumer and shells report it; Ctrl-C gives 130).

Without that, SIGTERM killed the process on the spot: the group kept a dead member until its
session expired (45 s, and ``rlog group reset-offsets`` was refused meanwhile), and an open
transaction held the partition's LSO until transaction.timeout.ms.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from support.cli_runner import COMMAND_TIMEOUT_S, RLOG, Result, clean_env, ok, rlog
from support.cluster import Cluster

pytestmark = pytest.mark.integration

FAST_GROUPS = '[broker]\n"group.initial.rebalance.delay.ms" = 0\n'
EXIT_S = 10.0  # from SIGTERM to the exit: a LeaveGroup and a commit, or an EndTxn
WAIT_S = 20.0


def run(cluster: Cluster, *args: str, stdin: str | None = None) -> Result:
    return rlog("--bootstrap", cluster.bootstrap, *args, stdin=stdin)


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}")
        time.sleep(0.2)


def start(cluster: Cluster, *args: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RLOG, "--bootstrap", cluster.bootstrap, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=stdin,
        text=True,
        env=clean_env(),
    )


def terminate(process: subprocess.Popen[str]) -> tuple[float, str]:
    """SIGTERM to the process we started; (seconds until it exited, its stderr)."""
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=COMMAND_TIMEOUT_S)
    return time.monotonic() - sent, err


@pytest.fixture
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory(config_text=FAST_GROUPS)


def test_sigterm_leaves_the_group_at_once(cluster: Cluster) -> None:
    topic, group = new_name("t"), new_name("g")
    ok(run(cluster, "topic", "create", topic, "-p", "1", "-r", "1"))
    ok(run(cluster, "produce", topic, stdin="".join(f"{i}\n" for i in range(5))))
    process = start(cluster, "consume", topic, "-g", group, "-o", "start")
    watchdog = threading.Timer(COMMAND_TIMEOUT_S, process.kill)  # only the process started here
    watchdog.start()
    try:
        assert process.stdout is not None
        assert [process.stdout.readline().strip() for _ in range(5)] == ["0", "1", "2", "3", "4"]
        took_s, err = terminate(process)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, err
    assert "Traceback" not in err
    assert took_s < EXIT_S, f"took {took_s:.1f} s to exit"
    # At once, not after the session timeout: the member left on its way out...
    state = ok(run(cluster, "group", "describe", group, "--state")).out.splitlines()[1].split()
    assert state[-2:] == ["Empty", "0"], state
    document = json.loads(ok(run(cluster, "group", "describe", group, "--json")).out)
    assert document["member_count"] == 0
    assert [p["current_offset"] for p in document["partitions"]] == [5]  # committed on close
    # ...so the offsets can be reset right away (refused while the group has members).
    ok(run(cluster, "group", "reset-offsets", group, "-t", topic, "--to-earliest", "--execute"))
    document = json.loads(ok(run(cluster, "group", "describe", group, "--json")).out)
    assert [p["current_offset"] for p in document["partitions"]] == [0]
    print(f"consume --group exited {took_s:.2f} s after SIGTERM")


def test_sigterm_aborts_the_open_transaction_of_produce(cluster: Cluster) -> None:
    topic, tid = new_name("t"), new_name("tx")
    ok(run(cluster, "topic", "create", topic, "-p", "1", "-r", "1"))
    process = start(cluster, "produce", topic, "--transactional-id", tid, stdin=subprocess.PIPE)
    watchdog = threading.Timer(COMMAND_TIMEOUT_S, process.kill)
    watchdog.start()

    def state() -> str | None:
        found = json.loads(ok(run(cluster, "txn", "list", "--json")).out)
        return next((d["state"] for d in found if d["transactional_id"] == tid), None)

    try:
        assert process.stdin is not None
        process.stdin.write("a\nb\n")  # stdin stays open: the transaction stays open
        process.stdin.flush()
        wait_until("the transaction to be open", lambda: state() == "Ongoing")
        took_s, err = terminate(process)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 143, err
    assert "Traceback" not in err
    assert took_s < EXIT_S, f"took {took_s:.1f} s to exit"
    wait_until("the transaction to be aborted", lambda: state() == "CompleteAbort")
    committed = ok(run(cluster, "consume", topic, "-o", "start", "-e", "--isolation",
                       "read_committed")).out  # fmt: skip
    assert committed == ""
