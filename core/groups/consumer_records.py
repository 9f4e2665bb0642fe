"""The records of a consumer-protocol group (KIP-848) in `__consumer_offsets`, in Kafka's formats,
and their replay.

Kafka keeps such a group as six kinds of keyed records (key versions 3-8), each upserted when
what it describes changes and tombstoned when it goes, so compaction keeps exactly the group's
latest state:

- 3 `(group)`: the group epoch;
- 4 `(group)`: the partition counts of the topics its members subscribe to, at that epoch;
- 5 `(group, member)`: a member's subscription and identity;
- 6 `(group)`: the target assignment's epoch;
- 7 `(group, member)`: a member's target assignment;
- 8 `(group, member)`: a member's current assignment (its epoch, state, what it owns and what it
  must still give up).

Partitions are named by topic id in the log, by topic name here: the caller's `TopicIds` (the
metadata image) translates; a topic id the image does not know (the topic was deleted) drops
its partitions on replay.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlog.core.groups.reconciliation import MemberAssignment, MemberState
from rlog.core.protocol.codec import DecodeError, codec_for

GROUP_EPOCH_KEY = 3
PARTITION_METADATA_KEY = 4
MEMBER_METADATA_KEY = 5
TARGET_EPOCH_KEY = 6
TARGET_MEMBER_KEY = 7
CURRENT_ASSIGNMENT_KEY = 8
CONSUMER_KEY_VERSIONS = range(GROUP_EPOCH_KEY, CURRENT_ASSIGNMENT_KEY + 1)
_MEMBER_KEYS = (MEMBER_METADATA_KEY, TARGET_MEMBER_KEY, CURRENT_ASSIGNMENT_KEY)
_SCHEMAS = {
    GROUP_EPOCH_KEY: "ConsumerGroupMetadata",
    PARTITION_METADATA_KEY: "ConsumerGroupPartitionMetadata",
    MEMBER_METADATA_KEY: "ConsumerGroupMemberMetadata",
    TARGET_EPOCH_KEY: "ConsumerGroupTargetAssignmentMetadata",
    TARGET_MEMBER_KEY: "ConsumerGroupTargetAssignmentMember",
    CURRENT_ASSIGNMENT_KEY: "ConsumerGroupCurrentMemberAssignment",
}
VALUE_VERSION = 0
# MemberState as the log stores it (Kafka's byte values).
STATE_BYTES = {
    MemberState.STABLE: 0,
    MemberState.UNREVOKED_PARTITIONS: 1,
    MemberState.UNRELEASED_PARTITIONS: 2,
}
_STATES = {value: state for state, value in STATE_BYTES.items()}

Record = tuple[bytes, bytes | None]
Partitions = Mapping[str, frozenset[int]]
TopicIdsByName = Mapping[str, tuple[uuid.UUID, int]]


class CorruptConsumerRecordError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """The key of one consumer-group record: its kind (the key version) and whose it is."""

    version: int
    group: str
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """A classic-protocol member's JoinGroup settings, kept in its record 5 (a tagged field)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, subscription), the client's order


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """What a member's heartbeat declared (record 5)."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed: frozenset[str]
    rebalance_timeout_ms: int
    server_assignor: str | None
    regex: str | None = None  # SubscribedTopicRegex
    classic: ClassicMetadata | None = None


# ---- writing --------------------------------------------------------------------------------


def _key(version: int, group: str, member_id: str | None = None) -> bytes:
    body: dict[str, Any] = {"group_id": group}
    if member_id is not None:
        body["member_id"] = member_id
    encoded = codec_for(_SCHEMAS[version] + "Key", version).encode(body)
    return version.to_bytes(2, "big") + encoded


def _value(version: int, body: dict[str, Any]) -> bytes:
    encoded = codec_for(_SCHEMAS[version] + "Value", VALUE_VERSION).encode(body)
    return VALUE_VERSION.to_bytes(2, "big") + encoded


def _wire(partitions: Partitions, topics: TopicIdsByName) -> list[dict[str, Any]]:
    return [
        {"topic_id": topics[name][0], "partitions": sorted(parts)}
        for name, parts in sorted(partitions.items())
        if name in topics and parts
    ]


def group_epoch_record(group: str, epoch: int) -> Record:
    return _key(GROUP_EPOCH_KEY, group), _value(GROUP_EPOCH_KEY, {"epoch": epoch})


def partition_metadata_record(
    group: str, counts: Mapping[str, int], topics: TopicIdsByName
) -> Record:
    listed = [
        {"topic_id": topics[name][0], "topic_name": name, "num_partitions": count,
         "partition_metadata": []}
        for name, count in sorted(counts.items())
        if name in topics
    ]  # fmt: skip
    return _key(PARTITION_METADATA_KEY, group), _value(PARTITION_METADATA_KEY, {"topics": listed})


def member_record(group: str, member_id: str, metadata: MemberMetadata) -> Record:
    body = {
        "instance_id": metadata.instance_id,
        "rack_id": metadata.rack_id,
        "client_id": metadata.client_id,
        "client_host": metadata.client_host,
        "subscribed_topic_names": sorted(metadata.subscribed),
        "subscribed_topic_regex": metadata.regex,
        "rebalance_timeout_ms": metadata.rebalance_timeout_ms,
        "server_assignor": metadata.server_assignor,
        "classic_member_metadata": (
            None
            if metadata.classic is None
            else {
                "session_timeout_ms": metadata.classic.session_timeout_ms,
                "supported_protocols": [
                    {"name": name, "metadata": data} for name, data in metadata.classic.protocols
                ],
            }
        ),
    }
    return _key(MEMBER_METADATA_KEY, group, member_id), _value(MEMBER_METADATA_KEY, body)


def target_epoch_record(group: str, epoch: int) -> Record:
    return _key(TARGET_EPOCH_KEY, group), _value(TARGET_EPOCH_KEY, {"assignment_epoch": epoch})


def target_member_record(
    group: str, member_id: str, target: Partitions, topics: TopicIdsByName
) -> Record:
    body = {"topic_partitions": _wire(target, topics)}
    return _key(TARGET_MEMBER_KEY, group, member_id), _value(TARGET_MEMBER_KEY, body)


def current_assignment_record(
    group: str, member_id: str, current: MemberAssignment, topics: TopicIdsByName
) -> Record:
    body = {
        "member_epoch": current.member_epoch,
        "previous_member_epoch": current.previous_member_epoch,
        "state": STATE_BYTES[current.state],
        "assigned_partitions": _wire(current.assigned, topics),
        "partitions_pending_revocation": _wire(current.pending_revocation, topics),
    }
    return _key(CURRENT_ASSIGNMENT_KEY, group, member_id), _value(CURRENT_ASSIGNMENT_KEY, body)


def member_tombstones(group: str, member_id: str) -> list[Record]:
    """A member leaves: its current assignment, target and subscription, in Kafka's order."""
    return [
        (_key(CURRENT_ASSIGNMENT_KEY, group, member_id), None),
        (_key(TARGET_MEMBER_KEY, group, member_id), None),
        (_key(MEMBER_METADATA_KEY, group, member_id), None),
    ]


