"""The partitions a broker hosts: one core `Replica` per partition the metadata assigns it.

The replica state machines decide; this module does what their effects ask (complete a waiting
produce, wake waiting fetches, propose an ISR to the controller, checkpoint the high watermark)
and keeps the files (LogManager) in step with the metadata: logs are opened when a partition is
assigned here and deleted when its topic is. Waiting produces and fetches park futures that
these events complete, so nothing polls.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rlog.core.metadata.image import MetadataImage, PartitionInfo
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import (
    AlterPartitionResponse,
    CompleteProduce,
    Effect,
    HighWatermarkChanged,
    PartitionState,
    ProposeIsr,
    Replica,
    ReplicaConfig,
    Truncated,
)
from rlog.core.storage.checkpoint import (
    CorruptCheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from rlog.core.storage.config import LOG_CONFIG_NAMES, LogConfig
from rlog.core.storage.files import FileSystem, RealFileSystem
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log_manager import LogManager
from rlog.daemon.config import BrokerSettings
from rlog.daemon.events import EventJournal

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"  # Kafka's name
PARTITION_METADATA = "partition.metadata"  # Kafka's name: the topic id a partition dir holds
MIN_INSYNC_REPLICAS = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"
REPLICA_LAG_TIME_MAX = "replica.lag.time.max.ms"


@dataclass(frozen=True, slots=True)
class AppendAnswer:
    """How a leader append ended: Produce's per-partition answer, before version mapping."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    storage_failed: bool = False  # the disk refused it (KAFKA_STORAGE_ERROR, by version)
    offsets: int = 0  # how many offsets the append took (the records it added)


