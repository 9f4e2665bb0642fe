"""Sans-IO Kafka connections, in h11's shape: bytes in, events out; bodies in, bytes out.

The caller owns the socket:

    conn = ServerConnection()
    conn.receive_data(data)            # b"" = the peer closed
    event = conn.next_event()          # Request | NEED_DATA | CONNECTION_CLOSED
    parts = conn.send(request, body)   # bytes and file slices, in order: write / sendfile

`RemoteProtocolError` means the peer sent something we cannot accept: close the connection
(Kafka does the same). `LocalProtocolError` and `codec.EncodeError` mean we misused this API.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any

from .. import limits
from .apis import SUPPORTED, ApiKey, header_versions
from .codec import Codec, DecodeError, EncodeError, Part, codec_for
from .errors import ErrorCode

_SIZE = struct.Struct(">i")
_API_KEY_AND_VERSION = struct.Struct(">hh")

# The smallest request header: api_key i16, api_version i16, correlation_id i32, null client_id
# (i16 -1). A shorter frame cannot be a request.
REQUEST_HEADER_MIN_BYTES = 10
# A response header is at least its correlation_id.
RESPONSE_HEADER_MIN_BYTES = 4
# Consumed bytes are dropped from the receive buffer once this many pile up at its front, so a
# burst of pipelined small requests does not shift the buffer once per request.
_COMPACT_AFTER_BYTES = 64 * 1024


class RemoteProtocolError(Exception):
    """The peer broke the protocol; the connection must be closed."""


class LocalProtocolError(Exception):
    """This connection object was misused (a bug on our side)."""


class Signal(Enum):
    NEED_DATA = "NEED_DATA"
    CONNECTION_CLOSED = "CONNECTION_CLOSED"


NEED_DATA = Signal.NEED_DATA
CONNECTION_CLOSED = Signal.CONNECTION_CLOSED


@dataclass(slots=True)
class Request:
    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any] | None  # None only when unsupported_version
    size: int  # the frame's size prefix: bytes after the 4-byte prefix
    # An ApiVersions request above our range: answer with a v0 body and error 35
    # (UNSUPPORTED_VERSION), as Kafka does (KIP-511).
    unsupported_version: bool = False


@dataclass(slots=True)
class Response:
    correlation_id: int
    api_key: ApiKey
    api_version: int  # the version the body was decoded at (0 for an ApiVersions error 35)
    body: dict[str, Any]


class _FrameReader:
    """Splits a byte stream into size-prefixed frames, refusing bad sizes from the prefix alone.

    It holds what the caller fed and has not taken as frames; the caller bounds that by not
    reading from the socket while it has unanswered requests (limits.CONNECTION_INFLIGHT_MAX).
    """

    def __init__(self, min_bytes: int, max_bytes: int) -> None:
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        # Unconsumed input from _start on. A bytes chunk is kept as is (frames are views into it,
        # no copy); only a frame split across reads is gathered into a bytearray.
        self._buffer: bytes | bytearray = b""
        self._start = 0
        self._eof = False

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof:
            raise LocalProtocolError("data received after end of stream")
        if not data:
            self._eof = True
        elif self._start == len(self._buffer):
            self._buffer = data if isinstance(data, bytes) else bytes(data)
            self._start = 0
        else:
            if isinstance(self._buffer, bytes) or self._start >= _COMPACT_AFTER_BYTES:
                self._buffer = bytearray(memoryview(self._buffer)[self._start :])
                self._start = 0
            self._buffer += data

    def next_frame(self) -> memoryview | Signal:
        buffer = self._buffer
        begin = self._start + 4
        buffered = len(buffer) - self._start
        if buffered >= 4:
            (size,) = _SIZE.unpack_from(buffer, self._start)
            # Judge the size before the body arrives: an oversized frame is never buffered.
            if size < self.min_bytes or size > self.max_bytes:
                raise RemoteProtocolError(
                    f"frame size {size} outside [{self.min_bytes}, {self.max_bytes}]"
                )
            if buffered >= 4 + size:
                self._start = begin + size
                if self._start == len(buffer):
                    self._buffer, self._start = b"", 0
                if isinstance(buffer, bytes):
                    return memoryview(buffer)[begin : begin + size]
                # A bytearray is reused for later reads: copy the frame out of it.
                return memoryview(bytes(memoryview(buffer)[begin : begin + size]))
        if self._eof:
            if buffered:
                raise RemoteProtocolError(f"stream ended inside a frame ({buffered} bytes left)")
            return CONNECTION_CLOSED
        return NEED_DATA


def _frame(out: bytearray, parts: list[Part]) -> list[Part]:
    """Finish a frame whose first 4 bytes in `out` (or parts[0]) reserve the size prefix."""
    if not parts:
        _SIZE.pack_into(out, 0, len(out) - 4)
        return [bytes(out)]
    if out:
        parts.append(bytes(out))
    total = sum(len(p) if isinstance(p, bytes) else p.size for p in parts) - 4
    if total > 0x7FFFFFFF:
        raise EncodeError(f"frame of {total} bytes does not fit a size prefix")
    parts[0] = _SIZE.pack(total) + parts[0][4:]
    return parts


class ServerConnection:
    """The broker's side of one Kafka connection."""

    def __init__(
        self,
        max_request_bytes: int = limits.SOCKET_REQUEST_MAX_BYTES,
        supported: Mapping[ApiKey, tuple[int, int]] = SUPPORTED,
    ) -> None:
        """`supported`: the API versions this server serves (the broker's, or the controller's
        CONTROLLER_SUPPORTED); anything else is refused before its body is decoded."""
        self._reader = _FrameReader(REQUEST_HEADER_MIN_BYTES, max_request_bytes)
        self._supported = supported
        self._error: RemoteProtocolError | None = None

    @property
    def max_request_bytes(self) -> int:
        return self._reader.max_bytes

    @max_request_bytes.setter
    def max_request_bytes(self, value: int) -> None:
        """Change the bound for the frames not yet taken (a SASL listener raises it once the
        client authenticated: sasl.server.max.receive.size before that)."""
        self._reader.max_bytes = value

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes read from the socket; b"" means the peer closed its side."""
        self._reader.feed(data)

    def next_event(self) -> Request | Signal:
        """The next complete request, NEED_DATA, or CONNECTION_CLOSED (after EOF)."""
        if self._error is not None:
            raise self._error  # once broken, always broken: the caller must close
        try:
            frame = self._reader.next_frame()
            if isinstance(frame, Signal):
                return frame
            return _parse_request(frame, self._supported)
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def send(self, request: Request, body: dict[str, Any]) -> list[Part]:
        """The response frame to `request`: bytes parts and file slices, in write order."""
        if request.unsupported_version:
            route = _route(ApiKey.API_VERSIONS, 0)  # the error answer is a v0 body, header v0
        else:
            route = _route(request.api_key, request.api_version)
        out = bytearray(4)  # the size prefix, filled in by _frame
        parts: list[Part] = []
        route.response_header.encode_into(out, parts, {"correlation_id": request.correlation_id})
        route.response_body.encode_into(out, parts, body)
        return _frame(out, parts)


@dataclass(frozen=True, slots=True)
class _Route:
    """The four codecs of one API version, looked up once."""

    request_header: Codec
    request_body: Codec
    response_header: Codec
    response_body: Codec


@cache
def _route(api_key: ApiKey, version: int) -> _Route:
    request_header, response_header = header_versions(api_key, version)
    return _Route(
        codec_for("RequestHeader", request_header),
        codec_for(api_key.request_schema, version),
        codec_for("ResponseHeader", response_header),
        codec_for(api_key.response_schema, version),
    )


_API_KEYS = {int(key): key for key in ApiKey}


def _parse_request(frame: memoryview, supported: Mapping[ApiKey, tuple[int, int]]) -> Request:
    raw_key, version = _API_KEY_AND_VERSION.unpack_from(frame, 0)
    api_key = _API_KEYS.get(raw_key)
    if api_key is None:
        raise RemoteProtocolError(f"unknown api key {raw_key}")
    versions = supported.get(api_key)
    if versions is None:
        raise RemoteProtocolError(f"api {api_key.name} is not served")
    try:
        if not versions[0] <= version <= versions[1]:
            if api_key != ApiKey.API_VERSIONS:
                raise RemoteProtocolError(f"{api_key.name} v{version} is not supported")
            # Its body may be a version we cannot read; the header's first fields are stable.
            header, _ = codec_for("RequestHeader", 1).decode(frame)
            return Request(
                api_key,
                version,
                header["correlation_id"],
                header["client_id"],
                None,
                len(frame),
                unsupported_version=True,
            )
        route = _route(api_key, version)
        header, pos = route.request_header.decode(frame)
        # Bytes after the body are ignored, as Kafka does, for forward compatibility.
        body, _ = route.request_body.decode(frame, pos)
    except DecodeError as exc:
        raise RemoteProtocolError(str(exc)) from None
    return Request(
        api_key, version, header["correlation_id"], header["client_id"], body, len(frame)
    )


class ClientConnection:
    """The client's side, for tests and tools: requests out, responses matched in order."""

    def __init__(self, max_response_bytes: int = limits.CLIENT_RESPONSE_MAX_BYTES) -> None:
        self._reader = _FrameReader(RESPONSE_HEADER_MIN_BYTES, max_response_bytes)
        self._pending: deque[tuple[int, ApiKey, int]] = deque()
        self._next_correlation_id = 0
        self._error: RemoteProtocolError | None = None

    @property
    def pending(self) -> int:
        """Requests sent that still await a response."""
        return len(self._pending)

    def send_request(
        self,
        api_key: ApiKey | int,
        version: int,
        body: dict[str, Any],
        client_id: str | None = "rlog",
    ) -> bytes:
        """The request frame; its response is expected in order (none for Produce acks=0)."""
        api_key = ApiKey(api_key)
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        out = bytearray(4)
        parts: list[Part] = []
        header = {
            "request_api_key": int(api_key),
            "request_api_version": version,
            "correlation_id": correlation_id,
            "client_id": client_id,
        }
        route = _route(api_key, version)
        route.request_header.encode_into(out, parts, header)
        route.request_body.encode_into(out, parts, body)
        if parts:
            raise LocalProtocolError("requests carry records as bytes, not file slices")
        if not (api_key == ApiKey.PRODUCE and body.get("acks") == 0):
            self._pending.append((correlation_id, api_key, version))
        return _frame(out, parts)[0]

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._reader.feed(data)

    def next_event(self) -> Response | Signal:
        if self._error is not None:
            raise self._error
        try:
            frame = self._reader.next_frame()
            if isinstance(frame, Signal):
                return frame
            return self._parse_response(frame)
        except RemoteProtocolError as exc:
            self._error = exc
            raise

    def _parse_response(self, frame: memoryview) -> Response:
        if not self._pending:
            raise RemoteProtocolError("response without a pending request")
        expected, api_key, version = self._pending.popleft()
        try:
            route = _route(api_key, version)
            header, pos = route.response_header.decode(frame)
            if header["correlation_id"] != expected:
                raise RemoteProtocolError(
                    f"correlation id {header['correlation_id']}, expected {expected}"
                )
            if api_key == ApiKey.API_VERSIONS and _is_unsupported_version(frame, pos):
                version = 0  # the broker answered in v0, whatever we asked (KIP-511)
                route = _route(api_key, version)
            body, _ = route.response_body.decode(frame, pos)
        except DecodeError as exc:
            raise RemoteProtocolError(str(exc)) from None
        return Response(expected, api_key, version, body)


def _is_unsupported_version(frame: memoryview, pos: int) -> bool:
    # ErrorCode is the first field of every ApiVersions response version.
    return frame[pos : pos + 2] == ErrorCode.UNSUPPORTED_VERSION.to_bytes(2, "big")


__all__ = [
    "CONNECTION_CLOSED",
    "NEED_DATA",
    "ClientConnection",
    "LocalProtocolError",
    "RemoteProtocolError",
    "Request",
    "Response",
    "ServerConnection",
    "Signal",
]
