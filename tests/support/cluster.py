"""Free ports and a real rlogd cluster (a controller and N brokers), started as a user would."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlog.core.protocol.apis import ApiKey
from rlog.daemon import control
from rlog.daemon.wire import BlockingKafkaClient, WireError

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 30.0


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


PORT_SPAN = (20_000, 32_000)  # below Linux's ephemeral range (32768+)
LISTENER_OFFSET_SPAN = 400  # room above a base port for further listeners (offsets 100..300)


def worker_port_span() -> tuple[int, int]:
    """The ports this test process may pick from: pytest-xdist workers (gw0, gw1, ...) each take
    their own slice of PORT_SPAN, so two workers never race for one port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker.removeprefix("gw"))
    width = (PORT_SPAN[1] - PORT_SPAN[0]) // workers
    low = PORT_SPAN[0] + index * width
    return low, low + width


def free_base_port(count: int, listener_offsets: Iterable[int] = ()) -> int:
    """A base port P with P..P+count free: `count` brokers and the controller after them (rlogd's
    default controller port), picked at random so parallel runs rarely collide. Below Linux's
    ephemeral range (32768+): a broker down for a while could otherwise find its port taken by
    some client's outgoing connection when it restarts. Each of `listener_offsets` is a further
    listener of every broker: P+offset..P+offset+count-1 are free too. All of them lie in this
    test process's slice (worker_port_span)."""
    offsets = tuple(listener_offsets)
    assert max(offsets, default=0) + count < LISTENER_OFFSET_SPAN, "listener offsets too wide"
    low, high = worker_port_span()
    for _ in range(200):
        base = random.randint(low, high - LISTENER_OFFSET_SPAN)
        ports = [base + i for i in range(count + 1)]
        ports += [base + offset + i for offset in offsets for i in range(count)]
        if all(port_is_free(port) for port in ports):
            return base
    raise RuntimeError("no free port range found")


def registered_brokers(host: str, port: int, timeout_s: float = 3.0) -> list[int]:
    """The broker ids a broker's Metadata v8 lists (the brokers registered with the controller)."""
    with BlockingKafkaClient(host, port, timeout_s=timeout_s) as client:
        body = client.request(
            ApiKey.METADATA,
            8,
            {
                "topics": [],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
    return sorted(b["node_id"] for b in body["brokers"])


def all_registered(port: int, brokers: int) -> bool:
    """Whether the broker at `port` lists brokers 1..`brokers` (False while it does not answer)."""
    try:
        return registered_brokers(HOST, port) == list(range(1, brokers + 1))
    except WireError:
        return False


@dataclass
class Cluster:
    """An rlogd process we started, and where its brokers listen."""

    data_dir: Path
    base_port: int
    brokers: int
    process: subprocess.Popen[bytes]

    @property
    def bootstrap(self) -> str:
        """Every broker, so clients still find the cluster while some brokers are down."""
        return ",".join(f"{HOST}:{self.base_port + i}" for i in range(self.brokers))

    def status(self) -> dict:
        return json.loads((self.data_dir / "rlogd.json").read_text())

    def broker_pid(self, broker_id: int) -> int | None:
        return self.status()["brokers"][broker_id - 1]["pid"]

    def controller_pid(self) -> int | None:
        return self.status()["controller"]["pid"]

    def chaos(self, op: str, target: str, *, timeout_s: float = 60.0) -> dict[str, Any]:
        """kill|terminate|pause|resume|restart a process ("broker-N" or "controller") through
        rlogd's control socket; the reply. RuntimeError if rlogd refused."""
        reply = control.request(self.data_dir, {"op": op, "target": target}, timeout_s)
        if not reply.get("ok"):
            raise RuntimeError(f"chaos {op} {target}: {reply.get('error')}")
        return reply

    def chaos_request(self, document: dict[str, Any], *, timeout_s: float = 30.0) -> dict[str, Any]:
        """Any control request (partition, heal, delay, disk, ...); RuntimeError if refused."""
        reply = control.request(self.data_dir, document, timeout_s)
        if not reply.get("ok"):
            raise RuntimeError(f"chaos {document}: {reply.get('error')}")
        return reply

    def _processes(self) -> list[dict[str, Any]]:
        try:
            status = self.status()
        except (FileNotFoundError, json.JSONDecodeError):
            return []
        controller = [status["controller"]] if status.get("controller") else []
        return controller + status["brokers"]

    def wait_until_running(self, timeout_s: float = 30.0, *, not_pid: int | None = None) -> None:
        """The controller and every broker running and accepting connections (and, if given,
        none with the pid `not_pid`)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"rlogd exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            processes = self._processes()
            if processes and all(
                p["state"] == "running" and p["pid"] and p["pid"] != not_pid for p in processes
            ):
                return
            time.sleep(0.05)
        raise TimeoutError(f"cluster not running after {timeout_s} s:\n{self.log_tail()}")

    def wait_until_registered(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """broker-1's Metadata lists every broker: all have registered with the controller."""
        deadline = time.monotonic() + timeout_s
        wanted = list(range(1, self.brokers + 1))
        seen: list[int] | str = []
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"rlogd exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                seen = registered_brokers(HOST, self.base_port)
            except WireError as error:
                seen = str(error)
            if seen == wanted:
                return
            time.sleep(0.1)
        raise TimeoutError(
            f"broker-1's Metadata lists brokers {seen}, not {wanted}, after {timeout_s} s:\n"
            f"{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        text = []
        for path in sorted((self.data_dir / "logs").glob("*.log")):
            text.append(f"--- {path.name}\n" + "\n".join(path.read_text().splitlines()[-lines:]))
        return "\n".join(text)

    def stop(self) -> int:
        return stop_rlogd(self.process)


def spawn_rlogd(
    data_dir: Path, brokers: int, base_port: int, config: Path | None = None
) -> subprocess.Popen[bytes]:
    """rlogd in a session of its own (so a stuck one can be killed with its children), its
    output in DATA_DIR/rlogd.out."""
    command = [
        sys.executable, "-m", "rlog.daemon.rlogd",
        "--brokers", str(brokers), "--data-dir", str(data_dir), "--base-port", str(base_port),
    ]  # fmt: skip
    if config is not None:
        command += ["--config", str(config)]
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "rlogd.out", "ab") as output:
        return subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_rlogd(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM (rlogd stops its brokers, then the controller); SIGKILL its session if it
    hangs. The exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    return process.returncode


def start_cluster(data_dir: Path, brokers: int = 1, config: Path | None = None) -> Cluster:
    base_port = free_base_port(brokers)
    process = spawn_rlogd(data_dir, brokers, base_port, config)
    cluster = Cluster(data_dir, base_port, brokers, process)
    try:
        cluster.wait_until_running(STARTUP_TIMEOUT_S)
        cluster.wait_until_registered()
    except BaseException:
        cluster.stop()
        raise
    return cluster
