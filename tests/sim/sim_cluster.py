"""The deterministic simulation of rlog's brokers (ARCHITECTURE.md, "The simulator").

One seed builds everything: a virtual clock, a virtual network (seeded delay, loss, duplication,
hence reordering, and cut links), a controller on its own in-memory disk, three brokers each
running the shipped `BrokerCore` on its own `SimFileSystem`, an acks=all producer of numbered
values, and the model consumers of one group (sim_groups.py). The harness plays only the
daemons' part: registration, heartbeats, metadata fetches, FindCoordinator, ApiVersions, moving
requests and answers (Kafka's message bodies; file slices read as sendfile would send them), and
doing each Ready in order. After every step it checks the invariants we promise (ARCHITECTURE.md,
"Invariants"): I1/I2 (acked values stay at their offsets in the leader), I10 (replicas agree
below their HWs), I3 (a leader's HW never moves back in its epoch; the HW a consumer can see from
the current leader never moves back), one leader per leader epoch, I9 (acknowledged group
commits survive coordinator failover) and the group's generation surviving it; after the faults
end, I11: everything settles and a last produce is acknowledged.

Faults, chosen by the seed, one at a time and each for a bounded time (the premise of the promise:
fewer than min.insync replicas fail): broker crash (kill -9, or power loss that drops unsynced bytes
and may tear one file), restart, pause (SIGSTOP: messages queue, timers freeze), isolating one
broker (all its links, or only to the controller, or only to the other brokers), controller
crash/restart, a paused controller (5 or 15 s, well past the brokers' sessions: it must not fence
them for its own absence), a failing disk (mostly the leader's: every write, fsync and truncation
fails with EIO; on half of them the broker takes its log dir offline, as the daemon does, and
restarts once the disk heals), and every process crashing at once (a power loss when the seed's
topics fsync every message, flush.messages=1, as Kafka promises nothing to a correlated power loss
without it; else a kill -9 of all, after which every broker restarts uncleanly and the partitions
recover with the longest log); group clients crashing, leaving and joining; and always-on message
delay/drop/duplication/reordering at seeded rates. Each broker start serves Fetch up to v11 or v12,
so followers use both, chosen from their leader's ApiVersions as the daemon's are.

Not modelled: consumers of records (their view of the HW is read from the leader), idempotence
and transactions, retention and log start offsets moving, metadata-only brokers' own metadata
caches on disk, more than one controller, clock skew. The producer learns the leader from the
controller's committed image (a metadata refresh), not through a broker.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim_consumer_groups import (
    CONSUMERS,
    ConsumerGroupModel,
)
from sim_consumer_groups import HEARTBEAT_INTERVAL_MS as CONSUMER_HEARTBEAT_INTERVAL_MS
from sim_consumer_groups import SESSION_TIMEOUT_MS as CONSUMER_SESSION_TIMEOUT_MS
from sim_fs import SimFileSystem
from sim_groups import GROUPS, OFFSETS_PARTITIONS, GroupModel
from sim_txns import (
    TXN_STATE_PARTITIONS,
    TXN_TOPIC,
    TXN_TOPIC_PARTITIONS,
    TXNS,
    TxnModel,
    TxnViolation,
)

from rlog.core.broker import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    Body,
    BrokerConfig,
    BrokerCore,
    ClientRequest,
    Event,
    MetadataChanged,
    PeerAnswered,
    ProducerIdsGranted,
    ProposalAnswered,
)
from rlog.core.broker.messages import LogDirFailed
from rlog.core.controller import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerProcessExitedRequest,
    Controller,
    ControllerConfig,
    CreateTopicsRequest,
    NewTopic,
    RegisterBrokerRequest,
)
from rlog.core.groups import GroupConfig
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.log_store import append_records, metadata_log_config, read_records
from rlog.core.protocol.apis import SUPPORTED, ApiKey, api_versions_body
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch, decode_batch, iter_batches
from rlog.core.replication import AlterPartitionResponse, ProposeIsr, Replica
from rlog.core.storage import log as storage_log
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FileSlice
from rlog.core.storage.log import Log
from rlog.core.transactions import TxnConfig

TOPIC = "t"
BROKERS = (1, 2, 3)
CONTROLLER = "c"
SUPERVISOR = "rlogd"  # tells the controller of a broker's exit (a pipe: never cut)
PRODUCER = "p"
SESSION_TIMEOUT_MS = 2_000
LAG_TIME_MAX_MS = 1_000
HEARTBEAT_MS = 250
PRODUCE_TIMEOUT_MS = 1_500  # the broker's acks=all wait (the request's timeout)
CLIENT_TIMEOUT_MS = 2_500  # the producer gives up waiting for an answer: indeterminate
REQUEST_TIMEOUT_MS = 1_000  # broker-to-broker and broker-to-controller requests
FETCH_MAX_BYTES = 64 * 1024
FETCH_WAIT_MAX_MS = 100  # how long a leader holds a follower's fetch with nothing new
LOG_CONFIG = LogConfig(segment_bytes=4096)
# The brokers copy their producer state in memory every 1024 batches, so that cutting a short
# divergent tail replays a few batches; segments this small roll (and snapshot) long before
# that, so copy every few batches here to put restores from the copies under the faults too.
storage_log.PRODUCER_MARK_BATCHES = 4
storage_log.PRODUCER_MARK_BATCHES_PER_PRODUCER = 1
FAULT_KINDS = (
    *("crash", "crash", "pause", "isolate", "cut-controller", "cut-peers", "controller"),
    *("disk-fail", "crash-all", "pause-controller"),
)
TICK_MS = 50  # how often a broker's core hears the time (the daemon's TICK_INTERVAL_MS)
METADATA_CHUNK = 200  # metadata records per answer to a broker's metadata fetch
PRODUCE_VERSION = 9
# Produce answers that say the value was not written (no append happened).
NOT_WRITTEN = {
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
}


class InvariantViolation(AssertionError):
    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


@dataclass(frozen=True)
class SimOptions:
    steps: int = 1200
    partitions: int = 1
    step_ms_max: int = 25
    heal_ms_max: int = 30_000
    fault_rate: float = 0.03  # chance per step that a fault starts, when the cluster is healthy
    # The newest Fetch version each broker serves, picked per broker start from these: (11, 12)
    # mixes releases, so followers use v12 (last_fetched_epoch, DivergingEpoch answers) or v11
    # by what their leader answers to ApiVersions, as the daemon's do.
    fetch_versions: tuple[int, ...] = (11, 12)
    # Check that the HW the current leader shows consumers never moves back (I3, overall).
    check_visible_hw: bool = True


# ---- the network ----


@dataclass(order=True)
class Envelope:
    deliver_ms: int
    sequence: int
    src: Any = field(compare=False)
    dst: Any = field(compare=False)
    kind: str = field(compare=False)
    body: Any = field(compare=False)


class Network:
    def __init__(self, rng: random.Random, trace: Callable[[str], None]) -> None:
        self.rng = rng
        self.trace = trace
        self.queue: list[Envelope] = []
        self.sequence = 0
        self.cut: set[tuple[Any, Any]] = set()  # directed links that lose everything
        self.drop_rate = rng.choice((0.0, 0.01, 0.03, 0.08))
        self.duplicate_rate = rng.choice((0.0, 0.0, 0.01, 0.03))
        self.delay_ms_max = rng.choice((2, 10, 40, 120))
        self.now_ms = 0

    def send(self, src: Any, dst: Any, kind: str, body: Any) -> None:
        copies = 2 if self.rng.random() < self.duplicate_rate else 1
        for _ in range(copies):
            if (src, dst) in self.cut or self.rng.random() < self.drop_rate:
                continue
            self.sequence += 1
            deliver_ms = self.now_ms + self.rng.randint(1, self.delay_ms_max)
            heapq.heappush(self.queue, Envelope(deliver_ms, self.sequence, src, dst, kind, body))

    def due(self, now_ms: int) -> list[Envelope]:
        out = []
        while self.queue and self.queue[0].deliver_ms <= now_ms:
            envelope = heapq.heappop(self.queue)
            if (envelope.src, envelope.dst) not in self.cut:  # cut while in flight: lost
                out.append(envelope)
        return out

    def heal(self) -> None:
        self.cut.clear()
        self.drop_rate = self.duplicate_rate = 0.0


# ---- the controller process ----


class ControllerNode:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.fs = SimFileSystem()
        self.config = ControllerConfig(
            broker_session_timeout_ms=SESSION_TIMEOUT_MS,
            default_replication_factor=3,
            min_insync_replicas_default=2,
            auto_leader_rebalance_enable=sim.rng.random() < 0.5,
            leader_imbalance_check_interval_ms=5_000,
        )
        self.alive = False
        self.paused_until: int | None = None  # SIGSTOP: requests queue, ticks stop
        self.controller: Controller | None = None
        self.log: Log | None = None
        self.committed: list[tuple[int, Any]] = []
        self.start()

    def start(self) -> None:
        now_ms = self.sim.now_ms
        path = "/controller/__cluster_metadata-0"
        self.fs.makedirs("/controller")
        self.log = Log(
            path,
            metadata_log_config(),
            self.fs,
            recovery_point=0,
            log_start_offset=0,
            now_ms=now_ms,
        )
        self.committed = read_records(self.log, 0)
        image = MetadataImage()
        for offset, record in self.committed:
            image.apply(offset, record)
        self.controller = Controller(self.config, image, self.log.log_end_offset)
        self.alive = True

    def crash(self, power_loss: bool) -> None:
        self.alive = False
        self.paused_until = None
        self.controller = self.log = None
        self.fs.crash(self.sim.rng, power_loss=power_loss)

    def receive(self, envelope: Envelope) -> None:
        assert self.controller is not None
        if envelope.kind == "request":
            self.controller.step(envelope.body, self.sim.now_ms)
        elif envelope.kind == "metadata":  # a broker fetches committed records from an offset
            start = envelope.body
            index = next((i for i, (o, _) in enumerate(self.committed) if o >= start), None)
            records = self.committed[index:] if index is not None else []
            self.sim.network.send(CONTROLLER, envelope.src, "metadata", records[:METADATA_CHUNK])

    def tick(self) -> None:
        assert self.controller is not None and self.log is not None
        now_ms = self.sim.now_ms
        self.controller.tick(now_ms)
        while self.controller.has_ready():
            ready = self.controller.ready()
            offsets = append_records(self.log, ready.records, now_ms, base_offset=ready.base_offset)
            self.controller.advance(ready)
            for offset, record in zip(offsets, ready.records, strict=True):
                self.committed.append((offset, record))
                self.sim.trace(f"meta {offset} {record!r}")
            for token, response in ready.responses:
                if token[0] != "admin":
                    self.sim.network.send(CONTROLLER, token[0], "response", (token, response))

    def partition(self, partition: int, topic: str = TOPIC) -> Any:
        return self.controller.image.partition(topic, partition) if self.controller else None


# ---- a broker process ----


class BrokerNode:
    """One broker process: the shipped `BrokerCore` and what its daemon does around it. The
    harness plays the daemon's part only: registration and heartbeats, reading the metadata log,
    carrying requests and answers, answering ApiVersions, and doing each Ready in order (syncs,
    then requests and proposals, then responses). Every broker rule runs in the core."""

    def __init__(self, sim: Simulation, broker_id: int) -> None:
        self.sim = sim
        self.broker_id = broker_id
        self.fs = SimFileSystem()
        self.incarnation = 0
        self.alive = False
        self.paused_until: int | None = None
        self.start()

    # ---- process lifecycle ----

    def start(self) -> None:
        self.incarnation += 1
        self.alive = True
        self.paused_until = None
        # As the broker daemon: a write the disk refuses takes the log dir offline (the core
        # fences itself through its heartbeats) until the disk heals and the broker restarts.
        # Set per disk fault, so the core's other path (each write answered with an error, the
        # dir kept) stays covered too.
        self.offline_on_failure = False
        self._disk_failures_at_start = self.fs.failures
        self.broker_epoch: int | None = None
        self.image = MetadataImage()
        self.metadata_caught_up = False
        # A broker of an older release (Fetch up to v11) or of this one (v12), by seed: followers
        # pick their Fetch version from the leader's ApiVersions, as the daemon's do.
        self.fetch_version_max = self.sim.rng.choice(self.sim.fetch_versions)
        member_ids = iter(range(1, 2**31))
        self.core = BrokerCore(
            self.sim.broker_config(self.broker_id),
            "/data",
            self.fs,
            self.sim.now_ms,
            new_member_id=lambda client: (
                f"{client}-b{self.broker_id}.{self.incarnation}-{next(member_ids)}"
            ),
        )
        self.alters: dict[Any, Any] = {}  # AlterPartition token -> the core's proposal token
        self.producer_ids_deadline_ms: int | None = None  # a block request is out until then
        self.register_deadline_ms = -1
        self.next_heartbeat_ms = self.sim.now_ms
        self.next_tick_ms = self.sim.now_ms
        self.requests = 0
        self.unsettled = False  # events stepped since the core last settled

    def crash(self, power_loss: bool) -> None:
        """kill -9 (the OS keeps what was written) or power loss (only what was synced stays)."""
        self.alive = False
        for replica in self.core.replicas.values():
            replica.log.close()
        self.fs.crash(self.sim.rng, power_loss=power_loss)

    @property
    def incarnation_id(self) -> str:
        """This process's id as it registers (each restart is a new incarnation)."""
        return f"b{self.broker_id}-{self.incarnation}"

    @property
    def replicas(self) -> dict[int, Replica]:
        return {index: r for (topic, index), r in self.core.replicas.items() if topic == TOPIC}

    def _token(self) -> tuple[Any, ...]:
        self.requests += 1
        return (self.broker_id, self.incarnation, self.requests)

    def _send(self, dst: Any, kind: str, body: Any) -> None:
        self.sim.network.send(self.broker_id, dst, kind, body)

    # ---- the daemon's loop: step the core, then do its Ready ----

    def step(self, event: Event) -> None:
        """As the daemon's driver: the core settles (and its Ready is done) once everything
        delivered at this instant has been stepped, in `settle`, not after each event. A write
        that failed the log dir is stepped in before the next event, as the driver does."""
        if self._log_dir_failed():
            self.core.step(LogDirFailed("a simulated disk failure"), self.sim.now_ms, settle=False)
        self.core.step(event, self.sim.now_ms, settle=False)
        self.unsettled = True

    def _log_dir_failed(self) -> bool:
        """A write failed since the start, and the daemon would take the dir offline for it."""
        return (
            self.offline_on_failure
            and self.core.offline is None
            and self.fs.failures > self._disk_failures_at_start
        )

    def settle(self) -> None:
        if self.unsettled:
            self.unsettled = False
            self.core.settle(self.sim.now_ms)
            self._drain()

    def _drain(self) -> None:
        core = self.core
        while core.has_ready():
            ready = core.ready()
            failed = []
            for sync in ready.syncs:
                try:
                    core.sync(sync)
                except OSError:  # the daemon logs it and tells the core, as here
                    self.sim.trace(f"b{self.broker_id} fsync of {sync} failed")
                    failed.append(sync)
            for request in ready.peer_requests:
                body = (request.token, request.api_key, request.api_version, request.body)
                self._send(request.broker_id, "peer_request", body)
            for proposal in ready.proposals:
                self._propose(proposal.token, proposal.proposal)
            if ready.wants_producer_ids:
                self._ask_producer_ids()
            for token, answer in ready.responses:
                self._respond(token, answer)
            if ready.checkpoints:
                try:
                    core.write_checkpoints()
                except OSError:
                    self.sim.trace(f"b{self.broker_id} writing checkpoints failed")
            for truncated in ready.truncations:
                self.sim.trace(f"b{self.broker_id} {truncated!r}")
            for message in ready.log_messages:
                self.sim.trace(f"b{self.broker_id} {message}")
            for event in ready.group_events:
                self.sim.trace(f"b{self.broker_id} {event.message}")
            for txn_event in ready.txn_events:
                self.sim.trace(f"b{self.broker_id} {txn_event.message}")
            core.advance(ready, failed_syncs=failed)
        if self._log_dir_failed():
            self.core.step(LogDirFailed("a simulated disk failure"), self.sim.now_ms)
            self._drain()

    def _ask_producer_ids(self) -> None:
        """AllocateProducerIds to the controller; a lost answer counts as a failure once the
        request times out, as the daemon's does."""
        self.producer_ids_deadline_ms = self.sim.now_ms + REQUEST_TIMEOUT_MS
        epoch = self.broker_epoch if self.broker_epoch is not None else -1
        self._send(
            CONTROLLER, "request", AllocateProducerIdsRequest(self._token(), self.broker_id, epoch)
        )

    def _propose(self, core_token: Any, proposal: ProposeIsr) -> None:
        self.sim.trace(f"b{self.broker_id} {proposal!r}")
        token = self._token()
        self.alters[token] = core_token
        request = AlterPartitionRequest(
            token,
            self.broker_id,
            self.broker_epoch if self.broker_epoch is not None else -1,
            proposal.topic,
            proposal.partition,
            proposal.leader_epoch,
            proposal.new_isr,
            proposal.partition_epoch,
        )
        self._send(CONTROLLER, "request", request)

    def _respond(self, token: Any, answer: Any) -> None:
        kind, dst, their_token = token
        if kind == "peer":  # the wire carries bytes: a file slice is read as it is sent
            self._send(dst, "peer_response", (their_token, on_the_wire(answer)))
        elif kind == "group":
            self._send(dst, "group_response", (their_token, on_the_wire(answer)))
        elif kind == "produce":
            partition = answer["responses"][0]["partition_responses"][0]
            body = (their_token, ErrorCode(partition["error_code"]), partition["base_offset"])
            self._send(dst, "produce_response", body)

    # ---- input ----

    def receive(self, envelope: Envelope) -> None:
        kind, body = envelope.kind, envelope.body
        if kind == "response":
            self._on_controller_response(*body)
        elif kind == "metadata":
            self._on_metadata(body)
        elif kind == "produce":
            self._on_produce(envelope.src, *body)
        elif kind == "peer_request":
            self._on_peer_request(envelope.src, *body)
        elif kind == "group_request":
            token, api_key, api_version, request = body
            event = ClientRequest(
                ("group", envelope.src, token), api_key, api_version, request, token[0], "/sim"
            )
            self.step(event)
        elif kind == "peer_response":
            token, answer = body
            self.step(PeerAnswered(token, answer))

    def _on_controller_response(self, token: Any, response: Any) -> None:
        if token[1] != self.incarnation:
            return
        name = type(response).__name__
        if name == "RegisterBrokerResponse":
            if response.error == ErrorCode.NONE and self.broker_epoch is None:
                self.broker_epoch = response.broker_epoch
                self.sim.trace(f"b{self.broker_id} registered epoch={self.broker_epoch}")
                self._metadata_changed()
            self.register_deadline_ms = -1
        elif name == "BrokerHeartbeatResponse":
            if response.error in (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED):
                self.broker_epoch = None
        elif name == "AllocateProducerIdsResponse":
            if self.producer_ids_deadline_ms is not None:
                self.producer_ids_deadline_ms = None
                granted = response.error == ErrorCode.NONE
                self.step(
                    ProducerIdsGranted(
                        response.producer_id_start if granted else -1,
                        response.producer_id_len if granted else 0,
                    )
                )
        elif name == "AlterPartitionResponse":
            core_token = self.alters.pop(token, None)
            if core_token is not None:
                answer = AlterPartitionResponse(
                    ErrorCode(response.error),
                    response.leader,
                    response.leader_epoch,
                    tuple(response.isr),
                    response.partition_epoch,
                )
                self.step(ProposalAnswered(core_token, answer))

    def _on_metadata(self, records: list[tuple[int, Any]]) -> None:
        changed = False
        for offset, record in records:
            if offset != self.image.last_offset + 1:
                continue
            self.image.apply(offset, record)
            changed = True
        self.metadata_caught_up = len(records) < METADATA_CHUNK
        if changed:
            self._metadata_changed()

    def _metadata_changed(self) -> None:
        """Hand the image to the core, but only once this process's own registration is in it
        (as KRaft brokers wait to catch up before starting): a restarted broker must not act on
        states its earlier incarnation was given."""
        me = self.image.brokers.get(self.broker_id)
        registered = self.broker_epoch is not None and me is not None
        registered = registered and me.epoch == self.broker_epoch
        self.step(MetadataChanged(self.image, self.metadata_caught_up, registered))

    def _on_produce(self, src: Any, token: Any, partition: int, value: bytes) -> None:
        body = {
            "acks": -1,
            "timeout_ms": PRODUCE_TIMEOUT_MS,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [
                        {"index": partition, "records": build_batch([(None, value)])}
                    ],
                }
            ],
        }
        self.step(ClientRequest(("produce", src, token), ApiKey.PRODUCE, PRODUCE_VERSION, body))

    def _on_peer_request(
        self, src: Any, token: Any, api_key: int, api_version: int, body: Body
    ) -> None:
        if api_key == ApiKey.API_VERSIONS:  # the daemon answers it, from what it serves
            versions = dict(SUPPORTED) | {ApiKey.FETCH: (4, self.fetch_version_max)}
            self._send(
                src, "peer_response", (token, api_versions_body(versions, unsupported=False))
            )
            return
        self.step(ClientRequest(("peer", src, token), api_key, api_version, body))

    # ---- time ----

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        if now_ms >= self.next_heartbeat_ms:
            self.next_heartbeat_ms = now_ms + HEARTBEAT_MS
            self._heartbeat()
        if self.producer_ids_deadline_ms is not None and now_ms >= self.producer_ids_deadline_ms:
            self.producer_ids_deadline_ms = None
            self.step(ProducerIdsGranted(-1, 0))
        if now_ms >= self.next_tick_ms:  # the daemon's tick interval
            self.next_tick_ms = now_ms + TICK_MS
            self.core.tick(now_ms)
            self._drain()
        self.settle()

    def _heartbeat(self) -> None:
        if self.broker_epoch is None:
            if self.sim.now_ms >= self.register_deadline_ms:
                self.register_deadline_ms = self.sim.now_ms + REQUEST_TIMEOUT_MS
                request = RegisterBrokerRequest(
                    self._token(),
                    self.broker_id,
                    self.incarnation_id,
                    "sim",
                    9092,
                    previous_broker_epoch=self.core.previous_broker_epoch,
                )
                self._send(CONTROLLER, "request", request)
        else:
            request = BrokerHeartbeatRequest(
                self._token(),
                self.broker_id,
                self.broker_epoch,
                self.image.last_offset,
                want_fence=self.core.offline is not None,
                recovering_replicas=tuple(self.core.recovering_log_ends()),
            )
            self._send(CONTROLLER, "request", request)
        self._send(CONTROLLER, "metadata", self.image.last_offset + 1)


