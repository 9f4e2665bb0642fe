"""``rlog cluster disks``: each broker's log dir, the space on its volume and what every
partition replica takes there, asked of each broker with DescribeLogDirs v4 (what Kafka's
kafka-log-dirs shows as JSON, as two tables).

The brokers are those Metadata lists, and when the data dir's rlogd answers, every broker it
runs: a broker that is down, paused or fenced still gets a row saying so. Each partition's lag is
DescribeLogDirs' offset lag: how far the replica's log end is below its own high watermark
(Kafka's meaning for a replica's current log, which is 0 in practice), or "-" for a log the
broker keeps but does not serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlog.cli import replicas
from rlog.cli.discovery import Settings, check_reachable, resolve_bootstrap, wire_tls
from rlog.cli.terminal import CliError, ExitCode
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
DESCRIBE_LOG_DIRS_VERSION = 4  # v4 adds the volume's total and usable bytes
NO_LAG = -1  # the broker keeps the log but serves no replica of it
ONLINE = "online"
UNREACHABLE = "unreachable"
SUMMARY_COLUMNS = ["BROKER", "ADDRESS", "LOG-DIR", "STATUS", "TOTAL", "USABLE", "LOGS", "REPLICAS"]
PARTITION_COLUMNS = ["BROKER", "TOPIC", "PARTITION", "SIZE", "LAG"]
STATUS_COLORS = {ONLINE: "green", "offline": "red", UNREACHABLE: "red", "down": "red"}


@dataclass(frozen=True)
class ReplicaDisk:
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "size_bytes": self.size_bytes,
            "offset_lag": self.offset_lag,
        }


@dataclass(frozen=True)
class LogDirView:
    """One log dir of one broker: ``status`` is "online", "offline" (its disk failed: the
    broker answers KAFKA_STORAGE_ERROR), or the error name it answered."""

    path: str
    status: str
    total_bytes: int | None
    usable_bytes: int | None
    replicas: list[ReplicaDisk]

    @property
    def logs_bytes(self) -> int:
        return sum(r.size_bytes for r in self.replicas)

    def as_json(self) -> dict[str, Any]:
        return {
            "log_dir": self.path,
            "status": self.status,
            "total_bytes": self.total_bytes,
            "usable_bytes": self.usable_bytes,
            "logs_bytes": self.logs_bytes if self.status == ONLINE else None,
            "replicas": [r.as_json() for r in self.replicas],
        }


@dataclass
class BrokerDisks:
    """A broker and its log dirs; without an answer, ``status`` says why (down, unreachable)."""

    id: int
    address: str | None
    status: str = ONLINE
    log_dirs: list[LogDirView] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.status == ONLINE and all(d.status == ONLINE for d in self.log_dirs)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "address": self.address,
            "status": self.status,
            "log_dirs": [d.as_json() for d in self.log_dirs],
        }


def human_bytes(size: int | None) -> str:
    """`0 B`, `512 B`, `1.5 KiB`, `23.4 MiB`, `1.2 GiB`; `-` when unknown."""
    if size is None or size < 0:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def log_dir_views(answer: Body) -> list[LogDirView]:
    """A DescribeLogDirs answer's log dirs, partitions sorted by topic and index."""
    views = []
    for result in answer["results"]:
        code = result["error_code"]
        if code == ErrorCode.NONE:
            status = ONLINE
        elif code == ErrorCode.KAFKA_STORAGE_ERROR:
            status = "offline"
        else:
            status = replicas.error_name(code)
        disks = sorted(
            (
                ReplicaDisk(t["name"], p["partition_index"], p["partition_size"], p["offset_lag"])
                for t in result["topics"]
                for p in t["partitions"]
                if not p["is_future_key"]
            ),
            key=lambda r: (r.topic, r.partition),
        )
        views.append(
            LogDirView(
                path=result["log_dir"],
                status=status,
                total_bytes=result["total_bytes"] if result["total_bytes"] >= 0 else None,
                usable_bytes=result["usable_bytes"] if result["usable_bytes"] >= 0 else None,
                replicas=disks,
            )
        )
    return views