# Sends a leader's ISR proposal to the controller and returns its answer (an error if lost).
AlterPartitionSender = Callable[[ProposeIsr], Awaitable[AlterPartitionResponse]]


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        settings: BrokerSettings,
        now_ms: int,
        *,
        fs: FileSystem | None = None,
    ) -> None:
        """`fs`: where the logs live (real files; the broker passes one that chaos can fill)."""
        self.broker_id = broker_id
        self.settings = settings
        self.default_log_config = settings.log_config()
        self._fs = fs or RealFileSystem()
        self._checkpoint_path = os.path.join(data_dir, HIGH_WATERMARK_CHECKPOINT)
        self.logs = LogManager(str(data_dir), self._fs, self.default_log_config, now_ms)
        try:
            self._checkpointed_hws = read_offset_checkpoint(self._fs, self._checkpoint_path)
        except CorruptCheckpointError:
            self._checkpointed_hws = {}  # HW 0: followers learn it again from their leaders
        self.replicas: dict[TopicPartition, Replica] = {}
        self._applied: dict[TopicPartition, PartitionInfo] = {}
        self._produces: dict[tuple[TopicPartition, int], asyncio.Future[CompleteProduce]] = {}
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = defaultdict(set)
        self._alter_partition: AlterPartitionSender | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._hw_dirty = False
        self.journal: EventJournal | None = None  # replica events, if main gives a journal
        # Called when a replica starts or stops following a leader: the fetchers regroup.
        self.on_followers_changed: Callable[[], None] = lambda: None

    def set_alter_partition_sender(self, sender: AlterPartitionSender) -> None:
        self._alter_partition = sender

    def replica(self, topic: str, index: int) -> Replica | None:
        return self.replicas.get((topic, index))

    # ---- metadata ----

    def apply_metadata(self, image: MetadataImage, now_ms: int, *, caught_up: bool) -> None:
        """Bring the hosted replicas in line with the committed metadata. `caught_up`: the
        image is complete (the broker has read the metadata log to its end), so logs it does
        not mention are strays to delete.
        """
        assigned: set[TopicPartition] = set()
        followers_changed = False
        for topic, index, info in image.iter_partitions():
            if self.broker_id not in info.replicas:
                continue
            key = (topic, index)
            assigned.add(key)
            replica = self.replicas.get(key)
            if replica is None:
                replica = self.replicas[key] = self._open_replica(image, topic, index)
                followers_changed = True
            else:
                replica.update_config(self.replica_config(image, topic))
                log_config = self._log_config(image, topic)
                if replica.log.config != log_config:  # a dynamic config changed
                    replica.log.update_config(log_config)
            if self._applied.get(key) == info:
                continue
            was_following = (replica.is_follower, replica.leader)
            state = PartitionState(
                info.leader, info.leader_epoch, info.isr, info.replicas, info.partition_epoch
            )
            self.handle_effects(replica.apply_partition_state(state, now_ms))
            self._applied[key] = info
            followers_changed |= was_following != (replica.is_follower, replica.leader)
            self.notify(key)  # fetches waiting here must see the new role
        for key in [k for k in self.replicas if k not in assigned]:
            self._remove_replica(key, image)
            followers_changed = True
        if caught_up:
            self._delete_strays(image)
        if followers_changed:
            self.on_followers_changed()

    def _open_replica(self, image: MetadataImage, topic: str, index: int) -> Replica:
        topic_id = image.topics[topic].topic_id
        log_ = self.logs.get(topic, index)
        if log_ is not None and self._stored_topic_id(log_.dir_path) not in (None, topic_id):
            # The topic was deleted and made again while this broker was away: these records
            # belong to the old one and must never be served as the new one's (KIP-516).
            log.info("deleting %s-%d: it belongs to an earlier topic of that name", topic, index)
            self.logs.delete(topic, index)
            log_ = None
        if log_ is None:
            log_ = self.logs.create(topic, index, self._log_config(image, topic))
        if self._stored_topic_id(log_.dir_path) is None:
            self._fs.replace_atomically(
                os.path.join(log_.dir_path, PARTITION_METADATA),
                f"version: 0\ntopic_id: {topic_id}\n".encode(),
            )
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
            self.broker_id,
            log_,
            epochs,
            self.replica_config(image, topic),
            0,
            high_watermark=self._checkpointed_hws.get((topic, index), 0),
        )

    def _stored_topic_id(self, dir_path: str) -> str | None:
        """The topic id in the partition's `partition.metadata` (Kafka's file), if any."""
        path = os.path.join(dir_path, PARTITION_METADATA)
        if not self._fs.exists(path):
            return None
        for line in self._fs.read_bytes(path).decode(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return value.strip()
        return None

    def _remove_replica(self, key: TopicPartition, image: MetadataImage) -> None:
        """The partition is no longer ours (its topic was deleted): fail what waits on it."""
        self.replicas.pop(key)
        self._applied.pop(key, None)
        for pending_key in [k for k in self._produces if k[0] == key]:
            future = self._produces.pop(pending_key)
            if not future.done():
                future.set_exception(LookupError(f"{key[0]}-{key[1]} was removed"))
        self.notify(key)
        if key[0] not in image.topics:
            log.info("deleting %s-%d: its topic was deleted", *key)
            self.logs.delete(*key)

    def _delete_strays(self, image: MetadataImage) -> None:
        for topic, index in self.logs.topic_partitions():
            if (topic, index) in self.replicas:
                continue
            info = image.partition(topic, index)
            if info is None or self.broker_id not in info.replicas:
                log.info("deleting stray log %s-%d: not assigned to this broker", topic, index)
                self.logs.delete(topic, index)

    def _log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        overrides = dict(image.cluster_configs)
        info = image.topics.get(topic)
        if info is not None:
            overrides.update(info.configs)
        wanted = {k: v for k, v in overrides.items() if k in LOG_CONFIG_NAMES}
        return LogConfig.from_kafka_properties(wanted, base=self.default_log_config)

    def topic_log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        return self._log_config(image, topic)

    def replica_config(self, image: MetadataImage, topic: str) -> ReplicaConfig:
        """The topic's config, else the cluster's dynamic default, else the static [broker]."""
        settings = self.settings
        min_insync = image.topic_config(topic, MIN_INSYNC_REPLICAS, "")
        unclean = image.topic_config(topic, UNCLEAN_LEADER_ELECTION, "")
        lag_ms = image.cluster_configs.get(REPLICA_LAG_TIME_MAX, "")
        return ReplicaConfig(
            min_insync_replicas=int(min_insync) if min_insync else settings.min_insync_replicas,
            replica_lag_time_max_ms=int(lag_ms) if lag_ms else settings.replica_lag_time_max_ms,
            unclean_leader_election_enable=(
                unclean == "true" if unclean else settings.unclean_leader_election_enable
            ),
        )

    # ---- effects ----

    def handle_effects(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, CompleteProduce):
                key = ((effect.topic, effect.partition), effect.pending_id)
                future = self._produces.pop(key, None)
                if future is not None and not future.done():
                    future.set_result(effect)
            elif isinstance(effect, HighWatermarkChanged):
                self._hw_dirty = True
                self.notify((effect.topic, effect.partition))
            elif isinstance(effect, ProposeIsr):
                self._spawn(self._propose_isr(effect))
            elif isinstance(effect, Truncated):
                log.info(
                    "truncated %s-%d to offset %d%s",
                    effect.topic,
                    effect.partition,
                    effect.offset,
                    " (whole log: behind the leader's log start)" if effect.full else "",
                )
                if self.journal is not None:
                    self.journal.record(
                        "replica_truncated",
                        f"broker {self.broker_id} truncated {effect.topic}-{effect.partition} "
                        f"to offset {effect.offset}" + (" (whole log)" if effect.full else ""),
                        topic=effect.topic,
                        partition=effect.partition,
                        offset=effect.offset,
                        broker=self.broker_id,
                        full=effect.full,
                    )
                self._hw_dirty = True
                self.notify((effect.topic, effect.partition))

    async def _propose_isr(self, proposal: ProposeIsr) -> None:
        sender = self._alter_partition
        assert sender is not None, "set_alter_partition_sender first"
        log.info(
            "proposing ISR %s for %s-%d (leader epoch %d, partition epoch %d)",
            list(proposal.new_isr),
            proposal.topic,
            proposal.partition,
            proposal.leader_epoch,
            proposal.partition_epoch,
        )
        answer = await sender(proposal)
        replica = self.replicas.get((proposal.topic, proposal.partition))
        if replica is not None:
            self.handle_effects(replica.on_alter_partition_response(answer, now_ms()))

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def append(
        self, key: TopicPartition, records: bytes | None, acks: int, timeout_ms: int
    ) -> AppendAnswer:
        """Append one batch as this partition's leader; with acks=all, answer once the ISR has
        it (or it failed). Used by Produce and by the group coordinator's writes."""
        replica = self.replicas.get(key)
        if replica is None:
            return AppendAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, message="no replica here")
        now = now_ms()
        end_before = replica.log_end_offset
        try:
            outcome = replica.append_as_leader(
                records, acks, now, required_acks_timeout_ms=max(0, timeout_ms)
            )
            result = outcome.result
            if result.error == ErrorCode.NONE and replica.log.flush_due(now):
                replica.log.flush()
        except OSError as error:
            log.error("storage error appending to %s-%d: %s", *key, error)
            message = f"storage error: {error}"
            return AppendAnswer(ErrorCode.KAFKA_STORAGE_ERROR, message=message, storage_failed=True)
        waiting = (
            self.expect_produce(key, outcome.pending.pending_id)
            if outcome.pending is not None
            else None
        )
        self.handle_effects(outcome.effects)
        if result.error != ErrorCode.NONE:
            log.info("append to %s-%d refused: %s", *key, result.error_message)
            return AppendAnswer(
                result.error, log_start_offset=result.log_start_offset, message=result.error_message
            )
        self.notify(key)  # followers waiting for new records
        answer = AppendAnswer(
            ErrorCode.NONE,
            result.base_offset,
            result.log_append_time_ms,
            result.log_start_offset,
            offsets=replica.log_end_offset - end_before,
        )
        if waiting is None:
            return answer
        try:
            done = await waiting
        except LookupError as gone:
            return AppendAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, message=str(gone))
        if done.error != ErrorCode.NONE:
            log.info("acks=all append to %s-%d ended with %s", *key, done.error.name)
        return AppendAnswer(
            done.error,
            answer.base_offset,
            answer.log_append_time_ms,
            answer.log_start_offset,
            offsets=answer.offsets,
        )

    def expect_produce(
        self, key: TopicPartition, pending_id: int
    ) -> asyncio.Future[CompleteProduce]:
        """A future the replica's CompleteProduce for `pending_id` resolves."""
        future: asyncio.Future[CompleteProduce] = asyncio.get_running_loop().create_future()
        self._produces[(key, pending_id)] = future
        return future

    def tick(self, now: int) -> None:
        """Time passed: produce deadlines, ISR shrinking (leaders only)."""
        for replica in list(self.replicas.values()):
            self.handle_effects(replica.tick(now))

    # ---- long polling: a fetch parks one future on every partition it reads ----

    def notify(self, key: TopicPartition) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    async def wait_for_data(self, keys: list[TopicPartition], timeout_s: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters[key].add(future)
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            pass
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[key]

    # ---- files ----

    def checkpoint(self) -> None:
        """Recovery points and log starts (LogManager), and the high watermarks."""
        self.logs.checkpoint()
        self.checkpoint_high_watermarks()

    def checkpoint_high_watermarks(self) -> None:
        if not self._hw_dirty:
            return
        self._hw_dirty = False
        hws = {key: replica.high_watermark for key, replica in self.replicas.items()}
        write_offset_checkpoint(self._fs, self._checkpoint_path, hws)

    def close(self) -> None:
        """Clean shutdown: flush every log and write checkpoints, so start-up re-reads nothing."""
        for task in self._background:
            task.cancel()
        try:
            self._hw_dirty = True
            self.checkpoint_high_watermarks()
        finally:
            self.logs.close()


def now_ms() -> int:
    """Wall-clock ms: segment ages and record timestamps use it, as Kafka does."""
    return time.time_ns() // 1_000_000
