"""The server-side assignors of the consumer group protocol (KIP-848): `uniform` and `range`.

In the new protocol the coordinator, not a member, computes the group's target assignment each
time the group epoch moves. These are the two assignors Kafka ships, with the properties Kafka
documents for them:

* `uniform` (the default): balance first (no member holds more than one partition more than
  another that could take it), then stickiness (a member keeps what it holds whenever balance
  allows). With different subscriptions, each partition goes only to members subscribed to its
  topic, and the same balance is sought among them.
* `range`: per topic, contiguous ranges in member order (static members by instance id first,
  then member ids), so members subscribed to the same co-partitioned topics get the same
  partition numbers of each: what joins of two topics rely on.

Pure functions: topics are named by name (rlog's metadata is keyed by name) and assignments are
`{member_id: {topic: frozenset(partitions)}}`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

Assignment = dict[str, frozenset[int]]  # topic -> partitions


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of one member: its subscription and what it holds now."""

    member_id: str
    topics: frozenset[str]
    current: Mapping[str, frozenset[int]]
    instance_id: str | None = None


class AssignorError(Exception):
    """The assignment cannot be computed (a member subscribes to a topic that does not exist
    is not one: such topics are left out, as Kafka's coordinator leaves them out of the spec)."""


ASSIGNORS = ("uniform", "range")


def assign(
    name: str, members: list[MemberSpec], partitions: Mapping[str, int]
) -> dict[str, Assignment]:
    """The target assignment by assignor `name`; `partitions`: topic -> partition count of
    every topic that exists."""
    if name == "uniform":
        return assign_uniform(members, partitions)
    if name == "range":
        return assign_range(members, partitions)
    raise AssignorError(f"unknown assignor {name!r}: the broker has {', '.join(ASSIGNORS)}")


def _subscribed(member: MemberSpec, partitions: Mapping[str, int]) -> list[str]:
    return sorted(t for t in member.topics if partitions.get(t, 0) > 0)


# ---- range ----


def _range_order(members: list[MemberSpec]) -> list[MemberSpec]:
    """Static members by instance id first (they come back under a new member id), then the
    rest by member id."""
    static = sorted((m for m in members if m.instance_id), key=lambda m: m.instance_id or "")
    dynamic = sorted((m for m in members if not m.instance_id), key=lambda m: m.member_id)
    return static + dynamic


def assign_range(members: list[MemberSpec], partitions: Mapping[str, int]) -> dict[str, Assignment]:
    ordered = _range_order(members)
    subscribers: dict[str, int] = {}
    for member in ordered:
        for topic in _subscribed(member, partitions):
            subscribers[topic] = subscribers.get(topic, 0) + 1
    next_start = dict.fromkeys(subscribers, 0)
    extra_left = {t: partitions[t] % n for t, n in subscribers.items()}
    result: dict[str, Assignment] = {}
    for member in ordered:
        assignment: Assignment = {}
        for topic in _subscribed(member, partitions):
            quota = partitions[topic] // subscribers[topic]
            if extra_left[topic] > 0:
                quota += 1
                extra_left[topic] -= 1
            start = next_start[topic]
            end = min(start + quota, partitions[topic])
            next_start[topic] = end
            if start < end:
                assignment[topic] = frozenset(range(start, end))
        result[member.member_id] = assignment
    return result


# ---- uniform ----


def assign_uniform(
    members: list[MemberSpec], partitions: Mapping[str, int]
) -> dict[str, Assignment]:
    if not members:
        return {}
    subscriptions = {m.member_id: frozenset(_subscribed(m, partitions)) for m in members}
    if len(set(subscriptions.values())) == 1:
        return _uniform_homogeneous(members, partitions, sorted(next(iter(subscriptions.values()))))
    return _uniform_heterogeneous(members, partitions, subscriptions)


def _kept(
    member: MemberSpec, topics: frozenset[str] | set[str], partitions: Mapping[str, int]
) -> Iterator[tuple[str, int]]:
    """What a member holds that it may keep: partitions of its subscribed topics that exist."""
    for topic in sorted(member.current):
        if topic in topics:
            for partition in sorted(member.current[topic]):
                if partition < partitions.get(topic, 0):
                    yield topic, partition


