"""The controller's I/O loop around the sans-IO `Controller`: requests in, durable records out.

    future = service.submit(request)    # step() now; the answer comes once its records are durable
    service.tick()                      # every TICK_INTERVAL_MS: session expiry, rebalancing

Requests that arrive in one turn of the event loop share one drain, so a burst of heartbeats
costs one fsync: each `Ready` is appended to the metadata log as one batch and fsync'd, then
`advance`d, and only then are its responses handed to the waiting handlers (persist before
send). The drain is synchronous (no await between append and advance), so at every await point
the log end is the committed end and a fetch never sees a record that is not durable.

A disk error while appending ends the controller: its records were not made durable, so nothing
that depends on them may be answered. `failed` is set and the main loop exits non-zero; rlogd
restarts the process, which replays the durable log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Hashable

from rlog.core.controller import Controller, ControllerRequest, ControllerResponse
from rlog.core.metadata.log_store import append_records
from rlog.core.storage.log import Log
from rlog.daemon.controller.record_events import Event, record_events
from rlog.daemon.controller.record_lines import describe_records
from rlog.daemon.events import EventJournal

log = logging.getLogger("rlog.controller")

TICK_INTERVAL_MS = 100


def now_ms() -> int:
    """The controller's clock: monotonic, so a wall-clock step never expires every session."""
    return time.monotonic_ns() // 1_000_000


class ControllerFailed(Exception):
    """The controller stopped (a disk error); no answer will come."""


class ControllerService:
    def __init__(
        self, controller: Controller, metadata_log: Log, journal: EventJournal | None = None
    ) -> None:
        self.controller = controller
        self.log = metadata_log
        self.journal = journal  # committed records' events (rlog.daemon.events), if given
        self._tokens = itertools.count()
        self._waiting: dict[Hashable, asyncio.Future[ControllerResponse]] = {}
        self._drain_scheduled = False
        self._committed = asyncio.Event()  # replaced after every commit; waiters hold the old one
        self.failed = asyncio.Event()  # set once the controller must stop

    # ---- the committed log, for Fetch ----

    @property
    def committed_end_offset(self) -> int:
        """One past the last durable, advanced record (the metadata log's high watermark)."""
        return self.controller.image.last_offset + 1

    def commit_signal(self) -> asyncio.Event:
        """An event set at the next commit; take it before checking for new records."""
        return self._committed

    # ---- requests ----

    def new_token(self) -> Hashable:
        return next(self._tokens)

    def submit(
        self, make_request: Callable[[Hashable], ControllerRequest]
    ) -> asyncio.Future[ControllerResponse]:
        """Step `make_request(token)` into the controller; the future resolves with its response
        once the records it depends on are durable.
        """
        future: asyncio.Future[ControllerResponse] = asyncio.get_running_loop().create_future()
        if self.failed.is_set():
            future.set_exception(ControllerFailed("the controller is stopping"))
            return future
        token = self.new_token()
        request = make_request(token)
        before = self.controller.next_offset
        try:
            self.controller.step(request, now_ms())
        except Exception:
            if self.controller.next_offset != before:
                # Records were emitted before the failure: the pending image can no longer be
                # trusted. Stop; the restarted controller replays only what is durable.
                log.critical("controller state broken by %r; stopping", request, exc_info=True)
                self.failed.set()
            raise
        self._waiting[token] = future
        self._schedule_drain()
        return future

    def tick(self) -> None:
        if self.failed.is_set():
            return
        try:
            self.controller.tick(now_ms())
        except Exception:
            log.critical("controller tick failed; stopping", exc_info=True)
            self.failed.set()
            return
        self._schedule_drain()

    # ---- persisting ----

    def _schedule_drain(self) -> None:
        if not self._drain_scheduled and self.controller.has_ready():
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        try:
            self._persist_ready()
        except Exception:  # a broken invariant: a bug, and the state can no longer be trusted
            log.critical("controller failed while committing records; stopping", exc_info=True)
            self.failed.set()
            self._fail_waiting()

    def _persist_ready(self) -> None:
        while not self.failed.is_set() and self.controller.has_ready():
            ready = self.controller.ready()
            timestamp_ms = int(time.time() * 1000)
            try:
                append_records(self.log, ready.records, timestamp_ms, base_offset=ready.base_offset)
            except OSError as error:
                last = ready.base_offset + len(ready.records) - 1
                log.critical(
                    "cannot write the metadata log (%s): records %d..%d were not made durable; "
                    "stopping the controller",
                    error,
                    ready.base_offset,
                    last,
                )
                self.failed.set()
                self._fail_waiting()
                return
            # Described against the image before these records, so each line shows its own step.
            lines = describe_records(self.controller.image, ready.base_offset, ready.records)
            events = record_events(self.controller.image, ready.records) if self.journal else []
            self.controller.advance(ready)
            for line in lines:
                log.info("%s", line)
            self._journal(events)
            if ready.records:
                self._committed.set()
                self._committed = asyncio.Event()
            for token, response in ready.responses:
                future = self._waiting.pop(token, None)
                if future is not None and not future.done():  # done: the client went away
                    future.set_result(response)

    def _journal(self, events: list[Event]) -> None:
        if self.journal is not None:
            for event in events:
                self.journal.record(event.kind, event.message, **event.fields)

    def _fail_waiting(self) -> None:
        waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(ControllerFailed("the controller stopped after a failure"))
