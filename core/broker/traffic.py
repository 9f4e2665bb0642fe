"""What a broker's clients moved: records and bytes produced to it and fetched from it.

Kafka's BytesInPerSec / MessagesInPerSec and BytesOutPerSec, as counters since the broker
started. Replication and the group coordinator's own writes are not counted: this is client
traffic. Records out counts the offsets a consumer fetch returned (from its fetch offset to the
end of the last batch sent), known without reading the batches.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrafficCounters:
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
