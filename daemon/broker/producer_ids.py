"""Producer ids that stay unique across broker restarts.

Ids are handed out from blocks; the end of the current block is made durable before any id in it
is used, so after a crash the broker starts at the next block and never reuses an id (Kafka's
controller allocates blocks the same way, KIP-730).
"""

from __future__ import annotations

import os
from pathlib import Path

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, data_dir: Path, broker_id: int) -> None:
        self._path = data_dir / "producer-id-block"
        # Brokers are separate clusters until the controller lands; give each its own id space
        # so two brokers never hand out the same id.
        self._floor = broker_id << 40
        self._next = self._floor
        self._block_end = self._floor
        if self._path.exists():
            self._next = self._block_end = max(self._floor, int(self._path.read_text().strip()))

    def allocate(self) -> int:
        if self._next >= self._block_end:
            self._reserve(self._next + BLOCK_SIZE)
        producer_id = self._next
        self._next += 1
        return producer_id

    def _reserve(self, block_end: int) -> None:
        temporary = self._path.with_suffix(".tmp")
        with open(temporary, "w") as handle:
            handle.write(f"{block_end}\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self._path)
        self._block_end = block_end
