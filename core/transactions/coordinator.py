"""The transaction coordinator of Kafka's transactional producer, sans-IO.

The broker hands it decoded request bodies with a `Caller` (a token for the answer, the API
version, the client's id and host) and `now` (ms); it returns effects (effects.py):

- `Respond(token, body)`: answer that request;
- `Append(append_id, partition, records)`: write to `__transaction_state-<partition>` with
  acks=all, then call `append_done(append_id, error, now)`;
- `AllocateProducerId(request_id)`: get a producer id from the controller, then call
  `producer_id_allocated(request_id, producer_id or None, now)`;
- `WriteMarkers(...)`: write COMMIT or ABORT markers to a transaction's partitions, then call
  `markers_done(marker_id, now)`;
- `TxnEvent`: a transaction committed, aborted or timed out, or a producer was fenced.

Every change of a transactional id is written to `__transaction_state` first and applied, and
answered, only once the write is acknowledged; a failed write changes nothing. Each id has at
most one change in flight (Kafka's pending state); a request that needs another one meanwhile
gets CONCURRENT_TRANSACTIONS, which clients retry.

Ending a transaction takes three steps, as in Kafka: PrepareCommit or PrepareAbort is written
(then the client has its answer: the outcome is decided), the markers are written to every
partition of the transaction, then CompleteCommit or CompleteAbort is written and the id is
free for the next transaction. A coordinator that takes over a partition and finds a
transaction in a Prepare state finishes it (markers, then Complete).

Ownership follows the leadership of `__transaction_state` partitions: `start_loading`,
`finish_loading` (with the partition's leader epoch, the coordinator epoch the markers carry)
and `unload`. Requests for an id whose partition is not loaded here get NOT_COORDINATOR, or
COORDINATOR_LOAD_IN_PROGRESS while loading. Time moves only through `tick(now)`: transactions
that outlive their timeout are aborted, idle transactional ids expire.

Where this differs from Kafka's TransactionCoordinator on purpose:

- a write that fails leaves the metadata as it was, also for an epoch fence (Kafka keeps the
  bumped epoch in memory and remembers not to bump again; here the next attempt computes the
  same bumped epoch from the unchanged state);
- the Complete write after the markers is retried on the next tick after any error, where Kafka
  retries only COORDINATOR_NOT_AVAILABLE and otherwise waits for the partition to move;
- a PrepareEpochFence state read from the log (Kafka never writes one) is finished as the
  abort it stands for, instead of stopping the id for good.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from rlog.core.groups.coordinator import Caller
from rlog.core.groups.partitioner import group_partition, java_string_hash
from rlog.core.protocol.errors import ErrorCode
from rlog.core.transactions.answers import (
    ABORTABLE_SINCE,
    add_partitions_answer,
    append_error,
    described_error,
    end_answer,
    error_answer,
    for_version,
    init_answer,
    topic_results,
)
from rlog.core.transactions.effects import (
    AllocateProducerId,
    Append,
    Body,
    Effect,
    Record,
    Respond,
    TxnConfig,
    TxnEvent,
    TxnLoadSummary,
    WriteMarkers,
)
from rlog.core.transactions.metadata import (
    EXPIRABLE,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    PREPARED,
    TopicPartition,
    TxnMetadata,
    TxnTransition,
    TxnView,
    epoch_exhausted,
)
from rlog.core.transactions.records import (
    CorruptTxnRecordError,
    TxnLogValue,
    TxnState,
    parse_txn_key,
    parse_txn_value,
    txn_key,
    txn_value,
)

OFFSETS_TOPIC = "__consumer_offsets"
_TOMBSTONE_BATCH_BYTES = 256 * 1024  # keys per Append of expired ids, well under a batch limit

OnWritten = Callable[[ErrorCode, int], list[Effect]]
OnAllocated = Callable[[ErrorCode, int, int], list[Effect]]  # (error, producer id, now)
Abandon = Callable[[], list[Effect]]


def _no_effects() -> list[Effect]:
    return []


def transaction_partition(transactional_id: str, partitions: int) -> int:
    """Kafka's `Utils.abs(transactionalId.hashCode) % n`: abs, with Int.MinValue taken as 0."""
    hashed = java_string_hash(transactional_id)
    return (0 if hashed == -(2**31) else abs(hashed)) % partitions


@dataclass
class _Partition:
    tenure: int  # which load of the partition: a write of an earlier one is stale
    loaded: bool = False
    coordinator_epoch: int = -1
    txn_ids: set[str] = field(default_factory=set)


@dataclass
class _PendingAppend:
    partition: int
    tenure: int
    entries: tuple[tuple[TxnMetadata, TxnTransition], ...]
    on_written: OnWritten  # after the transitions are applied (or dropped, on an error)
    abandon: Abandon  # the partition was unloaded first: answer whoever waits, touch nothing
    keep_pending: bool  # on an error the caller retries this same transition


