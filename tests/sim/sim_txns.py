"""Transactional producers for the cluster simulation, and what a read_committed reader checks.

Model producers with their own transactional ids follow Kafka's transactional protocol as the
Java client and librdkafka do, over the simulated network, against the transaction coordinator
and partition leaders that run in the brokers' cores: find the coordinator (the harness answers
FindCoordinator from the controller's image, as a broker would), InitProducerId, then per
transaction AddPartitionsToTxn, one idempotent transactional Produce per partition (retried
with the same sequence when its answer is lost), and EndTxn: commit, or abort (by choice, or
because a write failed). A producer may also restart (a new instance with the same id: it fences
the old one, whose open transaction the coordinator aborts). Transactions outliving
transaction.timeout.ms are aborted by the coordinator.

Checked, whatever the faults, on the records a read_committed consumer gets from the current
leader (up to the LSO, dropping the aborted transactions the fetch lists, as clients do):
- no aborted read: no record of a transaction the producer was told is aborted (or that was
  fenced before it asked to commit) is ever read;
- no partial transaction: in each partition a transaction's records are read all or none;
  after the faults end, every transaction the producer was told is committed is read whole, in
  every partition, and every other one all or none;
- no duplicate: no record is read twice (idempotence through retries and leader changes);
- the LSO of the current leader never moves back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlog.core.broker import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from rlog.core.groups import group_partition
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import (
    ControlType,
    build_batch,
    decode_batch,
    iter_batches,
    read_end_txn_marker,
)
from rlog.core.replication import Replica
from rlog.core.transactions import TxnState, transaction_partition

if TYPE_CHECKING:
    from sim_cluster import Simulation

TXNS = "x"  # the network endpoint of every transactional producer
TXN_TOPIC = "tx"
TXN_TOPIC_PARTITIONS = 2
TXN_STATE_PARTITIONS = 1
TXN_TIMEOUT_MS = 4_000
CLIENT_TIMEOUT_MS = 2_500
RETRY_MS = 100
PRODUCE_ATTEMPTS = 4  # then the transaction is aborted
END_ATTEMPTS = 8  # then the outcome is unknown and the producer starts again
CHECK_EVERY_STEPS = 40
FIND_AGAIN = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}
RETRY_SAME = {ErrorCode.CONCURRENT_TRANSACTIONS}
DONE = {"committed", "aborted", "unknown"}


class TxnViolation(AssertionError):
    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"{invariant}: {detail}")
        self.invariant = invariant
        self.detail = detail


@dataclass
class Txn:
    name: str  # "<producer>.<number>"
    partitions: list[int]
    acked: dict[int, list[bytes]] = field(default_factory=dict)  # partition -> values written
    sent: dict[int, list[bytes]] = field(default_factory=dict)  # partition -> values tried
    asked_commit: bool = False  # an EndTxn(commit) was sent: the outcome may be a commit
    outcome: str = "open"  # open, committed, aborted, unknown
    offset: int = -1  # the consumer offset it commits for its producer's group (-1: none)


@dataclass
class TxnClient:
    transactional_id: str
    instance: int = 0
    coordinator: int | None = None
    group_coordinator: int | None = None
    producer_id: int = -1
    epoch: int = -1
    sequences: dict[int, int] = field(default_factory=dict)
    txn: Txn | None = None
    phase: str = "init"  # init, idle, add, produce, add_offsets, commit_offsets, end
    pending: list[int] = field(default_factory=list)  # partitions still to produce to
    attempts: int = 0
    commit: bool = True  # what its EndTxn asks
    waiting: Any = None
    next_action_ms: int = 0
    number: int = 0


@dataclass
class _Sent:
    client: TxnClient
    instance: int
    what: str
    deadline_ms: int
    partition: int = -1
    values: list[bytes] = field(default_factory=list)


class TxnModel:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.clients = [TxnClient("tx-a"), TxnClient("tx-b")]
        self.sent: dict[Any, _Sent] = {}
        self.requests = 0
        self.txns: list[Txn] = []
        self.lso_seen: dict[int, int] = {}
        self.committed = 0
        self.aborted = 0
        self.steps = 0
        self.producing = True

    # ---- faults ----

    def nemesis(self) -> None:
        rng = self.sim.rng
        if rng.random() < 0.002:
            client = rng.choice(self.clients)
            self._restart(client, "restarted (a new instance: the old one is a zombie)")

    def _restart(self, client: TxnClient, why: str) -> None:
        """A new instance of the producer: its open transaction ends as the coordinator decides
        (aborted if it never asked to commit)."""
        self.sim.trace(f"txn {client.transactional_id} {why}")
        if client.txn is not None and client.txn.outcome == "open":
            client.txn.outcome = "unknown" if client.txn.asked_commit else "aborted"
        client.instance += 1
        client.txn = None
        client.waiting = None
        client.coordinator = None
        client.producer_id, client.epoch = -1, -1
        client.phase = "init"
        client.next_action_ms = self.sim.now_ms + RETRY_MS

    # ---- time ----

    def tick(self) -> None:
        now_ms = self.sim.now_ms
        for token, sent in list(self.sent.items()):
            if now_ms >= sent.deadline_ms:  # no answer: lost, or the broker is gone
                del self.sent[token]
                if sent.instance == sent.client.instance:
                    self._no_answer(sent)
        for client in self.clients:
            if client.waiting is None and now_ms >= client.next_action_ms:
                self._act(client)
        self.steps += 1
        if self.steps % CHECK_EVERY_STEPS == 0:
            self.check(final=False)

    def _act(self, client: TxnClient) -> None:
        if client.coordinator is None and client.phase in ("init", "add", "add_offsets", "end"):
            client.coordinator = self._find_coordinator(client.transactional_id)
            if client.coordinator is None:
                client.next_action_ms = self.sim.now_ms + RETRY_MS
                return
        if client.phase == "init":
            self._init(client)
        elif client.phase == "idle":
            if self.producing:
                self._begin(client)
        elif client.phase == "add":
            self._add(client)
        elif client.phase == "produce":
            self._produce(client)
        elif client.phase == "add_offsets":
            self._add_offsets(client)
        elif client.phase == "commit_offsets":
            self._commit_offsets(client)
        elif client.phase == "end":
            self._end(client)

    def _find_group_coordinator(self, group_id: str) -> int | None:
        controller = self.sim.controller
        if not controller.alive:
            return None
        topic = controller.controller.image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return None
        info = topic.partitions.get(group_partition(group_id, len(topic.partitions)))
        return info.leader if info is not None and info.leader >= 0 else None

    def _find_coordinator(self, transactional_id: str) -> int | None:
        controller = self.sim.controller
        if not controller.alive:
            return None
        topic = controller.controller.image.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return None
        partition = transaction_partition(transactional_id, len(topic.partitions))
        info = topic.partitions.get(partition)
        return info.leader if info is not None and info.leader >= 0 else None

    def _leader(self, partition: int) -> int | None:
        controller = self.sim.controller
        info = controller.partition(partition, TXN_TOPIC) if controller.alive else None
        return info.leader if info is not None and info.leader >= 0 else None

    # ---- requests ----

    def _send(
        self, client: TxnClient, what: str, dst: int, api_key: ApiKey, version: int, body: Any
    ) -> _Sent:
        self.requests += 1
        token = (client.transactional_id, self.requests)
        sent = _Sent(client, client.instance, what, self.sim.now_ms + CLIENT_TIMEOUT_MS)
        self.sent[token] = sent
        client.waiting = token
        self.sim.network.send(TXNS, dst, "group_request", (token, api_key, version, body))
        return sent

    def _init(self, client: TxnClient) -> None:
        body = {
            "transactional_id": client.transactional_id,
            "transaction_timeout_ms": TXN_TIMEOUT_MS,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        assert client.coordinator is not None
        self._send(client, "init", client.coordinator, ApiKey.INIT_PRODUCER_ID, 4, body)

    def _begin(self, client: TxnClient) -> None:
        rng = self.sim.rng
        client.number += 1
        count = rng.randint(1, TXN_TOPIC_PARTITIONS)
        partitions = sorted(rng.sample(range(TXN_TOPIC_PARTITIONS), count))
        client.txn = Txn(f"{client.transactional_id}.{client.number}", partitions)
        if rng.random() < 0.5:  # consume-transform-produce: the input position goes along
            client.txn.offset = client.number
        self.txns.append(client.txn)
        client.commit = rng.random() < 0.7
        client.phase = "add"
        client.attempts = 0
        self._act(client)

    def _add(self, client: TxnClient) -> None:
        assert client.txn is not None and client.coordinator is not None
        body = {
            "v3_and_below_transactional_id": client.transactional_id,
            "v3_and_below_producer_id": client.producer_id,
            "v3_and_below_producer_epoch": client.epoch,
            "v3_and_below_topics": [{"name": TXN_TOPIC, "partitions": client.txn.partitions}],
        }
        self._send(client, "add", client.coordinator, ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)

    def _produce(self, client: TxnClient) -> None:
        assert client.txn is not None
        if not client.pending:
            with_offsets = client.txn.offset >= 0 and client.commit
            client.phase, client.attempts = ("add_offsets" if with_offsets else "end"), 0
            self._act(client)
            return
        partition = client.pending[0]
        leader = self._leader(partition)
        if leader is None:
            client.next_action_ms = self.sim.now_ms + RETRY_MS
            return
        txn = client.txn
        values = txn.sent.get(partition)
        if values is None:  # the first attempt: the same values and sequence on every retry
            count = self.sim.rng.randint(1, 3)
            values = [f"{txn.name}.{partition}.{i}".encode() for i in range(count)]
            txn.sent[partition] = values
        batch = build_batch(
            [(None, v) for v in values],
            base_timestamp=self.sim.now_ms,
            producer_id=client.producer_id,
            producer_epoch=client.epoch,
            base_sequence=client.sequences.get(partition, 0),
            is_transactional=True,
        )
        body = {
            "transactional_id": client.transactional_id,
            "acks": -1,
            "timeout_ms": 1_500,
            "topic_data": [
                {"name": TXN_TOPIC, "partition_data": [{"index": partition, "records": batch}]}
            ],
        }
        sent = self._send(client, "produce", leader, ApiKey.PRODUCE, 9, body)
        sent.partition, sent.values = partition, values

    def _add_offsets(self, client: TxnClient) -> None:
        assert client.coordinator is not None
        body = {
            "transactional_id": client.transactional_id,
            "producer_id": client.producer_id,
            "producer_epoch": client.epoch,
            "group_id": _group_of(client),
        }
        self._send(client, "add_offsets", client.coordinator, ApiKey.ADD_OFFSETS_TO_TXN, 3, body)

    def _commit_offsets(self, client: TxnClient) -> None:
        assert client.txn is not None
        if client.group_coordinator is None:
            client.group_coordinator = self._find_group_coordinator(_group_of(client))
            if client.group_coordinator is None:
                client.next_action_ms = self.sim.now_ms + RETRY_MS
                return
        body = {
            "transactional_id": client.transactional_id,
            "group_id": _group_of(client),
            "producer_id": client.producer_id,
            "producer_epoch": client.epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": self.sim.topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": client.txn.offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        dst = client.group_coordinator
        self._send(client, "commit_offsets", dst, ApiKey.TXN_OFFSET_COMMIT, 3, body)

    def _end(self, client: TxnClient) -> None:
        assert client.txn is not None and client.coordinator is not None
        if client.commit:
            client.txn.asked_commit = True
        body = {
            "transactional_id": client.transactional_id,
            "producer_id": client.producer_id,
            "producer_epoch": client.epoch,
            "committed": client.commit,
        }
        self._send(client, "end", client.coordinator, ApiKey.END_TXN, 3, body)

    # ---- answers ----

    def receive(self, token: Any, body: dict[str, Any]) -> None:
        sent = self.sent.pop(token, None)
        if sent is None or sent.instance != sent.client.instance:
            return  # late, or for an instance that no longer exists
        client = sent.client
        client.waiting = None
        client.next_action_ms = self.sim.now_ms
        getattr(self, f"_on_{sent.what}")(client, sent, body)

    def _no_answer(self, sent: _Sent) -> None:
        client = sent.client
        client.waiting = None
        client.next_action_ms = self.sim.now_ms + RETRY_MS
        if sent.what == "produce":
            self._produce_failed(client, "no answer")
        elif sent.what == "commit_offsets":
            client.group_coordinator = None
            self._produce_failed(client, "no answer")
        else:
            client.coordinator = None
            if sent.what == "end":
                self._end_failed(client, "no answer")

    def _on_init(self, client: TxnClient, sent: _Sent, body: dict[str, Any]) -> None:
        error = ErrorCode(body["error_code"])
        self.sim.trace(f"txn {client.transactional_id} init: {error.name}")
        if error == ErrorCode.NONE:
            client.producer_id, client.epoch = body["producer_id"], body["producer_epoch"]
            client.sequences = {}
            client.phase = "idle"
        else:
            self._retry(client, error)

    def _on_add(self, client: TxnClient, sent: _Sent, body: dict[str, Any]) -> None:
        errors = {
            ErrorCode(p["partition_error_code"])
            for topic in body["results_by_topic_v3_and_below"]
            for p in topic["results_by_partition"]
        }
        error = max(errors, key=lambda e: e != ErrorCode.NONE)
        self.sim.trace(f"txn {client.transactional_id} add: {error.name}")
        assert client.txn is not None
        if error == ErrorCode.NONE:
            client.phase = "produce"
            client.pending = list(client.txn.partitions)
            client.attempts = 0
        elif error in FIND_AGAIN or error in RETRY_SAME:
            self._retry(client, error)
        else:
            self._fatal(client, f"add: {error.name}")

    def _on_produce(self, client: TxnClient, sent: _Sent, body: dict[str, Any]) -> None:
        answer = body["responses"][0]["partition_responses"][0]
        error = ErrorCode(answer["error_code"])
        self.sim.trace(f"txn {client.transactional_id} produce p{sent.partition}: {error.name}")
        assert client.txn is not None
        if error in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            client.txn.acked[sent.partition] = sent.values
            client.sequences[sent.partition] = client.sequences.get(sent.partition, 0) + len(
                sent.values
            )
            client.pending.pop(0)
            client.attempts = 0
        elif error in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._fatal(client, f"produce: {error.name}")
        else:
            self._produce_failed(client, error.name)

    def _on_add_offsets(self, client: TxnClient, sent: _Sent, body: dict[str, Any]) -> None:
        error = ErrorCode(body["error_code"])
        self.sim.trace(f"txn {client.transactional_id} add offsets: {error.name}")
        if error == ErrorCode.NONE:
            client.phase, client.attempts = "commit_offsets", 0
        elif error in FIND_AGAIN or error in RETRY_SAME:
            self._retry(client, error)
        else:
            self._fatal(client, f"add offsets: {error.name}")

    def _on_commit_offsets(self, client: TxnClient, sent: _Sent, body: dict[str, Any]) -> None:
        errors = {ErrorCode(p["error_code"]) for t in body["topics"] for p in t["partitions"]}
        error = max(errors, key=lambda e: e != ErrorCode.NONE)
        self.sim.trace(f"txn {client.transactional_id} commit offsets: {error.name}")
        if error == ErrorCode.NONE:
            client.phase, client.attempts = "end", 0
        elif error in FIND_AGAIN:
            client.group_coordinator = None
            client.next_action_ms = self.sim.now_ms + RETRY_MS
        elif error in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._fatal(client, f"commit offsets: {error.name}")
        else:
            self._produce_failed(client, error.name)

    def _produce_failed(self, client: TxnClient, why: str) -> None:
        client.attempts += 1
        if client.attempts < PRODUCE_ATTEMPTS:
            client.next_action_ms = self.sim.now_ms + RETRY_MS
            return
        # Give up on this transaction: abort it (its sequence may now be off: start afresh).
        self.sim.trace(f"txn {client.transactional_id} aborting after {why}")
        client.commit = False
        client.phase, client.attempts = "end", 0

    def _on_end(self, client: TxnClient, sent: _Sent, body: dict[str, Any]) -> None:
        error = ErrorCode(body["error_code"])
        txn = client.txn
        assert txn is not None
        self.sim.trace(f"txn {client.transactional_id} end {txn.name} commit={client.commit}: "
                       f"{error.name}")  # fmt: skip
        if error == ErrorCode.NONE:
            txn.outcome = "committed" if client.commit else "aborted"
            if client.commit:
                self.committed += 1
            else:
                self.aborted += 1
            client.txn, client.phase = None, "idle"
            # After an abort the producer's sequences may be off for a partition whose last
            # write was lost: start from a fresh producer id, as clients bump their epoch.
            if not client.commit:
                client.phase = "init"
        elif error in FIND_AGAIN or error in RETRY_SAME:
            self._retry(client, error)
        elif error in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED):
            self._fatal(client, f"end: {error.name}")
        else:
            self._end_failed(client, error.name)

    def _end_failed(self, client: TxnClient, why: str) -> None:
        client.attempts += 1
        if client.attempts >= END_ATTEMPTS:
            self._fatal(client, f"end gave up after {why}")

    def _retry(self, client: TxnClient, error: ErrorCode) -> None:
        if error in FIND_AGAIN:
            client.coordinator = None
        client.next_action_ms = self.sim.now_ms + RETRY_MS

    def _fatal(self, client: TxnClient, why: str) -> None:
        """Fenced (another instance, or the coordinator aborted a timed-out transaction) or
        lost track: the open transaction ends as the coordinator decides; start again."""
        self._restart(client, why)

    # ---- the checks ----

    def settled(self) -> bool:
        """Every producer between transactions, and every coordinator's transactions ended
        (markers written)."""
        if any(c.phase not in ("idle",) or c.waiting is not None for c in self.clients):
            return False
        for broker in self.sim.brokers.values():
            if not broker.alive:
                return False
            for view in broker.core.txns.coordinator.transactions():
                if view.state not in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                      TxnState.COMPLETE_ABORT):  # fmt: skip
                    return False
        return True

    def check(self, *, final: bool) -> None:
        for partition in range(TXN_TOPIC_PARTITIONS):
            replica = self._current_leader(partition)
            if replica is None or not replica.serves_consumers:
                continue
            lso = replica.last_stable_offset
            last = self.lso_seen.get(partition, lso)
            if lso < last:
                raise TxnViolation("txn-lso-back", f"partition {partition}: LSO {last} -> {lso}")
            self.lso_seen[partition] = lso
            self._check_read(partition, read_committed(replica), final=final)
        self._check_offsets(final=final)

    def _check_offsets(self, *, final: bool) -> None:
        """The group's committed offset comes only from a transaction that committed (or may
        have: the producer asked and never heard); after the faults, from the last one."""
        for client in self.clients:
            group_id = _group_of(client)
            coordinator = self._find_group_coordinator(group_id)
            broker = self.sim.brokers.get(coordinator) if coordinator is not None else None
            if broker is None or not broker.alive:
                continue
            groups = broker.core.groups
            if group_partition(group_id, _offsets_partitions(broker)) not in groups.led:
                continue
            found = groups.coordinator.committed(group_id).get((self.sim.topic, 0))
            if found is None:
                continue
            mine = [t for t in self.txns if t.name.startswith(client.transactional_id + ".")]
            by_offset = {t.offset: t for t in mine if t.offset >= 0}
            txn = by_offset.get(found.offset)
            if (
                txn is None
                or txn.outcome == "aborted"
                or (txn.outcome == "open" and not txn.asked_commit)
            ):
                state = txn.outcome if txn is not None else "no transaction"
                raise TxnViolation(
                    "txn-offsets", f"{group_id} committed {found.offset} from {state}"
                )
            committed = [t.offset for t in mine if t.offset >= 0 and t.outcome == "committed"]
            if final and committed and found.offset < max(committed):
                raise TxnViolation(
                    "txn-offsets-lost", f"{group_id} at {found.offset}, committed {max(committed)}"
                )

    def _current_leader(self, partition: int) -> Replica | None:
        info = self.sim.controller.partition(partition, TXN_TOPIC)
        if info is None or info.leader not in self.sim.brokers:
            return None
        broker = self.sim.brokers[info.leader]
        if not broker.alive:
            return None
        replica = broker.core.replica(TXN_TOPIC, partition)
        if replica is None or not replica.is_leader or replica.leader_epoch != info.leader_epoch:
            return None
        return replica

    def _check_read(self, partition: int, values: list[bytes], *, final: bool) -> None:
        seen = set(values)
        if len(seen) != len(values):
            twice = sorted({v for v in values if values.count(v) > 1})
            raise TxnViolation("txn-duplicate", f"partition {partition}: read twice {twice[:5]}")
        for txn in self.txns:
            mine = {v for v in seen if v.startswith(txn.name.encode() + b".")}
            if txn.outcome == "aborted" and mine:
                raise TxnViolation("txn-aborted-read", f"{txn.name} read {sorted(mine)[:3]}")
            acked = set(txn.acked.get(partition, []))
            if mine and not acked <= mine:
                raise TxnViolation(
                    "txn-partial",
                    f"{txn.name} p{partition}: read {sorted(mine)} of {sorted(acked)}",
                )
            if final and txn.outcome == "committed" and not acked <= mine:
                raise TxnViolation(
                    "txn-committed-lost", f"{txn.name} p{partition}: {sorted(acked - mine)[:3]}"
                )

    def final_check(self) -> None:
        """After the faults end: each transaction read all or none across its partitions."""
        self.check(final=True)
        read: dict[int, set[bytes]] = {}
        for partition in range(TXN_TOPIC_PARTITIONS):
            replica = self._current_leader(partition)
            assert replica is not None
            read[partition] = set(read_committed(replica))
        for txn in self.txns:
            if txn.outcome == "open":
                continue
            parts = {p: bool(set(txn.acked.get(p, [])) & read[p]) for p in txn.acked}
            if len(set(parts.values())) > 1:
                raise TxnViolation("txn-partial-across", f"{txn.name}: read in {parts}")

    def describe(self) -> str:
        return ", ".join(
            f"{c.transactional_id}:{c.phase}{'(waiting)' if c.waiting else ''}"
            for c in self.clients
        )


def _group_of(client: TxnClient) -> str:
    return f"group-of-{client.transactional_id}"


def _offsets_partitions(broker: Any) -> int:
    topic = broker.image.topics.get(OFFSETS_TOPIC)
    return len(topic.partitions) if topic is not None else 1


def read_committed(replica: Replica) -> list[bytes]:
    """What a read_committed consumer reads from the log start: up to the LSO, dropping the
    records of the aborted transactions each fetch lists, as Kafka's clients do."""
    out: list[bytes] = []
    offset = replica.log.log_start_offset
    aborted_open: set[int] = set()
    pending_aborts: list[tuple[int, int]] = []  # (first offset, producer id), not yet reached
    while True:
        result = replica.on_consumer_fetch(offset, 2**31 - 1, read_committed=True)
        if result.error != ErrorCode.NONE or result.records is None:
            return out
        pending_aborts += [(t.first_offset, t.producer_id) for t in result.aborted]
        pending_aborts = sorted(set(pending_aborts))
        data = result.records.read()
        for position, header in iter_batches(data):
            offset = header.next_offset
            while pending_aborts and pending_aborts[0][0] <= header.last_offset:
                aborted_open.add(pending_aborts.pop(0)[1])
            if header.is_control:
                (record,) = decode_batch(data, position)
                control_type, _ = read_end_txn_marker(record)
                if control_type == ControlType.ABORT:
                    aborted_open.discard(header.producer_id)
                continue
            if header.is_transactional and header.producer_id in aborted_open:
                continue
            out += [r.value for r in decode_batch(data, position) if r.value is not None]
