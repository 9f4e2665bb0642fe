"""Pure functions from snapshots to what the dashboard's tables, bars and sparklines show.

Nothing here does I/O or knows Textual: cells are rich ``Text`` so the tests can read both the
characters and the styles.

The partitions table marks what is offline and what just changed. A replica is offline when
rlogd says its process is not running (paused, down, restarting: known at once) or the
controller has fenced its broker (Metadata's offline replicas); a paused leader still leads
until its session expires, so its cell says so. An ISR or leader change is kept for
:data:`RECENT_S` seconds from the journal's events, so a shrink that heals within a refresh is
still seen.

Records/s in and out per broker come from the counters each broker rewrites every second
(`traffic.json`: records produced to it, records its consumer fetches returned): the rate is
the difference between two snapshots over the time between the broker's two writes.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text

from rlog.cli.events import KIND_COLORS
from rlog.cli.replicas import offline_reasons
from rlog.cli.terminal import megabytes, short_duration
from rlog.cli.tui.snapshot import (
    Event,
    GroupInfo,
    PartitionInfo,
    ProcessInfo,
    Snapshot,
    TransactionInfo,
)

NO_LEADER = -1
BAR_WIDTH = 4
BAR_WIDTHS = (BAR_WIDTH, 2, 0)  # the lag bars tried, widest first, until the table fits
_EIGHTHS = " ▏▎▍▌▋▊▉█"
SERIES_LENGTH = 60  # sparkline points kept per broker: a minute at the default interval
LSO_NOTE = (
    "Partitions: an LSO column shows, before the HW, where a transaction is open "
    "(read_committed consumers stop at the LSO)."
)
RATES_NOTE = (
    "Per broker: records/s produced to it (in) and returned by its consumer fetches (out), "
    "from the counters it writes every second. Replication is not counted."
)

STATE_STYLES = {
    "running": "green",
    "paused": "yellow",
    "starting": "yellow",
    "restarting": "yellow",
    "stopping": "yellow",
    "stopped": "red",
    "failed": "red",
    "exited": "red",
}
EVENT_STYLES = KIND_COLORS  # as `rlog events` colors them
OUT_OF_SYNC_STYLE = "bold red"
OFFLINE_STYLE = "bold medium_purple1"  # a replica or leader on a paused, down or fenced broker
OFFLINE_MARK = "✗"
CHANGED_STYLE = "bold black on yellow"  # an ISR or leader that changed in the last RECENT_S
RECENT_S = 5.0
MARKS_KEPT = 3  # ISR changes shown per partition: the latest ones
SHRUNK, EXPANDED = "↓", "↑"
MARKS_NOTE = (
    "Partitions: 2! a replica out of the ISR; 2✗ (purple) one whose broker is offline "
    "(paused, down, restarting, or fenced by the controller); LEADER '2 paused' a leader "
    "that is offline but not yet replaced; yellow ISR '1,3 ↓2' (↑2) an ISR that lost (gained) "
    "broker 2 in the last 5 s, a yellow leader a new one."
)
HELD_BACK_STYLE = "bold yellow"  # an LSO below the HW: a transaction is open there
# Kafka's transaction states: open ones stand out, Ongoing most.
TXN_STATE_STYLES = {
    "Ongoing": "bold yellow",
    "PrepareCommit": "yellow",
    "PrepareAbort": "yellow",
    "PrepareEpochFence": "yellow",
    "CompleteCommit": "green",
    "CompleteAbort": "red",
    "Empty": "dim",
}
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
PARTITIONS_WIDTH = 24  # the transactions table's partitions cell, at most (about)

BROKER_COLUMNS = ("NAME", "ROLE", "STATE", "PID", "CPU%", "RSS", "UP", "RST", "LEADS", "IN/s")
PARTITION_COLUMNS = ("TOPIC", "P", "LEADER", "EP", "REPLICAS", "ISR", "HW")
GROUP_COLUMNS = ("GROUP", "STATE", "MEMBERS", "TOPIC", "P", "COMMITTED", "END", "LAG", "OWNER")
LSO_COLUMN = "LSO"  # shown (before HW) only while some partition's LSO is below its HW
TXN_COLUMNS = ("TXN ID", "STATE", "COORD", "PRODUCER", "EPOCH", "AGE", "PARTITIONS")

Row = tuple[str, tuple[Text, ...]]  # (row key, cells)


# -- small formats --------------------------------------------------------------------------


def dash(value: object) -> str:
    return "-" if value is None else str(value)


def rate(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


# -- brokers ----------------------------------------------------------------------------------


def leader_counts(partitions: Iterable[PartitionInfo]) -> dict[int, int]:
    """How many partitions each broker leads."""
    counts: dict[int, int] = defaultdict(int)
    for p in partitions:
        if p.leader != NO_LEADER:
            counts[p.leader] += 1
    return dict(counts)


def broker_rows(snapshot: Snapshot, rates_in: Mapping[int, float]) -> list[Row]:
    """One row per process (the controller first, as rlogd lists it), keyed by its name."""
    leads = leader_counts(snapshot.partitions)
    rows = []
    for p in snapshot.processes:
        is_broker = p.id is not None
        cells = (
            Text(p.name),
            Text(p.role),
            Text(p.state, style=STATE_STYLES.get(p.state, "")),
            Text(dash(p.pid)),
            Text("-" if p.cpu_percent is None else f"{p.cpu_percent:.0f}"),
            Text(megabytes(p.rss_bytes)),
            Text(short_duration(p.uptime_s)),
            Text(str(p.restarts)),
            Text(str(leads.get(p.id, 0)) if is_broker and p.id is not None else "-"),
            Text(rate(rates_in.get(p.id)) if is_broker and p.id is not None else "-"),
        )
        rows.append((p.name, cells))
    return rows


def broker_ids(processes: Iterable[ProcessInfo]) -> list[int]:
    return sorted(p.id for p in processes if p.id is not None)


# -- partitions -------------------------------------------------------------------------------


def out_of_sync(p: PartitionInfo) -> tuple[int, ...]:
    """The replicas not in the ISR."""
    return tuple(r for r in p.replicas if r not in p.isr)


def process_states(processes: Iterable[ProcessInfo]) -> dict[int, str]:
    """rlogd's state of each broker process, by broker id."""
    return {p.id: p.state for p in processes if p.id is not None}


