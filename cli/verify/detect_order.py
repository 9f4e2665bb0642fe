"""Detectors about order: one producer's offsets, one consumer's positions, a group's offsets.

Each takes the `Facts` of a history and returns its findings in history order.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from rlog.cli.verify.facts import Facts
from rlog.cli.verify.history import Commit, OpType, Poll, Seek, Send
from rlog.cli.verify.promises import Guarantee
from rlog.cli.verify.verdict import Anomaly, Finding
from rlog.cli.verify.wellformed import Pair

SHOWN = 5  # skipped offsets named in one example


def nonmonotonic_sends(facts: Facts) -> list[Finding]:
    """nonmonotonic-send: one process's successive ok sends to a partition got an offset at or
    below the one before. A process sends one value at a time, so only a log that lost an
    acknowledged write and reused its offset can do that."""
    findings = []
    last: dict[tuple[str, int], tuple[int, int]] = {}  # (process, partition) -> (offset, op)
    for pair in facts.pairs:
        if pair.completion is None or pair.type is not OpType.OK:
            continue
        send = pair.completion.value
        if not isinstance(send, Send) or send.offset is None:
            continue
        key = (pair.completion.process, send.partition)
        before = last.get(key)
        if before is not None and send.offset <= before[0]:
            findings.append(
                Finding(
                    Anomaly.NONMONOTONIC_SEND,
                    (before[1], pair.completion.index),
                    f"{key[0]}: p{send.partition} offset {before[0]} (op {before[1]}) then "
                    f"offset {send.offset} (op {pair.completion.index})",
                    Guarantee.DURABLE_ACKS,
                    send.partition,
                    send.offset,
                    send.value,
                )
            )
        last[key] = (send.offset, pair.completion.index)
    return findings


@dataclass
class _Consumer:
    """What one consumer process's next read of each partition is compared with."""

    last: dict[int, tuple[int, int]]  # partition -> (offset, op) of its latest read
    generation: int | None = None
    assignment: frozenset[int] | None = None  # None: nothing known (first poll, after an info)


def poll_orders(facts: Facts) -> list[Finding]:
    """nonmonotonic-poll and poll-skip, from one walk over each consumer's reads.

    Successive reads of a partition by one process are compared, within a poll and across its
    polls, unless its positions may have moved on purpose in between: a seek of that partition,
    a change of generation or assignment (a rebalance), or an indeterminate poll (it may have
    consumed records nobody saw). When the generation changed, reads within the poll are not
    compared either, as the rebalance may have happened during it.

    nonmonotonic-poll: a read at an offset at or below the read before it.
    poll-skip: a read past offsets known to hold records (see `Facts.known_between`) after the
    read before it. A read shows them: clean elections are broken; only acknowledgements do:
    durable acks are (a lost acks=1 write leaves such a gap).
    """
    findings: list[Finding] = []
    consumers: dict[str, _Consumer] = defaultdict(lambda: _Consumer({}))
    for pair in facts.pairs:
        consumer = consumers[pair.invoke.process]
        if isinstance(pair.invoke.value, Seek) and pair.type is not OpType.FAIL:
            for partition in pair.invoke.value.positions:
                consumer.last.pop(partition, None)
        if not isinstance(pair.invoke.value, Poll) or pair.type is OpType.FAIL:
            continue
        if pair.completion is None or pair.type is OpType.INFO:
            consumer.last.clear()
            consumer.assignment = None
            continue
        poll = pair.completion.value
        assert isinstance(poll, Poll)
        assignment = frozenset(poll.assignment)
        stable = (consumer.assignment is None and poll.generation is None) or (
            consumer.assignment == assignment and consumer.generation == poll.generation
        )
        if not stable:
            consumer.last.clear()
        consumer.generation, consumer.assignment = poll.generation, assignment
        op = pair.completion.index
        for partition, pairs_read in poll.reads.items():
            for offset, value in pairs_read:
                before = consumer.last.get(partition)
                if before is not None and stable:
                    finding = _compare(facts, pair, partition, before, offset, value)
                    if finding is not None:
                        findings.append(finding)
                consumer.last[partition] = (offset, op)
    return findings