def _request_body(partitions: list[replicas.Partition] | None) -> Body:
    """DescribeLogDirs for every log (None) or for these topics' partitions."""
    if partitions is None:
        return {"topics": None}
    by_topic: dict[str, list[int]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic, []).append(p.partition)
    return {
        "topics": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())]
    }


def describe_disks(
    settings: Settings, topics: list[str] | None, broker_ids: list[int] | None
) -> list[BrokerDisks]:
    """Each broker's log dirs (only ``broker_ids`` when given), with only ``topics``' replicas
    when given; CliError for an unknown topic or broker."""
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap, settings.timeout_s)
    processes = replicas.rlogd_processes(settings) or {}
    cluster = replicas.WireCluster(bootstrap, settings.timeout_s, wire_tls(settings))
    not_running = {b.id: b.state for b in processes.values() if b.state in replicas.PROCESS_REASONS}
    cluster.avoid = {b.address for b in processes.values() if b.id in not_running}
    try:
        metadata = replicas.fetch_metadata(cluster, sorted(set(topics)) if topics else None)
        wanted_partitions = None
        if topics:
            found = {t["name"]: replicas.partitions_of(t) for t in metadata["topics"]}
            wanted_partitions = [p for name in sorted(found) for p in found[name]]
        # A broker rlogd runs but Metadata leaves out (fenced: its log dir may have failed)
        # is asked too.
        addresses = {b.id: b.address for b in processes.values()} | cluster.brokers
        cluster.brokers = addresses
        known = sorted(addresses)
        if broker_ids:
            unknown = sorted(set(broker_ids) - set(known))
            if unknown:
                listed = ", ".join(map(str, known)) or "none"
                raise CliError(
                    f"no broker {unknown[0]} in the cluster (its brokers: {listed})",
                    ExitCode.NOT_FOUND,
                )
            known = sorted(set(broker_ids))
        body = _request_body(wanted_partitions)
        found_disks = []
        for broker_id in known:
            host, port = addresses[broker_id]
            disks = BrokerDisks(broker_id, f"{host}:{port}")
            if broker_id in not_running:  # asking a paused broker would cost a timeout
                disks.status = replicas.PROCESS_REASONS[not_running[broker_id]]
            else:
                answer = cluster.request_at(
                    broker_id, ApiKey.DESCRIBE_LOG_DIRS, DESCRIBE_LOG_DIRS_VERSION, body
                )
                if answer is None:
                    disks.status = UNREACHABLE
                elif answer["error_code"] != ErrorCode.NONE:
                    disks.status = replicas.error_name(answer["error_code"])
                else:
                    disks.log_dirs = log_dir_views(answer)
            found_disks.append(disks)
    finally:
        cluster.close()
    return found_disks


def summary_rows(brokers: list[BrokerDisks]) -> list[list[str]]:
    rows = []
    for broker in brokers:
        if not broker.log_dirs:
            rows.append([str(broker.id), broker.address or "-", "-", broker.status] + ["-"] * 4)
        for log_dir in broker.log_dirs:
            rows.append(
                [
                    str(broker.id),
                    broker.address or "-",
                    log_dir.path,
                    log_dir.status,
                    human_bytes(log_dir.total_bytes),
                    human_bytes(log_dir.usable_bytes),
                    # An offline dir's logs are not described: unknown, not empty.
                    human_bytes(log_dir.logs_bytes) if log_dir.status == ONLINE else "-",
                    str(len(log_dir.replicas)) if log_dir.status == ONLINE else "-",
                ]
            )
    return rows


def partition_rows(brokers: list[BrokerDisks]) -> list[list[str]]:
    return [
        [
            str(broker.id),
            replica.topic,
            str(replica.partition),
            human_bytes(replica.size_bytes),
            "-" if replica.offset_lag == NO_LAG else str(replica.offset_lag),
        ]
        for broker in brokers
        for log_dir in broker.log_dirs
        for replica in log_dir.replicas
    ]