def offline(p: PartitionInfo, states: Mapping[int, str]) -> dict[int, str]:
    """{replica: why it is offline} as ``rlog topic describe`` says it: rlogd's word (paused,
    down, restarting, starting), else "fenced" when the controller does not count it live."""
    return offline_reasons(p.replicas, p.offline_replicas, states)


def leader_offline(p: PartitionInfo, states: Mapping[int, str]) -> bool:
    return p.leader != NO_LEADER and p.leader in offline(p, states)


def replicas_cell(p: PartitionInfo, states: Mapping[int, str] | None = None) -> Text:
    """The replica list with each offline replica marked ``✗`` in purple and each other
    out-of-sync one ``!`` in red."""
    text = Text()
    lagging = set(out_of_sync(p))
    down = offline(p, states or {})
    for i, replica in enumerate(p.replicas):
        if i:
            text.append(",")
        if replica in down:
            text.append(f"{replica}{OFFLINE_MARK}", style=OFFLINE_STYLE)
        elif replica in lagging:
            text.append(f"{replica}!", style=OUT_OF_SYNC_STYLE)
        else:
            text.append(str(replica))
    return text


PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class PartitionChange:
    """A partition's recent ISR and leader changes, from the journal."""

    last_ts: float  # wall time of the latest one: shown until RECENT_S after it
    marks: tuple[str, ...] = ()  # "↓2" (left the ISR), "↑2" (joined it), oldest first
    leader_changed: bool = False


def _mark(event: Event) -> str | None:
    if event.kind == "isr_shrunk" and event.removed:
        return SHRUNK + ",".join(map(str, event.removed))
    if event.kind == "isr_expanded" and event.added:
        return EXPANDED + ",".join(map(str, event.added))
    return None


def partition_changes(
    previous: Mapping[PartitionKey, PartitionChange],
    events: Iterable[Event],
    now: float,
    keep_s: float = RECENT_S,
) -> dict[PartitionKey, PartitionChange]:
    """The changes of ``previous`` with those ``events`` add, without the ones older than
    ``keep_s`` at wall time ``now``. The TUI polls about once a second: a shrink healed within
    that poll is still shown (``↓2↑2``)."""
    changes = dict(previous)
    for event in events:
        leader = event.kind in ("leader_elected", "partition_offline")
        mark = _mark(event)
        if event.topic is None or event.partition is None or not (leader or mark):
            continue
        key = (event.topic, event.partition)
        seen = changes.get(key)
        if seen is None or event.ts - seen.last_ts > keep_s:  # a change long gone: anew
            seen = PartitionChange(event.ts)
        changes[key] = PartitionChange(
            max(seen.last_ts, event.ts),
            (*seen.marks, mark)[-MARKS_KEPT:] if mark else seen.marks,
            seen.leader_changed or leader,
        )
    return {key: change for key, change in changes.items() if now - change.last_ts <= keep_s}


