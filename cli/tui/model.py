"""Pure functions from snapshots to what the dashboard's tables, bars and sparklines show.

Nothing here does I/O or knows Textual: cells are rich ``Text`` so the tests can read both the
characters and the styles.

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
from rlog.cli.terminal import megabytes, short_duration
from rlog.cli.tui.snapshot import Event, GroupInfo, PartitionInfo, ProcessInfo, Snapshot

NO_LEADER = -1
BAR_WIDTH = 4
_EIGHTHS = " ▏▎▍▌▋▊▉█"
SERIES_LENGTH = 60  # sparkline points kept per broker: a minute at the default interval
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

BROKER_COLUMNS = ("NAME", "ROLE", "STATE", "PID", "CPU%", "RSS", "UP", "RST", "LEADS", "IN/s")
PARTITION_COLUMNS = ("TOPIC", "P", "LEADER", "EP", "REPLICAS", "ISR", "HW")
GROUP_COLUMNS = ("GROUP", "STATE", "MEMBERS", "TOPIC", "P", "COMMITTED", "END", "LAG", "OWNER")

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


def replicas_cell(p: PartitionInfo) -> Text:
    """The replica list with each out-of-sync replica marked ``!`` in red."""
    text = Text()
    lagging = set(out_of_sync(p))
    for i, replica in enumerate(p.replicas):
        if i:
            text.append(",")
        if replica in lagging:
            text.append(f"{replica}!", style=OUT_OF_SYNC_STYLE)
        else:
            text.append(str(replica))
    return text


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


def replica_cell(p: PartitionInfo, replica: int) -> Text:
    """``LEO bar -lag`` for one replica; the LEO in red when the replica is out of sync."""
    behind = lag(p, replica)
    text = Text(dash(p.leo(replica)), style=OUT_OF_SYNC_STYLE if replica not in p.isr else "")
    text.append(" ")
    text.append(lag_bar(p.leo(replica), leader_leo(p)), style="red" if behind else "green")
    text.append(f" -{behind}" if behind else "", style="red")
    return text


def replica_brokers(partitions: Sequence[PartitionInfo]) -> tuple[int, ...]:
    """Every broker that hosts a replica: one LEO column each."""
    return tuple(sorted({r for p in partitions for r in p.replicas}))


def partition_columns(partitions: Sequence[PartitionInfo]) -> tuple[str, ...]:
    return PARTITION_COLUMNS + tuple(f"{b} LEO" for b in replica_brokers(partitions))


def partition_rows(partitions: Sequence[PartitionInfo]) -> list[Row]:
    """Rows sorted by topic and partition, internal topics (``__...``) last; then one cell per
    broker: its replica's LEO and lag bar, or nothing when it hosts no replica."""
    brokers = replica_brokers(partitions)
    rows = []
    ordered = sorted(partitions, key=lambda p: (p.topic.startswith("__"), p.topic, p.partition))
    for p in ordered:
        online = p.leader != NO_LEADER
        cells = [
            Text(p.topic),
            Text(str(p.partition)),
            Text(str(p.leader) if online else "none", style="" if online else "bold red"),
            Text(str(p.leader_epoch) if p.leader_epoch >= 0 else "-"),
            replicas_cell(p),
            Text(",".join(map(str, p.isr))),
            Text(dash(p.high_watermark)),
        ]
        cells += [replica_cell(p, b) if b in p.replicas else Text("") for b in brokers]
        rows.append((f"{p.topic}-{p.partition}", tuple(cells)))
    return rows


# -- consumer groups --------------------------------------------------------------------------


def group_lag(committed: int | None, end: int | None) -> int | None:
    return None if committed is None or end is None else max(0, end - committed)


def group_rows(groups: Sequence[GroupInfo], partitions: Sequence[PartitionInfo]) -> list[Row]:
    """One row per (group, committed partition); a group with no offsets gets one row. The lag
    is the partition's high watermark (from the partitions source) minus the committed offset."""
    ends = {(p.topic, p.partition): p.high_watermark for p in partitions}
    rows = []
    for group in sorted(groups, key=lambda g: g.group_id):
        owners = {tp: m.client_id or m.member_id for m in group.members for tp in m.assignment}
        head = (Text(group.group_id), Text(group.state), Text(str(len(group.members))))
        if not group.offsets:
            rows.append((group.group_id, (*head, *(Text("-") for _ in range(6)))))
            continue
        for c in sorted(group.offsets, key=lambda c: (c.topic, c.partition)):
            end = ends.get((c.topic, c.partition))
            behind = group_lag(c.offset, end)
            cells = (
                *head,
                Text(c.topic),
                Text(str(c.partition)),
                Text(dash(c.offset)),
                Text(dash(end)),
                Text(dash(behind), style="yellow" if behind else ""),
                Text(owners.get((c.topic, c.partition), "-")),
            )
            rows.append((f"{group.group_id}/{c.topic}-{c.partition}", cells))
    return rows


def groups_message(snapshot: Snapshot) -> str:
    """What to say above the groups table."""
    if snapshot.groups:
        return f"{len(snapshot.groups)} consumer group(s); lag = partition HW - committed"
    return snapshot.groups_note or "no consumer groups"


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
    offline = sum(p.leader == NO_LEADER for p in snapshot.partitions)
    text = Text(f"{running}/{len(brokers)} brokers running, {len(snapshot.partitions)} partitions")
    if under:
        text.append(f", {under} under-replicated", style="yellow")
    if offline:
        text.append(f", {offline} offline", style="bold red")
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
