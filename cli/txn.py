"""``rlog txn list|describe|producers``: transactions and producer state, as
kafka-transactions.sh ``list``, ``describe`` and ``describe-producers``.

confluent-kafka's AdminClient has no ListTransactions or DescribeTransactions, so these speak
the protocol through rlog's own wire client (:class:`rlog.cli.replicas.WireCluster`), as
Kafka's admin client does:

* ``list``: Metadata for the brokers, then ListTransactions v0 at *every* broker (each answers
  for the transaction log partitions it leads as coordinator), merged and sorted by id. A
  broker that does not answer makes the list incomplete: a warning, not an error, unless none
  answered.
* ``describe``: FindCoordinator v1 with key type 1 (transaction) for each id (at any broker
  that knows, not only the first that answers), then one DescribeTransactions v0 per
  coordinator. Kafka's retriable coordinator errors (loading, not
  available, not the coordinator) are retried until ``--timeout``.
* ``producers``: Metadata for the topic's leaders, then one DescribeProducers v0 per leader (or
  at ``--broker-id``: any replica answers from its own producer state). Partitions whose leader
  moved (NOT_LEADER_OR_FOLLOWER, or no answer) are asked again with new Metadata until
  ``--timeout``.

The columns are kafka-transactions.sh's: ``list`` prints TransactionalId, Coordinator,
ProducerId, TransactionState; ``describe`` CoordinatorId, TransactionalId, ProducerId,
ProducerEpoch, TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs,
TransactionDurationMs, TopicPartitions ("None" where the transaction has no start time, as
Kafka prints it); ``producers`` Partition, then describe-producers' ProducerId, ProducerEpoch,
LatestCoordinatorEpoch, LastSequence, LastTimestamp, CurrentTransactionStartOffset ("None"
when no transaction is open).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer

from rlog.cli import replicas
from rlog.cli.admin import JsonOption
from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    Settings,
    check_reachable,
    resolve_bootstrap,
    settings_of,
    wire_tls,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

app = typer.Typer(
    help="List and describe transactions, and the producers partitions know "
    "(kafka-transactions.sh list / describe / describe-producers).",
    no_args_is_help=True,
)

Body = dict[str, Any]
TRANSACTION_KEY_TYPE = 1  # FindCoordinator's key type for a transactional id (0: a group)
RETRY_BACKOFF_S = 0.2
NONE = "None"  # what kafka-transactions.sh prints for a value that is not known

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)
PRODUCERS_HEADERS = (
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)
# Answers that mean "ask again, perhaps elsewhere": the coordinator is loading its partition of
# __transaction_state, has none elected yet, or moved.
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}


class TxnState(StrEnum):
    """Kafka's transaction states, as ListTransactions filters on and prints them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


# -- pure parts: listings, descriptions, rows --------------------------------------------


@dataclass(frozen=True)
class Listing:
    """One transactional id as a coordinator's ListTransactions reports it."""

    transactional_id: str
    coordinator: int
    producer_id: int
    state: str

    def cells(self) -> tuple[Any, ...]:
        return (self.transactional_id, self.coordinator, self.producer_id, self.state)

    def as_json(self) -> dict[str, Any]:
        return {
            "transactional_id": self.transactional_id,
            "coordinator_id": self.coordinator,
            "producer_id": self.producer_id,
            "state": self.state,
        }


@dataclass(frozen=True)
class Description:
    """One transactional id as its coordinator's DescribeTransactions reports it."""

    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_time_ms: int | None  # None: no transaction started (Kafka's -1)
    partitions: tuple[tuple[str, int], ...]

    def duration_ms(self, now_ms: int) -> int | None:
        return None if self.start_time_ms is None else now_ms - self.start_time_ms

    def cells(self, now_ms: int) -> tuple[Any, ...]:
        duration = self.duration_ms(now_ms)
        return (
            self.coordinator,
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
            self.state,
            self.timeout_ms,
            NONE if self.start_time_ms is None else self.start_time_ms,
            NONE if duration is None else duration,
            ",".join(f"{topic}-{partition}" for topic, partition in self.partitions) or None,
        )

    def as_json(self, now_ms: int) -> dict[str, Any]:
        return {
            "transactional_id": self.transactional_id,
            "coordinator_id": self.coordinator,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "state": self.state,
            "transaction_timeout_ms": self.timeout_ms,
            "transaction_start_time_ms": self.start_time_ms,
            "transaction_duration_ms": self.duration_ms(now_ms),
            "topic_partitions": [{"topic": t, "partition": p} for t, p in self.partitions],
        }


