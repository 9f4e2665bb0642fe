"""Every partition log in one data directory, with the directory's checkpoint files.

Partition directories are named `<topic>-<partition>` as Kafka names them. A deleted partition is
first renamed `<topic>-<partition>.<32 hex>-delete`, so a crash mid-removal leaves a name startup
recognises and finishes removing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from rlog.core.storage.checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CorruptCheckpointError,
    TopicPartition,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FileSystem
from rlog.core.storage.log import Log

DELETE_DIR_SUFFIX = "-delete"
# Written by a clean shutdown, removed at start: its absence says the last stop was a crash.
# Kafka's name and content ({"version":0,"brokerEpoch":N}).
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
TOPIC_NAME_LENGTH_MAX = 249  # Kafka's bound, so `<topic>-<partition>` fits a file name
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def partition_dir_name(topic: str, partition: int) -> str:
    if (
        not _LEGAL_TOPIC.fullmatch(topic)
        or topic in (".", "..")
        or len(topic) > TOPIC_NAME_LENGTH_MAX
    ):
        raise ValueError(f"illegal topic name {topic!r}")
    if partition < 0:
        raise ValueError(f"illegal partition {partition}")
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """(topic, partition) from `<topic>-<partition>`; topics may contain '-', so the last one."""
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not (partition.isascii() and partition.isdigit()):
        return None
    if not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        return None
    return topic, int(partition)


class LogManager:
    def __init__(
        self,
        data_dir: str,
        fs: FileSystem,
        default_config: LogConfig,
        now_ms: int,
        *,
        topic_configs: Mapping[str, LogConfig] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.default_config = default_config
        self._fs = fs
        self._logs: dict[TopicPartition, Log] = {}
        self._deleted_dirs = 0  # names renamed-for-deletion dirs without a random source
        fs.makedirs(data_dir)
        # The broker epoch the last process shut down cleanly with, or -1 after a crash.
        self.previous_broker_epoch = self._take_clean_shutdown_file()
        self._load(now_ms, topic_configs or {})

    def _take_clean_shutdown_file(self) -> int:
        """Read and remove the clean-shutdown file, so a crash of this process shows."""
        path = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
        if not self._fs.exists(path):
            return -1
        try:
            epoch = json.loads(self._fs.read_bytes(path))["brokerEpoch"]
        except (ValueError, KeyError, TypeError):
            epoch = -1  # unreadable: as good as absent
        self._fs.remove(path)
        self._fs.sync_dir(self.data_dir)
        return epoch if isinstance(epoch, int) else -1

    def _load(self, now_ms: int, topic_configs: Mapping[str, LogConfig]) -> None:
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        log_start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        for name in sorted(self._fs.listdir(self.data_dir)):
            path = os.path.join(self.data_dir, name)
            if not self._fs.is_dir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                self._fs.remove_tree(path)  # a deletion a crash interrupted
                continue
            topic_partition = parse_partition_dir_name(name)
            if topic_partition is None:
                continue
            self._logs[topic_partition] = Log(
                path,
                topic_configs.get(topic_partition[0], self.default_config),
                self._fs,
                # No recovery point: recover the whole log, the safe choice.
                recovery_point=recovery_points.get(topic_partition, 0),
                log_start_offset=log_start_offsets.get(topic_partition, 0),
                now_ms=now_ms,
            )

    def _read_checkpoint(self, file_name: str) -> dict[TopicPartition, int]:
        try:
            return read_offset_checkpoint(self._fs, os.path.join(self.data_dir, file_name))
        except CorruptCheckpointError:
            # Recovery points of 0 recover everything; log starts of 0 start at the first segment.
            return {}

    # ---- partitions ----

    def get(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def topic_partitions(self) -> list[TopicPartition]:
        return sorted(self._logs)

    def create(self, topic: str, partition: int, config: LogConfig) -> Log:
        """A new empty log; ValueError if it exists or the name is illegal."""
        if (topic, partition) in self._logs:
            raise ValueError(f"log {topic}-{partition} already exists")
        path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
        # An empty log reads no clock: segment ages start at their first append.
        log = Log(path, config, self._fs, recovery_point=0, log_start_offset=0, now_ms=0)
        self._fs.sync_dir(self.data_dir)
        self._logs[(topic, partition)] = log
        return log

    def get_or_create(self, topic: str, partition: int, config: LogConfig) -> Log:
        log = self.get(topic, partition)
        return log if log is not None else self.create(topic, partition, config)

    def delete(self, topic: str, partition: int) -> None:
        """Remove the partition's log and directory (KeyError if unknown)."""
        log = self._logs.pop((topic, partition))
        log.close()
        doomed_path = self._deletion_path(topic, partition)
        self._fs.rename(log.dir_path, doomed_path)
        self._fs.sync_dir(self.data_dir)
        self._fs.remove_tree(doomed_path)
        self.checkpoint()  # a recreated partition must not inherit these offsets

    def _deletion_path(self, topic: str, partition: int) -> str:
        while True:
            self._deleted_dirs += 1
            name = f"{topic}-{partition}.{self._deleted_dirs:032x}{DELETE_DIR_SUFFIX}"
            path = os.path.join(self.data_dir, name)
            if not self._fs.exists(path):
                return path

    # ---- periodic work and shutdown ----

    def checkpoint(self) -> None:
        """Write every log's recovery point and log start offset."""
        recovery_points = {tp: log.recovery_point for tp, log in self._logs.items()}
        log_start_offsets = {tp: log.log_start_offset for tp, log in self._logs.items()}
        write_offset_checkpoint(
            self._fs, os.path.join(self.data_dir, RECOVERY_POINT_CHECKPOINT), recovery_points
        )
        write_offset_checkpoint(
            self._fs, os.path.join(self.data_dir, LOG_START_OFFSET_CHECKPOINT), log_start_offsets
        )

    def flush_all(self) -> None:
        for log in self._logs.values():
            log.flush()

    def flush_due_logs(self, now_ms: int) -> list[TopicPartition]:
        """Flush each log whose flush.messages/flush.ms is due or that has rolled segments not
        yet flushed; returns the partitions flushed.
        """
        flushed = []
        for topic_partition, log in self._logs.items():
            if log.flush_due(now_ms) or log.has_unflushed_sealed_segments:
                log.flush()
                flushed.append(topic_partition)
        return flushed

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        return sum(log.delete_retained_segments(now_ms) for log in self._logs.values())

    def close(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush, checkpoint (so the next start re-reads nothing), close; then,
        if all of that worked and the broker had registered (`broker_epoch` >= 0), write the
        clean-shutdown file that the next start reads.

        Checkpointing is safe even if a flush failed: a recovery point only moves after its fsync.
        """
        try:
            self.flush_all()
        finally:
            try:
                self.checkpoint()
            finally:
                for log in self._logs.values():
                    log.close(snapshot=True)
        if broker_epoch >= 0:
            document = {"version": 0, "brokerEpoch": broker_epoch}
            path = os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE)
            self._fs.replace_atomically(path, json.dumps(document).encode())
