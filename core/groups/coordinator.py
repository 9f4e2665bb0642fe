"""The group coordinator of Kafka's classic consumer-group protocol, sans-IO.

The broker hands it decoded request bodies with a `Caller` (a token for the answer, the API
version, the client's id and host) and `now`; it returns effects:

- `Respond(token, body)`: answer that request (a body in the protocol's shape, every version's
  fields present; the codec keeps those of the version);
- `Append(append_id, partition, records, producer_id, producer_epoch, transactional)`: write
  these `(key, value)` records to that partition of `__consumer_offsets` with acks=all (as one
  batch; a transactional one of that producer for a TxnOffsetCommit), then call
  `append_done(append_id, error, now, base_offset)`;
- `GroupEvent`: a rebalance began, the group became stable or empty, a member was removed.

An answer that depends on a write (an offset commit, the leader's SyncGroup, a delete) is only
given once the write is acknowledged by the ISR: a committed offset a client was told about
survives the coordinator's broker failing. A write changes what the coordinator holds only once
acknowledged; the writes of a partition are acknowledged in log order, so what it holds is what
a replay of the acknowledged log gives. Time moves only through `tick(now)`: session expiry,
the end of a join phase, pending member ids lapsing, and offsets expiring.

Offsets go away as in Kafka, always as tombstones in the log (so a new coordinator replays the
deletion): OffsetDelete (`delete_offsets`), DeleteGroups, a deleted topic
(`on_topics_deleted`), and expiry: every offsets.retention.check.interval.ms each loaded
partition's groups lose the offsets older than offsets.retention.minutes by KIP-211's rules (see
`_retention_start`), and an empty group left without offsets is deleted.

Transactional offsets (TxnOffsetCommit) stay pending for their producer, invisible to OffsetFetch,
until the broker has written that producer's transaction marker to the group's partition and
calls `complete_transaction` (see txn_offsets.py for the rules).

Ownership follows the leadership of `__consumer_offsets` partitions: `start_loading`,
`finish_loading` (the partition's records, replayed) and `unload`. Requests for a group whose
partition is not loaded here get NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while loading.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rlog.core.groups.answers import (
    NO_GENERATION,
    commit_answer,
    join_error,
    leave_answer,
    offset_delete_answer,
    sync_answer,
)
from rlog.core.groups.consumer_coordinator import ConsumerGroups, heartbeat_error
from rlog.core.groups.consumer_group import (
    ClassicJoin,
    ClassicMember,
    ConsumerGroup,
    ConsumerGroupSettings,
    HeartbeatError,
    TopicIds,
)
from rlog.core.groups.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from rlog.core.groups.consumer_records import Record as ConsumerRecord
from rlog.core.groups.group import CONSUMER_PROTOCOL_TYPE, Group, GroupState, Member
from rlog.core.groups.partitioner import group_partition
from rlog.core.groups.reconciliation import MemberState
from rlog.core.groups.records import (
    CommittedOffset,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from rlog.core.groups.txn_offsets import (
    Key,
    Loaded,
    OffsetStore,
    StoredOffset,
    replay,
    txn_commit_error,
)
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker's group settings, under Kafka's names."""

    offsets_partitions: int  # offsets.topic.num.partitions
    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_group_size: int = 2**31 - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000  # offsets.retention.minutes, as ms
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # The consumer protocol's groups (KIP-848).
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    consumer_max_size: int = 2**31 - 1  # group.consumer.max.size
    # group.consumer.migration.policy: whether a classic group with members may become a
    # consumer group (upgrade) and back (downgrade). Empty groups convert either way always.
    consumer_migration_policy: str = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("downgrade", "bidirectional")


@dataclass(frozen=True, slots=True)
class Caller:
    token: int
    version: int
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class Respond:
    token: int
    body: Body


@dataclass(frozen=True, slots=True)
class Append:
    append_id: int
    partition: int
    records: tuple[Record, ...]
    producer_id: int = -1
    producer_epoch: int = -1
    transactional: bool = False


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """Something a person watching the cluster wants to know: a rebalance began, the group is
    stable again, a member was removed. `kind` is one of the journal's group kinds."""

    kind: str
    group_id: str
    message: str
    generation: int


Effect = Respond | Append | GroupEvent


# How a write ended: (error, now, the offset of its first record in the log or -1).
OnDone = Callable[[ErrorCode, int, int], list[Effect]]


@dataclass
class _PendingAppend:
    partition: int
    tenure: int  # the partition's load count when written: a later unload makes it stale
    on_done: OnDone
    group_id: str
    offset_keys: frozenset[Key] = frozenset()  # the partitions whose offsets it writes


@dataclass
class _TxnWrite:
    """A TxnOffsetCommit's batch, written but not yet acknowledged."""

    group_id: str
    partition: int
    tenure: int
    producer_id: int
    entries: list[tuple[Key, CommittedOffset]]  # in the batch's record order
    # Set when the producer's marker (or the group's deletion) came before the acknowledgement:
    # the batch is in the log before it, so it is committed (True) or dropped (False) at once.
    outcome: bool | None = None


@dataclass
class LoadSummary:
    groups: int = 0
    offsets: int = 0
    corrupt_records: int = 0
    pending_offsets: int = 0  # transactional offsets whose marker is not in the log yet


@dataclass
class _Partition:
    tenure: int
    loaded: bool = False
    group_ids: set[str] = field(default_factory=set)
    next_expiry_check_ms: int = 0  # when its groups' offsets are next checked for expiry