def leader_cell(
    p: PartitionInfo, states: Mapping[int, str], change: PartitionChange | None = None
) -> Text:
    """``none`` in bold red without a leader; ``3 paused`` in purple while the leader's
    broker is offline; the leader in yellow when it changed lately."""
    if p.leader == NO_LEADER:
        return Text("none", style="bold red")
    why = offline(p, states).get(p.leader)
    if why is not None:
        return Text(f"{p.leader} {why}", style=OFFLINE_STYLE)
    recent = change is not None and change.leader_changed
    return Text(str(p.leader), style=CHANGED_STYLE if recent else "")


def isr_cell(p: PartitionInfo, change: PartitionChange | None = None) -> Text:
    """The ISR; in yellow with its recent changes (``1,3 ↓2``) when it or the leader changed
    in the last few seconds."""
    text = ",".join(map(str, p.isr))
    if change is None:
        return Text(text)
    marks = "".join(change.marks)
    return Text(f"{text} {marks}" if marks else text or "-", style=CHANGED_STYLE)


def leader_leo(p: PartitionInfo) -> int | None:
    return p.leo(p.leader) if p.leader != NO_LEADER else None


def lag(p: PartitionInfo, replica: int) -> int | None:
    """How far a replica's LEO is behind the leader's; None when either is unknown."""
    end = leader_leo(p)
    mine = p.leo(replica)
    return None if end is None or mine is None else max(0, end - mine)


def lag_bar(leo: int | None, leader_end: int | None, width: int = BAR_WIDTH) -> str:
    """How much of the leader's log a replica has, as a bar of ``width`` cells: full when
    caught up, shorter the more it lags; ``?`` cells when a LEO is unknown."""
    if leo is None or leader_end is None:
        return "?" * width
    fraction = 1.0 if leader_end <= 0 else min(1.0, max(0.0, leo / leader_end))
    eighths = round(fraction * width * 8)
    if fraction < 1.0:
        eighths = min(eighths, width * 8 - 1)  # one record behind must not look caught up
    full, part = divmod(eighths, 8)
    bar = "█" * full + (_EIGHTHS[part] if part else "")
    return bar.ljust(width, "·")


def replica_cell(p: PartitionInfo, replica: int, bar_width: int = BAR_WIDTH) -> Text:
    """``LEO bar -lag`` for one replica; the LEO in red when the replica is out of sync.
    With ``bar_width`` 0 (a narrow screen) just ``LEO -lag``: the numbers matter more."""
    behind = lag(p, replica)
    text = Text(dash(p.leo(replica)), style=OUT_OF_SYNC_STYLE if replica not in p.isr else "")
    if bar_width:
        text.append(" ")
        bar = lag_bar(p.leo(replica), leader_leo(p), bar_width)
        text.append(bar, style="red" if behind else "green")
    text.append(f" -{behind}" if behind else "", style="red")
    return text


def replica_brokers(partitions: Sequence[PartitionInfo]) -> tuple[int, ...]:
    """Every broker that hosts a replica: one LEO column each."""
    return tuple(sorted({r for p in partitions for r in p.replicas}))


def held_back(p: PartitionInfo) -> bool:
    """Whether the partition's LSO is below its HW: a transaction is open on it (or its
    markers are not replicated yet), and read_committed consumers stop at the LSO."""
    lso, hw = p.last_stable_offset, p.high_watermark
    return lso is not None and hw is not None and lso < hw


def partition_columns(partitions: Sequence[PartitionInfo]) -> tuple[str, ...]:
    """The fixed columns, with LSO before HW while some partition's LSO is below its HW, then
    one LEO column per broker that hosts a replica."""
    head = PARTITION_COLUMNS
    if any(held_back(p) for p in partitions):
        head = (*PARTITION_COLUMNS[:-1], LSO_COLUMN, PARTITION_COLUMNS[-1])
    return head + tuple(f"{b} LEO" for b in replica_brokers(partitions))


