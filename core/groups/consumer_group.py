"""One group of the consumer group protocol (KIP-848), sans-IO: ConsumerGroupHeartbeat in,
the answer out, as Kafka's GroupMetadataManager.consumerGroupHeartbeat does it.

* The group epoch moves when a member joins, leaves or changes its subscription, or when a
  subscribed topic's partition count changes. A new group epoch gets a new target assignment
  from the group's server-side assignor (server_assignors.py).
* Each heartbeat moves its member toward its target (reconciliation.py): partitions another
  member still owns are given only once released; a member that must give some up keeps its
  epoch until it has, and is fenced if it has not within its rebalance timeout.
* A member whose heartbeats stop for the session timeout is removed; so is one that sends an
  epoch the group never gave it (FENCED_MEMBER_EPOCH), which then rejoins with epoch 0.

Topics are named by name inside; the wire's topic ids are translated by the caller's `TopicIds`
(from the metadata image). Time comes only as `now_ms`. What the coordinator keeps across a
failover (records in __consumer_offsets) is not here.
"""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import Any

from rlog.core.groups.consumer_records import (
    ClassicMetadata,
    LoadedConsumerGroup,
    MemberMetadata,
    current_assignment,
    named,
)
from rlog.core.groups.reconciliation import UNOWNED, MemberAssignment, MemberState, reconcile
from rlog.core.groups.server_assignors import ASSIGNORS, MemberSpec, assign
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
Partitions = Mapping[str, frozenset[int]]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2  # a static member goes away for a while and keeps its partitions
DEFAULT_ASSIGNOR = "uniform"


class ConsumerGroupState(Enum):
    """As ConsumerGroupDescribe and ListGroups name them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True)
class ConsumerGroupSettings:
    """group.consumer.* settings, under Kafka's names."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size


@dataclass(frozen=True)
class TopicIds:
    """The topics that exist now: name -> (id, partition count)."""

    by_name: Mapping[str, tuple[uuid.UUID, int]]

    @cached_property
    def names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name."""
        return {found: name for name, (found, _count) in self.by_name.items()}

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        return self.names.get(topic_id)

    @cached_property
    def _matched(self) -> dict[str, frozenset[str]]:
        return {}  # by regex: each heartbeat asks again for every member's

    def matching(self, regex: str) -> frozenset[str]:
        """The topics a subscription's regex matches whole (as Java's Pattern.matches);
        internal topics (`__...`) never match."""
        found = self._matched.get(regex)
        if found is None:
            pattern = re.compile(regex)
            found = frozenset(
                name
                for name in self.by_name
                if not name.startswith("__") and pattern.fullmatch(name)
            )
            self._matched[regex] = found
        return found

    def partition_counts(self, names: frozenset[str]) -> dict[str, int]:
        return {n: self.by_name[n][1] for n in sorted(names) if n in self.by_name}


@dataclass
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed: frozenset[str] = frozenset()
    instance_id: str | None = None
    rack_id: str | None = None
    server_assignor: str | None = None
    reconciled: MemberAssignment = field(default_factory=MemberAssignment)
    regex: str | None = None  # topics matching it are subscribed too
    matched: frozenset[str] = frozenset()  # the topics `regex` matched at the last heartbeat
    classic: ClassicMetadata | None = None  # a classic-protocol consumer's (JoinGroup's)
    rejoin_deadline_ms: int | None = None  # a classic member told to rejoin must by then
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None  # while it must give partitions up

    @property
    def epoch(self) -> int:
        return self.reconciled.member_epoch

    @property
    def metadata(self) -> MemberMetadata:
        """What of it the log keeps (record 5)."""
        return MemberMetadata(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.regex,
            self.classic,
        )

    @property
    def topics(self) -> frozenset[str]:
        """Every topic it subscribes to: by name, and by its regex."""
        return self.subscribed | self.matched


@dataclass(frozen=True)
class ClassicMember:
    """A member of a classic group that becomes a consumer group, as that group knew it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    subscribed: frozenset[str]
    assigned: Partitions


