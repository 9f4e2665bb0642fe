"""Free ports and a real rlogd cluster, started as a user would start one."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_base_port(count: int) -> int:
    """A base port P with P..P+count-1 free, picked at random so parallel runs rarely collide."""
    for _ in range(200):
        base = random.randint(20_000, 40_000)
        if all(port_is_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no free port range found")


@dataclass
class Cluster:
    """An rlogd process we started, and where its brokers listen."""

    data_dir: Path
    base_port: int
    brokers: int
    process: subprocess.Popen[bytes]

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.base_port}"

    def status(self) -> dict:
        return json.loads((self.data_dir / "rlogd.json").read_text())

    def broker_pid(self, broker_id: int) -> int | None:
        return self.status()["brokers"][broker_id - 1]["pid"]

    def wait_until_running(self, timeout_s: float = 30.0, *, not_pid: int | None = None) -> None:
        """Every broker running and accepting connections (and, if given, with a new pid)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"rlogd exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                brokers = self.status()["brokers"]
            except (FileNotFoundError, json.JSONDecodeError):
                brokers = []
            if brokers and all(
                b["state"] == "running" and b["pid"] and b["pid"] != not_pid for b in brokers
            ):
                return
            time.sleep(0.05)
        raise TimeoutError(f"cluster not running after {timeout_s} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        text = []
        for path in sorted((self.data_dir / "logs").glob("*.log")):
            text.append(f"--- {path.name}\n" + "\n".join(path.read_text().splitlines()[-lines:]))
        return "\n".join(text)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        return self.process.returncode


def start_cluster(data_dir: Path, brokers: int = 1, config: Path | None = None) -> Cluster:
    base_port = free_base_port(brokers)
    command = [
        sys.executable, "-m", "rlog.daemon.rlogd",
        "--brokers", str(brokers), "--data-dir", str(data_dir), "--base-port", str(base_port),
    ]  # fmt: skip
    if config is not None:
        command += ["--config", str(config)]
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "rlogd.out", "ab") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    cluster = Cluster(data_dir, base_port, brokers, process)
    try:
        cluster.wait_until_running()
    except BaseException:
        cluster.stop()
        raise
    return cluster
