"""What the brokers say about partitions and their replicas, asked with rlog's own Kafka client.

confluent-kafka does not expose leader epochs or followers' log end offsets, so ``rlog topic
describe`` and ``rlog topic elect-leaders`` speak the protocol themselves through
:class:`rlog.daemon.wire.BlockingKafkaClient`:

* Metadata v8 from any broker that answers: leaders, leader epochs, replicas, ISR, the
  offline replicas (on brokers the controller does not count live: fenced), brokers.
* ListOffsets v4 "latest" at the leader as a consumer (replica id -1): the high watermark;
  "earliest": the log start offset; "latest" with isolation level 1 (read_committed): the last
  stable offset (LSO), below which no transaction is open.
* ListOffsets v4 "latest" with replica id -2 (Kafka's debugging id, answered by followers too)
  at each replica's broker: that replica's log end offset. A replica whose broker is down has
  none.
* ElectLeaders v2 to any broker, which forwards it to the controller.

rlogd knows sooner than the controller that a broker is paused or down (the controller fences a
paused one only when its session expires), so when its control socket answers,
:func:`rlogd_processes` adds its view: :func:`offline_reasons` says why each replica is offline,
and brokers it reports not running are not asked at all (a paused one would cost a timeout).
"""

from __future__ import annotations

import ssl
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlog.cli.discovery import Settings, running_cluster, split_address
from rlog.cli.terminal import CliError, ExitCode
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon import control
from rlog.daemon.wire import BlockingKafkaClient, WireError

Body = dict[str, Any]
CONSUMER = -1
DEBUGGING_REPLICA = -2  # Kafka's ListOffsets id for "any replica, its log end offset"
LATEST = -1
EARLIEST = -2
READ_UNCOMMITTED = 0  # ListOffsets' isolation_level
READ_COMMITTED = 1
NO_LEADER = -1
ELECTION_TYPES = {"preferred": 0, "unclean": 1}


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


@dataclass
class Partition:
    """One partition as Metadata describes it."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    # Replicas on brokers the controller does not count live (fenced or never registered).
    offline_replicas: list[int] = field(default_factory=list)


@dataclass
class WireCluster:
    """Broker connections for one command: the bootstrap list, then what Metadata names."""

    bootstrap: str
    timeout_s: float
    tls: ssl.SSLContext | None = None  # the brokers' listener speaks SSL
    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    _clients: dict[tuple[str, int], BlockingKafkaClient] = field(default_factory=dict)
    # Brokers that failed once: not asked again in this command (a paused one would cost a
    # whole timeout per request).
    _down: set[tuple[str, int]] = field(default_factory=set)
    # Brokers rlogd says are not running (a paused one would cost a timeout): never asked for
    # offsets, and for Metadata only after every other bootstrap broker.
    avoid: set[tuple[str, int]] = field(default_factory=set)

    def _client(self, address: tuple[str, int]) -> BlockingKafkaClient:
        if address not in self._clients:
            self._clients[address] = BlockingKafkaClient(
                *address, timeout_s=self.timeout_s, tls=self.tls
            )
        return self._clients[address]

    def request_any(self, api_key: ApiKey, version: int, body: Body) -> Body:
        """Ask the bootstrap brokers in turn; the first answer, or the "unreachable" error."""
        reasons = []
        addresses = [split_address(text) for text in self.bootstrap.split(",") if text.strip()]
        for address in sorted(addresses, key=lambda a: a in self.avoid):  # stable: order kept
            if address in self._down:
                continue
            try:
                return self._client(address).request(api_key, version, body)
            except WireError as error:
                self._down.add(address)
                reasons.append(str(error))
        raise CliError(
            f"cannot reach any broker at {self.bootstrap} "
            f"({'; '.join(reasons) or 'none answered'})",
            ExitCode.UNREACHABLE,
        )

    def request_at(self, broker_id: int, api_key: ApiKey, version: int, body: Body) -> Body | None:
        """Ask one broker by id; None when it is not in the cluster's Metadata or is down."""
        address = self.brokers.get(broker_id)
        if address is None or address in self._down or address in self.avoid:
            return None
        try:
            return self._client(address).request(api_key, version, body)
        except WireError:
            self._down.add(address)
            return None

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def fetch_metadata(cluster: WireCluster, topics: list[str] | None) -> Body:
    """Metadata v8 for these topics (None: all), never creating one; remembers the brokers."""
    body = cluster.request_any(
        ApiKey.METADATA,
        8,
        {
            "topics": None if topics is None else [{"name": name} for name in topics],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )
    cluster.brokers = {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}
    return body


def partitions_of(topic: Body) -> list[Partition]:
    """A Metadata topic's partitions, or a one-line error when the topic has an error."""
    name = topic["name"]
    code = topic["error_code"]
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise CliError(f"unknown topic '{name}'", ExitCode.NOT_FOUND)
    if code != ErrorCode.NONE:
        raise CliError(f"describe {name} failed: {error_name(code)}", ExitCode.FAILURE)
    return sorted(
        (
            Partition(
                topic=name,
                partition=p["partition_index"],
                leader=p["leader_id"],
                leader_epoch=p["leader_epoch"],
                replicas=list(p["replica_nodes"]),
                isr=list(p["isr_nodes"]),
                offline_replicas=list(p.get("offline_replicas") or []),
            )
            for p in topic["partitions"]
        ),
        key=lambda p: p.partition,
    )


OffsetKey = tuple[str, int]


def list_offsets(
    cluster: WireCluster,
    broker_id: int,
    partitions: Iterable[OffsetKey],
    *,
    timestamp: int,
    replica_id: int,
    isolation_level: int = READ_UNCOMMITTED,
) -> dict[OffsetKey, int | None]:
    """ListOffsets v4 at one broker: {(topic, partition): offset, or None on any error}."""
    keys = list(partitions)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in keys:
        by_topic[topic].append(partition)
    request = {
        "replica_id": replica_id,
        "isolation_level": isolation_level,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                    for p in sorted(ids)
                ],
            }
            for topic, ids in sorted(by_topic.items())
        ],
    }
    found: dict[OffsetKey, int | None] = dict.fromkeys(keys)
    body = cluster.request_at(broker_id, ApiKey.LIST_OFFSETS, 4, request)
    for topic in body["topics"] if body is not None else ():
        for answer in topic["partitions"]:
            ok = answer["error_code"] == ErrorCode.NONE and answer["offset"] >= 0
            found[(topic["name"], answer["partition_index"])] = answer["offset"] if ok else None
    return found


