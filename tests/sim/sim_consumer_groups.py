"""Consumer-protocol (KIP-848) group clients for the cluster simulation, and what they check.

Model consumers of one group speak ConsumerGroupHeartbeat as Kafka's Java client and librdkafka
do, over the simulated network, against the coordinators in the brokers' cores. They subscribe to
the data topic and the transactional producers' topic (three partitions between them), under a
member id of their own (KIP-1082), with a server assignor picked per seed:

- join with epoch 0 and no partitions; then heartbeat every heartbeat_interval_ms (as answered)
  with the current epoch and the partitions owned; after a heartbeat failed (no answer, or
  an error to retry), the next one is full (rebalance timeout, subscription and owned
  partitions), so that its answer carries the assignment again, as the Java client does: the
  answer that carried it may be the one that was lost; so is the next one after an answer
  that moved the epoch without an assignment (a duplicated copy of a heartbeat that moved the
  member on is answered that way, and the network here duplicates requests where TCP would not);
- an answer's non-null assignment is the new target: partitions no longer in it are revoked at
  once (their positions committed first, then no longer owned, then a heartbeat says so); new
  ones are owned, and their committed offsets fetched before anything is committed for them;
- OffsetCommit v9 every COMMIT_MS with the member epoch, for the partitions owned;
- FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: drop every partition, rejoin with epoch 0 (same
  member id); NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, or no
  answer within CLIENT_TIMEOUT_MS: find the coordinator again and retry with the same epoch.

Clients crash (stop talking: their process and its ownership are gone), leave (epoch -1, having
dropped their partitions) and new ones join.

Checked, whatever the faults:
- consumer-I9-offset-lost: an OffsetFetch answered by any coordinator returns, for every
  partition, at least the largest offset whose commit was acknowledged before the fetch was sent.
- consumer-coordinator-two-owners: after every step, in every copy of the group held by any live
  broker's coordinator (a deposed one that has not unloaded it yet included), no partition is
  held (assigned, or pending revocation) by two members.
- consumer-two-owners: a member owns a partition from the moment it receives the answer that
  gives it until it sends the heartbeat that no longer lists it (or rejoins, leaves or crashes).
  When member B receives an answer giving it partition p, every other live member A that owns p
  then must be one that the coordinator which answered B had already removed: its group has no
  member A's id, or has it at an epoch other than the one A believes it has (fenced, expired, or
  rejoined since). Kafka guarantees disjointness only among members at their current epoch; a
  removed member that has not heard of it yet is a zombie, and its commits are refused. (If the
  answering broker is dead or no longer holds the group by then, the overlap is not judged.)
- consumer-epoch-went-back: a successful answer's member epoch for a member id is at least every
  epoch answered to that member id before, unless the member has rejoined with epoch 0 since
  (after FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID), across coordinator failovers.
- consumer-heartbeat-refused: no heartbeat is answered an error a client cannot act on.
- consumer-group-settles: after the faults end, the coordinator's group is Stable with exactly
  the live clients as members, each client at the coordinator's epoch for it, owning exactly what
  the coordinator assigned it, and the partitions split among them, each owned by one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim_groups import FIND_AGAIN
from sim_txns import TXN_TOPIC, TXN_TOPIC_PARTITIONS

from rlog.core.broker import OFFSETS_TOPIC
from rlog.core.groups import group_partition
from rlog.core.groups.consumer_group import ConsumerGroup, ConsumerGroupState
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from sim_cluster import Simulation

CONSUMERS = "k"  # the network endpoint of every consumer-protocol client
GROUP = "sim-consumer-group"
SESSION_TIMEOUT_MS = 2_000  # the brokers' group.consumer.session.timeout.ms here
HEARTBEAT_INTERVAL_MS = 300  # group.consumer.heartbeat.interval.ms
REBALANCE_TIMEOUT_MS = 2_000
COMMIT_MS = 250
RETRY_MS = 100
CLIENT_TIMEOUT_MS = 1_500  # below the session timeout, as request.timeout.ms is below it
CLIENTS_MAX = 4
HEARTBEAT_VERSION = 0
REJOIN = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}

Key = tuple[str, int]  # (topic, partition)


@dataclass
class ConsumerClient:
    name: str
    member_id: str
    epoch: int = 0  # 0: (re)joins next
    epoch_floor: int = 0  # the largest epoch answered since its last join was sent
    coordinator: int | None = None
    owned: set[Key] = field(default_factory=set)
    revoking: set[Key] = field(default_factory=set)  # owned, to give up once committed
    positions: dict[Key, int] = field(default_factory=dict)
    waiting: Any = None
    next_action_ms: int = 0
    next_heartbeat_ms: int = 0
    next_commit_ms: int = 0
    heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS
    full: bool = True  # the next heartbeat carries every field (after a join or a failure)
    alive: bool = True
    leaving: bool = False


@dataclass
class _Sent:
    client: ConsumerClient
    what: str
    deadline_ms: int
    coordinator: int
    epoch: int = 0  # the member epoch it was sent with
    epoch_floor: int = 0
    acked_before: dict[Key, int] = field(default_factory=dict)
    committed: dict[Key, int] = field(default_factory=dict)


class ConsumerGroupModel:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.clients: list[ConsumerClient] = []
        self.sent: dict[Any, _Sent] = {}
        self.requests = 0
        self.names = 0
        self.acked: dict[Key, int] = {}
        self.commits_acked = 0
        self.assignments = 0  # answers that carried a new assignment
        self.zombie_overlaps = 0  # overlaps judged allowed (one owner already removed)
        self.topic_ids: dict[str, uuid.UUID] = {}
        self.assignor = sim.rng.choice(("uniform", "range"))
        self.partitions: list[Key] = [(sim.topic, p) for p in range(sim.options.partitions)] + [
            (TXN_TOPIC, p) for p in range(TXN_TOPIC_PARTITIONS)
        ]

    def start(self, clients: int) -> None:
        for _ in range(clients):
            self.add_client()

    def add_client(self) -> None:
        self.names += 1
        name = f"k{self.names}"
        self.clients.append(ConsumerClient(name, f"{name}-member"))

    # ---- faults ----

    def nemesis(self) -> None:
        rng = self.sim.rng
        live = [c for c in self.clients if c.alive and not c.leaving]
        roll = rng.random()
        if roll < 0.004 and len(live) < CLIENTS_MAX:
            self.add_client()
        elif roll < 0.006 and len(live) > 1:
            victim = rng.choice(live)
            victim.alive = False  # a crash: it stops talking, and consuming
            victim.owned.clear()
            self.sim.trace(f"consumer {victim.name} crashed")
        elif roll < 0.008 and len(live) > 1:
            client = rng.choice(live)
            if client.epoch > 0 and client.waiting is None and client.coordinator is not None:
                client.leaving = True
                client.owned.clear()  # closing: it stops consuming, then says it leaves
                client.revoking.clear()
                self._send(client, "leave", self._heartbeat_body(client, -1))

    # ---- time ----

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for token, sent in list(self.sent.items()):
            if now_ms >= sent.deadline_ms:  # no answer: find the coordinator, then retry
                del self.sent[token]
                client = sent.client
                client.waiting = None
                client.coordinator = None
                client.full = True
                if sent.what == "leave":
                    client.alive = False
                elif sent.what == "revoke":  # committed or not, they are given up now
                    self._release(client)
        for client in self.clients:
            if client.alive and client.waiting is None and now_ms >= client.next_action_ms:
                self._act(client, now_ms)

    def _act(self, client: ConsumerClient, now_ms: int) -> None:
        if client.leaving:
            return
        if client.coordinator is None:
            client.coordinator = self._find_coordinator()
            if client.coordinator is None or not self._know_topics():
                client.coordinator = None
                client.next_action_ms = now_ms + RETRY_MS
                return
        if client.epoch == 0:
            assert not client.owned
            client.epoch_floor = 0
            client.next_heartbeat_ms = now_ms + client.heartbeat_interval_ms
            self._send(client, "join", self._heartbeat_body(client, 0))
        elif client.revoking:
            committed = {k: client.positions[k] for k in client.revoking if k in client.positions}
            if committed:
                self._commit(client, "revoke", committed)
            else:
                self._release(client)
                self._heartbeat(client, now_ms)
        elif now_ms >= client.next_heartbeat_ms:  # heartbeats come on their own schedule
            self._heartbeat(client, now_ms)
        elif any(k not in client.positions for k in client.owned):
            self._fetch_offsets(client)
        elif client.owned and now_ms >= client.next_commit_ms and self.sim.producer.producing:
            # Once the harness heals everything and stops the producers, periodic commits
            # stop too: they would keep the offsets partitions from ever being quiet.
            rng = self.sim.rng
            for key in client.owned:
                client.positions[key] += rng.randint(1, 5)
            client.next_commit_ms = now_ms + COMMIT_MS
            self._commit(client, "commit", {k: client.positions[k] for k in client.owned})
        else:
            due = [client.next_heartbeat_ms]
            if client.owned and self.sim.producer.producing:
                due.append(client.next_commit_ms)
            client.next_action_ms = min(due)

    def _release(self, client: ConsumerClient) -> None:
        client.owned -= client.revoking
        for key in client.revoking:
            client.positions.pop(key, None)
        client.revoking = set()
        client.next_action_ms = self.sim.now_ms
        client.next_heartbeat_ms = self.sim.now_ms  # tell the coordinator at once

    def _find_coordinator(self) -> int | None:
        controller = self.sim.controller
        if not controller.alive:
            return None
        topic = controller.controller.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return None
        info = topic.partitions.get(group_partition(GROUP, len(topic.partitions)))
        return info.leader if info is not None and info.leader >= 0 else None

    def _know_topics(self) -> bool:
        """The subscribed topics' ids, from a metadata answer (the controller's image)."""
        if len(self.topic_ids) < 2:
            controller = self.sim.controller
            if controller.alive:
                for name in {topic for topic, _ in self.partitions}:
                    info = controller.controller.image.topics.get(name)
                    if info is not None:
                        self.topic_ids[name] = uuid.UUID(info.topic_id)
        return len(self.topic_ids) == len({topic for topic, _ in self.partitions})

    # ---- requests ----

    def _send(self, client: ConsumerClient, what: str, body: dict[str, Any]) -> _Sent:
        api_key, version = {
            "join": (ApiKey.CONSUMER_GROUP_HEARTBEAT, HEARTBEAT_VERSION),
            "heartbeat": (ApiKey.CONSUMER_GROUP_HEARTBEAT, HEARTBEAT_VERSION),
            "leave": (ApiKey.CONSUMER_GROUP_HEARTBEAT, HEARTBEAT_VERSION),
            "commit": (ApiKey.OFFSET_COMMIT, 9),
            "revoke": (ApiKey.OFFSET_COMMIT, 9),
            "fetch": (ApiKey.OFFSET_FETCH, 5),
        }[what]
        self.requests += 1
        token = ("k", client.name, self.requests)
        assert client.coordinator is not None
        sent = _Sent(client, what, self.sim.now_ms + CLIENT_TIMEOUT_MS, client.coordinator)
        sent.epoch_floor = client.epoch_floor
        sent.epoch = client.epoch
        self.sent[token] = sent
        client.waiting = token
        self.sim.network.send(
            CONSUMERS, client.coordinator, "group_request", (token, api_key, version, body)
        )
        return sent

    def _heartbeat_body(self, client: ConsumerClient, epoch: int) -> dict[str, Any]:
        joining = epoch == 0
        full = joining or client.full
        owned: dict[str, list[int]] = {}
        for topic, partition in sorted(client.owned):
            owned.setdefault(topic, []).append(partition)
        return {
            "group_id": GROUP,
            "member_id": client.member_id,
            "member_epoch": epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS if full else -1,
            "subscribed_topic_names": sorted(self.topic_ids) if full else None,
            "subscribed_topic_regex": None,
            "server_assignor": self.assignor if joining else None,
            "topic_partitions": [
                {"topic_id": self.topic_ids[topic], "partitions": partitions}
                for topic, partitions in owned.items()
            ],
        }

    def _heartbeat(self, client: ConsumerClient, now_ms: int) -> None:
        client.next_heartbeat_ms = now_ms + client.heartbeat_interval_ms
        self._send(client, "heartbeat", self._heartbeat_body(client, client.epoch))

    def _commit(self, client: ConsumerClient, what: str, committed: dict[Key, int]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in sorted(committed.items()):
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        body = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": client.epoch,
            "member_id": client.member_id,
            "group_instance_id": None,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }
        self._send(client, what, body).committed = committed

    def _fetch_offsets(self, client: ConsumerClient) -> None:
        topics: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            topics.setdefault(topic, []).append(partition)
        body = {
            "group_id": GROUP,
            "topics": [{"name": n, "partition_indexes": p} for n, p in topics.items()],
            "require_stable": False,
        }
        self._send(client, "fetch", body).acked_before = dict(self.acked)

    # ---- answers ----

    def receive(self, token: Any, body: dict[str, Any]) -> None:
        sent = self.sent.pop(token, None)
        if sent is None:
            return  # late: the client gave up on it
        client = sent.client
        client.waiting = None
        if sent.what == "leave":
            client.alive = False
        if not client.alive:
            return
        now_ms = self.sim.now_ms
        client.next_action_ms = now_ms
        if sent.what in ("commit", "revoke"):
            self._on_commit(client, sent, body)
        elif sent.what == "fetch":
            self._on_fetch(client, sent, body)
        else:
            self._on_heartbeat(client, sent, body)

    def _on_heartbeat(self, client: ConsumerClient, sent: _Sent, body: dict[str, Any]) -> None:
        from sim_cluster import InvariantViolation

        error = ErrorCode(body["error_code"])
        assignment = body.get("assignment")
        self.sim.trace(
            f"consumer {client.name} {sent.what} e={client.epoch} from {sent.coordinator}: "
            f"{error.name} e={body.get('member_epoch')} "
            f"assigned={None if assignment is None else self._keys(assignment)}"
        )
        if error in FIND_AGAIN:
            client.coordinator = None
            client.full = True
            client.next_action_ms = self.sim.now_ms + RETRY_MS
            return
        if error in REJOIN:
            client.owned.clear()
            client.revoking.clear()
            client.positions.clear()
            client.epoch = 0
            return
        if error != ErrorCode.NONE:
            raise InvariantViolation(
                "consumer-heartbeat-refused",
                f"{client.name} {sent.what} at epoch {client.epoch} answered {error.name}: "
                f"{body.get('error_message')}",
            )
        epoch = body["member_epoch"]
        if epoch < sent.epoch_floor:
            raise InvariantViolation(
                "consumer-epoch-went-back",
                f"{client.name} ({client.member_id}) answered epoch {epoch} by "
                f"{sent.coordinator} after epoch {sent.epoch_floor} was answered to it",
            )
        # The network duplicates requests (TCP would not): a second copy of a heartbeat that
        # moved the member on is answered as the lost-answer case (the new epoch, no
        # assignment), and may arrive first. So an epoch moved without an assignment makes the
        # next heartbeat full, whose answer carries the assignment, as after a lost answer.
        client.full = assignment is None and epoch != sent.epoch
        client.epoch = epoch
        client.epoch_floor = max(client.epoch_floor, epoch)
        interval = body.get("heartbeat_interval_ms") or 0
        if interval > 0:
            client.heartbeat_interval_ms = interval
        if assignment is None:
            return
        self.assignments += 1
        target = self._keys(assignment)
        for key in sorted(target - client.owned):
            self._check_given(client, key, sent.coordinator)
        client.revoking = client.owned - target
        client.owned |= target

    def _keys(self, assignment: dict[str, Any]) -> set[Key]:
        names = {found: name for name, found in self.topic_ids.items()}
        return {
            (names[entry["topic_id"]], partition)
            for entry in assignment["topic_partitions"]
            for partition in entry["partitions"]
        }

    def _check_given(self, client: ConsumerClient, key: Key, coordinator: int) -> None:
        """consumer-two-owners (the module's docstring)."""
        from sim_cluster import InvariantViolation

        for other in self.clients:
            if other is client or not other.alive or key not in other.owned:
                continue
            group = self._group_at(coordinator)
            if group is None:
                continue  # the answering coordinator is gone: not judged
            member = group.members.get(other.member_id)
            if member is None or member.epoch != other.epoch:
                self.zombie_overlaps += 1
                self.sim.trace(f"consumer {other.name} is a zombie owner of {key}")
                continue
            raise InvariantViolation(
                "consumer-two-owners",
                f"{client.name} was given {key} by coordinator {coordinator} while "
                f"{other.name} owns it at epoch {other.epoch}, which that coordinator still "
                f"has it at (holding {dict(member.reconciled.assigned)}, revoking "
                f"{dict(member.reconciled.pending_revocation)})",
            )

    def _group_at(self, broker_id: int) -> ConsumerGroup | None:
        broker = self.sim.brokers.get(broker_id)
        if broker is None or not broker.alive:
            return None
        return broker.core.groups.coordinator.consumer.groups.get(GROUP)

    def _on_commit(self, client: ConsumerClient, sent: _Sent, body: dict[str, Any]) -> None:
        errors = []
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                key = (topic["name"], partition["partition_index"])
                error = ErrorCode(partition["error_code"])
                errors.append(error)
                if error == ErrorCode.NONE and key in sent.committed:
                    self.acked[key] = max(self.acked.get(key, -1), sent.committed[key])
                    self.commits_acked += 1
        self.sim.trace(
            f"consumer {client.name} {sent.what} e={client.epoch} {sent.committed} from "
            f"{sent.coordinator}: {sorted({e.name for e in errors})}"
        )
        if any(error in FIND_AGAIN for error in errors):
            client.coordinator = None
        if sent.what == "revoke":
            self._release(client)

    def _on_fetch(self, client: ConsumerClient, sent: _Sent, body: dict[str, Any]) -> None:
        from sim_cluster import InvariantViolation

        error = ErrorCode(body.get("error_code", ErrorCode.NONE))
        errors = {error.name} | {
            ErrorCode(p["error_code"]).name for t in body["topics"] for p in t["partitions"]
        }
        self.sim.trace(f"consumer {client.name} fetch from {sent.coordinator}: {sorted(errors)}")
        if error in FIND_AGAIN:
            client.coordinator = None
        if errors != {"NONE"}:
            client.next_action_ms = self.sim.now_ms + RETRY_MS
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                if partition["error_code"] != ErrorCode.NONE:
                    continue
                key = (topic["name"], partition["partition_index"])
                offset = partition["committed_offset"]
                floor = sent.acked_before.get(key, -1)
                if offset < floor:
                    raise InvariantViolation(
                        "consumer-I9-offset-lost",
                        f"{GROUP} {key}: committed {offset}, but {floor} was acknowledged "
                        f"before the fetch (coordinator {sent.coordinator})",
                    )
                if key in client.owned and key not in client.positions:
                    client.positions[key] = max(offset, 0)

    # ---- invariants ----

    def check(self) -> None:
        """consumer-coordinator-two-owners, over every live broker's copy of the group."""
        for broker in self.sim.brokers.values():
            if not broker.alive:
                continue
            group = broker.core.groups.coordinator.consumer.groups.get(GROUP)
            if group is None:
                continue
            holder: dict[Key, str] = {}
            for member in group.members.values():
                held = member.reconciled
                for partitions in (held.assigned, held.pending_revocation):
                    for topic, indexes in partitions.items():
                        for index in indexes:
                            first = holder.setdefault((topic, index), member.member_id)
                            if first != member.member_id:
                                from sim_cluster import InvariantViolation

                                raise InvariantViolation(
                                    "consumer-coordinator-two-owners",
                                    f"broker {broker.broker_id}'s group {GROUP} gives "
                                    f"{(topic, index)} to {first} and {member.member_id} "
                                    f"(group epoch {group.group_epoch})",
                                )

    # ---- after the faults ----

    def settled(self) -> bool:
        live = [c for c in self.clients if c.alive]
        if any(c.leaving or c.epoch <= 0 or c.revoking for c in live):
            return False
        coordinator = self._find_coordinator()
        group = self._group_at(coordinator) if coordinator is not None else None
        if group is None or group.state is not ConsumerGroupState.STABLE:
            return False
        if set(group.members) != {c.member_id for c in live}:
            return False
        for client in live:
            member = group.members[client.member_id]
            assigned = {(t, p) for t, parts in member.reconciled.assigned.items() for p in parts}
            if member.epoch != client.epoch or assigned != client.owned:
                return False
        owned = [key for c in live for key in c.owned]
        return len(owned) == len(set(owned)) and set(owned) == set(self.partitions)

    def describe(self) -> str:
        coordinator = self._find_coordinator()
        group = self._group_at(coordinator) if coordinator is not None else None
        where = "none"
        if group is not None:
            members = {
                m: (member.epoch, dict(member.reconciled.assigned))
                for m, member in group.members.items()
            }
            where = f"{group.state.value} epoch={group.group_epoch} members={members}"
        clients = ", ".join(
            f"{c.name}(alive={c.alive} e={c.epoch} coord={c.coordinator} "
            f"owned={sorted(c.owned)} revoking={sorted(c.revoking)} waiting={c.waiting})"
            for c in self.clients
        )
        return f"coordinator {coordinator}: {where}; {clients}"
