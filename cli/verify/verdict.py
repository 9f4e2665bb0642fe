"""The checker's result: each anomaly's examples, which of them the promises forbid, and a table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from rlog.cli.verify.promises import Guarantee, Promises

EXAMPLES = 8  # examples kept per anomaly; the count is always exact
EXAMPLE_WIDTH = 100  # characters of an example shown in the table


class Anomaly(StrEnum):
    """Anomaly names, in table order; Jepsen's where Jepsen has one (G1a is aborted-read)."""

    LOST_WRITE = "lost-write"
    DUPLICATE = "duplicate"
    INCONSISTENT_OFFSETS = "inconsistent-offsets"
    NONMONOTONIC_SEND = "nonmonotonic-send"
    NONMONOTONIC_POLL = "nonmonotonic-poll"
    POLL_SKIP = "poll-skip"
    ABORTED_READ = "aborted-read"
    COMMIT_REGRESSION = "commit-regression"
    UNWRITTEN_READ = "unwritten-read"
    UNSEEN = "unseen"


@dataclass(frozen=True)
class Finding:
    """One concrete example of an anomaly."""

    anomaly: Anomaly
    ops: tuple[int, ...]  # indices of the ops that show it, in history order
    detail: str  # one line, naming the partition, offsets, values and ops
    breaks: Guarantee | None  # the guarantee it breaks; None: never a violation by itself
    partition: int | None = None
    offset: int | None = None
    value: int | None = None


@dataclass(frozen=True)
class AnomalyReport:
    anomaly: Anomaly
    count: int
    violations: int  # how many of `count` break a promised guarantee
    examples: tuple[Finding, ...]  # violations first, then allowed ones, each in history order

    @property
    def allowed(self) -> str:
        if self.count == 0:
            return "-"
        if self.violations == 0:
            return "yes"
        if self.violations == self.count:
            return "no"
        return f"no ({self.violations} of {self.count})"


@dataclass(frozen=True)
class Summary:
    sends: Mapping[str, int]  # ok / fail / info (info counts sends still in flight at the end)
    polls: int  # ok polls
    reads: int  # (offset, value) pairs returned by ok polls
    values_read: int  # distinct values among them
    commits: Mapping[str, int]  # ok / fail / info
    transactions: Mapping[str, int]  # committed / aborted / unknown
    unseen: Mapping[int, int]  # partition -> acknowledged writes never read there


@dataclass(frozen=True)
class Verdict:
    valid: bool  # no example breaks a promised guarantee
    promises: Promises
    anomalies: Mapping[Anomaly, AnomalyReport]  # every anomaly, in table order
    summary: Summary
    notes: tuple[str, ...] = field(default=())

    @property
    def violated(self) -> tuple[Anomaly, ...]:
        return tuple(a for a, report in self.anomalies.items() if report.violations)

    @property
    def found(self) -> tuple[Anomaly, ...]:
        return tuple(a for a, report in self.anomalies.items() if report.count)


def report(anomaly: Anomaly, findings: Sequence[Finding], promises: Promises) -> AnomalyReport:
    """Count `findings` and keep the first examples, violations first."""
    violating = [f for f in findings if f.breaks is not None and promises.holds(f.breaks)]
    allowed = [f for f in findings if f.breaks is None or not promises.holds(f.breaks)]
    examples = tuple((violating + allowed)[:EXAMPLES])
    return AnomalyReport(anomaly, len(findings), len(violating), examples)


def render_table(verdict: Verdict) -> str:
    """ANOMALY, COUNT, ALLOWED?, EXAMPLE for every anomaly, then the counts, notes and verdict."""
    rows = [("ANOMALY", "COUNT", "ALLOWED?", "EXAMPLE")]
    for anomaly, rep in verdict.anomalies.items():
        example = rep.examples[0].detail if rep.examples else ""
        if len(example) > EXAMPLE_WIDTH:
            example = example[: EXAMPLE_WIDTH - 3] + "..."
        rows.append((str(anomaly), str(rep.count), rep.allowed, example))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        f"{a:<{widths[0]}}  {c:>{widths[1]}}  {ok:<{widths[2]}}  {ex}".rstrip()
        for a, c, ok, ex in rows
    ]
    s = verdict.summary
    lines += [
        "",
        f"promised: {verdict.promises.describe()}",
        "sends: " + _counts(s.sends),
        f"polls: {s.polls} ok, {s.reads} records read, {s.values_read} distinct values",
        "commits: " + _counts(s.commits),
    ]
    if any(s.transactions.values()):
        lines.append("transactions: " + _counts(s.transactions))
    lines += [f"note: {note}" for note in verdict.notes]
    if verdict.valid:
        lines.append("VALID: nothing the settings promise was broken")
    else:
        broken = ", ".join(verdict.violated)
        lines.append(f"INVALID: {broken} break what the settings promise")
    return "\n".join(lines) + "\n"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items())
