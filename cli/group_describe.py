"""``rlog group describe`` of a group that speaks the consumer group protocol (KIP-848).

Such a group is described by ConsumerGroupDescribe v0 (api key 69), which :mod:`rlog.cli.group`
asks the group's coordinator first, as Kafka's admin client does; a classic group (or an unknown
one) answers GROUP_ID_NOT_FOUND, and DescribeGroups describes it instead. The answer carries
what DescribeGroups cannot: the group epoch, the epoch of the assignment the server-side
assignor computed last (the assignment epoch), the assignor's name, and per member its epoch,
its subscription, the partitions it owns now (its assignment) and those the assignor wants it
to own (its target assignment). A member still reconciling owns something else than its target:
:attr:`ConsumerMember.to_revoke` are the partitions it still has to give up,
:attr:`ConsumerMember.to_assign` those it has yet to get. As in Kafka, a member's assignment
leaves out the partitions it has been asked to revoke and has not released yet: such a member
shows its target as its assignment, but its epoch stays behind the assignment epoch until it
releases them (:attr:`ConsumerMember.behind`).

Everything here is a plain function of the answer's body (a ``groups`` entry, as the codec
decodes it), so the rendering is tested without a broker.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

CLASSIC = "classic"
CONSUMER = "consumer"
GROUP_TYPES = (CLASSIC, CONSUMER)  # ListGroups v5's group_type names, lower case

# --state and --members of a consumer-protocol group: the classic tables' columns first (so
# the same scripts read both), then what only this protocol has.
CONSUMER_STATE_HEADERS = (
    "GROUP",
    "COORDINATOR (ID)",
    "TYPE",
    "ASSIGNMENT-STRATEGY",
    "STATE",
    "GROUP-EPOCH",
    "ASSIGNMENT-EPOCH",
    "#MEMBERS",
)
CONSUMER_MEMBERS_HEADERS = (
    "GROUP",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
    "#PARTITIONS",
    "MEMBER-EPOCH",
    "SUBSCRIPTION",
    "ASSIGNMENT",
    "TARGET-ASSIGNMENT",
    "PENDING",
)

Key = tuple[str, int]  # (topic, partition)


def partitions_text(keys: Iterable[Key]) -> str | None:
    """Partitions as rlog's ``TOPIC:P,P`` syntax, topics joined by ";" (``a:0,1;b:2``), with no
    blank so a table row still splits on whitespace; None ("-") for none."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in keys:
        by_topic[topic].append(partition)
    if not by_topic:
        return None
    return ";".join(
        f"{topic}:{','.join(str(p) for p in sorted(set(ps)))}"
        for topic, ps in sorted(by_topic.items())
    )


def pending_text(
    to_assign: Sequence[Key], to_revoke: Sequence[Key], behind_epoch: int | None = None
) -> str | None:
    """The PENDING cell: ``+`` what the member is still to get, ``-`` what it is still to give
    up (``+t:3;-t:2``), ``behind-epoch-N`` while its epoch has not reached the assignment epoch
    N; None ("-") for a member that owns its target assignment at that epoch."""
    parts = []
    if to_assign:
        parts.append(f"+{partitions_text(to_assign)}")
    if to_revoke:
        parts.append(f"-{partitions_text(to_revoke)}")
    if behind_epoch is not None:
        parts.append(f"behind-epoch-{behind_epoch}")
    return ";".join(parts) or None


def _assignment(answer: dict[str, Any] | None) -> tuple[Key, ...]:
    """An Assignment struct's partitions, sorted; a topic the coordinator could not name (an
    empty topic_name: deleted meanwhile) is shown by its topic id."""
    keys = set()
    for topic in (answer or {}).get("topic_partitions") or []:
        name = topic.get("topic_name") or str(topic.get("topic_id") or "?")
        keys |= {(name, int(p)) for p in topic.get("partitions") or []}
    return tuple(sorted(keys))