@dataclass(frozen=True)
class ProducerState:
    """One active producer as a partition's DescribeProducers answer reports it."""

    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    txn_start_offset: int | None  # None: no transaction open (Kafka's -1)

    def cells(self) -> tuple[Any, ...]:
        return (
            self.partition,
            self.producer_id,
            self.producer_epoch,
            self.coordinator_epoch,
            self.last_sequence,
            self.last_timestamp,
            NONE if self.txn_start_offset is None else self.txn_start_offset,
        )

    def as_json(self, topic: str) -> dict[str, Any]:
        return {
            "topic": topic,
            "partition": self.partition,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "coordinator_epoch": self.coordinator_epoch,
            "last_sequence": self.last_sequence,
            "last_timestamp": self.last_timestamp,
            "current_transaction_start_offset": self.txn_start_offset,
        }


def producer_states_of(answer: Body) -> list[ProducerState]:
    """The active producers of one DescribeProducers partition answer without an error,
    sorted by producer id."""
    states = [
        ProducerState(
            partition=answer["partition_index"],
            producer_id=entry["producer_id"],
            producer_epoch=entry["producer_epoch"],
            coordinator_epoch=entry["coordinator_epoch"],
            last_sequence=entry["last_sequence"],
            last_timestamp=entry["last_timestamp"],
            txn_start_offset=(
                entry["current_txn_start_offset"]
                if entry["current_txn_start_offset"] >= 0
                else None
            ),
        )
        for entry in answer["active_producers"]
    ]
    return sorted(states, key=lambda state: state.producer_id)


def merge_listings(answers: Iterable[tuple[int, Body]]) -> list[Listing]:
    """ListTransactions answers of several brokers, (broker id, body) each, as one list sorted
    by transactional id. An id two brokers report (its coordinator moved between the two
    requests) is listed once, as the first broker asked reported it."""
    found: dict[str, Listing] = {}
    for broker_id, body in answers:
        for entry in body.get("transaction_states") or []:
            transactional_id = entry["transactional_id"]
            if transactional_id not in found:
                found[transactional_id] = Listing(
                    transactional_id, broker_id, entry["producer_id"], entry["transaction_state"]
                )
    return [found[key] for key in sorted(found)]


def description_of(coordinator: int, entry: Body) -> Description:
    """A DescribeTransactions entry without an error."""
    start = entry["transaction_start_time_ms"]
    partitions = sorted(
        (topic["topic"], partition)
        for topic in entry.get("topics") or []
        for partition in topic["partitions"]
    )
    return Description(
        transactional_id=entry["transactional_id"],
        coordinator=coordinator,
        producer_id=entry["producer_id"],
        producer_epoch=entry["producer_epoch"],
        state=entry["transaction_state"],
        timeout_ms=entry["transaction_timeout_ms"],
        start_time_ms=start if start >= 0 else None,
        partitions=tuple(partitions),
    )


def parse_states(names: Sequence[str]) -> list[str]:
    """``--state`` values in Kafka's spelling (any case accepted), or a usage error."""
    by_lower = {s.value.lower(): s.value for s in TxnState}
    states: list[str] = []
    for name in names:
        value = by_lower.get(name.strip().lower())
        if value is None:
            allowed = ", ".join(s.value for s in TxnState)
            raise CliError(f"--state must be one of {allowed}; got {name!r}", ExitCode.USAGE)
        if value not in states:
            states.append(value)
    return states


def not_found_error(missing: Sequence[str]) -> CliError:
    names = ", ".join(f"'{m}'" for m in missing)
    plural = "s" if len(missing) > 1 else ""
    verb = "do" if len(missing) > 1 else "does"
    return CliError(f"transactional id{plural} {names} {verb} not exist", ExitCode.NOT_FOUND)


# -- talking to the cluster --------------------------------------------------------------


