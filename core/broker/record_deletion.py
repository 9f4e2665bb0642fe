"""DeleteRecords, as Kafka's ReplicaManager.deleteRecords and DelayedDeleteRecords do it.

The leader moves a partition's log start at once (never past its HW); the followers move
theirs when a fetch answer carries the leader's, and say so in their next Fetch. A request is
answered when every live replica's log start has reached the offset asked for (the partition's
low watermark), or with REQUEST_TIMED_OUT for the partitions still waiting at its timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlog.core.broker.config import INTERNAL_TOPICS
from rlog.core.broker.messages import Body, Token, TopicPartition
from rlog.core.broker.serving import not_hosted_error
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import Replica

# Kafka lets only its own admin tooling (this client id) delete records of internal topics.
ADMIN_CLIENT_ID = "__admin_client"

Respond = Callable[[Token, Body], None]
FindReplica = Callable[[TopicPartition], Replica | None]


@dataclass
class _Waiting:
    token: Token
    deadline_ms: int
    answer: Body  # the whole response; waiting partitions' entries are filled in place
    waiting: dict[TopicPartition, tuple[Body, int]]  # -> (its entry, the offset it waits for)


class RecordDeletion:
    def __init__(self, respond: Respond) -> None:
        self._respond = respond
        self._waiting: list[_Waiting] = []
        # Partitions whose log start moved since the broker last looked: it wakes the
        # followers' parked fetches there (their answers carry the new log start) and
        # checkpoints log starts, so a restart does not bring deleted records back.
        self.moved: set[TopicPartition] = set()

    @property
    def has_waiting(self) -> bool:
        return bool(self._waiting)

    def serve(
        self,
        token: Token,
        body: Body,
        client_id: str,
        find: FindReplica,
        image: MetadataImage,
        now_ms: int,
        *,
        offline: bool = False,
    ) -> None:
        """`offline`: the log dir is offline, and hosted partitions answer KAFKA_STORAGE_ERROR."""
        alive = _live_brokers(image)
        waiting: dict[TopicPartition, tuple[Body, int]] = {}
        topics = []
        for name, offsets in _requested_offsets(body).items():
            partitions = []
            for index, offset in offsets.items():
                entry = {"partition_index": index, "low_watermark": -1, "error_code": 0}
                partitions.append(entry)
                if name in INTERNAL_TOPICS and client_id != ADMIN_CLIENT_ID:
                    entry["error_code"] = ErrorCode.INVALID_TOPIC_EXCEPTION
                    continue
                replica = find((name, index))
                if replica is None:
                    entry["error_code"] = not_hosted_error(image, name, index)
                    continue
                if offline:
                    entry["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                    continue
                outcome = replica.delete_records(offset)
                if outcome.error != ErrorCode.NONE:
                    entry["error_code"] = outcome.error
                    continue
                self.moved.add((name, index))
                low_watermark = replica.low_watermark(alive)
                if low_watermark >= outcome.offset:
                    entry["low_watermark"] = low_watermark
                else:
                    waiting[(name, index)] = (entry, outcome.offset)
            topics.append({"name": name, "partitions": partitions})
        answer = {"throttle_time_ms": 0, "topics": topics}
        if not waiting:
            self._respond(token, answer)
            return
        self._waiting.append(_Waiting(token, now_ms + body.get("timeout_ms", 0), answer, waiting))

    def check(self, find: FindReplica, image: MetadataImage) -> None:
        """Answer the requests whose partitions' low watermarks have all come far enough (a
        partition whose leadership moved away answers NOT_LEADER_OR_FOLLOWER, as Kafka)."""
        alive = _live_brokers(image)
        for request in list(self._waiting):
            for key, (entry, required) in list(request.waiting.items()):
                replica = find(key)
                if replica is None or not replica.is_leader:
                    entry["error_code"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    del request.waiting[key]
                    continue
                low_watermark = replica.low_watermark(alive)
                if low_watermark >= required:
                    entry["low_watermark"] = low_watermark
                    del request.waiting[key]
            if not request.waiting:
                self._waiting.remove(request)
                self._respond(request.token, request.answer)

    def expire(self, now_ms: int) -> None:
        """Requests past their timeout: their waiting partitions answer REQUEST_TIMED_OUT."""
        for request in [r for r in self._waiting if now_ms >= r.deadline_ms]:
            for entry, _required in request.waiting.values():
                entry["error_code"] = ErrorCode.REQUEST_TIMED_OUT
            self._waiting.remove(request)
            self._respond(request.token, request.answer)

    def fail_all(self, code: ErrorCode) -> None:
        """The log dir went offline: nothing waiting can complete."""
        for request in self._waiting:
            for entry, _required in request.waiting.values():
                entry["error_code"] = code
            self._respond(request.token, request.answer)
        self._waiting = []


def _live_brokers(image: MetadataImage) -> frozenset[int]:
    return frozenset(broker.broker_id for broker in image.live_brokers())


def _requested_offsets(body: Body) -> dict[str, dict[int, int]]:
    """Topic -> partition -> offset to delete before, each partition once (the last offset named
    wins), as Kafka reads the request into a map: a partition named twice would otherwise have
    two entries in the answer, the first never filled in."""
    requested: dict[str, dict[int, int]] = {}
    for topic in body.get("topics") or ():
        offsets = requested.setdefault(topic["name"], {})
        for partition in topic.get("partitions") or ():
            offsets[partition["partition_index"]] = partition["offset"]
    return requested