def _json_partitions(keys: Iterable[Key]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in keys]


@dataclass(frozen=True)
class ConsumerMember:
    """One member as ConsumerGroupDescribe reports it."""

    member_id: str
    client_id: str
    host: str
    member_epoch: int
    subscribed_topics: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    assignment: tuple[Key, ...] = ()  # what it owns now
    target_assignment: tuple[Key, ...] = ()  # what the assignor wants it to own
    instance_id: str | None = None
    rack_id: str | None = None
    assignment_epoch: int = -1  # the group's: the epoch of the target assignment

    @property
    def behind(self) -> bool:
        """Its epoch is not the target assignment's yet: it has not acknowledged its target
        (it may still own partitions it was asked to revoke, which Kafka does not report)."""
        return 0 <= self.member_epoch < self.assignment_epoch

    @property
    def to_assign(self) -> tuple[Key, ...]:
        return tuple(sorted(set(self.target_assignment) - set(self.assignment)))

    @property
    def to_revoke(self) -> tuple[Key, ...]:
        return tuple(sorted(set(self.assignment) - set(self.target_assignment)))

    @property
    def reconciling(self) -> bool:
        return self.behind or set(self.assignment) != set(self.target_assignment)

    @property
    def subscription(self) -> str | None:
        """The SUBSCRIPTION cell: the topic names, comma-separated (a regex as ``/regex/``)."""
        names = list(self.subscribed_topics)
        if self.subscribed_topic_regex:
            names.append(f"/{self.subscribed_topic_regex}/")
        return ",".join(names) or None

    def as_json(self) -> dict[str, Any]:
        return {
            "consumer_id": self.member_id,
            "host": self.host,
            "client_id": self.client_id,
            "group_instance_id": self.instance_id,
            "rack_id": self.rack_id,
            "member_epoch": self.member_epoch,
            "subscribed_topics": list(self.subscribed_topics),
            "subscribed_topic_regex": self.subscribed_topic_regex,
            # "partitions": what it owns now, under the classic document's name
            "partitions": _json_partitions(self.assignment),
            "target_partitions": _json_partitions(self.target_assignment),
            "reconciling": self.reconciling,  # partitions to move, or an epoch behind
            "partitions_to_assign": _json_partitions(self.to_assign),
            "partitions_to_revoke": _json_partitions(self.to_revoke),
        }


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """A consumer-protocol group as ConsumerGroupDescribe reports it."""

    group: str
    state: str  # Empty, Assigning, Reconciling, Stable (Dead: gone)
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerMember, ...] = ()
    coordinator: str | None = None  # "host:port (id)"

    @property
    def member_count(self) -> int:
        return len(self.members)

    @property
    def reconciling_members(self) -> tuple[ConsumerMember, ...]:
        return tuple(m for m in self.members if m.reconciling)


def consumer_group_of(
    answer: dict[str, Any], coordinator: str | None = None
) -> ConsumerGroupDescription:
    """One ``groups`` entry of a ConsumerGroupDescribe answer without error; members sorted by
    client id, then member id (the answer's order is the coordinator's)."""
    members = tuple(
        sorted(
            (
                ConsumerMember(
                    member_id=str(m["member_id"]),
                    client_id=str(m.get("client_id") or ""),
                    host=str(m.get("client_host") or ""),
                    member_epoch=int(m.get("member_epoch", -1)),
                    subscribed_topics=tuple(sorted(m.get("subscribed_topic_names") or [])),
                    subscribed_topic_regex=m.get("subscribed_topic_regex") or None,
                    assignment=_assignment(m.get("assignment")),
                    target_assignment=_assignment(m.get("target_assignment")),
                    instance_id=m.get("instance_id"),
                    rack_id=m.get("rack_id"),
                    assignment_epoch=int(answer.get("assignment_epoch", -1)),
                )
                for m in answer.get("members") or []
            ),
            key=lambda m: (m.client_id, m.member_id),
        )
    )
    return ConsumerGroupDescription(
        group=str(answer["group_id"]),
        state=str(answer.get("group_state") or "Unknown"),
        group_epoch=int(answer.get("group_epoch", -1)),
        assignment_epoch=int(answer.get("assignment_epoch", -1)),
        assignor=str(answer.get("assignor_name") or ""),
        members=members,
        coordinator=coordinator,
    )


