"""The data layer: one :class:`Snapshot` per refresh from the sources the CLI already uses,
and the actions the keys trigger. Everything here blocks; the app calls it from a worker
thread, never from the UI loop.

* processes: rlogd's control socket, op ``status`` (as ``rlog chaos`` reaches it);
* partitions: Metadata and ListOffsets through :mod:`rlog.cli.replicas` (``rlog topic
  describe``'s source: leader, epoch, replicas, ISR, fenced replicas, LSO, HW, each replica's
  LEO);
* groups: :mod:`rlog.cli.tui.groups` (AdminClient);
* transactions: :mod:`rlog.cli.tui.transactions` (``rlog txn list`` and ``describe``'s wire
  requests);
* events: :class:`rlog.daemon.events.EventTail` over the data dir's journals (the
  controller's isr_shrunk, isr_expanded and leader_elected mark the partitions they changed).

The sources are asked in parallel, so a paused broker costs one short timeout, not one per
source; each failure becomes a line in ``Snapshot.errors``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from rlog.cli import replicas
from rlog.cli.chaos import QUICK_OP_EXTRA_S, SLOW_OP_TIMEOUT_S
from rlog.cli.discovery import (
    Settings,
    client_config,
    control_request,
    kafka_error,
    resolve_bootstrap,
    wire_tls,
)
from rlog.cli.terminal import CliError
from rlog.cli.tui.groups import GroupsSource
from rlog.cli.tui.snapshot import (
    BrokerTraffic,
    Event,
    GroupInfo,
    PartitionInfo,
    ProcessInfo,
    Snapshot,
)
from rlog.cli.tui.transactions import Transactions, fetch_transactions
from rlog.daemon.broker.traffic import read_traffic
from rlog.daemon.data_dir import broker_dir
from rlog.daemon.events import EventTail

# A refresh must not hang on a paused broker: ask each with a short timeout.
SOURCE_TIMEOUT_S = 1.0
EVENT_BACKLOG = 200  # journal lines shown at start; the log widget keeps this many too

T = TypeVar("T")


class ActionFailed(Exception):
    """A key's action was refused or failed; the message is one line for the status bar."""


class Actions(Protocol):
    """What the keys do (the app's test hook replaces it)."""

    def process(self, op: str, target: str, *, stay_down: bool = False) -> str: ...

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> str: ...