def _wire(settings: Settings) -> replicas.WireCluster:
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap, settings.timeout_s)
    return replicas.WireCluster(bootstrap, settings.timeout_s, wire_tls(settings))


def _until(
    deadline: float, ask: Callable[[], Body | None], retriable: Callable[[Body], bool]
) -> Any:
    """Ask again while the answer is ``retriable`` and the deadline has not passed; the last
    answer (None: the broker did not answer, which asking again would not change)."""
    while True:
        answer = ask()
        if answer is None or not retriable(answer):
            return answer
        if time.monotonic() + RETRY_BACKOFF_S >= deadline:
            return answer
        time.sleep(RETRY_BACKOFF_S)


def list_transactions(
    cluster: replicas.WireCluster, states: Sequence[str], timeout_s: float
) -> tuple[list[Listing], list[str]]:
    """ListTransactions at every broker: the merged listings, and a warning per broker whose
    answer is missing (so the list may be incomplete)."""
    replicas.fetch_metadata(cluster, [])  # no topics: only the brokers
    request = {"state_filters": list(states), "producer_id_filters": []}
    deadline = time.monotonic() + timeout_s
    answers: list[tuple[int, Body]] = []
    warnings: list[str] = []
    for broker_id in sorted(cluster.brokers):
        body = _until(
            deadline,
            lambda b=broker_id: cluster.request_at(b, ApiKey.LIST_TRANSACTIONS, 0, request),
            lambda body: body["error_code"] in RETRIABLE,
        )
        if body is None:
            warnings.append(f"broker {broker_id} did not answer ListTransactions")
            continue
        if body["error_code"] != ErrorCode.NONE:
            reason = replicas.error_name(body["error_code"])
            warnings.append(f"broker {broker_id} answered ListTransactions with {reason}")
            continue
        for unknown in body.get("unknown_state_filters") or []:
            warnings.append(f"broker {broker_id} does not know the state '{unknown}'")
        answers.append((broker_id, body))
    if not answers:
        raise CliError(
            f"list transactions failed: no broker answered ({'; '.join(warnings) or 'none'})",
            ExitCode.FAILURE,
        )
    return merge_listings(answers), warnings


def find_coordinator(cluster: replicas.WireCluster, transactional_id: str, deadline: float) -> int:
    """FindCoordinator v1 (key type 1): the broker id coordinating ``transactional_id``; its
    address is remembered for :meth:`WireCluster.request_at`.

    Any broker can answer. One that is still catching up with the cluster's metadata (just
    restarted) answers COORDINATOR_NOT_AVAILABLE, so the others are asked too, as Kafka's
    clients move on to another node."""
    request = {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE}

    def ask_every_broker() -> Body:
        last: Body | None = None
        for broker_id in sorted(cluster.brokers):
            body = cluster.request_at(broker_id, ApiKey.FIND_COORDINATOR, 1, request)
            if body is not None:
                last = body
                if body["error_code"] not in RETRIABLE:
                    return body
        if last is None:  # no broker Metadata named answers: the bootstrap list, or "unreachable"
            last = cluster.request_any(ApiKey.FIND_COORDINATOR, 1, request)
        return last

    body = _until(deadline, ask_every_broker, lambda body: body["error_code"] in RETRIABLE)
    if body["error_code"] != ErrorCode.NONE:
        reason = body.get("error_message") or replicas.error_name(body["error_code"])
        raise CliError(
            f"find the coordinator of transactional id '{transactional_id}' failed: {reason}",
            ExitCode.TIMEOUT if body["error_code"] in RETRIABLE else ExitCode.FAILURE,
        )
    node_id = int(body["node_id"])
    cluster.brokers.setdefault(node_id, (body["host"], body["port"]))
    return node_id


