"""Producer ids for idempotent producers, unique across the cluster.

The controller hands out blocks of ids (KIP-730's AllocateProducerIds) and records each block in
the metadata log before answering, so no two brokers, and no broker after a restart, ever hand
out the same id. The broker takes ids from its current block and asks for the next when it runs
out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

BlockSource = Callable[[], Awaitable[tuple[int, int]]]


class ProducerIdAllocator:
    def __init__(self, next_block: BlockSource) -> None:
        """`next_block()` returns (first id, count) of a fresh block, or raises."""
        self._next_block = next_block
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                start, count = await self._next_block()
                self._next, self._end = start, start + count
            producer_id = self._next
            self._next += 1
            return producer_id
