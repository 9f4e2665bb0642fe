"""What the dashboard shows at one moment: an immutable :class:`Snapshot` of the cluster.

The data layer (:mod:`rlog.cli.tui.sources`) builds one per refresh off the UI thread; the model
(:mod:`rlog.cli.tui.model`) turns snapshots into table rows; tests build them by hand, so the
screen can be checked without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ProcessInfo:
    """One process rlogd supervises (a broker or the controller), as its status op says."""

    name: str  # broker-N or controller: also the target of kill/pause/resume/restart
    role: str  # "broker" or "controller"
    id: int | None  # the broker id; None for the controller
    pid: int | None
    state: str  # rlogd's view: running, starting, paused, restarting, stopped, failed, ...
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    uptime_s: float | None = None
    restarts: int = 0

    @classmethod
    def from_status(cls, entry: dict[str, Any], role: str) -> ProcessInfo:
        """One process object of rlogd's status document (see rlog.daemon.control)."""
        node_id = entry.get("id")
        return cls(
            name=str(entry.get("name") or role),
            role=str(entry.get("role") or role),
            id=int(node_id) if node_id is not None else None,
            pid=int(entry["pid"]) if entry.get("pid") is not None else None,
            state=str(entry.get("state") or "unknown"),
            cpu_percent=_number(entry.get("cpu_percent")),
            rss_bytes=int(entry["rss_bytes"]) if entry.get("rss_bytes") is not None else None,
            uptime_s=_number(entry.get("uptime_s")),
            restarts=int(entry.get("restarts") or 0),
        )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as Metadata and ListOffsets describe it (see rlog.cli.replicas)."""

    topic: str
    partition: int
    leader: int  # -1: no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int | None
    # (replica, its log end offset or None when its broker did not answer), in replica order
    log_end_offsets: tuple[tuple[int, int | None], ...] = ()
    # The last stable offset at the leader (read_committed's end): below the HW while a
    # transaction is open on the partition; None when the leader did not say.
    last_stable_offset: int | None = None
    # Replicas on brokers the controller does not count live (Metadata's offline_replicas).
    offline_replicas: tuple[int, ...] = ()

    def leo(self, broker: int) -> int | None:
        return dict(self.log_end_offsets).get(broker)


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...] = ()  # (topic, partition)


@dataclass(frozen=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int | None  # None: nothing committed


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str
    members: tuple[GroupMember, ...] = ()
    offsets: tuple[CommittedOffset, ...] = ()


@dataclass(frozen=True)
class TransactionInfo:
    """One transactional id: what its coordinator's ListTransactions says (id, coordinator,
    producer id, state) and, when its DescribeTransactions answered, the rest (see
    rlog.cli.txn)."""

    transactional_id: str
    coordinator: int  # the broker id of its transaction coordinator
    producer_id: int
    state: str  # Kafka's: Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, ...
    producer_epoch: int | None = None  # None: not described
    timeout_ms: int | None = None
    start_time_ms: int | None = None  # wall time the current (or last) transaction began
    partitions: tuple[tuple[str, int], ...] = ()  # (topic, partition) in the open transaction


@dataclass(frozen=True)
class Event:
    """One line of the event journal (rlog.daemon.events), with the fields the partitions
    table marks recent changes by: the partition, the brokers an ISR change removed or added,
    the new leader."""

    ts: float
    source: str
    kind: str
    message: str
    topic: str | None = None
    partition: int | None = None
    removed: tuple[int, ...] = ()  # isr_shrunk
    added: tuple[int, ...] = ()  # isr_expanded
    leader: int | None = None  # leader_elected, partition_offline (-1)

    @classmethod
    def from_journal(cls, event: dict[str, Any]) -> Event:
        partition = event.get("partition")
        leader = event.get("leader")
        return cls(
            ts=float(event["ts"]),
            source=str(event.get("source", "-")),
            kind=str(event.get("kind", "-")),
            message=str(event.get("message", "")),
            topic=str(event["topic"]) if isinstance(event.get("topic"), str) else None,
            partition=partition if isinstance(partition, int) else None,
            removed=_ids(event.get("removed")),
            added=_ids(event.get("added")),
            leader=leader if isinstance(leader, int) else None,
        )


def _ids(value: object) -> tuple[int, ...]:
    return tuple(v for v in value if isinstance(v, int)) if isinstance(value, list) else ()


@dataclass(frozen=True)
class BrokerTraffic:
    """A broker's client traffic counters since it started (its `traffic.json`)."""

    broker: int
    pid: int  # a restarted broker starts counting from 0 again
    ts: float  # wall time the broker wrote them
    records_in: int
    records_out: int

    @classmethod
    def from_file(cls, broker: int, document: dict[str, Any]) -> BrokerTraffic:
        return cls(
            broker=broker,
            pid=int(document.get("pid") or 0),
            ts=float(document.get("ts") or 0.0),
            records_in=int(document.get("records_in") or 0),
            records_out=int(document.get("records_out") or 0),
        )


@dataclass(frozen=True)
class Snapshot:
    """Everything one refresh learned. A source that failed leaves its part empty and says why
    in ``errors``; the other parts are still shown."""

    taken_at: float  # time.monotonic() when gathered: rates divide by differences of it
    processes: tuple[ProcessInfo, ...] = ()
    partitions: tuple[PartitionInfo, ...] = ()
    groups: tuple[GroupInfo, ...] = ()
    groups_note: str | None = None  # why there are no groups, when the broker said so
    events: tuple[Event, ...] = ()  # journal lines new since the previous snapshot
    traffic: tuple[BrokerTraffic, ...] = ()  # each running broker's counters
    transactions: tuple[TransactionInfo, ...] = ()
    # Brokers whose transactions are missing (they did not answer): the list may be incomplete.
    transaction_warnings: tuple[str, ...] = ()
    # Wall time (ms since the epoch) the transactions were asked for: ages count up to it.
    transactions_at_ms: int | None = None
    errors: tuple[str, ...] = field(default=())
    # Wall time (time.time()) when gathered: journal events (wall times) are recent up to it.
    # None: the time it is shown.
    wall_time: float | None = None
