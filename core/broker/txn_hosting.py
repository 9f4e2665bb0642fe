"""The transaction coordinator inside the broker core: `TxnCoordinator` (core/transactions)
wired to the `__transaction_state` replicas this broker leads, to the producer-id pool and to
the marker delivery.

- Leadership decides ownership, as for groups: leading a `__transaction_state` partition loads
  its records into the coordinator (the leader epoch is the coordinator epoch markers carry);
  losing it unloads them.
- The coordinator's `Append`s become acks=all appends to that partition here; its
  `AllocateProducerId`s take ids from the broker's pool; its `WriteMarkers` go to
  `MarkerDelivery`.
- InitProducerId without a transactional id is served from the pool by any broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from rlog.core.broker.config import TRANSACTION_STATE_TOPIC
from rlog.core.broker.group_hosting import LOAD_READ_BYTES
from rlog.core.broker.markers import MarkerDelivery
from rlog.core.broker.messages import AppendAnswer, Body, PeerRequest, Token
from rlog.core.broker.producer_ids import ProducerIdPool
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch, decode_batch
from rlog.core.replication import Replica, TxnMarker
from rlog.core.storage.log import Log
from rlog.core.transactions import (
    AllocateProducerId,
    Append,
    Caller,
    Effect,
    Respond,
    TxnConfig,
    TxnCoordinator,
    TxnEvent,
    TxnLoadSummary,
    WriteMarkers,
)

# The coordinator's method for each transaction API, and whether it takes the time.
TXN_APIS: dict[int, tuple[str, bool]] = {
    ApiKey.INIT_PRODUCER_ID: ("init_producer_id", True),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("add_partitions_to_txn", True),
    ApiKey.ADD_OFFSETS_TO_TXN: ("add_offsets_to_txn", True),
    ApiKey.END_TXN: ("end_txn", True),
    ApiKey.DESCRIBE_TRANSACTIONS: ("describe_transactions", False),
    ApiKey.LIST_TRANSACTIONS: ("list_transactions", True),
}

# Appends a batch to a __transaction_state partition as its leader, then calls back.
Writer = Callable[[int, bytes, Callable[[AppendAnswer], None]], None]


@dataclass(frozen=True, slots=True)
class TxnLoaded:
    """A partition this broker now coordinates, for people (the log)."""

    partition: int
    coordinator_epoch: int
    summary: TxnLoadSummary


class TxnHosting:
    def __init__(
        self,
        config: TxnConfig,
        write: Writer,
        respond: Callable[[Token, Body], None],
        producer_ids: ProducerIdPool,
        markers: MarkerDelivery,
    ) -> None:
        self._config = config
        self._write = write
        self._respond = respond
        self._producer_ids = producer_ids
        self._markers = markers
        self.coordinator = TxnCoordinator(config)
        self._led: dict[int, int] = {}  # partition -> the leader epoch it was loaded in
        self._tokens: dict[int, Token] = {}
        self._next_token = 0
        self._now_ms = 0
        self._image = MetadataImage()
        self._peer_out: list[PeerRequest] = []
        self.events: list[TxnEvent] = []
        self.loaded: list[TxnLoaded | int] = []  # partitions loaded, or (int) unloaded

    @property
    def led(self) -> frozenset[int]:
        return frozenset(self._led)

    def take_peer_requests(self) -> list[PeerRequest]:
        out, self._peer_out = self._peer_out, []
        return out

    # ---- ownership ----

    def on_metadata(
        self, image: MetadataImage, replica: Callable[[int], Replica | None], now_ms: int
    ) -> None:
        """Load the state partitions this broker leads now (again if it leads them in a new
        epoch: the coordinator epoch changed), unload those it no longer leads."""
        self._image = image
        topic = image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            self._unload_all()
            return
        if self.coordinator.config.state_partitions != len(topic.partitions):
            self._unload_all()
            self._config = replace(self._config, state_partitions=len(topic.partitions))
            self.coordinator = TxnCoordinator(self._config)
        coordinator = self.coordinator
        for partition in sorted(topic.partitions):
            found = replica(partition)
            leader = found if found is not None and found.is_leader else None
            if leader is not None and self._led.get(partition) != leader.leader_epoch:
                self._run(coordinator.start_loading(partition))
                summary, effects = coordinator.finish_loading(
                    partition, leader.leader_epoch, _read_records(leader.log), now_ms
                )
                self._led[partition] = leader.leader_epoch
                self.loaded.append(TxnLoaded(partition, leader.leader_epoch, summary))
                self._run(effects)
            elif leader is None and partition in self._led:
                del self._led[partition]
                self._run(coordinator.unload(partition))
                self.loaded.append(partition)

    def _unload_all(self) -> None:
        for partition in sorted(self._led):
            self._run(self.coordinator.unload(partition))
            self.loaded.append(partition)
        self._led = {}

    # ---- requests and time ----

    def serve(
        self,
        token: Token,
        api_key: int,
        version: int,
        body: Body,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> None:
        if api_key == ApiKey.INIT_PRODUCER_ID and body.get("transactional_id") is None:
            self._idempotent_producer_id(token)
            return
        method, timed = TXN_APIS[api_key]
        self._next_token += 1
        self._tokens[self._next_token] = token
        caller = Caller(self._next_token, version, client_id, client_host)
        handle: Callable[..., list[Effect]] = getattr(self.coordinator, method)
        self._run(handle(caller, body, now_ms) if timed else handle(caller, body))

    def _idempotent_producer_id(self, token: Token) -> None:
        def allocated(producer_id: int | None) -> None:
            answer: Body = {"throttle_time_ms": 0, "producer_id": -1, "producer_epoch": -1}
            if producer_id is None:
                self._respond(token, answer | {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE})
            else:
                self._respond(
                    token,
                    answer | {"error_code": ErrorCode.NONE, "producer_id": producer_id,
                              "producer_epoch": 0},
                )  # fmt: skip

        self._producer_ids.take(allocated)

    def tick(self, now_ms: int) -> None:
        self._run(self.coordinator.tick(now_ms))

    def observe_clock(self, now_ms: int) -> None:
        self._now_ms = now_ms

    def _run(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                token = self._tokens.pop(effect.token, None)
                if token is not None:
                    self._respond(token, effect.body)
            elif isinstance(effect, Append):
                self._append(effect)
            elif isinstance(effect, AllocateProducerId):
                self._allocate(effect.request_id)
            elif isinstance(effect, WriteMarkers):
                self._deliver(effect)
            elif isinstance(effect, TxnEvent):
                self.events.append(effect)

    def _append(self, effect: Append) -> None:
        coordinator = self.coordinator

        def done(answer: AppendAnswer) -> None:
            if coordinator is self.coordinator:
                self._run(coordinator.append_done(effect.append_id, answer.error, self._now_ms))

        batch = build_batch(list(effect.records), base_timestamp=self._now_ms)
        self._write(effect.partition, batch, done)

    def _allocate(self, request_id: int) -> None:
        coordinator = self.coordinator

        def allocated(producer_id: int | None) -> None:
            if coordinator is self.coordinator:
                self._run(coordinator.producer_id_allocated(request_id, producer_id, self._now_ms))

        self._producer_ids.take(allocated)

    def _deliver(self, effect: WriteMarkers) -> None:
        coordinator = self.coordinator

        def delivered(now_ms: int) -> None:
            if coordinator is self.coordinator:
                self._run(coordinator.markers_done(effect.marker_id, now_ms))

        marker = TxnMarker(
            effect.producer_id, effect.producer_epoch, effect.coordinator_epoch, effect.committed
        )
        self._markers.deliver(
            marker, effect.partitions, delivered, self._image, self._now_ms, self._peer_out
        )


def _read_records(log: Log) -> Iterator[tuple[bytes, bytes | None]]:
    """Every keyed record of a partition's log, oldest first, for the coordinator to replay."""
    for data, position, header in log.iter_batches(LOAD_READ_BYTES):
        if header.is_control:
            continue
        for record in decode_batch(data, position):
            if record.key is not None:
                yield record.key, record.value
