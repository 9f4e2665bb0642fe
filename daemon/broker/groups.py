"""The broker's group coordinator: core's `GroupCoordinator` wired to requests, the
`__consumer_offsets` replicas and the clock.

- Requests wait on a future per token until the coordinator answers (a JoinGroup may wait a
  whole rebalance).
- `Append` effects become acks=all appends to the local leader of that `__consumer_offsets`
  partition; the outcome goes back as `append_done`.
- Leadership decides ownership: when this broker becomes leader of an offsets partition it
  replays the partition's log into the coordinator; when it stops leading it unloads it.
- `__consumer_offsets` is created on the first FindCoordinator, as Kafka does: compacted,
  `offsets.topic.num.partitions` partitions, `offsets.topic.replication.factor` replicas (capped
  by the brokers that are up).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from rlog.core.broker import OFFSETS_TOPIC
from rlog.core.groups import (
    Append,
    Caller,
    Effect,
    GroupConfig,
    GroupCoordinator,
    GroupEvent,
    Respond,
    group_partition,
)
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch, decode_batch, iter_batches
from rlog.core.storage.log import Log
from rlog.daemon.broker.controller_link import ControllerLink
from rlog.daemon.broker.core_driver import BrokerDriver, now_ms
from rlog.daemon.config import BrokerSettings
from rlog.daemon.wire import WireError

log = logging.getLogger(__name__)

Body = dict[str, Any]
GROUP_KEY_TYPE = 0
WRITE_TIMEOUT_MS = 5_000  # Kafka's offsets.commit.timeout.ms
LOAD_READ_BYTES = 1024 * 1024
CREATE_WAIT_S = 2.0


class GroupService:
    def __init__(
        self,
        broker_id: int,
        settings: BrokerSettings,
        driver: BrokerDriver,
        link: ControllerLink,
    ) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.driver = driver
        self.link = link
        # Until __consumer_offsets exists it owns nothing: every group gets NOT_COORDINATOR.
        self.coordinator = self._new_coordinator(settings.offsets_topic_num_partitions)
        self._waiting: dict[int, asyncio.Future[Body]] = {}
        self._tokens = itertools.count(1)
        self._led: set[int] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._creating: asyncio.Task[None] | None = None
        self._metadata_read = False  # this broker has read the metadata log to its end once

    # ---- ownership ---------------------------------------------------------------------

    def on_metadata(self) -> None:
        """After the replicas took a metadata change: load or unload offsets partitions."""
        # Once caught up it stays "read": later records only trail by a fetch, and refusing
        # FindCoordinator whenever an ISR change is in flight would stall every client.
        self._metadata_read = self._metadata_read or self.link.caught_up
        topic = self.link.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            for partition in sorted(self._led):
                self._run(self.coordinator.unload(partition))
            self._led = set()
            return
        if self.coordinator.config.offsets_partitions != len(topic.partitions):
            # The topic was made elsewhere with another partition count: the groups' homes
            # follow the topic as it is.
            for partition in sorted(self._led):
                self._run(self.coordinator.unload(partition))
            self.coordinator = self._new_coordinator(len(topic.partitions))
            self._led = set()
        coordinator = self.coordinator
        for partition in sorted(topic.partitions):
            replica = self.driver.core.replica(OFFSETS_TOPIC, partition)
            leads = replica is not None and replica.is_leader
            if leads and partition not in self._led:
                assert replica is not None
                self._run(coordinator.start_loading(partition))
                started = time.monotonic()
                summary = coordinator.finish_loading(
                    partition, _read_records(replica.log), now_ms()
                )
                self._led.add(partition)
                log.info(
                    "coordinator for %s-%d (leader epoch %d): loaded %d groups, %d offsets "
                    "in %.0f ms%s",
                    OFFSETS_TOPIC,
                    partition,
                    replica.leader_epoch,
                    summary.groups,
                    summary.offsets,
                    (time.monotonic() - started) * 1000,
                    f", skipped {summary.corrupt_records} corrupt records"
                    if summary.corrupt_records
                    else "",
                )
            elif not leads and partition in self._led:
                self._led.discard(partition)
                self._run(coordinator.unload(partition))
                log.info("no longer coordinator for %s-%d", OFFSETS_TOPIC, partition)

    def _new_coordinator(self, partitions: int) -> GroupCoordinator:
        settings = self.settings
        config = GroupConfig(
            offsets_partitions=partitions,
            min_session_timeout_ms=settings.group_min_session_timeout_ms,
            max_session_timeout_ms=settings.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
            max_group_size=settings.group_max_size,
            offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
        )
        return GroupCoordinator(config, _new_member_id)

    def tick(self) -> None:
        self._run(self.coordinator.tick(now_ms()))

    # ---- FindCoordinator ---------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: int) -> tuple[ErrorCode, str | None, Body]:
        """(error, message, {node_id, host, port}) for one coordinator key."""
        nowhere = {"node_id": -1, "host": "", "port": -1}
        if key_type != GROUP_KEY_TYPE:
            message = "transaction coordinators are not supported by this broker yet"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        if not key:
            return ErrorCode.INVALID_REQUEST, "empty group id", nowhere
        if not self._metadata_read:
            # A restarted broker's image may still name it leader of partitions it lost.
            message = "this broker is still reading the cluster metadata"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        image = self.link.image
        if OFFSETS_TOPIC not in image.topics:
            await self._create_offsets_topic()
            image = self.link.image
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {OFFSETS_TOPIC}", nowhere
        partition = group_partition(key, len(topic.partitions))
        info = topic.partitions.get(partition)
        broker = image.brokers.get(info.leader) if info is not None else None
        if broker is None or not image.is_live(broker.broker_id):
            message = f"{OFFSETS_TOPIC}-{partition} has no leader"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        return (
            ErrorCode.NONE,
            None,
            {"node_id": broker.broker_id, "host": broker.host, "port": broker.port},
        )

    async def _create_offsets_topic(self) -> None:
        # One creation at a time per broker; concurrent callers wait for the same attempt.
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_offsets_topic_once())
        await asyncio.shield(self._creating)

    async def _create_offsets_topic_once(self) -> None:
        settings = self.settings
        live = len(self.link.image.live_brokers())
        replication = max(1, min(settings.offsets_topic_replication_factor, live))
        segment_bytes = settings.offsets_topic_segment_bytes
        body = {
            "topics": [
                {
                    "name": OFFSETS_TOPIC,
                    "num_partitions": settings.offsets_topic_num_partitions,
                    "replication_factor": replication,
                    "assignments": [],
                    "configs": [
                        {"name": "cleanup.policy", "value": "compact"},
                        {"name": "segment.bytes", "value": str(segment_bytes)},
                    ],
                }
            ],
            "timeout_ms": 5000,
            "validate_only": False,
        }
        log.info("creating %s with replication factor %d", OFFSETS_TOPIC, replication)
        try:
            timeout_s = settings.replica_socket_timeout_ms / 1000
            await self.link.forward(ApiKey.CREATE_TOPICS, 4, body, timeout_s)
        except WireError as error:
            log.warning("creating %s: %s", OFFSETS_TOPIC, error)
            return
        await self.link.wait_for_image(_offsets_topic_led, CREATE_WAIT_S)

    # ---- requests ---------------------------------------------------------------------------

    async def call(
        self,
        method: str,
        body: Body,
        version: int,
        client_id: str | None,
        client_host: str,
        *,
        timed: bool = True,
    ) -> Body:
        """Hand one request to the coordinator's `method` (join_group, commit_offsets, ...)
        and wait for its answer."""
        token = next(self._tokens)
        future: asyncio.Future[Body] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        caller = Caller(token, version, client_id or "", client_host)
        handle: Callable[..., list[Effect]] = getattr(self.coordinator, method)
        try:
            self._run(handle(caller, body, now_ms()) if timed else handle(caller, body))
            return await future
        finally:
            self._waiting.pop(token, None)

    def _run(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                future = self._waiting.pop(effect.token, None)
                if future is not None and not future.done():
                    future.set_result(effect.body)
            elif isinstance(effect, Append):
                task = asyncio.ensure_future(self._append(self.coordinator, effect))
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            elif isinstance(effect, GroupEvent):
                log.info("%s", effect.message)
                journal = self.driver.journal
                if journal is not None:
                    journal.record(
                        effect.kind,
                        effect.message,
                        group=effect.group_id,
                        generation=effect.generation,
                        broker=self.broker_id,
                    )

    async def _append(self, coordinator: GroupCoordinator, effect: Append) -> None:
        """Write for `coordinator` (the one that asked, even if a newer one replaced it since)
        and tell it how the write ended."""
        now = now_ms()
        batch = build_batch(list(effect.records), base_timestamp=now)
        key = (OFFSETS_TOPIC, effect.partition)
        try:
            answer = await self.driver.append(*key, batch, -1, WRITE_TIMEOUT_MS)
            error = answer.error
        except Exception:  # the coordinator must hear back, or its clients wait forever
            log.exception("coordinator write to %s-%d failed", *key)
            error = ErrorCode.UNKNOWN_SERVER_ERROR
        self._run(coordinator.append_done(effect.append_id, error, now_ms()))

    def close(self) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.cancel()
        for task in self._background:
            task.cancel()


def _offsets_topic_led(image: MetadataImage) -> bool:
    topic = image.topics.get(OFFSETS_TOPIC)
    return topic is not None and all(p.leader >= 0 for p in topic.partitions.values())


def _new_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"  # Kafka's form: the client id and a UUID


def _read_records(log_: Log) -> Iterator[tuple[bytes, bytes | None]]:
    """Every keyed record of a partition's log, oldest first, for a coordinator to replay."""
    offset = log_.log_start_offset
    end = log_.log_end_offset
    while offset < end:
        found = log_.read(offset, LOAD_READ_BYTES, end).records
        if found is None:
            return
        data = found.read()
        for position, header in iter_batches(data):
            offset = header.last_offset + 1
            if header.is_control:
                continue
            for record in decode_batch(data, position):
                if record.key is not None:
                    yield record.key, record.value
