"""Journal events for committed metadata records (see rlog.daemon.events).

A record says what a partition or broker is now; the event says what changed, so each record is
compared with the state before it: the image before the batch, updated as the batch goes (a
batch may change one partition twice). One ChangePartition may be several events: a new leader
(``leader_elected``, or ``partition_offline`` when none is left), an ``unclean_election``, and
an ISR that lost members (``isr_shrunk``) or gained some (``isr_expanded``); or the start of a
recovery after its last ISR member crashed (``partition_recovering``).

The controller moves a broker's leaderships and ISR places away just before the record that
fences it (FenceBroker, or its next RegisterBroker); the journal puts ``broker_fenced`` before
those moves, cause before effects, as an operator reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    NO_LEADER,
    ChangeConfig,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataRecord,
    RegisterBroker,
    UnfenceBroker,
)


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    message: str
    fields: dict[str, Any]
    # Brokers this event's partition change moved off (left leader or ISR), to place their
    # fencing before it.
    moved_off: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class _Partition:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


class _Before:
    """The state each record changes, as it was before that record."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.partitions: dict[tuple[str, int], _Partition] = {}
        self.fenced: dict[int, bool] = {}

    def partition(self, topic: str, partition: int) -> _Partition:
        seen = self.partitions.get((topic, partition))
        if seen is not None:
            return seen
        info = self.image.partition(topic, partition)
        if info is None:
            return _Partition(NO_LEADER, -1, ())
        return _Partition(info.leader, info.leader_epoch, info.isr)

    def broker_fenced(self, broker_id: int) -> bool | None:
        """None for a broker never registered."""
        if broker_id in self.fenced:
            return self.fenced[broker_id]
        broker = self.image.brokers.get(broker_id)
        return broker.fenced if broker is not None else None


def record_events(image: MetadataImage, records: Sequence[MetadataRecord]) -> list[Event]:
    """The events of `records`, in order; `image` is the state before them."""
    before = _Before(image)
    events: list[Event] = []
    for record in records:
        for event in _events(before, record):
            if event.kind == "broker_fenced":
                events.insert(_before_moves_off(events, event.fields["broker"]), event)
            else:
                events.append(event)
    return events


def _before_moves_off(events: list[Event], broker_id: int) -> int:
    """Where a fencing goes: before the partition changes just ahead that moved off it."""
    index = len(events)
    while index and broker_id in events[index - 1].moved_off:
        index -= 1
    return index


def _leader(leader: int) -> str:
    return "none" if leader == NO_LEADER else str(leader)


def _events(before: _Before, record: MetadataRecord) -> list[Event]:
    match record:
        case RegisterBroker():
            return _registered(before, record)
        case FenceBroker():
            before.fenced[record.broker_id] = True
            fields = {"broker": record.broker_id, "broker_epoch": record.broker_epoch}
            return [Event("broker_fenced", f"broker {record.broker_id} fenced", fields)]
        case UnfenceBroker():
            before.fenced[record.broker_id] = False
            fields = {"broker": record.broker_id, "broker_epoch": record.broker_epoch}
            return [Event("broker_unfenced", f"broker {record.broker_id} unfenced", fields)]
        case CreateTopic():
            fields = {"topic": record.name, "topic_id": record.topic_id, "configs": record.configs}
            return [Event("topic_created", f"topic {record.name} created", fields)]
        case CreatePartition():
            return [_partition_created(before, record)]
        case ChangePartition():
            return _partition_changed(before, record)
        case DeleteTopic():
            return [Event("topic_deleted", f"topic {record.name} deleted", {"topic": record.name})]
        case ChangeConfig():
            return [_config_changed(record)]
    return []


def _registered(before: _Before, record: RegisterBroker) -> list[Event]:
    events = []
    if before.broker_fenced(record.broker_id) is False:  # a registration fences the old one
        events.append(
            Event(
                "broker_fenced",
                f"broker {record.broker_id} fenced: it registers again",
                {"broker": record.broker_id, "broker_epoch": record.broker_epoch},
            )
        )
    before.fenced[record.broker_id] = True
    events.append(
        Event(
            "broker_registered",
            f"broker {record.broker_id} registered at {record.host}:{record.port} "
            f"(broker epoch {record.broker_epoch})",
            {
                "broker": record.broker_id,
                "broker_epoch": record.broker_epoch,
                "host": record.host,
                "port": record.port,
                "rack": record.rack,
            },
        )
    )
    return events