def lso_cell(p: PartitionInfo) -> Text:
    """The LSO where it is below the HW, nothing where they are equal (or it is unknown)."""
    return Text(str(p.last_stable_offset), style=HELD_BACK_STYLE) if held_back(p) else Text("")


def table_width(columns: Sequence[str], rows: Sequence[Row], padding: int = 1) -> int:
    """The cells a DataTable needs for ``rows`` (``padding`` each side of every column, as
    Textual's ``cell_padding``), so nothing is cut off."""
    width = 0
    for index, column in enumerate(columns):
        cells = [cells[index].cell_len for _, cells in rows]
        width += max([len(column), *cells]) + 2 * padding
    return width


def fitting_partition_rows(
    partitions: Sequence[PartitionInfo],
    processes: Iterable[ProcessInfo] = (),
    changes: Mapping[PartitionKey, PartitionChange] | None = None,
    width: int | None = None,
) -> tuple[int, list[Row]]:
    """(bar width, rows) as :func:`partition_rows`, with the widest lag bars that let the table
    fit in ``width`` cells, else none: 80 columns hold three brokers' LEOs and lags that way."""
    columns = partition_columns(partitions)
    processes = tuple(processes)
    for bar_width in BAR_WIDTHS:
        rows = partition_rows(partitions, processes, changes, bar_width)
        if width is None or table_width(columns, rows) <= width:
            break
    return bar_width, rows


def partition_rows(
    partitions: Sequence[PartitionInfo],
    processes: Iterable[ProcessInfo] = (),
    changes: Mapping[PartitionKey, PartitionChange] | None = None,
    bar_width: int = BAR_WIDTH,
) -> list[Row]:
    """Rows sorted by topic and partition, internal topics (``__...``) last; the LSO cell (as
    :func:`partition_columns` has it) before the HW; then one cell per broker: its replica's
    LEO and lag bar (``bar_width`` cells; none with 0), or nothing when it hosts no replica.
    ``processes`` (rlogd's states) and the fenced replicas mark what is offline; ``changes``
    what changed lately."""
    brokers = replica_brokers(partitions)
    with_lso = LSO_COLUMN in partition_columns(partitions)
    states = process_states(processes)
    rows = []
    ordered = sorted(partitions, key=lambda p: (p.topic.startswith("__"), p.topic, p.partition))
    for p in ordered:
        change = (changes or {}).get((p.topic, p.partition))
        cells = [
            Text(p.topic),
            Text(str(p.partition)),
            leader_cell(p, states, change),
            Text(str(p.leader_epoch) if p.leader_epoch >= 0 else "-"),
            replicas_cell(p, states),
            isr_cell(p, change),
            *((lso_cell(p),) if with_lso else ()),
            Text(dash(p.high_watermark)),
        ]
        cells += [replica_cell(p, b, bar_width) if b in p.replicas else Text("") for b in brokers]
        rows.append((f"{p.topic}-{p.partition}", tuple(cells)))
    return rows


# -- consumer groups --------------------------------------------------------------------------


def group_lag(committed: int | None, end: int | None) -> int | None:
    return None if committed is None or end is None else max(0, end - committed)


def group_rows(groups: Sequence[GroupInfo], partitions: Sequence[PartitionInfo]) -> list[Row]:
    """One row per (group, partition) it has an offset for or a member owns, as
    ``rlog group describe`` lists them (an owned partition with no commit yet shows "-"); a
    group with neither gets one row. The lag is the partition's high watermark (from the
    partitions source) minus the committed offset."""
    ends = {(p.topic, p.partition): p.high_watermark for p in partitions}
    rows = []
    for group in sorted(groups, key=lambda g: g.group_id):
        owners = {tp: m.client_id or m.member_id for m in group.members for tp in m.assignment}
        committed = {(c.topic, c.partition): c.offset for c in group.offsets}
        head = (Text(group.group_id), Text(group.state), Text(str(len(group.members))))
        keys = sorted(committed.keys() | owners.keys())
        if not keys:
            rows.append((group.group_id, (*head, *(Text("-") for _ in range(6)))))
            continue
        for topic, partition in keys:
            offset = committed.get((topic, partition))
            end = ends.get((topic, partition))
            behind = group_lag(offset, end)
            cells = (
                *head,
                Text(topic),
                Text(str(partition)),
                Text(dash(offset)),
                Text(dash(end)),
                Text(dash(behind), style="yellow" if behind else ""),
                Text(owners.get((topic, partition), "-")),
            )
            rows.append((f"{group.group_id}/{topic}-{partition}", cells))
    return rows


