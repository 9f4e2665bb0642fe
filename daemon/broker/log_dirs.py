"""DescribeLogDirs (kafka-log-dirs, Admin.describeLogDirs): this broker's one log dir, the
logs in it and the space on its file system, as Kafka's ReplicaManager.describeLogDirs says.

The logs are the broker core's (`BrokerCore.hosted`), read between two steps of it on the
daemon's event loop, so never halfway through a Ready. For a replica's current log (rlog has no
future logs: AlterReplicaLogDirs is not served) Kafka's offset lag is how far the log end is
below the high watermark of the same replica, which never happens: 0. A log the broker keeps
but no longer serves (not assigned here, waiting to be deleted) has lag -1, as in Kafka.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from rlog.core.broker import BrokerCore
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
NO_LAG = -1  # DescribeLogDirsResponse.INVALID_OFFSET_LAG: the replica is not served here


class DiskSpace(NamedTuple):
    total_bytes: int
    usable_bytes: int


def disk_space(path: str) -> DiskSpace:
    """The size of the file system `path` is on, and what an unprivileged writer may still use
    (Java's FileStore.getTotalSpace and getUsableSpace)."""
    stats = os.statvfs(path)
    return DiskSpace(stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize)


def requested_partitions(topics: Iterable[Body] | None) -> set[tuple[str, int]] | None:
    """The request's (topic, partition) pairs; None asks for every log."""
    if topics is None:
        return None
    return {(topic["topic"], index) for topic in topics for index in topic["partitions"]}


def describe_log_dirs(
    core: BrokerCore,
    topics: Iterable[Body] | None,
    space: Callable[[str], DiskSpace] = disk_space,
) -> Body:
    """The DescribeLogDirs answer for every version (the codec keeps a version's fields)."""
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "results": [log_dir_result(core, requested_partitions(topics), space)],
    }


def log_dir_result(
    core: BrokerCore,
    wanted: set[tuple[str, int]] | None,
    space: Callable[[str], DiskSpace],
) -> Body:
    path = os.path.abspath(core.data_dir)
    failed: Body = {"log_dir": path, "topics": [], "total_bytes": -1, "usable_bytes": -1}
    if core.offline is not None:
        return failed | {"error_code": ErrorCode.KAFKA_STORAGE_ERROR}
    try:
        total, usable = space(path)
    except OSError:
        return failed | {"error_code": ErrorCode.KAFKA_STORAGE_ERROR}
    by_topic: dict[str, list[Body]] = {}
    logs = core.hosted.logs
    for topic, index in logs.topic_partitions():
        log_ = logs.get(topic, index)
        if log_ is None or (wanted is not None and (topic, index) not in wanted):
            continue
        replica = core.replica(topic, index)
        lag = NO_LAG if replica is None else max(replica.high_watermark - replica.log_end_offset, 0)
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": index,
                "partition_size": log_.size_bytes,
                "offset_lag": lag,
                "is_future_key": False,
            }
        )
    return {
        "error_code": ErrorCode.NONE,
        "log_dir": path,
        "topics": [
            {"name": topic, "partitions": partitions}
            for topic, partitions in sorted(by_topic.items())
        ],
        "total_bytes": total,
        "usable_bytes": usable,
    }
