"""A small blocking Kafka client for the executors: Metadata v1 to find a partition's leader and
Fetch v5 to read its raw record batches.

librdkafka turns every record into a Python object; reading the batches' bytes ourselves lets
`batch_decode.py` build Arrow columns from them directly. Plaintext only: rlog serves no TLS or
SASL. The driver still plans with confluent-kafka (planning.py).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Mapping
from dataclasses import dataclass

METADATA_KEY, METADATA_VERSION = 3, 1
FETCH_KEY, FETCH_VERSION = 1, 5

NONE = 0
OFFSET_OUT_OF_RANGE = 1
# Errors that a new leader or a moment's wait cures; the reader looks the leader up again.
RETRIABLE_ERRORS = {
    3,  # UNKNOWN_TOPIC_OR_PARTITION (metadata not propagated yet)
    5,  # LEADER_NOT_AVAILABLE
    6,  # NOT_LEADER_OR_FOLLOWER
    7,  # REQUEST_TIMED_OUT
    13,  # NETWORK_EXCEPTION
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
}

READ_UNCOMMITTED, READ_COMMITTED = 0, 1

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqqq")  # partition, error, high watermark, LSO, log start


class KafkaWireError(RuntimeError):
    """The broker's answer could not be used (a bad frame, or an error that is not retriable)."""


class RetriableWireError(KafkaWireError):
    """A connection or leadership problem: look the leader up again and retry."""


@dataclass(frozen=True)
class FetchSettings:
    """What the `kafka.*` options say about fetching, with defaults for bulk reads."""

    bootstrap: tuple[tuple[str, int], ...]
    client_id: str
    isolation_level: int
    max_wait_ms: int
    max_bytes: int
    partition_max_bytes: int
    socket_timeout_s: float

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> FetchSettings:
        protocol = config.get("security.protocol", "plaintext").lower()
        if protocol != "plaintext":
            raise KafkaWireError(
                f"kafka.security.protocol={protocol!r} is not supported: rlog speaks plaintext"
            )
        isolation = config.get("isolation.level", "read_committed").lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise KafkaWireError(f"kafka.isolation.level={isolation!r} is not a Kafka level")
        return cls(
            bootstrap=tuple(_host_port(s) for s in config["bootstrap.servers"].split(",") if s),
            client_id=config.get("client.id", "rlog-spark"),
            isolation_level=READ_COMMITTED if isolation == "read_committed" else READ_UNCOMMITTED,
            max_wait_ms=int(config.get("fetch.wait.max.ms", "500")),
            max_bytes=int(config.get("fetch.max.bytes", str(64 << 20))),
            partition_max_bytes=int(config.get("max.partition.fetch.bytes", str(16 << 20))),
            socket_timeout_s=int(config.get("socket.timeout.ms", "60000")) / 1000,
        )


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise KafkaWireError(f"bootstrap server {text!r} is not host:port")
    return host.strip("[]"), int(port)


@dataclass
class FetchedPartition:
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    # (producer id, first offset) of each aborted transaction in the answer (read_committed).
    aborted: list[tuple[int, int]]
    # The answer's whole frame and where the partition's record batches lie in it.
    frame: bytearray
    records_start: int
    records_end: int


class Connection:
    """One broker connection; requests are sent and answered in order."""

    def __init__(self, address: tuple[str, int], settings: FetchSettings) -> None:
        self.address = address
        self.settings = settings
        self._client_id = settings.client_id.encode()
        self._next_correlation = 0
        self._waiting: list[int] = []
        try:
            self._socket = socket.create_connection(address, timeout=settings.socket_timeout_s)
        except OSError as error:
            raise RetriableWireError(f"connecting to {address}: {error}") from error
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def close(self) -> None:
        self._socket.close()

    def send(self, api_key: int, version: int, body: bytes) -> None:
        correlation = self._next_correlation
        self._next_correlation += 1
        header = struct.pack(">hhih", api_key, version, correlation, len(self._client_id))
        size = len(header) + len(self._client_id) + len(body)
        try:
            self._socket.sendall(_INT32.pack(size) + header + self._client_id + body)
        except OSError as error:
            raise RetriableWireError(f"sending to {self.address}: {error}") from error
        self._waiting.append(correlation)

    def receive(self) -> bytearray:
        """The next answer, without its size and correlation id."""
        size = _INT32.unpack(self._read_exactly(4))[0]
        frame = self._read_exactly(size)
        correlation = _INT32.unpack_from(frame)[0]
        if not self._waiting or correlation != self._waiting.pop(0):
            raise KafkaWireError(f"{self.address} answered correlation id {correlation} unasked")
        return frame

    def _read_exactly(self, size: int) -> bytearray:
        buffer = bytearray(size)
        view = memoryview(buffer)
        filled = 0
        try:
            while filled < size:
                got = self._socket.recv_into(view[filled:])
                if got == 0:
                    raise RetriableWireError(f"{self.address} closed the connection")
                filled += got
        except OSError as error:
            raise RetriableWireError(f"reading from {self.address}: {error}") from error
        return buffer


def _string(text: str) -> bytes:
    encoded = text.encode()
    return _INT16.pack(len(encoded)) + encoded


