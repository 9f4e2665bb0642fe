"""rlogd supervises the controller and its brokers: restarts by policy, clean stop (brokers
first, the controller last), one cluster id per data dir, a private control socket, and clear
errors on bad start-up."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rlog.daemon import control
from support import clients
from support.clients import Message
from support.cluster import free_base_port, start_cluster

pytestmark = pytest.mark.integration


def run_rlogd(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlog.daemon.rlogd", *args],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def test_brokers_listen_on_consecutive_ports_and_have_their_own_dirs(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3)
    status = cluster.status()
    brokers = status["brokers"]
    assert [b["name"] for b in brokers] == ["broker-1", "broker-2", "broker-3"]
    assert [b["port"] for b in brokers] == [cluster.base_port + i for i in range(3)]
    controller = status["controller"]
    assert controller["name"] == "controller" and controller["role"] == "controller"
    assert controller["port"] == cluster.base_port + 3  # the port after the last broker's
    assert controller["state"] == "running" and controller["pid"] == cluster.controller_pid()
    assert set(controller) == set(brokers[0])
    for process in [controller, *brokers]:
        with socket.create_connection(("127.0.0.1", process["port"]), timeout=5):
            pass
        assert Path(process["data_dir"]).is_dir()
        assert Path(process["log"]).is_file()
    assert Path(controller["data_dir"]) == cluster.data_dir / "controller"


def test_the_cluster_id_is_made_once_per_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_cluster(data_dir)
    try:
        cluster_id = first.status()["cluster_id"]
        broker_dir = Path(first.status()["brokers"][0]["data_dir"])
    finally:
        assert first.stop() == 0
    assert len(cluster_id) == 22  # Kafka's form: a base64url UUID without padding
    assert f"cluster.id={cluster_id}" in (data_dir / "meta.properties").read_text().splitlines()
    assert f"cluster.id={cluster_id}" in (broker_dir / "meta.properties").read_text()
    again = start_cluster(data_dir)
    try:
        assert again.status()["cluster_id"] == cluster_id
    finally:
        again.stop()
    other = start_cluster(tmp_path / "other")
    try:
        assert other.status()["cluster_id"] != cluster_id
    finally:
        other.stop()


def test_control_socket_is_private_answers_status_and_survives_garbage(cluster) -> None:
    path = cluster.data_dir / "rlogd.sock"
    assert stat.S_ISSOCK(path.stat().st_mode)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(10)
        raw.connect(str(path))
        reader = raw.makefile("rb")
        for line, error in [
            (b"not json\n", "not JSON"),
            (b"[1, 2]\n", "JSON object"),
            (b'{"op": "explode"}\n', "unknown op"),
            (b'{"op": "kill"}\n', "target"),
            (b'{"op": "kill", "target": "broker-9"}\n', "unknown target 'broker-9'"),
            (b'{"op": "resume", "target": "broker-1"}\n', "not paused"),
        ]:
            raw.sendall(line)
            reply = json.loads(reader.readline())
            assert reply["ok"] is False and error in reply["error"], reply
            assert "\n" not in reply["error"]
        raw.sendall(b'{"op": "status"}\n')
        status = json.loads(reader.readline())
    assert status["ok"] is True
    assert status["pid"] == cluster.process.pid
    assert status["cluster_id"] == cluster.status()["cluster_id"]
    assert [b["state"] for b in status["brokers"]] == ["running"]
    assert status["controller"]["state"] == "running"
    assert cluster.process.poll() is None
    assert control.request(cluster.data_dir, {"op": "status"})["ok"] is True


def test_a_killed_broker_is_restarted_and_keeps_its_data(cluster_factory) -> None:
    cluster = cluster_factory(config_text="[cluster]\nrestart_backoff_ms = 100\n")
    clients.create_topic(cluster.bootstrap, "kept")
    clients.confluent_produce(cluster.bootstrap, "kept", [Message(b"k", b"before", (), 0, -1)])
    victim = cluster.broker_pid(1)
    os.kill(victim, signal.SIGKILL)
    cluster.wait_until_running(not_pid=victim)
    assert cluster.status()["brokers"][0]["restarts"] == 1
    read = clients.confluent_consume(cluster.bootstrap, "kept", [0], 1)
    assert [m.value for m in read] == [b"before"]


def test_never_policy_leaves_a_dead_broker_down(cluster_factory) -> None:
    cluster = cluster_factory(config_text='[cluster]\nrestart_policy = "never"\n')
    victim = cluster.broker_pid(1)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while cluster.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # With every broker gone for good, rlogd has nothing left to supervise and says so.
    assert cluster.process.returncode not in (None, 0)


def test_sigterm_stops_brokers_cleanly_with_checkpoints_written(cluster_factory) -> None:
    cluster = cluster_factory()
    clients.create_topic(cluster.bootstrap, "clean")
    sent = [Message(None, f"{i}".encode(), (), 0, -1) for i in range(50)]
    clients.confluent_produce(cluster.bootstrap, "clean", sent)
    broker_pid = cluster.broker_pid(1)
    controller_pid = cluster.controller_pid()
    assert cluster.stop() == 0
    for pid in (broker_pid, controller_pid):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert not (cluster.data_dir / "rlogd.json").exists()
    assert not (cluster.data_dir / "rlogd.sock").exists()
    rlogd_log = (cluster.data_dir / "rlogd.out").read_text()
    assert rlogd_log.index("stopping broker-1") < rlogd_log.index("stopping controller")
    checkpoint = (cluster.data_dir / "broker-1" / "recovery-point-offset-checkpoint").read_text()
    assert "clean 0 50" in checkpoint.splitlines()
    log_text = (cluster.data_dir / "logs" / "broker-1.log").read_text()
    assert "stopped cleanly" in log_text


def test_port_in_use_is_one_clear_line_and_no_restart_loop(tmp_path: Path) -> None:
    base_port = free_base_port(1)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base_port))
        squatter.listen()
        result = run_rlogd("--data-dir", str(tmp_path), "--base-port", str(base_port))
    assert result.returncode != 0
    broker_log = (tmp_path / "logs" / "broker-1.log").read_text()
    assert f"cannot listen on 127.0.0.1:{base_port}" in broker_log
    assert "Traceback" not in broker_log + result.stderr
    assert "not restarting" in result.stderr


def test_a_controller_that_cannot_start_stops_rlogd_and_its_brokers(tmp_path: Path) -> None:
    """The brokers start beside the controller; when it cannot start, rlogd stops them and
    exits, naming why, without announcing a running cluster."""
    base_port = free_base_port(1)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", base_port + 1))  # the controller's port
        squatter.listen()
        result = run_rlogd("--data-dir", str(tmp_path), "--base-port", str(base_port))
    assert result.returncode == 1
    controller_log = (tmp_path / "logs" / "controller.log").read_text()
    assert f"cannot listen on 127.0.0.1:{base_port + 1}" in controller_log
    assert "Traceback" not in controller_log + result.stderr
    assert "controller could not start" in result.stderr
    assert "stopping the brokers" in result.stderr
    assert not (tmp_path / "rlogd.json").exists()
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(
        p.info["cmdline"] or [])]  # fmt: skip
    assert left == [], "a process of the failed start is still running"


@pytest.mark.parametrize(
    ("config_text", "expected"),
    [
        ("[cluster]\nbrokers = 0\n", "brokers"),
        ('[broker]\n"log.segment.bytes" = "big"\n', "log.segment.bytes"),
        ('[broker]\n"no.such.key" = 1\n', "no.such.key"),
        ("[cluster\n", "not valid TOML"),
    ],
)
def test_invalid_config_is_refused_with_the_key_named(
    tmp_path: Path, config_text, expected
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(config_text)
    result = run_rlogd("--data-dir", str(tmp_path / "data"), "--config", str(config))
    assert result.returncode != 0
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_second_rlogd_on_the_same_data_dir_is_refused(cluster) -> None:
    result = run_rlogd("--data-dir", str(cluster.data_dir), "--base-port", str(free_base_port(1)))
    assert result.returncode != 0
    assert "already running" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a dir to another user needs root")
def test_a_data_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "theirs"
    data_dir.mkdir()
    os.chown(data_dir, 65534, 65534)  # nobody's
    done = run_rlogd("--data-dir", str(data_dir), "--base-port", str(free_base_port(1)))
    assert done.returncode == 78, done  # EX_CONFIG, as every start-up refusal of rlogd
    assert "belongs to uid 65534" in done.stderr
    assert list(data_dir.iterdir()) == []  # nothing made there: no lock, no socket, no logs
