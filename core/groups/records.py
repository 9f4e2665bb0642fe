"""The records a group coordinator keeps in `__consumer_offsets`, in Kafka's own formats.

Kafka's tools (kafka-console-consumer with the offsets formatter, kafka-dump-log
--offsets-decoder) read these bytes, so rlog writes the same schemas:

- offset commit: key v1 `(group, topic, partition)`, value v3
  `(offset, leader_epoch, metadata, commit_timestamp)`, or value v1
  `(offset, metadata, commit_timestamp, expire_timestamp)` for a commit that set its own
  retention (OffsetCommit v2-v4's retention_time_ms), as Kafka writes it;
- group metadata: key v2 `(group)`, value v3 `(protocol_type, generation, protocol, leader,
  current_state_timestamp, members[])`.

A null value is a tombstone: the offset or the group was deleted. Compaction keeps only the last
record per key, which is why a key holds exactly the identity of what it describes.

A transactional offset commit (TxnOffsetCommit) is the same offset record in a transactional batch
of the producer's; a transaction marker of that producer later in the partition commits or aborts
it. A coordinator that loads a partition replays `LoadedRecord`s and `LoadedMarker`s, oldest first.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rlog.core.groups.consumer_records import (
    CONSUMER_KEY_VERSIONS,
    ConsumerKey,
    CorruptConsumerRecordError,
    parse_consumer_key,
)

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1  # the one value version with an expire timestamp
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class CorruptGroupRecordError(ValueError):
    """A record of `__consumer_offsets` that does not parse."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    # When it expires whatever the group does (a commit's own retention time); -1: none, the
    # broker's offsets.retention.minutes rules apply.
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class LoadedRecord:
    """A keyed record of an offsets partition, as a loading coordinator replays it."""

    key: bytes
    value: bytes | None
    producer_id: int = -1
    transactional: bool = False  # in a transactional batch: pending until the producer's marker
    offset: int = -1  # its offset in the partition; -1 when not known


@dataclass(frozen=True, slots=True)
class LoadedMarker:
    """A transaction marker of an offsets partition: `producer_id`'s transaction ended there."""

    producer_id: int
    committed: bool  # COMMIT; False for ABORT
    offset: int = -1


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...] = ()


# ---- encoding ----------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, value: int) -> _Writer:
        self.out += _I16.pack(value)
        return self

    def i32(self, value: int) -> _Writer:
        self.out += _I32.pack(value)
        return self

    def i64(self, value: int) -> _Writer:
        self.out += _I64.pack(value)
        return self

    def string(self, value: str | None) -> _Writer:
        if value is None:
            return self.i16(-1)
        data = value.encode()
        self.i16(len(data))
        self.out += data
        return self

    def bytes_(self, value: bytes | None) -> _Writer:
        if value is None:
            return self.i32(-1)
        self.i32(len(value))
        self.out += value
        return self


def offset_key(group: str, topic: str, partition: int) -> bytes:
    writer = _Writer().i16(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition)
    return bytes(writer.out)


def group_key(group: str) -> bytes:
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(group).out)


def offset_value(committed: CommittedOffset) -> bytes:
    if committed.expire_timestamp >= 0:
        # Only value v1 has the field; like Kafka, the leader epoch is not kept then (OffsetCommit
        # v2-v4, the versions that set a retention, carry none).
        writer = (
            _Writer()
            .i16(OFFSET_VALUE_VERSION_WITH_EXPIRY)
            .i64(committed.offset)
            .string(committed.metadata)
            .i64(committed.commit_timestamp)
            .i64(committed.expire_timestamp)
        )
        return bytes(writer.out)
    writer = (
        _Writer()
        .i16(OFFSET_VALUE_VERSION)
        .i64(committed.offset)
        .i32(committed.leader_epoch)
        .string(committed.metadata)
        .i64(committed.commit_timestamp)
    )
    return bytes(writer.out)


def group_value(record: GroupRecord) -> bytes:
    writer = (
        _Writer()
        .i16(GROUP_VALUE_VERSION)
        .string(record.protocol_type)
        .i32(record.generation)
        .string(record.protocol)
        .string(record.leader)
        .i64(record.current_state_timestamp)
        .i32(len(record.members))
    )
    for member in record.members:
        (
            writer.string(member.member_id)
            .string(member.group_instance_id)
            .string(member.client_id)
            .string(member.client_host)
            .i32(member.rebalance_timeout_ms)
            .i32(member.session_timeout_ms)
            .bytes_(member.subscription)
            .bytes_(member.assignment)
        )
    return bytes(writer.out)


# ---- decoding ----------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def _take(self, layout: struct.Struct) -> int:
        if self.at + layout.size > len(self.data):
            raise CorruptGroupRecordError("record ends early")
        (value,) = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return int(value)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def _chunk(self, length: int) -> bytes:
        if length < 0 or self.at + length > len(self.data):
            raise CorruptGroupRecordError("record ends early")
        chunk = self.data[self.at : self.at + length]
        self.at += length
        return chunk

    def string(self) -> str | None:
        length = self.i16()
        if length == -1:
            return None
        try:
            return self._chunk(length).decode()
        except UnicodeDecodeError as error:
            raise CorruptGroupRecordError(f"string is not UTF-8: {error}") from error

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise CorruptGroupRecordError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        length = self.i32()
        return b"" if length == -1 else self._chunk(length)


def parse_key(data: bytes) -> OffsetKey | GroupKey | ConsumerKey:
    reader = _Reader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.required_string(), reader.required_string(), reader.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.required_string())
    if version in CONSUMER_KEY_VERSIONS:  # a consumer-protocol group's (consumer_records.py)
        try:
            return parse_consumer_key(version, data)
        except CorruptConsumerRecordError as error:
            raise CorruptGroupRecordError(str(error)) from None
    raise CorruptGroupRecordError(f"unknown __consumer_offsets key version {version}")


def parse_offset_value(data: bytes) -> CommittedOffset:
    reader = _Reader(data)
    version = reader.i16()
    if not 0 <= version <= OFFSET_VALUE_VERSION:
        raise CorruptGroupRecordError(f"unknown offset value version {version}")
    offset = reader.i64()
    leader_epoch = reader.i32() if version >= 3 else -1
    metadata = reader.string() or ""
    commit_timestamp = reader.i64()
    expire_timestamp = reader.i64() if version == OFFSET_VALUE_VERSION_WITH_EXPIRY else -1
    return CommittedOffset(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


def parse_group_value(data: bytes) -> GroupRecord:
    reader = _Reader(data)
    version = reader.i16()
    if not 0 <= version <= GROUP_VALUE_VERSION:
        raise CorruptGroupRecordError(f"unknown group metadata value version {version}")
    protocol_type = reader.required_string()
    generation = reader.i32()
    protocol = reader.string()
    leader = reader.string()
    state_timestamp = reader.i64() if version >= 2 else -1
    members = []
    for _ in range(reader.i32()):
        member_id = reader.required_string()
        instance_id = reader.string() if version >= 3 else None
        client_id = reader.required_string()
        client_host = reader.required_string()
        session_timeout = reader.i32()
        rebalance_timeout = session_timeout
        if version >= 1:
            rebalance_timeout, session_timeout = session_timeout, reader.i32()
        members.append(
            MemberRecord(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                reader.bytes_(),
                reader.bytes_(),
            )
        )
    return GroupRecord(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))