def describe_transactions(
    cluster: replicas.WireCluster, transactional_ids: Sequence[str], timeout_s: float
) -> tuple[list[Description], list[str]]:
    """DescribeTransactions at each id's coordinator: the descriptions (in the order asked)
    and the ids no coordinator knows."""
    replicas.fetch_metadata(cluster, [])
    deadline = time.monotonic() + timeout_s
    pending = list(dict.fromkeys(transactional_ids))
    found: dict[str, Description] = {}
    missing: list[str] = []
    while pending:
        by_coordinator: dict[int, list[str]] = {}
        for transactional_id in pending:
            node = find_coordinator(cluster, transactional_id, deadline)
            by_coordinator.setdefault(node, []).append(transactional_id)
        retry: list[str] = []
        last_error: dict[str, str] = {}
        for node, ids in sorted(by_coordinator.items()):
            body = cluster.request_at(
                node, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ids}
            )
            if body is None:
                retry += ids
                last_error.update(dict.fromkeys(ids, f"broker {node} did not answer"))
                continue
            for entry in body["transaction_states"]:
                transactional_id = entry["transactional_id"]
                code = entry["error_code"]
                if code == ErrorCode.NONE:
                    found[transactional_id] = description_of(node, entry)
                elif code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    missing.append(transactional_id)
                elif code in RETRIABLE:
                    retry.append(transactional_id)
                    last_error[transactional_id] = replicas.error_name(code)
                else:
                    raise CliError(
                        f"describe transactional id '{transactional_id}' failed: "
                        f"{replicas.error_name(code)}",
                        ExitCode.FAILURE,
                    )
        if retry and time.monotonic() + RETRY_BACKOFF_S >= deadline:
            first = retry[0]
            raise CliError(
                f"describe transactional id '{first}' failed: no answer from its coordinator "
                f"within {timeout_s:g} s ({last_error.get(first, 'no answer')})",
                ExitCode.TIMEOUT,
            )
        if retry:
            time.sleep(RETRY_BACKOFF_S)
        pending = retry
    ordered = [found[t] for t in dict.fromkeys(transactional_ids) if t in found]
    return ordered, [t for t in dict.fromkeys(transactional_ids) if t in missing]


# Where a partition's producers are asked again, with new Metadata: its leader moved.
PRODUCERS_RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE}


def describe_producers(
    cluster: replicas.WireCluster,
    topic: str,
    partitions: Sequence[int] | None,
    broker_id: int | None,
    timeout_s: float,
) -> tuple[list[ProducerState], list[str]]:
    """DescribeProducers for ``partitions`` of ``topic`` (None: all), each asked of its leader
    or of ``broker_id``: the active producers by partition, then producer id, and one error
    line per partition that did not answer."""
    deadline = time.monotonic() + timeout_s
    pending: list[int] | None = None if partitions is None else sorted(set(partitions))
    found: list[ProducerState] = []
    failed: dict[int, str] = {}  # partition -> why its last attempt failed
    while True:
        (metadata,) = replicas.fetch_metadata(cluster, [topic])["topics"]
        known = {p.partition: p for p in replicas.partitions_of(metadata)}
        if pending is None:
            pending = sorted(known)
        unknown = [p for p in pending if p not in known]
        if unknown:
            raise CliError(
                f"unknown partition {topic}-{unknown[0]} ({topic} has {len(known)})",
                ExitCode.NOT_FOUND,
            )
        by_broker: dict[int, list[int]] = {}
        for index in pending:
            target = known[index].leader if broker_id is None else broker_id
            by_broker.setdefault(target, []).append(index)
        retry: list[int] = []
        for target, indexes in sorted(by_broker.items()):
            request = {"topics": [{"name": topic, "partition_indexes": indexes}]}
            body = None
            if target >= 0:
                body = cluster.request_at(target, ApiKey.DESCRIBE_PRODUCERS, 0, request)
            if body is None:
                if target < 0:
                    reason = "no leader"
                elif target in cluster.brokers:
                    reason = f"broker {target} did not answer"
                else:
                    reason = f"no broker {target} in the cluster"
                retry += indexes if broker_id is None else []
                failed.update(dict.fromkeys(indexes, reason))
                continue
            for answer in (p for t in body["topics"] for p in t["partitions"]):
                index, code = answer["partition_index"], answer["error_code"]
                if code == ErrorCode.NONE:
                    found += producer_states_of(answer)
                    failed.pop(index, None)
                    continue
                reason = answer.get("error_message") or replicas.error_name(code)
                failed[index] = f"{reason} (broker {target})"
                if code in PRODUCERS_RETRIABLE and broker_id is None:
                    retry.append(index)
        if not retry or time.monotonic() + RETRY_BACKOFF_S >= deadline:
            found.sort(key=lambda state: (state.partition, state.producer_id))
            errors = [
                f"describe producers of {topic}-{index} failed: {reason}"
                for index, reason in sorted(failed.items())
            ]
            return found, errors
        time.sleep(RETRY_BACKOFF_S)
        pending = sorted(retry)


