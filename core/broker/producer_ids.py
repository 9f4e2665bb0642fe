"""Producer ids for InitProducerId, unique across the cluster and across restarts.

The controller hands out blocks of ids (KIP-730's AllocateProducerIds) and records each block
in the metadata log before answering. The broker takes ids from its current block; when it runs
out it asks for the next (the Ready's `wants_producer_ids`) and the callers wait. A failed
request answers every waiter with None, so none waits forever.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

IdCallback = Callable[[int | None], None]


class ProducerIdPool:
    def __init__(self) -> None:
        self._next = 0
        self._end = 0
        self._waiting: deque[IdCallback] = deque()
        self._asked = False  # a block request is out
        self.wants_block = False  # ask the controller for one (read and cleared by the core)

    def take(self, on_id: IdCallback) -> None:
        """Call `on_id` with a fresh id now, or once a block arrives (None if none can)."""
        if self._next < self._end and not self._waiting:
            producer_id = self._next
            self._next += 1
            on_id(producer_id)
            return
        self._waiting.append(on_id)
        if not self._asked:
            self._asked = True
            self.wants_block = True

    def granted(self, first: int, count: int) -> None:
        """The controller's answer: ids [first, first + count), or count 0 if it failed."""
        self._asked = False
        if count <= 0:
            waiting, self._waiting = self._waiting, deque()
            for on_id in waiting:
                on_id(None)
            return
        self._next, self._end = first, first + count
        while self._waiting and self._next < self._end:
            producer_id = self._next
            self._next += 1
            self._waiting.popleft()(producer_id)
        if self._waiting:
            self._asked = True
            self.wants_block = True
