"""Kafka request/response over TCP for rlog's own processes and tools: brokers talking to the
controller and to each other, the CLI asking brokers what clients do not expose.

Two clients over the sans-IO ClientConnection: `KafkaClient` (asyncio, one connection, many
requests in flight, answered in order, through a callback or awaited) and
`BlockingKafkaClient` (a plain socket, one request at a time). Both raise `WireError` for
anything that ends the exchange: refused connection, timeout, a closed or garbled stream. After a
WireError the connection is closed; the next request opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import (
    CONNECTION_CLOSED,
    NEED_DATA,
    ClientConnection,
    RemoteProtocolError,
    Response,
)
from rlog.daemon.ordered_delay import OrderedDelay

Body = dict[str, Any]
RECEIVE_CHUNK_BYTES = 256 * 1024


class WireError(Exception):
    """The request got no answer: the peer is down, slow, or spoke garbage."""


class Gate(Protocol):
    """Chaos's hold on a link (daemon/broker/faults.py's OutboundGate)."""

    def open_now(self) -> bool:
        """True when a request may go at once (no cut, no delay): the common case, checked
        without a coroutine."""
        ...

    def delay_s(self) -> float:
        """The link's delay now: a request sent now goes this much later."""
        ...

    def check(self) -> None:
        """WireError if the link is cut."""
        ...


AnswerCallback = Callable[[Body | None, WireError | None], None]


class _Waiter:
    """A request sent (or queued until the connection is up) and waiting for its answer."""

    __slots__ = ("api_key", "body", "on_answer", "timeout_s", "timer", "version")

    def __init__(
        self, api_key: ApiKey, version: int, body: Body, timeout_s: float, on_answer: AnswerCallback
    ) -> None:
        self.api_key, self.version, self.body = api_key, version, body
        self.timeout_s, self.on_answer = timeout_s, on_answer
        self.timer: asyncio.TimerHandle | None = None


