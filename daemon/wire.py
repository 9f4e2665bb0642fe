"""Kafka request/response over TCP for rlog's own processes and tools: brokers talking to the
controller and to each other, the CLI asking brokers what clients do not expose.

Two clients over the sans-IO ClientConnection: `KafkaClient` (asyncio, one connection, many
requests in flight, answered in order) and `BlockingKafkaClient` (a plain socket, one request at
a time). Both raise `WireError` for anything that ends the exchange: refused connection, timeout,
a closed or garbled stream. After a WireError the connection is closed; the next request opens a
new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import (
    CONNECTION_CLOSED,
    NEED_DATA,
    ClientConnection,
    RemoteProtocolError,
    Response,
)

Body = dict[str, Any]
RECEIVE_CHUNK_BYTES = 256 * 1024


class WireError(Exception):
    """The request got no answer: the peer is down, slow, or spoke garbage."""


class KafkaClient:
    """An asyncio connection to one Kafka listener that reconnects on the next request after
    a failure. Requests may be issued concurrently; each waits for its own answer.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "rlog",
        gate: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`gate`: awaited before each request; it may delay it or raise WireError (chaos)."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.gate = gate
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._codec = ClientConnection()
        self._waiting: deque[asyncio.Future[Response]] = deque()
        self._receiver: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def request(self, api_key: ApiKey, version: int, body: Body, *, timeout_s: float) -> Body:
        """Send one request and return the response body; WireError if none came in time."""
        if self.gate is not None:
            try:
                await self.gate()
            except WireError:
                self.close()
                raise
        try:
            async with asyncio.timeout(timeout_s):
                await self._connect()
                assert self._writer is not None
                answer: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
                self._waiting.append(answer)
                self._writer.write(self._codec.send_request(api_key, version, body, self.client_id))
                response = await answer
        except TimeoutError:
            # The answer may still come; the stream is out of step with us now, so start over.
            self.close()
            raise WireError(
                f"{self.address}: no answer to {api_key.name} in {timeout_s}s"
            ) from None
        except (OSError, RemoteProtocolError) as error:
            self.close()
            raise WireError(f"{self.address}: {error}") from None
        return response.body

    async def _connect(self) -> None:
        if self._writer is not None:
            return
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is not None:
                return
            reader, writer = await asyncio.open_connection(self.host, self.port)
            with contextlib.suppress(OSError):
                writer.get_extra_info("socket").setsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
                )
            self._reader, self._writer = reader, writer
            self._codec = ClientConnection()
            self._receiver = asyncio.create_task(self._receive(reader, self._codec))

    async def _receive(self, reader: asyncio.StreamReader, codec: ClientConnection) -> None:
        error: Exception = WireError(f"{self.address}: connection closed")
        try:
            while True:
                event = codec.next_event()
                if event is NEED_DATA:
                    codec.receive_data(await reader.read(RECEIVE_CHUNK_BYTES))
                    continue
                if event is CONNECTION_CLOSED:
                    break
                assert isinstance(event, Response)
                if self._waiting:
                    answer = self._waiting.popleft()
                    if not answer.done():
                        answer.set_result(event)
        except (OSError, RemoteProtocolError) as failure:
            error = WireError(f"{self.address}: {failure}")
        finally:
            if codec is self._codec:
                self._fail_waiting(error)
                self._drop_connection()

    def _fail_waiting(self, error: Exception) -> None:
        while self._waiting:
            answer = self._waiting.popleft()
            if not answer.done():
                answer.set_exception(error)

    def _drop_connection(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    def close(self) -> None:
        """Drop the connection; requests waiting on it fail with WireError."""
        receiver = self._receiver
        self._receiver = None
        self._fail_waiting(WireError(f"{self.address}: connection closed"))
        self._drop_connection()
        self._codec = ClientConnection()
        if receiver is not None and receiver is not asyncio.current_task():
            receiver.cancel()


class BlockingKafkaClient:
    """One request at a time over a plain socket: for the CLI and tests."""

    def __init__(
        self, host: str, port: int, *, timeout_s: float = 10.0, client_id: str = "rlog"
    ) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.client_id = client_id
        self._socket: socket.socket | None = None
        self._codec = ClientConnection()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def request(self, api_key: ApiKey, version: int, body: Body) -> Body:
        try:
            if self._socket is None:
                self._socket = socket.create_connection(
                    (self.host, self.port), timeout=self.timeout_s
                )
                self._codec = ClientConnection()
            self._socket.sendall(self._codec.send_request(api_key, version, body, self.client_id))
            while True:
                event = self._codec.next_event()
                if event is NEED_DATA:
                    self._codec.receive_data(self._socket.recv(RECEIVE_CHUNK_BYTES))
                    continue
                if event is CONNECTION_CLOSED:
                    raise WireError(f"{self.address}: connection closed")
                assert isinstance(event, Response)
                return event.body
        except (OSError, RemoteProtocolError) as error:
            self.close()
            reason = "timed out" if isinstance(error, TimeoutError) else str(error)
            raise WireError(f"{self.address}: {reason}") from None
        except WireError:
            self.close()
            raise

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> BlockingKafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