class _Reader:
    """Sequential reads of a Kafka answer's fields."""

    def __init__(self, frame: bytearray, position: int) -> None:
        self.frame = frame
        self.position = position

    def unpack(self, layout: struct.Struct) -> tuple:
        values = layout.unpack_from(self.frame, self.position)
        self.position += layout.size
        return values

    def int16(self) -> int:
        return self.unpack(_INT16)[0]

    def int32(self) -> int:
        return self.unpack(_INT32)[0]

    def string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        text = bytes(self.frame[self.position : self.position + size]).decode()
        self.position += size
        return text


def find_leader(connection: Connection, topic: str, partition: int) -> tuple[str, int] | None:
    """The leader's (host, port) of topic-partition, or None while it has none."""
    connection.send(METADATA_KEY, METADATA_VERSION, _INT32.pack(1) + _string(topic))
    reader = _Reader(connection.receive(), 4)
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(reader.int32()):
        node_id = reader.int32()
        host = reader.string() or ""
        port = reader.int32()
        reader.string()  # rack
        brokers[node_id] = (host, port)
    reader.int32()  # controller id
    for _ in range(reader.int32()):
        topic_error = reader.int16()
        name = reader.string()
        reader.position += 1  # is_internal
        for _ in range(reader.int32()):
            error, index, leader = reader.unpack(struct.Struct(">hii"))
            for _ in range(2):  # replicas, isr
                count = reader.int32()
                reader.position += 4 * count
            if name == topic and index == partition:
                if error in RETRIABLE_ERRORS or leader < 0 or leader not in brokers:
                    return None
                if error != NONE:
                    raise KafkaWireError(f"metadata of {topic}-{partition}: error {error}")
                return brokers[leader]
        if name == topic and topic_error not in (NONE, *RETRIABLE_ERRORS):
            raise KafkaWireError(f"metadata of topic {topic!r}: error {topic_error}")
    return None


class PartitionClient:
    """Fetches one topic-partition from its leader, following leader changes."""

    def __init__(self, settings: FetchSettings, topic: str, partition: int) -> None:
        self.settings = settings
        self.topic = topic
        self.partition = partition
        self._leader: Connection | None = None
        self._request_head = (
            struct.pack(
                ">iiiib",
                -1,  # replica id: a consumer
                settings.max_wait_ms,
                1,  # min bytes
                settings.max_bytes,
                settings.isolation_level,
            )
            + _INT32.pack(1)
            + _string(topic)
            + _INT32.pack(1)
        )
        self._in_flight = 0

    def close(self) -> None:
        if self._leader is not None:
            self._leader.close()
            self._leader = None
        self._in_flight = 0

    def request(self, offset: int) -> None:
        """Ask for the batches from `offset` on; `answer()` collects them. Asking for the next
        range before decoding this one lets the broker work while we decode."""
        if self._leader is None:
            self._leader = self._connect_leader()
        body = self._request_head + struct.pack(
            ">iqqi", self.partition, offset, -1, self.settings.partition_max_bytes
        )
        try:
            self._leader.send(FETCH_KEY, FETCH_VERSION, body)
        except RetriableWireError:
            self.close()
            raise
        self._in_flight += 1

    def answer(self) -> FetchedPartition:
        assert self._leader is not None and self._in_flight > 0
        try:
            frame = self._leader.receive()
        except RetriableWireError:
            self.close()
            raise
        self._in_flight -= 1
        fetched = self._parse(frame)
        if fetched.error in RETRIABLE_ERRORS:
            self.close()
            raise RetriableWireError(f"fetching {self.topic}-{self.partition}: {fetched.error}")
        return fetched

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _connect_leader(self) -> Connection:
        for host, port in self.settings.bootstrap:
            try:
                bootstrap = Connection((host, port), self.settings)
            except RetriableWireError:
                continue
            try:
                leader = find_leader(bootstrap, self.topic, self.partition)
            except RetriableWireError:
                bootstrap.close()
                continue
            if leader is None:
                bootstrap.close()
                raise RetriableWireError(f"{self.topic}-{self.partition} has no leader yet")
            if leader == (host, port):
                return bootstrap
            bootstrap.close()
            return Connection(leader, self.settings)
        raise RetriableWireError(f"no bootstrap server of {self.settings.bootstrap} answered")

    def _parse(self, frame: bytearray) -> FetchedPartition:
        reader = _Reader(frame, 4)
        reader.int32()  # throttle time
        for _ in range(reader.int32()):
            name = reader.string()
            for _ in range(reader.int32()):
                index, error, high, stable, log_start = reader.unpack(_PARTITION_HEAD)
                aborted: list[tuple[int, int]] = []
                count = reader.int32()
                for _ in range(max(count, 0)):
                    aborted.append(reader.unpack(struct.Struct(">qq")))
                size = reader.int32()
                start = reader.position
                reader.position += max(size, 0)
                if name == self.topic and index == self.partition:
                    return FetchedPartition(
                        error, high, stable, log_start, aborted, frame, start, start + max(size, 0)
                    )
        raise KafkaWireError(f"the fetch answer has no {self.topic}-{self.partition}")


def retry_pause(attempt: int) -> None:
    """Back off a little more each time a leader is missing or a connection failed."""
    time.sleep(min(0.05 * (2**attempt), 1.0))
