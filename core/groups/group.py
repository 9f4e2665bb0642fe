"""One consumer group of Kafka's classic protocol: its members, generation and state.

The states and their moves are Kafka's (GroupMetadata.scala):

    Empty ──join──> PreparingRebalance ──all joined / timeout──> CompletingRebalance
      ^                 ^        │                                    │ leader's SyncGroup
      │                 │        └── no members left ──> Empty        v  (stored)
      │                 └──────── join, leave, expiry ──────────── Stable
    Dead: deleted, or its coordinator moved away.

This module holds the data and the pure questions about it; `coordinator.py` drives the moves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from rlog.core.groups.records import GroupRecord, MemberRecord


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # The request tokens this member is blocked on (its JoinGroup / SyncGroup answer).
    join_token: int | None = None
    join_version: int = 0
    sync_token: int | None = None
    # When the coordinator gives up on it without a heartbeat.
    deadline_ms: int = 0

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # Member ids handed out by MEMBER_ID_REQUIRED (JoinGroup v4+), not yet joined, and when
    # they lapse.
    pending_members: dict[str, int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # When a PreparingRebalance ends even if some members have not rejoined.
    join_deadline_ms: int = 0
    # While the first members of an empty group arrive (group.initial.rebalance.delay.ms), the
    # join waits out its deadline instead of completing as soon as everyone known has joined.
    initial_delay: bool = False
    initial_deadline_cap_ms: int = 0  # the initial delay never outlasts the rebalance timeout
    new_member_added: bool = False  # a member arrived during this stretch of the delay
    state_timestamp_ms: int = -1

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            member.join_token is not None for member in self.members.values()
        )

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Whether a member with these protocols may join (Kafka's `supportsProtocols`)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = {name for name, _ in members[0].protocols}
        for member in members[1:]:
            common &= {name for name, _ in member.protocols}
        return common

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all support."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        order: list[str] = []
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            if choice not in votes:
                order.append(choice)
            votes[choice] = votes.get(choice, 0) + 1
        return max(order, key=lambda name: votes[name])

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, new_member_id: str) -> Member:
        """A static member rejoined with a new member id: it takes the old one's place."""
        old_id = self.static_members[instance_id]
        member = self.members.pop(old_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader == old_id:
            self.leader = new_member_id
        return member

    def fenced_static_member(self, instance_id: str | None, member_id: str) -> bool:
        """A request names a static instance that now belongs to another member id."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    # ---- its stored form in __consumer_offsets ----

    def to_record(self, now: int, assignments: dict[str, bytes]) -> GroupRecord:
        """The group metadata record, with these assignments."""
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol,
            leader=self.leader,
            current_state_timestamp=now,
            members=tuple(
                MemberRecord(
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    rebalance_timeout_ms=member.rebalance_timeout_ms,
                    session_timeout_ms=member.session_timeout_ms,
                    subscription=member.metadata_for(self.protocol or ""),
                    assignment=assignments.get(member.member_id, b""),
                )
                for member in self.members.values()
            ),
        )

    @classmethod
    def from_record(cls, group_id: str, record: GroupRecord | None, now: int) -> Group:
        """A group as a new coordinator finds it: Stable with its members, who must heartbeat
        here within their session timeout, or Empty."""
        group = cls(group_id, state_timestamp_ms=now)
        if record is None:
            return group
        group.generation = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol = record.protocol
        for stored in record.members:
            member = Member(
                member_id=stored.member_id,
                group_instance_id=stored.group_instance_id,
                client_id=stored.client_id,
                client_host=stored.client_host,
                session_timeout_ms=stored.session_timeout_ms,
                rebalance_timeout_ms=stored.rebalance_timeout_ms,
                protocol_type=record.protocol_type,
                protocols=[(record.protocol or "", stored.subscription)],
                assignment=stored.assignment,
                deadline_ms=now + stored.session_timeout_ms,
            )
            group.add_member(member)
        group.leader = record.leader if record.leader in group.members else group.leader
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group
