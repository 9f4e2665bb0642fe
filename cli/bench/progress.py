"""What a bench shows while it runs.

On a terminal (stderr is a TTY): one progress line on stderr, rewritten in place, with the
records done, the rate and the p99 so far. Otherwise the perf tools' window lines, one every
``--reporting-interval`` (5 s), on stdout as Kafka prints them, or on stderr under ``--json``.
Either way stdout ends up holding only the result (and those window lines), so it pipes cleanly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from rlog.cli.progress import REFRESH_S, LiveLine, is_tty


class Reporter:
    def __init__(
        self,
        stream: IO[str],
        *,
        started: float,
        total: int,
        verb: str,
        count: Callable[[], int],
        p99: Callable[[], float | None] | None,
        window: Callable[[float], str | None] | None,
        window_s: float,
        emit: Callable[[str], None],
        tty: bool | None = None,
    ) -> None:
        self.stream = stream
        self.started = started
        self.total = total
        self.verb = verb
        self.count = count
        self.p99 = p99
        self.window = window
        self.emit = emit
        self.tty = is_tty(stream) if tty is None else tty
        self.live = LiveLine(stream, self.tty)
        self.every_s = REFRESH_S if self.tty else window_s
        self.next_at = started + self.every_s

    def tick(self, now: float) -> None:
        """Called often from the bench's loops; does something only when it is time."""
        if now < self.next_at:
            return
        self.next_at = now + self.every_s
        if self.tty:
            self.live.show(self.progress_line(now))
        elif self.window is not None:
            line = self.window(now)
            if line is not None:
                self.emit(line)

    def progress_line(self, now: float) -> str:
        done = self.count()
        rate = done / max(now - self.started, 1e-9)
        line = f"{done}/{self.total} records {self.verb}, {rate:.1f} records/sec"
        p99 = self.p99() if self.p99 is not None else None
        if p99 is not None:
            line += f", p99 {p99:.2f} ms"
        return line

    def finish(self) -> None:
        """Erase the progress line, so the result starts on a clean line."""
        self.live.clear()
