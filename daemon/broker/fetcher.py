"""Followers replicate by fetching from their leaders, like Kafka's replica fetcher threads.

One task per leader broker fetches, in one request, every partition this broker follows there:
first OffsetsForLeaderEpoch for partitions that must find where their log diverges (KIP-101/279),
then Fetch (with our replica id, so the leader tracks our LEO) for the rest. The leader holds
the fetch until it has new records or replica.fetch.wait.max.ms passes, so an idle follower
costs one request per wait, and a new batch reaches the followers at once. The replica state
machines decide everything; this module only moves their plans and the answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import FetchPlan, Replica, TruncationPlan
from rlog.daemon.broker.controller_link import ControllerLink
from rlog.daemon.broker.faults import Faults
from rlog.daemon.broker.replica_manager import ReplicaManager, TopicPartition, now_ms
from rlog.daemon.config import BrokerSettings
from rlog.daemon.wire import KafkaClient, WireError

log = logging.getLogger(__name__)

Body = dict[str, Any]
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


class ReplicaFetchers:
    def __init__(
        self,
        broker_id: int,
        replicas: ReplicaManager,
        link: ControllerLink,
        settings: BrokerSettings,
        faults: Faults | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.faults = faults
        self.replicas = replicas
        self.link = link
        self.settings = settings
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._regrouped: dict[int, asyncio.Event] = {}

    def regroup(self) -> None:
        """Partitions changed leader or role: make sure each leader we follow has a fetcher,
        and wake fetchers so their next request covers the new set."""
        for leader_id in {r.leader for r in self.replicas.replicas.values() if r.is_follower}:
            task = self._tasks.get(leader_id)
            if task is None or task.done():
                self._regrouped[leader_id] = asyncio.Event()
                self._tasks[leader_id] = asyncio.create_task(self._fetch_from(leader_id))
        for event in self._regrouped.values():
            event.set()

    def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()

    def _followed(self, leader_id: int) -> list[tuple[TopicPartition, Replica]]:
        return [
            (key, replica)
            for key, replica in self.replicas.replicas.items()
            if replica.is_follower and replica.leader == leader_id
        ]

    async def _fetch_from(self, leader_id: int) -> None:
        client: KafkaClient | None = None
        backoff_s = self.settings.replica_fetch_backoff_ms / 1000
        delayed: dict[TopicPartition, float] = {}  # partitions in error, until loop time
        loop = asyncio.get_running_loop()
        try:
            while followed := self._followed(leader_id):
                self._regrouped[leader_id].clear()
                broker = self.link.image.brokers.get(leader_id)
                if broker is None:
                    await asyncio.sleep(backoff_s)
                    continue
                if client is None or (client.host, client.port) != (broker.host, broker.port):
                    if client is not None:
                        client.close()
                    client = KafkaClient(
                        broker.host,
                        broker.port,
                        client_id=f"broker-{self.broker_id}-fetcher",
                        gate=self.faults.gate(f"broker-{leader_id}") if self.faults else None,
                    )
                now = loop.time()
                plans = [
                    (key, replica, plan)
                    for key, replica in followed
                    if delayed.get(key, 0) <= now
                    and (plan := replica.follower_fetch_request()) is not None
                ]
                if not plans:
                    await self._wait(leader_id, min(delayed.values(), default=now + 0.1) - now)
                    continue
                try:
                    failed = await self._round(client, plans)
                except WireError as error:
                    log.warning("fetching from broker %d: %s", leader_id, error)
                    client.close()
                    await self._wait(leader_id, backoff_s)
                    continue
                for key in failed:
                    delayed[key] = loop.time() + backoff_s
                for key in [k for k, until in delayed.items() if until <= loop.time()]:
                    del delayed[key]
        finally:
            if client is not None:
                client.close()

    async def _wait(self, leader_id: int, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._regrouped[leader_id].wait(), max(0.0, seconds))

    async def _round(
        self, client: KafkaClient, plans: list[tuple[TopicPartition, Replica, Any]]
    ) -> list[TopicPartition]:
        """One request to the leader; returns the partitions that got an error."""
        truncations = [(k, r, p) for k, r, p in plans if isinstance(p, TruncationPlan)]
        if truncations:
            return await self._find_divergence(client, truncations)
        fetches = [(k, r, p) for k, r, p in plans if isinstance(p, FetchPlan)]
        return await self._fetch(client, fetches)

    # ---- truncation ----

    async def _find_divergence(
        self, client: KafkaClient, plans: list[tuple[TopicPartition, Replica, TruncationPlan]]
    ) -> list[TopicPartition]:
        topics: dict[str, list[Body]] = {}
        for (topic, index), _, plan in plans:
            topics.setdefault(topic, []).append(
                {
                    "partition": index,
                    "current_leader_epoch": plan.current_leader_epoch,
                    "leader_epoch": plan.epoch,
                }
            )
        body = {
            "replica_id": self.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }
        answer = await client.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, body, timeout_s=self._timeout_s()
        )
        sent = {key: (replica, plan) for key, replica, plan in plans}
        failed = []
        for topic in answer["topics"]:
            for found in topic["partitions"]:
                key = (topic["topic"], found["partition"])
                if key not in sent:
                    continue
                replica, plan = sent[key]
                if found["error_code"] != ErrorCode.NONE:
                    failed.append(key)
                    continue
                effects = replica.on_epoch_end_offset(
                    found["leader_epoch"],
                    found["end_offset"],
                    leader_epoch=plan.current_leader_epoch,
                )
                self.replicas.handle_effects(effects)
        return failed

    # ---- fetch ----

    async def _fetch(
        self, client: KafkaClient, plans: list[tuple[TopicPartition, Replica, FetchPlan]]
    ) -> list[TopicPartition]:
        settings = self.settings
        topics: dict[str, list[Body]] = {}
        for (topic, index), _, plan in plans:
            topics.setdefault(topic, []).append(
                {
                    "partition": index,
                    "current_leader_epoch": plan.current_leader_epoch,
                    "fetch_offset": plan.fetch_offset,
                    "log_start_offset": plan.log_start_offset,
                    "partition_max_bytes": settings.replica_fetch_max_bytes,
                }
            )
        body = {
            "replica_id": self.broker_id,
            "max_wait_ms": settings.replica_fetch_wait_max_ms,
            "min_bytes": 1,
            "max_bytes": max(settings.replica_fetch_max_bytes, 10 * 1024 * 1024),
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        timeout_s = self._timeout_s() + settings.replica_fetch_wait_max_ms / 1000
        answer = await client.request(ApiKey.FETCH, 11, body, timeout_s=timeout_s)
        sent = {key: (replica, plan) for key, replica, plan in plans}
        failed = []
        for topic in answer["responses"]:
            for found in topic["partitions"]:
                key = (topic["topic"], found["partition_index"])
                if key not in sent:
                    continue
                replica, plan = sent[key]
                if not await self._apply(client, key, replica, plan, found):
                    failed.append(key)
        return failed

    async def _apply(
        self,
        client: KafkaClient,
        key: TopicPartition,
        replica: Replica,
        plan: FetchPlan,
        found: Body,
    ) -> bool:
        error = found["error_code"]
        epoch = plan.current_leader_epoch
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            start, end = await self._leader_offsets(client, key, epoch)
            self.replicas.handle_effects(
                replica.on_offset_out_of_range(start, end, leader_epoch=epoch)
            )
            return True
        if error != ErrorCode.NONE:
            log.info(
                "fetch of %s-%d from broker %d: %s",
                *key,
                plan.leader_id,
                ErrorCode(error).name,
            )
            return False
        records = found["records"] or b""
        now = now_ms()
        try:
            effects = replica.on_fetch_response(
                records, found["high_watermark"], found["log_start_offset"], now, leader_epoch=epoch
            )
            if records and replica.log.flush_due(now):
                replica.log.flush()
        except OSError as error:
            # A full or failing disk: this replica falls behind (and out of the ISR) until the
            # disk recovers; the leader still has everything.
            log.error("storage error replicating %s-%d: %s", *key, error)
            return False
        self.replicas.handle_effects(effects)
        if records:
            self.replicas.notify(key)
        return True

    async def _leader_offsets(
        self, client: KafkaClient, key: TopicPartition, epoch: int
    ) -> tuple[int, int]:
        """The leader's log start and log end offsets (ListOffsets as a replica)."""
        offsets = []
        for timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            body = {
                "replica_id": self.broker_id,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": key[0],
                        "partitions": [
                            {
                                "partition_index": key[1],
                                "current_leader_epoch": epoch,
                                "timestamp": timestamp,
                            }
                        ],
                    }
                ],
            }
            answer = await client.request(ApiKey.LIST_OFFSETS, 4, body, timeout_s=self._timeout_s())
            offsets.append(answer["topics"][0]["partitions"][0]["offset"])
        return offsets[0], offsets[1]

    def _timeout_s(self) -> float:
        return self.settings.replica_socket_timeout_ms / 1000
