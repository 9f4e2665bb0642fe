"""Which `__consumer_offsets` partition holds a group: Kafka's `abs(groupId.hashCode) % n`.

Kafka clients and tools (and a person comparing rlog with Kafka) expect the same group to land on
the same partition, so this is Java's `String.hashCode` over UTF-16 code units, masked to a
non-negative int as Kafka's `Utils.abs` does.
"""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode()`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16, as a signed int32."""
    value = 0
    data = text.encode("utf-16-be")
    for at in range(0, len(data), 2):
        value = (31 * value + (data[at] << 8 | data[at + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def group_partition(group_id: str, partitions: int) -> int:
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions
