"""Detectors about what the log held: lost, unseen, duplicated, conflicting, aborted, unwritten.

Each takes the `Facts` of a history and returns its findings in history order. The guarantee a
finding names is the one whose absence could explain it (see `promises`).
"""

from __future__ import annotations

from rlog.cli.verify.facts import Facts, Fate, Write
from rlog.cli.verify.history import EndOffsets, F, OpType
from rlog.cli.verify.promises import Guarantee
from rlog.cli.verify.verdict import Anomaly, Finding

SHOWN = 4  # positions named in one example


def lost_writes(facts: Facts) -> list[Finding]:
    """lost-write: a WRITTEN value acknowledged at offset o of partition p that no poll ever read
    in p, although some poll read p at offset o or beyond, or the high watermark of p read after
    the send completed (an end-offsets op) was at or below o."""
    ends = _end_offsets(facts)
    findings = []
    for write in _unread_acknowledged(facts):
        loss = _shown_lost(facts, write, ends)
        if loss is None:
            continue
        why, by = loss
        findings.append(
            Finding(
                Anomaly.LOST_WRITE,
                tuple(sorted((write.op, by))),
                f"p{write.partition}@{write.offset} value {write.value}: acknowledged by op "
                f"{write.op}, never read; {why}",
                Guarantee.DURABLE_ACKS,
                write.partition,
                write.offset,
                write.value,
            )
        )
    return findings


def unseen_writes(facts: Facts) -> list[Finding]:
    """unseen: a WRITTEN value no poll ever read in its partition (by the end of the run, so after
    the final drain). Never a violation by itself: a drain that stopped early leaves writes unseen;
    those below what was read, or past the log's end, are lost-writes too."""
    findings = []
    for write in sorted(
        (w for w in facts.writes.values() if w.fate is Fate.WRITTEN), key=lambda w: w.op
    ):
        if write.value in facts.read_values.get(write.partition, ()):
            continue
        at = f"@{write.offset}" if write.offset is not None else " (offset unknown)"
        findings.append(
            Finding(
                Anomaly.UNSEEN,
                (write.op,),
                f"p{write.partition}{at} value {write.value}: acknowledged by op {write.op}, "
                "never read",
                None,
                write.partition,
                write.offset,
                write.value,
            )
        )
    return findings


def duplicates(facts: Facts) -> list[Finding]:
    """duplicate: one value at more than one (partition, offset), counting both acknowledgements
    and reads; an indeterminate send's value counts like any other."""
    where: dict[int, list[tuple[int, int, int]]] = {}  # value -> (partition, offset, first op)
    for partition, offsets in facts.positions.items():
        for offset, values in offsets.items():
            for value, ops in values.items():
                where.setdefault(value, []).append((partition, offset, min(ops)))
    findings = []
    for value, places in where.items():
        if len(places) < 2:
            continue
        places.sort(key=lambda place: place[2])
        shown = ", ".join(f"p{p}@{o} (op {op})" for p, o, op in places[:SHOWN])
        more = f" and {len(places) - SHOWN} more" if len(places) > SHOWN else ""
        findings.append(
            Finding(
                Anomaly.DUPLICATE,
                tuple(sorted(op for _, _, op in places)),
                f"value {value} at {len(places)} offsets: {shown}{more}",
                Guarantee.IDEMPOTENCE,
                places[0][0],
                places[0][1],
                value,
            )
        )
    return sorted(findings, key=lambda f: f.ops)


