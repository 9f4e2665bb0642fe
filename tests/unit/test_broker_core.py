"""BrokerCore, the broker's sans-IO state machine, as its users see it: two or three cores wired
back to back by a tiny harness that plays the daemons, the controller and the network.

Every request and answer crosses a Kafka codec at its version (a follower's Fetch must be a valid
Fetch v11 or v12, a leader's answer a valid response); ApiVersions is answered by the harness, as
the daemon does; ISR proposals are decided by a real `Controller` (or held for the test to
answer). Files live in a `SimFileSystem`, so a test sees what was synced and what a power loss
keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from sim.sim_fs import SimFileSystem

from rlog.core.broker import (
    OFFSETS_TOPIC,
    BrokerConfig,
    BrokerCore,
    ClientRequest,
    Event,
    IsrProposal,
    MetadataChanged,
    PeerAnswered,
    PeerRequest,
    ProposalAnswered,
    Sync,
    Token,
)
from rlog.core.controller import Controller
from rlog.core.controller.api import AlterPartitionRequest, ControllerConfig
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    ChangePartition,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    MetadataRecord,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.protocol.apis import SUPPORTED, ApiKey, api_versions_body
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch
from rlog.core.replication import AlterPartitionResponse, Replica, Truncated
from rlog.core.storage.files import FileSlice, FileSystem, RealFileSystem

Body = dict[str, Any]
TOPIC = "t"
T0 = 1_000_000
PRODUCE_V, FETCH_V, LIST_OFFSETS_V = 8, 12, 5
EARLIEST, LATEST = -2, -1


def wire(api_key: int, version: int, kind: str, body: Body) -> Body:
    """`body` encoded as Kafka's `<Api><kind>` at `version` and decoded again (a file slice is
    read as sendfile would send it)."""
    name = "".join(word.capitalize() for word in ApiKey(api_key).name.split("_")) + kind
    codec = codec_for(name, version)
    out, parts = bytearray(), []
    codec.encode_into(out, parts, body)
    parts.append(bytes(out))
    data = b"".join(p.read() if isinstance(p, FileSlice) else bytes(p) for p in parts)
    decoded, end = codec.decode(data)
    assert end == len(data)
    return decoded


def batch(*values: bytes, **kwargs: int) -> bytes:
    return build_batch([(None, value) for value in values], **kwargs)


def produce_body(records: bytes, acks: int, topic: str = TOPIC, timeout_ms: int = 30_000) -> Body:
    partitions = [{"index": 0, "records": records}]
    return {"acks": acks, "timeout_ms": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": partitions}]}  # fmt: skip


def fetch_body(offset: int, *, max_wait_ms: int = 0) -> Body:
    partition = {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "topics": [{"topic": TOPIC, "partitions": [partition]}]}  # fmt: skip


def list_offsets_body(timestamp: int, replica_id: int) -> Body:
    partition = {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
    return {"replica_id": replica_id, "topics": [{"name": TOPIC, "partitions": [partition]}]}


def partition_of(answer: Body) -> Body:
    """The answer's one partition: Produce, Fetch and ListOffsets nest it differently."""
    topic = (answer.get("responses") or answer["topics"])[0]
    return (topic.get("partition_responses") or topic["partitions"])[0]