def protocol_note(group: ConsumerGroupDescription) -> str:
    """The stderr line that says the group speaks the consumer protocol, and its epochs."""
    assignor = f", assignor {group.assignor}" if group.assignor else ""
    return (
        f"Consumer group '{group.group}' uses the consumer protocol: group epoch "
        f"{group.group_epoch}, assignment epoch {group.assignment_epoch}{assignor}."
    )


def reconciling_notes(group: ConsumerGroupDescription) -> list[str]:
    """One stderr line per member that does not own its target assignment yet."""
    notes = []
    for member in group.reconciling_members:
        steps = []
        if member.to_revoke:
            steps.append(f"to revoke {partitions_text(member.to_revoke)}")
        if member.to_assign:
            steps.append(f"to assign {partitions_text(member.to_assign)}")
        if member.behind:
            steps.append(
                f"to reach assignment epoch {member.assignment_epoch} (partitions it has yet "
                "to release are not reported)"
            )
        notes.append(
            f"Member {member.member_id} (client {member.client_id or '-'}, epoch "
            f"{member.member_epoch}) is reconciling: {'; '.join(steps)}."
        )
    return notes


def consumer_state_row(group: ConsumerGroupDescription) -> tuple[Any, ...]:
    return (
        group.group,
        group.coordinator,
        CONSUMER,
        group.assignor or None,
        group.state,
        group.group_epoch,
        group.assignment_epoch,
        group.member_count,
    )


def consumer_members_rows(group: ConsumerGroupDescription) -> list[tuple[Any, ...]]:
    return [
        (
            group.group,
            m.member_id,
            m.host or None,
            m.client_id or None,
            len(m.assignment),
            m.member_epoch,
            m.subscription,
            partitions_text(m.assignment),
            partitions_text(m.target_assignment),
            pending_text(m.to_assign, m.to_revoke, m.assignment_epoch if m.behind else None),
        )
        for m in group.members
    ]


def consumer_describe_document(
    group: ConsumerGroupDescription, partitions: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """``describe --json`` of a consumer-protocol group: the classic document's keys (``type``
    tells them apart), plus the epochs and each member's target assignment."""
    return {
        "group": group.group,
        "type": CONSUMER,
        "state": group.state,
        "coordinator": group.coordinator,
        "assignment_strategy": group.assignor or None,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "member_count": group.member_count,
        "members": [m.as_json() for m in group.members],
        "partitions": list(partitions),
    }


def group_type_name(value: Any) -> str | None:
    """A group type (confluent-kafka's ConsumerGroupType, or ListGroups' string) as ``classic``
    or ``consumer``; None when unknown."""
    name = getattr(value, "name", value)
    if isinstance(name, str) and name.lower() in GROUP_TYPES:
        return name.lower()
    return None


def parse_group_types(values: Sequence[str] | None) -> list[str]:
    """``--type``: repeatable and comma-separated (``classic,consumer``), as
    kafka-consumer-groups.sh's; ValueError naming the bad one."""
    chosen: list[str] = []
    for value in values or []:
        for part in value.split(","):
            name = part.strip().lower()
            if not name:
                continue
            if name not in GROUP_TYPES:
                raise ValueError(
                    f"bad --type {part.strip()!r} (one of {', '.join(GROUP_TYPES)}, or both "
                    "comma-separated)"
                )
            if name not in chosen:
                chosen.append(name)
    if values is not None and not chosen:
        raise ValueError(f"--type needs a value ({', '.join(GROUP_TYPES)})")
    return chosen
