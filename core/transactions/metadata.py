"""One transactional id's state, and the transitions between states, as Kafka's coordinator has
them (its TransactionMetadata).

A change is made in two steps. `prepare_*` checks that the change is legal, records the target
state as *pending* (so no other change of this id starts meanwhile) and returns a
`TxnTransition`: what will be written to `__transaction_state`. Once the write is acknowledged,
`complete(transition)` applies it; if the write failed, `abandon()` drops the pending state and
the metadata is exactly what it was. Nothing but `complete` changes what a client can see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlog.core.transactions.records import NO_PRODUCER_ID, TxnLogValue, TxnState

NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1  # Short.MaxValue

TopicPartition = tuple[str, int]

# The states each state may be entered from (Kafka's TransactionState.validPreviousStates).
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

# States whose transactional id may expire (nothing in flight).
EXPIRABLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


class IllegalTransitionError(RuntimeError):
    """A transition the state machine does not allow: a bug in the caller, never a client's."""


def epoch_exhausted(epoch: int) -> bool:
    """Clients never get Short.MaxValue, so the coordinator can always fence one more time."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransition:
    """The state a transactional id moves to once this is written."""

    state: TxnState
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int

    def to_record(self) -> TxnLogValue:
        stored = None if self.state == TxnState.EMPTY else tuple(sorted(self.partitions))
        return TxnLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state,
            partitions=stored,
            last_update_ms=self.last_update_ms,
            start_ms=self.start_ms,
        )


@dataclass(frozen=True, slots=True)
class TxnView:
    """A read-only copy of a transactional id's state, for tools and tests."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    pending_state: TxnState | None
    timeout_ms: int
    partitions: tuple[TopicPartition, ...]
    start_ms: int
    last_update_ms: int
    state_partition: int


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    # The epoch before the last InitProducerId bump (KIP-360 retries); not stored in the log.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None

    @classmethod
    def from_record(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        partitions = set() if value.state == TxnState.EMPTY else set(value.partitions or ())
        return cls(
            transactional_id=transactional_id,
            producer_id=value.producer_id,
            producer_epoch=value.producer_epoch,
            timeout_ms=value.timeout_ms,
            state=value.state,
            partitions=partitions,
            start_ms=value.start_ms,
            last_update_ms=value.last_update_ms,
            previous_producer_id=value.previous_producer_id,
        )

    def view(self, state_partition: int) -> TxnView:
        return TxnView(
            transactional_id=self.transactional_id,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            state=self.state,
            pending_state=self.pending,
            timeout_ms=self.timeout_ms,
            partitions=tuple(sorted(self.partitions)),
            start_ms=self.start_ms,
            last_update_ms=self.last_update_ms,
            state_partition=state_partition,
        )

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    # ---- preparing ---------------------------------------------------------------------------

    def _prepare(
        self,
        state: TxnState,
        now: int,
        *,
        producer_id: int | None = None,
        epoch: int | None = None,
        last_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: frozenset[TopicPartition] | None = None,
        start_ms: int | None = None,
    ) -> TxnTransition:
        if self.pending is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {state.kafka_name} while {self.pending.kafka_name} "
                "is pending"
            )
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}"
            )
        transition = TxnTransition(
            state=state,
            producer_id=self.producer_id if producer_id is None else producer_id,
            # Only InitProducerId (to Empty) moves the previous id along, as in Kafka.
            previous_producer_id=(
                self.producer_id if state == TxnState.EMPTY else self.previous_producer_id
            ),
            producer_epoch=self.producer_epoch if epoch is None else epoch,
            last_producer_epoch=self.last_producer_epoch if last_epoch is None else last_epoch,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            partitions=frozenset(self.partitions) if partitions is None else partitions,
            start_ms=self.start_ms if start_ms is None else start_ms,
            last_update_ms=max(now, self.last_update_ms),
        )
        if transition.producer_id < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: producer id {producer_id}")
        if state != TxnState.DEAD and transition.producer_epoch < 0:
            raise IllegalTransitionError(f"{self.transactional_id}: producer epoch {epoch}")
        self.pending = state
        return transition

    def prepare_epoch_bump(
        self, timeout_ms: int, expected_epoch: int | None, now: int
    ) -> TxnTransition | None:
        """InitProducerId on an idle id: the next epoch. With the producer's own epoch (KIP-360,
        InitProducerId v3+): its current epoch bumps; the epoch before the last bump is a retry
        whose answer was lost and gets the current epoch again; any other epoch is fenced
        (None)."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        if epoch > MAX_EPOCH - 1:
            raise IllegalTransitionError(f"{self.transactional_id}: epochs exhausted")
        return self._prepare(
            TxnState.EMPTY,
            now,
            epoch=epoch,
            last_epoch=last_epoch,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
        )

    def prepare_producer_id_rotation(
        self, producer_id: int, timeout_ms: int, now: int, *, keep_last_epoch: bool
    ) -> TxnTransition:
        """The epoch is exhausted: a new producer id, epoch 0."""
        return self._prepare(
            TxnState.EMPTY,
            now,
            producer_id=producer_id,
            epoch=0,
            last_epoch=self.producer_epoch if keep_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
        )

    def prepare_add_partitions(self, added: frozenset[TopicPartition], now: int) -> TxnTransition:
        starting = self.state in EXPIRABLE  # Empty or Complete*: a new transaction begins
        return self._prepare(
            TxnState.ONGOING,
            now,
            partitions=frozenset(self.partitions | added),
            start_ms=now if starting else self.start_ms,
        )

    def prepare_end(self, committed: bool, now: int) -> TxnTransition:
        """EndTxn of an Ongoing transaction: PrepareCommit or PrepareAbort, same epoch."""
        state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        return self._prepare(state, now)

    def prepare_fenced_abort(self, now: int) -> TxnTransition:
        """Abort the Ongoing transaction under a bumped epoch, fencing its producer (a timeout,
        or InitProducerId of a new instance). Kafka passes through PrepareEpochFence in memory
        only; what it writes, and what this writes, is PrepareAbort at the bumped epoch."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id}: cannot fence epoch {MAX_EPOCH}")
        return self._prepare(
            TxnState.PREPARE_ABORT,
            now,
            epoch=self.producer_epoch + 1,
            last_epoch=NO_PRODUCER_EPOCH,
        )

    def prepare_resumed_fence(self, now: int) -> TxnTransition:
        """A PrepareEpochFence read from the log (Kafka never writes one; another tool might):
        its epoch is already the fenced one, so abort under it."""
        return self._prepare(TxnState.PREPARE_ABORT, now, last_epoch=NO_PRODUCER_EPOCH)

    def prepare_complete(self, now: int) -> TxnTransition:
        """The markers are written: CompleteCommit or CompleteAbort, no partitions left."""
        if self.state not in PREPARED:
            raise IllegalTransitionError(f"{self.transactional_id}: complete {self.state}")
        state = (
            TxnState.COMPLETE_COMMIT
            if self.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        return self._prepare(state, now, partitions=frozenset())

    def prepare_dead(self, now: int) -> TxnTransition:
        """The id expired: a tombstone is written, then the id is forgotten."""
        return self._prepare(TxnState.DEAD, now, partitions=frozenset())

    # ---- completing ----------------------------------------------------------------------------

    def abandon(self) -> None:
        """The write failed: nothing changes."""
        self.pending = None

    def complete(self, transition: TxnTransition) -> None:
        if self.pending != transition.state:
            raise IllegalTransitionError(
                f"{self.transactional_id}: completing {transition.state.kafka_name}, pending "
                f"{self.pending.kafka_name if self.pending else None}"
            )
        self.producer_id = transition.producer_id
        self.previous_producer_id = transition.previous_producer_id
        self.producer_epoch = transition.producer_epoch
        self.last_producer_epoch = transition.last_producer_epoch
        self.timeout_ms = transition.timeout_ms
        self.partitions = set(transition.partitions)
        self.start_ms = transition.start_ms
        self.last_update_ms = transition.last_update_ms
        self.state = transition.state
        self.pending = None
