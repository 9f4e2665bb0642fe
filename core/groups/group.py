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

import struct
from dataclasses import dataclass, field
from enum import Enum

from rlog.core.groups.records import GroupRecord, MemberRecord

CONSUMER_PROTOCOL_TYPE = "consumer"  # the Java, librdkafka and Python consumers' protocol type


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
    # When it entered its state; -1: not known (loaded from a record that did not say).
    state_timestamp_ms: int = -1
    # The topics its consumers subscribe to, as of its generation's start (Kafka's
    # subscribedTopics); None where that is not known: not a consumer group, or a subscription
    # that does not parse.
    subscribed_topics: frozenset[str] | None = None

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

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether its members consume `topic`; a consumer group whose subscriptions are not
        known counts as subscribed to everything (its offsets are left alone)."""
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """The union of the members' subscriptions for the chosen protocol (Kafka's
        computeSubscribedTopics): empty without members, None unless every one parses."""
        if not self.uses_consumer_protocol():
            return None
        if not self.members:
            return frozenset()
        if self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            subscribed = subscription_topics(member.metadata_for(self.protocol))
            if subscribed is None:
                return None
            topics |= subscribed
        return frozenset(topics)

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
        # Kept across coordinators: an empty group's offsets expire counting from it.
        group.state_timestamp_ms = record.current_state_timestamp
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
        group.subscribed_topics = group.compute_subscribed_topics()
        return group


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a consumer protocol subscription (the JoinGroup metadata of the "consumer"
    protocol type): every version starts with v0's fields (version, topics[], user_data), which
    is all Kafka reads of it; None if it does not parse."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        (count,) = _I32.unpack_from(metadata, 2)
        if version < 0 or count < 0:
            return None
        at = 6
        topics = set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, at)
            at += 2
            if length < 0 or at + length > len(metadata):
                return None
            topics.add(metadata[at : at + length].decode())
            at += length
        (user_data_length,) = _I32.unpack_from(metadata, at)  # v0 ends with user_data
        if user_data_length < -1 or at + 4 + max(user_data_length, 0) > len(metadata):
            return None
    except (struct.error, UnicodeDecodeError):
        return None
    return topics
