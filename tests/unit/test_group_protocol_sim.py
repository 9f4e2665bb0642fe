"""A seeded simulation of the classic group protocol: model clients against the coordinator.

Clients follow the protocol as librdkafka does (join, sync, heartbeat, rejoin on
REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION, forget their id on UNKNOWN_MEMBER_ID). A nemesis
crashes clients, makes them leave, adds new ones and fails coordinator writes. Then faults stop
and the clients keep going. Checked:

- every request is answered exactly once, and none is left waiting once the group settles;
- one generation has one leader and one assignment: members of a generation never receive
  assignments from different leaders;
- after the faults stop, the group becomes Stable with exactly the live clients, each holding the
  partitions the leader gave it, and together they hold every partition once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from rlog.core.groups import Append, Caller, GroupConfig, GroupCoordinator, GroupState, Respond
from rlog.core.protocol.errors import ErrorCode

GROUP = "sim"
PARTITIONS = 12
SESSION_MS = 3_000
HEARTBEAT_MS = 500
STEP_MS = 50

REJOIN = {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION}
RETRY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}


@dataclass
class Client:
    name: str
    member_id: str = ""
    generation: int = -1
    waiting: int | None = None  # the token of the request it is blocked on
    waiting_for: str = ""
    joined: dict[str, Any] | None = None
    assignment: bytes | None = None
    next_heartbeat: int = 0
    alive: bool = True


@dataclass
class Sim:
    seed: int
    rng: random.Random = field(init=False)
    coordinator: GroupCoordinator = field(init=False)
    now: int = 0
    clients: list[Client] = field(default_factory=list)
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)
    writes: list[tuple[int, Append]] = field(default_factory=list)  # (due time, write)
    fail_writes: float = 0.0
    leaders_by_generation: dict[int, set[str]] = field(default_factory=dict)
    tokens: int = 0
    names: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        ids = iter(range(1, 10**6))
        config = GroupConfig(
            offsets_partitions=1,
            initial_rebalance_delay_ms=self.rng.choice([0, 300]),
            min_session_timeout_ms=1000,
        )
        self.coordinator = GroupCoordinator(config, lambda client: f"{client}-{next(ids)}")
        self.coordinator.start_loading(0)
        self.coordinator.finish_loading(0, [], 0)

    # ---- plumbing ----

    def run(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, Respond):
                assert effect.token not in self.answers, f"token {effect.token} answered twice"
                self.answers[effect.token] = effect.body
            elif isinstance(effect, Append):
                self.writes.append((self.now + self.rng.randint(1, 200), effect))

    def send(self, client: Client, method: str, body: dict[str, Any], what: str) -> None:
        self.tokens += 1
        client.waiting, client.waiting_for = self.tokens, what
        caller = Caller(self.tokens, 5 if method == "join_group" else 3, client.name, "/sim")
        self.run(getattr(self.coordinator, method)(caller, body, self.now))

    def join(self, client: Client) -> None:
        body = {
            "group_id": GROUP,
            "session_timeout_ms": SESSION_MS,
            "rebalance_timeout_ms": SESSION_MS * 2,
            "member_id": client.member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "roundrobin", "metadata": client.name.encode()}],
        }
        client.joined, client.assignment = None, None
        self.send(client, "join_group", body, "join")

    def sync(self, client: Client) -> None:
        assert client.joined is not None
        assignments = []
        if client.joined["leader"] == client.member_id:
            members = sorted(m["member_id"] for m in client.joined["members"])
            shares: dict[str, list[int]] = {m: [] for m in members}
            for partition in range(PARTITIONS):
                shares[members[partition % len(members)]].append(partition)
            assignments = [
                {"member_id": m, "assignment": ",".join(map(str, p)).encode() + b"@" + m.encode()}
                for m, p in shares.items()
            ]
        body = {
            "group_id": GROUP,
            "generation_id": client.generation,
            "member_id": client.member_id,
            "group_instance_id": None,
            "assignments": assignments,
        }
        self.send(client, "sync_group", body, "sync")

    # ---- a client's reaction to an answer ----

    def on_answer(self, client: Client, body: dict[str, Any]) -> None:
        error = ErrorCode(body["error_code"])
        what = client.waiting_for
        client.waiting = None
        if what == "join":
            if error == ErrorCode.MEMBER_ID_REQUIRED:
                client.member_id = body["member_id"]
                return self.join(client)
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                client.member_id = ""
                return self.join(client)
            if error != ErrorCode.NONE:
                return self.join(client)
            client.generation, client.joined = body["generation_id"], body
            self.leaders_by_generation.setdefault(client.generation, set()).add(body["leader"])
            return self.sync(client)
        if what == "sync":
            if error == ErrorCode.NONE:
                client.assignment = body["assignment"]
                client.next_heartbeat = self.now + HEARTBEAT_MS
                return None
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                client.member_id = ""
            return self.join(client)
        if what == "heartbeat":
            if error in REJOIN or error in RETRY:
                return self.join(client)
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                client.member_id = ""
                return self.join(client)
            client.next_heartbeat = self.now + HEARTBEAT_MS
        if what == "leave":
            client.alive = False
        return None

    # ---- time ----

    def step(self, *, faults: bool) -> None:
        self.now += STEP_MS
        if faults:
            self.nemesis()
        due = [w for w in self.writes if w[0] <= self.now]
        self.writes = [w for w in self.writes if w[0] > self.now]
        for _, write in due:
            failed = self.rng.random() < self.fail_writes
            error = ErrorCode.NOT_ENOUGH_REPLICAS if failed else ErrorCode.NONE
            self.run(self.coordinator.append_done(write.append_id, error, self.now))
        self.run(self.coordinator.tick(self.now))
        for client in self.clients:
            if not client.alive:
                continue
            if client.waiting is not None and client.waiting in self.answers:
                self.on_answer(client, self.answers[client.waiting])
            elif (
                client.waiting is None
                and client.assignment is not None
                and self.now >= client.next_heartbeat
            ):
                body = {
                    "group_id": GROUP,
                    "generation_id": client.generation,
                    "member_id": client.member_id,
                    "group_instance_id": None,
                }
                self.send(client, "heartbeat", body, "heartbeat")

    def add_client(self) -> None:
        self.names += 1
        client = Client(f"c{self.names}")
        self.clients.append(client)
        self.join(client)

    def nemesis(self) -> None:
        roll = self.rng.random()
        live = [c for c in self.clients if c.alive]
        if roll < 0.01 and len(live) < 6:
            self.add_client()
        elif roll < 0.015 and live:
            self.rng.choice(live).alive = False  # a crash: it just stops talking
        elif roll < 0.02 and live:
            client = self.rng.choice([c for c in live])
            if client.member_id and client.waiting is None:
                body = {"group_id": GROUP, "member_id": client.member_id}
                self.send(client, "leave_group", body, "leave")
        elif roll < 0.025:
            self.fail_writes = self.rng.choice([0.0, 0.0, 0.3, 1.0])


@pytest.mark.parametrize("seed", range(60))
def test_the_group_settles_with_every_live_client_after_any_faults(seed: int) -> None:
    sim = Sim(seed)
    for _ in range(sim.rng.randint(1, 4)):
        sim.add_client()
    for _ in range(600):  # 30 s of faults
        sim.step(faults=True)
    sim.fail_writes = 0.0
    if not any(c.alive for c in sim.clients):
        sim.add_client()
    for _ in range(400):  # 20 s of calm
        sim.step(faults=False)

    for generation, leaders in sim.leaders_by_generation.items():
        assert len(leaders) == 1, f"generation {generation} had leaders {leaders}"
    live = [c for c in sim.clients if c.alive]
    for client in live:
        assert client.waiting is None or client.waiting_for == "heartbeat", (
            f"{client.name} still waits for its {client.waiting_for} at {sim.now} ms"
        )
    group = sim.coordinator.group(GROUP)
    assert group is not None and group.state == GroupState.STABLE
    assert sorted(group.members) == sorted(c.member_id for c in live)
    generations = {c.generation for c in live}
    assert generations == {group.generation}
    owned = []
    for client in live:
        assert client.assignment is not None
        partitions, _, owner = client.assignment.partition(b"@")
        assert owner.decode() == client.member_id  # the share the leader meant for it
        owned += [int(p) for p in partitions.split(b",") if p]
    assert sorted(owned) == list(range(PARTITIONS))
