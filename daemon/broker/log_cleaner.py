"""The log cleaner duty: compacts every local log whose cleanup.policy includes compact.

Each pass over a log plans on the event loop (segment headers only), rewrites the sealed segments
in a worker thread (asyncio.to_thread: appends touch only the active segment, and fetches keep
reading the old segments until the swap), then swaps the new segments in on the loop
(core/storage/cleaner.py has the algorithm). Where each log's dirty part starts is kept in
`cleaner-offset-checkpoint` in the data dir, as Kafka does, so a restart does not count
everything as dirty again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

from rlog.core.records import CorruptRecordError
from rlog.core.replication.replica import Replica
from rlog.core.storage.checkpoint import (
    CorruptCheckpointError,
    TopicPartition,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from rlog.core.storage.cleaner import (
    CleanedSegments,
    build_cleaned_segments,
    install_cleaned_segments,
    plan_cleaning,
)
from rlog.core.storage.files import FileSystem
from rlog.core.storage.log import Log, StaleCleaningError
from rlog.core.storage.log_manager import LogManager

log = logging.getLogger("rlog.broker.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

# The offset a log may be cleaned up to now, None to leave it alone (see clean_limit).
CleanLimit = Callable[[TopicPartition], int | None]


def clean_limit(replica: Replica | None) -> int | None:
    """Leaders clean below their last stable offset (the HW, or the first offset of a
    transaction still undecided: its records are neither kept nor dropped as aborted until it
    ends) and below every replica's LEO: a follower
    fetches from its LEO, and a filler batch (cleaner.py) starting before it would not continue
    its log, so the cleaner never covers a position a follower may still fetch from. Until each
    follower's LEO is known in this leader epoch, and on followers, nothing is cleaned (their
    copies are compacted when they lead), as a former follower's fillers could start before
    another follower's position.
    """
    if replica is None or not replica.is_leader:
        return None
    offsets = replica.replica_log_end_offsets()
    if any(offset is None for offset in offsets.values()):
        return None
    return min([replica.last_stable_offset, *(o for o in offsets.values() if o is not None)])


class LogCleaner:
    def __init__(
        self,
        logs: LogManager,
        fs: FileSystem,
        limit: CleanLimit,
        now_ms: Callable[[], int],
        backoff_ms: int,
    ) -> None:
        self._logs = logs
        self._fs = fs
        self._limit = limit
        self._now_ms = now_ms
        self._backoff_ms = backoff_ms
        self._checkpoint_path = os.path.join(logs.data_dir, CLEANER_OFFSET_CHECKPOINT)
        try:
            self._first_dirty = read_offset_checkpoint(fs, self._checkpoint_path)
        except (CorruptCheckpointError, OSError):
            self._first_dirty = {}  # everything counts as dirty: one extra pass, no harm
        # Logs whose data failed to decode: skipped until a restart, as Kafka marks them.
        self._uncleanable: set[TopicPartition] = set()
        self._work: asyncio.Future[CleanedSegments] | None = None
        self.passes = 0  # logs cleaned since start, for logs and tests

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._backoff_ms / 1000)
            try:
                await self.clean_once()
            except OSError as error:  # the checkpoint write; the next pass tries again
                log.error("log cleaner: %s", error)

    async def clean_once(self) -> int:
        """One pass over every compacted log; returns how many were cleaned."""
        cleaned = 0
        for topic_partition in self._logs.topic_partitions():
            partition_log = self._logs.get(*topic_partition)
            if partition_log is None or not partition_log.config.compacts:
                continue
            if topic_partition in self._uncleanable:
                continue
            try:
                cleaned += await self._clean(topic_partition, partition_log)
            except CorruptRecordError as error:
                self._uncleanable.add(topic_partition)
                log.error("cannot clean %s-%d, skipped until restart: %s", *topic_partition, error)
            except StaleCleaningError as error:
                log.info("cleaning of %s-%d dropped: %s", *topic_partition, error)
            except OSError as error:
                log.error("cleaning %s-%d failed: %s", *topic_partition, error)
            except Exception:  # a bug: keep the other logs compacting, say so loudly
                self._uncleanable.add(topic_partition)
                log.exception("cleaning %s-%d failed, skipped until restart", *topic_partition)
        if cleaned:
            self._write_checkpoint()
        return cleaned

    async def _clean(self, topic_partition: TopicPartition, partition_log: Log) -> int:
        limit = self._limit(topic_partition)
        if limit is None:
            return 0
        # A truncation or a recreated log may leave the checkpoint past the end.
        first_dirty = min(self._first_dirty.get(topic_partition, 0), partition_log.log_end_offset)
        now = self._now_ms()
        plan = plan_cleaning(
            partition_log, now, first_dirty_offset=first_dirty, high_watermark=limit
        )
        if plan is None:
            return 0
        fs, dir_path, config = partition_log.fs, partition_log.dir_path, partition_log.config
        work = asyncio.ensure_future(
            asyncio.to_thread(build_cleaned_segments, fs, dir_path, config, plan, now)
        )
        self._work = work
        try:
            result = await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(_discard)  # the broker is stopping: drop what it writes
            raise
        finally:
            self._work = None
        if self._logs.get(*topic_partition) is not partition_log:  # deleted meanwhile
            _discard_segments(result)
            return 0
        install_cleaned_segments(partition_log, result)
        self._first_dirty[topic_partition] = plan.end_offset
        self.passes += 1
        log.info(
            "cleaned %s-%d up to offset %d: %d records removed, %d -> %d bytes",
            *topic_partition,
            plan.end_offset,
            result.records_removed,
            result.bytes_before,
            result.bytes_after,
        )
        return 1

    def _write_checkpoint(self) -> None:
        known = set(self._logs.topic_partitions())
        self._first_dirty = {tp: o for tp, o in self._first_dirty.items() if tp in known}
        write_offset_checkpoint(self._fs, self._checkpoint_path, self._first_dirty)

    async def stop(self) -> None:
        """Wait for a rewrite still running in its thread (the caller cancels run()), so the
        logs are not closed under it.
        """
        work = self._work
        if work is not None:
            with contextlib.suppress(BaseException):
                await work
            await asyncio.sleep(0)  # let its done callbacks run


def _discard(work: asyncio.Future[CleanedSegments]) -> None:
    if not work.cancelled() and work.exception() is None:
        _discard_segments(work.result())


def _discard_segments(result: CleanedSegments) -> None:
    for segment in result.segments:
        with contextlib.suppress(OSError):
            segment.delete()
