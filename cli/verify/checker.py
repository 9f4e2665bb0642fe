"""Check a verify history: name its anomalies, and say which break what the settings promise.

The definitions follow Jepsen's Kafka workload (``jepsen.tests.kafka``), adapted to a history
that records each consumer's generation and seeks. Offsets are Kafka's own; an offset that no op
shows holding a value (a transaction marker, a record compacted away, an aborted record hidden
from a read_committed consumer) is never expected to be read. A value is WRITTEN when its send
was acknowledged (ok) and, if it was sent in a transaction, that transaction committed.

What each anomaly means:

- lost-write: an acknowledged write nobody ever read, although a consumer read its partition at
  or past its offset, or the partition's end offset, read after healing, is at or below it. The
  log dropped it.
- unseen: an acknowledged write nobody read by the end of the run. Not an error by itself: if
  the final drain stopped early, the writes after it are unseen. Those the drain read past, or
  that lie past the log's end, are also lost-writes.
- duplicate: one value at two or more offsets (by acknowledgements and reads together): a retry
  written twice. An indeterminate (info) send may or may not appear, but twice is a duplicate.
- inconsistent-offsets: one offset of a partition holding two or more values. Two reads
  disagreeing means the log was rewritten under consumers; an acknowledgement disagreeing with a
  read means the acknowledged write was truncated and its offset reused.
- nonmonotonic-send: one producer process, sending one value at a time, got an offset at or below
  the offset of its previous acknowledged send to that partition.
- nonmonotonic-poll: one consumer read an offset at or below the one it read before in that
  partition, with no rebalance, seek or indeterminate poll in between.
- poll-skip: one consumer jumped over offsets some op shows holding records, with no rebalance,
  seek or indeterminate poll in between.
- aborted-read (Jepsen's G1a): a consumer read a value whose send failed, or whose transaction
  aborted.
- commit-regression: a group's committed offset for a partition went back: a commit completed,
  and a later commit (invoked after it completed) set a lower offset, with no reset in between.
- unwritten-read: a consumer read a value no send in the history tried to write (the topic was
  not fresh, or the log returned garbage).

Which settings promise their absence (each finding names the one it breaks; the run is invalid
when a finding breaks a promised one; every promise but the first needs clean elections,
unclean.leader.election.enable=false):

| anomaly               | forbidden by                                                        |
|-----------------------|---------------------------------------------------------------------|
| lost-write            | durable acks: acks=all and min.insync.replicas >= 2                 |
| unseen                | nothing (informational)                                             |
| duplicate             | idempotence: enable.idempotence, or a transactional.id              |
| inconsistent-offsets  | reads disagree: clean elections; an ack disagrees: durable acks     |
| nonmonotonic-send     | durable acks                                                        |
| nonmonotonic-poll     | clean elections                                                     |
| poll-skip             | a read shows a skipped record: clean elections; only acks: durable  |
| aborted-read          | a failed send read: always; an aborted transaction read:            |
|                       | read_committed consumers                                            |
| commit-regression     | clean elections (offsets are committed with acks=all)               |
| unwritten-read        | always                                                              |

So an acks=1 run under leader kills may report lost-writes (and the inconsistent-offsets,
nonmonotonic-sends and poll-skips a truncated write leaves) and still be valid.

Not checked here (Jepsen checks some): transactional cycles (G0, G1c), reads within a
consume-transform-produce transaction, where a consumer starts after a rebalance, and real-time
lag. The workload must use a fresh, uncompacted topic and unique values.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from rlog.cli.verify.detect_log import (
    aborted_reads,
    duplicates,
    inconsistent_offsets,
    lost_writes,
    unseen_writes,
    unwritten_reads,
)
from rlog.cli.verify.detect_order import commit_regressions, nonmonotonic_sends, poll_orders
from rlog.cli.verify.facts import Facts, build_facts
from rlog.cli.verify.history import Commit, Op, OpType, Poll, Send
from rlog.cli.verify.promises import Promises
from rlog.cli.verify.verdict import Anomaly, Finding, Summary, Verdict, report

Detector = Callable[[Facts], list[Finding]]

DETECTORS: tuple[Detector, ...] = (
    lost_writes,
    duplicates,
    inconsistent_offsets,
    nonmonotonic_sends,
    poll_orders,  # nonmonotonic-poll and poll-skip, from one walk
    aborted_reads,
    commit_regressions,
    unwritten_reads,
    unseen_writes,
)


def check(history: Sequence[Op], promises: Promises) -> Verdict:
    """Judge `history` against `promises`; a malformed history raises HistoryError."""
    facts = build_facts(history, read_committed=promises.read_committed)
    found: dict[Anomaly, list[Finding]] = {anomaly: [] for anomaly in Anomaly}
    for detector in DETECTORS:
        for finding in detector(facts):
            found[finding.anomaly].append(finding)
    anomalies = {a: report(a, findings, promises) for a, findings in found.items()}
    return Verdict(
        valid=not any(r.violations for r in anomalies.values()),
        promises=promises,
        anomalies=anomalies,
        summary=summarize(facts, found[Anomaly.UNSEEN]),
        notes=_notes(facts, found[Anomaly.UNSEEN], found[Anomaly.LOST_WRITE]),
    )


def summarize(facts: Facts, unseen: Sequence[Finding]) -> Summary:
    sends: Counter[str] = Counter({"ok": 0, "fail": 0, "info": 0})
    commits: Counter[str] = Counter({"ok": 0, "fail": 0, "info": 0})
    polls = 0
    for pair in facts.pairs:
        if isinstance(pair.invoke.value, Send):
            sends[str(pair.type)] += 1
        elif isinstance(pair.invoke.value, Commit):
            commits[str(pair.type)] += 1
        elif isinstance(pair.invoke.value, Poll) and pair.type is OpType.OK:
            polls += 1
    transactions = Counter({"committed": 0, "aborted": 0, "unknown": 0})
    transactions.update(str(outcome) for outcome in facts.txn_outcomes.values())
    per_partition = Counter(f.partition for f in unseen if f.partition is not None)
    return Summary(
        sends=dict(sends),
        polls=polls,
        reads=len(facts.reads),
        values_read=len({read.value for read in facts.reads}),
        commits=dict(commits),
        transactions=dict(transactions),
        unseen=dict(sorted(per_partition.items())),
    )


def _notes(facts: Facts, unseen: Sequence[Finding], lost: Sequence[Finding]) -> tuple[str, ...]:
    notes = []
    lost_values = {f.value for f in lost}
    unexplained = [f for f in unseen if f.value not in lost_values]  # lost-writes say why
    for partition in sorted({f.partition for f in unexplained if f.partition is not None}):
        mine = [f for f in unexplained if f.partition == partition]
        highest = facts.highest_read.get(partition)
        read_to = f"offset {highest[0]}" if highest is not None else "nothing"
        past = [f for f in mine if f.offset is None or highest is None or f.offset > highest[0]]
        notes.append(
            f"p{partition}: {len(mine)} acknowledged writes never read and not shown lost "
            f"({len(past)} past the "
            f"highest offset read there, {read_to}). Not an error by itself if the final drain "
            "stopped early; one that reads to the log's end turns them into reads or lost-writes."
        )
    indeterminate = sum(
        1 for p in facts.pairs if isinstance(p.invoke.value, Send) and p.type is OpType.INFO
    )
    if indeterminate:
        notes.append(
            f"{indeterminate} indeterminate (info) sends may or may not appear; only a "
            "duplicate of one is an anomaly."
        )
    return tuple(notes)