def append_error(error: ErrorCode, *, offsets: bool) -> ErrorCode:
    """What a client is told when a coordinator write failed (Kafka's GroupMetadataManager)."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.RECORD_LIST_TOO_LARGE,
        ErrorCode.INVALID_FETCH_SIZE,
    ):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if offsets else ErrorCode.UNKNOWN_SERVER_ERROR
    return error


class GroupCoordinator:
    def __init__(self, config: GroupConfig, new_member_id: Callable[[str], str]) -> None:
        self.config = config
        self._new_member_id = new_member_id
        self._groups: dict[str, Group] = {}
        self._offsets = OffsetStore()
        self._txn_writes: dict[int, _TxnWrite] = {}  # by append id
        self._partitions: dict[int, _Partition] = {}
        self._tenures = 0
        self._appends: dict[int, _PendingAppend] = {}
        self._next_append_id = 0
        # By group, the partitions whose last offset write failed: the record may be in the log
        # all the same (a write that timed out), so a deletion writes their tombstones too.
        self._in_doubt: dict[str, set[Key]] = {}
        self._consumer_settings = ConsumerGroupSettings(
            session_timeout_ms=config.consumer_session_timeout_ms,
            heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
            max_size=config.consumer_max_size,
        )
        self.consumer = ConsumerGroups(self._consumer_settings, self._consumer_write)

    def set_topics(self, topics: TopicIds) -> None:
        """The topics that exist now (the metadata image's): consumer-protocol groups name
        partitions by topic id on the wire and in the log."""
        self.consumer.topics = topics

    # ---- ownership -------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return group_partition(group_id, self.config.offsets_partitions)

    def owned_partitions(self) -> list[int]:
        return sorted(p for p, state in self._partitions.items() if state.loaded)

    def start_loading(self, partition: int) -> list[Effect]:
        effects = self.unload(partition)
        self._tenures += 1
        self._partitions[partition] = _Partition(self._tenures)
        return effects

    def finish_loading(self, partition: int, records: Iterable[Loaded], now: int) -> LoadSummary:
        """Replay the partition's records and transaction markers (oldest first; plain
        `(key, value)` pairs are regular records); its groups are served from here on."""
        state = self._partitions.get(partition)
        if state is None or state.loaded:
            raise ValueError(f"partition {partition} is not loading")
        replayed = replay(records)
        self._offsets.absorb(replayed.offsets)
        summary = LoadSummary(corrupt_records=replayed.corrupt_records)
        summary.offsets, summary.pending_offsets = replayed.offsets.counts()
        # This partition's groups only: another loaded partition's groups are live and stay.
        consumer_ids = set(replayed.consumer.groups) - replayed.classic_last
        for group_id in sorted(consumer_ids):
            loaded = replayed.consumer.groups[group_id]
            self.consumer.groups[group_id] = ConsumerGroup.from_log(
                group_id, self._consumer_settings, loaded, self.consumer.topics, now
            )
            state.group_ids.add(group_id)
        for group_id in (replayed.group_ids | replayed.offsets.groups()) - consumer_ids:
            group = Group.from_record(group_id, replayed.metadata.get(group_id), now)
            self._groups[group_id] = group
            state.group_ids.add(group_id)
        summary.groups = len(state.group_ids)
        state.loaded = True
        state.next_expiry_check_ms = now + self.config.offsets_retention_check_interval_ms
        return summary

    def unload(self, partition: int) -> list[Effect]:
        """This broker no longer leads the partition: its groups are someone else's now."""
        state = self._partitions.pop(partition, None)
        if state is None:
            return []
        effects: list[Effect] = []
        for group_id in state.group_ids:
            for token, _later, refusal in self.consumer.drop(group_id):
                effects.append(Respond(token, refusal))
            group = self._groups.pop(group_id, None)
            self._offsets.drop_group(group_id)
            self._in_doubt.pop(group_id, None)  # a later load replays what the log holds
            if group is None:
                continue
            group.state = GroupState.DEAD
            for member in group.members.values():
                effects += _answer_blocked(member, ErrorCode.NOT_COORDINATOR)
        return effects

    def _ownership_error(self, group_id: str) -> ErrorCode:
        state = self._partitions.get(self.partition_for(group_id))
        if state is None:
            return ErrorCode.NOT_COORDINATOR
        if not state.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def _exists(self, group_id: str) -> bool:
        """A group of either protocol (or a standalone committer's) is here."""
        return group_id in self._groups or group_id in self.consumer.groups

    def _remember(self, group: Group) -> None:
        self._groups[group.group_id] = group
        self._partitions[self.partition_for(group.group_id)].group_ids.add(group.group_id)

    # ---- writes ----------------------------------------------------------------------------

    def _append(
        self,
        group_id: str,
        records: list[Record],
        on_done: OnDone,
        producer: tuple[int, int] | None = None,
        offset_keys: Iterable[Key] = (),
    ) -> Append:
        """Write `records` to the group's partition; `producer` (id, epoch): as a transactional
        batch of that producer; `offset_keys`: the partitions whose offsets the records set."""
        partition = self.partition_for(group_id)
        self._next_append_id += 1
        tenure = self._partitions[partition].tenure
        self._appends[self._next_append_id] = _PendingAppend(
            partition, tenure, on_done, group_id, frozenset(offset_keys)
        )
        if producer is None:
            return Append(self._next_append_id, partition, tuple(records))
        producer_id, producer_epoch = producer
        return Append(
            self._next_append_id,
            partition,
            tuple(records),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            transactional=True,
        )

    def append_done(
        self, append_id: int, error: ErrorCode, now: int, base_offset: int = -1
    ) -> list[Effect]:
        """A write ended; `base_offset`: where its first record is in the log (-1: unknown)."""
        pending = self._appends.pop(append_id, None)
        if pending is None:
            return []
        state = self._partitions.get(pending.partition)
        if state is None or state.tenure != pending.tenure:
            # The partition moved while the write was in flight: the answer cannot say more
            # than "ask the new coordinator", which reloads whatever did get written.
            error = ErrorCode.NOT_COORDINATOR
        elif pending.offset_keys:
            in_doubt = self._in_doubt.setdefault(pending.group_id, set())
            if error == ErrorCode.NONE:
                in_doubt -= pending.offset_keys  # the log's latest word on them is known
            else:
                in_doubt |= pending.offset_keys
            if not in_doubt:
                del self._in_doubt[pending.group_id]
        return pending.on_done(error, now, base_offset if error == ErrorCode.NONE else -1)

    def _writing(self, group_id: str) -> bool:
        """Whether a write of the group's is not acknowledged yet."""
        return any(pending.group_id == group_id for pending in self._appends.values())

    def _offset_keys(self, group_id: str) -> set[Key]:
        """Every partition the group may have an offset for in the log: committed, pending in a
        transaction, in a write not acknowledged yet or one that failed (a tombstone written
        now lands after that write)."""
        keys = set(self.committed(group_id)) | self._offsets.pending_keys(group_id)
        keys |= self._in_doubt.get(group_id, set())
        for pending in self._appends.values():
            if pending.group_id == group_id:
                keys |= pending.offset_keys
        return keys

    # ---- JoinGroup -------------------------------------------------------------------------

    def join_group(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        group_id: str = body["group_id"]
        consumer = self.consumer.groups.get(group_id)
        if consumer is None:
            return self._join_group(caller, body, now)
        if consumer.members or self.consumer.busy(group_id):
            return self._classic_join_consumer_group(caller, body, now)
        # An empty consumer group becomes a classic one (Kafka's downgrade); its offsets stay.
        # Its records' tombstones go first: a replay finds the classic group after them.
        tombstones = self.consumer.tombstones(group_id)
        self.consumer.drop(group_id)
        downgrade = self._append(group_id, tombstones, lambda error, now, at: [])
        return [downgrade, *self._join_group(caller, body, now)]

    def _join_group(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        group_id: str = body["group_id"]
        member_id: str = body.get("member_id") or ""
        instance_id: str | None = body.get("group_instance_id")
        session_timeout = body["session_timeout_ms"]
        rebalance_timeout = body.get("rebalance_timeout_ms", -1)
        if rebalance_timeout is None or rebalance_timeout < 0:
            rebalance_timeout = session_timeout  # v0 has no rebalance timeout
        protocol_type: str = body.get("protocol_type") or ""
        protocols = [(p["name"], bytes(p["metadata"] or b"")) for p in body.get("protocols") or []]

        def fail(error: ErrorCode, member: str = member_id) -> list[Effect]:
            return [Respond(caller.token, join_error(error, member))]

        if not group_id:
            return fail(ErrorCode.INVALID_GROUP_ID)
        error = self._ownership_error(group_id)
        if error != ErrorCode.NONE:
            return fail(error)
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout
            <= self.config.max_session_timeout_ms
        ):
            return fail(ErrorCode.INVALID_SESSION_TIMEOUT)
        group = self._groups.get(group_id)
        if group is None:
            if member_id:
                return fail(ErrorCode.UNKNOWN_MEMBER_ID)
            group = Group(group_id, state_timestamp_ms=now)
            self._remember(group)
        if group.is_(GroupState.DEAD):
            return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.supports(protocol_type, protocols):
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        request = _JoinRequest(
            caller, member_id, instance_id, session_timeout, rebalance_timeout, protocol_type
        )
        if not member_id:
            return self._join_unknown_member(group, request, protocols, now)
        return self._join_known_member(group, request, protocols, now)

    def _join_unknown_member(
        self, group: Group, request: _JoinRequest, protocols: list[tuple[str, bytes]], now: int
    ) -> list[Effect]:
        caller = request.caller
        new_id = self._new_member_id(caller.client_id or "member")
        instance_id = request.instance_id
        if instance_id is not None and instance_id in group.static_members:
            return self._rejoin_static_member(group, request, new_id, protocols, now)
        if len(group.members) >= self.config.max_group_size:
            return [Respond(caller.token, join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, ""))]
        if caller.version >= 4 and instance_id is None:
            # KIP-394: hand out the id first; the member joins with it, so a retried join after
            # a lost answer does not leave a ghost member behind.
            group.pending_members[new_id] = now + request.session_timeout
            return [Respond(caller.token, join_error(ErrorCode.MEMBER_ID_REQUIRED, new_id))]
        return self._add_member_and_rebalance(group, request, new_id, protocols, now)

    def _join_known_member(
        self, group: Group, request: _JoinRequest, protocols: list[tuple[str, bytes]], now: int
    ) -> list[Effect]:
        member_id = request.member_id
        if group.fenced_static_member(request.instance_id, member_id):
            return [Respond(request.caller.token, join_error(ErrorCode.FENCED_INSTANCE_ID))]
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(group, request, member_id, protocols, now)
        member = group.members.get(member_id)
        if member is None:
            return [Respond(request.caller.token, join_error(ErrorCode.UNKNOWN_MEMBER_ID))]
        if group.is_(GroupState.PREPARING_REBALANCE):
            return self._update_member_and_rebalance(group, member, request, protocols, now)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(protocols):
                # A retried join of this generation: the same answer again.
                member.deadline_ms = now + member.session_timeout_ms
                return [Respond(request.caller.token, self._join_body(group, member))]
            return self._update_member_and_rebalance(group, member, request, protocols, now)
        if group.is_(GroupState.STABLE):
            if group.leader == member_id or not member.same_protocols(protocols):
                return self._update_member_and_rebalance(group, member, request, protocols, now)
            member.deadline_ms = now + member.session_timeout_ms
            return [Respond(request.caller.token, self._join_body(group, member))]
        return [Respond(request.caller.token, join_error(ErrorCode.UNKNOWN_MEMBER_ID))]

    def _rejoin_static_member(
        self,
        group: Group,
        request: _JoinRequest,
        new_id: str,
        protocols: list[tuple[str, bytes]],
        now: int,
    ) -> list[Effect]:
        """A known static instance came back with no member id (a restarted process): it takes
        its old place under a new id, and the old id is fenced."""
        assert request.instance_id is not None
        old_id = group.static_members[request.instance_id]
        old = group.members[old_id]
        effects = _answer_blocked(old, ErrorCode.FENCED_INSTANCE_ID)
        was_leader = group.leader == old_id
        unchanged = old.same_protocols(protocols)
        member = group.replace_static_member(request.instance_id, new_id)
        member.session_timeout_ms = request.session_timeout
        member.rebalance_timeout_ms = request.rebalance_timeout
        member.client_id = request.caller.client_id
        member.client_host = request.caller.client_host
        if group.is_(GroupState.STABLE) and unchanged and not was_leader:
            # Same subscription: no rebalance; it syncs and gets its old assignment back.
            member.deadline_ms = now + member.session_timeout_ms
            return [*effects, Respond(request.caller.token, self._join_body(group, member))]
        return effects + self._update_member_and_rebalance(group, member, request, protocols, now)

    def _add_member_and_rebalance(
        self,
        group: Group,
        request: _JoinRequest,
        member_id: str,
        protocols: list[tuple[str, bytes]],
        now: int,
    ) -> list[Effect]:
        member = Member(
            member_id=member_id,
            group_instance_id=request.instance_id,
            client_id=request.caller.client_id,
            client_host=request.caller.client_host,
            session_timeout_ms=request.session_timeout,
            rebalance_timeout_ms=request.rebalance_timeout,
            protocol_type=request.protocol_type,
            protocols=protocols,
        )
        group.add_member(member)
        group.new_member_added = True
        member.join_token = request.caller.token
        member.join_version = request.caller.version
        member.deadline_ms = now + member.session_timeout_ms
        return self._prepare_or_complete(group, now, f"member {member_id} joined")

    def _update_member_and_rebalance(
        self,
        group: Group,
        member: Member,
        request: _JoinRequest,
        protocols: list[tuple[str, bytes]],
        now: int,
    ) -> list[Effect]:
        effects: list[Effect] = []
        if member.join_token is not None and member.join_token != request.caller.token:
            effects.append(Respond(member.join_token, join_error(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.protocols = protocols
        member.session_timeout_ms = request.session_timeout
        member.rebalance_timeout_ms = request.rebalance_timeout
        member.join_token = request.caller.token
        member.join_version = request.caller.version
        member.deadline_ms = now + member.session_timeout_ms
        reason = f"member {member.member_id} rejoined"
        return effects + self._prepare_or_complete(group, now, reason)

    def _prepare_or_complete(self, group: Group, now: int, reason: str) -> list[Effect]:
        if group.is_(GroupState.PREPARING_REBALANCE):
            return self._maybe_complete_join(group, now)
        return self._prepare_rebalance(group, now, reason)

    def _prepare_rebalance(self, group: Group, now: int, reason: str) -> list[Effect]:
        effects: list[Effect] = [
            GroupEvent(
                "group_rebalancing",
                group.group_id,
                f"group {group.group_id} is rebalancing after generation {group.generation}: "
                f"{reason}",
                group.generation,
            )
        ]
        if group.is_(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.sync_token is not None:
                    effects.append(
                        Respond(member.sync_token, sync_answer(ErrorCode.REBALANCE_IN_PROGRESS))
                    )
                    member.sync_token = None
        rebalance_timeout = group.rebalance_timeout_ms()
        if group.is_(GroupState.EMPTY):
            # Kafka's InitialDelayedJoin: let the other members of a starting application
            # arrive before the first assignment, instead of one rebalance per member.
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_delay = delay > 0
            group.initial_deadline_cap_ms = now + rebalance_timeout
            group.join_deadline_ms = now + delay
            group.new_member_added = False
        else:
            group.initial_delay = False
            group.join_deadline_ms = now + rebalance_timeout
        group.state = GroupState.PREPARING_REBALANCE
        group.state_timestamp_ms = now
        return effects + self._maybe_complete_join(group, now)

    def _maybe_complete_join(self, group: Group, now: int) -> list[Effect]:
        ready = group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_delay
        return self._complete_join(group, now) if ready and group.all_joined() else []

    def _complete_join(self, group: Group, now: int) -> list[Effect]:
        effects: list[Effect] = []
        group.initial_delay = False
        for member in list(group.members.values()):
            if member.join_token is None and member.group_instance_id is None:
                group.remove_member(member.member_id)  # did not rejoin in time
        if group.leader is None or group.members[group.leader].join_token is None:
            joined = [m.member_id for m in group.members.values() if m.join_token is not None]
            if joined:
                group.leader = joined[0]
        group.generation += 1
        group.state_timestamp_ms = now
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol = None
            group.leader = None
            group.subscribed_topics = group.compute_subscribed_topics()
            effects.append(self._store_group(group, lambda error, now, at: []))
            message = f"group {group.group_id} is empty (generation {group.generation})"
            effects.append(GroupEvent("group_empty", group.group_id, message, group.generation))
            return effects
        group.protocol = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        group.state = GroupState.COMPLETING_REBALANCE
        for member in group.members.values():
            if member.join_token is None:
                continue
            effects.append(Respond(member.join_token, self._join_body(group, member)))
            member.join_token = None
            member.deadline_ms = now + member.session_timeout_ms
        return effects

    def _join_body(self, group: Group, member: Member) -> Body:
        members = []
        if group.leader == member.member_id:
            members = [
                {
                    "member_id": other.member_id,
                    "group_instance_id": other.group_instance_id,
                    "metadata": other.metadata_for(group.protocol or ""),
                }
                for other in group.members.values()
            ]
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol or "",
            "leader": group.leader or "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": members,
        }

    # ---- SyncGroup -------------------------------------------------------------------------

    def sync_group(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        group_id: str = body["group_id"]
        member_id: str = body["member_id"]
        if group_id in self.consumer.groups:
            return self._classic_sync_consumer_group(caller, body, now)

        def fail(error: ErrorCode) -> list[Effect]:
            return [Respond(caller.token, sync_answer(error))]

        error = self._ownership_error(group_id)
        if error != ErrorCode.NONE:
            return fail(error)
        group = self._groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.fenced_static_member(body.get("group_instance_id"), member_id):
            return fail(ErrorCode.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None:
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        if body["generation_id"] != group.generation:
            return fail(ErrorCode.ILLEGAL_GENERATION)
        wanted_type, wanted_name = body.get("protocol_type"), body.get("protocol_name")
        if (wanted_type is not None and wanted_type != group.protocol_type) or (
            wanted_name is not None and wanted_name != group.protocol
        ):
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return fail(ErrorCode.REBALANCE_IN_PROGRESS)
        member.deadline_ms = now + member.session_timeout_ms
        if group.is_(GroupState.STABLE):
            return [Respond(caller.token, sync_answer(ErrorCode.NONE, group, member.assignment))]
        if group.is_(GroupState.EMPTY):
            return fail(ErrorCode.UNKNOWN_MEMBER_ID)
        # CompletingRebalance: wait for the leader's assignment to be stored.
        effects: list[Effect] = []
        if member.sync_token is not None:
            effects.append(Respond(member.sync_token, sync_answer(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.sync_token = caller.token
        if member_id != group.leader:
            return effects
        assignments = {
            a["member_id"]: bytes(a["assignment"] or b"") for a in body.get("assignments") or []
        }
        generation = group.generation
        record = group.to_record(now, assignments)

        def stored(error: ErrorCode, now: int, at: int) -> list[Effect]:
            current = self._groups.get(group.group_id)
            if (
                current is not group
                or group.generation != generation
                or not group.is_(GroupState.COMPLETING_REBALANCE)
            ):
                return []  # a newer rebalance already answered the waiting members
            if error != ErrorCode.NONE:
                failure = append_error(error, offsets=False)
                answers: list[Effect] = []
                for waiting in group.members.values():
                    waiting.assignment = b""
                    if waiting.sync_token is not None:
                        answers.append(Respond(waiting.sync_token, sync_answer(failure)))
                        waiting.sync_token = None
                reason = f"storing the assignment failed with {failure.name}"
                return answers + self._prepare_rebalance(group, now, reason)
            return self._become_stable(group, assignments, now)

        effects.append(self._append(group_id, [(group_key(group_id), group_value(record))], stored))
        return effects

    def _become_stable(self, group: Group, assignments: dict[str, bytes], now: int) -> list[Effect]:
        message = (
            f"group {group.group_id} is stable: generation {group.generation}, "
            f"{len(group.members)} member(s), protocol {group.protocol}"
        )
        effects: list[Effect] = [
            GroupEvent("group_stable", group.group_id, message, group.generation)
        ]
        group.state = GroupState.STABLE
        group.state_timestamp_ms = now
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
            if member.sync_token is not None:
                effects.append(
                    Respond(
                        member.sync_token, sync_answer(ErrorCode.NONE, group, member.assignment)
                    )
                )
                member.sync_token = None
                member.deadline_ms = now + member.session_timeout_ms
        return effects

    # ---- Heartbeat, LeaveGroup -------------------------------------------------------------

    def heartbeat(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        if body["group_id"] in self.consumer.groups:
            return self._classic_heartbeat_consumer_group(caller, body, now)
        return [Respond(caller.token, {"throttle_time_ms": 0, "error_code": self._beat(body, now)})]

    def _beat(self, body: Body, now: int) -> ErrorCode:
        group_id: str = body["group_id"]
        error = self._ownership_error(group_id)
        if error != ErrorCode.NONE:
            return error
        group = self._groups.get(group_id)
        if group is None or group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        member_id: str = body["member_id"]
        if group.fenced_static_member(body.get("group_instance_id"), member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if body["generation_id"] != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        member.deadline_ms = now + member.session_timeout_ms
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave_group(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        group_id: str = body["group_id"]
        if caller.version < 3:  # one member, no instance id
            identities = [{"member_id": body.get("member_id") or "", "group_instance_id": None}]
        else:
            identities = body.get("members") or []
        error = self._ownership_error(group_id)
        if error == ErrorCode.NONE and group_id in self.consumer.groups:
            return self._classic_leave_consumer_group(caller, identities, group_id, now)
        group = self._groups.get(group_id)
        if error == ErrorCode.NONE and group is None:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error != ErrorCode.NONE or group is None:
            return [Respond(caller.token, leave_answer(error, []))]
        effects: list[Effect] = []
        results: list[Body] = []
        for identity in identities:
            member_error, more = self._leave_one(group, identity, now)
            effects += more
            results.append(
                {
                    "member_id": identity.get("member_id") or "",
                    "group_instance_id": identity.get("group_instance_id"),
                    "error_code": member_error,
                }
            )
        # v0-2 carry the one member's error at the top; v3+ per member, top-level NONE.
        top: ErrorCode = results[0]["error_code"] if caller.version < 3 else ErrorCode.NONE
        effects.append(Respond(caller.token, leave_answer(top, results)))
        return effects

    def _leave_one(self, group: Group, identity: Body, now: int) -> tuple[ErrorCode, list[Effect]]:
        member_id: str = identity.get("member_id") or ""
        instance_id: str | None = identity.get("group_instance_id")
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID, []
            if member_id and member_id != known:
                return ErrorCode.FENCED_INSTANCE_ID, []
            member_id = known
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return ErrorCode.NONE, self._maybe_complete_join(group, now)
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        return ErrorCode.NONE, self._remove_member(group, member_id, now, "left the group")

    def _remove_member(self, group: Group, member_id: str, now: int, why: str) -> list[Effect]:
        member = group.remove_member(member_id)
        effects = _answer_blocked(member, ErrorCode.UNKNOWN_MEMBER_ID) if member else []
        message = f"member {member_id} of group {group.group_id} {why}"
        effects.append(
            GroupEvent("group_member_removed", group.group_id, message, group.generation)
        )
        if group.is_(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return effects + self._prepare_rebalance(group, now, f"member {member_id} {why}")
        if group.is_(GroupState.PREPARING_REBALANCE):
            return effects + self._maybe_complete_join(group, now)
        return effects

    # ---- the consumer protocol (KIP-848) ------------------------------------------------------

    def _consumer_write(
        self,
        group_id: str,
        records: list[ConsumerRecord],
        on_done: Callable[[ErrorCode, int], list[Effect]],
    ) -> Append:
        return self._append(group_id, records, lambda error, now, at: on_done(error, now))

    def consumer_group_heartbeat(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """ConsumerGroupHeartbeat (consumer_group.py has the group's rules). An empty classic
        group (offsets only, or no members left) becomes a consumer group, as in Kafka; one
        with members answers GROUP_ID_NOT_FOUND."""
        group_id: str = body.get("group_id") or ""

        def fail(error: ErrorCode, message: str | None = None) -> list[Effect]:
            return [Respond(caller.token, heartbeat_error(error, message))]

        if not group_id:
            return fail(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        error = self._ownership_error(group_id)
        if error != ErrorCode.NONE:
            return fail(error)
        if self.consumer.busy(group_id):  # the next once the write before it has ended
            later = lambda now: self.consumer_group_heartbeat(caller, body, now)  # noqa: E731
            refusal = heartbeat_error(ErrorCode.NOT_COORDINATOR)
            self.consumer.wait(group_id, caller.token, later, refusal)
            return []
        first: list[Record] = []
        effects: list[Effect] = []
        classic = self._groups.get(group_id)
        if classic is not None:
            if self._writing(group_id):  # its own write decides it first
                return fail(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if not classic.is_(GroupState.EMPTY) and not self._can_upgrade(classic):
                why = "" if self.config.upgrade_enabled else " (group.consumer.migration.policy)"
                return fail(
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"Group {group_id} is not a consumer group{why}.",
                )
            first.append((group_key(group_id), None))  # its offsets stay, now the new group's
            del self._groups[group_id]
            if not classic.is_(GroupState.EMPTY):
                effects += self._upgrade(classic, now)

        classic_state = classic.state if classic is not None else None

        def restore() -> None:  # the write failed: the classic group is still what the log has
            if classic is not None and classic_state is not None:
                self.consumer.give_back(group_id)
                classic.state = classic_state
                self._groups[group_id] = classic

        def beat(group: ConsumerGroup) -> Body:
            topics = self.consumer.topics
            return group.heartbeat(body, caller.client_id, caller.client_host, topics, now)

        def answer(answer: Body, error: ErrorCode) -> list[Effect]:
            failure = append_error(error, offsets=False)
            if failure != ErrorCode.NONE:
                return [Respond(caller.token, heartbeat_error(failure))]
            return [Respond(caller.token, answer), *self._maybe_downgrade(group_id, now)]

        self._partitions[self.partition_for(group_id)].group_ids.add(group_id)
        return effects + self.consumer.change(group_id, beat, answer, now, first, restore)

    def _maybe_downgrade(self, group_id: str, now: int) -> list[Effect]:
        """The last consumer-protocol member left and classic members remain: the group
        becomes a classic group again (Kafka's online downgrade), its members keeping their
        partitions until the rebalance this starts, which they join with JoinGroup."""
        group = self.consumer.groups.get(group_id)
        if (
            not self.config.downgrade_enabled
            or group is None
            or not group.members
            or self.consumer.busy(group_id)
            or any(m.classic is None for m in group.members.values())
            or len(group.members) > self.config.max_group_size
        ):
            return []
        classic = Group(group_id, state_timestamp_ms=now)
        classic.generation = group.group_epoch
        for member in group.members.values():
            assert member.classic is not None
            protocols = list(member.classic.protocols)
            version = subscription_version(protocols[0][1]) if protocols else 0
            classic.add_member(
                Member(
                    member.member_id, member.instance_id, member.client_id, member.client_host,
                    member.classic.session_timeout_ms, member.rebalance_timeout_ms,
                    CONSUMER_PROTOCOL_TYPE, protocols,
                    assignment=encode_assignment(member.reconciled.assigned, version),
                    deadline_ms=now + member.classic.session_timeout_ms,
                )
            )  # fmt: skip
        if not classic.candidate_protocols():
            return []  # no protocol they all speak: it stays a consumer group
        classic.protocol = classic.select_protocol()
        classic.state = GroupState.STABLE
        assignments = {m.member_id: m.assignment for m in classic.members.values()}
        records = self.consumer.tombstones(group_id)
        records.append((group_key(group_id), group_value(classic.to_record(now, assignments))))
        self.consumer.drop(group_id)
        self._groups[group_id] = classic
        written = self._append(group_id, records, lambda error, now, at: [])
        reason = "its last consumer-protocol member left; the rest use the classic protocol"
        return [written, *self._prepare_rebalance(classic, now, reason)]

    def _can_upgrade(self, group: Group) -> bool:
        """Kafka's validateOnlineUpgrade: allowed by the migration policy, a group of
        consumers, not too many of them."""
        return (
            self.config.upgrade_enabled
            and group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and len(group.members) < self.config.consumer_max_size
        )

    def _upgrade(self, group: Group, now: int) -> list[Effect]:
        """A classic group with members becomes a consumer group (Kafka's online upgrade): its
        members keep their partitions as classic members of it; those waiting in JoinGroup or
        SyncGroup are told to join again, which they now do into the consumer group."""
        effects: list[Effect] = []
        members = []
        for member in group.members.values():
            effects += _answer_blocked(member, ErrorCode.REBALANCE_IN_PROGRESS)
            metadata = member.metadata_for(group.protocol or "") or (
                member.protocols[0][1] if member.protocols else b""
            )
            subscription = decode_subscription(metadata)
            members.append(
                ClassicMember(
                    member.member_id, member.group_instance_id, member.client_id,
                    member.client_host, member.session_timeout_ms, member.rebalance_timeout_ms,
                    tuple(member.protocols), frozenset(subscription[0] if subscription else ()),
                    decode_assignment(member.assignment) if group.is_(GroupState.STABLE) else {},
                )
            )  # fmt: skip
        group.state = GroupState.DEAD
        converted = ConsumerGroup.from_classic(
            group.group_id, self._consumer_settings, members, group.generation,
            self.consumer.topics, now,
        )  # fmt: skip
        self.consumer.adopt(converted)
        message = f"group {group.group_id} now uses the consumer protocol, its members kept"
        return [*effects, GroupEvent("group_stable", group.group_id, message, group.generation)]

    def consumer_group_describe(self, caller: Caller, body: Body) -> list[Effect]:
        """ConsumerGroupDescribe: a classic group, or none, is GROUP_ID_NOT_FOUND (clients then
        ask DescribeGroups)."""
        described = []
        for group_id in body.get("group_ids") or []:
            error = self._ownership_error(group_id)
            if error != ErrorCode.NONE:
                entry = self.consumer.describe("")  # the shape of an answer without a group
                described.append(entry | {"group_id": group_id, "error_code": error,
                                          "error_message": None})  # fmt: skip
                continue
            entry = self.consumer.describe(group_id)
            if group_id in self._groups:
                entry["error_message"] = f"Group {group_id} is not a consumer group."
            described.append(entry)
        return [Respond(caller.token, {"throttle_time_ms": 0, "groups": described})]

    # ---- classic members in a consumer group (Kafka 4's mixed groups) ------------------------

    def _classic_join_consumer_group(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """JoinGroup into a consumer group with members: the broker assigns this member too;
        answered (generation = its epoch, no leader, nothing to assign) once written."""
        group_id: str = body["group_id"]
        member_id: str = body.get("member_id") or ""
        instance_id: str | None = body.get("group_instance_id")
        session_timeout: int = body["session_timeout_ms"]
        rebalance_timeout = body.get("rebalance_timeout_ms", -1)
        if rebalance_timeout is None or rebalance_timeout < 0:
            rebalance_timeout = session_timeout

        def fail(error: ErrorCode, member: str = member_id) -> list[Effect]:
            return [Respond(caller.token, join_error(error, member))]

        protocols = tuple(
            (p["name"], bytes(p["metadata"] or b"")) for p in body.get("protocols") or []
        )
        subscription = decode_subscription(protocols[0][1]) if protocols else None
        if body.get("protocol_type") != "consumer" or subscription is None:
            return fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout
            <= self.config.max_session_timeout_ms
        ):
            return fail(ErrorCode.INVALID_SESSION_TIMEOUT)
        if self.consumer.busy(group_id):
            later = lambda now: self.join_group(caller, body, now)  # noqa: E731
            refusal = join_error(ErrorCode.NOT_COORDINATOR, member_id)
            self.consumer.wait(group_id, caller.token, later, refusal)
            return []
        if not member_id:
            member_id = self._new_member_id(caller.client_id or "member")
            if caller.version >= 4 and instance_id is None:
                return fail(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        topics, owned = subscription
        join = ClassicJoin(
            instance_id, None, session_timeout, rebalance_timeout, protocols,
            frozenset(topics), owned, caller.client_id, caller.client_host,
        )  # fmt: skip

        def joined(group: ConsumerGroup) -> Body:
            try:
                member = group.classic_join(member_id, join, self.consumer.topics, now)
            except HeartbeatError as error:
                return join_error(error.code, member_id)
            return join_error(ErrorCode.NONE, member_id) | {
                "generation_id": member.epoch,
                "protocol_type": "consumer",
                "protocol_name": protocols[0][0],
            }

        def answer(answer: Body, error: ErrorCode) -> list[Effect]:
            failure = append_error(error, offsets=False)
            if failure != ErrorCode.NONE:
                return [Respond(caller.token, join_error(failure, member_id))]
            return [Respond(caller.token, answer)]

        return self.consumer.change(group_id, joined, answer, now)

    def _classic_sync_consumer_group(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """SyncGroup of a classic member of a consumer group: what the broker assigned it (the
        leader's assignments, if any, are ignored)."""
        group_id: str = body["group_id"]
        if self.consumer.busy(group_id):  # answered from acknowledged state only
            later = lambda now: self.sync_group(caller, body, now)  # noqa: E731
            refusal = sync_answer(ErrorCode.NOT_COORDINATOR)
            self.consumer.wait(group_id, caller.token, later, refusal)
            return []
        group = self.consumer.groups[group_id]
        try:
            member = group.classic_member(body["member_id"], body["generation_id"], now)
        except HeartbeatError as error:
            return [Respond(caller.token, sync_answer(error.code))]
        assert member.classic is not None
        name = body.get("protocol_name")
        if name is not None and name not in {n for n, _ in member.classic.protocols}:
            return [Respond(caller.token, sync_answer(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))]
        if group.group_epoch > member.epoch and (
            member.reconciled.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            group.must_rejoin(member, now)
            return [Respond(caller.token, sync_answer(ErrorCode.REBALANCE_IN_PROGRESS))]
        version = subscription_version(member.classic.protocols[0][1])
        assignment = encode_assignment(member.reconciled.assigned, version)
        answer = sync_answer(ErrorCode.NONE, assignment=assignment) | {
            "protocol_type": "consumer",
            "protocol_name": name or member.classic.protocols[0][0],
        }
        return [Respond(caller.token, answer)]

    def _classic_heartbeat_consumer_group(
        self, caller: Caller, body: Body, now: int
    ) -> list[Effect]:
        group_id: str = body["group_id"]
        error = self._ownership_error(group_id)
        if error == ErrorCode.NONE and self.consumer.busy(group_id):
            later = lambda now: self.heartbeat(caller, body, now)  # noqa: E731
            refusal = {"throttle_time_ms": 0, "error_code": ErrorCode.NOT_COORDINATOR}
            self.consumer.wait(group_id, caller.token, later, refusal)
            return []
        if error == ErrorCode.NONE:
            group = self.consumer.groups[group_id]
            try:
                member = group.classic_member(body["member_id"], body["generation_id"], now)
                if group.must_rejoin(member, now):
                    error = ErrorCode.REBALANCE_IN_PROGRESS
            except HeartbeatError as refused:
                error = refused.code
        return [Respond(caller.token, {"throttle_time_ms": 0, "error_code": error})]

    def _classic_leave_consumer_group(
        self, caller: Caller, identities: list[Body], group_id: str, now: int
    ) -> list[Effect]:
        if self.consumer.busy(group_id):
            again = self._leave_body(identities, group_id)
            later = lambda now: self.leave_group(caller, again, now)  # noqa: E731
            refusal = leave_answer(ErrorCode.NOT_COORDINATOR, [])
            self.consumer.wait(group_id, caller.token, later, refusal)
            return []

        def leave(group: ConsumerGroup) -> list[Body]:
            results = []
            for identity in identities:
                member_id = identity.get("member_id") or ""
                instance_id = identity.get("group_instance_id")
                if instance_id is not None:
                    found = [m for m in group.members.values() if m.instance_id == instance_id]
                    if found and member_id and found[0].member_id != member_id:
                        code = ErrorCode.FENCED_INSTANCE_ID
                        results.append({"member_id": member_id, "group_instance_id": instance_id,
                                        "error_code": code})  # fmt: skip
                        continue
                    member_id = found[0].member_id if found else member_id
                member = group.members.get(member_id)
                code = ErrorCode.NONE
                if member is None or member.classic is None:
                    code = ErrorCode.UNKNOWN_MEMBER_ID
                else:
                    group.remove(member_id, self.consumer.topics)
                results.append({"member_id": member_id, "group_instance_id": instance_id,
                                "error_code": code})  # fmt: skip
            return results

        def answer(results: list[Body], error: ErrorCode) -> list[Effect]:
            failure = append_error(error, offsets=False)
            if failure != ErrorCode.NONE:
                return [Respond(caller.token, leave_answer(failure, []))]
            top = results[0]["error_code"] if caller.version < 3 and results else ErrorCode.NONE
            return [Respond(caller.token, leave_answer(top, results))]

        return self.consumer.change(group_id, leave, answer, now)

    @staticmethod
    def _leave_body(identities: list[Body], group_id: str) -> Body:
        return {"group_id": group_id, "members": identities,
                "member_id": identities[0].get("member_id") if identities else ""}  # fmt: skip

    def _expire_consumer_members(self, now: int) -> list[Effect]:
        """Members whose session ran out, or that kept partitions past their rebalance
        timeout, leave their groups (written as any heartbeat's change is)."""
        effects: list[Effect] = []
        for group_id, group in list(self.consumer.groups.items()):
            if self.consumer.busy(group_id) or not group.members:
                continue
            if not group.due(now):
                continue

            def expire(group: ConsumerGroup) -> list[tuple[str, str]]:
                return group.expire(now, self.consumer.topics)

            def removed(
                gone: list[tuple[str, str]], error: ErrorCode, group_id: str = group_id
            ) -> list[Effect]:
                if error != ErrorCode.NONE:
                    return []  # still there: the next tick tries again
                epoch = self.consumer.groups[group_id].group_epoch
                return self._maybe_downgrade(group_id, now) + [
                    GroupEvent(
                        "group_member_removed",
                        group_id,
                        f"member {member} of group {group_id} was removed: {why}",
                        epoch,
                    )
                    for member, why in gone
                ]

            effects += self.consumer.change(group_id, expire, removed, now)
        return effects

    # ---- time --------------------------------------------------------------------------------

    def tick(self, now: int) -> list[Effect]:
        effects: list[Effect] = []
        for group in list(self._groups.values()):
            for pending, deadline in list(group.pending_members.items()):
                if deadline <= now:
                    del group.pending_members[pending]
                    effects += self._maybe_complete_join(group, now)
            for member in list(group.members.values()):
                blocked = member.join_token is not None or member.sync_token is not None
                if not blocked and member.deadline_ms <= now and member.member_id in group.members:
                    why = f"sent no heartbeat for {member.session_timeout_ms} ms"
                    effects += self._remove_member(group, member.member_id, now, why)
            if group.is_(GroupState.PREPARING_REBALANCE) and group.join_deadline_ms <= now:
                effects += self._join_deadline(group, now)
        effects += self._expire_consumer_members(now)
        for partition in self.owned_partitions():
            state = self._partitions[partition]
            if now >= state.next_expiry_check_ms:
                state.next_expiry_check_ms = now + self.config.offsets_retention_check_interval_ms
                for group_id in sorted(state.group_ids):
                    effects += self._expire_offsets(group_id, now)
        return effects

    def _join_deadline(self, group: Group, now: int) -> list[Effect]:
        if group.initial_delay and group.new_member_added:
            cap = group.initial_deadline_cap_ms
            if group.join_deadline_ms < cap:
                group.new_member_added = False
                delay = self.config.initial_rebalance_delay_ms
                group.join_deadline_ms = min(now + delay, cap)
                return []
        return self._complete_join(group, now)

    # ---- offsets expiring ---------------------------------------------------------------------

    def _expire_offsets(self, group_id: str, now: int) -> list[Effect]:
        """Kafka's cleanupGroupMetadata for one group: tombstones for its expired offsets, and
        for the group too when it is Empty and nothing else is left."""
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            return self._expire_consumer_offsets(consumer, now)
        group = self._groups.get(group_id)
        start = self._retention_start(group) if group is not None else None
        # A write in flight is a commit or a delete deciding the same offsets: wait for it (as
        # Kafka leaves partitions with a pending commit alone).
        if group is None or start is None or self._writing(group_id):
            return []
        committed = self.committed(group_id)
        pending = self._offsets.pending_keys(group_id)  # a transaction still decides these
        expired = [
            key
            for key, offset in sorted(committed.items())
            if not group.is_subscribed_to(key[0])
            and key not in pending
            and self._expired(offset, start(offset), now)
        ]
        # A partition whose last write failed may have an offset in the log all the same: the
        # group stays until that is settled (as it does for an open transaction).
        remove_group = (
            len(expired) == len(committed)
            and not pending
            and group_id not in self._in_doubt
            and group.is_(GroupState.EMPTY)
        )
        records: list[Record] = [(offset_key(group_id, *key), None) for key in expired]
        if remove_group:
            records.append((group_key(group_id), None))
        if not records:
            return []

        def written(error: ErrorCode, now: int, at: int) -> list[Effect]:
            if error != ErrorCode.NONE:
                return []  # they stay; the next check tries again
            for key in expired:
                self._offsets.remove(group_id, key)
            # Unless it came back to life while the tombstones were written (a member joined,
            # an offset was committed), the group is gone, as a replay of the log finds it.
            if (
                remove_group
                and self._groups.get(group_id) is group
                and group.is_(GroupState.EMPTY)
                and group_id not in self._offsets.groups()
                and group_id not in self._in_doubt
                and not self._writing(group_id)
            ):
                self._forget(group_id)
            return []

        return [self._append(group_id, records, written, offset_keys=expired)]

    def _expire_consumer_offsets(self, group: ConsumerGroup, now: int) -> list[Effect]:
        """A consumer group's offsets expire from their commit unless a member subscribes to
        their topic (Kafka's rule for these groups); an empty group left without offsets goes
        too, with every record it has."""
        group_id = group.group_id
        if self._writing(group_id) or self.consumer.busy(group_id):
            return []
        committed = self.committed(group_id)
        pending = self._offsets.pending_keys(group_id)
        expired = [
            key
            for key, offset in sorted(committed.items())
            if not group.is_subscribed_to(key[0])
            and key not in pending
            and self._expired(offset, offset.commit_timestamp, now)
        ]
        remove_group = (
            len(expired) == len(committed)
            and not pending
            and group_id not in self._in_doubt
            and not group.members
        )
        records: list[Record] = [(offset_key(group_id, *key), None) for key in expired]
        if remove_group:
            records += self.consumer.tombstones(group_id)
        if not records:
            return []

        def written(error: ErrorCode, now: int, at: int) -> list[Effect]:
            if error != ErrorCode.NONE:
                return []  # they stay; the next check tries again
            for key in expired:
                self._offsets.remove(group_id, key)
            if (
                remove_group
                and self.consumer.groups.get(group_id) is group
                and not group.members
                and group_id not in self._offsets.groups()
                and not self._writing(group_id)
            ):
                self._forget(group_id)
            return []

        return [self._append(group_id, records, written, offset_keys=expired)]

    def _retention_start(self, group: Group) -> Callable[[CommittedOffset], int] | None:
        """From when an offset of this group counts its retention (KIP-211, Kafka's
        offsetExpirationCondition); None: the group's offsets do not expire now."""
        if group.protocol_type is None:
            # Never had members (a standalone committer, assign() and commit): each offset
            # from its commit.
            return lambda offset: offset.commit_timestamp
        if group.is_(GroupState.EMPTY):
            # From when the group became empty; a group whose record does not say (an older
            # record version), from each commit.
            became_empty = group.state_timestamp_ms
            if became_empty >= 0:
                return lambda offset: became_empty
            return lambda offset: offset.commit_timestamp
        if (
            group.is_(GroupState.STABLE)
            and group.uses_consumer_protocol()
            and group.subscribed_topics is not None
        ):
            # Consumers that no longer subscribe to a topic: its offsets, from their commit.
            return lambda offset: offset.commit_timestamp
        return None  # rebalancing, or members whose subscriptions are not known

    def _expired(self, offset: CommittedOffset, start: int, now: int) -> bool:
        if offset.expire_timestamp >= 0:  # the commit set its own retention
            return now >= offset.expire_timestamp
        return now - start >= self.config.offsets_retention_ms

    # ---- offsets ------------------------------------------------------------------------------

    def commit_offsets(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        group_id: str = body["group_id"]
        topics = body.get("topics") or []
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
        if error == ErrorCode.NONE:
            error = self._commit_check(body, now, caller.version)
        if error != ErrorCode.NONE:
            return [Respond(caller.token, commit_answer(topics, lambda t, p: error))]
        # OffsetCommit v2-v4 may set the offsets' own retention (-1: the broker's rules).
        errors, entries = self._offset_entries(topics, now, body.get("retention_time_ms", -1))
        if not entries:
            return [Respond(caller.token, commit_answer(topics, lambda t, p: errors[(t, p)]))]
        if not self._exists(group_id):
            self._remember(Group(group_id, state_timestamp_ms=now))
        records = _offset_records(group_id, entries)

        def stored(error: ErrorCode, now: int, base_offset: int) -> list[Effect]:
            failure = append_error(error, offsets=True)
            if failure == ErrorCode.NONE and self._exists(group_id):
                for key, offset in _positioned(entries, base_offset):
                    self._offsets.commit(group_id, key, offset)
            return [
                Respond(
                    caller.token,
                    commit_answer(topics, lambda t, p: errors.get((t, p), failure)),
                )
            ]

        keys = [key for key, _ in entries]
        return [self._append(group_id, records, stored, offset_keys=keys)]

    def _offset_entries(
        self, topics: list[Body], now: int, retention_ms: int = -1
    ) -> tuple[dict[Key, ErrorCode], list[tuple[Key, CommittedOffset]]]:
        """A commit's offsets to write, in request order, and the refused ones' errors."""
        expire_timestamp = -1 if retention_ms == -1 else now + retention_ms
        errors: dict[Key, ErrorCode] = {}
        entries: list[tuple[Key, CommittedOffset]] = []
        for topic in topics:
            for part in topic.get("partitions") or []:
                key = (topic["name"], part["partition_index"])
                metadata = part.get("committed_metadata") or ""
                if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                    errors[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                committed = CommittedOffset(
                    part["committed_offset"],
                    part.get("committed_leader_epoch", -1),
                    metadata,
                    now,
                    expire_timestamp,
                )
                entries.append((key, committed))
        return errors, entries

    def _commit_check(self, body: Body, now: int, version: int) -> ErrorCode:
        """Kafka's rules for who may commit (GroupCoordinator.handleCommitOffsets)."""
        group = self._groups.get(body["group_id"])
        generation = body.get("generation_id_or_member_epoch", NO_GENERATION)
        member_id: str = body.get("member_id") or ""
        consumer = self.consumer.groups.get(body["group_id"])
        if consumer is not None:
            return _consumer_commit_error(consumer, member_id, generation, version)
        if group is None:
            # Only a member-less commit (assign() plus commit) may create a group. v9 says
            # GROUP_ID_NOT_FOUND, which clients of either protocol understand.
            if generation < 0:
                return ErrorCode.NONE
            return ErrorCode.GROUP_ID_NOT_FOUND if version >= 9 else ErrorCode.ILLEGAL_GENERATION
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.fenced_static_member(body.get("group_instance_id"), member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation < 0 and group.is_(GroupState.EMPTY):
            return ErrorCode.NONE
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        member.deadline_ms = now + member.session_timeout_ms
        return ErrorCode.NONE

    def fetch_offsets(self, caller: Caller, body: Body) -> list[Effect]:
        """OffsetFetch: one group (v1-v7) or several (v8+, each with its own error). With
        require_stable (v7+), a partition whose offset a transaction has pending answers
        UNSTABLE_OFFSET_COMMIT, which the client retries (KIP-447). A classic group takes no
        member id or epoch (v9) into account, as in Kafka."""
        require_stable = bool(body.get("require_stable", False))
        if caller.version < 8:
            answer = self._group_offsets(body["group_id"], body.get("topics"), require_stable)
            return [Respond(caller.token, {"throttle_time_ms": 0, **answer})]
        groups = [
            {"group_id": group["group_id"],
             **self._group_offsets(group["group_id"], group.get("topics"), require_stable,
                                   group.get("member_id"), group.get("member_epoch", -1))}
            for group in body.get("groups") or []
        ]  # fmt: skip
        return [Respond(caller.token, {"throttle_time_ms": 0, "groups": groups})]

    def _group_offsets(
        self,
        group_id: str,
        requested: list[Body] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> Body:
        """One group's part of an OffsetFetch answer: `topics` and `error_code`. A member of a
        consumer group (v9) must be one, at its epoch; a tool (no member, epoch -1) need not."""
        error = self._ownership_error(group_id)
        consumer = self.consumer.groups.get(group_id)
        a_member = member_id is not None or member_epoch >= 0
        if error == ErrorCode.NONE and consumer is not None and a_member:
            member = consumer.members.get(member_id or "")
            if member is None:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            elif member.epoch != member_epoch:
                error = ErrorCode.STALE_MEMBER_EPOCH
        committed = self._offsets.committed(group_id)  # pending offsets are not shown
        unstable = self._offsets.pending_keys(group_id) if require_stable else set()
        if requested is None:  # v2+: every partition with a committed offset
            names = sorted({topic for topic, _ in committed})
            requested = [
                {"name": name, "partition_indexes": sorted(p for t, p in committed if t == name)}
                for name in names
            ]
        topics = []
        for topic in requested:
            partitions = []
            for index in topic.get("partition_indexes") or []:
                key = (topic["name"], index)
                entry = committed.get(key) if error == ErrorCode.NONE else None
                code = error
                if code == ErrorCode.NONE and key in unstable:
                    code, entry = ErrorCode.UNSTABLE_OFFSET_COMMIT, None
                partitions.append(
                    {
                        "partition_index": index,
                        "committed_offset": entry.offset if entry else -1,
                        "committed_leader_epoch": entry.leader_epoch if entry else -1,
                        "metadata": entry.metadata if entry else "",
                        "error_code": code,
                    }
                )
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"topics": topics, "error_code": error}

    def delete_offsets(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """OffsetDelete: tombstones for the group's offsets of these partitions, answered once
        written. As Kafka: an Empty group's offsets go; a consumer group with members keeps
        those of the topics they subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); any other group with
        members refuses (NON_EMPTY_GROUP)."""
        group_id: str = body["group_id"]
        topics: list[Body] = body.get("topics") or []
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
        group = self._groups.get(group_id) if error == ErrorCode.NONE else None
        consumer = self.consumer.groups.get(group_id) if error == ErrorCode.NONE else None
        if consumer is not None:
            pass  # its members' subscriptions decide, partition by partition
        elif error == ErrorCode.NONE and (group is None or group.is_(GroupState.DEAD)):
            error = ErrorCode.GROUP_ID_NOT_FOUND
        elif (
            group is not None
            and not group.is_(GroupState.EMPTY)
            and not group.uses_consumer_protocol()
        ):
            error = ErrorCode.NON_EMPTY_GROUP
        subscribed_to = consumer or group
        if error != ErrorCode.NONE or subscribed_to is None:
            return [Respond(caller.token, offset_delete_answer(error, []))]
        known = self._offset_keys(group_id)
        deleting: dict[Key, None] = {}  # in request order, each once
        answer_topics: list[Body] = []
        for topic in topics:
            name: str = topic["name"]
            subscribed = subscribed_to.is_subscribed_to(name)
            partitions = []
            for part in topic.get("partitions") or []:
                index: int = part["partition_index"]
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": (
                            ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if subscribed else ErrorCode.NONE
                        ),
                    }
                )
                if not subscribed and (name, index) in known:
                    deleting[(name, index)] = None
            answer_topics.append({"name": name, "partitions": partitions})
        if not deleting:  # nothing stored: nothing to write
            return [Respond(caller.token, offset_delete_answer(ErrorCode.NONE, answer_topics))]

        def deleted(error: ErrorCode, now: int, at: int) -> list[Effect]:
            failure = append_error(error, offsets=False)
            if failure != ErrorCode.NONE:
                return [Respond(caller.token, offset_delete_answer(failure, []))]
            for key in deleting:
                self._offsets.remove(group_id, key)
            return [Respond(caller.token, offset_delete_answer(ErrorCode.NONE, answer_topics))]

        tombstones: list[Record] = [(offset_key(group_id, *key), None) for key in deleting]
        return [self._append(group_id, tombstones, deleted, offset_keys=deleting)]

    def on_topics_deleted(self, topics: Iterable[str], now: int) -> list[Effect]:
        """These topics were deleted: tombstones for every offset the loaded groups have of
        their partitions (Kafka's onPartitionsDeleted), so a topic made again under the same
        name starts without them, here and at any later coordinator."""
        deleted = set(topics)
        effects: list[Effect] = []
        for partition in self.owned_partitions():
            for group_id in sorted(self._partitions[partition].group_ids):
                keys = sorted(key for key in self._offset_keys(group_id) if key[0] in deleted)
                if not keys:
                    continue

                def written(
                    error: ErrorCode,
                    now: int,
                    at: int,
                    group_id: str = group_id,
                    keys: list[Key] = keys,
                ) -> list[Effect]:
                    if error == ErrorCode.NONE:
                        for key in keys:
                            self._offsets.remove(group_id, key)
                    return []

                tombstones: list[Record] = [(offset_key(group_id, *key), None) for key in keys]
                effects.append(self._append(group_id, tombstones, written, offset_keys=keys))
        return effects

    # ---- transactional offsets ---------------------------------------------------------------

    def txn_offset_commit(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """TxnOffsetCommit: the offsets go to the log as one transactional batch of the
        producer's; once written they are pending until `complete_transaction`."""
        group_id: str = body["group_id"]
        topics = body.get("topics") or []
        error = ErrorCode.INVALID_GROUP_ID if not group_id else self._ownership_error(group_id)
        consumer = self.consumer.groups.get(group_id)
        if error == ErrorCode.NONE and consumer is not None:
            member_id = body.get("member_id") or ""
            error = _consumer_commit_error(
                consumer, member_id, body.get("generation_id", NO_GENERATION), None
            )
        elif error == ErrorCode.NONE:
            error = txn_commit_error(
                self._groups.get(group_id),
                body.get("generation_id", NO_GENERATION),
                body.get("member_id") or "",
                body.get("group_instance_id"),
            )
        if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and caller.version < 2:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE  # what producers before 2.0 can handle
        if error != ErrorCode.NONE:
            return [Respond(caller.token, commit_answer(topics, lambda t, p: error))]
        errors, entries = self._offset_entries(topics, now)
        if not entries:
            return [Respond(caller.token, commit_answer(topics, lambda t, p: errors[(t, p)]))]
        if not self._exists(group_id):
            self._remember(Group(group_id, state_timestamp_ms=now))
        producer_id: int = body["producer_id"]
        producer = (producer_id, body["producer_epoch"])

        def written(error: ErrorCode, now: int, base_offset: int) -> list[Effect]:
            write = self._txn_writes.pop(append.append_id, None)
            failure = append_error(error, offsets=True)
            if failure == ErrorCode.NONE and write is not None and self._exists(group_id):
                for key, offset in _positioned(entries, base_offset):
                    if write.outcome is None:
                        self._offsets.add_pending(producer_id, group_id, key, offset)
                    elif write.outcome:
                        self._offsets.commit(group_id, key, offset)
            answer = commit_answer(topics, lambda t, p: errors.get((t, p), failure))
            return [Respond(caller.token, answer)]

        records = _offset_records(group_id, entries)
        keys = [key for key, _ in entries]
        append = self._append(group_id, records, written, producer, offset_keys=keys)
        tenure = self._partitions[append.partition].tenure
        self._txn_writes[append.append_id] = _TxnWrite(
            group_id, append.partition, tenure, producer_id, entries
        )
        return [append]

    def complete_transaction(
        self, partition: int, producer_id: int, committed: bool, now: int
    ) -> list[Effect]:
        """The broker wrote `producer_id`'s COMMIT (or ABORT) marker to this offsets partition:
        that producer's pending offsets in the partition's groups become committed (unless a
        regular commit later in the log is there already) or are dropped."""
        state = self._partitions.get(partition)
        if state is None or not state.loaded:
            return []  # not ours; a partition still loading replays the marker from its log
        for write in self._txn_writes.values():
            # Written before the marker, not acknowledged yet: the marker covers it too.
            if (
                write.producer_id == producer_id
                and write.partition == partition
                and write.tenure == state.tenure
                and write.outcome is None
            ):
                write.outcome = committed
        self._offsets.complete(
            producer_id, committed, lambda group_id: self.partition_for(group_id) == partition
        )
        return []

    # ---- admin ---------------------------------------------------------------------------------

    def describe_groups(self, caller: Caller, body: Body) -> list[Effect]:
        described = [self._describe(group_id) for group_id in body.get("groups") or []]
        return [Respond(caller.token, {"throttle_time_ms": 0, "groups": described})]

    def _describe(self, group_id: str) -> Body:
        error = self._ownership_error(group_id)
        group = self._groups.get(group_id) if error == ErrorCode.NONE else None
        answer: Body = {
            "error_code": error,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": -(2**31),
        }
        if group is None:
            return answer  # Kafka describes an unknown group as Dead, without an error
        stable = group.is_(GroupState.STABLE)
        answer |= {
            "group_state": group.state.value,
            "protocol_type": group.protocol_type or "",
            "protocol_data": (group.protocol or "") if stable else "",
            "members": [
                {
                    "member_id": member.member_id,
                    "group_instance_id": member.group_instance_id,
                    "client_id": member.client_id,
                    "client_host": member.client_host,
                    "member_metadata": member.metadata_for(group.protocol or "") if stable else b"",
                    "member_assignment": member.assignment if stable else b"",
                }
                for member in group.members.values()
            ],
        }
        return answer

    def list_groups(self, caller: Caller, body: Body) -> list[Effect]:
        loading = any(not state.loaded for state in self._partitions.values())
        wanted = {state.lower() for state in body.get("states_filter") or []}
        types = {kind.strip().lower() for kind in body.get("types_filter") or []}
        listed = [
            {
                "group_id": group.group_id,
                "protocol_type": group.protocol_type or "",
                "group_state": group.state.value,
                "group_type": "classic",
            }
            for group in self._groups.values()
        ]
        listed += [
            {
                "group_id": group.group_id,
                "protocol_type": "consumer",
                "group_state": group.state.value,
                "group_type": "consumer",
            }
            for group in self.consumer.groups.values()
        ]
        groups = [
            entry
            for entry in sorted(listed, key=lambda entry: entry["group_id"])
            if (not wanted or entry["group_state"].lower() in wanted)
            and (not types or entry["group_type"] in types)
        ]
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE
        answer = {"throttle_time_ms": 0, "error_code": error, "groups": groups}
        return [Respond(caller.token, answer)]

    def delete_groups(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        # A group named twice is deleted (and answered) once, as Kafka's set of names: two
        # tombstone writes would answer when the first ends, whatever the second's outcome.
        names: list[str] = list(dict.fromkeys(body.get("groups_names") or []))
        results: dict[str, ErrorCode] = {}
        waiting: set[str] = set()
        effects: list[Effect] = []

        def respond() -> Respond:
            return Respond(
                caller.token,
                {
                    "throttle_time_ms": 0,
                    "results": [{"group_id": name, "error_code": results[name]} for name in names],
                },
            )

        for group_id in names:
            error = self._ownership_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
            group = self._groups.get(group_id) if error == ErrorCode.NONE else None
            consumer = self.consumer.groups.get(group_id) if error == ErrorCode.NONE else None
            if consumer is not None:
                if consumer.members or self.consumer.busy(group_id):
                    error = ErrorCode.NON_EMPTY_GROUP
            elif error == ErrorCode.NONE and (group is None or group.is_(GroupState.DEAD)):
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif group is not None and not group.is_(GroupState.EMPTY):
                error = ErrorCode.NON_EMPTY_GROUP
            if error != ErrorCode.NONE or (group is None and consumer is None):
                results[group_id] = error
                continue
            # Pending transactional offsets do not keep a group from being deleted (Kafka): they
            # get tombstones too, so a transaction that commits later brings nothing back.
            txn_writes = [i for i, w in self._txn_writes.items() if w.group_id == group_id]
            keys = list(self._offsets.committed(group_id))
            unwritten = self._offsets.pending_keys(group_id) | {
                key for i in txn_writes for key, _ in self._txn_writes[i].entries
            }
            unwritten |= self._in_doubt.get(group_id, set())
            keys += sorted(unwritten - set(keys))
            tombstones: list[Record] = (
                self.consumer.tombstones(group_id) if consumer else [(group_key(group_id), None)]
            )
            tombstones += [(offset_key(group_id, *key), None) for key in keys]
            waiting.add(group_id)

            def deleted(
                error: ErrorCode,
                now: int,
                at: int,
                group_id: str = group_id,
                txn_writes: list[int] = txn_writes,
            ) -> list[Effect]:
                failure = append_error(error, offsets=False)
                results[group_id] = failure
                if failure == ErrorCode.NONE:
                    self._forget(group_id)
                    for append_id in txn_writes:  # written before the tombstones
                        write = self._txn_writes.get(append_id)
                        if write is not None:
                            write.outcome = False
                waiting.discard(group_id)
                return [] if waiting else [respond()]

            effects.append(self._append(group_id, tombstones, deleted, offset_keys=keys))
        if not waiting:
            effects.append(respond())
        return effects

    def _forget(self, group_id: str) -> None:
        self.consumer.drop(group_id)
        group = self._groups.pop(group_id, None)
        if group is not None:
            group.state = GroupState.DEAD
        self._offsets.drop_group(group_id)
        self._in_doubt.pop(group_id, None)
        state = self._partitions.get(self.partition_for(group_id))
        if state is not None:
            state.group_ids.discard(group_id)

    # ---- read models (describe for tools, invariant checks in tests) --------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def committed(self, group_id: str) -> dict[Key, CommittedOffset]:
        return self._offsets.committed(group_id)

    def pending(self, group_id: str) -> dict[int, dict[Key, CommittedOffset]]:
        """The group's transactional offsets waiting for their producer's marker, by producer."""
        return self._offsets.pending(group_id)

    def _store_group(self, group: Group, on_done: OnDone) -> Append:
        record = group.to_record(group.state_timestamp_ms, {})
        return self._append(
            group.group_id, [(group_key(group.group_id), group_value(record))], on_done
        )


@dataclass(frozen=True, slots=True)
class _JoinRequest:
    caller: Caller
    member_id: str
    instance_id: str | None
    session_timeout: int
    rebalance_timeout: int
    protocol_type: str


def _answer_blocked(member: Member, error: ErrorCode) -> list[Effect]:
    effects: list[Effect] = []
    if member.join_token is not None:
        effects.append(Respond(member.join_token, join_error(error, member.member_id)))
        member.join_token = None
    if member.sync_token is not None:
        effects.append(Respond(member.sync_token, sync_answer(error)))
        member.sync_token = None
    return effects


def _offset_records(group_id: str, entries: list[tuple[Key, CommittedOffset]]) -> list[Record]:
    return [(offset_key(group_id, *key), offset_value(committed)) for key, committed in entries]


def _positioned(
    entries: list[tuple[Key, CommittedOffset]], base_offset: int
) -> list[tuple[Key, StoredOffset]]:
    """The written offsets with their records' offsets in the log (-1 each when not known)."""
    return [
        (key, StoredOffset(committed, base_offset + index if base_offset >= 0 else -1))
        for index, (key, committed) in enumerate(entries)
    ]


def _consumer_commit_error(
    group: ConsumerGroup, member_id: str, epoch: int, version: int | None
) -> ErrorCode:
    """Kafka's rules for an OffsetCommit (`version`) or a TxnOffsetCommit (None) to a consumer
    group: without a member only while the group is empty; else by a member at its epoch."""
    if epoch < 0 and not group.members:
        return ErrorCode.NONE
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    classic = member.classic is not None  # a classic member commits as classic members do
    if version is not None and version < 9 and not classic:
        return ErrorCode.UNSUPPORTED_VERSION  # its members commit with v9+
    if epoch != member.epoch:
        # A classic member's, or a transaction's commit: ILLEGAL_GENERATION, what they know.
        stale = version is not None and not classic
        return ErrorCode.STALE_MEMBER_EPOCH if stale else ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE
