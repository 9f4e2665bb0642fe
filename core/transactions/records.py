"""The records a transaction coordinator keeps in `__transaction_state`, in Kafka's own format.

Kafka's tools (kafka-dump-log --transaction-log-decoder, the console consumer with the
transaction log formatter) read these bytes, so rlog writes Kafka's schemas:

- key, version 0: `int16 version, TransactionalId (int16-length string)`;
- value, version 0 (not flexible): `int16 version, ProducerId int64, ProducerEpoch int16,
  TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions (nullable array:
  int32 count, -1 = null; each a Topic int16-length string and PartitionIds, an int32-count
  array of int32), TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64`.

Value version 1 is Kafka's first flexible version (compact strings and arrays, tagged fields):
it adds the tagged PreviousProducerId (tag 0), NextProducerId (tag 1) and
ClientTransactionVersion (tag 2), which only matter to the "bump the epoch after every
transaction" protocol (KIP-890 part 2, transaction version 2). rlog parses both versions, so a
log written by a newer Kafka loads, but writes version 0: this coordinator speaks transaction
version 0 (the epoch changes only on InitProducerId and on fencing), none of the tagged fields
carry anything it needs, and version 0 is the format every Kafka tool reads. Kafka itself writes
version 0 until the cluster's `transaction.version` feature is raised.

As Kafka does, an Empty transaction stores null partitions and every other state an array
(empty once a transaction completed). A null value is a tombstone: the transactional id expired.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

KEY_VERSION = 0
VALUE_VERSION = 0  # the version written
FLEXIBLE_VALUE_VERSION = 1  # read as well

NO_PRODUCER_ID = -1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

# The tags of value version 1.
_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


class CorruptTxnRecordError(ValueError):
    """A record of `__transaction_state` that does not parse."""


class TxnState(IntEnum):
    """A transaction's state; the value is the TransactionStatus byte Kafka stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka prints (DescribeTransactions, ListTransactions, kafka-transactions)."""
        return _KAFKA_NAMES[self]

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_KAFKA_NAME.get(name)


_KAFKA_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_KAFKA_NAME = {name: state for state, name in _KAFKA_NAMES.items()}


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One stored transaction state. `partitions` is None for a null array (Kafka writes that
    for Empty); parsing returns the partitions grouped by topic, in the stored order."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: tuple[tuple[str, int], ...] | None
    last_update_ms: int
    start_ms: int
    # Version 1's tagged fields; version 0 has none of them (these defaults are Kafka's).
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


# ---- encoding ----------------------------------------------------------------------------


def _string(value: str) -> bytes:
    data = value.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes does not fit an int16 length")
    return _I16.pack(len(data)) + data


