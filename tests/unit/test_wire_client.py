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
from rlog.core.protocol.connection import Request
from rlog.daemon.broker.server import BrokerServer
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


async def serving(handlers: Handlers) -> tuple[BrokerServer, asyncio.Task[None], int]:
    server = BrokerServer(handlers, max_request_bytes=1 << 20)
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

    def open_now(self) -> bool:
        return not self.cut

    async def __call__(self) -> None:
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
