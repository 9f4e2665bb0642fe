"""Consumer-group clients for the cluster simulation, and what they check.

Model consumers of one group follow the classic protocol as librdkafka does, over the simulated
network, against the group coordinator that runs in the brokers' cores: find the coordinator
(the harness answers for FindCoordinator from the controller's image, as a broker would), join
(MEMBER_ID_REQUIRED first), sync (the leader assigns the topic's partitions round-robin), fetch
the committed offsets of what they were given, then heartbeat and commit their advancing
positions. Errors send them back to find the coordinator, or to rejoin, or to forget their member
id, as Kafka's clients do. Clients crash (they stop talking), leave, and new ones join.

Checked, whatever the faults (coordinator brokers killed, power lost, isolated, paused):
- I9 (commits survive): an OffsetFetch answered by any coordinator returns, for every partition,
  at least the largest offset whose commit was acknowledged before the fetch was sent;
- the group's generation survives a coordinator failover: a JoinGroup answer's generation is
  at least every generation a SyncGroup had completed before the join was sent (a coordinator
  that lost the group's metadata would start it over at 1);
- after the faults end, the group settles Stable with exactly the live clients as members.

Beside them an offsets admin works a second group without members, one request at a time:
member-less commits (assign() and commit), OffsetDelete of some partitions, and OffsetFetch.
What the log holds follows from the acknowledged ones (a sequential client's writes land in the
log in the order it sent them), so an OffsetFetch must return exactly that: a deleted offset
stays deleted across coordinator failovers (its tombstone was written and is replayed), and a
commit after a delete is kept. A partition whose last write got no clear answer is not checked
until a later write of it is acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlog.core.broker import OFFSETS_TOPIC
from rlog.core.groups import GroupState, group_partition
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from sim_cluster import Simulation

GROUPS = "g"  # the network endpoint of every group client
GROUP = "sim-group"
OFFSETS_PARTITIONS = 2
SESSION_TIMEOUT_MS = 2_000
HEARTBEAT_MS = 300
COMMIT_MS = 250
RETRY_MS = 100
CLIENT_TIMEOUT_MS = 2_500
CLIENTS_MAX = 4
ADMIN_GROUP = "sim-offsets-admin"  # committed to without members, and its offsets deleted
ADMIN_ACTION_MS = 300

REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION}
FIND_AGAIN = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


@dataclass
class GroupClient:
    name: str
    member_id: str = ""
    generation: int = -1
    coordinator: int | None = None
    assignment: list[int] | None = None  # None: not a settled member
    positions: dict[int, int] = field(default_factory=dict)
    waiting: Any = None  # the token of its one request in flight
    next_action_ms: int = 0
    next_commit_ms: int = 0
    next_heartbeat_ms: int = 0  # heartbeats come at their interval however long commits take
    alive: bool = True
    leaving: bool = False


@dataclass
class _Sent:
    client: GroupClient
    what: str
    deadline_ms: int
    acked_before: dict[int, int] = field(default_factory=dict)  # OffsetFetch: I9's floor
    synced_before: int = -1  # SyncGroup: the generation floor when it was sent
    committed: dict[int, int] = field(default_factory=dict)  # OffsetCommit: what it carries
    deleting: list[int] = field(default_factory=list)  # OffsetDelete: its partitions


@dataclass
class OffsetsAdmin:
    """What the offsets admin knows of its group's offsets: by partition, the offset the log
    ends with (None: deleted, or never committed), unless the last write of it is in doubt."""

    client: GroupClient
    expected: dict[int, int | None] = field(default_factory=dict)
    in_doubt: set[int] = field(default_factory=set)
    last_value: int = 0
    sent_at_ms: int = 0
    deletes_acked: int = 0
    fetches_checked: int = 0


class GroupModel:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.clients: list[GroupClient] = []
        self.sent: dict[Any, _Sent] = {}
        self.requests = 0
        self.names = 0
        self.acked: dict[int, int] = {}  # partition -> largest acknowledged committed offset
        self.synced_generation = -1  # largest generation a SyncGroup completed in
        self.commits_acked = 0
        self.rebalances = 0
        self.admin = OffsetsAdmin(GroupClient("admin"))

    @property
    def partitions(self) -> range:
        return range(self.sim.options.partitions)

    def start(self, clients: int) -> None:
        for _ in range(clients):
            self.add_client()
        self.admin.expected = dict.fromkeys(self.partitions)

    def add_client(self) -> None:
        self.names += 1
        self.clients.append(GroupClient(f"c{self.names}"))

    # ---- faults ----

    def nemesis(self) -> None:
        rng = self.sim.rng
        live = [c for c in self.clients if c.alive and not c.leaving]
        roll = rng.random()
        if roll < 0.004 and len(live) < CLIENTS_MAX:
            self.add_client()
        elif roll < 0.006 and len(live) > 1:
            victim = rng.choice(live)
            victim.alive = False  # a crash: it just stops talking
            self.sim.trace(f"group client {victim.name} crashed")
        elif roll < 0.008 and len(live) > 1:
            client = rng.choice(live)
            if client.member_id and client.waiting is None and client.coordinator is not None:
                client.leaving = True
                body = {
                    "group_id": GROUP,
                    "members": [{"member_id": client.member_id, "group_instance_id": None}],
                }
                self._send(client, "leave", ApiKey.LEAVE_GROUP, 3, body)

    # ---- time ----

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for token, sent in list(self.sent.items()):
            if now_ms >= sent.deadline_ms:  # no answer: the coordinator may be gone
                del self.sent[token]
                client = sent.client
                client.waiting = None
                client.coordinator = None
                if sent.what == "leave":  # closing: the process exits whatever the answer
                    client.alive = False
                if sent.what in ("join", "sync"):
                    client.assignment = None
        for client in self.clients:
            if client.alive and client.waiting is None and now_ms >= client.next_action_ms:
                self._act(client, now_ms)
        admin = self.admin.client
        # Once the harness heals everything and stops the producers, the admin stops too: its
        # writes would keep the offsets partitions from ever being quiet.
        stopped = not self.sim.producer.producing
        if not stopped and admin.waiting is None and now_ms >= admin.next_action_ms:
            self._admin_act(now_ms)

    def _act(self, client: GroupClient, now_ms: int) -> None:
        if client.leaving:
            return
        if client.coordinator is None:
            client.coordinator = self._find_coordinator()
            if client.coordinator is None:
                client.next_action_ms = now_ms + RETRY_MS
                return
        if client.assignment is None:
            self._join(client)
        elif any(p not in client.positions for p in client.assignment):
            # Where to start: a consumer never commits positions it has not established.
            self._fetch_offsets(client)
        elif now_ms < client.next_heartbeat_ms:  # a client heartbeats on its own schedule
            if client.assignment and now_ms >= client.next_commit_ms:
                self._commit(client, now_ms)
            else:
                due = [client.next_heartbeat_ms]
                if client.assignment:
                    due.append(client.next_commit_ms)
                client.next_action_ms = min(due)
        else:
            client.next_heartbeat_ms = now_ms + HEARTBEAT_MS
            body = {
                "group_id": GROUP,
                "generation_id": client.generation,
                "member_id": client.member_id,
                "group_instance_id": None,
            }
            self._send(client, "heartbeat", ApiKey.HEARTBEAT, 3, body)

    def _find_coordinator(self, group_id: str = GROUP) -> int | None:
        """FindCoordinator, as a broker answers it: the leader of the group's partition."""
        controller = self.sim.controller
        if not controller.alive:
            return None
        image = controller.controller.image
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return None
        info = topic.partitions.get(group_partition(group_id, len(topic.partitions)))
        return info.leader if info is not None and info.leader >= 0 else None

    # ---- the offsets admin ----

    def _admin_act(self, now_ms: int) -> None:
        admin = self.admin
        client = admin.client
        # A request the network duplicated must not land after the next one: wait until every
        # copy of the last one has arrived.
        settled_ms = admin.sent_at_ms + self.sim.network.delay_ms_max + 1
        if now_ms < settled_ms:
            client.next_action_ms = settled_ms
            return
        if client.coordinator is None:
            client.coordinator = self._find_coordinator(ADMIN_GROUP)
            if client.coordinator is None:
                client.next_action_ms = now_ms + RETRY_MS
                return
        rng = self.sim.rng
        roll = rng.random()
        chosen = sorted(rng.sample(list(self.partitions), rng.randint(1, len(self.partitions))))
        topic = self.sim.topic
        if roll < 0.45:
            committed = {}
            for partition in chosen:
                admin.last_value += 1
                committed[partition] = admin.last_value
            body: dict[str, Any] = {
                "group_id": ADMIN_GROUP,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": offset,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                            for p, offset in committed.items()
                        ],
                    }
                ],
            }
            sent = self._send(client, "commit", ApiKey.OFFSET_COMMIT, 7, body)
            sent.committed = committed
            admin.in_doubt |= set(committed)
        elif roll < 0.75:
            body = {
                "group_id": ADMIN_GROUP,
                "topics": [{"name": topic, "partitions": [{"partition_index": p} for p in chosen]}],
            }
            sent = self._send(client, "delete", ApiKey.OFFSET_DELETE, 0, body)
            sent.deleting = chosen
            admin.in_doubt |= set(chosen)
        else:
            body = {
                "group_id": ADMIN_GROUP,
                "topics": [{"name": topic, "partition_indexes": list(self.partitions)}],
                "require_stable": False,
            }
            self._send(client, "fetch", ApiKey.OFFSET_FETCH, 5, body)
        admin.sent_at_ms = now_ms

    def _admin_receive(self, sent: _Sent, body: dict[str, Any]) -> None:
        from sim_cluster import InvariantViolation

        admin = self.admin
        client = admin.client
        now_ms = self.sim.now_ms
        client.next_action_ms = now_ms + self.sim.rng.randint(1, ADMIN_ACTION_MS)
        error = ErrorCode(_error_of(sent.what, body))
        self.sim.trace(f"admin {sent.what} from {client.coordinator}: {error.name}")
        if error in FIND_AGAIN:
            client.coordinator = None
            return  # a write may or may not have landed: its partitions stay in doubt
        partitions = [
            (partition["partition_index"], ErrorCode(partition["error_code"]))
            for topic in body.get("topics") or []
            for partition in topic["partitions"]
        ]
        if sent.what == "commit":
            for index, partition_error in partitions:
                if partition_error == ErrorCode.NONE and index in sent.committed:
                    admin.expected[index] = sent.committed[index]
                    admin.in_doubt.discard(index)
        elif sent.what == "delete":
            certain = {p: v for p, v in admin.expected.items() if p not in admin.in_doubt}
            if error == ErrorCode.GROUP_ID_NOT_FOUND and any(
                v is not None for v in certain.values()
            ):
                raise InvariantViolation(
                    "offsets-group-lost",
                    f"OffsetDelete found no group {ADMIN_GROUP} at {client.coordinator}, "
                    f"which has acknowledged offsets {certain}",
                )
            if error != ErrorCode.NONE:
                return
            for index, partition_error in partitions:
                if partition_error != ErrorCode.NONE:
                    raise InvariantViolation(
                        "offset-delete-refused",
                        f"partition {index} of a group without members: {partition_error.name}",
                    )
                admin.expected[index] = None
                admin.in_doubt.discard(index)
                admin.deletes_acked += 1
        elif sent.what == "fetch" and error == ErrorCode.NONE:
            admin.fetches_checked += 1
            for topic in body["topics"]:
                for partition in topic["partitions"]:
                    index = partition["partition_index"]
                    if partition["error_code"] != ErrorCode.NONE or index in admin.in_doubt:
                        continue
                    expected = admin.expected.get(index)
                    found = partition["committed_offset"]
                    if found != (-1 if expected is None else expected):
                        what = "deleted" if expected is None else f"committed at {expected}"
                        raise InvariantViolation(
                            "I9-offset-delete-undone" if expected is None else "I9-offset-lost",
                            f"{ADMIN_GROUP} partition {index}: {what} (acknowledged), but "
                            f"coordinator {client.coordinator} answers {found}",
                        )

    # ---- requests ----

    def _send(
        self, client: GroupClient, what: str, api_key: ApiKey, version: int, body: dict[str, Any]
    ) -> _Sent:
        self.requests += 1
        token = (client.name, self.requests)
        sent = _Sent(client, what, self.sim.now_ms + CLIENT_TIMEOUT_MS)
        self.sent[token] = sent
        client.waiting = token
        assert client.coordinator is not None
        self.sim.network.send(
            GROUPS, client.coordinator, "group_request", (token, api_key, version, body)
        )
        return sent

    def _join(self, client: GroupClient) -> None:
        body = {
            "group_id": GROUP,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "rebalance_timeout_ms": SESSION_TIMEOUT_MS,
            "member_id": client.member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "roundrobin", "metadata": client.name.encode()}],
        }
        self._send(client, "join", ApiKey.JOIN_GROUP, 5, body)

    def _sync(self, client: GroupClient, joined: dict[str, Any]) -> None:
        assignments = []
        if joined["leader"] == client.member_id:
            members = sorted(m["member_id"] for m in joined["members"])
            shares: dict[str, list[int]] = {m: [] for m in members}
            for partition in self.partitions:
                shares[members[partition % len(members)]].append(partition)
            assignments = [
                {"member_id": m, "assignment": ",".join(map(str, p)).encode()}
                for m, p in shares.items()
            ]
        body = {
            "group_id": GROUP,
            "generation_id": client.generation,
            "member_id": client.member_id,
            "group_instance_id": None,
            "assignments": assignments,
        }
        sent = self._send(client, "sync", ApiKey.SYNC_GROUP, 3, body)
        sent.synced_before = self.synced_generation

    def _fetch_offsets(self, client: GroupClient) -> None:
        body = {
            "group_id": GROUP,
            "topics": [{"name": self.sim.topic, "partition_indexes": list(self.partitions)}],
            "require_stable": False,
        }
        sent = self._send(client, "fetch", ApiKey.OFFSET_FETCH, 5, body)
        sent.acked_before = dict(self.acked)

    def _commit(self, client: GroupClient, now_ms: int) -> None:
        assert client.assignment is not None
        rng = self.sim.rng
        for partition in client.assignment:
            client.positions[partition] = client.positions.get(partition, 0) + rng.randint(1, 5)
        committed = {p: client.positions[p] for p in client.assignment}
        body = {
            "group_id": GROUP,
            "generation_id_or_member_epoch": client.generation,
            "member_id": client.member_id,
            "group_instance_id": None,
            "topics": [
                {
                    "name": self.sim.topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for p, offset in committed.items()
                    ],
                }
            ],
        }
        sent = self._send(client, "commit", ApiKey.OFFSET_COMMIT, 7, body)
        sent.committed = committed
        client.next_commit_ms = now_ms + COMMIT_MS

    # ---- answers ----

    def receive(self, token: Any, body: dict[str, Any]) -> None:
        sent = self.sent.pop(token, None)
        if sent is None:
            return  # late: the client gave up on it
        client = sent.client
        client.waiting = None
        if client is self.admin.client:
            self._admin_receive(sent, body)
            return
        if sent.what == "leave":  # closing: the process exits whatever the answer
            client.alive = False
        if not client.alive:
            return
        now_ms = self.sim.now_ms
        client.next_action_ms = now_ms
        error = ErrorCode(_error_of(sent.what, body))
        detail = f" {sent.committed}" if sent.what == "commit" else ""
        self.sim.trace(
            f"group {client.name} {sent.what} from {client.coordinator}: {error.name} "
            f"gen={body.get('generation_id', client.generation)}{detail}"
        )
        if error in FIND_AGAIN:
            client.coordinator = None
            client.next_action_ms = now_ms + RETRY_MS
            if sent.what in ("join", "sync"):
                client.assignment = None
            return
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            client.member_id, client.assignment = "", None
            return
        if error in REJOIN:
            client.assignment = None
            return
        getattr(self, f"_on_{sent.what}")(client, sent, body, error)

    def _on_join(self, client: GroupClient, sent: _Sent, body: dict[str, Any], error: ErrorCode):  # type: ignore[no-untyped-def]
        if error == ErrorCode.MEMBER_ID_REQUIRED:
            client.member_id = body["member_id"]
            return
        if error != ErrorCode.NONE:
            client.next_action_ms = self.sim.now_ms + RETRY_MS
            return
        # A JoinGroup answer may carry a generation below one already synced: a coordinator cut
        # off from the controller still runs its stale copy of the group until it learns it
        # lost the partition, as in Kafka. Only a SyncGroup makes a generation real (its answer
        # waits for the group's record to be written), so the floor is checked there.
        client.generation = body["generation_id"]
        self.rebalances += 1
        self._sync(client, body)

    def _on_sync(self, client: GroupClient, sent: _Sent, body: dict[str, Any], error: ErrorCode):  # type: ignore[no-untyped-def]
        if error != ErrorCode.NONE:
            client.assignment = None
            return
        # Equal is fine: a known member rejoining a Stable group with the same subscription
        # gets the current generation back without a rebalance, as in Kafka.
        if client.generation < sent.synced_before:
            from sim_cluster import InvariantViolation

            raise InvariantViolation(
                "group-generation-went-back",
                f"{client.name} synced generation {client.generation} after generation "
                f"{sent.synced_before} had synced: the group was treated as new",
            )
        self.synced_generation = max(self.synced_generation, client.generation)
        text = bytes(body["assignment"] or b"").decode()
        client.assignment = [int(p) for p in text.split(",") if p]
        client.positions = {}

    def _on_fetch(self, client: GroupClient, sent: _Sent, body: dict[str, Any], error: ErrorCode):  # type: ignore[no-untyped-def]
        if error != ErrorCode.NONE:
            return
        from sim_cluster import InvariantViolation

        for topic in body["topics"]:
            for partition in topic["partitions"]:
                if partition["error_code"] != ErrorCode.NONE:
                    continue
                index, offset = partition["partition_index"], partition["committed_offset"]
                floor = sent.acked_before.get(index, -1)
                if offset < floor:
                    raise InvariantViolation(
                        "I9-committed-offset-lost",
                        f"partition {index}: committed {offset}, but {floor} was acknowledged "
                        f"before the fetch (coordinator {client.coordinator})",
                    )
                if client.assignment is not None and index in client.assignment:
                    client.positions[index] = max(offset, 0)

    def _on_commit(self, client: GroupClient, sent: _Sent, body: dict[str, Any], error: ErrorCode):  # type: ignore[no-untyped-def]
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                index = partition["partition_index"]
                if partition["error_code"] == ErrorCode.NONE and index in sent.committed:
                    self.acked[index] = max(self.acked.get(index, -1), sent.committed[index])
                    self.commits_acked += 1

    def _on_heartbeat(
        self, client: GroupClient, sent: _Sent, body: dict[str, Any], error: ErrorCode
    ):  # type: ignore[no-untyped-def]
        client.next_action_ms = self.sim.now_ms

    # ---- after the faults ----

    def settled(self) -> bool:
        """Stable with exactly the live clients, each holding its share."""
        live = [c for c in self.clients if c.alive]
        if any(c.assignment is None or c.leaving for c in live):
            return False
        coordinator = self._find_coordinator()
        broker = self.sim.brokers.get(coordinator) if coordinator is not None else None
        if broker is None or not broker.alive:
            return False
        group = broker.core.groups.coordinator.group(GROUP)
        if group is None or group.state != GroupState.STABLE:
            return False
        if sorted(group.members) != sorted(c.member_id for c in live):
            return False
        owned = sorted(p for c in live for p in c.assignment or [])
        return owned == list(self.partitions) and {c.generation for c in live} == {group.generation}

    def describe(self) -> str:
        admin = self.admin
        return ", ".join(
            [
                f"{c.name}(alive={c.alive} member={c.member_id or '-'} gen={c.generation} "
                f"coord={c.coordinator} assigned={c.assignment} waiting={c.waiting})"
                for c in self.clients
            ]
            + [
                f"admin(coord={admin.client.coordinator} expected={admin.expected} "
                f"in_doubt={sorted(admin.in_doubt)} deletes_acked={admin.deletes_acked} "
                f"fetches_checked={admin.fetches_checked})"
            ]
        )


def _error_of(what: str, body: dict[str, Any]) -> int:
    if what == "delete":  # only a group-wide error at the top
        return body["error_code"]
    if what == "commit":  # per partition; the first says whether the coordinator took it
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                return partition["error_code"]
        return ErrorCode.NONE
    if what == "leave":
        return body["error_code"]
    return body.get("error_code", ErrorCode.NONE)
