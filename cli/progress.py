"""A status line on stderr, rewritten in place while a long command runs.

Shown only where a person watches it: stderr is a terminal (and, for `rlog consume`, stdout is
not the same terminal, where records are printed). Anything else printed to stderr first erases
it (`Terminal.note` does), so notes and errors start on a clean line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

REFRESH_S = 0.25  # how often the line is rewritten
CLEAR = "\r\x1b[K"  # back to the line's start, erase it


def is_tty(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class LiveLine:
    def __init__(self, stream: IO[str], enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.shown = False
        self._next_at = 0.0

    def due(self, now: float) -> bool:
        """Whether it is time to rewrite the line (so callers compute its text only then)."""
        if not self.enabled or now < self._next_at:
            return False
        self._next_at = now + REFRESH_S
        return True

    def show(self, text: str) -> None:
        self.stream.write(CLEAR + text)
        self.stream.flush()
        self.shown = True

    def update(self, now: float, text: Callable[[], str]) -> None:
        if self.due(now):
            self.show(text())

    def clear(self) -> None:
        if self.shown:
            self.stream.write(CLEAR)
            self.stream.flush()
            self.shown = False
