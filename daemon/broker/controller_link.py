"""A broker's link to the controller: registration, heartbeats, the metadata log, and requests.

Like a KRaft broker: it registers (getting a broker epoch), heartbeats every
broker.heartbeat.interval.ms, and reads the metadata log `__cluster_metadata-0` from the
controller with long-polling Fetch, folding each record into its own MetadataImage. Every change
is handed to `on_metadata`. The fetch has a connection of its own, so a long poll never delays a
heartbeat. A broker whose epoch the controller no longer knows (it was fenced and expired, or the
controller lost its log) registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from rlog.core.controller.api import ReplicaLogEnd
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.log_store import METADATA_PARTITION, METADATA_TOPIC
from rlog.core.metadata.records import Endpoint, MetadataDecodeError, records_from_batches
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import AlterPartitionResponse, ProposeIsr
from rlog.daemon.config import BrokerSettings
from rlog.daemon.listeners import SECURITY_PROTOCOLS
from rlog.daemon.wire import Gate, KafkaClient, WireError

log = logging.getLogger(__name__)

Body = dict[str, Any]
METADATA_FETCH_MAX_WAIT_MS = 500
METADATA_FETCH_MAX_BYTES = 8 * 1024 * 1024
RETRY_BACKOFF_S = 0.2
# With --controller-starting (rlogd starts the controller beside the brokers), not reaching it
# this long after the start is not an outage worth a warning: it is still importing.
CONTROLLER_START_GRACE_S = 5.0
# Re-registration codes: the controller does not know this broker at this epoch.
_UNREGISTERED = (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED)

REGISTRATION_VERSION = 3  # the first with PreviousBrokerEpoch (KIP-966)
# How long a client's admin request waits for the controller before it is answered
# REQUEST_TIMED_OUT: a controller restarting is a pause, not a failure. Kafka's brokers keep a
# forwarded request as long (60 s) and send it again on each new connection to the controller.
FORWARD_RETRY_S = 60.0
FORWARD_PAUSE_S = (0.05, 1.0)  # between attempts: the first, and the most it doubles to


class ControllerLink:
    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        cluster_id: str,
        controller: tuple[str, int],
        settings: BrokerSettings,
        on_metadata: Callable[[], None],
        *,
        gate: Gate | None = None,
        previous_broker_epoch: int = -1,
        recovering_log_ends: Callable[[], list[ReplicaLogEnd]] = list,
        incarnation_id: uuid.UUID | None = None,
        listeners: Sequence[Endpoint] = (),
        tls: ssl.SSLContext | None = None,
        controller_starting: bool = False,
    ) -> None:
        """`gate`: chaos's hold on the link to the controller (see faults.py).
        `previous_broker_epoch`: the epoch of the last clean shutdown, -1 after a crash.
        `recovering_log_ends`: what to tell in each heartbeat (BrokerCore.recovering_log_ends).
        `listeners`: what the broker registers, its peers' listener (at `host`:`port`) first;
        none: one PLAINTEXT listener there. `tls`: the controller's listener speaks SSL.
        `controller_starting`: it starts at the same time as this broker, so it is not
        reported unreachable in its first CONTROLLER_START_GRACE_S.
        """
        self.listeners = tuple(listeners) or (Endpoint("PLAINTEXT", host, port, "PLAINTEXT"),)
        self.previous_broker_epoch = previous_broker_epoch
        self.recovering_log_ends = recovering_log_ends
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.cluster_id = cluster_id
        self.settings = settings
        self.on_metadata = on_metadata
        self.image = MetadataImage()
        self.broker_epoch: int | None = None
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.metadata_high_watermark = 0
        self.fenced = True
        self.should_shut_down = False
        self._want_shut_down = False
        self.want_fence = False  # the log dir failed: stay fenced (ask_to_be_fenced)
        self._requests = KafkaClient(
            *controller, client_id=f"broker-{broker_id}", gate=gate, tls=tls
        )
        self._fetches = KafkaClient(
            *controller, client_id=f"broker-{broker_id}-metadata", gate=gate, tls=tls
        )
        self._unreachable_since: float | None = None
        grace_s = CONTROLLER_START_GRACE_S if controller_starting else 0.0
        self._quiet_until = time.monotonic() + grace_s
        self._told_duplicate = False
        self._heartbeat_now = asyncio.Event()
        self._image_changed = asyncio.Event()

    @property
    def timeout_s(self) -> float:
        return self.settings.replica_socket_timeout_ms / 1000

    @property
    def caught_up(self) -> bool:
        """Registered, and the image holds every record the controller had committed when we
        last asked (what the controller's unfencing also checks)."""
        return (
            self.registered_in_image and self.image.last_offset + 1 >= self.metadata_high_watermark
        )

    @property
    def registered_in_image(self) -> bool:
        """The image has this process's own registration: before that, partition states in it
        were given to an earlier incarnation and must not be acted on."""
        me = self.image.brokers.get(self.broker_id)
        return self.broker_epoch is not None and me is not None and me.epoch == self.broker_epoch

    # ---- the two loops ----

    async def run(self) -> None:
        await asyncio.gather(self._heartbeat_loop(), self._metadata_loop())

    async def _heartbeat_loop(self) -> None:
        interval_s = self.settings.broker_heartbeat_interval_ms / 1000
        while True:
            self._heartbeat_now.clear()
            try:
                if self.broker_epoch is None:
                    await self._register()
                    if self.broker_epoch is not None and self.fenced and self.caught_up:
                        # The metadata fetch brought our registration before its answer came:
                        # ask to be unfenced now, not a heartbeat interval later.
                        self._heartbeat_now.set()
                else:
                    await self._heartbeat()
                self._reached()
            except WireError as error:
                self._unreachable(error)
            if self._heartbeat_now.is_set() and self.broker_epoch is not None:
                continue  # asked for while the last request was out
            wait_s = interval_s if self.broker_epoch is not None else RETRY_BACKOFF_S
            if self._want_shut_down:
                wait_s = min(wait_s, 0.1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), wait_s)

    def _unreachable(self, error: WireError) -> None:
        """Say so once per outage, not at every retry."""
        if self._unreachable_since is None and time.monotonic() < self._quiet_until:
            log.debug("the controller does not answer yet (starting): %s", error)
            return
        if self._unreachable_since is None:
            self._unreachable_since = time.monotonic()
            log.warning("controller unreachable: %s", error)

    def _reached(self) -> None:
        if self._unreachable_since is not None:
            outage_s = time.monotonic() - self._unreachable_since
            log.info("controller reachable again after %.1f s", outage_s)
            self._unreachable_since = None

    async def _register(self) -> None:
        body = {
            "broker_id": self.broker_id,
            "cluster_id": self.cluster_id,
            "incarnation_id": self.incarnation_id,
            "listeners": [
                {
                    "name": endpoint.name,
                    "host": endpoint.host,
                    "port": endpoint.port,
                    "security_protocol": SECURITY_PROTOCOLS[endpoint.security_protocol],
                }
                for endpoint in self.listeners
            ],
            "features": [],
            "rack": None,
            "is_migrating_zk_broker": False,
            "log_dirs": [],
            "previous_broker_epoch": self.previous_broker_epoch,
        }
        answer = await self._requests.request(
            ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION, body, timeout_s=self.timeout_s
        )
        error = answer["error_code"]
        if error == ErrorCode.DUPLICATE_BROKER_REGISTRATION:
            if not self._told_duplicate:
                log.warning(
                    "the controller refuses to register broker %d: a broker with this id has a "
                    "live session (this broker's previous process, until broker.session.timeout"
                    ".ms expires it, or another broker with the same id); retrying",
                    self.broker_id,
                )
                self._told_duplicate = True
            return
        if error != ErrorCode.NONE:
            log.error("the controller refused registration: %s", ErrorCode(error).name)
            return
        self.broker_epoch = answer["broker_epoch"]
        log.info("registered with the controller: broker epoch %d", self.broker_epoch)
        self.on_metadata()

    async def _heartbeat(self) -> None:
        body = {
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "current_metadata_offset": self.image.last_offset,
            "want_fence": self.want_fence,
            "want_shut_down": self._want_shut_down,
            "recovering_replicas": [
                {
                    "topic_name": told.topic,
                    "partition_index": told.partition,
                    "last_leader_epoch": told.last_epoch,
                    "log_end_offset": told.end_offset,
                }
                for told in self.recovering_log_ends()
            ],
        }
        answer = await self._requests.request(
            ApiKey.BROKER_HEARTBEAT, 0, body, timeout_s=self.timeout_s
        )
        error = answer["error_code"]
        if error in _UNREGISTERED:
            log.warning(
                "the controller no longer knows epoch %s: registering again", self.broker_epoch
            )
            self.broker_epoch = None
            self._heartbeat_now.set()
            return
        if error != ErrorCode.NONE:
            log.warning("heartbeat refused: %s", ErrorCode(error).name)
            return
        if self.fenced != answer["is_fenced"]:
            log.info("broker is %s", "fenced" if answer["is_fenced"] else "unfenced")
        self.fenced = answer["is_fenced"]
        self.should_shut_down = answer["should_shut_down"]

    async def _metadata_loop(self) -> None:
        while True:
            try:
                await self._fetch_metadata()
            except WireError as error:
                self._unreachable(error)
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _fetch_metadata(self) -> None:
        fetch_offset = self.image.last_offset + 1
        body = {
            "replica_id": self.broker_id,
            "max_wait_ms": METADATA_FETCH_MAX_WAIT_MS,
            "min_bytes": 1,
            "max_bytes": METADATA_FETCH_MAX_BYTES,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": METADATA_TOPIC,
                    "partitions": [
                        {
                            "partition": METADATA_PARTITION,
                            "current_leader_epoch": -1,
                            "fetch_offset": fetch_offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": METADATA_FETCH_MAX_BYTES,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        timeout_s = self.timeout_s + METADATA_FETCH_MAX_WAIT_MS / 1000
        answer = await self._fetches.request(ApiKey.FETCH, 11, body, timeout_s=timeout_s)
        partition = answer["responses"][0]["partitions"][0]
        error = partition["error_code"]
        if error != ErrorCode.NONE:
            log.error("metadata fetch at offset %d: %s", fetch_offset, ErrorCode(error).name)
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        applied = 0
        try:
            for offset, record in records_from_batches(partition["records"] or b""):
                if offset == self.image.last_offset + 1:
                    self.image.apply(offset, record)
                    applied += 1
        except MetadataDecodeError as problem:
            log.error(
                "unreadable metadata record after offset %d: %s", self.image.last_offset, problem
            )
            await asyncio.sleep(RETRY_BACKOFF_S)
        self.metadata_high_watermark = partition["high_watermark"]
        if applied or self.caught_up:
            self.on_metadata()
        if applied and self.fenced and self.caught_up:
            self._heartbeat_now.set()  # we can be unfenced now: say so without waiting
        if applied:
            self._image_changed.set()
            self._image_changed = asyncio.Event()

    async def wait_for_image(
        self, check: Callable[[MetadataImage], bool], timeout_s: float
    ) -> bool:
        """Wait until `check(image)` holds (or the time is up); returns whether it does."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not check(self.image):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._image_changed.wait(), remaining)
            except TimeoutError:
                return check(self.image)
        return True

    # ---- requests to the controller ----

    async def forward(
        self,
        api_key: ApiKey,
        version: int,
        body: Body,
        timeout_s: float,
        *,
        retry_for_s: float = 0.0,
    ) -> Body:
        """A client's admin request, passed on as it came. Each attempt waits up to `timeout_s`
        for the answer; one that gets none (the controller down, restarting, slow or cut off)
        is made again, on a new connection, until `retry_for_s` have passed since the first:
        then WireError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + retry_for_s
        pause_s = FORWARD_PAUSE_S[0]
        while True:
            attempt_s = timeout_s if not retry_for_s else min(timeout_s, deadline - loop.time())
            try:
                return await self._requests.request(
                    api_key, version, body, timeout_s=max(attempt_s, 0.001)
                )
            except WireError as error:
                if loop.time() + pause_s >= deadline:
                    raise
                if pause_s == FORWARD_PAUSE_S[0]:
                    log.info(
                        "no answer from the controller to %s (%s); trying again for up to %.0f s",
                        api_key.name,
                        error,
                        deadline - loop.time(),
                    )
            await asyncio.sleep(pause_s)
            pause_s = min(pause_s * 2, FORWARD_PAUSE_S[1])

    async def alter_partition(self, proposal: ProposeIsr) -> AlterPartitionResponse:
        if self.broker_epoch is None:
            return AlterPartitionResponse(ErrorCode.STALE_BROKER_EPOCH)
        body = {
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "topics": [
                {
                    "topic_name": proposal.topic,
                    "partitions": [
                        {
                            "partition_index": proposal.partition,
                            "leader_epoch": proposal.leader_epoch,
                            "new_isr": list(proposal.new_isr),
                            "leader_recovery_state": 0,
                            "partition_epoch": proposal.partition_epoch,
                        }
                    ],
                }
            ],
        }
        try:
            answer = await self._requests.request(
                ApiKey.ALTER_PARTITION, 1, body, timeout_s=self.timeout_s
            )
        except WireError as error:
            log.warning("AlterPartition for %s-%d: %s", proposal.topic, proposal.partition, error)
            return AlterPartitionResponse(ErrorCode.REQUEST_TIMED_OUT)
        if answer["error_code"] != ErrorCode.NONE:
            return AlterPartitionResponse(ErrorCode(answer["error_code"]))
        found = answer["topics"][0]["partitions"][0]
        return AlterPartitionResponse(
            ErrorCode(found["error_code"]),
            found["leader_id"],
            found["leader_epoch"],
            tuple(found["isr"]),
            found["partition_epoch"],
        )

    async def allocate_producer_ids(self) -> tuple[int, int]:
        """A block of producer ids: (first id, count). WireError/RuntimeError if none."""
        if self.broker_epoch is None:
            raise RuntimeError("not registered with the controller yet")
        body = {"broker_id": self.broker_id, "broker_epoch": self.broker_epoch}
        answer = await self._requests.request(
            ApiKey.ALLOCATE_PRODUCER_IDS, 0, body, timeout_s=self.timeout_s
        )
        if answer["error_code"] != ErrorCode.NONE:
            raise RuntimeError(f"controller: {ErrorCode(answer['error_code']).name}")
        return answer["producer_id_start"], answer["producer_id_len"]

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask the controller to move our leaderships away before we stop (Kafka's controlled
        shutdown); True once it says we may go, False if it did not in time."""
        if self.broker_epoch is None:
            return True
        self._want_shut_down = True
        self._heartbeat_now.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.should_shut_down and loop.time() < deadline:
            await asyncio.sleep(0.05)
        return self.should_shut_down

    def ask_to_be_fenced(self) -> None:
        """The log dir failed: ask in every heartbeat from now on, the next one at once. The
        controller moves this broker's leaderships and ISR places away, then fences it."""
        self.want_fence = True
        self._heartbeat_now.set()

    def close(self) -> None:
        self._requests.close()
        self._fetches.close()