def groups_message(snapshot: Snapshot) -> str:
    """What to say above the groups table."""
    if snapshot.groups:
        return f"{len(snapshot.groups)} consumer group(s); lag = partition HW - committed"
    return snapshot.groups_note or "no consumer groups"


# -- transactions -----------------------------------------------------------------------------


def transaction_age_s(t: TransactionInfo, now_ms: int | None) -> float | None:
    """How long the open transaction has been running (now - its start), in seconds; None when
    none is open or a time is unknown."""
    if t.state not in OPEN_STATES or t.start_time_ms is None or now_ms is None:
        return None
    return max(0, now_ms - t.start_time_ms) / 1000


def partitions_text(partitions: Sequence[tuple[str, int]], width: int = PARTITIONS_WIDTH) -> str:
    """``topic-partition`` joined by commas as ``rlog txn describe`` prints them, cut to about
    ``width`` characters with `` +N more`` for the partitions left out; ``-`` for none."""
    names = [f"{topic}-{partition}" for topic, partition in partitions]
    if not names:
        return "-"
    shown: list[str] = []
    for name in names:
        left = len(names) - len(shown) - 1
        more = f" +{left} more" if left else ""
        if shown and len(",".join([*shown, name])) + len(more) > width:
            break
        shown.append(name)
    left = len(names) - len(shown)
    return ",".join(shown) + (f" +{left} more" if left else "")


def transaction_rows(transactions: Sequence[TransactionInfo], now_ms: int | None) -> list[Row]:
    """One row per transactional id, sorted by id, keyed by it. Ongoing ones are highlighted;
    an open transaction past its timeout has its age in red (its coordinator should abort it).
    A ``-`` where the id was listed but could not be described."""
    rows = []
    for t in sorted(transactions, key=lambda t: t.transactional_id):
        style = TXN_STATE_STYLES.get(t.state, "")
        age = transaction_age_s(t, now_ms)
        overdue = age is not None and t.timeout_ms is not None and age * 1000 > t.timeout_ms
        cells = (
            Text(t.transactional_id, style=style if t.state == "Ongoing" else ""),
            Text(t.state, style=style),
            Text(str(t.coordinator)),
            Text(str(t.producer_id)),
            Text(dash(t.producer_epoch)),
            Text(short_duration(age), style="bold red" if overdue else ""),
            Text(partitions_text(t.partitions)),
        )
        rows.append((t.transactional_id, cells))
    return rows


def transactions_message(snapshot: Snapshot) -> Text:
    """What to say above the transactions table: how many ids, how many open, and which
    brokers did not answer (the list may lack their transactions)."""
    found = snapshot.transactions
    if found:
        open_now = sum(t.state in OPEN_STATES for t in found)
        text = Text(f"{len(found)} transactional id(s), {open_now} open")
        text.append("; AGE: since the open transaction began", style="dim")
    else:
        text = Text("no transactions")
    for warning in snapshot.transaction_warnings:
        text.append(f"; {warning} (the list may be incomplete)", style="yellow")
    return text


# -- rates ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rates:
    """Records/s in and out per broker (0 for a broker with no counters yet)."""

    records_in: dict[int, float]
    records_out: dict[int, float]


def traffic_rates(previous: Snapshot | None, current: Snapshot) -> Rates:
    """Each broker's rates between two snapshots of its counters. A broker that restarted in
    between (another pid) or wrote nothing new counts 0 this time."""
    brokers = broker_ids(current.processes)
    rates_in, rates_out = dict.fromkeys(brokers, 0.0), dict.fromkeys(brokers, 0.0)
    before = {t.broker: t for t in previous.traffic} if previous is not None else {}
    for now in current.traffic:
        then = before.get(now.broker)
        if then is None or then.pid != now.pid or now.ts <= then.ts:
            continue
        elapsed = now.ts - then.ts
        rates_in[now.broker] = max(0, now.records_in - then.records_in) / elapsed
        rates_out[now.broker] = max(0, now.records_out - then.records_out) / elapsed
    return Rates(rates_in, rates_out)


