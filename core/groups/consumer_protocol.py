"""The "consumer" embedded protocol of classic JoinGroup and SyncGroup (Kafka's ConsumerProtocol),
for classic members of a consumer-protocol group: the broker reads their subscription (topics
and, from v1, the partitions they still own) and writes their assignment itself.

Both are a version (int16) and then that version's fields; a newer version than the schema's
keeps the older fields first, so it is read as the newest known one.
"""

from __future__ import annotations

from collections.abc import Mapping

from rlog.core.protocol.codec import DecodeError, codec_for
from rlog.core.protocol.schema import load_message

Partitions = Mapping[str, frozenset[int]]


def _newest(name: str) -> int:
    high = load_message(name).valid_versions.high
    assert high is not None
    return high


def subscription_version(metadata: bytes) -> int:
    return int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0


def decode_subscription(metadata: bytes) -> tuple[list[str], dict[str, frozenset[int]]] | None:
    """(topics, owned partitions) of a ConsumerProtocolSubscription; None if it does not parse."""
    version = subscription_version(metadata)
    if version < 0:
        return None
    version = min(version, _newest("ConsumerProtocolSubscription"))
    try:
        body, _end = codec_for("ConsumerProtocolSubscription", version).decode(metadata, 2)
    except DecodeError:
        return None
    owned: dict[str, frozenset[int]] = {}
    for entry in body.get("owned_partitions") or []:
        if entry["partitions"]:
            owned[entry["topic"]] = owned.get(entry["topic"], frozenset()) | frozenset(
                entry["partitions"]
            )
    return list(body["topics"]), owned


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """The partitions of a ConsumerProtocolAssignment (a classic member's SyncGroup answer);
    nothing if it is empty or does not parse."""
    version = subscription_version(data)
    if version < 0 or len(data) < 2:
        return {}
    version = min(version, _newest("ConsumerProtocolAssignment"))
    try:
        body, _end = codec_for("ConsumerProtocolAssignment", version).decode(data, 2)
    except DecodeError:
        return {}
    assigned: dict[str, frozenset[int]] = {}
    for entry in body["assigned_partitions"]:
        if entry["partitions"]:
            assigned[entry["topic"]] = assigned.get(entry["topic"], frozenset()) | frozenset(
                entry["partitions"]
            )
    return assigned


def encode_assignment(assigned: Partitions, version: int) -> bytes:
    """A ConsumerProtocolAssignment at the member's subscription version (as Kafka answers)."""
    version = max(0, min(version, _newest("ConsumerProtocolAssignment")))
    body = {
        "assigned_partitions": [
            {"topic": topic, "partitions": sorted(parts)}
            for topic, parts in sorted(assigned.items())
            if parts
        ],
        "user_data": None,
    }
    encoded = codec_for("ConsumerProtocolAssignment", version).encode(body)
    return version.to_bytes(2, "big") + encoded