def offsets_by_broker(
    cluster: WireCluster,
    wanted: dict[int, list[OffsetKey]],
    *,
    timestamp: int,
    replica_id: int,
    isolation_level: int = READ_UNCOMMITTED,
) -> dict[tuple[int, str, int], int | None]:
    """One ListOffsets per broker: {(broker, topic, partition): offset or None}."""
    found: dict[tuple[int, str, int], int | None] = {}
    for broker_id, keys in sorted(wanted.items()):
        answers = list_offsets(
            cluster,
            broker_id,
            keys,
            timestamp=timestamp,
            replica_id=replica_id,
            isolation_level=isolation_level,
        )
        for (topic, partition), offset in answers.items():
            found[(broker_id, topic, partition)] = offset
    return found


@dataclass
class ReplicaOffsets:
    """What the brokers' ListOffsets say about a set of partitions."""

    high_watermarks: dict[OffsetKey, int | None]
    log_start_offsets: dict[OffsetKey, int | None]
    log_end_offsets: dict[OffsetKey, dict[int, int | None]]
    # Only when asked for (`stable=True`): the LSO at each leader.
    last_stable_offsets: dict[OffsetKey, int | None] = field(default_factory=dict)


def replica_offsets(
    cluster: WireCluster, partitions: list[Partition], *, stable: bool = False
) -> ReplicaOffsets:
    """HW and log start (and with ``stable`` the LSO) at each leader, every replica's LEO at
    its own broker."""
    at_leader: dict[int, list[OffsetKey]] = defaultdict(list)
    at_replica: dict[int, list[OffsetKey]] = defaultdict(list)
    for p in partitions:
        if p.leader != NO_LEADER:
            at_leader[p.leader].append((p.topic, p.partition))
        for replica in p.replicas:
            at_replica[replica].append((p.topic, p.partition))
    hws = offsets_by_broker(cluster, at_leader, timestamp=LATEST, replica_id=CONSUMER)
    starts = offsets_by_broker(cluster, at_leader, timestamp=EARLIEST, replica_id=CONSUMER)
    leos = offsets_by_broker(cluster, at_replica, timestamp=LATEST, replica_id=DEBUGGING_REPLICA)
    lsos = (
        offsets_by_broker(
            cluster,
            at_leader,
            timestamp=LATEST,
            replica_id=CONSUMER,
            isolation_level=READ_COMMITTED,
        )
        if stable
        else {}
    )
    result = ReplicaOffsets({}, {}, {})
    for p in partitions:
        key = (p.topic, p.partition)
        if stable:
            result.last_stable_offsets[key] = lsos.get((p.leader, *key))
        result.high_watermarks[key] = hws.get((p.leader, *key))
        result.log_start_offsets[key] = starts.get((p.leader, *key))
        result.log_end_offsets[key] = {r: leos.get((r, *key)) for r in p.replicas}
    return result


