"""noida-db, one local binary with a Kafka-compatible service (PyPI noida-db), single node,
only its Kafka service enabled, in the foreground so that it is stopped by its pid."""

from __future__ import annotations

from pathlib import Path

from .common import Cluster, free_ports, installed_binary, start_process, wait_kafka


def start(root: Path) -> Cluster:
    binary = installed_binary("noida_db", "noida-db", "noida-db")
    binary.chmod(0o755)  # the wheel may ship it without the execute bit (its own CLI sets it)
    (port,) = free_ports(1)
    cluster = Cluster(name="noida", bootstrap=f"127.0.0.1:{port}", root=root)
    data = root / "data"
    data.mkdir()
    cluster.processes.append(
        start_process(
            [
                str(binary),
                "start",
                "--data-dir",
                str(data),
                "--host",
                "127.0.0.1",
                "--only",
                "kafka",
                "--kafka-port",
                str(port),
            ],
            root / "noida.log",
        )
    )
    try:
        wait_kafka(cluster, 1)
    except Exception:
        cluster.stop()
        raise
    return cluster
