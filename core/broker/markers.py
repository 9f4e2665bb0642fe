"""Writing a transaction's COMMIT or ABORT markers to every one of its partitions, for the
transaction coordinator hosted here (Kafka's TransactionMarkerChannelManager).

Each partition's marker goes to its current leader: appended here directly if that is this
broker, else sent as WriteTxnMarkers, one request per leader. A partition whose marker could not
be written (no leader yet, a leader change, too few in-sync replicas, a lost request, a broker
that does not know the partition yet) is tried again after a backoff, with the leader the
metadata names then. Only a partition this broker's own metadata no longer has (its topic was
deleted) counts as done without its marker: a restarted broker answers
UNKNOWN_TOPIC_OR_PARTITION until it has read the metadata, and taking that for a deletion
completed a commit whose marker was never written (the simulator found its records read as
aborted). Once every partition has its marker the coordinator is told. An answer saying the
coordinator or the producer epoch is stale (another coordinator took over) ends the delivery
without telling it, as in Kafka: the new coordinator finishes the transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

from rlog.core.broker.messages import Body, PeerRequest, Token, TopicPartition
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import TxnMarker

RETRY_BACKOFF_MS = 100
WRITE_TXN_MARKERS_VERSION = 1
MARKERS_CHANNEL = "markers"  # peer connections of their own: never queued behind a long fetch

DONE_ERRORS = frozenset({ErrorCode.NONE})
STALE_ERRORS = frozenset(
    {ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}
)

# Appends a marker to a partition this broker leads; calls back with the outcome.
LocalWriter = Callable[[TopicPartition, TxnMarker, Callable[[ErrorCode], None]], None]


@dataclass
class _Delivery:
    marker: TxnMarker
    on_done: Callable[[int], None]
    waiting: dict[TopicPartition, int]  # partition -> when to (re)try it, ms
    sending: set[TopicPartition] = field(default_factory=set)
    abandoned: bool = False


class MarkerDelivery:
    def __init__(self, broker_id: int, write_local: LocalWriter, timeout_ms: int) -> None:
        self._broker_id = broker_id
        self._write_local = write_local
        self._timeout_ms = timeout_ms
        self._deliveries: dict[int, _Delivery] = {}
        self._ids = count()
        # token -> (delivery, its partitions, when to give up on the answer)
        self._requests: dict[Token, tuple[int, list[TopicPartition], int]] = {}
        self._now_ms = 0

    @property
    def pending(self) -> int:
        return len(self._deliveries)

    def deliver(
        self,
        marker: TxnMarker,
        partitions: tuple[TopicPartition, ...],
        on_done: Callable[[int], None],
        image: MetadataImage,
        now_ms: int,
        out: list[PeerRequest],
    ) -> None:
        """Write `marker` to every partition; `on_done(now_ms)` once all have it."""
        delivery_id = next(self._ids)
        self._deliveries[delivery_id] = _Delivery(
            marker, on_done, dict.fromkeys(partitions, now_ms)
        )
        self._now_ms = now_ms
        self._send_due(delivery_id, image, now_ms, out)

    def tick(self, image: MetadataImage, now_ms: int, out: list[PeerRequest]) -> None:
        self._now_ms = now_ms
        for token, (_, _, deadline_ms) in list(self._requests.items()):
            if now_ms >= deadline_ms:  # no answer: lost with its connection; a late one is ignored
                self.on_answer(token, None, image, out)
        for delivery_id in list(self._deliveries):
            self._send_due(delivery_id, image, now_ms, out)

    def owns(self, token: Token) -> bool:
        return isinstance(token, tuple) and bool(token) and token[0] == "markers"

    def on_answer(
        self, token: Token, body: Body | None, image: MetadataImage, out: list[PeerRequest]
    ) -> None:
        found = self._requests.pop(token, None)
        if found is None:
            return  # late: given up on already
        delivery_id, keys, _ = found
        errors: dict[TopicPartition, ErrorCode] = {}
        for marker in (body or {}).get("markers") or []:
            for topic in marker.get("topics") or []:
                for partition in topic.get("partitions") or []:
                    key = (topic["name"], partition["partition_index"])
                    errors[key] = ErrorCode(partition["error_code"])
        for key in keys:
            self._partition_ended(delivery_id, key, errors.get(key, ErrorCode.REQUEST_TIMED_OUT))
        self._send_due(delivery_id, image, self._now_ms, out)

    # ---- internals ----

    def _send_due(
        self, delivery_id: int, image: MetadataImage, now_ms: int, out: list[PeerRequest]
    ) -> None:
        delivery = self._deliveries.get(delivery_id)
        if delivery is None:
            return
        by_leader: dict[int, list[TopicPartition]] = {}
        for key, due_ms in list(delivery.waiting.items()):
            if due_ms > now_ms or key in delivery.sending:
                continue
            info = image.partition(*key)
            if info is None:  # deleted: no marker is needed where there is no partition
                delivery.waiting.pop(key, None)
                continue
            if info.leader < 0:
                delivery.waiting[key] = now_ms + RETRY_BACKOFF_MS
                continue
            delivery.sending.add(key)
            by_leader.setdefault(info.leader, []).append(key)
        local = by_leader.pop(self._broker_id, [])
        for leader, keys in by_leader.items():
            token = ("markers", next(self._ids))
            self._requests[token] = (delivery_id, keys, now_ms + self._timeout_ms)
            out.append(
                PeerRequest(
                    token,
                    leader,
                    ApiKey.WRITE_TXN_MARKERS,
                    WRITE_TXN_MARKERS_VERSION,
                    _request_body(delivery.marker, keys),
                    self._timeout_ms,
                    channel=MARKERS_CHANNEL,
                )
            )
        for key in local:

            def written(error: ErrorCode, key: TopicPartition = key) -> None:
                self._partition_ended(delivery_id, key, error)

            self._write_local(key, delivery.marker, written)
        self._maybe_finish(delivery_id)

    def _partition_ended(self, delivery_id: int, key: TopicPartition, error: ErrorCode) -> None:
        delivery = self._deliveries.get(delivery_id)
        if delivery is None:
            return
        delivery.sending.discard(key)
        if error in DONE_ERRORS:
            delivery.waiting.pop(key, None)
        elif error in STALE_ERRORS:
            delivery.abandoned = True
        else:
            delivery.waiting[key] = self._now_ms + RETRY_BACKOFF_MS
        self._maybe_finish(delivery_id)

    def _maybe_finish(self, delivery_id: int) -> None:
        delivery = self._deliveries.get(delivery_id)
        if delivery is None:
            return
        if delivery.abandoned and not delivery.sending:
            del self._deliveries[delivery_id]
        elif not delivery.waiting and not delivery.sending:
            del self._deliveries[delivery_id]
            delivery.on_done(self._now_ms)


def _request_body(marker: TxnMarker, keys: list[TopicPartition]) -> Body:
    topics: dict[str, list[int]] = {}
    for topic, partition in keys:
        topics.setdefault(topic, []).append(partition)
    return {
        "markers": [
            {
                "producer_id": marker.producer_id,
                "producer_epoch": marker.producer_epoch,
                "transaction_result": marker.committed,
                "topics": [
                    {"name": name, "partition_indexes": indexes} for name, indexes in topics.items()
                ],
                "coordinator_epoch": marker.coordinator_epoch,
            }
        ]
    }