class Collector:
    """Gathers snapshots for one cluster. Call :meth:`collect` from one thread at a time."""

    def __init__(self, settings: Settings, timeout_s: float = SOURCE_TIMEOUT_S) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._events = EventTail(settings.data_dir)
        self._groups = GroupsSource(settings, timeout_s)
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rlog-tui")
        self._first = True
        # Brokers rlogd said were not running at the last refresh: the partitions source does
        # not ask them (a paused one would cost a timeout at every refresh).
        self._not_running: set[tuple[str, int]] = set()

    def collect(self) -> Snapshot:
        errors: list[str] = []
        procs = self._pool.submit(self.processes)
        parts = self._pool.submit(self.partitions)
        groups = self._pool.submit(self.groups)
        txns = self._pool.submit(self.transactions)
        events = self.events()
        processes = _outcome(procs.result, (), errors)
        partitions = _outcome(parts.result, (), errors)
        group_list, note = _outcome(groups.result, ((), None), errors)
        transactions = _outcome(txns.result, Transactions(), errors)
        return Snapshot(
            traffic=self.traffic(processes),
            taken_at=time.monotonic(),
            processes=processes,
            partitions=partitions,
            groups=group_list,
            groups_note=note,
            events=events,
            transactions=transactions.found,
            transaction_warnings=transactions.warnings,
            transactions_at_ms=transactions.at_ms,
            errors=tuple(dict.fromkeys(errors)),  # the same failure from two sources once
            wall_time=time.time(),
        )

    def traffic(self, processes: tuple[ProcessInfo, ...]) -> tuple[BrokerTraffic, ...]:
        """Each broker's counters from the `traffic.json` it rewrites every second."""
        found = []
        for process in processes:
            if process.role != "broker" or process.id is None:
                continue
            document = read_traffic(broker_dir(self.settings.data_dir, process.id))
            if document is not None:
                found.append(BrokerTraffic.from_file(process.id, document))
        return tuple(found)

    def processes(self) -> tuple[ProcessInfo, ...]:
        status = control_request(self.settings, {"op": "status"}, self.timeout_s * 2)
        if not status.get("ok"):
            raise CliError(f"rlogd status: {status.get('error') or 'refused'}")
        controller = status.get("controller")
        found = [ProcessInfo.from_status(controller, "controller")] if controller else []
        found += [ProcessInfo.from_status(b, "broker") for b in status.get("brokers", [])]
        self._not_running = {
            (str(b.get("host")), int(b.get("port") or 0))
            for b in status.get("brokers", [])
            if b.get("state") in replicas.PROCESS_REASONS
        }
        return tuple(found)

    def partitions(self) -> tuple[PartitionInfo, ...]:
        cluster = replicas.WireCluster(
            resolve_bootstrap(self.settings), self.timeout_s, wire_tls(self.settings)
        )
        cluster.avoid = set(self._not_running)
        try:
            metadata = replicas.fetch_metadata(cluster, None)
            every: list[replicas.Partition] = []
            for topic in metadata["topics"]:
                try:
                    every += replicas.partitions_of(topic)
                except CliError:
                    continue  # a topic being created or deleted: the next refresh shows it
            offsets = replicas.replica_offsets(cluster, every, stable=True)
        finally:
            cluster.close()
        return tuple(
            PartitionInfo(
                topic=p.topic,
                partition=p.partition,
                leader=p.leader,
                leader_epoch=p.leader_epoch,
                replicas=tuple(p.replicas),
                isr=tuple(p.isr),
                high_watermark=offsets.high_watermarks[(p.topic, p.partition)],
                log_end_offsets=tuple(offsets.log_end_offsets[(p.topic, p.partition)].items()),
                last_stable_offset=offsets.last_stable_offsets.get((p.topic, p.partition)),
                offline_replicas=tuple(p.offline_replicas),
            )
            for p in every
        )

    def groups(self) -> tuple[tuple[GroupInfo, ...], str | None]:
        try:
            return self._groups.fetch(resolve_bootstrap(self.settings))
        except KafkaException as error:
            raise CliError(f"consumer groups: {error.args[0] if error.args else error}") from None

    def transactions(self) -> Transactions:
        bootstrap = resolve_bootstrap(self.settings)
        return fetch_transactions(
            bootstrap, self.timeout_s, self._not_running, wire_tls(self.settings)
        )

    def events(self) -> tuple[Event, ...]:
        found = [Event.from_journal(e) for e in self._events.poll()]
        if self._first:
            found = found[-EVENT_BACKLOG:]
            self._first = False
        return tuple(found)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._groups.close()


def _outcome(result: Callable[[], T], default: T, errors: list[str]) -> T:
    """A source's result, or ``default`` with its failure added to ``errors``."""
    try:
        return result()
    except CliError as error:
        errors.append(error.message)
    except Exception as error:  # a source must never take the dashboard down
        errors.append(f"{type(error).__name__}: {error}")
    return default


class ClusterActions:
    """The keys' actions against the real cluster: rlogd's control socket for processes (as
    ``rlog chaos``), an AdminClient for topics (as ``rlog topic create``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def process(self, op: str, target: str, *, stay_down: bool = False) -> str:
        """A process op as ``rlog chaos`` sends it; ``stay_down`` as ``kill --stay-down``."""
        slow = op in ("terminate", "restart")
        wait_s = SLOW_OP_TIMEOUT_S if slow else self.settings.timeout_s + QUICK_OP_EXTRA_S
        request: dict[str, Any] = {"op": op, "target": target}
        if stay_down:
            request["stay_down"] = True
        try:
            reply = control_request(self.settings, request, wait_s)
        except CliError as error:
            raise ActionFailed(f"{op} {target}: {error.message}") from None
        if not reply.get("ok"):
            raise ActionFailed(f"{op} {target}: {reply.get('error') or 'refused by rlogd'}")
        return str(reply.get("message") or f"{op} {target}: done")

    def create_topic(self, name: str, partitions: int, replication_factor: int) -> str:
        try:
            bootstrap = resolve_bootstrap(self.settings)
        except CliError as error:
            raise ActionFailed(f"create topic {name}: {error.message}") from None
        config = {"allow.auto.create.topics": "false"}
        admin = AdminClient(client_config(self.settings, bootstrap, config, role="tui"))
        topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor)
        futures = admin.create_topics([topic], request_timeout=self.settings.timeout_s)
        try:
            futures[name].result(timeout=self.settings.timeout_s + 5)
        except KafkaException as error:
            failure = kafka_error(error, bootstrap=bootstrap, action="create topic", topic=name)
            raise ActionFailed(failure.message) from None
        except TimeoutError:
            raise ActionFailed(f"create topic {name}: no answer in time") from None
        return f"Created topic {name} ({partitions} partitions, RF {replication_factor})."
