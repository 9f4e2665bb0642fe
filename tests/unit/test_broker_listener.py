"""The broker's listener (daemon/broker/server.py) on a real socket on 127.0.0.1: answers in
request order whatever order they are ready in, log slices small and large arrive whole, and a
client that pipelines more than the in-flight bound without reading loses nothing.

The handler here stands in for the broker's (the broker itself is tested with real clients in
tests/integration); what is under test is the listener's own job: framing, order, writing."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlog.core import limits
from rlog.core.broker.serving import empty_fetch_partition
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import NEED_DATA, ClientConnection, Request, Response
from rlog.core.storage.files import FileSlice, RealFile
from rlog.daemon.broker import server as server_module
from rlog.daemon.broker.server import BrokerServer

FETCH_VERSION = 12
Reply = Callable[[dict[str, Any] | None], None]


def fetch_answer(records: bytes | FileSlice) -> dict[str, Any]:
    partition = empty_fetch_partition(0) | {"records": records}
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partitions": [partition]}],
    }


class Handlers:
    """Answers each Fetch with what `answer_for(request)` gives, after `delay_for(request)`
    seconds, through the listener's callback path; Metadata goes through `handle` (a task)."""

    def __init__(
        self,
        answer_for: Callable[[Request], dict[str, Any]],
        delay_for: Callable[[Request], float] = lambda _r: 0.0,
    ) -> None:
        self.answer_for = answer_for
        self.delay_for = delay_for

    def serve_now(self, request: Request, client_host: str, reply: Reply) -> bool:
        if request.api_key != ApiKey.FETCH:
            return False
        loop = asyncio.get_running_loop()
        loop.call_later(self.delay_for(request), reply, self.answer_for(request))
        return True

    async def handle(self, request: Request) -> dict[str, Any] | None:
        await asyncio.sleep(self.delay_for(request))
        return {
            "throttle_time_ms": 0,
            "brokers": [],
            "cluster_id": "c",
            "controller_id": -1,
            "topics": [],
        }


def fetch_request(offset: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 30,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 30,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


async def exchange(
    handlers: Handlers, requests: list[tuple[ApiKey, int, dict[str, Any]]], read_after: int = 0
) -> list[Response]:
    """Send every request at once on one connection (reading nothing until `read_after` bytes of
    requests are out), then read every answer."""
    server = BrokerServer(handlers, max_request_bytes=1 << 20)
    server.listen("127.0.0.1", 0)
    assert server._listener is not None
    port = server._listener.getsockname()[1]
    serving = asyncio.create_task(server.serve())
    loop = asyncio.get_running_loop()
    client = socket.create_connection(("127.0.0.1", port))
    client.setblocking(False)
    codec = ClientConnection(max_response_bytes=1 << 30)
    try:
        frames = b"".join(codec.send_request(key, v, body, "test") for key, v, body in requests)
        await loop.sock_sendall(client, frames)
        answers: list[Response] = []
        while len(answers) < len(requests):
            event = codec.next_event()
            if event is NEED_DATA:
                data = await asyncio.wait_for(loop.sock_recv(client, 1 << 20), 10)
                assert data, "the listener closed the connection"
                codec.receive_data(data)
                continue
            assert isinstance(event, Response)
            answers.append(event)
        return answers
    finally:
        client.close()
        serving.cancel()
        await server.close()


def test_answers_go_out_in_request_order_whatever_order_they_are_ready_in() -> None:
    """Later requests are answered first (shorter delays, and Metadata through a task): the
    client still reads them in the order it asked, as Kafka clients require."""
    requests = [(ApiKey.FETCH, FETCH_VERSION, fetch_request(i)) for i in range(20)]
    requests.insert(7, (ApiKey.METADATA, 8, {"topics": [], "allow_auto_topic_creation": False}))

    def delay(request: Request) -> float:
        return (30 - request.correlation_id) / 1000

    def answer(request: Request) -> dict[str, Any]:
        offset = request.body["topics"][0]["partitions"][0]["fetch_offset"] if request.body else 0
        return fetch_answer(b"x" * offset)

    answers = asyncio.run(exchange(Handlers(answer, delay), requests))
    assert [a.correlation_id for a in answers] == list(range(21))
    assert answers[7].api_key == ApiKey.METADATA
    fetches = [a for a in answers if a.api_key == ApiKey.FETCH]
    sizes = [len(a.body["responses"][0]["partitions"][0]["records"]) for a in fetches]
    assert sizes == list(range(20))


@pytest.mark.parametrize("size", [1_000, server_module.SMALL_SLICE_BYTES + 1, 3 << 20])
def test_log_slices_arrive_whole(tmp_path: Path, size: int) -> None:
    """A small slice is read and sent with the answer's other bytes; a large one goes by
    sendfile, several calls of it when the socket fills: either way the client gets the bytes
    of the file, once, in place."""
    content = os.urandom(size + 100)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(content)
    log_file = RealFile(str(path), create=False)
    slices = [FileSlice(log_file, 50, size), FileSlice(log_file, 0, 10)]
    requests = [(ApiKey.FETCH, FETCH_VERSION, fetch_request(i)) for i in range(2)]

    def answer(request: Request) -> dict[str, Any]:
        return fetch_answer(slices[request.correlation_id])

    try:
        answers = asyncio.run(exchange(Handlers(answer), requests))
    finally:
        log_file.close()
    records = [bytes(a.body["responses"][0]["partitions"][0]["records"]) for a in answers]
    assert records == [content[50 : 50 + size], content[:10]]


def test_a_client_pipelining_past_the_in_flight_bound_loses_nothing() -> None:
    """More requests than CONNECTION_INFLIGHT_MAX, each answered with 64 KiB, sent before the
    client reads anything: the listener stops reading while the bound is reached or its output
    backs up, and every answer still arrives, in order."""
    count = limits.CONNECTION_INFLIGHT_MAX * 3
    requests = [(ApiKey.FETCH, FETCH_VERSION, fetch_request(i)) for i in range(count)]
    payload = b"y" * 65_536

    answers = asyncio.run(exchange(Handlers(lambda _r: fetch_answer(payload)), requests))
    assert [a.correlation_id for a in answers] == list(range(count))
    assert all(a.body["responses"][0]["partitions"][0]["records"] == payload for a in answers)
