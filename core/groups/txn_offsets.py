"""Committed offsets and pending transactional ones, and the replay of an offsets partition.

A transactional offset commit (TxnOffsetCommit) is written to `__consumer_offsets` as a
transactional batch of its producer's. Until a transaction marker of that producer follows it in
the log, its offsets are *pending* for (group, producer): kept, but not committed and not shown by
OffsetFetch. A COMMIT marker makes them committed, an ABORT marker drops them.

Every offset remembers the position of its record in the log. When a transactional and a regular
commit of the same partition meet, the one written later in the log wins, whatever order the
write acknowledgements and the marker arrive in: a regular commit written after the
transactional one is not undone when the transaction commits. Replaying the log gives the same
state, also after compaction has removed the older record.

An offset tombstone (a deleted group) removes the committed offset and every producer's pending
one of that partition, so a transaction that commits after its group was deleted brings nothing
back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rlog.core.groups.consumer_records import ConsumerGroupLog, CorruptConsumerRecordError
from rlog.core.groups.group import Group, GroupState
from rlog.core.groups.records import (
    CommittedOffset,
    CorruptGroupRecordError,
    GroupKey,
    GroupRecord,
    LoadedMarker,
    LoadedRecord,
    OffsetKey,
    parse_group_value,
    parse_key,
    parse_offset_value,
)
from rlog.core.protocol.errors import ErrorCode

Key = tuple[str, int]  # (topic, partition)
Record = tuple[bytes, bytes | None]
Loaded = LoadedRecord | LoadedMarker | Record


@dataclass(frozen=True, slots=True)
class StoredOffset:
    committed: CommittedOffset
    position: int = -1  # the record's offset in its offsets partition; -1 when not known

    def replaces(self, current: StoredOffset | None) -> bool:
        """Whether this offset wins over `current`: the record later in the log does. An
        unknown position (a write whose answer carried none) counts as the latest."""
        if current is None or self.position < 0 or current.position < 0:
            return True
        return self.position > current.position


class OffsetStore:
    """Offsets by group: the committed ones, and the pending ones by producer."""

    def __init__(self) -> None:
        self._committed: dict[str, dict[Key, StoredOffset]] = {}
        self._pending: dict[int, dict[str, dict[Key, StoredOffset]]] = {}

    # ---- committed ----

    def committed(self, group_id: str) -> dict[Key, CommittedOffset]:
        return {key: stored.committed for key, stored in self._committed.get(group_id, {}).items()}

    def commit(self, group_id: str, key: Key, offset: StoredOffset) -> bool:
        """Make `offset` the group's committed one unless a later record is committed already."""
        offsets = self._committed.setdefault(group_id, {})
        if not offset.replaces(offsets.get(key)):
            return False
        offsets[key] = offset
        return True

    def put(self, group_id: str, key: Key, offset: StoredOffset) -> None:
        """A regular record, replayed in log order: the latest word on its partition."""
        self._committed.setdefault(group_id, {})[key] = offset

    def remove(self, group_id: str, key: Key) -> None:
        """An offset tombstone: the committed offset and every pending one of `key` go."""
        offsets = self._committed.get(group_id)
        if offsets is not None:
            offsets.pop(key, None)
            if not offsets:
                del self._committed[group_id]
        for producer_id in list(self._pending):
            groups = self._pending[producer_id]
            pending = groups.get(group_id)
            if pending is None:
                continue
            pending.pop(key, None)
            if not pending:
                del groups[group_id]
            if not groups:
                del self._pending[producer_id]

    def drop_group(self, group_id: str) -> None:
        """Forget the group's offsets, committed and pending (deleted, or coordinated elsewhere)."""
        self._committed.pop(group_id, None)
        for producer_id in list(self._pending):
            groups = self._pending[producer_id]
            groups.pop(group_id, None)
            if not groups:
                del self._pending[producer_id]

    # ---- pending ----

    def add_pending(self, producer_id: int, group_id: str, key: Key, offset: StoredOffset) -> None:
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {})[key] = offset

    def pending(self, group_id: str) -> dict[int, dict[Key, CommittedOffset]]:
        """The group's pending offsets by producer id."""
        return {
            producer_id: {key: stored.committed for key, stored in groups[group_id].items()}
            for producer_id, groups in self._pending.items()
            if group_id in groups
        }

    def pending_keys(self, group_id: str) -> set[Key]:
        return {key for groups in self._pending.values() for key in groups.get(group_id, {})}

    def complete(
        self, producer_id: int, committed: bool, belongs: Callable[[str], bool] | None = None
    ) -> int:
        """The producer's transaction ended: its pending offsets in the groups that `belongs`
        accepts (all by default) become committed, or are dropped. Returns how many were
        pending."""
        groups = self._pending.get(producer_id)
        if groups is None:
            return 0
        ended = 0
        for group_id in [g for g in groups if belongs is None or belongs(g)]:
            offsets = groups.pop(group_id)
            ended += len(offsets)
            if committed:
                for key, offset in offsets.items():
                    self.commit(group_id, key, offset)
        if not groups:
            del self._pending[producer_id]
        return ended

    # ---- whole groups ----

    def groups(self) -> set[str]:
        """Groups with an offset, committed or pending."""
        pending = {group_id for groups in self._pending.values() for group_id in groups}
        return set(self._committed) | pending

    def counts(self) -> tuple[int, int]:
        """(committed offsets, pending offsets)."""
        committed = sum(len(offsets) for offsets in self._committed.values())
        pending = sum(len(o) for groups in self._pending.values() for o in groups.values())
        return committed, pending

    def absorb(self, other: OffsetStore) -> None:
        """Take over `other`'s offsets (a loaded partition's; its groups are not in this one)."""
        for group_id, offsets in other._committed.items():
            self._committed.setdefault(group_id, {}).update(offsets)
        for producer_id, groups in other._pending.items():
            mine = self._pending.setdefault(producer_id, {})
            for group_id, offsets in groups.items():
                mine.setdefault(group_id, {}).update(offsets)