def group_tombstones(group: str, member_ids: list[str]) -> list[Record]:
    """The group is deleted (or becomes a classic group): every record it has, epoch last."""
    records: list[tuple[bytes, bytes | None]] = [
        (_key(CURRENT_ASSIGNMENT_KEY, group, m), None) for m in member_ids
    ]
    records += [(_key(TARGET_MEMBER_KEY, group, m), None) for m in member_ids]
    records.append((_key(TARGET_EPOCH_KEY, group), None))
    records += [(_key(MEMBER_METADATA_KEY, group, m), None) for m in member_ids]
    records.append((_key(PARTITION_METADATA_KEY, group), None))
    records.append((_key(GROUP_EPOCH_KEY, group), None))
    return records


# ---- reading --------------------------------------------------------------------------------


def parse_consumer_key(version: int, data: bytes) -> ConsumerKey:
    """The key of a consumer-group record whose version (its first two bytes) is `version`."""
    try:
        body, end = codec_for(_SCHEMAS[version] + "Key", version).decode(data, 2)
    except (DecodeError, KeyError) as error:
        raise CorruptConsumerRecordError(str(error)) from None
    if end != len(data):
        raise CorruptConsumerRecordError(f"{len(data) - end} bytes after a v{version} key")
    return ConsumerKey(version, body["group_id"], body.get("member_id") or "")