def inconsistent_offsets(facts: Facts) -> list[Finding]:
    """inconsistent-offsets: one (partition, offset) holding more than one value, by acks and
    reads together. Reads that disagree break clean elections (what consumers read is never
    rewritten); an acknowledgement that disagrees breaks durable acks (an acks=1 write that was
    truncated, its offset then reused, shows up this way)."""
    findings = []
    read_ops = {read.op for read in facts.reads}
    for partition, offsets in facts.positions.items():
        for offset, values in offsets.items():
            if len(values) < 2:
                continue
            read_there = [v for v, ops in values.items() if any(op in read_ops for op in ops)]
            ordered = sorted(values.items(), key=lambda item: min(item[1]))
            shown = ", ".join(
                f"{v} ({'read' if v in read_there else 'acked'} by op {min(ops)})"
                for v, ops in ordered[:SHOWN]
            )
            findings.append(
                Finding(
                    Anomaly.INCONSISTENT_OFFSETS,
                    tuple(sorted(min(ops) for _, ops in ordered)),
                    f"p{partition}@{offset} holds {len(values)} values: {shown}",
                    Guarantee.CLEAN_ELECTION if len(read_there) > 1 else Guarantee.DURABLE_ACKS,
                    partition,
                    offset,
                    ordered[0][0],
                )
            )
    return sorted(findings, key=lambda f: f.ops)


def aborted_reads(facts: Facts) -> list[Finding]:
    """aborted-read (Jepsen's G1a): an ok poll read a value whose write is known not to have
    happened: its send failed (always forbidden), or its transaction aborted (forbidden to
    read_committed consumers; read_uncommitted ones read aborted records by design)."""
    findings = []
    for read in facts.reads:
        write = facts.writes.get(read.value)
        if write is None or write.fate not in (Fate.FAILED, Fate.ABORTED):
            continue
        if write.fate is Fate.FAILED:
            why, breaks = f"whose send failed (op {write.op})", Guarantee.ALWAYS
        else:
            why = f"sent by op {write.op} in transaction {write.txn}, which aborted"
            breaks = Guarantee.READ_COMMITTED
        findings.append(
            Finding(
                Anomaly.ABORTED_READ,
                tuple(sorted((write.op, read.op))),
                f"op {read.op} read p{read.partition}@{read.offset} value {read.value}, {why}",
                breaks,
                read.partition,
                read.offset,
                read.value,
            )
        )
    return findings


def unwritten_reads(facts: Facts) -> list[Finding]:
    """unwritten-read: an ok poll read a value no send in the history tried to write (the topic
    was not fresh, or the log returned garbage)."""
    return [
        Finding(
            Anomaly.UNWRITTEN_READ,
            (read.op,),
            f"op {read.op} read p{read.partition}@{read.offset} value {read.value}, "
            "which no send wrote",
            Guarantee.ALWAYS,
            read.partition,
            read.offset,
            read.value,
        )
        for read in facts.reads
        if read.value not in facts.writes
    ]


def _shown_lost(
    facts: Facts, write: Write, ends: list[tuple[int, int, int, int]]
) -> tuple[str, int] | None:
    """Why `write`, never read, must have been in what was read, and the op that shows it."""
    assert write.offset is not None
    p = write.partition
    highest = facts.highest_read.get(p)
    if highest is not None and highest[0] >= write.offset:
        return f"op {highest[1]} read p{p} up to offset {highest[0]}", highest[1]
    for invoked, op, partition, end in ends:
        if invoked > write.op and partition == p and end <= write.offset:
            return f"op {op} found p{p} ends at offset {end}", op
    return None


def _unread_acknowledged(facts: Facts) -> list[Write]:
    unread = [
        w
        for w in facts.writes.values()
        if w.fate is Fate.WRITTEN
        and w.offset is not None
        and w.value not in facts.read_values.get(w.partition, ())
    ]
    return sorted(unread, key=lambda w: w.op)


def _end_offsets(facts: Facts) -> list[tuple[int, int, int, int]]:
    """(invoke index, completion index, partition, high watermark) of every ok end-offsets op:
    it shows a loss only if invoked after the send completed."""
    ends = []
    for pair in facts.pairs:
        if pair.invoke.f is F.END_OFFSETS and pair.type is OpType.OK:
            assert pair.completion is not None and isinstance(pair.completion.value, EndOffsets)
            for partition, end in pair.completion.value.offsets.items():
                ends.append((pair.invoke.index, pair.completion.index, partition, end))
    return ends