@dataclass
class Replayed:
    """What an offsets partition's log holds."""

    metadata: dict[str, GroupRecord] = field(default_factory=dict)
    offsets: OffsetStore = field(default_factory=OffsetStore)
    # Groups an offset record named since their last group tombstone: Kafka creates a group
    # without members for offsets committed (or pending, or aborted) outside a membership.
    named: set[str] = field(default_factory=set)
    consumer: ConsumerGroupLog = field(default_factory=ConsumerGroupLog)  # KIP-848 groups
    # Groups whose last record before any tombstone was a classic group's (key 2): a group
    # that went back to the classic protocol.
    classic_last: set[str] = field(default_factory=set)
    corrupt_records: int = 0

    @property
    def group_ids(self) -> set[str]:
        return set(self.metadata) | self.named


def replay(items: Iterable[Loaded]) -> Replayed:
    """Replay a partition's records and markers, oldest first. A plain `(key, value)` pair is a
    regular record at an unknown position."""
    replayed = Replayed()
    offsets = replayed.offsets
    for item in items:
        if isinstance(item, LoadedMarker):
            offsets.complete(item.producer_id, item.committed)
            continue
        loaded = item if isinstance(item, LoadedRecord) else LoadedRecord(item[0], item[1])
        try:
            key = parse_key(loaded.key)
            if isinstance(key, OffsetKey):
                at = (key.topic, key.partition)
                if loaded.value is None:
                    offsets.remove(key.group, at)
                    continue
                stored = StoredOffset(parse_offset_value(loaded.value), loaded.offset)
                replayed.named.add(key.group)
                if loaded.transactional and loaded.producer_id >= 0:
                    offsets.add_pending(loaded.producer_id, key.group, at, stored)
                else:
                    offsets.put(key.group, at, stored)
            elif isinstance(key, GroupKey):
                if loaded.value is None:
                    replayed.metadata.pop(key.group, None)
                    replayed.named.discard(key.group)
                else:
                    replayed.metadata[key.group] = parse_group_value(loaded.value)
                    replayed.classic_last.add(key.group)
            else:
                replayed.consumer.apply(key, loaded.value)
                if loaded.value is not None:
                    replayed.classic_last.discard(key.group)
        except (CorruptGroupRecordError, CorruptConsumerRecordError):
            replayed.corrupt_records += 1
    return replayed


def txn_commit_error(
    group: Group | None, generation: int, member_id: str, instance: str | None
) -> ErrorCode:
    """Kafka's rules for a TxnOffsetCommit (v3+ carries the member's identity; older versions
    send generation -1 and no member, and may commit to any group)."""
    if group is None:
        # A producer outside any membership may create the group; a member cannot.
        return ErrorCode.NONE if generation < 0 else ErrorCode.ILLEGAL_GENERATION
    if group.is_(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.is_(GroupState.EMPTY):
        return ErrorCode.NONE
    if generation < 0 and not member_id and instance is None:
        return ErrorCode.NONE  # unlike OffsetCommit, the group's state does not matter
    if instance is not None:
        known = group.static_members.get(instance)
        if known is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if known != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation != group.generation:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE
