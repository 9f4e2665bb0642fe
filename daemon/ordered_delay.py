"""Chaos delay that keeps a stream's order, for the broker's listener and rlog's wire client.

Each item goes no sooner than the delay in force when it came, and never before an item that
came ahead of it. A slow link delays a TCP stream, it does not reorder it: a request that
overtook one still delayed (once the delay shrinks or is healed) would reach the log first, and
an idempotent producer's next batch would find its sequence out of order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")


class OrderedDelay(Generic[Item]):
    def __init__(
        self,
        release: Callable[[Item], None],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
    ) -> None:
        """`release` takes each item when its time comes; `spawn` runs the task that waits."""
        self._release = release
        self._spawn = spawn
        self._held: deque[tuple[float, Item]] = deque()  # in arrival order, with when they go

    def __bool__(self) -> bool:
        """Items are still held: a new one must queue behind them, even without a delay."""
        return bool(self._held)

    def hold(self, item: Item, delay_s: float) -> None:
        self._held.append((asyncio.get_running_loop().time() + delay_s, item))
        if len(self._held) == 1:
            self._spawn(self._release_in_order())

    def clear(self) -> None:
        self._held.clear()

    async def _release_in_order(self) -> None:
        loop = asyncio.get_running_loop()
        while self._held:
            due, item = self._held[0]
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            self._held.popleft()
            self._release(item)
