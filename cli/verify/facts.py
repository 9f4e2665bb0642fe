"""What a history shows about the log: each value's write and fate, every read, and every offset.

Built once per check from the paired history; the detectors only read it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from rlog.cli.verify.history import F, Op, OpType, Poll, Send, Txn
from rlog.cli.verify.wellformed import Pair, pair_up


class TxnOutcome(StrEnum):
    COMMITTED = "committed"  # a txn-commit completed ok
    ABORTED = "aborted"  # a txn-abort was invoked, or every txn-commit failed
    UNKNOWN = "unknown"  # a commit was indeterminate, or the transaction never ended


class Fate(StrEnum):
    """What became of a sent value, as far as the history can tell."""

    WRITTEN = "written"  # acknowledged, and its transaction (if any) committed: must be seen
    FAILED = "failed"  # the send failed: it must never be read
    ABORTED = "aborted"  # its transaction aborted: read_committed consumers must never read it
    UNKNOWN = "unknown"  # indeterminate send or transaction: may or may not be seen


@dataclass(frozen=True)
class Write:
    value: int
    partition: int
    offset: int | None  # the broker's acknowledgement, if it gave one
    fate: Fate
    op: int  # the send's completion (its invoke if it never completed)
    process: str
    txn: int | None


@dataclass(frozen=True)
class Read:
    op: int
    process: str
    partition: int
    offset: int
    value: int


@dataclass
class Facts:
    pairs: list[Pair]
    read_committed: bool
    writes: dict[int, Write]  # by value
    reads: list[Read]  # from ok polls, in history order
    txn_outcomes: dict[int, TxnOutcome]
    # partition -> offset -> value -> ops that put it there (an ok send's ack, or a read)
    positions: dict[int, dict[int, dict[int, list[int]]]]
    # partition -> values some ok poll read there
    read_values: dict[int, set[int]]
    # partition -> the highest offset any ok poll read there, and the poll that read it
    highest_read: dict[int, tuple[int, int]]
    # partition -> sorted offsets known to hold a record consumers must see: read by someone
    # (leaving out aborted values when consumers are read_committed), or acknowledged to a
    # WRITTEN send. Offsets no op shows holding a value (transaction markers, records removed
    # by compaction, aborted records under read_committed) are never in either.
    read_evidence: dict[int, list[int]]
    ack_evidence: dict[int, list[int]]

    def known_between(self, partition: int, low: int, high: int) -> tuple[list[int], bool]:
        """Offsets strictly between `low` and `high` known to hold a record, and whether a read
        (not only an acknowledgement) shows one of them."""
        reads = _between(self.read_evidence.get(partition, []), low, high)
        acks = _between(self.ack_evidence.get(partition, []), low, high)
        return sorted(set(reads) | set(acks)), bool(reads)


def build_facts(history: Sequence[Op], read_committed: bool) -> Facts:
    pairs = pair_up(history)
    outcomes = txn_outcomes(pairs)
    writes: dict[int, Write] = {}
    reads: list[Read] = []
    for pair in pairs:
        value = pair.invoke.value
        if isinstance(value, Send):
            done = pair.completion.value if pair.completion is not None else value
            assert isinstance(done, Send)
            writes[value.value] = Write(
                value=value.value,
                partition=value.partition,
                offset=done.offset,
                fate=_fate(pair.type, value.txn, outcomes),
                op=pair.op.index,
                process=pair.invoke.process,
                txn=value.txn,
            )
        elif pair.completion is not None and pair.type is OpType.OK:
            poll = pair.completion.value
            if isinstance(poll, Poll):
                for partition, pairs_read in poll.reads.items():
                    for offset, v in pairs_read:
                        op, process = pair.completion.index, pair.completion.process
                        reads.append(Read(op, process, partition, offset, v))
    reads.sort(key=lambda r: r.op)  # pairs are in invoke order; reads belong to completions

    positions: dict[int, dict[int, dict[int, list[int]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    ack_evidence: dict[int, set[int]] = defaultdict(set)
    for write in sorted(writes.values(), key=lambda w: w.op):
        if write.offset is not None:
            positions[write.partition][write.offset][write.value].append(write.op)
            if write.fate is Fate.WRITTEN:
                ack_evidence[write.partition].add(write.offset)
    read_values: dict[int, set[int]] = defaultdict(set)
    highest_read: dict[int, tuple[int, int]] = {}
    read_evidence: dict[int, set[int]] = defaultdict(set)
    for read in reads:
        positions[read.partition][read.offset][read.value].append(read.op)
        read_values[read.partition].add(read.value)
        if read.offset > highest_read.get(read.partition, (-1, -1))[0]:
            highest_read[read.partition] = (read.offset, read.op)
        writer = writes.get(read.value)
        if not (read_committed and writer is not None and writer.fate is Fate.ABORTED):
            read_evidence[read.partition].add(read.offset)
    return Facts(
        pairs=pairs,
        read_committed=read_committed,
        writes=writes,
        reads=reads,
        txn_outcomes=outcomes,
        positions=positions,
        read_values=read_values,
        highest_read=highest_read,
        read_evidence={p: sorted(offsets) for p, offsets in read_evidence.items()},
        ack_evidence={p: sorted(offsets) for p, offsets in ack_evidence.items()},
    )


def txn_outcomes(pairs: Sequence[Pair]) -> dict[int, TxnOutcome]:
    """Each transaction's outcome: a commit that completed ok wins; an abort, once invoked,
    always ends in an abort (the coordinator aborts what it is not told to commit)."""
    committed: set[int] = set()
    aborted: set[int] = set()
    commit_types: dict[int, list[OpType]] = defaultdict(list)
    seen: set[int] = set()
    for pair in pairs:
        value = pair.invoke.value
        if isinstance(value, Txn):
            seen.add(value.txn)
            if pair.invoke.f is F.TXN_COMMIT:
                commit_types[value.txn].append(pair.type)
                if pair.type is OpType.OK:
                    committed.add(value.txn)
            elif pair.invoke.f is F.TXN_ABORT:
                aborted.add(value.txn)
        elif isinstance(value, Send) and value.txn is not None:
            seen.add(value.txn)
    outcomes: dict[int, TxnOutcome] = {}
    for txn in seen:
        types = commit_types.get(txn, [])
        if txn in committed:
            outcomes[txn] = TxnOutcome.COMMITTED
        elif txn in aborted or (types and all(t is OpType.FAIL for t in types)):
            outcomes[txn] = TxnOutcome.ABORTED
        else:
            outcomes[txn] = TxnOutcome.UNKNOWN
    return outcomes


def _fate(send_type: OpType, txn: int | None, outcomes: dict[int, TxnOutcome]) -> Fate:
    if send_type is OpType.FAIL:
        return Fate.FAILED
    outcome = outcomes[txn] if txn is not None else None
    if outcome is TxnOutcome.ABORTED:
        return Fate.ABORTED
    if send_type is OpType.OK and outcome in (None, TxnOutcome.COMMITTED):
        return Fate.WRITTEN
    return Fate.UNKNOWN


def _between(sorted_offsets: list[int], low: int, high: int) -> list[int]:
    return sorted_offsets[bisect_right(sorted_offsets, low) : bisect_left(sorted_offsets, high)]