@dataclass
class _PendingAllocation:
    partition: int | None  # None: an idempotent producer's id, owned by no partition
    tenure: int
    on_allocated: OnAllocated


@dataclass
class _PendingMarkers:
    partition: int
    tenure: int
    meta: TxnMetadata
    completion: TxnTransition
    partitions: int


@dataclass
class _HeldReply:
    """An EndTxn answer held until the transaction is complete (or `deadline`)."""

    respond: Respond
    partition: int
    deadline: int


@dataclass
class _Retry:
    partition: int
    tenure: int
    meta: TxnMetadata
    completion: TxnTransition
    partitions: int


class TxnCoordinator:
    def __init__(self, config: TxnConfig) -> None:
        self.config = config
        self._txns: dict[str, TxnMetadata] = {}
        self._partitions: dict[int, _Partition] = {}
        self._tenures = 0
        self._creating: set[str] = set()  # new ids waiting for a producer id or their write
        self._appends: dict[int, _PendingAppend] = {}
        self._allocations: dict[int, _PendingAllocation] = {}
        self._markers: dict[int, _PendingMarkers] = {}
        self._retries: list[_Retry] = []
        self._held: dict[str, _HeldReply] = {}  # transactional id -> its EndTxn answer
        self._next_id = 0
        self._clock = 0
        self._next_abort_check = 0
        self._next_expiry_check = 0

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _at(self, now: int) -> int:
        self._clock = max(self._clock, now)
        return self._clock

    # ---- ownership -------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return transaction_partition(transactional_id, self.config.state_partitions)

    def owned_partitions(self) -> list[int]:
        return sorted(p for p, state in self._partitions.items() if state.loaded)

    def coordinator_epoch(self, partition: int) -> int | None:
        state = self._partitions.get(partition)
        return state.coordinator_epoch if state is not None and state.loaded else None

    def start_loading(self, partition: int) -> list[Effect]:
        effects = self.unload(partition)
        self._tenures += 1
        self._partitions[partition] = _Partition(self._tenures)
        return effects

    def finish_loading(
        self, partition: int, coordinator_epoch: int, records: Iterable[Record], now: int
    ) -> tuple[TxnLoadSummary, list[Effect]]:
        """Replay the partition's records, oldest first (the last record of an id wins, a
        tombstone removes it); its ids are served from here on, and transactions found
        half-ended are finished."""
        now = self._at(now)
        state = self._partitions.get(partition)
        if state is None or state.loaded:
            raise ValueError(f"partition {partition} is not loading")
        summary = TxnLoadSummary()
        found: dict[str, TxnLogValue] = {}
        for key, value in records:
            try:
                transactional_id = parse_txn_key(key)
                parsed = parse_txn_value(value)
            except CorruptTxnRecordError:
                summary.corrupt_records += 1
                continue
            if self.partition_for(transactional_id) != partition:
                summary.corrupt_records += 1  # written under another partition count
            elif parsed is None or parsed.state == TxnState.DEAD:
                found.pop(transactional_id, None)
            else:
                found[transactional_id] = parsed
        state.loaded = True
        state.coordinator_epoch = coordinator_epoch
        effects: list[Effect] = []
        for transactional_id in sorted(found):
            meta = TxnMetadata.from_record(transactional_id, found[transactional_id])
            self._txns[transactional_id] = meta
            state.txn_ids.add(transactional_id)
            if meta.state in PREPARED:
                summary.resumed += 1
                effects += self._send_markers(meta, now)
            elif meta.state == TxnState.PREPARE_EPOCH_FENCE:
                summary.resumed += 1
                effects += self._write_abort(meta, meta.prepare_resumed_fence(now), _no_reply)
        summary.transactions = len(state.txn_ids)
        return summary, effects

    def unload(self, partition: int) -> list[Effect]:
        """This broker no longer leads the partition: its ids are someone else's now, and the
        requests waiting on them get NOT_COORDINATOR."""
        state = self._partitions.pop(partition, None)
        if state is None:
            return []
        effects: list[Effect] = []
        for append_id, pending in list(self._appends.items()):
            if pending.partition == partition:
                del self._appends[append_id]
                effects += pending.abandon()
        for request_id, allocation in list(self._allocations.items()):
            if allocation.partition == partition:
                del self._allocations[request_id]
                effects += allocation.on_allocated(ErrorCode.NOT_COORDINATOR, -1, self._clock)
        for marker_id, markers in list(self._markers.items()):
            if markers.partition == partition:
                del self._markers[marker_id]
        self._retries = [retry for retry in self._retries if retry.partition != partition]
        for transactional_id, held in list(self._held.items()):
            if held.partition == partition:  # decided already: the answer stands
                effects += self._release(transactional_id)
        for transactional_id in state.txn_ids:
            self._txns.pop(transactional_id, None)
        return effects

    def _ownership_error(self, transactional_id: str) -> ErrorCode:
        state = self._partitions.get(self.partition_for(transactional_id))
        if state is None:
            return ErrorCode.NOT_COORDINATOR
        if not state.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def _current(self, partition: int, tenure: int) -> _Partition | None:
        state = self._partitions.get(partition)
        return state if state is not None and state.loaded and state.tenure == tenure else None

    # ---- writes ----------------------------------------------------------------------------

    def _write(
        self,
        entries: list[tuple[TxnMetadata, TxnTransition]],
        on_written: OnWritten,
        *,
        abandon: Abandon = _no_effects,
        keep_pending: bool = False,
    ) -> Append:
        partition = self.partition_for(entries[0][0].transactional_id)
        append_id = self._new_id()
        self._appends[append_id] = _PendingAppend(
            partition,
            self._partitions[partition].tenure,
            tuple(entries),
            on_written,
            abandon,
            keep_pending,
        )
        records: list[Record] = []
        for meta, transition in entries:
            value = None if transition.state == TxnState.DEAD else txn_value(transition.to_record())
            records.append((txn_key(meta.transactional_id), value))
        return Append(append_id, partition, tuple(records))

    def append_done(self, append_id: int, error: ErrorCode, now: int) -> list[Effect]:
        now = self._at(now)
        pending = self._appends.pop(append_id, None)
        if pending is None:
            return []  # unknown, or of a partition unloaded since: its requests were answered
        state = self._current(pending.partition, pending.tenure)
        if state is None:
            return pending.abandon()
        failure = append_error(error)
        for meta, transition in pending.entries:
            if failure == ErrorCode.NONE:
                meta.complete(transition)
                if transition.state == TxnState.DEAD:
                    self._txns.pop(meta.transactional_id, None)
                    state.txn_ids.discard(meta.transactional_id)
                else:
                    self._txns[meta.transactional_id] = meta
                    state.txn_ids.add(meta.transactional_id)
            elif not pending.keep_pending:
                meta.abandon()
        return pending.on_written(failure, now)

    def _allocate(self, partition: int | None, on_allocated: OnAllocated) -> AllocateProducerId:
        request_id = self._new_id()
        tenure = -1 if partition is None else self._partitions[partition].tenure
        self._allocations[request_id] = _PendingAllocation(partition, tenure, on_allocated)
        return AllocateProducerId(request_id)

    def producer_id_allocated(
        self, request_id: int, producer_id: int | None, now: int
    ) -> list[Effect]:
        now = self._at(now)
        allocation = self._allocations.pop(request_id, None)
        if allocation is None:
            return []
        if (
            allocation.partition is not None
            and self._current(allocation.partition, allocation.tenure) is None
        ):
            return allocation.on_allocated(ErrorCode.NOT_COORDINATOR, -1, now)
        if producer_id is None or producer_id < 0:
            # Kafka's answer while the broker waits for a block of ids: retriable.
            return allocation.on_allocated(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, now)
        return allocation.on_allocated(ErrorCode.NONE, producer_id, now)

    # ---- InitProducerId ------------------------------------------------------------------------

    def init_producer_id(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        now = self._at(now)
        transactional_id: str | None = body.get("transactional_id")
        timeout_ms: int = body.get("transaction_timeout_ms", 0)

        def answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Respond:
            error = for_version(error, "InitProducerId", caller.version)
            return Respond(caller.token, init_answer(error, producer_id, epoch))

        if transactional_id is None:
            # An idempotent producer: a fresh id at epoch 0, nothing stored.
            def idempotent(error: ErrorCode, producer_id: int, now: int) -> list[Effect]:
                return [answer(error, producer_id, 0)]

            return [self._allocate(None, idempotent)]
        if not transactional_id:
            return [answer(ErrorCode.INVALID_REQUEST)]
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return [answer(ErrorCode.INVALID_TRANSACTION_TIMEOUT)]
        expected: tuple[int, int] | None = None
        given = (body.get("producer_id", -1), body.get("producer_epoch", NO_PRODUCER_EPOCH))
        if given != (-1, NO_PRODUCER_EPOCH):
            if -1 in given:
                return [answer(ErrorCode.INVALID_REQUEST)]
            expected = given
        error = self._ownership_error(transactional_id)
        if error != ErrorCode.NONE:
            return [answer(error)]
        if transactional_id in self._creating:
            return [answer(ErrorCode.CONCURRENT_TRANSACTIONS)]
        meta = self._txns.get(transactional_id)
        if meta is None:
            return self._init_new_id(transactional_id, timeout_ms, expected, answer)
        if meta.pending is not None:
            return [answer(ErrorCode.CONCURRENT_TRANSACTIONS)]
        if expected is not None and not _known_producer(meta, *expected):
            return [answer(ErrorCode.PRODUCER_FENCED)]
        if meta.state == TxnState.ONGOING:
            return self._fence_ongoing(meta, now, answer)
        if meta.state not in EXPIRABLE:
            return [answer(ErrorCode.CONCURRENT_TRANSACTIONS)]  # ending, or being removed
        old = (meta.producer_id, meta.producer_epoch)
        fenced_other = expected is None and meta.producer_epoch >= 0

        def bumped(transition: TxnTransition) -> OnWritten:
            def written(error: ErrorCode, now: int) -> list[Effect]:
                if error != ErrorCode.NONE:
                    return [answer(error)]
                effects: list[Effect] = [
                    answer(ErrorCode.NONE, transition.producer_id, transition.producer_epoch)
                ]
                if fenced_other:
                    new = (transition.producer_id, transition.producer_epoch)
                    effects.append(_fenced_event(transactional_id, old, new, ongoing=False))
                return effects

            return written

        def abandon() -> list[Effect]:
            return [answer(ErrorCode.NOT_COORDINATOR)]

        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            meta.pending = TxnState.EMPTY  # held while the controller finds a new id

            def rotate(error: ErrorCode, producer_id: int, now: int) -> list[Effect]:
                meta.abandon()
                if error != ErrorCode.NONE:
                    return [answer(error)]
                transition = meta.prepare_producer_id_rotation(
                    producer_id, timeout_ms, now, keep_last_epoch=expected is not None
                )
                return [self._write([(meta, transition)], bumped(transition), abandon=abandon)]

            return [self._allocate(self.partition_for(transactional_id), rotate)]
        transition = meta.prepare_epoch_bump(
            timeout_ms, None if expected is None else expected[1], now
        )
        if transition is None:
            return [answer(ErrorCode.PRODUCER_FENCED)]
        return [self._write([(meta, transition)], bumped(transition), abandon=abandon)]

    def _init_new_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        answer: Callable[..., Respond],
    ) -> list[Effect]:
        """A transactional id seen for the first time: a producer id, then epoch 0 written."""
        self._creating.add(transactional_id)

        def abandon() -> list[Effect]:
            self._creating.discard(transactional_id)
            return [answer(ErrorCode.NOT_COORDINATOR)]

        def allocated(error: ErrorCode, producer_id: int, now: int) -> list[Effect]:
            if error != ErrorCode.NONE:
                self._creating.discard(transactional_id)
                return [answer(error)]
            meta = TxnMetadata(
                transactional_id,
                producer_id,
                NO_PRODUCER_EPOCH,
                timeout_ms,
                TxnState.EMPTY,
                last_update_ms=now,
            )
            # A new id takes any producer id and epoch the client brings (it may be recovering
            # after its id expired), as Kafka's coordinator does.
            transition = meta.prepare_epoch_bump(
                timeout_ms, None if expected is None else expected[1], now
            )
            assert transition is not None

            def written(error: ErrorCode, now: int) -> list[Effect]:
                self._creating.discard(transactional_id)
                if error != ErrorCode.NONE:
                    return [answer(error)]
                return [answer(ErrorCode.NONE, transition.producer_id, transition.producer_epoch)]

            return [self._write([(meta, transition)], written, abandon=abandon)]

        return [self._allocate(self.partition_for(transactional_id), allocated)]

    def _fence_ongoing(
        self, meta: TxnMetadata, now: int, answer: Callable[..., Respond]
    ) -> list[Effect]:
        """InitProducerId of a new instance while a transaction is open: abort it under a
        bumped epoch (fencing the old instance) and tell the new one to retry; that retry
        bumps the epoch once more (Kafka never hands out the fencing epoch)."""
        old = (meta.producer_id, meta.producer_epoch)
        transition = meta.prepare_fenced_abort(now)

        def prepared(error: ErrorCode, now: int) -> list[Effect]:
            if error != ErrorCode.NONE:
                return [answer(error)]
            new = (transition.producer_id, transition.producer_epoch)
            event = _fenced_event(meta.transactional_id, old, new, ongoing=True)
            return [answer(ErrorCode.CONCURRENT_TRANSACTIONS), event]

        def abandon() -> list[Effect]:
            return [answer(ErrorCode.NOT_COORDINATOR)]

        return self._write_abort(meta, transition, prepared, abandon)

    def _write_abort(
        self,
        meta: TxnMetadata,
        transition: TxnTransition,
        prepared: OnWritten,
        abandon: Abandon = _no_effects,
    ) -> list[Effect]:
        """Write a PrepareAbort decided by the coordinator; once stored, send the markers."""

        def written(error: ErrorCode, now: int) -> list[Effect]:
            effects = prepared(error, now)
            if error == ErrorCode.NONE:
                effects += self._send_markers(meta, now)
            return effects

        return [self._write([(meta, transition)], written, abandon=abandon)]

    # ---- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------------

    def add_partitions_to_txn(
        self,
        caller: Caller,
        body: Body,
        now: int,
        *,
        partition_exists: Callable[[str, int], bool] | None = None,
    ) -> list[Effect]:
        """v0-3 (a producer's one transaction) and v4+ (a broker's batch, each transaction to
        add to or, with verify_only, to check). `partition_exists`, if given, refuses a
        transaction naming an unknown partition, as Kafka's request handler does: that
        partition gets UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED."""
        now = self._at(now)
        version = caller.version
        if version < 4:
            transactions: list[Body] = [
                {
                    "transactional_id": body.get("v3_and_below_transactional_id"),
                    "producer_id": body.get("v3_and_below_producer_id", -1),
                    "producer_epoch": body.get("v3_and_below_producer_epoch", -1),
                    "verify_only": False,
                    "topics": body.get("v3_and_below_topics") or [],
                }
            ]
        else:
            transactions = list(body.get("transactions") or [])
        results: list[tuple[str, list[Body]] | None] = [None] * len(transactions)
        waiting = [len(transactions)]

        def finished(index: int, transactional_id: str, topics: list[Body]) -> list[Effect]:
            results[index] = (transactional_id, topics)
            waiting[0] -= 1
            if waiting[0]:
                return []
            done = [result for result in results if result is not None]
            return [Respond(caller.token, add_partitions_answer(version, done))]

        if not transactions:
            return [Respond(caller.token, add_partitions_answer(version, []))]
        effects: list[Effect] = []
        for index, txn in enumerate(transactions):
            transactional_id: str = txn.get("transactional_id") or ""
            requested = _requested(txn.get("topics") or [])
            wanted = frozenset((t, p) for t, parts in requested for p in parts)

            def reply(
                error_for: Callable[[str, int], ErrorCode],
                index: int = index,
                transactional_id: str = transactional_id,
                requested: list[tuple[str, list[int]]] = requested,
            ) -> list[Effect]:
                return finished(index, transactional_id, topic_results(requested, error_for))

            missing = (
                {tp for tp in wanted if not partition_exists(*tp)} if partition_exists else set()
            )
            if missing:

                def refused(
                    topic: str, index: int, missing: set[TopicPartition] = missing
                ) -> ErrorCode:
                    if (topic, index) in missing:
                        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    return ErrorCode.OPERATION_NOT_ATTEMPTED

                effects += reply(refused)
            elif txn.get("verify_only"):
                effects += reply(self._verify(txn, transactional_id, version))
            else:

                def added(
                    error: ErrorCode, reply: Callable[..., list[Effect]] = reply
                ) -> list[Effect]:
                    error = for_version(error, "AddPartitionsToTxn", version)
                    return reply(lambda topic, index: error)

                effects += self._add(
                    transactional_id,
                    txn.get("producer_id", -1),
                    txn.get("producer_epoch", -1),
                    wanted,
                    now,
                    added,
                )
        return effects

    def _verify(
        self, txn: Body, transactional_id: str, version: int
    ) -> Callable[[str, int], ErrorCode]:
        """KIP-890: is each partition in this producer's open transaction? Nothing written."""

        def all_(error: ErrorCode) -> Callable[[str, int], ErrorCode]:
            return lambda topic, index: error

        if not transactional_id:
            return all_(ErrorCode.INVALID_REQUEST)
        error = self._ownership_error(transactional_id)
        if error != ErrorCode.NONE:
            return all_(error)
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != txn.get("producer_id", -1):
            return all_(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != txn.get("producer_epoch", -1):
            return all_(ErrorCode.PRODUCER_FENCED)
        if meta.state in PREPARED:
            return all_(ErrorCode.CONCURRENT_TRANSACTIONS)
        absent = (
            ErrorCode.TRANSACTION_ABORTABLE
            if version >= ABORTABLE_SINCE
            else ErrorCode.INVALID_TXN_STATE
        )
        partitions = frozenset(meta.partitions)
        return lambda topic, index: ErrorCode.NONE if (topic, index) in partitions else absent

    def add_offsets_to_txn(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """The group's `__consumer_offsets` partition joins the transaction, so the markers
        reach the offsets committed with TxnOffsetCommit."""
        now = self._at(now)
        offsets = (
            OFFSETS_TOPIC,
            group_partition(body.get("group_id") or "", self.config.offsets_partitions),
        )

        def added(error: ErrorCode) -> list[Effect]:
            error = for_version(error, "AddOffsetsToTxn", caller.version)
            return [Respond(caller.token, error_answer(error))]

        return self._add(
            body.get("transactional_id") or "",
            body.get("producer_id", -1),
            body.get("producer_epoch", -1),
            frozenset({offsets}),
            now,
            added,
        )

    def _add(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: frozenset[TopicPartition],
        now: int,
        reply: Callable[[ErrorCode], list[Effect]],
    ) -> list[Effect]:
        if not transactional_id:
            return reply(ErrorCode.INVALID_REQUEST)
        error = self._ownership_error(transactional_id)
        if error != ErrorCode.NONE:
            return reply(error)
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return reply(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != epoch:
            return reply(ErrorCode.PRODUCER_FENCED)
        if meta.pending is not None or meta.state in PREPARED:
            return reply(ErrorCode.CONCURRENT_TRANSACTIONS)
        if meta.state not in EXPIRABLE and meta.state != TxnState.ONGOING:
            return reply(ErrorCode.CONCURRENT_TRANSACTIONS)  # a fence being finished
        if meta.state == TxnState.ONGOING and partitions <= meta.partitions:
            return reply(ErrorCode.NONE)  # already in: nothing to write
        transition = meta.prepare_add_partitions(partitions, now)
        return [
            self._write(
                [(meta, transition)],
                lambda error, now: reply(error),
                abandon=lambda: reply(ErrorCode.NOT_COORDINATOR),
            )
        ]

    # ---- EndTxn ----------------------------------------------------------------------------------

    def end_txn(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """Commit or abort the producer's transaction (transaction version 0: the epoch stays).
        The answer comes once the decision (PrepareCommit/PrepareAbort) is stored; the markers
        and the Complete record follow."""
        now = self._at(now)
        transactional_id: str = body.get("transactional_id") or ""
        producer_id: int = body.get("producer_id", -1)
        epoch: int = body.get("producer_epoch", -1)
        committed = bool(body.get("committed"))

        def answer(error: ErrorCode, producer: int = -1, producer_epoch: int = -1) -> Respond:
            error = for_version(error, "EndTxn", caller.version)
            return Respond(caller.token, end_answer(error, producer, producer_epoch))

        if not transactional_id:
            return [answer(ErrorCode.INVALID_REQUEST)]
        error = self._ownership_error(transactional_id)
        if error != ErrorCode.NONE:
            return [answer(error)]
        meta = self._txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return [answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)]
        if meta.producer_epoch != epoch:
            return [answer(ErrorCode.PRODUCER_FENCED)]
        if meta.pending is not None:
            return [answer(ErrorCode.CONCURRENT_TRANSACTIONS)]
        wanted_complete = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        wanted_prepare = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        if meta.state == wanted_complete:
            # A retry whose first answer was lost: the transaction ended as asked.
            return [answer(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)]
        if meta.state == wanted_prepare:
            return [answer(ErrorCode.CONCURRENT_TRANSACTIONS)]
        if meta.state != TxnState.ONGOING:
            return [answer(ErrorCode.INVALID_TXN_STATE)]  # Empty, or the other decision
        transition = meta.prepare_end(committed, now)

        def decided(error: ErrorCode, now: int) -> list[Effect]:
            if error != ErrorCode.NONE:
                return [answer(error)]
            # The decision is stored: the answer may go now. It waits (briefly) for the markers
            # and Complete, so the producer's next AddPartitionsToTxn finds the id free instead
            # of getting CONCURRENT_TRANSACTIONS and backing off (librdkafka waits 100 ms).
            reply = answer(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
            if self.config.end_txn_hold_ms <= 0:
                return [reply, *self._send_markers(meta, now)]
            partition = self.partition_for(transactional_id)
            deadline = now + self.config.end_txn_hold_ms
            self._held[transactional_id] = _HeldReply(reply, partition, deadline)
            return self._send_markers(meta, now)

        return [
            self._write(
                [(meta, transition)],
                decided,
                abandon=lambda: [answer(ErrorCode.NOT_COORDINATOR)],
            )
        ]

    def _send_markers(self, meta: TxnMetadata, now: int) -> list[Effect]:
        """The decision is stored: write the markers, and then the Complete record."""
        completion = meta.prepare_complete(now)
        partition = self.partition_for(meta.transactional_id)
        state = self._partitions[partition]
        count = len(meta.partitions)
        if not meta.partitions:
            return [self._write_completion(meta, completion, count)]
        marker_id = self._new_id()
        self._markers[marker_id] = _PendingMarkers(partition, state.tenure, meta, completion, count)
        return [
            WriteMarkers(
                marker_id=marker_id,
                transactional_id=meta.transactional_id,
                producer_id=meta.producer_id,
                producer_epoch=meta.producer_epoch,
                coordinator_epoch=state.coordinator_epoch,
                committed=completion.state == TxnState.COMPLETE_COMMIT,
                partitions=tuple(sorted(meta.partitions)),
            )
        ]

    def markers_done(self, marker_id: int, now: int) -> list[Effect]:
        now = self._at(now)
        markers = self._markers.pop(marker_id, None)
        if markers is None or self._current(markers.partition, markers.tenure) is None:
            return []  # of a partition unloaded since: its new coordinator resends them
        return [self._write_completion(markers.meta, markers.completion, markers.partitions)]

    def _write_completion(
        self, meta: TxnMetadata, completion: TxnTransition, partitions: int
    ) -> Append:
        partition = self.partition_for(meta.transactional_id)

        def written(error: ErrorCode, now: int) -> list[Effect]:
            held = self._release(meta.transactional_id)
            if error != ErrorCode.NONE:
                tenure = self._partitions[partition].tenure
                self._retries.append(_Retry(partition, tenure, meta, completion, partitions))
                return held
            committed = completion.state == TxnState.COMPLETE_COMMIT
            outcome = "committed" if committed else "aborted"
            message = (
                f"transaction of {meta.transactional_id} (producer {meta.producer_id}, epoch "
                f"{meta.producer_epoch}) {outcome} on {partitions} partition(s)"
            )
            return [*held, TxnEvent(f"txn_{outcome}", meta.transactional_id, message)]

        return self._write([(meta, completion)], written, keep_pending=True)

    def _release(self, transactional_id: str) -> list[Effect]:
        held = self._held.pop(transactional_id, None)
        return [held.respond] if held is not None else []

    # ---- time ------------------------------------------------------------------------------------

    def tick(self, now: int) -> list[Effect]:
        """Retry Complete records whose write failed; every abort_check_interval_ms abort the
        transactions past their timeout, every remove_expired_interval_ms expire idle ids. Both
        checks run on the first tick (Kafka waits one interval first; nothing is loaded yet
        when a broker starts, so the difference does not show)."""
        now = self._at(now)
        effects: list[Effect] = []
        for transactional_id, held in list(self._held.items()):
            if now >= held.deadline:  # markers are slow (a partition has no leader): answer
                effects += self._release(transactional_id)
        retries, self._retries = self._retries, []
        for retry in retries:
            if (
                self._current(retry.partition, retry.tenure) is not None
                and self._txns.get(retry.meta.transactional_id) is retry.meta
                and retry.meta.pending == retry.completion.state
            ):
                effects.append(
                    self._write_completion(retry.meta, retry.completion, retry.partitions)
                )
        if now >= self._next_abort_check:
            self._next_abort_check = now + self.config.abort_check_interval_ms
            effects += self._abort_timed_out(now)
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + self.config.remove_expired_interval_ms
            effects += self._expire_ids(now)
        return effects

    def _loaded_ids(self) -> list[str]:
        return sorted(
            transactional_id
            for state in self._partitions.values()
            if state.loaded
            for transactional_id in state.txn_ids
        )

    def _abort_timed_out(self, now: int) -> list[Effect]:
        """Kafka aborts an Ongoing transaction older than its timeout under a bumped epoch: the
        producer that let it run is fenced. A stored fence whose abort could not be written at
        load is tried again here."""
        effects: list[Effect] = []
        for transactional_id in self._loaded_ids():
            meta = self._txns[transactional_id]
            if meta.state == TxnState.PREPARE_EPOCH_FENCE and meta.pending is None:
                effects += self._write_abort(meta, meta.prepare_resumed_fence(now), _no_reply)
                continue
            if (
                meta.state != TxnState.ONGOING
                or meta.pending is not None
                or meta.start_ms + meta.timeout_ms >= now
                or meta.producer_epoch >= MAX_EPOCH
            ):
                continue
            old_epoch = meta.producer_epoch
            transition = meta.prepare_fenced_abort(now)

            def prepared(
                error: ErrorCode,
                now: int,
                meta: TxnMetadata = meta,
                old_epoch: int = old_epoch,
                transition: TxnTransition = transition,
            ) -> list[Effect]:
                if error != ErrorCode.NONE:
                    return []  # the next check tries again
                message = (
                    f"transaction of {meta.transactional_id} (producer {meta.producer_id}) ran "
                    f"past its {meta.timeout_ms} ms timeout: aborted, epoch {old_epoch} fenced "
                    f"by {transition.producer_epoch}"
                )
                return [TxnEvent("txn_timed_out", meta.transactional_id, message)]

            effects += self._write_abort(meta, transition, prepared)
        return effects

    def _expire_ids(self, now: int) -> list[Effect]:
        """Ids idle for transactional.id.expiration.ms, with no transaction open, are removed:
        a tombstone each, so compaction forgets them too."""
        horizon = now - self.config.id_expiration_ms
        by_partition: dict[int, list[tuple[TxnMetadata, TxnTransition]]] = {}
        for transactional_id in self._loaded_ids():
            meta = self._txns[transactional_id]
            if meta.pending is None and meta.state in EXPIRABLE and meta.last_update_ms <= horizon:
                entries = by_partition.setdefault(self.partition_for(transactional_id), [])
                entries.append((meta, meta.prepare_dead(now)))
        effects: list[Effect] = []
        for entries in by_partition.values():
            batch: list[tuple[TxnMetadata, TxnTransition]] = []
            size = 0
            for entry in entries:
                batch.append(entry)
                size += len(entry[0].transactional_id.encode()) + 4
                if size >= _TOMBSTONE_BATCH_BYTES:
                    effects.append(self._write(batch, _ignore))
                    batch, size = [], 0
            if batch:
                effects.append(self._write(batch, _ignore))
        return effects

    # ---- DescribeTransactions, ListTransactions ------------------------------------------------

    def describe_transactions(self, caller: Caller, body: Body) -> list[Effect]:
        described = [self._describe(tid) for tid in body.get("transactional_ids") or []]
        return [Respond(caller.token, {"throttle_time_ms": 0, "transaction_states": described})]

    def _describe(self, transactional_id: str) -> Body:
        if not transactional_id:
            return described_error(transactional_id, ErrorCode.INVALID_REQUEST)
        error = self._ownership_error(transactional_id)
        if error != ErrorCode.NONE:
            return described_error(transactional_id, error)
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state == TxnState.DEAD:
            return described_error(transactional_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        topics: dict[str, list[int]] = {}
        for topic, index in sorted(meta.partitions):
            topics.setdefault(topic, []).append(index)
        return {
            "error_code": ErrorCode.NONE,
            "transactional_id": transactional_id,
            "transaction_state": meta.state.kafka_name,
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms,
            "producer_id": meta.producer_id,
            "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": topic, "partitions": ids} for topic, ids in topics.items()],
        }

    def list_transactions(self, caller: Caller, body: Body, now: int) -> list[Effect]:
        """Kafka's filters: states by name (unknown names are reported back), producer ids, and
        (v1) transactions running longer than `duration_filter` ms."""
        now = self._at(now)
        answer: Body = {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "unknown_state_filters": [],
            "transaction_states": [],
        }
        if any(not state.loaded for state in self._partitions.values()):
            answer["error_code"] = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            return [Respond(caller.token, answer)]
        names: list[str] = list(body.get("state_filters") or [])
        states = {TxnState.from_kafka_name(name) for name in names} - {None}
        answer["unknown_state_filters"] = [n for n in names if TxnState.from_kafka_name(n) is None]
        producer_ids = set(body.get("producer_id_filters") or [])
        duration = body.get("duration_filter", -1)
        if duration is None:
            duration = -1
        for transactional_id in self._loaded_ids():
            meta = self._txns[transactional_id]
            if (
                meta.state == TxnState.DEAD
                or (producer_ids and meta.producer_id not in producer_ids)
                or (names and meta.state not in states)
                or (duration >= 0 and now - meta.start_ms <= duration)
            ):
                continue
            answer["transaction_states"].append(
                {
                    "transactional_id": transactional_id,
                    "producer_id": meta.producer_id,
                    "transaction_state": meta.state.kafka_name,
                }
            )
        return [Respond(caller.token, answer)]

    # ---- read models (the CLI and TUI, invariant checks in tests) -------------------------------

    def transaction(self, transactional_id: str) -> TxnView | None:
        meta = self._txns.get(transactional_id)
        if meta is None:
            return None
        return meta.view(self.partition_for(transactional_id))

    def transactions(self) -> list[TxnView]:
        views = []
        for transactional_id in self._loaded_ids():
            meta = self._txns[transactional_id]
            views.append(meta.view(self.partition_for(transactional_id)))
        return views


def _no_reply(error: ErrorCode, now: int) -> list[Effect]:
    return []


def _ignore(error: ErrorCode, now: int) -> list[Effect]:
    return []


def _known_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """KIP-360: may a producer that says it is `producer_id` at `epoch` bump its epoch? It is the
    current producer id, or the previous one after an exhausted epoch made way for a new id
    (a retry whose answer was lost)."""
    return (
        meta.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == meta.producer_id
        or (producer_id == meta.previous_producer_id and epoch_exhausted(epoch))
    )


def _requested(topics: list[Body]) -> list[tuple[str, list[int]]]:
    """The request's partitions by topic, in its order, without repeats."""
    by_topic: dict[str, list[int]] = {}
    for topic in topics:
        indexes = by_topic.setdefault(topic["name"], [])
        for index in topic.get("partitions") or []:
            if index not in indexes:
                indexes.append(index)
    return list(by_topic.items())


def _fenced_event(
    transactional_id: str, old: tuple[int, int], new: tuple[int, int], *, ongoing: bool
) -> TxnEvent:
    """A new instance of `transactional_id` fenced the producer `old` (id, epoch)."""
    message = f"producer {old[0]} epoch {old[1]} of {transactional_id} fenced by a new instance"
    if ongoing:
        message += f": its open transaction is aborted under epoch {new[1]}"
    else:
        message += f", now producer {new[0]} epoch {new[1]}"
    return TxnEvent("producer_fenced", transactional_id, message)
