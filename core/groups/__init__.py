"""Consumer groups: Kafka's classic group protocol and the offsets kept in `__consumer_offsets`.

`GroupCoordinator` (coordinator.py) is the entry point; `records.py` holds the stored formats.
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
    "Member",
    "Respond",
    "group_partition",
]
