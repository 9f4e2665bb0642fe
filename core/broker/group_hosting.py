"""The group coordinator inside the broker core: `GroupCoordinator` (core/groups) wired to the
`__consumer_offsets` replicas this broker leads.

- Leadership decides ownership: when this broker becomes leader of an offsets partition it
  replays the partition's log into the coordinator; when it stops leading it unloads it.
- The coordinator's `Append`s become acks=all appends to that partition here (a TxnOffsetCommit's
  as a transactional batch of its producer); their outcome, with the batch's base offset, goes
  back to the coordinator that asked (even if a newer one replaced it since) as `append_done`.
- Its answers go out with the core's other responses, its events with the Ready.
- OffsetCommit, TxnOffsetCommit and OffsetDelete for partitions of topics that do not exist are
  refused here, as Kafka 2.x+ does (UNKNOWN_TOPIC_OR_PARTITION); the rest go to the coordinator.
  An OffsetDelete always reaches it (the group's errors come first: a top-level error answers
  alone, as Kafka's).
- A topic that leaves the metadata image (deleted, or deleted and made again under a new id)
  takes the groups' offsets of its partitions with it: `on_topics_deleted` writes their
  tombstones.
- Once the broker has written a producer's transaction marker to an offsets partition, it calls
  `complete_transaction`: the producer's pending offsets there are committed or dropped. A load
  replays the markers it finds in the log.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from rlog.core.broker.config import OFFSETS_TOPIC
from rlog.core.broker.messages import AppendAnswer, Body, Token
from rlog.core.groups import (
    Append,
    Caller,
    Effect,
    GroupConfig,
    GroupCoordinator,
    GroupEvent,
    LoadedMarker,
    LoadedRecord,
    LoadSummary,
    Respond,
)
from rlog.core.groups.consumer_group import TopicIds
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import (
    ControlType,
    CorruptRecordError,
    build_batch,
    decode_batch,
    read_end_txn_marker,
)
from rlog.core.replication import Replica
from rlog.core.storage.log import Log

WRITE_TIMEOUT_MS = 5_000  # Kafka's offsets.commit.timeout.ms
LOAD_READ_BYTES = 1024 * 1024

# The coordinator's method for each group API, and whether it takes the time.
GROUP_APIS: dict[int, tuple[str, bool]] = {
    ApiKey.JOIN_GROUP: ("join_group", True),
    ApiKey.SYNC_GROUP: ("sync_group", True),
    ApiKey.HEARTBEAT: ("heartbeat", True),
    ApiKey.LEAVE_GROUP: ("leave_group", True),
    ApiKey.OFFSET_COMMIT: ("commit_offsets", True),
    ApiKey.OFFSET_FETCH: ("fetch_offsets", False),
    ApiKey.DESCRIBE_GROUPS: ("describe_groups", False),
    ApiKey.LIST_GROUPS: ("list_groups", False),
    ApiKey.DELETE_GROUPS: ("delete_groups", True),
    ApiKey.TXN_OFFSET_COMMIT: ("txn_offset_commit", True),
    ApiKey.OFFSET_DELETE: ("delete_offsets", True),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ("consumer_group_heartbeat", True),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ("consumer_group_describe", False),
}

# The APIs whose partitions of unknown topics are refused before the coordinator sees them; their
# requests and answers share the shape topics[name, partitions[partition_index(, error_code)]].
_TOPIC_CHECKED = (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT, ApiKey.OFFSET_DELETE)
# Of those, the ones whose group is checked even when none of their topics exists.
_GROUP_CHECKED_FIRST = (ApiKey.OFFSET_DELETE,)

# Appends a batch to an offsets partition as its leader, then calls back with how it ended.
Writer = Callable[[int, bytes, Callable[[AppendAnswer], None]], None]


@dataclass(frozen=True, slots=True)
class Loaded:
    """A partition this broker now coordinates, for people (the log)."""

    partition: int
    leader_epoch: int
    summary: LoadSummary


class GroupHosting:
    def __init__(
        self,
        config: GroupConfig,
        new_member_id: Callable[[str], str],
        write: Writer,
        respond: Callable[[Token, Body], None],
    ) -> None:
        self._config = config
        self._new_member_id = new_member_id
        self._write = write
        self._respond = respond
        self.coordinator = GroupCoordinator(config, new_member_id)
        self._led: set[int] = set()
        self._tokens: dict[int, Token] = {}  # the coordinator's caller token -> the core's
        self._next_token = 0
        # (Txn)OffsetCommit and OffsetDelete refusals for unknown topics, added to the
        # coordinator's answer.
        self._unknown_topics: dict[int, list[Body]] = {}
        self._merge_unknown_first: set[int] = set()  # OffsetDelete: merged as Kafka's
        self._now_ms = 0
        self._topics: dict[str, str] = {}  # topic id -> name, as of the last image
        self.events: list[GroupEvent] = []
        self.loaded: list[Loaded | int] = []  # partitions loaded, or (int) unloaded

    @property
    def led(self) -> frozenset[int]:
        return frozenset(self._led)

    # ---- ownership ----

    def on_metadata(
        self, image: MetadataImage, replica: Callable[[int], Replica | None], now_ms: int
    ) -> None:
        """Load the offsets partitions this broker leads now, unload those it no longer does;
        then drop the groups' offsets of topics deleted since the last image."""
        deleted = self._deleted_topics(image)
        topic_ids = TopicIds(
            {
                name: (uuid.UUID(info.topic_id), len(info.partitions))
                for name, info in image.topics.items()
            }
        )
        self.coordinator.set_topics(topic_ids)
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            self._unload_all()
            return
        if self.coordinator.config.offsets_partitions != len(topic.partitions):
            # The topic was made elsewhere with another partition count: the groups' homes
            # follow the topic as it is.
            self._unload_all()
            config = replace(self._config, offsets_partitions=len(topic.partitions))
            self._config = config
            self.coordinator = GroupCoordinator(config, self._new_member_id)
            self.coordinator.set_topics(topic_ids)
        coordinator = self.coordinator
        for partition in sorted(topic.partitions):
            found = replica(partition)
            leads = found is not None and found.is_leader
            if leads and partition not in self._led:
                assert found is not None
                self._run(coordinator, coordinator.start_loading(partition))
                summary = coordinator.finish_loading(partition, _read_records(found.log), now_ms)
                self._led.add(partition)
                self.loaded.append(Loaded(partition, found.leader_epoch, summary))
            elif not leads and partition in self._led:
                self._led.discard(partition)
                self._run(coordinator, coordinator.unload(partition))
                self.loaded.append(partition)
        if deleted:
            self._run(coordinator, coordinator.on_topics_deleted(deleted, now_ms))

    def _deleted_topics(self, image: MetadataImage) -> list[str]:
        """The topics of the last image that this one does not have (by id: a topic deleted
        and made again in between is deleted too)."""
        current = {info.topic_id: name for name, info in image.topics.items()}
        deleted = sorted({name for id_, name in self._topics.items() if id_ not in current})
        self._topics = current
        return deleted

    def _unload_all(self) -> None:
        for partition in sorted(self._led):
            self._run(self.coordinator, self.coordinator.unload(partition))
            self.loaded.append(partition)
        self._led = set()

    # ---- requests and time ----

    def serve(
        self,
        token: Token,
        api_key: int,
        version: int,
        body: Body,
        client_id: str,
        client_host: str,
        image: MetadataImage,
        now_ms: int,
    ) -> None:
        method, timed = GROUP_APIS[api_key]
        self._next_token += 1
        self._tokens[self._next_token] = token
        caller = Caller(self._next_token, version, client_id, client_host)
        coordinator = self.coordinator
        if api_key in _TOPIC_CHECKED:
            body, unknown = _split_unknown_topics(body, image)
            if unknown is not None:
                if not body["topics"] and api_key not in _GROUP_CHECKED_FIRST:
                    self._respond(
                        self._tokens.pop(caller.token), {"throttle_time_ms": 0, "topics": unknown}
                    )
                    return
                self._unknown_topics[caller.token] = unknown
                if api_key in _GROUP_CHECKED_FIRST:
                    self._merge_unknown_first.add(caller.token)
        handle: Callable[..., list[Effect]] = getattr(coordinator, method)
        effects = handle(caller, body, now_ms) if timed else handle(caller, body)
        self._run(coordinator, effects)

    def tick(self, now_ms: int) -> None:
        self._run(self.coordinator, self.coordinator.tick(now_ms))

    def complete_transaction(
        self, partition: int, producer_id: int, committed: bool, now_ms: int
    ) -> None:
        """This broker wrote `producer_id`'s COMMIT (`committed`) or ABORT marker to
        `__consumer_offsets-<partition>`: its pending offsets there are committed or dropped."""
        coordinator = self.coordinator
        self._run(
            coordinator,
            coordinator.complete_transaction(partition, producer_id, committed, now_ms),
        )

    def _run(self, coordinator: GroupCoordinator, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                token = self._tokens.pop(effect.token, None)
                if token is None:
                    continue
                body = effect.body
                unknown = self._unknown_topics.pop(effect.token, None)
                if effect.token in self._merge_unknown_first:
                    self._merge_unknown_first.discard(effect.token)
                    if unknown is not None and not body["error_code"]:
                        body = {**body, "topics": _merged_topics(unknown, body["topics"])}
                elif unknown is not None:
                    body = {**body, "topics": body["topics"] + unknown}
                self._respond(token, body)
            elif isinstance(effect, Append):
                self._append(coordinator, effect)
            elif isinstance(effect, GroupEvent):
                self.events.append(effect)

    def _append(self, coordinator: GroupCoordinator, effect: Append) -> None:
        def done(answer: AppendAnswer) -> None:
            ended = coordinator.append_done(
                effect.append_id, answer.error, self._now_ms, answer.base_offset
            )
            self._run(coordinator, ended)

        if effect.transactional:
            batch = build_batch(
                list(effect.records),
                base_timestamp=self._now_ms,
                producer_id=effect.producer_id,
                producer_epoch=effect.producer_epoch,
                base_sequence=-1,
                is_transactional=True,
            )
        else:
            batch = build_batch(list(effect.records), base_timestamp=self._now_ms)
        self._write(effect.partition, batch, done)

    def observe_clock(self, now_ms: int) -> None:
        self._now_ms = now_ms


def _split_unknown_topics(body: Body, image: MetadataImage) -> tuple[Body, list[Body] | None]:
    """A (Txn)OffsetCommit's partitions of topics that exist, and the refusals of the rest."""
    known: list[Body] = []
    unknown: list[Body] = []
    for topic in body.get("topics") or []:
        info = image.topics.get(topic["name"])
        good = [p for p in topic["partitions"] if info and p["partition_index"] in info.partitions]
        bad = [
            p for p in topic["partitions"] if not (info and p["partition_index"] in info.partitions)
        ]
        if good:
            known.append({**topic, "partitions": good})
        if bad:
            unknown.append(
                {
                    "name": topic["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        }
                        for p in bad
                    ],
                }
            )
    return {**body, "topics": known}, (unknown or None)


def _merged_topics(first: list[Body], then: list[Body]) -> list[Body]:
    """Two answers' topics[name, partitions[]] as one: a topic in both once, with the
    partitions of both (Kafka's OffsetDeleteResponse.Builder.merge)."""
    merged: dict[str, Body] = {}
    for topic in first + then:
        known = merged.get(topic["name"])
        if known is None:
            merged[topic["name"]] = {**topic, "partitions": list(topic["partitions"])}
        else:
            known["partitions"] += topic["partitions"]
    return list(merged.values())


def _read_records(log: Log) -> Iterator[LoadedRecord | LoadedMarker]:
    """Every keyed record and every transaction marker of a partition's log, oldest first, for
    a coordinator to replay."""
    for data, position, header in log.iter_batches(LOAD_READ_BYTES):
        records = decode_batch(data, position)
        if header.is_control:
            if not (header.is_transactional and records):
                continue
            try:
                control_type, _coordinator_epoch = read_end_txn_marker(records[0])
            except CorruptRecordError:
                continue  # a control record that is no transaction marker
            committed = control_type == ControlType.COMMIT
            yield LoadedMarker(header.producer_id, committed, records[0].offset)
            continue
        for record in records:
            if record.key is not None:
                yield LoadedRecord(
                    record.key,
                    record.value,
                    header.producer_id,
                    header.is_transactional,
                    record.offset,
                )