def _parse_value(version: int, data: bytes) -> dict[str, Any]:
    if len(data) < 2 or int.from_bytes(data[:2], "big") != VALUE_VERSION:
        raise CorruptConsumerRecordError(f"a key v{version} record's value of an unknown version")
    try:
        body, _end = codec_for(_SCHEMAS[version] + "Value", VALUE_VERSION).decode(data, 2)
    except DecodeError as error:
        raise CorruptConsumerRecordError(str(error)) from None
    return body


@dataclass
class LoadedConsumerGroup:
    """One group's records, replayed: the latest of each (partitions still by topic id)."""

    group_epoch: int = 0
    partition_counts: dict[str, int] = field(default_factory=dict)
    assignment_epoch: int = 0
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    targets: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    current: dict[str, dict[str, Any]] = field(default_factory=dict)  # record 8's bodies


@dataclass
class ConsumerGroupLog:
    """Folds consumer-group records, oldest first, into each group's latest state."""

    groups: dict[str, LoadedConsumerGroup] = field(default_factory=dict)

    def apply(self, key: ConsumerKey, value: bytes | None) -> None:
        if value is None:
            self._remove(key)
            return
        body = _parse_value(key.version, value)
        group = self.groups.setdefault(key.group, LoadedConsumerGroup())
        if key.version == GROUP_EPOCH_KEY:
            group.group_epoch = body["epoch"]
        elif key.version == PARTITION_METADATA_KEY:
            group.partition_counts = {t["topic_name"]: t["num_partitions"] for t in body["topics"]}
        elif key.version == TARGET_EPOCH_KEY:
            group.assignment_epoch = body["assignment_epoch"]
        elif key.version == MEMBER_METADATA_KEY:
            group.members[key.member_id] = MemberMetadata(
                body["instance_id"],
                body["rack_id"],
                body["client_id"],
                body["client_host"],
                frozenset(body["subscribed_topic_names"]),
                body["rebalance_timeout_ms"],
                body["server_assignor"],
                body["subscribed_topic_regex"],
                _classic(body.get("classic_member_metadata")),
            )
        elif key.version == TARGET_MEMBER_KEY:
            group.targets[key.member_id] = _by_id(body["topic_partitions"])
        else:
            if body["state"] not in _STATES:
                raise CorruptConsumerRecordError(f"member state {body['state']} is unknown")
            group.current[key.member_id] = body

    def _remove(self, key: ConsumerKey) -> None:
        group = self.groups.get(key.group)
        if group is None:
            return
        if key.version == GROUP_EPOCH_KEY:
            del self.groups[key.group]  # the last tombstone of a deleted group
        elif key.version == MEMBER_METADATA_KEY:
            group.members.pop(key.member_id, None)
        elif key.version == TARGET_MEMBER_KEY:
            group.targets.pop(key.member_id, None)
        elif key.version == CURRENT_ASSIGNMENT_KEY:
            group.current.pop(key.member_id, None)
        elif key.version == PARTITION_METADATA_KEY:
            group.partition_counts = {}


def _classic(body: dict[str, Any] | None) -> ClassicMetadata | None:
    if body is None:
        return None
    protocols = tuple((p["name"], bytes(p["metadata"])) for p in body["supported_protocols"])
    return ClassicMetadata(body["session_timeout_ms"], protocols)


def _by_id(wire: list[dict[str, Any]]) -> dict[uuid.UUID, frozenset[int]]:
    found: dict[uuid.UUID, frozenset[int]] = {}
    for entry in wire:
        found[entry["topic_id"]] = found.get(entry["topic_id"], frozenset()) | frozenset(
            entry["partitions"]
        )
    return found


def named(by_id: Mapping[uuid.UUID, frozenset[int]], names: Mapping[uuid.UUID, str]) -> Partitions:
    """Partitions by topic name; those of topics no longer in the image are left out."""
    return {names[id_]: parts for id_, parts in by_id.items() if id_ in names and parts}


def current_assignment(body: Mapping[str, Any], names: Mapping[uuid.UUID, str]) -> MemberAssignment:
    """Record 8's body as a member's side of reconciliation, by topic name."""
    return MemberAssignment(
        state=_STATES[body["state"]],
        member_epoch=body["member_epoch"],
        previous_member_epoch=body["previous_member_epoch"],
        assigned=named(_by_id(body["assigned_partitions"]), names),
        pending_revocation=named(_by_id(body["partitions_pending_revocation"]), names),
    )