@dataclass(frozen=True)
class ClassicJoin:
    """What a classic consumer's JoinGroup says (its "consumer" protocol subscription decoded)."""

    instance_id: str | None
    rack_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    subscribed: frozenset[str]
    owned: Partitions
    client_id: str
    client_host: str


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConsumerGroup:
    def __init__(self, group_id: str, settings: ConsumerGroupSettings) -> None:
        self.group_id = group_id
        self.settings = settings
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, dict[str, frozenset[int]]] = {}
        self._partition_counts: dict[str, int] = {}  # of the subscribed topics, at the epoch

    @classmethod
    def from_log(
        cls,
        group_id: str,
        settings: ConsumerGroupSettings,
        loaded: LoadedConsumerGroup,
        topics: TopicIds,
        now_ms: int,
    ) -> ConsumerGroup:
        """The group as its replayed records leave it; every member's session starts now (as
        Kafka's does on a new coordinator), and so does the revocation time of a member that
        still has partitions to give up."""
        group = cls(group_id, settings)
        group.group_epoch = loaded.group_epoch
        group.assignment_epoch = loaded.assignment_epoch
        group._partition_counts = dict(loaded.partition_counts)
        for member_id, meta in loaded.members.items():
            member = ConsumerMember(
                member_id,
                meta.client_id,
                meta.client_host,
                meta.rebalance_timeout_ms,
                meta.subscribed,
                meta.instance_id,
                meta.rack_id,
                meta.server_assignor,
                regex=meta.regex,
                classic=meta.classic,
                session_deadline_ms=now_ms
                + (
                    meta.classic.session_timeout_ms if meta.classic else settings.session_timeout_ms
                ),
            )
            member.matched = _matching(member.regex, topics)
            body = loaded.current.get(member_id)
            if body is not None:
                member.reconciled = current_assignment(body, topics.names)
            if member.reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            group.members[member_id] = member
            group.target[member_id] = dict(named(loaded.targets.get(member_id, {}), topics.names))
        return group

    @classmethod
    def from_classic(
        cls,
        group_id: str,
        settings: ConsumerGroupSettings,
        members: list[ClassicMember],
        generation: int,
        topics: TopicIds,
        now_ms: int,
    ) -> ConsumerGroup:
        """A classic group with members becoming a consumer group (Kafka's online upgrade):
        each member keeps what it was assigned, at an epoch of the classic generation, and goes
        on as a classic member of this group."""
        group = cls(group_id, settings)
        group.group_epoch = group.assignment_epoch = generation
        for classic in members:
            assigned = {t: p for t, p in classic.assigned.items() if t in topics.by_name}
            member = ConsumerMember(
                classic.member_id,
                classic.client_id,
                classic.client_host,
                classic.rebalance_timeout_ms,
                frozenset(classic.subscribed),
                classic.instance_id,
                classic=ClassicMetadata(classic.session_timeout_ms, classic.protocols),
                session_deadline_ms=now_ms + classic.session_timeout_ms,
            )
            member.reconciled = MemberAssignment(
                member_epoch=generation, previous_member_epoch=generation - 1, assigned=assigned
            )
            group.members[member.member_id] = member
            group.target[member.member_id] = dict(assigned)
        group._partition_counts = topics.partition_counts(group._subscribed_topics())
        return group

    def snapshot(self) -> ConsumerGroup:
        """A copy that changes to the group leave alone. Shallow where it can be: the group
        only ever replaces a member's fields, its target's entries and its partition counts
        (all immutable values), never changes them in place; so per member one copy, not a
        deep copy of everything on every heartbeat."""
        copied = copy.copy(self)
        copied.members = {mid: copy.copy(member) for mid, member in self.members.items()}
        copied.target = dict(self.target)
        copied._partition_counts = dict(self._partition_counts)
        return copied

    # ---- what others ask ----

    def is_subscribed_to(self, topic: str) -> bool:
        return any(topic in member.topics for member in self.members.values())

    @property
    def partition_counts(self) -> dict[str, int]:
        """The subscribed topics' partition counts the group epoch was computed for."""
        return dict(self._partition_counts)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(
            m.epoch != self.assignment_epoch or m.reconciled.state is not MemberState.STABLE
            for m in self.members.values()
        ):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def assignor(self) -> str:
        """The assignor most members ask for (ties: by name), else the default."""
        asked = [m.server_assignor for m in self.members.values() if m.server_assignor]
        if not asked:
            return DEFAULT_ASSIGNOR
        return min(set(asked), key=lambda name: (-asked.count(name), name))

    def owner_epoch(self, topic: str, partition: int, *, besides: str = "") -> int:
        """The epoch of the member that holds the partition (assigned or being revoked)."""
        for member in self.members.values():
            if member.member_id == besides:
                continue
            held = member.reconciled
            if partition in held.assigned.get(topic, ()) or partition in (
                held.pending_revocation.get(topic, ())
            ):
                return member.epoch
        return UNOWNED

    # ---- the heartbeat ----

    def heartbeat(
        self, body: Body, client_id: str, client_host: str, topics: TopicIds, now_ms: int
    ) -> Body:
        """One ConsumerGroupHeartbeat; the answer's body (errors as its error code)."""
        try:
            return self._heartbeat(body, client_id, client_host, topics, now_ms)
        except HeartbeatError as error:
            return {"throttle_time_ms": 0, "error_code": error.code,
                    "error_message": error.message, "member_id": None, "member_epoch": 0,
                    "heartbeat_interval_ms": 0, "assignment": None}  # fmt: skip

    def _heartbeat(
        self, body: Body, client_id: str, client_host: str, topics: TopicIds, now_ms: int
    ) -> Body:
        _check_request(body)
        epoch: int = body["member_epoch"]
        member_id: str = body.get("member_id") or ""
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(member_id, epoch, topics)
        owned = _owned(body.get("topic_partitions"), topics)
        if epoch == JOIN_EPOCH:
            member = self._join(member_id or str(uuid.uuid4()), body, client_id, client_host)
            before = MemberAssignment()
        else:
            member = self._known(member_id, epoch, owned)
            before = member.reconciled
        subscription_changed = self._update(member, body, client_id, client_host)
        if epoch == JOIN_EPOCH:
            subscription_changed = True
        self._move(member, subscription_changed, owned, topics, now_ms)
        member.session_deadline_ms = now_ms + self.settings.session_timeout_ms
        answer: Body = {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "member_id": member.member_id,
            "member_epoch": member.epoch,
            "heartbeat_interval_ms": self.settings.heartbeat_interval_ms,
            "assignment": None,
        }
        full = epoch == JOIN_EPOCH or (
            body.get("rebalance_timeout_ms", -1) != -1
            and body.get("subscribed_topic_names") is not None
            and body.get("topic_partitions") is not None
        )
        # Beyond Kafka's two cases (a full request, a changed assignment): a member that says
        # it owns other partitions than it was given missed an answer (lost, or overtaken by
        # the answer to a second copy of its request), so it is told again.
        assigned = {t: p for t, p in member.reconciled.assigned.items() if p}
        missed = owned is not None and owned != assigned
        if full or missed or member.reconciled.assigned != before.assigned:
            answer["assignment"] = {
                "topic_partitions": _as_wire(member.reconciled.assigned, topics)
            }
        return answer

    def _move(
        self,
        member: ConsumerMember,
        subscription_changed: bool,
        owned: Partitions | None,
        topics: TopicIds,
        now_ms: int,
    ) -> None:
        """A new group epoch (and target) if the subscriptions or their topics changed; then
        the member one step toward its target."""
        # Topics made or deleted since change what regexes match, for every member.
        for each in self.members.values():
            matched = _matching(each.regex, topics)
            if matched != each.matched:
                each.matched = matched
                subscription_changed = True
        counts = topics.partition_counts(self._subscribed_topics())
        if subscription_changed or counts != self._partition_counts:
            self._partition_counts = counts
            self.group_epoch += 1
        if self.group_epoch > self.assignment_epoch:
            self._new_target()
        self._reconcile(member, owned, now_ms)

    # ---- classic members (JoinGroup, SyncGroup, Heartbeat) in this group, as Kafka 4 allows --

    def classic_join(
        self, member_id: str, join: ClassicJoin, topics: TopicIds, now_ms: int
    ) -> ConsumerMember:
        """A JoinGroup of a classic-protocol consumer: the broker assigns it as any member;
        what it owns is what its subscription says (a cooperative member lists what it kept,
        an eager one nothing). Its answer's generation is the member's epoch."""
        member = self.members.get(member_id)
        changed = False
        if member is not None and member.classic is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} uses the consumer protocol"
            )
        if join.instance_id is not None:
            earlier = next(
                (m for m in self.members.values()
                 if m.instance_id == join.instance_id and m.member_id != member_id),
                None,
            )  # fmt: skip
            if earlier is not None:  # the static member came back under a new id
                self.remove(earlier.member_id, topics)
        if member is None:
            if len(self.members) >= self.settings.max_size:
                raise HeartbeatError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"group {self.group_id} has {len(self.members)} members, its maximum",
                )
            member = ConsumerMember(member_id, join.client_id, join.client_host, 0)
            self.members[member_id] = member
            changed = True
        if member.subscribed != join.subscribed or member.regex is not None:
            member.subscribed, member.regex, member.matched = join.subscribed, None, frozenset()
            changed = True
        member.instance_id, member.rack_id = join.instance_id, join.rack_id
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.client_id, member.client_host = join.client_id, join.client_host
        member.server_assignor = None
        member.classic = ClassicMetadata(join.session_timeout_ms, join.protocols)
        member.rejoin_deadline_ms = None
        self._move(member, changed, join.owned, topics, now_ms)
        member.session_deadline_ms = now_ms + join.session_timeout_ms
        return member

    def classic_member(self, member_id: str, generation: int, now_ms: int) -> ConsumerMember:
        """The classic member a SyncGroup or Heartbeat names, at its generation (its epoch);
        its session starts again."""
        member = self.members.get(member_id)
        if member is None or member.classic is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {self.group_id}"
            )
        if generation != member.epoch:
            raise HeartbeatError(
                ErrorCode.ILLEGAL_GENERATION,
                f"generation {generation}, the member's epoch is {member.epoch}",
            )
        member.session_deadline_ms = now_ms + member.classic.session_timeout_ms
        return member

    def must_rejoin(self, member: ConsumerMember, now_ms: int) -> bool:
        """Whether a classic member must JoinGroup again (a Heartbeat's REBALANCE_IN_PROGRESS):
        the group moved on, it has partitions to give up, or partitions it waits for are free.
        It is removed if it has not rejoined within its rebalance timeout."""
        state = member.reconciled.state
        rejoin = (
            member.epoch < self.group_epoch
            or state is MemberState.UNREVOKED_PARTITIONS
            or (state is MemberState.UNRELEASED_PARTITIONS and not self._waiting_on_others(member))
        )
        if rejoin and member.rejoin_deadline_ms is None:
            member.rejoin_deadline_ms = now_ms + member.rebalance_timeout_ms
        return rejoin

    def _waiting_on_others(self, member: ConsumerMember) -> bool:
        target = self.target.get(member.member_id, {})
        for topic, partitions in target.items():
            for partition in partitions - member.reconciled.assigned.get(topic, frozenset()):
                if self.owner_epoch(topic, partition, besides=member.member_id) != UNOWNED:
                    return True
        return False

    def _join(self, member_id: str, body: Body, client_id: str, client_host: str) -> ConsumerMember:
        instance_id = body.get("instance_id")
        if instance_id is not None:
            earlier = next((m for m in self.members.values() if m.instance_id == instance_id), None)
            if earlier is not None:
                if earlier.epoch != STATIC_LEAVE_EPOCH and earlier.member_id != member_id:
                    raise HeartbeatError(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"static member {instance_id} is still in the group as "
                        f"{earlier.member_id}: it must leave (epoch -2) first",
                    )
                # The static member comes back under a new member id with what it had, and
                # reconciles from there (epoch 0, as a joining member).
                old_id = earlier.member_id
                del self.members[old_id]
                earlier.member_id = member_id
                earlier.reconciled = MemberAssignment(
                    member_epoch=JOIN_EPOCH, assigned=earlier.reconciled.assigned
                )
                self.members[member_id] = earlier
                self.target[member_id] = self.target.pop(old_id, {})
                return earlier
        member = self.members.get(member_id)
        if member is not None:  # rejoins with epoch 0: it starts again, owning nothing
            member.reconciled = replace(MemberAssignment(), member_epoch=0)
            return member
        if len(self.members) >= self.settings.max_size:
            raise HeartbeatError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"group {self.group_id} has {len(self.members)} members, its maximum",
            )
        member = ConsumerMember(member_id, client_id, client_host, body["rebalance_timeout_ms"])
        self.members[member_id] = member
        return member

    def _known(self, member_id: str, epoch: int, owned: Partitions | None) -> ConsumerMember:
        member = self.members.get(member_id)
        if member is None or member.classic is not None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"member {member_id} is not in group {self.group_id}: it must rejoin",
            )
        current = member.reconciled
        if epoch > current.member_epoch or (
            epoch < current.member_epoch
            and (
                epoch != current.previous_member_epoch
                or owned is None
                or not _subset(owned, current.assigned)
            )
        ):
            # A lost answer with the new epoch is forgiven (the previous epoch, owning no more
            # than it was given); anything else means the member missed something.
            raise HeartbeatError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                f"member {member_id} sent epoch {epoch}, the group has it at "
                f"{current.member_epoch}: it must give up its partitions and rejoin",
            )
        return member

    def _update(self, member: ConsumerMember, body: Body, client_id: str, client_host: str) -> bool:
        """Take the fields the heartbeat set (null: unchanged); True if the subscription or the
        assignor changed, which moves the group epoch."""
        changed = False
        names = body.get("subscribed_topic_names")
        if names is not None and frozenset(names) != member.subscribed:
            member.subscribed = frozenset(names)
            changed = True
        regex = body.get("subscribed_topic_regex")
        if regex is not None and (regex or None) != member.regex:
            member.regex = regex or None  # "" (librdkafka's when it subscribes by name): none
            changed = True
        assignor = body.get("server_assignor")
        if assignor is not None and assignor != member.server_assignor:
            member.server_assignor = assignor
            changed = True
        if body.get("instance_id") is not None:
            member.instance_id = body["instance_id"]
        if body.get("rack_id") is not None:
            member.rack_id = body["rack_id"]
        if body.get("rebalance_timeout_ms", -1) != -1:
            member.rebalance_timeout_ms = body["rebalance_timeout_ms"]
        member.client_id, member.client_host = client_id, client_host
        return changed

    def _leave(self, member_id: str, epoch: int, topics: TopicIds) -> Body:
        member = self.members.get(member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {self.group_id}"
            )
        if epoch == STATIC_LEAVE_EPOCH:
            # It keeps its partitions (no one else gets them) until it comes back or its
            # session runs out.
            member.reconciled = replace(member.reconciled, member_epoch=STATIC_LEAVE_EPOCH)
        else:
            self.remove(member_id, topics)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
                "member_id": member_id, "member_epoch": epoch,
                "heartbeat_interval_ms": 0, "assignment": None}  # fmt: skip

    def remove(self, member_id: str, topics: TopicIds) -> None:
        """The member leaves (or is fenced): its partitions are free; the group epoch moves."""
        if self.members.pop(member_id, None) is None:
            return
        self.target.pop(member_id, None)
        self._partition_counts = topics.partition_counts(self._subscribed_topics())
        self.group_epoch += 1
        if self.members:
            self._new_target()
        else:
            self.assignment_epoch = self.group_epoch

    def _subscribed_topics(self) -> frozenset[str]:
        return frozenset().union(*(m.topics for m in self.members.values()))

    def _new_target(self) -> None:
        specs = [
            MemberSpec(m.member_id, m.topics, self.target.get(m.member_id, {}), m.instance_id)
            for m in self.members.values()
        ]
        self.target = assign(self.assignor(), specs, self._partition_counts)
        self.assignment_epoch = self.group_epoch

    def _reconcile(self, member: ConsumerMember, owned: Partitions | None, now_ms: int) -> None:
        was = member.reconciled.state
        member.reconciled = reconcile(
            member.reconciled,
            self.assignment_epoch,
            self.target.get(member.member_id, {}),
            owned,
            lambda topic, partition: self.owner_epoch(topic, partition, besides=member.member_id),
        )
        if member.reconciled.state is MemberState.UNREVOKED_PARTITIONS:
            if was is not MemberState.UNREVOKED_PARTITIONS:
                member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
        else:
            member.revocation_deadline_ms = None

    # ---- time ----

    def due(self, now_ms: int) -> bool:
        """Whether `expire` would remove a member now."""
        return any(
            now_ms >= deadline
            for m in self.members.values()
            for deadline in (m.session_deadline_ms, m.revocation_deadline_ms, m.rejoin_deadline_ms)
            if deadline is not None
        )

    def expire(self, now_ms: int, topics: TopicIds) -> list[tuple[str, str]]:
        """Remove members past their session timeout, or that kept partitions they were told
        to give up past their rebalance timeout. Returns (member id, why) of each."""
        gone = []
        for member in list(self.members.values()):
            if now_ms >= member.session_deadline_ms:
                gone.append((member.member_id, "no heartbeat within the session timeout"))
            elif member.revocation_deadline_ms is not None and (
                now_ms >= member.revocation_deadline_ms
            ):
                gone.append(
                    (member.member_id, "partitions not revoked within the rebalance timeout")
                )
            elif member.rejoin_deadline_ms is not None and now_ms >= member.rejoin_deadline_ms:
                gone.append((member.member_id, "did not rejoin within the rebalance timeout"))
        for member_id, _why in gone:
            self.remove(member_id, topics)
        return gone