class _Stream(asyncio.Protocol):
    """One connection of a KafkaClient: what arrives goes to the client as it arrives."""

    def __init__(self, client: KafkaClient, codec: ClientConnection) -> None:
        self.client = client
        self.codec = codec
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio.Transport, but behave as one.
        self.transport = cast(asyncio.Transport, transport)
        with contextlib.suppress(OSError, AttributeError):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.client._received(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._lost(self)


class KafkaClient:
    """An asyncio connection to one Kafka listener that reconnects on the next request after
    a failure. Requests may be issued concurrently; each waits for its own answer.

    `send` is the callback form the broker's replication uses (no coroutine, task or future per
    request: a follower sends one Fetch per produce it replicates); `request` awaits the same.
    Bytes arrive through an asyncio Protocol, with no reader task.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "rlog",
        gate: Gate | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`gate`: consulted before each request; it may delay it or refuse it (chaos).
        `tls`: the listener speaks SSL; connect with this context (daemon/tls.py)."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.gate = gate
        self.tls = tls
        self._stream: _Stream | None = None  # set once connected and the queue is written
        self._connecting: asyncio.Task[None] | None = None
        self._waiting: deque[_Waiter] = deque()  # sent, in the order answers will come
        self._queued: list[_Waiter] = []  # waiting for the connection
        self._held: OrderedDelay[_Waiter] = OrderedDelay(self._pass_gate, self._spawn)  # chaos
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def request(self, api_key: ApiKey, version: int, body: Body, *, timeout_s: float) -> Body:
        """Send one request and return the response body; WireError if none came in time."""
        answer: asyncio.Future[Body] = asyncio.get_running_loop().create_future()

        def done(response: Body | None, error: WireError | None) -> None:
            if answer.done():
                return
            if error is not None:
                answer.set_exception(error)
            else:
                assert response is not None
                answer.set_result(response)

        self.send(api_key, version, body, timeout_s=timeout_s, on_answer=done)
        return await answer

    def send(
        self,
        api_key: ApiKey,
        version: int,
        body: Body,
        *,
        timeout_s: float,
        on_answer: AnswerCallback,
    ) -> None:
        """Send one request; `on_answer` gets its body, or the WireError that ended it, always
        later from the event loop, never inside this call (so a caller may send while it holds
        state it must not be re-entered in)."""
        waiter = _Waiter(api_key, version, body, timeout_s, on_answer)
        gate = self.gate
        if gate is not None and (self._held or not gate.open_now()):
            self._held.hold(waiter, gate.delay_s())
            return
        self._send_now(waiter)

    def _pass_gate(self, waiter: _Waiter) -> None:
        """A delayed request's turn (OrderedDelay keeps the order they were sent in): it goes,
        or fails if the link is cut now."""
        assert self.gate is not None
        try:
            self.gate.check()
        except WireError as error:
            self.close()
            waiter.on_answer(None, error)
            return
        self._send_now(waiter)

    def _send_now(self, waiter: _Waiter) -> None:
        loop = self._loop
        if loop is None:  # looked up once: get_running_loop() costs a getpid() per call
            loop = self._loop = asyncio.get_running_loop()
        waiter.timer = loop.call_later(waiter.timeout_s, self._timed_out, waiter)
        stream = self._stream
        if stream is None:
            self._queued.append(waiter)
            if self._connecting is None:
                self._connecting = loop.create_task(self._connect())
            return
        self._write(stream, waiter)

    def _write(self, stream: _Stream, waiter: _Waiter) -> None:
        frame = stream.codec.send_request(
            waiter.api_key, waiter.version, waiter.body, self.client_id
        )
        self._waiting.append(waiter)
        assert stream.transport is not None
        stream.transport.write(frame)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _transport, stream = await loop.create_connection(
                lambda: _Stream(self, ClientConnection()),
                self.host,
                self.port,
                ssl=self.tls,
                server_hostname=self.host if self.tls is not None else None,
            )
        except OSError as error:  # ssl.SSLError included: a refused certificate
            self._connecting = None
            self._fail(WireError(f"{self.address}: {error}"))
            return
        self._connecting = None
        queued, self._queued = self._queued, []
        self._stream = stream
        for waiter in queued:
            self._write(stream, waiter)

    def _received(self, stream: _Stream, data: bytes) -> None:
        if stream is not self._stream:
            return  # a connection given up on
        codec = stream.codec
        codec.receive_data(data)
        while True:
            try:
                event = codec.next_event()
            except RemoteProtocolError as failure:
                self._fail(WireError(f"{self.address}: {failure}"))
                return
            if event is NEED_DATA:
                return
            if event is CONNECTION_CLOSED:
                self._fail(WireError(f"{self.address}: connection closed"))
                return
            assert isinstance(event, Response)
            if self._waiting:
                waiter = self._waiting.popleft()
                if waiter.timer is not None:
                    waiter.timer.cancel()
                waiter.on_answer(event.body, None)

    def _lost(self, stream: _Stream) -> None:
        if stream is self._stream:
            self._fail(WireError(f"{self.address}: connection closed"))

    def _timed_out(self, waiter: _Waiter) -> None:
        # The answer may still come; the stream is out of step with us now, so start over.
        if waiter in self._waiting or waiter in self._queued:
            self._fail(
                WireError(
                    f"{self.address}: no answer to {waiter.api_key.name} in {waiter.timeout_s}s"
                )
            )

    def _fail(self, error: WireError) -> None:
        """Drop the connection; everything sent or queued on it hears `error`, from the loop."""
        stream, self._stream = self._stream, None
        if stream is not None and stream.transport is not None:
            stream.transport.close()
        connecting, self._connecting = self._connecting, None
        if connecting is not None and connecting is not asyncio.current_task():
            connecting.cancel()
        failed = [*self._waiting, *self._queued]
        self._waiting.clear()
        self._queued = []
        if not failed:
            return
        loop = asyncio.get_running_loop()
        for waiter in failed:
            if waiter.timer is not None:
                waiter.timer.cancel()
            loop.call_soon(waiter.on_answer, None, error)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        """Drop the connection; requests waiting on it fail with WireError."""
        error = WireError(f"{self.address}: connection closed")
        try:
            self._fail(error)
        except RuntimeError:  # no running loop (closed at exit): nothing can be waiting
            self._stream = None
            self._waiting.clear()
            self._queued = []


class BlockingKafkaClient:
    """One request at a time over a plain socket (or TLS with `tls`): for the CLI and tests."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        timeout_s: float = 10.0,
        client_id: str = "rlog",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self.client_id = client_id
        self.tls = tls
        self._socket: socket.socket | None = None
        self._codec = ClientConnection()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def request(self, api_key: ApiKey, version: int, body: Body) -> Body:
        try:
            if self._socket is None:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
                if self.tls is not None:
                    try:
                        sock = self.tls.wrap_socket(sock, server_hostname=self.host)
                    except OSError:
                        sock.close()
                        raise
                self._socket = sock
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