# -- rlogd's view of the broker processes ---------------------------------------------------

# rlogd's process states in which a broker serves nothing, and the word shown for each.
PROCESS_REASONS = {
    "paused": "paused",
    "starting": "starting",
    "restarting": "restarting",
    "stopping": "down",
    "stopped": "down",
    "failed": "down",
}
FENCED = "fenced"  # the controller does not count the broker live (Metadata's offline_replicas)
STATUS_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class BrokerProcess:
    """One broker process as rlogd's status op describes it."""

    id: int
    address: tuple[str, int]
    state: str


def rlogd_processes(settings: Settings) -> dict[int, BrokerProcess] | None:
    """rlogd's brokers by id, as its control socket says now; None when no rlogd of the data
    dir answers, or when ``--bootstrap`` names none of its brokers (another cluster)."""
    state = running_cluster(settings.data_dir)
    if state is None:
        return None
    if settings.bootstrap:
        try:
            named = {split_address(a) for a in settings.bootstrap.split(",") if a.strip()}
        except CliError:
            return None
        if not named & {(b.host, b.port) for b in state.brokers}:
            return None
    wait_s = min(settings.timeout_s, STATUS_TIMEOUT_S)
    try:
        status = control.request(settings.data_dir, {"op": "status"}, wait_s)
    except (control.ControlUnavailable, OSError):  # quietly: the metadata alone still says a lot
        return None
    if not status.get("ok"):
        return None
    found = {}
    for entry in status.get("brokers") or []:
        try:
            broker = BrokerProcess(
                int(entry["id"]), (str(entry["host"]), int(entry["port"])), str(entry["state"])
            )
        except (KeyError, TypeError, ValueError):
            continue
        found[broker.id] = broker
    return found


def offline_reason(broker: int, fenced: Collection[int], states: Mapping[int, str]) -> str | None:
    """Why a replica's broker is offline, or None: rlogd's word first (it knows a paused or
    dead process at once), else "fenced" when the controller does not count it live."""
    reason = PROCESS_REASONS.get(states.get(broker, ""))
    if reason is None and broker in fenced:
        reason = FENCED
    return reason


def offline_reasons(
    replicas: Iterable[int], fenced: Collection[int], states: Mapping[int, str]
) -> dict[int, str]:
    """{replica: why it is offline} for the offline ones, in replica order."""
    found = {}
    for replica in replicas:
        reason = offline_reason(replica, fenced, states)
        if reason is not None:
            found[replica] = reason
    return found


# -- elections ------------------------------------------------------------------------------


@dataclass
class ElectionResult:
    topic: str
    partition: int
    error_code: int
    message: str | None

    @property
    def ok(self) -> bool:
        return self.error_code in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "error_code": self.error_code,
            "error": None if self.error_code == ErrorCode.NONE else error_name(self.error_code),
            "message": self.message,
        }


def elect_leaders(
    cluster: WireCluster,
    election: str,
    topic_partitions: dict[str, list[int]] | None,
    timeout_ms: int,
) -> list[ElectionResult]:
    """ElectLeaders v2 (None: every partition); one result per partition, sorted."""
    request = {
        "election_type": ELECTION_TYPES[election],
        "topic_partitions": None
        if topic_partitions is None
        else [{"topic": t, "partitions": ps} for t, ps in sorted(topic_partitions.items())],
        "timeout_ms": timeout_ms,
    }
    body = cluster.request_any(ApiKey.ELECT_LEADERS, 2, request)
    if body.get("error_code", 0) != ErrorCode.NONE:
        raise CliError(
            f"leader election failed: {error_name(body['error_code'])}", ExitCode.FAILURE
        )
    results = [
        ElectionResult(t["topic"], p["partition_id"], p["error_code"], p["error_message"])
        for t in body["replica_election_results"]
        for p in t["partition_result"]
    ]
    return sorted(results, key=lambda r: (r.topic, r.partition))
