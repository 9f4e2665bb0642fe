"""Consumer groups: Kafka's classic group protocol and the offsets kept in `__consumer_offsets`.

`GroupCoordinator` (coordinator.py) is the entry point; `records.py` holds the stored formats,
`txn_offsets.py` the offsets (committed, and transactional ones pending) and the replay of a log.
"""

from rlog.core.groups.coordinator import (
    Append,
    Caller,
    Effect,
    GroupConfig,
    GroupCoordinator,
    GroupEvent,
    LoadSummary,
    Respond,
)
from rlog.core.groups.group import Group, GroupState, Member
from rlog.core.groups.partitioner import group_partition
from rlog.core.groups.records import LoadedMarker, LoadedRecord

__all__ = [
    "Append",
    "Caller",
    "Effect",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "GroupEvent",
    "GroupState",
    "LoadSummary",
    "LoadedMarker",
    "LoadedRecord",
    "Member",
    "Respond",
    "group_partition",
]
