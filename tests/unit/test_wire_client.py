"""KafkaClient (daemon/wire.py), the connection rlog's processes talk to each other over, against
a real listener on 127.0.0.1: answers in order through callbacks or awaited, a callback never
runs inside `send` (the broker's driver sends while it holds a Ready), a timeout or a refused
connection fails what waits with WireError, and the next request connects again."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import NEED_DATA, ClientConnection, Request
from rlog.daemon.broker.faults import Faults
from rlog.daemon.broker.server import BrokerServer
from rlog.daemon.faults_file import FaultRules
from rlog.daemon.wire import KafkaClient, WireError

Reply = Callable[[dict[str, Any] | None], None]
METADATA_BODY = {"topics": [], "allow_auto_topic_creation": False}


class Handlers:
    """Answers Metadata with the correlation id as the cluster id, after `delay_s`."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def serve_now(self, request: Request, client_host: str, reply: Reply) -> bool:
        return False

    async def handle(self, request: Request) -> dict[str, Any] | None:
        await asyncio.sleep(self.delay_s)
        return {
            "throttle_time_ms": 0,
            "brokers": [],
            "cluster_id": str(request.correlation_id),
            "controller_id": -1,
            "topics": [],
        }


async def serving(
    handlers: Handlers, faults: Faults | None = None
) -> tuple[BrokerServer, asyncio.Task[None], int]:
    server = BrokerServer(handlers, max_request_bytes=1 << 20, faults=faults)
    server.listen("127.0.0.1", 0)
    assert server._listener is not None
    return server, asyncio.create_task(server.serve()), server._listener.getsockname()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_callbacks_come_in_order_and_never_inside_send() -> None:
    async def scenario() -> list[str]:
        server, task, port = await serving(Handlers())
        client = KafkaClient("127.0.0.1", port, client_id="test")
        heard: list[str] = []
        inside_send = False

        def on_answer(body: dict[str, Any] | None, error: WireError | None) -> None:
            assert not inside_send, "a callback ran inside send()"
            assert error is None and body is not None
            heard.append(body["cluster_id"])

        for _ in range(50):
            inside_send = True
            client.send(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5, on_answer=on_answer)
            inside_send = False
        awaited = await client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5)
        heard.append("awaited " + awaited["cluster_id"])
        client.close()
        task.cancel()
        await server.close()
        return heard

    heard = asyncio.run(scenario())
    assert heard == [str(i) for i in range(50)] + ["awaited 50"]


def test_a_refused_connection_fails_through_the_callback_later() -> None:
    async def scenario() -> tuple[bool, WireError | None]:
        client = KafkaClient("127.0.0.1", free_port())
        errors: list[WireError | None] = []
        client.send(
            ApiKey.METADATA,
            8,
            METADATA_BODY,
            timeout_s=5,
            on_answer=lambda _body, error: errors.append(error),
        )
        called_inside = bool(errors)
        for _ in range(100):
            if errors:
                break
            await asyncio.sleep(0.01)
        return called_inside, errors[0] if errors else None

    called_inside, error = asyncio.run(scenario())
    assert not called_inside
    assert isinstance(error, WireError)


def test_a_timeout_fails_everything_waiting_and_the_next_request_connects_again() -> None:
    async def scenario() -> str:
        handlers = Handlers(delay_s=0.5)
        server, task, port = await serving(handlers)
        client = KafkaClient("127.0.0.1", port)
        waiting = asyncio.gather(
            client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=0.1),
            client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5),
            return_exceptions=True,
        )
        first, second = await waiting
        assert isinstance(first, WireError) and "no answer to METADATA" in str(first)
        assert isinstance(second, WireError), "the stream is out of step: all of it fails"
        handlers.delay_s = 0.0
        answer = await client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5)
        client.close()
        task.cancel()
        await server.close()
        return str(answer["cluster_id"])

    assert asyncio.run(scenario()) == "0", "a new connection: correlation ids start again"


class CutGate:
    def __init__(self) -> None:
        self.cut = True
        self.delay = 0.0

    def open_now(self) -> bool:
        return not self.cut and not self.delay

    def delay_s(self) -> float:
        return self.delay

    def check(self) -> None:
        if self.cut:
            raise WireError("link cut (chaos)")


def test_a_cut_gate_refuses_and_an_open_one_lets_requests_through() -> None:
    async def scenario() -> None:
        server, task, port = await serving(Handlers())
        gate = CutGate()
        client = KafkaClient("127.0.0.1", port, gate=gate)
        with pytest.raises(WireError, match="cut"):
            await client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5)
        gate.cut = False
        answer = await client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5)
        assert answer["cluster_id"] == "0"
        client.close()
        task.cancel()
        await server.close()

    asyncio.run(scenario())


def test_a_delayed_link_delays_requests_without_reordering_them() -> None:
    """A request sent while the link is slow goes first even if the delay ends before it has
    passed: a later one overtaking it would reach a leader's log first (an idempotent
    producer's next batch would find its sequence out of order)."""

    async def scenario() -> tuple[str, str, float]:
        server, task, port = await serving(Handlers())
        gate = CutGate()
        gate.cut = False
        client = KafkaClient("127.0.0.1", port, gate=gate)
        started = asyncio.get_running_loop().time()
        gate.delay = 0.3
        first = asyncio.ensure_future(
            client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5)
        )
        await asyncio.sleep(0)
        gate.delay = 0.0  # healed: the next request must still wait behind the first
        second = await client.request(ApiKey.METADATA, 8, METADATA_BODY, timeout_s=5)
        waited = asyncio.get_running_loop().time() - started
        answer = await first
        client.close()
        task.cancel()
        await server.close()
        return str(answer["cluster_id"]), str(second["cluster_id"]), waited

    first_id, second_id, waited = asyncio.run(scenario())
    assert (first_id, second_id) == ("0", "1"), "correlation ids follow the order of sending"
    assert waited >= 0.3


class RecordingHandlers(Handlers):
    """Handlers that note the order requests reach them."""

    def __init__(self) -> None:
        super().__init__()
        self.handled: list[int] = []

    async def handle(self, request: Request) -> dict[str, Any] | None:
        self.handled.append(request.correlation_id)
        return await super().handle(request)


def test_a_delayed_broker_starts_requests_in_the_order_they_came() -> None:
    """Inbound, the same: a request read after the delay was healed waits for the one read
    before it, still delayed."""

    async def scenario() -> list[int]:
        handlers = RecordingHandlers()
        faults = Faults(None, rules=FaultRules(delay_ms=300))
        server, task, port = await serving(handlers, faults)
        codec = ClientConnection()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(codec.send_request(ApiKey.METADATA, 8, METADATA_BODY))
        await writer.drain()
        await asyncio.sleep(0.1)  # the broker has read the first, and holds it
        faults.rules = FaultRules()  # healed
        writer.write(codec.send_request(ApiKey.METADATA, 8, METADATA_BODY))
        await writer.drain()
        answers = []
        while len(answers) < 2:
            codec.receive_data(await reader.read(65536))
            while (event := codec.next_event()) is not NEED_DATA:
                answers.append(event)
        writer.close()
        task.cancel()
        await server.close()
        return handlers.handled

    assert asyncio.run(scenario()) == [0, 1]