def on_the_wire(body: Any) -> Any:
    """A response as the peer receives it: record file slices become the bytes sendfile sends."""
    if isinstance(body, dict):
        return {key: on_the_wire(value) for key, value in body.items()}
    if isinstance(body, list):
        return [on_the_wire(item) for item in body]
    if isinstance(body, FileSlice):
        return body.read()
    return body


# ---- the producer ----


class Producer:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.max_in_flight = sim.rng.choice((1, 1, 3))
        self.next_value = 0
        self.in_flight: dict[
            Any, tuple[int, bytes, int]
        ] = {}  # token -> (partition, value, deadline)
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value), in ack order
        self.failed: list[bytes] = []
        self.unknown: list[bytes] = []
        self.leaders: dict[int, int] = {}
        self.next_send_ms = 0
        self.producing = True
        self.requests = 0

    def refresh(self) -> None:
        controller = self.sim.controller
        for partition in range(self.sim.options.partitions):
            info = controller.partition(partition) if controller.alive else None
            if info is not None:
                self.leaders[partition] = info.leader

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for token, (_, value, deadline_ms) in list(self.in_flight.items()):
            if now_ms >= deadline_ms:
                del self.in_flight[token]
                self.unknown.append(value)
                self.sim.trace(f"produce {value!r} timed out: unknown")
        if not self.producing or now_ms < self.next_send_ms:
            return
        if len(self.in_flight) >= self.max_in_flight:
            return
        self.refresh()
        partition = self.next_value % self.sim.options.partitions
        leader = self.leaders.get(partition, -1)
        if leader < 0:
            self.next_send_ms = now_ms + 50
            return
        self.send(partition, leader, b"v%d" % self.next_value)
        self.next_value += 1
        self.next_send_ms = now_ms + self.sim.rng.randint(0, 40)

    def send(self, partition: int, leader: int, value: bytes) -> Any:
        self.requests += 1
        token = ("p", self.requests)
        self.in_flight[token] = (partition, value, self.sim.now_ms + CLIENT_TIMEOUT_MS)
        self.sim.network.send(PRODUCER, leader, "produce", (token, partition, value))
        return token

    def receive(self, envelope: Envelope) -> None:
        token, error, base_offset = envelope.body
        found = self.in_flight.pop(token, None)
        if found is None:
            return
        partition, value, _ = found
        if error == ErrorCode.NONE:
            self.acked.append((partition, base_offset, value))
            self.sim.trace(f"acked {value!r} at {partition}/{base_offset}")
        elif error in NOT_WRITTEN:
            self.failed.append(value)
            self.sim.trace(f"failed {value!r} {ErrorCode(error).name}")
        else:
            self.unknown.append(value)
            self.sim.trace(f"unknown {value!r} {ErrorCode(error).name}")


