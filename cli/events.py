"""``rlog events``: the cluster's event journal, oldest first, as a table or JSON lines.

rlogd, the controller and each broker append to their own file in ``DATA_DIR/events/``
(see :mod:`rlog.daemon.events`); this command merges them by time. It reads files only, so it
works while the cluster runs and after it stopped. ``--follow`` keeps printing new events until
Ctrl-C.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from rlog.cli.discovery import DataDirOption, Settings, settings_of
from rlog.cli.terminal import CliError, ExitCode, Terminal
from rlog.daemon.data_dir import events_dir
from rlog.daemon.events import KINDS, EventTail

POLL_INTERVAL_S = 0.25
HEADERS = ("TIME", "SOURCE", "KIND", "MESSAGE")
# Fixed column widths, so lines printed one by one while following still line up.
WIDTHS = (23, len("controller"), max(len(kind) for kind in KINDS))
KIND_COLORS = {
    "process_exited": "red",
    "broker_fenced": "red",
    "partition_offline": "red",
    "partition_recovering": "yellow",
    "unclean_election": "red",
    "replica_truncated": "yellow",
    "isr_shrunk": "yellow",
    "process_paused": "yellow",
    "isr_expanded": "green",
    "broker_unfenced": "green",
    "leader_elected": "bold",
    "group_member_removed": "yellow",
    "group_rebalancing": "yellow",
    "group_stable": "green",
}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``500ms``, ``5m``, ``2h``, ``1d`` -> seconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise CliError(
            f"--since {text!r}: expected a duration such as 30s, 5m, 2h or 1d", ExitCode.USAGE
        )
    return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def format_time(ts: float) -> str:
    """Local time to the millisecond: ``2026-11-23 13:14:24.123``."""
    seconds = int(ts)
    millis = min(int((ts - seconds) * 1000), 999)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f".{millis:03d}"


def _cells(values: Iterable[str]) -> str:
    *padded, last = list(values)
    return "  ".join(v.ljust(w) for v, w in zip(padded, WIDTHS, strict=True)) + "  " + last


class _Printer:
    """Prints events as lines under one header, or as JSON objects, one per line."""

    def __init__(self, terminal: Terminal, json_out: bool, kinds: set[str]) -> None:
        self.terminal = terminal
        self.json_out = json_out
        self.kinds = kinds
        self.printed = 0

    def print(self, events: Iterable[dict[str, Any]]) -> None:
        for event in events:
            if self.kinds and event.get("kind") not in self.kinds:
                continue
            if self.json_out:
                self.terminal.json(event, compact=True)
            else:
                if not self.printed:
                    self.terminal.line(self.terminal.style(_cells(HEADERS).rstrip(), "bold"))
                self.terminal.line(self._line(event))
            self.printed += 1

    def _line(self, event: dict[str, Any]) -> str:
        kind = str(event.get("kind", "-"))
        text = _cells(
            [
                format_time(float(event["ts"])),
                str(event.get("source", "-")),
                kind,
                str(event.get("message", "")),
            ]
        )
        color = KIND_COLORS.get(kind)
        return self.terminal.style(text, color) if color else text


def _check_kinds(kinds: list[str]) -> set[str]:
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise CliError(
            f"--kind {unknown[0]!r} is not an event kind (known: {', '.join(KINDS)})",
            ExitCode.USAGE,
        )
    return set(kinds)


def _no_journal(data_dir: Path) -> CliError:
    return CliError(
        f"no rlog cluster has run in {data_dir} (no {events_dir(data_dir)} journal); "
        f"start one with: rlog cluster up --data-dir {data_dir}",
        ExitCode.NOT_RUNNING,
    )


def _follow(tail: EventTail, printer: _Printer) -> None:
    try:
        while True:
            printer.print(tail.poll())
            time.sleep(POLL_INTERVAL_S)
    except KeyboardInterrupt:
        return  # Ctrl-C is how --follow ends: not an error


def _show(settings: Settings, tail: EventTail, printer: _Printer, follow: bool) -> None:
    data_dir = settings.data_dir
    if follow:
        if not data_dir.is_dir():
            raise _no_journal(data_dir)
        _follow(tail, printer)
        return
    if not events_dir(data_dir).is_dir():
        raise _no_journal(data_dir)
    printer.print(tail.poll())
    if not printer.printed:
        settings.terminal.note(f"no events in {events_dir(data_dir)}")


def events(
    ctx: typer.Context,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Keep printing new events as they happen, until Ctrl-C."
        ),
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print each event as one JSON object per line.")
    ] = False,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="DURATION",
            help="Only events of the last DURATION: 30s, 5m, 2h, 1d (a bare number is seconds).",
            show_default=False,
        ),
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            "-k",
            metavar="KIND",
            help="Only events of this kind (repeatable): process_exited, leader_elected, "
            "isr_shrunk, isr_expanded, replica_truncated, unclean_election, ...",
            show_default=False,
        ),
    ] = None,
    data_dir: DataDirOption = None,
) -> None:
    """Show what happened in the cluster: processes started, exited and restarted, brokers
    fenced, leaders elected, ISRs shrunk and expanded, replicas truncated, unclean elections.

    Each line is TIME SOURCE KIND MESSAGE (SOURCE is rlogd, controller or broker-N), oldest
    first; --json prints the events as rlogd, the controller and the brokers journaled them in
    DATA_DIR/events/*.jsonl. Works while the cluster runs and after it stopped."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    kinds = _check_kinds(kind or [])
    since_ts = time.time() - parse_duration(since) if since is not None else None
    tail = EventTail(settings.data_dir, since_ts)
    _show(settings, tail, _Printer(settings.terminal, json_out, kinds), follow)
