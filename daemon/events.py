"""The cluster's event journal: what happened, when, in which process, as JSON lines.

Each process appends to its own file in ``DATA_DIR/events/`` (``rlogd.jsonl``,
``controller.jsonl``, ``broker-N.jsonl``), so no process waits for another and none needs a
lock: a line is written with one ``write()`` on a file opened in append mode, which the kernel
appends whole. A line is one event::

    {"ts": 1795000000.123, "source": "controller", "kind": "leader_elected",
     "message": "partition orders-0: leader 2 (was 1), leader epoch 3", "topic": "orders", ...}

``ts`` is wall-clock seconds (a float), ``source`` the writing process, ``kind`` one of
:data:`KINDS`, ``message`` one readable line; the other fields depend on the kind.

Readers (``rlog events``, the TUI) merge the files by ``ts``: :func:`read_events` once,
:func:`follow_events` (or :class:`EventTail` for a poll loop) as they grow. A line a crash left
half written is skipped, and the next writer to open the file ends it first, so it never
swallows the line after it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlog.daemon.data_dir import JOURNAL_SUFFIX, events_dir
from rlog.daemon.data_dir import journal_path as journal_path  # where each process writes

log = logging.getLogger(__name__)

RESERVED = ("ts", "source", "kind", "message")

# What rlogd records about its children.
PROCESS_KINDS = (
    "rlogd_started",
    "rlogd_stopped",
    "process_started",
    "process_exited",
    "process_restarted",
    "process_paused",
    "process_resumed",
    "chaos",  # links cut or healed, a delay, a full or stalled disk
    "config_reloaded",  # an edit of the config file applied (or found to need a restart)
    "config_rejected",  # an invalid edit: the running config stays
)
# What the controller records as metadata records are committed.
METADATA_KINDS = (
    "broker_registered",
    "broker_fenced",
    "broker_unfenced",
    "topic_created",
    "partition_created",
    "topic_deleted",
    "leader_elected",
    "partition_offline",
    "partition_recovering",
    "unclean_election",
    "isr_shrunk",
    "isr_expanded",
    "config_changed",
)
# What a broker records about its own replicas and its log dir.
REPLICA_KINDS = (
    "replica_truncated",
    "log_dir_failed",  # a failed or hung disk took the log dir offline (daemon/broker/log_dir.py)
)
# What a broker's group coordinator records about the groups it coordinates.
GROUP_KINDS = ("group_rebalancing", "group_stable", "group_empty", "group_member_removed")
# What a broker records when it refuses a request by its ACLs (daemon/broker/authorization.py).
SECURITY_KINDS = ("authorization_denied",)
KINDS = PROCESS_KINDS + METADATA_KINDS + REPLICA_KINDS + GROUP_KINDS + SECURITY_KINDS


class EventJournal:
    """One process's append-only journal file. Writing never raises: an event that cannot be
    written is logged (once per failure streak) and dropped, as the journal is a record of the
    cluster, not part of it."""

    def __init__(self, path: Path | str, source: str) -> None:
        self.path = Path(path)
        self.source = source
        self._failing = False
        self._fd: int | None = None
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            self._end_torn_line()
        except OSError as error:
            self._failed(error)

    def _end_torn_line(self) -> None:
        """A previous writer that died mid-line left no newline: end that line, so this
        writer's first event is not glued to it."""
        assert self._fd is not None
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            os.write(self._fd, b"\n")

    def _failed(self, error: OSError) -> None:
        if not self._failing:
            log.warning("cannot write the event journal %s: %s", self.path, error)
        self._failing = True

    def record(self, kind: str, message: str, **fields: Any) -> dict[str, Any]:
        """Append one event (now) and return it."""
        event: dict[str, Any] = {
            "ts": time.time(),
            "source": self.source,
            "kind": kind,
            "message": message,
        }
        event.update((k, v) for k, v in fields.items() if k not in RESERVED)
        line = json.dumps(event, separators=(",", ":"), default=str) + "\n"
        if self._fd is None:
            return event
        try:
            os.write(self._fd, line.encode())
            self._failing = False
        except OSError as error:
            self._failed(error)
        return event

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# -- reading ------------------------------------------------------------------------------


def _parse(line: bytes) -> dict[str, Any] | None:
    """One journal line as an event, or None for a torn or foreign line."""
    try:
        event = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(event, dict) or not isinstance(event.get("ts"), int | float):
        return None
    if not isinstance(event.get("kind"), str):
        return None
    return event


def _journal_files(data_dir: Path) -> list[Path]:
    directory = events_dir(data_dir)
    try:
        return sorted(p for p in directory.iterdir() if p.name.endswith(JOURNAL_SUFFIX))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _by_time(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(events, key=lambda event: event["ts"])


def read_events(data_dir: Path, since_ts: float | None = None) -> list[dict[str, Any]]:
    """Every event in ``data_dir``'s journals (at or after ``since_ts``), oldest first."""
    events: list[dict[str, Any]] = []
    for path in _journal_files(data_dir):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for line in data.split(b"\n"):
            event = _parse(line) if line.strip() else None
            if event is not None and (since_ts is None or event["ts"] >= since_ts):
                events.append(event)
    return _by_time(events)


class EventTail:
    """Follows the journals of a data dir: each :meth:`poll` returns the events appended since
    the last one (the first poll: all of them, from ``since_ts``), oldest first. Journals that
    appear later (a broker starting) are picked up; a journal cut short (a purged cluster) is
    read again from its start. Only whole lines are taken; a line being written waits."""

    def __init__(self, data_dir: Path, since_ts: float | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.since_ts = since_ts
        self._offsets: dict[Path, int] = {}

    def poll(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for path in _journal_files(self.data_dir):
            events += self._read_new(path)
        return _by_time(events)

    def _read_new(self, path: Path) -> list[dict[str, Any]]:
        offset = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as journal:
                if os.fstat(journal.fileno()).st_size < offset:
                    offset = 0  # the file was replaced or cut: read it again
                journal.seek(offset)
                data = journal.read()
        except OSError:
            return []
        complete = data.rfind(b"\n") + 1
        self._offsets[path] = offset + complete
        events = []
        for line in data[:complete].split(b"\n"):
            event = _parse(line) if line.strip() else None
            if event is not None and (self.since_ts is None or event["ts"] >= self.since_ts):
                events.append(event)
        return events


def follow_events(
    data_dir: Path, since_ts: float | None = None, poll_interval_s: float = 0.25
) -> Iterator[dict[str, Any]]:
    """The events already journaled (at or after ``since_ts``), then each new one as it is
    written, forever: stop by closing the generator (or Ctrl-C)."""
    tail = EventTail(data_dir, since_ts)
    while True:
        yield from tail.poll()
        time.sleep(poll_interval_s)
