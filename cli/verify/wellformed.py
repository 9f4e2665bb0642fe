"""Pair each invocation with its completion, and refuse histories that cannot be judged.

The checker trusts what a history says, so the rules it relies on are checked here first: indices
increase; each process alternates an invoke and one completion of the same `f` and request; a
value is sent once in the whole run (a value sent twice would look like a duplicate); reads come
only with an ok poll, offsets only with an ok send; a transaction belongs to one process and is
not both committed and aborted. An invoke left without a completion at the end of the history is
indeterminate, as an ``info`` completion is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rlog.cli.verify.history import F, HistoryError, Op, OpType, Poll, Send, Txn


@dataclass(frozen=True)
class Pair:
    invoke: Op
    completion: Op | None  # None: still in flight when the history ended

    @property
    def type(self) -> OpType:
        return self.completion.type if self.completion is not None else OpType.INFO

    @property
    def op(self) -> Op:
        """The completion if there is one, else the invoke: the op to name in an example."""
        return self.completion if self.completion is not None else self.invoke


def pair_up(history: Sequence[Op]) -> list[Pair]:
    """The history's operations in invocation order, each with its completion."""
    pairs: list[Pair] = []
    in_flight: dict[str, tuple[int, Op]] = {}  # process -> (its place in pairs, its invoke)
    sent: dict[int, int] = {}  # value -> the index of the send that invoked it
    last_index: int | None = None
    for op in history:
        if last_index is not None and op.index <= last_index:
            raise HistoryError(f"op {op.index} comes after op {last_index}: indices must increase")
        last_index = op.index
        if op.type is OpType.INVOKE:
            if op.process in in_flight:
                earlier = in_flight[op.process][1].index
                raise HistoryError(
                    f"op {op.index}: {op.process} invokes again before op {earlier} completed"
                )
            _check_invoke(op, sent)
            in_flight[op.process] = (len(pairs), op)
            pairs.append(Pair(op, None))
            continue
        if op.process not in in_flight:
            raise HistoryError(f"op {op.index}: a completion by {op.process} with no invoke")
        place, invoke = in_flight.pop(op.process)
        _check_completion(invoke, op)
        pairs[place] = Pair(invoke, op)
    _check_transactions(pairs)
    return pairs


def _check_invoke(op: Op, sent: dict[int, int]) -> None:
    if isinstance(op.value, Send):
        if op.value.offset is not None:
            raise HistoryError(f"op {op.index}: an invoked send has no offset yet")
        if op.value.value in sent:
            raise HistoryError(
                f"op {op.index}: value {op.value.value} was already sent by op "
                f"{sent[op.value.value]}; values must be unique in a run"
            )
        sent[op.value.value] = op.index
    if isinstance(op.value, Poll) and op.value.reads:
        raise HistoryError(f"op {op.index}: an invoked poll has read nothing yet")


def _check_completion(invoke: Op, op: Op) -> None:
    if op.f is not invoke.f:
        raise HistoryError(f"op {op.index} completes a {op.f}; op {invoke.index} is a {invoke.f}")
    if isinstance(op.value, Send) and isinstance(invoke.value, Send):
        asked, answered = invoke.value, op.value
        if (asked.partition, asked.value, asked.txn) != (
            answered.partition,
            answered.value,
            answered.txn,
        ):
            raise HistoryError(f"op {op.index} does not complete the send of op {invoke.index}")
        if answered.offset is not None and op.type is not OpType.OK:
            raise HistoryError(f"op {op.index}: only an ok send has an offset")
    elif isinstance(op.value, Poll):
        if op.value.reads and op.type is not OpType.OK:
            raise HistoryError(f"op {op.index}: only an ok poll has reads")
    elif op.f not in (F.END_OFFSETS,) and op.value != invoke.value:
        raise HistoryError(f"op {op.index} does not carry the request of op {invoke.index}")


def _check_transactions(pairs: Sequence[Pair]) -> None:
    owner: dict[int, str] = {}
    committed: set[int] = set()
    aborted: set[int] = set()
    for pair in pairs:
        value = pair.invoke.value
        txn = value.txn if isinstance(value, Send | Txn) else None
        if txn is None:
            continue
        if owner.setdefault(txn, pair.invoke.process) != pair.invoke.process:
            raise HistoryError(
                f"op {pair.invoke.index}: transaction {txn} belongs to {owner[txn]}, "
                f"not {pair.invoke.process}"
            )
        if pair.invoke.f is F.TXN_COMMIT and pair.type is OpType.OK:
            committed.add(txn)
        if pair.invoke.f is F.TXN_ABORT:
            aborted.add(txn)
    both = sorted(committed & aborted)
    if both:
        raise HistoryError(f"transaction {both[0]} was both committed and aborted")