@dataclass
class Cluster:
    """Cores for `brokers`, the metadata log (partition t-0 led by the first broker), a network
    that delivers what the cores send (but not to or from a broker in `cut_off`), and the
    daemons' part of each Ready."""

    brokers: tuple[int, ...] = (1, 2)
    isr: tuple[int, ...] | None = None  # default: every broker
    topic_configs: dict[str, str] = field(default_factory=dict)
    fetch_max: dict[int, int] = field(default_factory=dict)  # Fetch max version a broker serves
    controller: bool = True  # False: proposals wait in `proposals` for the test to answer
    config: dict[str, Any] = field(default_factory=dict)  # BrokerConfig fields
    real_files: Path | None = None  # SimFileSystem cannot rename a directory (topic deletion)
    # With real_files: each broker's file system (the daemon's ChaosFileSystem, say).
    real_file_system: Callable[[], FileSystem] = RealFileSystem
    now: int = T0
    cut_off: set[int] = field(default_factory=set)
    answers: dict[Token, Body | None] = field(default_factory=dict)
    sent: list[tuple[int, PeerRequest]] = field(default_factory=list)
    proposals: list[IsrProposal] = field(default_factory=list)
    truncations: list[tuple[int, Truncated]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.image = MetadataImage()
        self.network: list[tuple[int, Event]] = []
        self._tokens = count()
        self.fs: dict[int, FileSystem] = {}
        self.cores: dict[int, BrokerCore] = {}
        for b in self.brokers:
            self.fs[b] = self.real_file_system() if self.real_files else SimFileSystem()
            self.start(b)
        records: list[MetadataRecord] = []
        for b in self.brokers:  # a broker's epoch is the offset of its registration
            epoch = len(records)
            records += [RegisterBroker(b, "x", epoch, "h", b, None), UnfenceBroker(b, epoch)]
        records.append(CreateTopic(TOPIC, "a" * 32, dict(self.topic_configs)))
        isr = self.isr or self.brokers
        records.append(CreatePartition(TOPIC, 0, self.brokers, isr, self.brokers[0], 0, 0))
        self.commit(*records)
        self.run()

    def start(self, b: int) -> BrokerCore:
        data_dir = str((self.real_files or Path("/")) / f"broker-{b}")
        self.cores[b] = BrokerCore(BrokerConfig(b, **self.config), data_dir, self.fs[b], self.now)
        self.network.append((b, MetadataChanged(self.image.copy(), caught_up=True)))
        return self.cores[b]

    def replica(self, broker: int) -> Replica:
        replica = self.cores[broker].replica(TOPIC, 0)
        assert replica is not None
        return replica

    def segment(self, broker: int) -> bytes:
        return self.fs[broker].read_bytes(f"{self.replica(broker).log.dir_path}/{0:020d}.log")

    def commit(self, *records: MetadataRecord) -> None:
        """Append to the metadata log; every broker hears of the new image."""
        for record in records:
            self.image.apply(self.image.last_offset + 1, record)
        for b in self.brokers:
            self.network.append((b, MetadataChanged(self.image.copy(), caught_up=True)))

    # ---- clients: `answers[token]` holds the answer once the core gave it ----

    def request(self, broker: int, api_key: ApiKey, version: int, body: Body) -> Token:
        token = ("client", broker, next(self._tokens), api_key, version)
        decoded = wire(api_key, version, "Request", body)
        self.cores[broker].step(ClientRequest(token, api_key, version, decoded), self.now)
        self.drain(broker)
        return token

    def produce(self, broker: int, records: bytes, acks: int, timeout_ms: int = 30_000) -> Token:
        body = produce_body(records, acks, timeout_ms=timeout_ms)
        return self.request(broker, ApiKey.PRODUCE, PRODUCE_V, body)

    def fetch(self, broker: int, offset: int, max_wait_ms: int = 0) -> Token:
        body = fetch_body(offset, max_wait_ms=max_wait_ms)
        return self.request(broker, ApiKey.FETCH, FETCH_V, body)

    def error(self, token: Token) -> ErrorCode:
        body = self.answers[token]
        assert body is not None
        return ErrorCode(partition_of(body)["error_code"])

    # ---- the daemons, the controller and the network ----

    def drain(self, broker: int) -> None:
        core = self.cores[broker]
        while core.has_ready():
            ready = core.ready()
            for sync in ready.syncs:
                core.sync(sync)
            for request in ready.peer_requests:
                self.sent.append((broker, request))
                self._send(broker, request)
            for proposal in ready.proposals:
                self._propose(broker, proposal)
            for token, answer in ready.responses:
                self._answer(broker, token, answer)
            if ready.checkpoints:
                core.write_checkpoints()
            self.truncations += [(broker, truncated) for truncated in ready.truncations]
            core.advance(ready)

    def _send(self, src: int, request: PeerRequest) -> None:
        dst = request.broker_id
        if {src, dst} & self.cut_off:
            return  # lost: the follower's session times out
        if request.api_key == ApiKey.API_VERSIONS:  # the daemon answers it, not the core
            table = dict(SUPPORTED) | {ApiKey.FETCH: (4, self.fetch_max.get(dst, 12))}
            answer = api_versions_body(table, unsupported=False)
            self.network.append((src, PeerAnswered(request.token, answer)))
            return
        token = ("peer", src, request.token, request.api_key, request.api_version)
        body = wire(request.api_key, request.api_version, "Request", request.body)
        self.network.append((dst, ClientRequest(token, request.api_key, request.api_version, body)))

    def _answer(self, src: int, token: Any, answer: Any) -> None:
        kind, to, their_token, api_key, version = token
        body = None if answer is None else wire(api_key, version, "Response", answer)
        if kind == "client":
            self.answers[token] = body
        elif not {src, to} & self.cut_off:
            self.network.append((to, PeerAnswered(their_token, body)))

    def _propose(self, broker: int, proposal: IsrProposal) -> None:
        if not self.controller:
            self.proposals.append(proposal)
            return
        # A real controller, started on the metadata log as it stands, decides.
        controller = Controller(ControllerConfig(), self.image.copy(), self.image.last_offset + 1)
        p, epoch = proposal.proposal, self.image.brokers[broker].epoch
        controller.step(
            AlterPartitionRequest("alter", broker, epoch, p.topic, p.partition, p.leader_epoch,
                                  p.new_isr, p.partition_epoch),
            self.now,
        )  # fmt: skip
        ready = controller.ready()
        controller.advance(ready)
        self.commit(*ready.records)
        [(_, response)] = ready.responses
        assert isinstance(response, AlterPartitionResponse)
        self.network.append((broker, ProposalAnswered(proposal.token, response)))

    def run(self, rounds: int = 100) -> None:
        """Deliver until nothing is in flight (a parked fetch waits for `tick`), or `rounds`."""
        for _ in range(rounds):
            for b in self.cores:
                self.drain(b)
            if not self.network:
                return
            network, self.network = self.network, []
            for dst, event in network:
                self.cores[dst].step(event, self.now)
        assert rounds < 100, "the cluster never went quiet"

    def tick(self, ms: int) -> None:
        self.now += ms
        for core in self.cores.values():
            core.tick(self.now)
        self.run()


def step_produce(core: BrokerCore, now: int, records: bytes, acks: int, version: int = 8) -> Token:
    """A Produce stepped straight into `core`: the test does its Readys itself."""
    token = ("client", object())
    core.step(ClientRequest(token, ApiKey.PRODUCE, version, produce_body(records, acks)), now)
    return token


# ---- produce ----


def test_acks_1_is_answered_at_once_with_base_offsets() -> None:
    cluster = Cluster()
    first = cluster.produce(1, batch(b"a", b"b", b"c"), acks=1)
    second = cluster.produce(1, batch(b"d", b"e"), acks=1)
    assert cluster.replica(2).log_end_offset == 0  # answered before the follower fetched
    assert [cluster.error(first), cluster.error(second)] == [ErrorCode.NONE, ErrorCode.NONE]
    base_offsets = [partition_of(cluster.answers[t] or {})["base_offset"] for t in (first, second)]
    assert base_offsets == [0, 3]
    assert cluster.cores[1].traffic.records_in == 5
    acks_0 = cluster.produce(1, batch(b"f"), acks=0)
    assert acks_0 in cluster.answers and cluster.answers[acks_0] is None  # no answer at all


def test_acks_all_waits_until_the_follower_has_the_batch() -> None:
    cluster = Cluster()
    leader, follower = cluster.replica(1), cluster.replica(2)
    token = cluster.produce(1, batch(b"a", b"b"), acks=-1)
    assert token not in cluster.answers and leader.high_watermark == 0
    cluster.run(rounds=1)  # the follower's parked fetch is answered: the follower appends
    assert follower.log_end_offset == 2
    assert token not in cluster.answers  # the leader does not know yet
    cluster.run()  # the follower's next fetch, from offset 2, moves the HW
    assert cluster.error(token) == ErrorCode.NONE
    assert partition_of(cluster.answers[token] or {})["base_offset"] == 0
    assert leader.high_watermark == 2
    assert cluster.segment(2) == cluster.segment(1)
    cluster.tick(cluster.cores[2].config.replica_fetch_wait_max_ms)  # its next fetch: the HW
    assert follower.high_watermark == 2


def test_a_follower_fetch_counts_for_its_progress_once_however_often_it_is_served(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As Kafka's DelayedFetch: a follower's Fetch moves its progress (and so the ISR and the
    HW) when it arrives; served again after waiting it only reads. And a HW that moves wakes
    consumers' parked fetches, not followers' (they wait for records, and learn the HW with
    them): with three replicas, each produce used to serve every parked fetch three times."""
    from rlog.core.replication import leader as leader_module

    taken = []
    original = leader_module.progress_after_fetch

    def counting(*args: Any, **kwargs: Any) -> Any:
        taken.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(leader_module, "progress_after_fetch", counting)
    from rlog.core.broker import broker as broker_module

    served = []
    fetch_partition = broker_module.fetch_partition

    def counting_serves(*args: Any, **kwargs: Any) -> Any:
        served.append(args[4])  # the replica id
        return fetch_partition(*args, **kwargs)

    monkeypatch.setattr(broker_module, "fetch_partition", counting_serves)
    cluster = Cluster(brokers=(1, 2, 3))
    consumer = cluster.fetch(1, 0, max_wait_ms=60_000)
    for round_ in range(3):
        taken.clear()
        served.clear()
        sent_before = len(cluster.sent)
        token = cluster.produce(1, batch(b"v%d" % round_), acks=-1)
        cluster.run()
        assert cluster.error(token) == ErrorCode.NONE
        fetches = [r for _b, r in cluster.sent[sent_before:] if r.api_key == ApiKey.FETCH]
        # The fetches parked before the produce only read; each follower's next one, which
        # moves the HW, is taken into its progress once.
        assert len(taken) == len(fetches) == 2
        # Served: the two parked with the records, the two new ones as they arrive (they park).
        assert len([replica for replica in served if replica >= 0]) == 4
        assert cluster.replica(1).high_watermark == round_ + 1
    # The consumer's fetch was parked below the HW: the first HW move answered it.
    assert partition_of(cluster.answers[consumer] or {})["high_watermark"] == 1


def test_acks_all_with_an_isr_below_min_insync_replicas_is_refused() -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"min.insync.replicas": "2"})
    assert cluster.error(cluster.produce(1, batch(b"a"), acks=-1)) == ErrorCode.NOT_ENOUGH_REPLICAS
    assert cluster.replica(1).log_end_offset == 0  # refused before the append
    assert cluster.error(cluster.produce(1, batch(b"a"), acks=1)) == ErrorCode.NONE


@pytest.mark.parametrize(
    ("min_insync", "error"),
    [("1", ErrorCode.NONE), ("2", ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)],
)
def test_acks_all_ends_when_the_controller_drops_a_dead_follower(
    min_insync: str, error: ErrorCode
) -> None:
    cluster = Cluster(
        config={"replica_lag_time_max_ms": 2_000}, topic_configs={"min.insync.replicas": min_insync}
    )
    cluster.cut_off.add(2)
    token = cluster.produce(1, batch(b"a"), acks=-1, timeout_ms=10_000)
    cluster.tick(1_900)
    assert token not in cluster.answers
    cluster.tick(200)  # past replica.lag.time.max.ms: ISR (1,) proposed, committed, the HW moves
    assert cluster.image.partition(TOPIC, 0).isr == (1,)  # type: ignore[union-attr]
    assert cluster.error(token) == error
    refused = ErrorCode.NONE if min_insync == "1" else ErrorCode.NOT_ENOUGH_REPLICAS
    assert cluster.error(cluster.produce(1, batch(b"b"), acks=-1)) == refused  # the ISR is (1,)


def test_acks_all_times_out_when_the_follower_never_fetches() -> None:
    cluster = Cluster()
    cluster.cut_off.add(2)
    token = cluster.produce(1, batch(b"a"), acks=-1, timeout_ms=500)
    cluster.tick(499)
    assert token not in cluster.answers
    cluster.tick(1)
    assert cluster.error(token) == ErrorCode.REQUEST_TIMED_OUT


def test_produce_to_the_offsets_topic_is_refused() -> None:
    cluster = Cluster(brokers=(1,))
    cluster.commit(CreateTopic(OFFSETS_TOPIC, "b" * 32, {}))
    cluster.commit(CreatePartition(OFFSETS_TOPIC, 0, (1,), (1,), 1, 0, 0))
    cluster.run()
    body = produce_body(batch(b"x"), 1, OFFSETS_TOPIC)
    token = cluster.request(1, ApiKey.PRODUCE, PRODUCE_V, body)
    assert cluster.error(token) == ErrorCode.INVALID_TOPIC_EXCEPTION
    replica = cluster.cores[1].replica(OFFSETS_TOPIC, 0)
    assert replica is not None and replica.log_end_offset == 0


def test_deleting_the_topic_fails_a_waiting_acks_all_produce(tmp_path: Path) -> None:
    cluster = Cluster(real_files=tmp_path)
    cluster.cut_off.add(2)
    token = cluster.produce(1, batch(b"a"), acks=-1)
    cluster.commit(DeleteTopic(TOPIC))
    cluster.run()
    # Answered at once, not at its timeout, with an error the client retries after a metadata
    # refresh (Kafka says UNKNOWN_TOPIC_OR_PARTITION here).
    retriable = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert cluster.error(token) in retriable
    assert cluster.cores[1].replica(TOPIC, 0) is None


@pytest.mark.parametrize("leader_fetch_max", [12, 11])
def test_a_deposed_leader_fails_waiting_acks_all_and_truncates_to_the_new_leader(
    leader_fetch_max: int,
) -> None:
    cluster = Cluster(brokers=(1, 2, 3), fetch_max=dict.fromkeys((1, 2, 3), leader_fetch_max))
    cluster.produce(1, batch(b"a"), acks=-1)
    cluster.run()
    cluster.cut_off |= {2, 3}
    token = cluster.produce(1, batch(b"lost", b"lost"), acks=-1)  # only broker 1 has it
    cluster.cut_off.clear()
    cluster.commit(ChangePartition(TOPIC, 0, 2, None, 1, 1, "broker 1 died"))
    cluster.run()
    assert cluster.error(token) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (1, Truncated(TOPIC, 0, 1)) in cluster.truncations
    token = cluster.produce(2, batch(b"b"), acks=-1)
    cluster.run()
    assert cluster.error(token) == ErrorCode.NONE
    assert cluster.segment(1) == cluster.segment(2) == cluster.segment(3)
    assert b"lost" not in cluster.segment(1)


# ---- the flush policy: an answer waits for its Sync ----


@pytest.mark.parametrize("acks", [1, -1])
def test_flush_messages_1_answers_only_after_the_sync(acks: int) -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"flush.messages": "1"})
    core, fs = cluster.cores[1], cluster.fs[1]
    token = step_produce(core, cluster.now, batch(b"a"), acks)
    ready = core.ready()
    assert ready.syncs == [Sync(TOPIC, 0, 1)]
    assert token not in dict(ready.responses)  # not before the fsync
    core.sync(ready.syncs[0])
    assert isinstance(fs, SimFileSystem) and fs.unsynced_bytes() == 0
    core.advance(ready)
    answer = dict(core.ready().responses)[token]
    assert isinstance(answer, dict) and partition_of(answer)["error_code"] == ErrorCode.NONE


@pytest.mark.parametrize(
    ("version", "error"),
    [(8, ErrorCode.KAFKA_STORAGE_ERROR), (3, ErrorCode.NOT_LEADER_OR_FOLLOWER)],  # v3: no 56 yet
)
def test_a_failed_sync_answers_kafka_storage_error(version: int, error: ErrorCode) -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"flush.messages": "1"})
    core = cluster.cores[1]
    token = step_produce(core, cluster.now, batch(b"a"), 1, version)
    ready = core.ready()
    assert token not in dict(ready.responses)
    core.advance(ready, failed_syncs=ready.syncs)
    answer = dict(core.ready().responses)[token]
    assert isinstance(answer, dict)
    assert (partition_of(answer)["error_code"], partition_of(answer)["base_offset"]) == (error, -1)


def test_a_retry_after_a_failed_sync_still_waits_for_a_sync() -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"flush.messages": "1"})
    core = cluster.cores[1]
    records = batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0)
    step_produce(core, cluster.now, records, -1)
    ready = core.ready()
    core.advance(ready, failed_syncs=ready.syncs)  # answered KAFKA_STORAGE_ERROR: retriable
    core.advance(core.ready())
    retry = step_produce(core, cluster.now, records, -1)  # the producer retries the same batch
    ready = core.ready()
    assert retry not in dict(ready.responses) and ready.syncs  # it is not durable yet


def test_one_sync_covers_every_batch_waiting_for_it() -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"flush.messages": "1"})
    core = cluster.cores[1]
    tokens = {step_produce(core, cluster.now, batch(b"a"), 1) for _ in range(2)}
    ready = core.ready()
    assert ready.syncs == [Sync(TOPIC, 0, 2)]
    core.advance(ready)
    assert {token for token, _ in core.ready().responses} == tokens


@pytest.mark.parametrize(("configs", "kept"), [({"flush.messages": "1"}, 2), ({}, 0)])
def test_a_power_loss_keeps_exactly_what_was_synced(configs: dict[str, str], kept: int) -> None:
    cluster = Cluster(brokers=(1,), topic_configs=configs)
    for value in (b"a", b"b"):
        assert cluster.error(cluster.produce(1, batch(value), acks=1)) == ErrorCode.NONE
    fs = cluster.fs[1]
    assert isinstance(fs, SimFileSystem)
    fs.crash(power_loss=True)
    cluster.start(1)
    cluster.run()
    assert cluster.replica(1).log_end_offset == kept


# ---- consumer fetches ----


def test_a_consumer_fetch_never_returns_past_the_high_watermark() -> None:
    cluster = Cluster()
    cluster.produce(1, batch(b"a", b"b"), acks=1)  # the follower has not fetched it yet
    leader = cluster.replica(1)
    assert (leader.log_end_offset, leader.high_watermark) == (2, 0)
    answer = partition_of(cluster.answers[cluster.fetch(1, 0)] or {})
    assert (answer["error_code"], answer["high_watermark"], bytes(answer["records"])) == (0, 0, b"")
    cluster.run()
    answer = partition_of(cluster.answers[cluster.fetch(1, 0)] or {})
    assert answer["high_watermark"] == 2 and bytes(answer["records"]) == cluster.segment(1)


def test_a_consumer_fetch_long_polls_until_the_high_watermark_passes_records() -> None:
    cluster = Cluster()
    token = cluster.fetch(1, 0, max_wait_ms=1_000)
    cluster.tick(500)
    assert token not in cluster.answers  # parked
    cluster.produce(1, batch(b"a"), acks=1)
    assert token not in cluster.answers  # records, but not below the HW yet
    cluster.run()
    answer = partition_of(cluster.answers[token] or {})
    assert answer["high_watermark"] == 1 and bytes(answer["records"]) == cluster.segment(1)
    assert cluster.cores[1].traffic.records_out == 1


def test_a_consumer_fetch_long_polls_until_max_wait_ms() -> None:
    cluster = Cluster(brokers=(1,))
    token = cluster.fetch(1, 0, max_wait_ms=1_000)
    cluster.tick(999)
    assert token not in cluster.answers
    cluster.tick(1)
    answer = partition_of(cluster.answers[token] or {})
    assert answer["error_code"] == ErrorCode.NONE and bytes(answer["records"]) == b""


def test_a_consumer_fetch_from_a_follower_is_refused_at_once() -> None:
    cluster = Cluster()
    assert cluster.error(cluster.fetch(2, 0, max_wait_ms=1_000)) == ErrorCode.NOT_LEADER_OR_FOLLOWER


# ---- ListOffsets ----


def list_offset(cluster: Cluster, timestamp: int, replica_id: int, broker: int = 1) -> int:
    body = list_offsets_body(timestamp, replica_id)
    token = cluster.request(broker, ApiKey.LIST_OFFSETS, LIST_OFFSETS_V, body)
    assert cluster.error(token) == ErrorCode.NONE
    return int(partition_of(cluster.answers[token] or {})["offset"])


def test_list_offsets_latest_is_the_hw_for_consumers_and_the_leo_for_replicas() -> None:
    cluster = Cluster()
    cluster.produce(1, batch(b"a", b"b", b"c"), acks=-1)
    cluster.run()
    cluster.produce(1, batch(b"d", b"e"), acks=1)  # not fetched yet: HW 3, LEO 5
    assert list_offset(cluster, EARLIEST, -1) == 0
    assert list_offset(cluster, LATEST, -1) == 3  # a consumer: the high watermark
    assert list_offset(cluster, LATEST, 2) == 5  # a replica: the leader's log end
    assert list_offset(cluster, LATEST, -2, broker=2) == 3  # a tool may ask a follower: its LEO


def test_retention_never_deletes_records_above_the_high_watermark() -> None:
    cluster = Cluster(
        topic_configs={"segment.bytes": "100", "retention.bytes": "1"},
        config={"log_retention_check_interval_ms": 1_000, "replica_socket_timeout_ms": 2_000},
    )
    cluster.cut_off.add(2)  # the HW stays at 0; the ISR stays (1, 2)
    tokens = [cluster.produce(1, batch(b"x" * 80), acks=-1, timeout_ms=60_000) for _ in range(4)]
    cluster.tick(1_000)  # a retention check; every batch has a segment of its own
    assert list_offset(cluster, EARLIEST, -1) <= list_offset(cluster, LATEST, -1)
    cluster.cut_off.clear()
    for _ in range(10):  # the follower's session times out, backs off, fetches again
        cluster.tick(500)
    # Each acks=all batch answered NONE must have reached the follower: it fetched from each
    # batch's offset rather than restarting past them at the leader's log start.
    assert {cluster.error(token) for token in tokens} == {ErrorCode.NONE}
    fetches = [r.body for b, r in cluster.sent if b == 2 and r.api_key == ApiKey.FETCH]
    assert {partition_of(f)["fetch_offset"] for f in fetches} >= {0, 1, 2, 3}


# ---- follower sessions ----


@pytest.mark.parametrize("leader_fetch_max", [12, 11])
def test_a_follower_asks_api_versions_then_fetches_with_the_highest_common_version(
    leader_fetch_max: int,
) -> None:
    cluster = Cluster(fetch_max={1: leader_fetch_max})
    token = cluster.produce(1, batch(b"a"), acks=-1)
    cluster.run()
    sent = [request for broker, request in cluster.sent if broker == 2]
    assert (sent[0].api_key, sent[0].api_version) == (ApiKey.API_VERSIONS, 0)
    fetches = [request for request in sent if request.api_key == ApiKey.FETCH]
    assert fetches and {request.api_version for request in fetches} == {leader_fetch_max}
    partition = fetches[0].body["topics"][0]["partitions"][0]
    assert ("last_fetched_epoch" in partition) == (leader_fetch_max >= 12)
    assert cluster.error(token) == ErrorCode.NONE
    assert cluster.segment(2) == cluster.segment(1)


def test_a_lost_peer_answer_backs_off_then_asks_api_versions_again() -> None:
    cluster = Cluster(config={"replica_socket_timeout_ms": 2_000})
    config = cluster.cores[2].config
    cluster.cut_off.add(1)
    cluster.tick(config.replica_fetch_wait_max_ms + config.replica_socket_timeout_ms)
    cluster.cut_off.clear()
    before = len(cluster.sent)
    cluster.tick(config.replica_fetch_backoff_ms - 1)
    assert len(cluster.sent) == before  # backing off
    cluster.tick(1)
    kinds = [request.api_key for _, request in cluster.sent[before:]]
    assert kinds[:2] == [ApiKey.API_VERSIONS, ApiKey.FETCH]


# ---- ISR proposals ----


def test_a_caught_up_follower_joins_the_isr_through_the_controller() -> None:
    cluster = Cluster(isr=(1,), topic_configs={"min.insync.replicas": "2"})
    info = cluster.image.partition(TOPIC, 0)
    assert info is not None and (info.isr, info.partition_epoch) == ((1, 2), 1)
    assert cluster.replica(1).isr == (1, 2)
    token = cluster.produce(1, batch(b"a"), acks=-1)  # min.insync.replicas=2 is now met
    cluster.run()
    assert cluster.error(token) == ErrorCode.NONE


def test_an_unanswered_proposal_is_sent_again_after_the_socket_timeout() -> None:
    cluster = Cluster(isr=(1,), controller=False, config={"replica_socket_timeout_ms": 5_000})
    assert [p.proposal.new_isr for p in cluster.proposals] == [(1, 2)]
    first = cluster.proposals[0]
    cluster.tick(4_999)
    assert len(cluster.proposals) == 1
    cluster.tick(1)  # taken as lost; the replica proposes again after its retry backoff
    cluster.tick(cluster.replica(1).config.alter_partition_retry_backoff_ms)
    assert len(cluster.proposals) == 2
    second = cluster.proposals[1]
    assert second.proposal == first.proposal and second.token != first.token
    # The late answer to the first is ignored; the answer to the second is taken.
    committed = AlterPartitionResponse(ErrorCode.NONE, 1, 0, (1, 2), 1)
    cluster.network.append((1, ProposalAnswered(first.token, committed)))
    cluster.run()
    assert cluster.replica(1).isr == (1,)
    cluster.network.append((1, ProposalAnswered(second.token, committed)))
    cluster.run()
    assert cluster.replica(1).isr == (1, 2)


# ---- metadata ----


def test_a_topic_deleted_and_made_again_in_one_metadata_update_starts_empty(
    tmp_path: Path,
) -> None:
    cluster = Cluster(brokers=(1,), real_files=tmp_path)
    cluster.produce(1, batch(b"old"), acks=1)
    cluster.commit(
        DeleteTopic(TOPIC),
        CreateTopic(TOPIC, "c" * 32, {}),
        CreatePartition(TOPIC, 0, (1,), (1,), 1, 0, 0),
    )
    cluster.run()
    assert cluster.replica(1).log_end_offset == 0
    assert b"old" not in bytes(partition_of(cluster.answers[cluster.fetch(1, 0)] or {})["records"])


# ---- idempotent producers ----


def test_an_idle_idempotent_producer_is_forgotten_on_every_replica_after_its_expiry() -> None:
    """producer.id.expiration.ms, checked every producer.id.expiration.check.interval.ms, on
    the leader and the follower alike (followers keep producer state for the day they lead)."""
    cluster = Cluster(
        config={
            "producer_id_expiration_ms": 60_000,
            "producer_id_expiration_check_interval_ms": 10_000,
        }
    )
    records = batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0, base_timestamp=T0)
    cluster.produce(1, records, acks=-1)
    cluster.tick(1)  # the follower fetches it
    assert all(cluster.replica(b).producers.entry(7) is not None for b in (1, 2))
    cluster.tick(50_000)  # idle 50 s: kept
    assert all(cluster.replica(b).producers.entry(7) is not None for b in (1, 2))
    cluster.tick(20_000)  # idle 70 s, and a check has run since 60 s
    assert all(cluster.replica(b).producers.entry(7) is None for b in (1, 2))
