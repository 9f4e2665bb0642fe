"""The consumer-protocol groups (KIP-848) of one group coordinator: their heartbeats, their
records in `__consumer_offsets`, their description, sans-IO.

`GroupCoordinator` (coordinator.py) owns the partitions, the writes and the offsets; it hands
ConsumerGroupHeartbeat and ConsumerGroupDescribe here once it knows the group is its to serve and
is not a classic group.

A heartbeat changes its group at once, then writes what changed (consumer_records.py) and is
answered only once the write is acknowledged, as Kafka answers: a member is never told an epoch or
an assignment that a new coordinator would not replay. While one write of a group is in flight,
its next heartbeats wait in line, so each write is computed from acknowledged state. A write that
fails puts the group back as it was before it, and the group's next write carries all of the
group (and tombstones for what the failed one may have added): a write that failed by timing out
may be in the log all the same, and the next one must override whatever it said.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlog.core.groups.consumer_group import (
    ConsumerGroup,
    ConsumerGroupSettings,
    ConsumerGroupState,
    TopicIds,
)
from rlog.core.groups.consumer_records import (
    Record,
    current_assignment_record,
    group_epoch_record,
    group_tombstones,
    member_record,
    member_tombstones,
    partition_metadata_record,
    target_epoch_record,
    target_member_record,
)
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
# Writes `records` to the group's partition; calls back with (error, now) once it has ended; its
# result is the coordinator's effect to hand out.
Writer = Callable[[str, list[Record], Callable[[ErrorCode, int], list[Any]]], Any]
Later = Callable[[int], list[Any]]  # a request waiting for its group's write, given `now`
# (the caller's token, the request, its answer if the group leaves this coordinator first)
Waiting = tuple[int, Later, Body]


def heartbeat_error(error: ErrorCode, message: str | None = None) -> Body:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message,
            "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0,
            "assignment": None}  # fmt: skip


@dataclass
class _Doubt:
    """A group whose last write failed: the members that write may have put in the log."""

    member_ids: set[str] = field(default_factory=set)


class ConsumerGroups:
    def __init__(self, settings: ConsumerGroupSettings, write: Writer) -> None:
        self.settings = settings
        self.groups: dict[str, ConsumerGroup] = {}
        self.topics = TopicIds({})
        self._write = write
        self._writing: set[str] = set()
        self._waiting: dict[str, deque[Waiting]] = {}
        self._doubt: dict[str, _Doubt] = {}

    # ---- the queue of a group's writes ----

    def busy(self, group_id: str) -> bool:
        return group_id in self._writing

    def wait(self, group_id: str, token: int, later: Later, refusal: Body) -> None:
        """`later` runs once the group's write in flight has ended; `refusal` (its API's
        NOT_COORDINATOR answer) answers it if the group is unloaded first."""
        self._waiting.setdefault(group_id, deque()).append((token, later, refusal))

    def drop(self, group_id: str) -> list[Waiting]:
        """Forget the group (unloaded, deleted); the requests that waited for it."""
        self.groups.pop(group_id, None)
        self._writing.discard(group_id)
        self._doubt.pop(group_id, None)
        return list(self._waiting.pop(group_id, ()))

    def give_back(self, group_id: str) -> None:
        """The group is a classic one again (its conversion was not written); the requests
        waiting for it run next, against the classic group."""
        self.groups.pop(group_id, None)
        self._doubt.pop(group_id, None)

    def _next(self, group_id: str, now: int) -> list[Any]:
        waiting = self._waiting.get(group_id)
        effects: list[Any] = []
        while waiting and not self.busy(group_id):
            _token, later, _refusal = waiting.popleft()
            effects += later(now)
        if waiting is not None and not waiting:
            del self._waiting[group_id]
        return effects

    # ---- changing a group ----

    def change(
        self,
        group_id: str,
        change: Callable[[ConsumerGroup], Any],
        answer: Callable[[Any, ErrorCode], list[Any]],
        now: int,
        first: list[Record] | None = None,
        on_failure: Callable[[], None] | None = None,
    ) -> list[Any]:
        """Apply `change` to the group (made if new) and write what it changed, `first` before
        it; then `answer(change's result, how the write ended)`. Nothing changed in the log:
        answered at once."""
        before = self.groups.get(group_id)
        group = before.snapshot() if before is not None else ConsumerGroup(group_id, self.settings)
        result = change(group)
        doubt = self._doubt.get(group_id)
        records = list(first or [])
        records += self._records(group_id, before, group, doubt)
        self.groups[group_id] = group
        if not records:
            return answer(result, ErrorCode.NONE)
        self._writing.add(group_id)

        def written(error: ErrorCode, now: int) -> list[Any]:
            self._writing.discard(group_id)
            if self.groups.get(group_id) is not group:
                return answer(result, ErrorCode.NOT_COORDINATOR)  # unloaded meanwhile
            if error == ErrorCode.NONE:
                self._doubt.pop(group_id, None)
            else:
                # What the write said may be in the log: the next write says it all again.
                doubt = self._doubt.setdefault(group_id, _Doubt())
                doubt.member_ids |= set(group.members)
                if before is None:
                    del self.groups[group_id]
                else:
                    self.groups[group_id] = before
                if on_failure is not None:
                    on_failure()
            return answer(result, error) + self._next(group_id, now)

        return [self._write(group_id, records, written)]

    def _records(
        self,
        group_id: str,
        before: ConsumerGroup | None,
        after: ConsumerGroup,
        doubt: _Doubt | None,
    ) -> list[Record]:
        """The records that take the log from `before` to `after`; all of `after` when the
        group is new or in doubt (its last write failed)."""
        ids = self.topics.by_name
        full = before is None or doubt is not None
        was = before.members if before is not None else {}

        def changed(old: object, new: object) -> bool:
            return full or old != new

        records: list[Record] = []
        for member_id, member in after.members.items():
            old = was.get(member_id)
            if changed(old and old.metadata, member.metadata):
                records.append(member_record(group_id, member_id, member.metadata))
        gone = set(was) - set(after.members)
        if doubt is not None:
            gone |= doubt.member_ids - set(after.members)
        for member_id in sorted(gone):
            records += member_tombstones(group_id, member_id)
        if changed(before and before.group_epoch, after.group_epoch):
            counts = after.partition_counts
            records.append(partition_metadata_record(group_id, counts, ids))
            records.append(group_epoch_record(group_id, after.group_epoch))
        for member_id in after.members:
            target = after.target.get(member_id, {})
            if changed(before and before.target.get(member_id), target):
                records.append(target_member_record(group_id, member_id, target, ids))
        if changed(before and before.assignment_epoch, after.assignment_epoch):
            records.append(target_epoch_record(group_id, after.assignment_epoch))
        for member_id, member in after.members.items():
            old = was.get(member_id)
            if changed(old and old.reconciled, member.reconciled):
                current = member.reconciled
                records.append(current_assignment_record(group_id, member_id, current, ids))
        return records

    def adopt(self, group: ConsumerGroup) -> None:
        """A group made from a classic one: its next write carries all of it."""
        self.groups[group.group_id] = group
        self._doubt.setdefault(group.group_id, _Doubt())

    def tombstones(self, group_id: str) -> list[Record]:
        """Every record of the group, as tombstones (it is deleted or becomes classic)."""
        group = self.groups.get(group_id)
        members = set(group.members) if group is not None else set()
        doubt = self._doubt.get(group_id)
        if doubt is not None:
            members |= doubt.member_ids
        return group_tombstones(group_id, sorted(members))

    # ---- describing ----

    def describe(self, group_id: str) -> Body:
        """One group of a ConsumerGroupDescribe answer."""
        group = self.groups.get(group_id)
        if group is None:
            return {"error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                    "error_message": f"Group {group_id} not found.", "group_id": group_id,
                    "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1,
                    "assignor_name": "", "members": [],
                    "authorized_operations": -(2**31)}  # fmt: skip
        return {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "group_id": group_id,
            "group_state": group.state.value,
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.assignor(),
            "members": [
                {
                    "member_id": member.member_id,
                    "instance_id": member.instance_id,
                    "rack_id": member.rack_id,
                    "member_epoch": member.epoch,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "subscribed_topic_names": sorted(member.subscribed),
                    "subscribed_topic_regex": member.regex,
                    "assignment": {"topic_partitions": self._described(member.reconciled.assigned)},
                    "target_assignment": {
                        "topic_partitions": self._described(group.target.get(member.member_id, {}))
                    },
                }
                for member in group.members.values()
            ],
            "authorized_operations": -(2**31),
        }

    def _described(self, partitions: dict[str, frozenset[int]] | Any) -> list[Body]:
        ids = self.topics.by_name
        return [
            {"topic_id": ids[name][0], "topic_name": name, "partitions": sorted(parts)}
            for name, parts in sorted(partitions.items())
            if name in ids and parts
        ]

    def state(self, group_id: str) -> ConsumerGroupState | None:
        group = self.groups.get(group_id)
        return group.state if group is not None else None