# ---- the request, checked as Kafka checks it ----


def _check_request(body: Body) -> None:
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    if not body.get("group_id"):
        raise invalid("GroupId can't be empty.")
    for key, name in (("instance_id", "InstanceId"), ("rack_id", "RackId")):
        if body.get(key) == "":
            raise invalid(f"{name} can't be empty.")
    regex = body.get("subscribed_topic_regex")
    if regex:  # librdkafka sends "" when it subscribes by name
        try:
            re.compile(regex)
        except re.error as error:
            raise HeartbeatError(
                ErrorCode.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {regex!r}: {error}"
            ) from None
    epoch = body.get("member_epoch")
    if epoch is None or epoch < STATIC_LEAVE_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if not body.get("member_id"):
            raise invalid("MemberId can't be empty.")
    elif epoch == JOIN_EPOCH:
        if body.get("rebalance_timeout_ms", -1) == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if body.get("topic_partitions") != []:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not body.get("subscribed_topic_names") and not regex:
            raise invalid(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch == STATIC_LEAVE_EPOCH:
        if not body.get("member_id"):
            raise invalid("MemberId can't be empty.")
        if body.get("instance_id") is None:
            raise invalid("InstanceId can't be null.")
    assignor = body.get("server_assignor")
    if assignor is not None and assignor not in ASSIGNORS:
        raise HeartbeatError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {assignor} is not supported. Supported assignors: "
            f"{', '.join(ASSIGNORS)}.",
        )


def _owned(wire: list[Body] | None, topics: TopicIds) -> dict[str, frozenset[int]] | None:
    """The partitions a heartbeat says its member owns (None: it did not say)."""
    if wire is None:
        return None
    owned: dict[str, frozenset[int]] = {}
    for entry in wire:
        name = topics.name_of(entry["topic_id"])
        if name is not None and entry["partitions"]:
            owned[name] = owned.get(name, frozenset()) | frozenset(entry["partitions"])
    return owned


def _matching(regex: str | None, topics: TopicIds) -> frozenset[str]:
    return frozenset() if regex is None else topics.matching(regex)


def _subset(owned: Partitions, assigned: Partitions) -> bool:
    return all(parts <= assigned.get(topic, frozenset()) for topic, parts in owned.items())


def _as_wire(assigned: Partitions, topics: TopicIds) -> list[Body]:
    return [
        {"topic_id": topics.by_name[name][0], "partitions": sorted(parts)}
        for name, parts in sorted(assigned.items())
        if name in topics.by_name and parts
    ]