# -- commands ----------------------------------------------------------------------------


@app.command("list")
def list_command(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "-s",
            metavar="STATE",
            help="Only transactions in this state (repeatable): "
            + ", ".join(s.value for s in TxnState)
            + ".",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """List transactional ids as kafka-transactions.sh list: TransactionalId, Coordinator (the
    broker id of its transaction coordinator), ProducerId, TransactionState.

    Every broker is asked for the transactions it coordinates; a broker that does not answer
    is reported on stderr and the list lacks its transactions."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    states = parse_states(state or [])
    cluster = _wire(settings)
    try:
        listings, warnings = list_transactions(cluster, states, settings.timeout_s)
    finally:
        cluster.close()
    terminal = settings.terminal
    for warning in warnings:
        terminal.warn(f"list transactions: {warning}; the list may be incomplete")
    if json_out:
        terminal.json([listing.as_json() for listing in listings])
    else:
        terminal.table(LIST_HEADERS, [listing.cells() for listing in listings])


@app.command(no_args_is_help=True)
def describe(
    ctx: typer.Context,
    transactional_id: Annotated[
        list[str],
        typer.Argument(help="Transactional ids to describe.", show_default=False),
    ],
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Describe transactional ids as kafka-transactions.sh describe, one row each, asked of
    its transaction coordinator: CoordinatorId, TransactionalId, ProducerId, ProducerEpoch,
    TransactionState, TransactionTimeoutMs, CurrentTransactionStartTimeMs,
    TransactionDurationMs (since that start), TopicPartitions (those in the open transaction).

    An id no coordinator knows is an error (exit 5), after the others are printed."""
    if any(not t for t in transactional_id):
        raise CliError("transactional ids must be non-empty", ExitCode.USAGE)
    settings = settings_of(ctx).override(bootstrap, data_dir)
    cluster = _wire(settings)
    try:
        found, missing = describe_transactions(cluster, transactional_id, settings.timeout_s)
    finally:
        cluster.close()
    _print_descriptions(settings.terminal, found, json_out, int(time.time() * 1000))
    if missing:
        raise not_found_error(missing)


def _print_descriptions(
    terminal: Terminal, found: Sequence[Description], json_out: bool, now_ms: int
) -> None:
    if json_out:
        terminal.json([d.as_json(now_ms) for d in found])
    elif found:
        terminal.table(DESCRIBE_HEADERS, [d.cells(now_ms) for d in found])


@app.command(no_args_is_help=True)
def producers(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="The topic.", show_default=False)],
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            "-p",
            metavar="N",
            min=0,
            help="Only this partition (repeatable); default: every partition.",
            show_default=False,
        ),
    ] = None,
    broker_id: Annotated[
        int | None,
        typer.Option(
            "--broker-id",
            metavar="ID",
            min=0,
            help="Ask this broker's replica instead of the leader (followers answer too).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Describe the active producers of a topic's partitions, as kafka-transactions.sh
    describe-producers, one row per producer: Partition, ProducerId, ProducerEpoch,
    LatestCoordinatorEpoch, LastSequence, LastTimestamp, CurrentTransactionStartOffset (the
    first offset of its open transaction there, "None" when none is open).

    A partition that could not be described is an error (exit 1), after the others are
    printed."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    cluster = _wire(settings)
    try:
        found, errors = describe_producers(
            cluster, topic, partition or None, broker_id, settings.timeout_s
        )
    finally:
        cluster.close()
    terminal = settings.terminal
    if json_out:
        terminal.json([state.as_json(topic) for state in found])
    else:
        terminal.table(PRODUCERS_HEADERS, [state.cells() for state in found])
    if errors:
        raise CliError(errors[0], ExitCode.FAILURE, details=errors[1:])
