"""The partitions a broker hosts, and the wake-ups of fetches waiting for their data.

Holds the LogManager (files) and one core Partition per topic-partition. Fetches that wait for
data (long polling) park a future here; an append completes them at once, so nothing polls.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from pathlib import Path

from rlog.core.partition import Partition
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log_manager import LogManager
from rlog.daemon.broker.topics import TopicInfo, TopicStore
from rlog.daemon.config import BrokerSettings

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class ReplicaManager:
    def __init__(self, data_dir: Path, settings: BrokerSettings, now_ms: int) -> None:
        self.settings = settings
        self.default_log_config = settings.log_config()
        self.topics = TopicStore(data_dir)
        self.logs = LogManager(str(data_dir), RealFileSystem(), self.default_log_config, now_ms)
        self.partitions: dict[TopicPartition, Partition] = {}
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = defaultdict(set)
        for topic in self.topics.topics.values():
            self._open_topic(topic)
        for topic, index in self.logs.topic_partitions():
            if (topic, index) not in self.partitions:
                log.warning("ignoring %s-%d: no such topic in topics.json", topic, index)

    def topic_log_config(self, topic: TopicInfo) -> LogConfig:
        return LogConfig.from_kafka_properties(topic.configs, base=self.default_log_config)

    def _open_topic(self, topic: TopicInfo) -> None:
        config = self.topic_log_config(topic)
        for index in range(topic.partitions):
            log_ = self.logs.get(topic.name, index) or self.logs.create(topic.name, index, config)
            self.partitions[(topic.name, index)] = Partition(topic.name, index, log_)

    def create_topic(self, topic: TopicInfo) -> None:
        self.topic_log_config(topic)  # raises ValueError on a bad config before anything is written
        self.topics.put(topic)
        self._open_topic(topic)

    def delete_topic(self, name: str) -> None:
        topic = self.topics.topics[name]
        self.topics.remove(name)
        for index in range(topic.partitions):
            self.partitions.pop((name, index), None)
            self.logs.delete(name, index)
            self.notify((name, index))

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # Long polling: a fetch parks one future on every partition it reads; any append wakes it.
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

    def close(self) -> None:
        """Clean shutdown: flush every log and write checkpoints, so start-up re-reads nothing."""
        self.logs.close()
