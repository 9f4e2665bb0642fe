"""The partitions a broker hosts: one `Replica` per partition the metadata assigns it, over the
logs in its data directory, and the checkpoint files that go with them.

Logs are opened when a partition is assigned here and deleted when its topic is; logs the
metadata does not mention are deleted only once the broker has read the whole metadata log.
A partition dir records its topic id (`partition.metadata`), so a topic deleted and made again
while this broker was away never serves the old records (KIP-516).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from rlog.core.broker.config import BrokerConfig, log_config, replica_config
from rlog.core.broker.messages import TopicPartition
from rlog.core.metadata.image import MetadataImage, PartitionInfo
from rlog.core.replication import PartitionState, Replica
from rlog.core.storage.checkpoint import (
    CorruptCheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from rlog.core.storage.files import FileSystem
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log_manager import LogManager

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"  # Kafka's name
PARTITION_METADATA = "partition.metadata"  # Kafka's name: the topic id a partition dir holds


class HostedReplicas:
    def __init__(self, config: BrokerConfig, data_dir: str, fs: FileSystem, now_ms: int) -> None:
        self.config = config
        self._fs = fs
        self._checkpoint_path = os.path.join(data_dir, HIGH_WATERMARK_CHECKPOINT)
        self.logs = LogManager(data_dir, fs, config.log_config, now_ms)
        try:
            self._checkpointed_hws = read_offset_checkpoint(fs, self._checkpoint_path)
        except CorruptCheckpointError:
            self._checkpointed_hws = {}  # HW 0: followers learn it again from their leaders
        self.replicas: dict[TopicPartition, Replica] = {}
        self._topic_ids: dict[TopicPartition, str] = {}  # the topic id each replica was opened for
        self.applied: dict[TopicPartition, PartitionInfo] = {}
        self.log_messages: list[str] = []  # what the caller should log (deletions)

    def get(self, key: TopicPartition) -> Replica | None:
        return self.replicas.get(key)

    def __iter__(self) -> Iterator[tuple[TopicPartition, Replica]]:
        return iter(list(self.replicas.items()))

    def assigned(self, image: MetadataImage) -> Iterator[tuple[TopicPartition, PartitionInfo]]:
        broker_id = self.config.broker_id
        for topic, index, info in image.iter_partitions():
            if broker_id in info.replicas:
                yield (topic, index), info

    def open_or_update(self, image: MetadataImage, key: TopicPartition) -> Replica:
        """The replica for an assigned partition, opened if new; its configs brought up to date."""
        topic = key[0]
        replica = self.replicas.get(key)
        if replica is None:
            replica = self.replicas[key] = self._open(image, *key)
            return replica
        replica.update_config(replica_config(self.config, image, topic))
        wanted = log_config(self.config, image, topic)
        if replica.log.config != wanted:  # a dynamic config changed
            replica.log.update_config(wanted)
        return replica

    @staticmethod
    def partition_state(info: PartitionInfo) -> PartitionState:
        return PartitionState(
            info.leader, info.leader_epoch, info.isr, info.replicas, info.partition_epoch
        )

    def replaced(self, image: MetadataImage, key: TopicPartition) -> bool:
        """The open replica belongs to an earlier topic of that name (deleted and made again
        within one metadata update): its log is deleted and the caller must fail what waits
        on it; the next open_or_update starts the new topic's partition empty."""
        if key not in self.replicas or self._topic_ids.get(key) == image.topics[key[0]].topic_id:
            return False
        self.replicas.pop(key)
        self.applied.pop(key, None)
        self._topic_ids.pop(key, None)
        self.log_messages.append(
            f"deleting {key[0]}-{key[1]}: it belongs to an earlier topic of that name"
        )
        self.logs.delete(*key)
        return True

    def _open(self, image: MetadataImage, topic: str, index: int) -> Replica:
        topic_id = image.topics[topic].topic_id
        log_ = self.logs.get(topic, index)
        if log_ is not None and self._stored_topic_id(log_.dir_path) not in (None, topic_id):
            self.log_messages.append(
                f"deleting {topic}-{index}: it belongs to an earlier topic of that name"
            )
            self.logs.delete(topic, index)
            log_ = None
        wanted = log_config(self.config, image, topic)
        if log_ is None:
            log_ = self.logs.create(topic, index, wanted)
        elif log_.config != wanted:  # loaded at start with the broker's defaults
            log_.update_config(wanted)
        if self._stored_topic_id(log_.dir_path) is None:
            self._fs.replace_atomically(
                os.path.join(log_.dir_path, PARTITION_METADATA),
                f"version: 0\ntopic_id: {topic_id}\n".encode(),
            )
        self._topic_ids[(topic, index)] = topic_id
        epochs = LeaderEpochCache.load(
            self._fs,
            log_.dir_path,
            log_.iter_batch_headers(),
            log_start_offset=log_.log_start_offset,
            log_end_offset=log_.log_end_offset,
        )
        return Replica(
            topic,
            index,
            self.config.broker_id,
            log_,
            epochs,
            replica_config(self.config, image, topic),
            0,
            high_watermark=self._checkpointed_hws.get((topic, index), 0),
        )

    def _stored_topic_id(self, dir_path: str) -> str | None:
        path = os.path.join(dir_path, PARTITION_METADATA)
        if not self._fs.exists(path):
            return None
        for line in self._fs.read_bytes(path).decode(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return value.strip()
        return None

    def remove(self, key: TopicPartition, image: MetadataImage) -> Replica:
        """The partition is no longer ours; its log goes if its topic was deleted."""
        replica = self.replicas.pop(key)
        self.applied.pop(key, None)
        self._topic_ids.pop(key, None)
        if key[0] not in image.topics:
            self.log_messages.append(f"deleting {key[0]}-{key[1]}: its topic was deleted")
            self.logs.delete(*key)
        return replica

    def delete_strays(self, image: MetadataImage) -> None:
        broker_id = self.config.broker_id
        for topic, index in self.logs.topic_partitions():
            if (topic, index) in self.replicas:
                continue
            info = image.partition(topic, index)
            if info is None or broker_id not in info.replicas:
                self.log_messages.append(
                    f"deleting stray log {topic}-{index}: not assigned to this broker"
                )
                self.logs.delete(topic, index)

    # ---- files ----

    def checkpoint_high_watermarks(self) -> None:
        hws = {key: replica.high_watermark for key, replica in self.replicas.items()}
        write_offset_checkpoint(self._fs, self._checkpoint_path, hws)

    def checkpoint(self) -> None:
        """Recovery points and log starts (LogManager), and the high watermarks."""
        self.logs.checkpoint()
        self.checkpoint_high_watermarks()

    def close(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush every log and write checkpoints, so start-up re-reads nothing;
        the clean-shutdown file records `broker_epoch` (see LogManager.close)."""
        try:
            self.checkpoint_high_watermarks()
        finally:
            self.logs.close(broker_epoch)

    def abandon(self) -> None:
        """The log dir failed: close every file but write nothing (no flush, checkpoint or
        clean-shutdown file), so the next start recovers the logs as after a crash."""
        for key in self.logs.topic_partitions():
            log_ = self.logs.get(*key)
            if log_ is not None:
                with contextlib.suppress(OSError):  # a failed disk may fail close() too
                    log_.close()