# ---- invariants ----


def read_values(replica: Replica, start: int, end: int) -> dict[int, bytes | None]:
    """offset -> value of the replica's records in [start, end) (end is clamped to its LEO)."""
    out: dict[int, bytes | None] = {}
    log = replica.log
    end = min(end, log.log_end_offset)
    offset = max(start, log.log_start_offset)
    while offset < end:
        found = log.read(offset, 2**31 - 1, end, True)
        if found.records is None:
            break
        data = found.records.read()
        next_offset = offset
        for position, header in iter_batches(data):
            next_offset = max(next_offset, header.next_offset)
            if header.next_offset <= start:
                continue
            for record in decode_batch(data, position):
                if start <= record.offset < end:
                    out[record.offset] = record.value
        if next_offset <= offset:
            break
        offset = next_offset
    return out


class Checker:
    """The invariants, over observations the harness feeds it; each raises InvariantViolation."""

    def __init__(self) -> None:
        self.leader_of_epoch: dict[tuple[int, int], int] = {}
        self.leader_hw: dict[tuple[Any, ...], int] = {}
        self.visible_hw: dict[int, int] = {}
        self.committed: dict[tuple[int, int], bytes | None] = {}  # (partition, offset) -> value
        self.checked_upto: dict[tuple[Any, ...], int] = {}
        self.acked_checked: dict[tuple[Any, ...], int] = {}

    def leader(self, partition: int, leader_epoch: int, broker_id: int) -> None:
        """One leader per (partition, leader epoch) over the whole run."""
        first = self.leader_of_epoch.setdefault((partition, leader_epoch), broker_id)
        if first != broker_id:
            raise InvariantViolation(
                "one-leader-per-epoch",
                f"partition {partition} epoch {leader_epoch}: brokers {first} and {broker_id}",
            )

    def leader_high_watermark(self, term: tuple[Any, ...], high_watermark: int) -> None:
        """I3: in one leader's term (broker, incarnation, partition, epoch) the HW never drops."""
        last = self.leader_hw.get(term, high_watermark)
        if high_watermark < last:
            raise InvariantViolation("I3-leader-hw", f"{term}: HW {last} -> {high_watermark}")
        self.leader_hw[term] = high_watermark

    def consumer_high_watermark(self, partition: int, high_watermark: int) -> None:
        """I3: the HW the current leader would show a consumer never moves back overall."""
        last = self.visible_hw.get(partition, high_watermark)
        if high_watermark < last:
            raise InvariantViolation(
                "I3-visible-hw", f"partition {partition}: HW {last} -> {high_watermark}"
            )
        self.visible_hw[partition] = high_watermark

    def below_high_watermark(
        self, key: tuple[Any, ...], partition: int, values: dict[int, bytes | None]
    ) -> None:
        """I10/I2: every value seen below some replica's HW is the one seen there before."""
        for offset, value in values.items():
            first = self.committed.setdefault((partition, offset), value)
            if first != value:
                raise InvariantViolation(
                    "I10-agree-below-hw",
                    f"{key} partition {partition} offset {offset}: {value!r}, before {first!r}",
                )

    def acked_present(
        self,
        term: tuple[Any, ...],
        acked: list[tuple[int, int, bytes]],
        value_at: Callable[[int, int], bytes | None],
    ) -> None:
        """I1/I2: every acknowledged value is in the current leader's log at its offset."""
        start = self.acked_checked.get(term, 0)
        partition = term[2]
        for acked_partition, offset, value in acked[start:]:
            if acked_partition != partition:
                continue
            found = value_at(partition, offset)
            if found != value:
                raise InvariantViolation(
                    "I1-acked-in-leader",
                    f"{value!r} acked at {partition}/{offset}; leader {term} has {found!r}",
                )
        self.acked_checked[term] = len(acked)


