"""Which authorization denials to journal, so a client retrying a denied request in a loop
cannot fill the disk: one event per (principal, operation, resource) per window, and the next
one after the window says how many were left out meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlog.core.security.acl import AclOperation, ResourceType

# One journal event per key per this long.
DENIAL_WINDOW_MS = 5_000
# Keys remembered at most; past it the oldest windows are forgotten (a forgotten key's next
# denial is journaled at once, which is the safe side).
DENIAL_KEYS_MAX = 10_000

DenialKey = tuple[str, AclOperation, ResourceType, str]


@dataclass(slots=True)
class _Window:
    opened_ms: int
    suppressed: int = 0


class DenialThrottle:
    """`admit(key, now_ms)`: None to leave this denial out of the journal, or how many denials
    of the key were left out since the last one journaled (0 for the first)."""

    def __init__(self, window_ms: int = DENIAL_WINDOW_MS, keys_max: int = DENIAL_KEYS_MAX) -> None:
        self.window_ms = window_ms
        self.keys_max = keys_max
        self._windows: dict[DenialKey, _Window] = {}

    def admit(self, key: DenialKey, now_ms: int) -> int | None:
        window = self._windows.get(key)
        if window is not None and now_ms - window.opened_ms < self.window_ms:
            window.suppressed += 1
            return None
        suppressed = window.suppressed if window is not None else 0
        if window is None and len(self._windows) >= self.keys_max:
            self._forget_old(now_ms)
        self._windows[key] = _Window(now_ms)
        return suppressed

    def _forget_old(self, now_ms: int) -> None:
        """Drop the closed windows; if every window is still open, the oldest half."""
        windows = self._windows
        for key in [k for k, w in windows.items() if now_ms - w.opened_ms >= self.window_ms]:
            del windows[key]
        if len(windows) >= self.keys_max:
            for key in list(windows)[: len(windows) // 2]:  # insertion order: oldest first
                del windows[key]