def _compare(
    facts: Facts, pair: Pair, partition: int, before: tuple[int, int], offset: int, value: int
) -> Finding | None:
    assert pair.completion is not None
    process, op = pair.completion.process, pair.completion.index
    last_offset, last_op = before
    ops = (last_op, op) if last_op != op else (op,)
    where = f"(op {last_op})" if last_op != op else "in the same poll"
    if offset <= last_offset:
        return Finding(
            Anomaly.NONMONOTONIC_POLL,
            ops,
            f"{process}: p{partition} read offset {last_offset} {where} then offset {offset} "
            f"(op {op})",
            Guarantee.CLEAN_ELECTION,
            partition,
            offset,
            value,
        )
    skipped, read_shows = facts.known_between(partition, last_offset, offset)
    if not skipped:
        return None
    shown = ", ".join(str(o) for o in skipped[:SHOWN]) + (", ..." if len(skipped) > SHOWN else "")
    return Finding(
        Anomaly.POLL_SKIP,
        ops,
        f"{process}: p{partition} read offset {last_offset} {where} then offset {offset} "
        f"(op {op}), skipping {len(skipped)} offset{'s' if len(skipped) > 1 else ''} known to "
        f"hold records ({shown})" + ("" if read_shows else ", known only from acks"),
        Guarantee.CLEAN_ELECTION if read_shows else Guarantee.DURABLE_ACKS,
        partition,
        offset,
        value,
    )


@dataclass
class _GroupPartition:
    """The sweep's state for one (group, partition); see `commit_regressions`."""

    floor: tuple[int, int] | None = None  # (offset, op): the highest commit surely applied
    open_resets: int = 0
    last_reset_end: int = -1
    # commit invoke index -> the floor when it was invoked (None once a reset may intervene)
    pending: dict[int, tuple[int, int] | None] = field(default_factory=dict)


def commit_regressions(facts: Facts) -> list[Finding]:
    """commit-regression: a group's committed offset for a partition moved back. An ok commit C2
    invoked after an ok commit C1 completed sets a lower offset than C1, with no reset that could
    have taken effect between them (one invoked before C2 completed and not completed before C1
    was invoked; an indeterminate reset may take effect at any time after its invoke)."""
    events: list[tuple[int, str, Pair, int, int]] = []  # (index, kind, pair, partition, offset)
    for pair in facts.pairs:
        commit = pair.invoke.value
        if not isinstance(commit, Commit) or pair.type is OpType.FAIL:
            continue
        if not commit.reset and pair.type is not OpType.OK:
            continue  # only commits known to have applied are compared
        assert pair.completion is not None or commit.reset
        for partition, offset in commit.offsets.items():
            kind = "reset" if commit.reset else "commit"
            events.append((pair.invoke.index, f"{kind}-invoke", pair, partition, offset))
            if pair.type is OpType.OK:
                assert pair.completion is not None
                events.append((pair.completion.index, f"{kind}-end", pair, partition, offset))
    events.sort(key=lambda e: e[0])
    states: dict[tuple[str, int], _GroupPartition] = defaultdict(_GroupPartition)
    findings = []
    for index, kind, pair, partition, offset in events:
        commit = pair.invoke.value
        assert isinstance(commit, Commit)
        state = states[(commit.group, partition)]
        if kind == "reset-invoke":
            state.open_resets += 1
            state.floor = None
            state.pending = dict.fromkeys(state.pending)  # a reset may land before these
        elif kind == "reset-end":
            state.open_resets -= 1
            state.last_reset_end = index
        elif kind == "commit-invoke":
            state.pending[index] = state.floor
        else:
            floor = state.pending.pop(pair.invoke.index)
            if floor is not None and offset < floor[0]:
                findings.append(
                    Finding(
                        Anomaly.COMMIT_REGRESSION,
                        (floor[1], index),
                        f"group {commit.group} p{partition}: op {floor[1]} committed offset "
                        f"{floor[0]}, then op {index} committed offset {offset}",
                        Guarantee.CLEAN_ELECTION,
                        partition,
                        offset,
                    )
                )
            applied_alone = state.open_resets == 0 and pair.invoke.index > state.last_reset_end
            if applied_alone and (state.floor is None or offset > state.floor[0]):
                state.floor = (offset, index)
    return sorted(findings, key=lambda f: f.ops)