# ---- the simulation ----


class Simulation:
    def __init__(self, seed: int, options: SimOptions | None = None, *, echo: bool = False) -> None:
        self.seed = seed
        self.options = options or SimOptions()
        self.rng = random.Random(seed)
        self.echo = echo
        self.events: list[str] = []
        self.now_ms = 0
        self.step_number = 0
        self.network = Network(self.rng, self.trace)
        self.fetch_versions = self.options.fetch_versions
        self.hw_checkpoint_interval_ms = self.rng.choice((100, 1_000, 5_000))
        self.initial_rebalance_delay_ms = self.rng.choice((0, 300))
        # The flush policy: fsync every message (flush.messages=1), or leave it to the OS.
        self.flush_every_message = self.rng.random() < 0.3
        self.topic = TOPIC
        self.checker = Checker()
        self.controller = ControllerNode(self)
        self.brokers = {b: BrokerNode(self, b) for b in BROKERS}
        self.producer = Producer(self)
        self.groups = GroupModel(self)
        self.txns = TxnModel(self)
        self.consumers = ConsumerGroupModel(self)
        self.fault: tuple[str, Any, int] | None = None  # (kind, target, ends at ms)
        self.faults_injected = 0
        self.topic_created = False

    def broker_config(self, broker_id: int) -> BrokerConfig:
        """What rlogd's config gives a broker, scaled to the simulation's time."""
        return BrokerConfig(
            broker_id=broker_id,
            log_config=LOG_CONFIG,
            min_insync_replicas=2,
            replica_lag_time_max_ms=LAG_TIME_MAX_MS,
            replica_fetch_max_bytes=FETCH_MAX_BYTES,
            replica_fetch_wait_max_ms=FETCH_WAIT_MAX_MS,
            replica_fetch_backoff_ms=100,
            replica_socket_timeout_ms=REQUEST_TIMEOUT_MS,
            log_flush_scheduler_interval_ms=200,
            high_watermark_checkpoint_interval_ms=self.hw_checkpoint_interval_ms,
            groups=GroupConfig(
                offsets_partitions=OFFSETS_PARTITIONS,
                min_session_timeout_ms=1_000,
                initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
                consumer_session_timeout_ms=CONSUMER_SESSION_TIMEOUT_MS,
                consumer_heartbeat_interval_ms=CONSUMER_HEARTBEAT_INTERVAL_MS,
            ),
            transactions=TxnConfig(
                state_partitions=TXN_STATE_PARTITIONS,
                offsets_partitions=OFFSETS_PARTITIONS,
                abort_check_interval_ms=500,
            ),
        )

    def trace(self, line: str) -> None:
        entry = f"{self.now_ms:>7} {line}"
        self.events.append(entry)
        if self.echo:
            print(entry)

    def trace_hash(self) -> str:
        return hashlib.sha256("\n".join(self.events).encode()).hexdigest()

    # ---- stepping ----

    def step(self, *, faults: bool) -> None:
        self.step_number += 1
        self.now_ms += self.rng.randint(1, self.options.step_ms_max)
        self.network.now_ms = self.now_ms
        self._end_fault_if_due()
        if (
            faults
            and self.fault is None
            and self.healthy()
            and self.rng.random() < self.options.fault_rate
        ):
            self._start_fault()
        for envelope in self.network.due(self.now_ms):
            self.trace(f"{envelope.src}>{envelope.dst} {envelope.kind}")
            self._deliver(envelope)
        for broker in self.brokers.values():  # the end of each broker's pass of its loop
            if broker.alive:
                broker.settle()
        if self.controller.alive and self.controller.paused_until is None:
            self.controller.tick()
        for broker in self.brokers.values():
            if broker.alive and broker.paused_until is None:
                broker.tick()
        if self.topic_created:
            self.producer.tick()
            self.groups.tick()
            self.txns.tick()
            self.consumers.tick()
            if faults:
                self.groups.nemesis()
                self.txns.nemesis()
                self.consumers.nemesis()
        elif self.controller.alive and len(self.controller.controller.image.live_brokers()) == 3:
            self._create_topics()
        self.check()

    def _create_topics(self) -> None:
        """The data topic, and __consumer_offsets as a broker makes it on the first
        FindCoordinator (compacted, RF 3); then the group's clients start."""
        configs = {"min.insync.replicas": "2"}
        if self.flush_every_message:
            configs["flush.messages"] = "1"
        request = CreateTopicsRequest(
            ("admin", 1),
            [
                NewTopic(TOPIC, self.options.partitions, 3, configs=configs),
                NewTopic(
                    OFFSETS_TOPIC,
                    OFFSETS_PARTITIONS,
                    3,
                    configs={**configs, "cleanup.policy": "compact"},
                ),
                NewTopic(TXN_TOPIC, TXN_TOPIC_PARTITIONS, 3, configs=configs),
                NewTopic(
                    TRANSACTION_STATE_TOPIC,
                    TXN_STATE_PARTITIONS,
                    3,
                    configs={**configs, "cleanup.policy": "compact"},
                ),
            ],
        )
        self.controller.controller.step(request, self.now_ms)
        self.controller.tick()
        self.topic_created = True
        self.groups.start(self.rng.randint(1, 3))
        self.consumers.start(self.rng.randint(1, 3))

    def all_partitions(self) -> list[tuple[str, int]]:
        return (
            [(TOPIC, p) for p in range(self.options.partitions)]
            + [(OFFSETS_TOPIC, p) for p in range(OFFSETS_PARTITIONS)]
            + [(TXN_TOPIC, p) for p in range(TXN_TOPIC_PARTITIONS)]
            + [(TRANSACTION_STATE_TOPIC, p) for p in range(TXN_STATE_PARTITIONS)]
        )

    def _deliver(self, envelope: Envelope) -> None:
        dst = envelope.dst
        if dst == PRODUCER:
            self.producer.receive(envelope)
            return
        if dst == GROUPS:
            self.groups.receive(*envelope.body)
            return
        if dst == TXNS:
            self.txns.receive(*envelope.body)
            return
        if dst == CONSUMERS:
            self.consumers.receive(*envelope.body)
            return
        if dst == CONTROLLER:
            if not self.controller.alive:
                return
            if self.controller.paused_until is not None:
                self._hold(envelope, self.controller.paused_until)
                return
            self.controller.receive(envelope)
            return
        broker = self.brokers[dst]
        if not broker.alive:
            return
        if broker.paused_until is not None:
            self._hold(envelope, broker.paused_until)
            return
        broker.receive(envelope)

    def _hold(self, envelope: Envelope, until_ms: int) -> None:
        """A stopped process's socket buffers: delivered once it resumes."""
        envelope.deliver_ms = until_ms
        self.network.sequence += 1
        envelope.sequence = self.network.sequence
        heapq.heappush(self.network.queue, envelope)

    # ---- faults ----

    def _resume(self, target: Any) -> None:
        """SIGCONT: what queued in the process's socket buffers while it was stopped is read now,
        also when the pause ends early (the last heal), not at the time it was due to end."""
        node = self.controller if target == CONTROLLER else self.brokers[target]
        node.paused_until = None
        queue = self.network.queue
        for envelope in queue:
            if envelope.dst == target and envelope.deliver_ms > self.now_ms:
                envelope.deliver_ms = self.now_ms
        heapq.heapify(queue)

    def healthy(self) -> bool:
        """Every process up, every link whole, every broker's current process registered and
        unfenced, every partition's ISR full (the premise). A broker restarted within its
        session is still in the ISRs its previous process was in, until that session ends: a
        crash is healed only once the new process has registered and caught up again."""
        if not self.controller.alive or self.network.cut or not self.topic_created:
            return False
        if any(not b.alive or b.paused_until is not None for b in self.brokers.values()):
            return False
        image = self.controller.controller.image
        for broker in self.brokers.values():
            registered = image.brokers.get(broker.broker_id)
            if registered is None or registered.fenced or registered.epoch != broker.broker_epoch:
                return False
        for topic, partition in self.all_partitions():
            info = self.controller.partition(partition, topic)
            if info is None or len(info.isr) != 3:
                return False
        return True

    def _start_fault(self) -> None:
        rng = self.rng
        kind = rng.choice(FAULT_KINDS)
        duration_ms = rng.choice((300, 1_000, 2_500, 5_000))
        target: Any = rng.choice(BROKERS)
        if kind == "disk-fail":  # mostly a leader's: its writes and fsyncs fail with EIO
            leader = self.controller.partition(0).leader
            target = leader if leader in BROKERS and rng.random() < 0.8 else target
            self.brokers[target].fs.failing = True
            self.brokers[target].offline_on_failure = rng.random() < 0.5
        elif kind == "crash-all":
            # Every process at once. A power loss keeps only what was synced, so acknowledged
            # writes survive it only with flush.messages=1 (without, that loss is permitted
            # and documented); a kill -9 of all keeps what the OS has.
            target = "all"
            power_loss = self.flush_every_message
            for broker in self.brokers.values():
                broker.crash(power_loss)
            self.controller.crash(power_loss)
            kind = "crash-all-power-loss" if power_loss else "crash-all"
        elif kind == "crash":
            power_loss = rng.random() < 0.5
            self.brokers[target].crash(power_loss)
            kind = "crash-power-loss" if power_loss else "crash"
            if rng.random() < 0.7:  # rlogd saw it; the notice may still be late or lost
                self._tell_controller_exited(self.brokers[target])
        elif kind == "pause":
            self.brokers[target].paused_until = self.now_ms + duration_ms
        elif kind == "pause-controller":  # its clock stops: it must not fence for its absence
            target = CONTROLLER
            self.controller.paused_until = self.now_ms + rng.choice((5_000, 15_000))
            duration_ms = self.controller.paused_until - self.now_ms
        elif kind in ("isolate", "cut-controller", "cut-peers"):
            others: list[Any] = []
            if kind != "cut-peers":
                others.append(CONTROLLER)
            if kind != "cut-controller":
                others += [b for b in BROKERS if b != target] + [PRODUCER, GROUPS, TXNS, CONSUMERS]
            for other in others:
                self.network.cut |= {(target, other), (other, target)}
        else:
            target = CONTROLLER
            self.controller.crash(rng.random() < 0.5)
        self.fault = (kind, target, self.now_ms + duration_ms)
        self.faults_injected += 1
        self.trace(f"FAULT {kind} {target} for {duration_ms} ms")

    def _tell_controller_exited(self, broker: BrokerNode) -> None:
        notice = BrokerProcessExitedRequest(
            ("admin", "exited", broker.broker_id, broker.incarnation),
            broker.broker_id,
            broker.incarnation_id,
        )
        self.network.send(SUPERVISOR, CONTROLLER, "request", notice)

    def _end_fault_if_due(self, *, now: bool = False) -> None:
        if self.fault is None or (not now and self.now_ms < self.fault[2]):
            return
        kind, target, _ = self.fault
        self.fault = None
        self.trace(f"HEAL {kind} {target}")
        if kind.startswith("crash-all"):
            self.controller.start()
            for broker in self.brokers.values():
                broker.start()
        elif kind.startswith("crash"):
            self.brokers[target].start()
        elif kind == "disk-fail":
            broker = self.brokers[target]
            broker.fs.failing = False
            if broker.alive and broker.core.offline is not None:
                # Its probe works again: it exits (closing files, writing nothing) and rlogd
                # restarts it at once; the new process recovers as after a crash.
                broker.crash(power_loss=False)
                self._tell_controller_exited(broker)
                broker.start()
        elif kind in ("pause", "pause-controller"):
            self._resume(target)
        elif kind == "controller":
            self.controller.start()
        else:
            self.network.cut.clear()

    # ---- invariants ----

    def check(self) -> None:
        self.consumers.check()
        checker = self.checker
        acked = self.producer.acked
        for broker in self.brokers.values():
            if not broker.alive:
                continue
            for partition, replica in broker.replicas.items():
                key = (broker.broker_id, broker.incarnation, partition)
                if replica.is_leader:
                    term = (*key, replica.leader_epoch)
                    checker.leader(partition, replica.leader_epoch, broker.broker_id)
                    checker.leader_high_watermark(term, replica.high_watermark)
                    info = self.controller.partition(partition)
                    current = (
                        info is not None
                        and info.leader == broker.broker_id
                        and info.leader_epoch == replica.leader_epoch
                    )
                    if current and self.options.check_visible_hw and replica.serves_consumers:
                        checker.consumer_high_watermark(partition, replica.high_watermark)
                    if current:
                        checker.acked_present(
                            term, acked, lambda _p, o, r=replica: read_values(r, o, o + 1).get(o)
                        )
                start = checker.checked_upto.get(key, 0)
                end = replica.high_watermark
                if end < start:
                    start = end
                if end > start:
                    checker.below_high_watermark(key, partition, read_values(replica, start, end))
                checker.checked_upto[key] = end

    # ---- a whole run ----

    def run(self) -> None:
        for _ in range(self.options.steps):
            self.step(faults=True)
        self.heal_and_check_liveness()

    def heal_and_check_liveness(self) -> None:
        self.trace("HEAL ALL")
        self._end_fault_if_due(now=True)
        self.network.heal()
        self.producer.producing = False
        self.txns.producing = False
        deadline_ms = self.now_ms + self.options.heal_ms_max
        while not self._quiet():
            if self.now_ms >= deadline_ms:
                if not self.consumers.settled() and self.healthy():
                    raise InvariantViolation(
                        "consumer-group-settles",
                        f"not settled {self.options.heal_ms_max} ms after healing: "
                        f"{self.consumers.describe()}",
                    )
                raise InvariantViolation(
                    "I11-liveness",
                    f"not quiet {self.options.heal_ms_max} ms after healing: {self._describe()}",
                )
            self.step(faults=False)
        # A final acks=all produce must succeed, retried as a client would, within a bound.
        deadline_ms = self.now_ms + 10_000
        token = None
        while not self._final_acked() or not self._quiet():
            if self.now_ms >= deadline_ms:
                raise InvariantViolation(
                    "I11-liveness", f"no final produce acknowledged in 10 s: {self._describe()}"
                )
            if not self._final_acked() and token not in self.producer.in_flight:
                self.producer.refresh()
                leader = self.producer.leaders.get(0, -1)
                if leader >= 0:
                    token = self.producer.send(0, leader, b"final")
            self.step(faults=False)
        self._check_isr_agree()
        self.txns.final_check()

    def _final_acked(self) -> bool:
        return any(value == b"final" for _, _, value in self.producer.acked)

    def _quiet(self) -> bool:
        if not self.healthy() or not self.groups.settled() or not self.txns.settled():
            return False
        if not self.consumers.settled():
            return False
        for topic, partition in self.all_partitions():
            info = self.controller.partition(partition, topic)
            if info is None or info.leader not in self.brokers:
                return False
            leader = self.brokers[info.leader].core.replica(topic, partition)
            if leader is None or not leader.is_leader or leader.leader_epoch != info.leader_epoch:
                return False
            if set(leader.isr) != set(info.isr):
                return False
            for broker_id in info.isr:
                replica = self.brokers[broker_id].core.replica(topic, partition)
                if replica is None or replica.log_end_offset != leader.log_end_offset:
                    return False
                if replica.high_watermark != leader.log_end_offset:
                    return False
        return True

    def _check_isr_agree(self) -> None:
        """I10 after quiescence: ISR replicas hold the same values up to the HW; then I1."""
        for partition in range(self.options.partitions):
            info = self.controller.partition(partition)
            leader = self.brokers[info.leader].replicas[partition]
            expected = read_values(leader, 0, leader.high_watermark)
            for broker_id in info.isr:
                replica = self.brokers[broker_id].replicas[partition]
                got = read_values(replica, 0, leader.high_watermark)
                if got != expected:
                    raise InvariantViolation(
                        "I10-isr-identical", f"broker {broker_id} differs from leader {info.leader}"
                    )
            for acked_partition, offset, value in self.producer.acked:
                if acked_partition == partition and expected.get(offset) != value:
                    raise InvariantViolation(
                        "I1-acked-after-heal", f"{value!r} at {offset}: {expected.get(offset)!r}"
                    )

    def _describe(self) -> str:
        parts = []
        for partition in range(self.options.partitions):
            parts.append(f"controller p{partition}: {self.controller.partition(partition)}")
        for broker in self.brokers.values():
            for replica in broker.replicas.values():
                parts.append(repr(replica))
        parts.append(f"group clients: {self.groups.describe()}")
        parts.append(f"transactional producers: {self.txns.describe()}")
        parts.append(f"consumer-protocol group: {self.consumers.describe()}")
        return "; ".join(parts)

    def summary(self) -> dict[str, int]:
        return {
            "acked": len(self.producer.acked),
            "failed": len(self.producer.failed),
            "unknown": len(self.producer.unknown),
            "faults": self.faults_injected,
            "virtual_ms": self.now_ms,
            "events": len(self.events),
            "commits_acked": self.groups.commits_acked,
            "rebalances": self.groups.rebalances,
            "txns_committed": self.txns.committed,
            "txns_aborted": self.txns.aborted,
            "consumer_commits_acked": self.consumers.commits_acked,
            "consumer_assignments": self.consumers.assignments,
            "consumer_zombie_overlaps": self.consumers.zombie_overlaps,
        }


