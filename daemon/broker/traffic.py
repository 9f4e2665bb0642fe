"""What a broker's clients moved: records and bytes produced to it and fetched from it.

Kafka's BytesInPerSec / MessagesInPerSec and BytesOutPerSec, as counters since the broker
started. Replication and the group coordinator's own writes are not counted: this is client
traffic. Records out counts the offsets a consumer fetch returned (from its fetch offset to the
end of the last batch sent), known without reading the batches.

The broker writes the counters to `traffic.json` in its data dir every second (replaced
atomically), for `rlog tui` to turn into rates.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TRAFFIC_FILE = "traffic.json"


@dataclass
class Traffic:
    records_in: int = 0
    bytes_in: int = 0
    records_out: int = 0
    bytes_out: int = 0

    def produced(self, records: int, size: int) -> None:
        self.records_in += records
        self.bytes_in += size

    def fetched(self, fetch_offset: int, next_offset: int, size: int) -> None:
        if next_offset > fetch_offset:
            self.records_out += next_offset - fetch_offset
        self.bytes_out += size

    def write(self, data_dir: Path) -> None:
        """Replace `traffic.json`: readers see the old or the new counters, never half."""
        document = {"ts": time.time(), "pid": os.getpid(), **asdict(self)}
        path = data_dir / TRAFFIC_FILE
        scratch = path.with_suffix(".json.tmp")
        try:
            scratch.write_text(json.dumps(document))
            os.replace(scratch, path)
        except OSError:
            pass  # a full disk: the counters are a view, the broker goes on


def read_traffic(broker_dir: Path) -> dict[str, Any] | None:
    """A broker's last written counters, or None (not running yet, or unreadable)."""
    try:
        document = json.loads((broker_dir / TRAFFIC_FILE).read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None
