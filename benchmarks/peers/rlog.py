"""rlog itself: ``rlog cluster up --brokers 3`` with RF=3 and min.insync.replicas=2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .common import Cluster, PeerUnavailable, free_base_port, servers_on, wait_kafka

RLOG = [sys.executable, "-m", "rlog.cli.app"]
CONFIG = """
[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"offsets.topic.replication.factor" = 3
"""


def _rlog(data_dir: Path, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        [*RLOG, "--data-dir", str(data_dir), *args], capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise PeerUnavailable(f"rlog {' '.join(args[:2])} failed: {done.stderr.strip()[-300:]}")
    return done.stdout


def start(root: Path, brokers: int = 3, cpus: frozenset[int] | None = None) -> Cluster:
    """`cpus`: rlogd, and so the controller and every broker, run on these CPUs only."""
    data_dir = root / "data"
    config = root / "rlog.toml"
    config.write_text(CONFIG)
    base = free_base_port(brokers + 1)  # the brokers, then the controller
    with servers_on(cpus):
        _rlog(
            data_dir,
            "cluster",
            "up",
            "--brokers",
            str(brokers),
            "--base-port",
            str(base),
            "--config",
            str(config),
        )

    def down() -> None:
        # rlog cluster down stops rlogd by its pid (and it its brokers and controller)
        subprocess.run(
            [*RLOG, "--data-dir", str(data_dir), "cluster", "down"],
            capture_output=True,
            timeout=120,
        )

    try:
        status = json.loads(_rlog(data_dir, "cluster", "status", "--json"))
    except Exception:
        down()
        raise
    cluster = Cluster(
        name="rlog",
        bootstrap=",".join(f"127.0.0.1:{base + i}" for i in range(brokers)),
        root=root,
        extra_pids=[int(status["rlogd_pid"])],  # CPU counted over rlogd and its children
        stopper=down,
    )
    try:
        wait_kafka(cluster, brokers)
    except Exception:
        cluster.stop()
        raise
    return cluster