def _uniform_homogeneous(
    members: list[MemberSpec], partitions: Mapping[str, int], topics: list[str]
) -> dict[str, Assignment]:
    """Every member subscribes to the same topics: quotas of total/members, the remainder
    going to the members that hold the most now (so fewer partitions move)."""
    total = sum(partitions[t] for t in topics)
    keepable = {m.member_id: list(_kept(m, set(topics), partitions)) for m in members}
    by_holding = sorted(keepable, key=lambda member_id: (-len(keepable[member_id]), member_id))
    minimum, extra = divmod(total, len(members))
    taken: set[tuple[str, int]] = set()
    held: dict[str, list[tuple[str, int]]] = {}
    for index, member_id in enumerate(by_holding):
        quota = minimum + (1 if index < extra else 0)
        keep = held[member_id] = []
        for topic_partition in keepable[member_id]:
            if len(keep) < quota and topic_partition not in taken:
                keep.append(topic_partition)
                taken.add(topic_partition)
    free = iter([(t, p) for t in topics for p in range(partitions[t]) if (t, p) not in taken])
    for index, member_id in enumerate(by_holding):
        quota = minimum + (1 if index < extra else 0)
        while len(held[member_id]) < quota:
            free_partition = next(free, None)
            if free_partition is None:
                raise AssignorError("fewer partitions than the quotas add up to")
            held[member_id].append(free_partition)
    return {member_id: _as_assignment(pairs) for member_id, pairs in held.items()}


def _uniform_heterogeneous(
    members: list[MemberSpec],
    partitions: Mapping[str, int],
    subscriptions: dict[str, frozenset[str]],
) -> dict[str, Assignment]:
    """Members subscribe to different topics: keep what each holds, give every free partition
    to the least loaded member subscribed to its topic (topics with fewest subscribers first,
    as they have fewest choices), then move partitions from the most to the least loaded
    subscriber of their topic while that narrows the gap."""
    held: dict[str, set[tuple[str, int]]] = {m.member_id: set() for m in members}
    owner: dict[tuple[str, int], str] = {}
    for member in sorted(members, key=lambda m: m.member_id):
        for topic_partition in _kept(member, subscriptions[member.member_id], partitions):
            if topic_partition not in owner:
                owner[topic_partition] = member.member_id
                held[member.member_id].add(topic_partition)
    subscribers = {
        topic: sorted(m for m, topics in subscriptions.items() if topic in topics)
        for topic in {t for topics in subscriptions.values() for t in topics}
    }
    for topic in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        for partition in range(partitions[topic]):
            if (topic, partition) in owner:
                continue
            taker = min(subscribers[topic], key=lambda m: (len(held[m]), m))
            owner[(topic, partition)] = taker
            held[taker].add((topic, partition))
    _even_out(held, owner, subscribers)
    return {member_id: _as_assignment(pairs) for member_id, pairs in held.items()}


def _even_out(
    held: dict[str, set[tuple[str, int]]],
    owner: dict[tuple[str, int], str],
    subscribers: dict[str, list[str]],
) -> None:
    """Move one partition at a time from a member to a subscriber of its topic that holds at
    least two fewer, until no such move exists. Each move lowers the sum of squared loads, so
    this ends."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(held, key=lambda m: (-len(held[m]), m)):
            for topic_partition in sorted(held[giver]):
                candidates = [
                    m
                    for m in subscribers[topic_partition[0]]
                    if len(held[m]) + 1 < len(held[giver])
                ]
                if not candidates:
                    continue
                taker = min(candidates, key=lambda m: (len(held[m]), m))
                held[giver].discard(topic_partition)
                held[taker].add(topic_partition)
                owner[topic_partition] = taker
                moved = True
                break
            if moved:
                break


def _as_assignment(pairs: Iterable[tuple[str, int]]) -> Assignment:
    grouped: dict[str, set[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, set()).add(partition)
    return {topic: frozenset(found) for topic, found in sorted(grouped.items())}