def txn_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def _grouped(partitions: tuple[tuple[str, int], ...]) -> dict[str, list[int]]:
    """Partitions by topic, topics in order of first appearance (Kafka groups them the same
    way; the order inside the array carries no meaning)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def txn_value(value: TxnLogValue) -> bytes:
    """Version 0 bytes of a transaction state."""
    out = bytearray()
    out += _I16.pack(VALUE_VERSION)
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms)
    out += _I8.pack(int(value.state))
    if value.partitions is None:
        out += _I32.pack(-1)
    else:
        by_topic = _grouped(value.partitions)
        out += _I32.pack(len(by_topic))
        for topic, ids in by_topic.items():
            out += _string(topic)
            out += _I32.pack(len(ids))
            for partition in ids:
                out += _I32.pack(partition)
    out += _I64.pack(value.last_update_ms)
    out += _I64.pack(value.start_ms)
    return bytes(out)


# ---- decoding ----------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.at = 0

    def _take(self, layout: struct.Struct) -> int:
        if self.at + layout.size > len(self.data):
            raise CorruptTxnRecordError("record ends early")
        (value,) = layout.unpack_from(self.data, self.at)
        self.at += layout.size
        return int(value)

    def i8(self) -> int:
        return self._take(_I8)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            if self.at >= len(self.data):
                raise CorruptTxnRecordError("record ends early")
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise CorruptTxnRecordError("varint longer than 5 bytes")

    def chunk(self, length: int) -> bytes:
        if length < 0 or self.at + length > len(self.data):
            raise CorruptTxnRecordError("record ends early")
        data = self.data[self.at : self.at + length]
        self.at += length
        return data

    def text(self, length: int) -> str:
        try:
            return self.chunk(length).decode()
        except UnicodeDecodeError as error:
            raise CorruptTxnRecordError(f"string is not UTF-8: {error}") from error

    def string(self) -> str:
        length = self.i16()
        if length < 0:
            raise CorruptTxnRecordError("null where a string is required")
        return self.text(length)

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            raise CorruptTxnRecordError("null where a string is required")
        return self.text(length)

    def count(self, count: int) -> int:
        """An array count, checked against what is left (each element takes a byte at least)."""
        if count > len(self.data) - self.at:
            raise CorruptTxnRecordError(f"array of {count} elements in a shorter record")
        return count

    def tags(self) -> dict[int, bytes]:
        fields: dict[int, bytes] = {}
        for _ in range(self.count(self.uvarint())):
            tag = self.uvarint()
            fields[tag] = self.chunk(self.uvarint())
        return fields

    def done(self) -> None:
        if self.at != len(self.data):
            raise CorruptTxnRecordError(f"{len(self.data) - self.at} bytes after the record")


def parse_txn_key(data: bytes) -> str:
    """The transactional id of a key; other key versions are not Kafka's transaction keys."""
    reader = _Reader(data)
    version = reader.i16()
    if version != KEY_VERSION:
        raise CorruptTxnRecordError(f"unknown __transaction_state key version {version}")
    transactional_id = reader.string()
    reader.done()
    return transactional_id


def parse_txn_value(data: bytes | None) -> TxnLogValue | None:
    """A stored transaction state (version 0 or 1), or None for a tombstone."""
    if data is None:
        return None
    reader = _Reader(data)
    version = reader.i16()
    if version not in (VALUE_VERSION, FLEXIBLE_VALUE_VERSION):
        raise CorruptTxnRecordError(f"unknown __transaction_state value version {version}")
    flexible = version == FLEXIBLE_VALUE_VERSION
    producer_id = reader.i64()
    producer_epoch = reader.i16()
    timeout_ms = reader.i32()
    status = reader.i8()
    try:
        state = TxnState(status)
    except ValueError:
        raise CorruptTxnRecordError(f"unknown transaction status {status}") from None
    partitions: list[tuple[str, int]] | None = None
    topics = reader.uvarint() - 1 if flexible else reader.i32()
    if topics >= 0:
        partitions = []
        for _ in range(reader.count(topics)):
            topic = reader.compact_string() if flexible else reader.string()
            ids = reader.uvarint() - 1 if flexible else reader.i32()
            if ids < 0:
                raise CorruptTxnRecordError("null partition ids")
            partitions += [(topic, reader.i32()) for _ in range(reader.count(ids))]
            if flexible:
                reader.tags()  # the topic entry's own tagged fields: none known
    elif topics != -1:
        raise CorruptTxnRecordError(f"negative array length {topics}")
    last_update_ms = reader.i64()
    start_ms = reader.i64()
    previous, following, client_version = NO_PRODUCER_ID, NO_PRODUCER_ID, 0
    if flexible:
        tags = reader.tags()
        previous = _tagged(tags, _TAG_PREVIOUS_PRODUCER_ID, _I64, previous)
        following = _tagged(tags, _TAG_NEXT_PRODUCER_ID, _I64, following)
        client_version = _tagged(tags, _TAG_CLIENT_TRANSACTION_VERSION, _I16, client_version)
    reader.done()
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=None if partitions is None else tuple(partitions),
        last_update_ms=last_update_ms,
        start_ms=start_ms,
        previous_producer_id=previous,
        next_producer_id=following,
        client_transaction_version=client_version,
    )


def _tagged(tags: dict[int, bytes], tag: int, layout: struct.Struct, default: int) -> int:
    data = tags.get(tag)
    if data is None:
        return default
    if len(data) != layout.size:
        raise CorruptTxnRecordError(f"tagged field {tag} has {len(data)} bytes")
    return int(layout.unpack(data)[0])