def push_series(
    history: Mapping[int, tuple[float, ...]],
    rates: Mapping[int, float],
    keep: int = SERIES_LENGTH,
) -> dict[int, tuple[float, ...]]:
    """Each broker's sparkline series with this refresh's rate appended (the oldest dropped
    beyond ``keep``). A broker without a rate this time gets 0."""
    brokers = sorted(set(history) | set(rates))
    return {b: (*history.get(b, ()), float(rates.get(b, 0.0)))[-keep:] for b in brokers}


@dataclass(frozen=True)
class RateView:
    """One broker's sparkline and its caption."""

    broker: int
    direction: str  # "in" or "out"
    series: tuple[float, ...]
    caption: str


def padded(series: Sequence[float], keep: int = SERIES_LENGTH) -> tuple[float, ...]:
    """The series left-padded with zeros to ``keep`` points: a sparkline scales between its
    lowest and highest point, so without a zero a steady rate would look like a peak."""
    return (0.0,) * max(0, keep - len(series)) + tuple(series)[-keep:]


def rate_views(
    history_in: Mapping[int, tuple[float, ...]], history_out: Mapping[int, tuple[float, ...]]
) -> list[RateView]:
    """Two sparklines per broker, in then out, each with its caption."""
    views = []
    for broker in sorted(set(history_in) | set(history_out)):
        for direction, history in (("in", history_in), ("out", history_out)):
            series = history.get(broker, ())
            last = series[-1] if series else None
            peak = max(series, default=0.0)
            caption = f"broker-{broker} {direction} {rate(last)}/s (peak {rate(peak)})"
            views.append(RateView(broker, direction, padded(series), caption))
    return views


# -- events and status ------------------------------------------------------------------------


def clock(ts: float) -> str:
    """Local wall time to the second, as the journal's readers show it."""
    return time.strftime("%H:%M:%S", time.localtime(ts))


def event_line(event: Event) -> Text:
    text = Text(f"{clock(event.ts)} {event.source} ", style="dim")
    text.append(event.kind, style=EVENT_STYLES.get(event.kind, "cyan"))
    text.append(f" {event.message}")
    return text


def status_line(snapshot: Snapshot | None, interval_s: float) -> Text:
    """The line under the panels: what failed in the last refresh, or that all is well."""
    if snapshot is None:
        return Text("connecting...", style="yellow")
    if snapshot.errors:
        # The first failure is the cause (rlogd not running); the rest usually follow from it.
        more = f" (+{len(snapshot.errors) - 1} more)" if len(snapshot.errors) > 1 else ""
        return Text(snapshot.errors[0] + more, style="bold red")
    brokers = [p for p in snapshot.processes if p.id is not None]
    running = sum(p.state == "running" for p in brokers)
    under = sum(bool(out_of_sync(p)) for p in snapshot.partitions)
    leaderless = sum(p.leader == NO_LEADER for p in snapshot.partitions)
    states = process_states(snapshot.processes)
    # Partitions that still name a leader that cannot serve: paused, or down and not yet
    # replaced (--unavailable-partitions counts them with the leaderless ones).
    stuck = sum(leader_offline(p, states) for p in snapshot.partitions)
    text = Text(f"{running}/{len(brokers)} brokers running, {len(snapshot.partitions)} partitions")
    if under:
        text.append(f", {under} under-replicated", style="yellow")
    if leaderless:
        text.append(f", {leaderless} offline", style="bold red")
    if stuck:
        text.append(f", {stuck} leader offline", style=OFFLINE_STYLE)
    text.append(f"; refresh {interval_s:g}s", style="dim")
    return text


# -- the create-topic form --------------------------------------------------------------------

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class TopicRequest:
    name: str
    partitions: int
    replication_factor: int


def parse_topic_form(name: str, partitions: str, replication_factor: str) -> TopicRequest:
    """The create-topic form's fields, checked as Kafka checks a topic name and counts;
    ValueError with a one-line message for the form to show."""
    name = name.strip()
    if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            "topic name: 1-249 characters of letters, digits, '.', '_' and '-' (not '.' or '..')"
        )
    counts = []
    for label, text in (("partitions", partitions), ("replication factor", replication_factor)):
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"{label}: a whole number, not {text.strip()!r}") from None
        if value < 1:
            raise ValueError(f"{label}: at least 1")
        counts.append(value)
    return TopicRequest(name, counts[0], counts[1])
