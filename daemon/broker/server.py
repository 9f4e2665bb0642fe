"""The broker's Kafka listener: sockets in, decoded requests to handlers, responses out in order.

Each connection has a reader (bytes → the sans-IO ServerConnection → requests, each handled in its
own task so a long-polling fetch does not hold up the connection's reading) and a writer that sends
responses strictly in request order, as Kafka clients require. Log bytes in a fetch response go
from the segment file to the socket with sendfile, never through Python objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from rlog.core import limits
from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.connection import (
    CONNECTION_CLOSED,
    NEED_DATA,
    RemoteProtocolError,
    Request,
    ServerConnection,
)
from rlog.daemon.broker.faults import Faults, peer_of
from rlog.daemon.faults_file import CLIENTS

log = logging.getLogger(__name__)

# Bytes asked of the socket per read: a 1 MiB produce request arrives in a few reads.
RECEIVE_CHUNK_BYTES = 256 * 1024

_Pending = tuple[Request, "asyncio.Task[dict[str, Any] | None]"] | None


# The address of the client whose request is being handled (group members' `client_host`).
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="")


class RequestHandler(Protocol):
    async def handle(self, request: Request) -> dict[str, Any] | None: ...


class BrokerServer:
    """A Kafka listener: the broker's, and the controller's (with its own `supported` table)."""

    def __init__(
        self,
        handlers: RequestHandler,
        max_request_bytes: int,
        supported: Mapping[ApiKey, tuple[int, int]] = SUPPORTED,
        faults: Faults | None = None,
    ) -> None:
        """`faults`: chaos rules (a broker's); requests from a cut peer close their connection."""
        self.handlers = handlers
        self.max_request_bytes = max_request_bytes
        self.supported = supported
        self.faults = faults
        self._listener: socket.socket | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def listen(self, host: str, port: int) -> None:
        """Bind now, so a port in use is reported before the broker says it is up."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
        except OSError:
            listener.close()
            raise
        listener.listen(512)
        listener.setblocking(False)
        self._listener = listener

    async def serve(self) -> None:
        assert self._listener is not None, "listen() first"
        loop = asyncio.get_running_loop()
        while True:
            client, address = await loop.sock_accept(self._listener)
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            task = asyncio.create_task(self._serve_connection(client, address))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _serve_connection(self, client: socket.socket, address: Any) -> None:
        loop = asyncio.get_running_loop()
        if isinstance(address, tuple) and address:
            CLIENT_HOST.set(f"/{address[0]}")  # Kafka shows hosts as "/127.0.0.1"
        codec = ServerConnection(self.max_request_bytes, self.supported)
        # Bounded: a client pipelining more requests than this waits for answers before we read on.
        pending: asyncio.Queue[_Pending] = asyncio.Queue(limits.CONNECTION_INFLIGHT_MAX)
        writer = asyncio.create_task(self._write_responses(client, codec, pending))
        try:
            while not writer.done():
                event = codec.next_event()
                if event is NEED_DATA:
                    data = await loop.sock_recv(client, RECEIVE_CHUNK_BYTES)
                    codec.receive_data(data)
                    continue
                if event is CONNECTION_CLOSED:
                    break
                assert isinstance(event, Request)
                if self.faults is not None and self.faults.is_cut(peer_of(event.client_id)):
                    break  # the link is cut: the peer sees its connection drop
                task = asyncio.create_task(self._handle(event))
                await pending.put((event, task))
        except RemoteProtocolError as error:
            log.info("closing connection from %s: %s", address, error)
        except OSError:
            pass  # the peer went away
        finally:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await pending.put(None)
                await writer
            writer.cancel()
            client.close()

    async def _handle(self, request: Request) -> dict[str, Any] | None:
        if self.faults is not None:
            await self.faults.delay()
        return await self.handlers.handle(request)

    async def _write_responses(
        self, client: socket.socket, codec: ServerConnection, pending: asyncio.Queue[_Pending]
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while (item := await pending.get()) is not None:
                request, task = item
                try:
                    body = await task
                except Exception:
                    log.exception(
                        "handler for api %d v%d failed; closing the connection",
                        request.api_key,
                        request.api_version,
                    )
                    _hang_up(client)
                    return
                if body is None:
                    continue  # acks=0 produce: no response
                if self._loses_answer(request, body):
                    _hang_up(client)  # the client sees its connection drop, and retries
                    return
                for part in codec.send(request, body):
                    if isinstance(part, bytes | bytearray | memoryview):
                        await loop.sock_sendall(client, part)
                    else:
                        await _sendfile(client, part.fileno(), part.position, part.size)
        except OSError:
            pass  # the peer went away; the reader sees it too
        finally:
            while not pending.empty():
                item = pending.get_nowait()
                if item is not None:
                    item[1].cancel()

    def _loses_answer(self, request: Request, body: dict[str, Any]) -> bool:
        """Chaos: drop this answer to a Kafka client's Produce that appended something. An
        answer that appended nothing (every partition an error) makes no duplicate, so it does
        not use up a loss. The rule is about clients: requests from rlog's own processes are
        always answered."""
        if self.faults is None or request.api_key != ApiKey.PRODUCE:
            return False
        if peer_of(request.client_id) != CLIENTS or not _appended(body):
            return False
        return self.faults.take_lost_answer(request.client_id, request.correlation_id)


def _appended(produce_response: dict[str, Any]) -> bool:
    """Whether a Produce answer reports any partition written."""
    return any(
        partition.get("error_code") == 0
        for topic in produce_response.get("responses", ())
        for partition in topic.get("partition_responses", ())
    )


def _hang_up(client: socket.socket) -> None:
    """End the connection now, not when the client next sends: the reader, waiting in
    sock_recv, sees the end of the stream and closes the socket."""
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_RDWR)


async def _sendfile(client: socket.socket, file_descriptor: int, offset: int, count: int) -> None:
    """os.sendfile on a non-blocking socket, waiting for writability when the buffer is full."""
    loop = asyncio.get_running_loop()
    while count > 0:
        try:
            sent = os.sendfile(client.fileno(), file_descriptor, offset, count)
        except BlockingIOError:
            writable = loop.create_future()
            loop.add_writer(client.fileno(), _resolve, writable)
            try:
                await writable
            finally:
                loop.remove_writer(client.fileno())
            continue
        if sent == 0:
            # The file is shorter than the slice we promised in the size prefix: the frame can't
            # be completed, so the connection must end.
            raise ConnectionError("log file shrank under a fetch response")
        offset += sent
        count -= sent


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