def _partition_created(before: _Before, record: CreatePartition) -> Event:
    before.partitions[(record.topic, record.partition)] = _Partition(
        record.leader, record.leader_epoch, record.isr
    )
    return Event(
        "partition_created",
        f"partition {record.topic}-{record.partition} created: replicas "
        f"{list(record.replicas)}, leader {_leader(record.leader)}, isr {list(record.isr)}",
        {
            "topic": record.topic,
            "partition": record.partition,
            "replicas": list(record.replicas),
            "leader": record.leader,
            "leader_epoch": record.leader_epoch,
            "isr": list(record.isr),
        },
    )


def _partition_changed(before: _Before, record: ChangePartition) -> list[Event]:
    old = before.partition(record.topic, record.partition)
    new = _Partition(
        old.leader if record.leader is None else record.leader,
        record.leader_epoch,
        old.isr if record.isr is None else record.isr,
    )
    before.partitions[(record.topic, record.partition)] = new
    name = f"{record.topic}-{record.partition}"
    common: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "leader": new.leader,
        "leader_epoch": new.leader_epoch,
        "partition_epoch": record.partition_epoch,
        "reason": record.reason,
    }
    events = []
    if record.recovering:
        message = (
            f"partition {name}: recovering, no clean election ({record.reason}); it waits for "
            "every replica's log end"
        )
        events.append(Event("partition_recovering", message, common))
    if new.leader != old.leader or new.leader_epoch != old.leader_epoch:
        events += _leader_events(name, old, new, record, common)
    removed = [b for b in old.isr if b not in new.isr]
    added = [b for b in new.isr if b not in old.isr]
    moved_off = frozenset(removed) | ({old.leader} if new.leader != old.leader else set())
    isr = {"isr": list(new.isr), "previous_isr": list(old.isr)}
    if removed:
        message = f"partition {name}: isr {list(old.isr)} -> {list(new.isr)} ({record.reason})"
        events.append(Event("isr_shrunk", message, {**common, **isr, "removed": removed}))
    if added:
        message = f"partition {name}: isr {list(old.isr)} -> {list(new.isr)} ({record.reason})"
        events.append(Event("isr_expanded", message, {**common, **isr, "added": added}))
    return [Event(e.kind, e.message, e.fields, moved_off) for e in events]


def _leader_events(
    name: str, old: _Partition, new: _Partition, record: ChangePartition, common: dict[str, Any]
) -> list[Event]:
    fields = {**common, "previous_leader": old.leader, "unclean": record.unclean}
    if new.leader == NO_LEADER:
        message = (
            f"partition {name}: no leader (was {_leader(old.leader)}), leader epoch "
            f"{new.leader_epoch} ({record.reason})"
        )
        return [Event("partition_offline", message, fields)]
    message = (
        f"partition {name}: leader {new.leader} (was {_leader(old.leader)}), leader epoch "
        f"{new.leader_epoch} ({record.reason})"
    )
    events = [Event("leader_elected", message, fields)]
    if record.unclean:
        message = (
            f"partition {name}: UNCLEAN election of leader {new.leader} from outside the isr "
            f"{list(old.isr)}: records may be lost ({record.reason})"
        )
        events.append(Event("unclean_election", message, fields))
    return events


def _config_changed(record: ChangeConfig) -> Event:
    where = {"topic": f"topic {record.name}", "broker": f"broker {record.name}"}.get(
        record.resource_type, "cluster default"
    )
    what = f"{record.key} removed" if record.value is None else f"{record.key} = {record.value}"
    return Event(
        "config_changed",
        f"config {where}: {what}",
        {
            "resource_type": record.resource_type,
            "name": record.name,
            "key": record.key,
            "value": record.value,
        },
    )