@dataclass
class Outcome:
    seed: int
    ok: bool
    step: int
    invariant: str | None
    detail: str | None
    summary: dict[str, int]
    trace_tail: list[str]
    trace_hash: str


def run_seed(seed: int, options: SimOptions | None = None, *, echo: bool = False) -> Outcome:
    sim = Simulation(seed, options, echo=echo)
    try:
        sim.run()
    except (InvariantViolation, TxnViolation) as violation:
        return _outcome(sim, violation.invariant, violation.detail)
    except AssertionError as error:  # a core assertion (a bug, not an error of the world)
        return _outcome(sim, "core-assertion", f"{type(error).__name__}: {error}")
    except Exception as error:  # escaped the core: the daemon would have died of it
        where = traceback.extract_tb(error.__traceback__)[-1]
        detail = f"{type(error).__name__}: {error} at {where.filename}:{where.lineno}"
        return _outcome(sim, "uncaught-exception", detail)
    return Outcome(seed, True, sim.step_number, None, None, sim.summary(), [], sim.trace_hash())


def _outcome(sim: Simulation, invariant: str, detail: str) -> Outcome:
    return Outcome(
        sim.seed,
        False,
        sim.step_number,
        invariant,
        detail,
        sim.summary(),
        sim.events[-40:],
        sim.trace_hash(),
    )
