"""The files rlogd keeps in the data dir besides its children's: the lock that makes it the
data dir's only rlogd, the cluster id (meta.properties) and the launch record (cluster.json)."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import uuid
from pathlib import Path
from typing import IO, Any

from rlog.daemon.config import RlogConfig
from rlog.daemon.data_dir import launch_path, lock_path, meta_path


def write_json_atomically(path: Path, document: dict[str, Any]) -> None:
    """Readers (rlog, a crashed rlogd's successor) see the old document or the new, never half."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(temporary, path)


def lock_data_dir(data_dir: Path) -> IO[str] | None:
    """The data dir's lock, held until the file is closed or rlogd ends (the kernel drops it
    then); None when another rlogd holds it."""
    # Not a `with`: the caller holds it for rlogd's whole life.
    lock = open(lock_path(data_dir), "w")  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def new_cluster_id() -> str:
    """Kafka's form: a random UUID, base64url without padding (22 characters). Like Kafka's
    Uuid.randomUuid, never one starting with "-", which a command line would take for a flag."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def cluster_id_of(data_dir: Path) -> str:
    """The data dir's cluster id from DIR/meta.properties, made and written on first use."""
    path = meta_path(data_dir)
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id" and value.strip():
                return value.strip()
    cluster_id = new_cluster_id()
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(f"version=1\ncluster.id={cluster_id}\n")
    os.replace(temporary, path)
    return cluster_id


def adopt_cluster_id(data_dir: Path, cluster_id: str) -> str:
    """`cluster_id` (rlogd's --cluster-id: the id of a cluster whose controller may run on
    another host) written as the data dir's, unless the data dir has another: then ValueError
    naming both, since its logs belong to that cluster."""
    path = meta_path(data_dir)
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id" and value.strip() not in ("", cluster_id):
                raise ValueError(
                    f"{data_dir} belongs to cluster {value.strip()}, not {cluster_id} "
                    "(--cluster-id); give another --data-dir to join that cluster"
                )
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(f"version=1\ncluster.id={cluster_id}\n")
    os.replace(temporary, path)
    return cluster_id


def write_launch_record(data_dir: Path, config: RlogConfig, config_path: Path | None) -> None:
    """cluster.json: how this rlogd was started, kept after it exits so `rlog cluster up`
    starts the same cluster again."""
    write_json_atomically(
        launch_path(data_dir),
        {
            "brokers": config.cluster.brokers,
            "base_port": config.cluster.base_port,
            "controller_port": config.cluster.resolved_controller_port,
            "config": str(config_path) if config_path else None,
        },
    )
