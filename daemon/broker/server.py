"""The broker's Kafka listener: sockets in, decoded requests to handlers, responses out in order.

The small-request path is the hot one (a producer with linger.ms=0 sends one request per record,
and every produce is followed by the followers' fetches), so a connection costs no coroutine per
request and no event-loop registration per read:

- the socket stays registered for reading (`add_reader`) while the connection may read; each
  wake-up reads what is there and parses every whole request in it;
- requests the broker core serves (Produce, Fetch, the group and transaction APIs) go straight
  to it with a callback that takes the answer; only the others (Metadata, admin requests
  forwarded to the controller) run as a task each;
- answers go out strictly in request order, as Kafka clients require: each connection keeps its
  requests in arrival order and writes the answered ones at the head, once per loop pass, in one
  `sendmsg` where they fit, so pipelined answers share a system call;
- log bytes in a fetch answer go from the segment file to the socket with sendfile, never
  through Python objects, except small slices (up to SMALL_SLICE_BYTES), which are read and sent
  with the rest of the answer: one pread is cheaper than the two extra system calls around a
  sendfile between the answer's other parts;
- a connection stops reading while it has CONNECTION_INFLIGHT_MAX requests unanswered or more
  than OUTPUT_BACKLOG_MAX bytes not yet taken by its client, so a client that pipelines without
  reading cannot make the broker buffer without bound.

An SSL listener's connections pass their bytes through a `TlsSession` (daemon/tls.py): what is
read is decrypted before the codec sees it, and each loop pass's answers are encrypted together,
log slices included (read into memory: no sendfile under TLS).

A SASL listener's connections own a `SaslSession` (core/security/sasl.py), asked about every
request before it is handled: SaslHandshake and SaslAuthenticate are answered by the session
itself, other requests are served only once the client authenticated (before that the
connection is closed, as Kafka does), and a failed authentication is answered, then closed.
Before authentication a request may be at most `sasl.server.max.receive.size` bytes: a larger
size prefix closes the connection before its body is read.

With an `Authorization` (daemon/broker/authorization.py: `authorizer.class.name` is set), each
request is ruled on before it is handled, with the connection's principal: ANONYMOUS on
PLAINTEXT, the client certificate's subject on SSL, the authenticated user on SASL. A refused
request is answered with its error, a partly denied one is served for the rest and its answer
completed (core/security/enforcement.py). Without one, nothing here looks at principals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
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
from rlog.core.security import authorized_operations
from rlog.core.security.authorized_operations import OperationsOf
from rlog.core.security.enforcement import Finish, Requester
from rlog.core.security.principal_mapping import NoMatchingRule, PrincipalMapper
from rlog.core.security.sasl import ANONYMOUS, SASL_HANDSHAKE, SaslSession, Verdict
from rlog.core.storage.files import FileSlice
from rlog.daemon.broker.authorization import (
    Authorization,
    acl_host,
    certificate_principal,
    refusal,
)
from rlog.daemon.broker.faults import Faults, peer_of
from rlog.daemon.faults_file import CLIENTS
from rlog.daemon.ordered_delay import OrderedDelay
from rlog.daemon.tls import TlsSession

log = logging.getLogger(__name__)

# Bytes asked of the socket per read: a 1 MiB produce request arrives in a few reads.
RECEIVE_CHUNK_BYTES = 256 * 1024
# Log slices up to this size are read and sent with the answer's other bytes (see above).
SMALL_SLICE_BYTES = 64 * 1024
# A connection reads no more requests while this many answer bytes wait for its client.
OUTPUT_BACKLOG_MAX = 8 * 1024 * 1024
# Buffers per sendmsg: Linux's IOV_MAX is 1024.
SENDMSG_BUFFERS_MAX = 512

Body = dict[str, Any]
Reply = Callable[[Body | None], None]

# The address of the client whose request is being handled (group members' `client_host`), for
# handlers that run as tasks.
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="")
# The listener the request came in on: answers name brokers by that listener's endpoints.
LISTENER: ContextVar[str] = ContextVar("listener", default="PLAINTEXT")


class RequestHandler(Protocol):
    def serve_now(self, request: Request, client_host: str, reply: Reply) -> bool:
        """Hand `request` to whoever answers it through `reply` (at once or later); False if it
        needs `handle`, a coroutine, instead."""
        ...

    async def handle(self, request: Request) -> Body | None: ...


class BrokerServer:
    """A Kafka listener: the broker's, and the controller's (with its own `supported` table)."""

    def __init__(
        self,
        handlers: RequestHandler,
        max_request_bytes: int,
        supported: Mapping[ApiKey, tuple[int, int]] = SUPPORTED,
        faults: Faults | None = None,
        *,
        listener_name: str = "PLAINTEXT",
        tls: ssl.SSLContext | None = None,
        sasl: Callable[[], SaslSession] | None = None,
        sasl_max_receive_bytes: int = 524_288,
        authorization: Authorization | None = None,
        trusted: bool = False,
        principal_mapper: PrincipalMapper | None = None,
    ) -> None:
        """`faults`: chaos rules (a broker's); requests from a cut peer close their connection.
        `tls`: the listener speaks SSL with this context. `sasl`: its clients authenticate, each
        connection with a session this makes, in requests of at most `sasl_max_receive_bytes`
        until they have. `authorization`: every request is checked against the ACLs, except on
        a `trusted` listener (the inter-broker one when it is PLAINTEXT: authorization.py).
        `principal_mapper`: ssl.principal.mapping.rules, naming an SSL client's certificate; a
        certificate they give no name is shut out (None: DEFAULT, which names every one)."""
        self.handlers = handlers
        self.max_request_bytes = max_request_bytes
        self.supported = supported
        self.faults = faults
        self.listener_name = listener_name
        self.tls = tls
        self.sasl = sasl
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
        self.authorization = authorization if not trusted else None
        self.principal_mapper = principal_mapper or PrincipalMapper()
        self._listener: socket.socket | None = None
        self._connections: set[_Connection] = set()
        self.reauthentications = 0  # SASL sessions renewed (KIP-368)
        self.requests_received = 0  # every request read, clients' and peers' (RequestsPerSec)
        self.requests_by_api: dict[int, int] = {}  # the same, per API key

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
            host = f"/{address[0]}" if isinstance(address, tuple) and address else ""
            connection = _Connection(self, client, host, address)
            self._connections.add(connection)
            connection.start()

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for connection in list(self._connections):
            connection.close()

    def forget(self, connection: _Connection) -> None:
        self._connections.discard(connection)

    def loses_answer(self, request: Request, body: Body) -> bool:
        """Chaos: drop this answer to a Kafka client's Produce that appended something. An
        answer that appended nothing (every partition an error) makes no duplicate, so it does
        not use up a loss. The rule is about clients: requests from rlog's own processes are
        always answered."""
        faults = self.faults
        if faults is None or faults.answers_to_lose <= 0 or request.api_key != ApiKey.PRODUCE:
            return False
        if peer_of(request.client_id) != CLIENTS or not _appended(body):
            return False
        return self.faults.take_lost_answer(request.client_id, request.correlation_id)


class _Slot:
    """One request of a connection, in arrival order, and its answer once there is one."""

    __slots__ = ("answered", "body", "finish", "request")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.finish: Finish | None = None  # authorization completes the answer (denied parts)
        self.answered = False
        self.body: Body | None = None


class _Connection:
    """One client connection: a reader callback, requests in order, an output queue."""

    def __init__(
        self, server: BrokerServer, sock: socket.socket, client_host: str, address: Any
    ) -> None:
        self.server = server
        self.sock = sock
        self.fd = sock.fileno()
        self.client_host = client_host
        self.address = address
        self.codec = ServerConnection(server.max_request_bytes, server.supported)
        self.loop = asyncio.get_running_loop()
        self.slots: deque[_Slot] = deque()
        # Chaos delay: requests read but not started yet, started in the order they came.
        self.delayed: OrderedDelay[_Slot] = OrderedDelay(self._start, self._spawn)
        self.output: deque[bytes | memoryview | FileSlice] = deque()
        self.output_bytes = 0
        self.reading = False
        self.writing = False
        self.flush_scheduled = False
        self.input_ended = False  # the client closed its side: answer what it asked, then close
        self.closed = False
        self.tasks: set[asyncio.Task[None]] = set()
        tls = server.tls
        self.tls = TlsSession(tls, server_side=True) if tls is not None else None
        self.plaintext: list[bytes | memoryview] = []  # TLS: answers of this pass, to encrypt
        self.sasl = server.sasl() if server.sasl is not None else None
        if self.sasl is not None:
            self.codec.max_request_bytes = min(
                server.max_request_bytes, server.sasl_max_receive_bytes
            )
        # Who the requests are checked as (authorization only), once known for good: None until
        # then, and None for good when the connection's principal is a super user.
        self.requester: Requester | None = None
        self.requester_known = False
        # An SSL client's certificate must have a name under ssl.principal.mapping.rules (as
        # Kafka's authentication requires one): looked at once, at the first request.
        self.certificate_named = (
            self.tls is None or self.sasl is not None or server.principal_mapper.is_default
        )
        self._certificate_principal: str | None = None  # SSL: worked out once, when first needed

    # ---- reading ----

    def start(self) -> None:
        self._resume_reading()

    def _resume_reading(self) -> None:
        if not self.reading and not self.closed and not self.input_ended:
            self.loop.add_reader(self.fd, self._on_readable)
            self.reading = True

    def _pause_reading(self) -> None:
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False

    def _on_readable(self) -> None:
        try:
            data = self.sock.recv(RECEIVE_CHUNK_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()  # the peer went away
            return
        if self.tls is not None:
            ended = not data
            data = self._decrypt(data)
            if self.closed:
                return
            if ended or self.tls.closed_by_peer:
                if data:
                    self.codec.receive_data(data)
                data = b""  # the end of the stream, for the codec
            elif not data:
                return  # a handshake step, or a record not yet whole
        self.codec.receive_data(data)
        self._take_requests()

    def _decrypt(self, ciphertext: bytes) -> bytes:
        """The plaintext `ciphertext` completes; handshake answers go out at once. A failed
        handshake or a bad record closes the connection, after the alert that says why."""
        tls = self.tls
        assert tls is not None
        try:
            plaintext = tls.receive(ciphertext)
        except ssl.SSLEOFError:  # the client went away without close_notify, as most do
            self.close()
            return b""
        except ssl.SSLError as error:
            log.info("TLS with %s failed: %s", self.address, error.reason or error)
            self._queue_ciphertext()
            with contextlib.suppress(OSError):
                self._write_output()
            self.close()
            return b""
        if self._queue_ciphertext():
            self._write()
        return plaintext

    def _queue_ciphertext(self) -> bool:
        """Move what the TLS session has for the socket to the output; whether there was any."""
        assert self.tls is not None
        ciphertext = self.tls.take_output()
        if ciphertext:
            self.output_bytes += len(ciphertext)
            self.output.append(ciphertext)
        return bool(ciphertext)

    def _take_requests(self) -> None:
        """Start every whole request buffered, up to the in-flight bound."""
        server = self.server
        while not self.closed and len(self.slots) < limits.CONNECTION_INFLIGHT_MAX:
            try:
                event = self.codec.next_event()
            except RemoteProtocolError as error:
                log.info("closing connection from %s: %s", self.address, error)
                self.close()
                return
            if event is NEED_DATA:
                break
            if event is CONNECTION_CLOSED:
                self._pause_reading()
                self.input_ended = True
                self._close_if_done()
                return
            assert isinstance(event, Request)
            server.requests_received += 1
            by_api = server.requests_by_api
            by_api[event.api_key] = by_api.get(event.api_key, 0) + 1
            faults = server.faults
            if faults is not None and faults.rules.cut and faults.is_cut(peer_of(event.client_id)):
                self.close()  # the link is cut: the peer sees its connection drop
                return
            if self.sasl is not None and not self._admitted(event):
                if self.closed or self.input_ended:
                    return
                continue
            slot = _Slot(event)
            self.slots.append(slot)
            if faults is not None and (faults.rules.delay_ms or self.delayed):
                self.delayed.hold(slot, faults.rules.delay_ms / 1000)
            else:
                self._start(slot)
        self._pace_reading()

    def _admitted(self, request: Request) -> bool:
        """Whether the SASL session lets `request` be handled as usual; if not, the session has
        answered it (SaslHandshake, SaslAuthenticate) or the connection is closed."""
        sasl = self.sasl
        assert sasl is not None
        now = time.time_ns() // 1_000_000
        verdict = sasl.admit(request.api_key, now)
        if verdict is Verdict.SERVE:
            return True
        if verdict is Verdict.CLOSE:
            log.info(
                "closing %s: api %d before SASL authentication (or after its session expired)",
                self.address,
                request.api_key,
            )
            self.close()
            return False
        body = request.body or {}
        reauthenticating = sasl.reauthenticating
        if request.api_key == SASL_HANDSHAKE:
            answer = sasl.handshake(request.api_version, body, now)
        else:
            answer = sasl.authenticate(request.api_version, body, now)
        if answer.failure is not None:
            log.info("SASL authentication of %s failed: %s", self.address, answer.failure)
        elif reauthenticating and not sasl.reauthenticating:
            self.server.reauthentications += 1
            log.info("%s re-authenticated as %s (KIP-368)", self.address, sasl.principal)
        elif sasl.authenticated and not sasl.reauthenticating:
            log.debug("%s authenticated as %s", self.address, sasl.principal)
            self.codec.max_request_bytes = self.server.max_request_bytes
        slot = _Slot(request)
        self.slots.append(slot)
        if answer.close:  # answer, then close once it is written (_close_if_done)
            self._pause_reading()
            self.input_ended = True
        self._answer(slot, answer.body)
        return False

    def _pace_reading(self) -> None:
        full = (
            len(self.slots) >= limits.CONNECTION_INFLIGHT_MAX
            or self.output_bytes > OUTPUT_BACKLOG_MAX
        )
        if full:
            self._pause_reading()
        else:
            self._resume_reading()

    # ---- handling ----

    def _start(self, slot: _Slot) -> None:
        if not self.certificate_named and not self._name_certificate():
            return
        if self.server.authorization is not None and not self._authorized(slot):
            return
        handlers = self.server.handlers
        try:
            if handlers.serve_now(
                slot.request, self.client_host, lambda body: self._answer(slot, body)
            ):
                return
        except Exception:
            self._handler_failed(slot.request)
            return
        self._spawn(self._handle(slot))

    # ---- authorization ----

    def _authorized(self, slot: _Slot) -> bool:
        """Rule on the request: False if it is answered (or the connection closed) already;
        True to serve it, maybe with a narrowed body and an answer to complete (`finish`)."""
        authorization = self.server.authorization
        assert authorization is not None
        requester = self._requester()
        if requester is None:
            return True  # a super user
        request = slot.request
        try:
            ruling = authorization.rule(request, requester.principal, requester.host)
        except Exception:
            self._handler_failed(request)
            return False
        if ruling.allowed:
            return True
        if ruling.close:
            log.info("closing %s: acks=0 produce denied (no answer can say so)", self.address)
            self.close()
            return False
        if ruling.refused is not None:
            self._answer(slot, refusal(request, ruling.refused))
            return False
        if ruling.answer is not None:
            self._answer(slot, ruling.answer)
            return False
        if ruling.body is not None:
            request.body = ruling.body
        slot.finish = ruling.finish
        return True

    def _name_certificate(self) -> bool:
        """Whether the client's certificate has a name; if not, the connection is closed."""
        try:
            self._ssl_principal()
        except NoMatchingRule as error:
            # Kafka fails the client's authentication: no principal, no requests.
            log.info("closing %s: %s", self.address, error)
            self.close()
            return False
        self.certificate_named = True
        return True

    def _operations(self) -> OperationsOf:
        """The bits KIP-430's answers give this connection: every operation without an
        authorizer and for a super user, else what the requester's ACLs allow."""
        authorization = self.server.authorization
        if authorization is None:
            return authorized_operations.every_operation
        requester = self._requester()
        if requester is None:
            return authorized_operations.every_operation
        return authorization.operations(requester.principal, requester.host)

    def _ssl_principal(self) -> str:
        """The principal of the client's certificate (ANONYMOUS without one), once per
        connection. NoMatchingRule if ssl.principal.mapping.rules give it no name."""
        if self._certificate_principal is None:
            assert self.tls is not None
            der = self.tls.peer_certificate_der()
            self._certificate_principal = certificate_principal(der, self.server.principal_mapper)
        return self._certificate_principal

    def _requester(self) -> Requester | None:
        return self.requester if self.requester_known else self._find_requester()

    def _find_requester(self) -> Requester | None:
        """Who this connection's requests are checked as (None: a super user, unchecked)."""
        authorization = self.server.authorization
        assert authorization is not None
        if self.sasl is not None:
            principal = self.sasl.principal or ANONYMOUS
            known = self.sasl.authenticated  # a SASL principal never changes once set
        elif self.tls is not None:
            principal = self._ssl_principal()
            known = True
        else:
            principal, known = ANONYMOUS, True
        requester = (
            None
            if authorization.exempt(principal)
            else Requester(principal, acl_host(self.client_host))
        )
        if known:
            self.requester, self.requester_known = requester, True
        return requester

    async def _handle(self, slot: _Slot) -> None:
        CLIENT_HOST.set(self.client_host)
        LISTENER.set(self.server.listener_name)
        try:
            body = await self.server.handlers.handle(slot.request)
        except Exception:
            self._handler_failed(slot.request)
            return
        self._answer(slot, body)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _handler_failed(self, request: Request) -> None:
        log.exception(
            "handler for api %d v%d failed; closing the connection",
            request.api_key,
            request.api_version,
        )
        self.close()

    def _answer(self, slot: _Slot, body: Body | None) -> None:
        if self.closed:
            return
        request = slot.request
        if request.api_key in authorized_operations.APIS and body is not None:
            try:  # before `finish` adds the refused entries, which carry no bits
                authorized_operations.fill(
                    request.api_key, request.api_version, request.body or {}, body,
                    self._operations(),
                )  # fmt: skip
            except Exception:
                self._handler_failed(request)
                return
        if slot.finish is not None and body is not None:
            try:
                body = slot.finish(body)  # the denied parts, or the answer filtered
            except Exception:
                self._handler_failed(slot.request)
                return
        slot.answered, slot.body = True, body
        if self.slots[0] is slot and not self.flush_scheduled:
            # Written at the end of this loop pass, with whatever else is answered by then.
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    # ---- writing ----

    def _flush(self) -> None:
        """Encode the answered requests at the head, in order, and write what the socket takes."""
        self.flush_scheduled = False
        if self.closed:
            return
        slots = self.slots
        while slots and slots[0].answered:
            slot = slots.popleft()
            if slot.body is None:
                continue  # acks=0 produce: no response
            if self.server.loses_answer(slot.request, slot.body):
                self.close()  # the client sees its connection drop, and retries
                return
            try:
                parts = self.codec.send(slot.request, slot.body)
            except Exception:
                self._handler_failed(slot.request)
                return
            for part in parts:
                if not self._queue(part):
                    return
        if self.plaintext:  # TLS: this pass's answers, encrypted together
            assert self.tls is not None
            self.tls.send(b"".join(self.plaintext))
            self.plaintext.clear()
            self._queue_ciphertext()
        self._write()

    def _queue(self, part: bytes | FileSlice) -> bool:
        """Add one part of an answer to the output; False (and the connection closed) if a small
        log slice could not be read whole."""
        if isinstance(part, FileSlice) and (part.size <= SMALL_SLICE_BYTES or self.tls is not None):
            data = part.read()  # sent in the same sendmsg as the bytes around it, or encrypted
            if len(data) != part.size:
                log.warning("a log file shrank under a fetch answer to %s; closing", self.address)
                self.close()
                return False
            part = data
        if self.tls is not None:
            self.plaintext.append(part)
            return True
        self.output_bytes += part.size if isinstance(part, FileSlice) else len(part)
        self.output.append(part)
        return True

    def _write(self) -> None:
        try:
            done = self._write_output()
        except OSError:
            self.close()  # the peer went away, or a log file shrank under a sendfile
            return
        if done and self.writing:
            self.loop.remove_writer(self.fd)
            self.writing = False
        elif not done and not self.writing:
            self.loop.add_writer(self.fd, self._write)
            self.writing = True
        if self.reading:
            self._pace_reading()  # the backlog may have grown past its bound
        else:
            self._take_requests()  # room again: requests buffered while paused go on
        self._close_if_done()

    def _write_output(self) -> bool:
        """Write queued parts until the socket is full; whether all were written."""
        output = self.output
        while output:
            head = output[0]
            if isinstance(head, FileSlice):
                sent = _sendfile_some(self.fd, head)
                if sent is None:
                    return False
                self.output_bytes -= sent
                if sent < head.size:
                    output[0] = FileSlice(
                        head.file, head.position + sent, head.size - sent, head.next_offset
                    )
                    return False
                output.popleft()
                continue
            buffers: list[bytes | memoryview] = []
            for part in output:
                if isinstance(part, FileSlice) or len(buffers) == SENDMSG_BUFFERS_MAX:
                    break
                buffers.append(part)
            try:
                sent = self.sock.sendmsg(buffers)
            except (BlockingIOError, InterruptedError):
                return False
            self.output_bytes -= sent
            for part in buffers:
                if sent >= len(part):
                    sent -= len(part)
                    output.popleft()
                    continue
                output[0] = memoryview(part)[sent:]
                return False
        return True

    # ---- closing ----

    def _close_if_done(self) -> None:
        if self.input_ended and not self.slots and not self.output:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._pause_reading()
        if self.writing:
            self.loop.remove_writer(self.fd)
            self.writing = False
        for task in self.tasks:
            task.cancel()
        self.delayed.clear()
        self.slots.clear()
        self.output.clear()
        with contextlib.suppress(OSError):
            self.sock.close()
        self.server.forget(self)


def _sendfile_some(socket_fd: int, part: FileSlice) -> int | None:
    """Bytes of `part` the socket took (None: none, it is full)."""
    try:
        sent = os.sendfile(socket_fd, part.fileno(), part.position, part.size)
    except (BlockingIOError, InterruptedError):
        return None
    if sent == 0:
        # The file is shorter than the slice we promised in the size prefix: the frame can't be
        # completed, so the connection must end.
        raise ConnectionError("log file shrank under a fetch response")
    return sent


def _appended(produce_response: Body) -> bool:
    """Whether a Produce answer reports any partition written."""
    return any(
        partition.get("error_code") == 0
        for topic in produce_response.get("responses", ())
        for partition in topic.get("partition_responses", ())
    )
