"""The sans-IO connections: framing, refusal of bad peers, file slices, a client/server pair."""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlog.core.protocol.apis import SUPPORTED, ApiKey, api_versions_entries
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.connection import (
    CONNECTION_CLOSED,
    NEED_DATA,
    ClientConnection,
    LocalProtocolError,
    RemoteProtocolError,
    Request,
    Response,
    ServerConnection,
)

RECORDS = bytes(range(256)) * 4


@dataclass(frozen=True)
class FileSlice:
    """What the broker passes for sendfile: not bytes-like, has a size."""

    path: str
    offset: int
    size: int


def plain(value: Any) -> Any:
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def valid_stream() -> bytes:
    """Several requests of several APIs and versions, as one pipelined byte stream."""
    client = ClientConnection()
    produce = {
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": RECORDS}]}],
    }
    fetch = {
        "max_wait_ms": 500,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 7}]}],
    }
    frames = [
        client.send_request(ApiKey.API_VERSIONS, 3, {"client_software_name": "x"}),
        client.send_request(ApiKey.METADATA, 8, {"topics": [{"name": "t"}]}),
        client.send_request(ApiKey.PRODUCE, 8, produce),
        client.send_request(ApiKey.FETCH, 11, fetch),
        client.send_request(ApiKey.CREATE_TOPICS, 4, {"topics": [{"name": "n"}]}),
        client.send_request(ApiKey.INIT_PRODUCER_ID, 0, {}, client_id=None),
        # ApiVersions above our range, with a body we cannot read.
        struct.pack(">ihhih", 13, 18, 9, 99, -1) + b"\xff\xff\xff",
    ]
    return b"".join(frames)


STREAM = valid_stream()


def events_of(server: ServerConnection) -> list[Any]:
    events = []
    while True:
        event = server.next_event()
        if event is NEED_DATA or event is CONNECTION_CLOSED:
            return events
        assert isinstance(event, Request)
        events.append(
            (
                event.api_key,
                event.api_version,
                event.correlation_id,
                event.client_id,
                plain(event.body),
                event.size,
                event.unsupported_version,
            )
        )


def feed(chunks: list[bytes], max_request_bytes: int | None = None) -> list[Any]:
    server = (
        ServerConnection() if max_request_bytes is None else ServerConnection(max_request_bytes)
    )
    events = []
    for chunk in filter(None, chunks):  # b"" would mean EOF
        server.receive_data(chunk)
        events += events_of(server)
    server.receive_data(b"")
    events += events_of(server)
    assert server.next_event() is CONNECTION_CLOSED
    return events


WHOLE = feed([STREAM])


def test_the_stream_decodes() -> None:
    assert [e[:3] for e in WHOLE] == [
        (ApiKey.API_VERSIONS, 3, 0),
        (ApiKey.METADATA, 8, 1),
        (ApiKey.PRODUCE, 8, 2),
        (ApiKey.FETCH, 11, 3),
        (ApiKey.CREATE_TOPICS, 4, 4),
        (ApiKey.INIT_PRODUCER_ID, 0, 5),
        (ApiKey.API_VERSIONS, 9, 99),
    ]
    assert WHOLE[2][4]["topic_data"][0]["partition_data"][0]["records"] == RECORDS
    assert WHOLE[5][3] is None  # null client id
    assert WHOLE[6][4] is None and WHOLE[6][6] is True


def test_byte_by_byte_gives_the_same_events() -> None:
    assert feed([STREAM[i : i + 1] for i in range(len(STREAM))]) == WHOLE


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=20))
def test_random_chunks_give_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    assert feed([STREAM[a:b] for a, b in itertools.pairwise(bounds)]) == WHOLE


def drain_expecting_only_peer_errors(chunks: list[bytes], eof: bool = True) -> None:
    """Feed and read everything; the only exception allowed out is RemoteProtocolError."""
    server = ServerConnection(max_request_bytes=64 * 1024)
    try:
        for chunk in filter(None, chunks):  # b"" would mean EOF
            server.receive_data(chunk)
            events_of(server)
        if eof:
            server.receive_data(b"")
            events_of(server)
    except RemoteProtocolError:
        with pytest.raises(RemoteProtocolError):
            server.next_event()  # stays broken


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=300), cut=st.integers(0, 300))
def test_random_garbage_only_raises_remote_protocol_error(data: bytes, cut: int) -> None:
    drain_expecting_only_peer_errors([data[:cut], data[cut:]])


SUPPORTED_VERSIONS = [(k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key_version=st.sampled_from(SUPPORTED_VERSIONS),
    flexible_header=st.booleans(),
    body=st.binary(max_size=120),
)
def test_random_bodies_behind_valid_headers(
    key_version: tuple[ApiKey, int], flexible_header: bool, body: bytes
) -> None:
    api_key, version = key_version
    header = struct.pack(">hhih", api_key, version, 1, 1) + b"c"
    if flexible_header:
        header += b"\x00"
    payload = header + body
    drain_expecting_only_peer_errors([struct.pack(">i", len(payload)) + payload])


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, len(STREAM) - 1),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 255)), max_size=4),
    keep=st.integers(0, 400),
)
def test_mutated_valid_frames(start: int, flips: list[tuple[int, int]], keep: int) -> None:
    # Take the stream from a frame, corrupt some bytes after its size prefix, truncate it
    # (fixing the prefix so the frame is "complete" but short), and feed the result.
    offset = 0
    while offset + 4 + struct.unpack_from(">i", STREAM, offset)[0] <= start:
        offset += 4 + struct.unpack_from(">i", STREAM, offset)[0]
    size = struct.unpack_from(">i", STREAM, offset)[0]
    payload = bytearray(STREAM[offset + 4 : offset + 4 + size])
    for position, xor in flips:
        payload[position % len(payload)] ^= xor
    payload = payload[: max(10, min(keep, len(payload)))]
    drain_expecting_only_peer_errors([struct.pack(">i", len(payload)) + bytes(payload)])


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(1, len(STREAM) - 1))
def test_truncated_stream_then_eof_is_a_peer_error_or_clean(cut: int) -> None:
    drain_expecting_only_peer_errors([STREAM[:cut]])


@pytest.mark.parametrize("size", [-1, 0, 9, 1001, 2**31 - 1])
def test_bad_size_prefix_is_refused_before_the_body(size: int) -> None:
    server = ServerConnection(max_request_bytes=1000)
    server.receive_data(struct.pack(">i", size))  # nothing more: the body never arrives
    with pytest.raises(RemoteProtocolError, match="frame size"):
        server.next_event()
    with pytest.raises(RemoteProtocolError):
        server.next_event()


def test_default_limit_refuses_from_the_prefix() -> None:
    server = ServerConnection()
    server.receive_data(struct.pack(">i", 100 * 1024 * 1024 + 1))
    with pytest.raises(RemoteProtocolError):
        server.next_event()


def test_largest_allowed_prefix_waits_for_the_body() -> None:
    server = ServerConnection(max_request_bytes=1000)
    server.receive_data(struct.pack(">i", 1000) + b"\x00\x12")
    assert server.next_event() is NEED_DATA


def request_frame(api_key: int, version: int, body: bytes = b"") -> bytes:
    payload = struct.pack(">hhih", api_key, version, 1, 0) + body
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (999, 0),  # no such API
        (int(ApiKey.SASL_HANDSHAKE), 2),  # above its range (0-1)
        (-1, 0),
        (int(ApiKey.DESCRIBE_CLIENT_QUOTAS), 0),  # known, not served yet
        (int(ApiKey.OFFSET_COMMIT), 8),  # served, but not this (flexible) version
        (int(ApiKey.PRODUCE), 2),  # below our range
        (int(ApiKey.PRODUCE), 9),  # above it
        (int(ApiKey.FETCH), 12),
    ],
)
def test_unknown_or_unsupported_apis_are_peer_errors(api_key: int, version: int) -> None:
    server = ServerConnection()
    server.receive_data(request_frame(api_key, version, b"\x00" * 16))
    with pytest.raises(RemoteProtocolError):
        server.next_event()


def test_api_versions_above_range_is_flagged_not_refused() -> None:
    server = ServerConnection()
    server.receive_data(request_frame(18, 9, b"\x07\x00anything"))
    request = server.next_event()
    assert isinstance(request, Request)
    assert request.unsupported_version and request.body is None
    assert request.api_key == ApiKey.API_VERSIONS and request.api_version == 9


def test_eof() -> None:
    server = ServerConnection()
    server.receive_data(b"")
    assert server.next_event() is CONNECTION_CLOSED
    assert server.next_event() is CONNECTION_CLOSED
    with pytest.raises(LocalProtocolError):
        server.receive_data(b"more")
    half = ServerConnection()
    half.receive_data(STREAM[:7])
    assert half.next_event() is NEED_DATA
    half.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        half.next_event()


# -- responses, file slices, the client ------------------------------------------------------


def fetch_response(records: Any, other: Any = b"") -> dict[str, Any]:
    return {
        "responses": [
            {
                "topic": "t",
                "partitions": [
                    {"partition_index": 0, "high_watermark": 10, "records": records},
                    {"partition_index": 1, "high_watermark": 3, "records": other},
                    {"partition_index": 2, "error_code": 3, "records": None},
                ],
            }
        ]
    }


def fetch_request(server: ServerConnection, client: ClientConnection, version: int) -> Request:
    server.receive_data(client.send_request(ApiKey.FETCH, version, {"topics": []}))
    request = server.next_event()
    assert isinstance(request, Request)
    return request


def bytes_of(parts: list[Any], content: dict[FileSlice, bytes]) -> bytes:
    return b"".join(content[p] if isinstance(p, FileSlice) else p for p in parts)


@pytest.mark.parametrize("version", [11, 12])  # non-flexible and flexible records lengths
def test_file_slices_stay_in_place(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    monkeypatch.setitem(SUPPORTED, ApiKey.FETCH, (4, 12))
    server, client = ServerConnection(), ClientConnection()
    request = fetch_request(server, client, version)
    first = FileSlice("00000.log", 100, 300)
    second = FileSlice("00000.log", 400, 200)
    parts = server.send(request, fetch_response(first, second))
    assert [type(p) for p in parts] == [bytes, FileSlice, bytes, FileSlice, bytes]
    assert parts[1] is first and parts[3] is second
    sizes = [len(p) if isinstance(p, bytes) else p.size for p in parts]
    (prefix,) = struct.unpack_from(">i", parts[0])
    assert sum(sizes) == prefix + 4
    # The client, given the slices' bytes, reads the records back.
    content = {first: b"a" * 300, second: b"b" * 200}
    client.receive_data(bytes_of(parts, content))
    response = client.next_event()
    assert isinstance(response, Response)
    partitions = response.body["responses"][0]["partitions"]
    assert [plain(p["records"]) for p in partitions] == [b"a" * 300, b"b" * 200, None]


def test_bytes_records_give_one_part() -> None:
    server, client = ServerConnection(), ClientConnection()
    request = fetch_request(server, client, 11)
    parts = server.send(request, fetch_response(memoryview(RECORDS), bytearray(b"xy")))
    assert len(parts) == 1 and isinstance(parts[0], bytes)
    assert struct.unpack_from(">i", parts[0])[0] == len(parts[0]) - 4
    client.receive_data(parts[0])
    response = client.next_event()
    assert isinstance(response, Response)
    assert response.body["responses"][0]["partitions"][0]["records"] == RECORDS


def test_adjacent_slices_are_not_separated_by_empty_bytes() -> None:
    codec = codec_for("ProduceRequest", 8)  # records last in the struct: slices can touch
    body = {
        "topic_data": [
            {
                "name": "t",
                "partition_data": [
                    {"index": 0, "records": FileSlice("a", 0, 5)},
                    {"index": 1, "records": FileSlice("a", 5, 5)},
                ],
            }
        ]
    }
    out: bytearray = bytearray()
    parts: list[Any] = []
    codec.encode_into(out, parts, body)
    assert all(not (isinstance(p, bytes) and not p) for p in parts)
    assert out == b""  # records are the last field of the message


def test_client_server_pair_in_order() -> None:
    server, client = ServerConnection(), ClientConnection()
    for version in (0, 3):
        server.receive_data(client.send_request(ApiKey.API_VERSIONS, version, {}))
    assert client.pending == 2
    requests = [server.next_event(), server.next_event()]
    assert server.next_event() is NEED_DATA
    body = {"api_keys": api_versions_entries()}
    wire = b"".join(b"".join(server.send(r, body)) for r in requests if isinstance(r, Request))
    client.receive_data(wire)
    first, second = client.next_event(), client.next_event()
    assert isinstance(first, Response) and isinstance(second, Response)
    assert (first.correlation_id, first.api_version) == (0, 0)
    assert (second.correlation_id, second.api_version) == (1, 3)
    assert second.body["api_keys"] == api_versions_entries()
    assert client.next_event() is NEED_DATA and client.pending == 0


def test_client_reads_the_v0_error_answer() -> None:
    server, client = ServerConnection(), ClientConnection()
    client.send_request(ApiKey.API_VERSIONS, 3, {})
    server.receive_data(request_frame(18, 9))
    request = server.next_event()
    assert isinstance(request, Request)
    request.correlation_id = 0  # answer the client's pending request
    error = {"error_code": 35, "api_keys": api_versions_entries(ApiKey.API_VERSIONS)}
    client.receive_data(b"".join(server.send(request, error)))
    response = client.next_event()
    assert isinstance(response, Response)
    assert response.api_version == 0
    assert response.body["error_code"] == 35
    assert response.body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 3}]


def test_client_refuses_an_out_of_order_response() -> None:
    client = ClientConnection()
    client.send_request(ApiKey.API_VERSIONS, 0, {})
    client.send_request(ApiKey.API_VERSIONS, 0, {})
    reply = ServerConnection().send(Request(ApiKey.API_VERSIONS, 0, 1, None, {}, 0), {})
    client.receive_data(b"".join(reply))
    with pytest.raises(RemoteProtocolError, match="correlation"):
        client.next_event()


def test_acks_zero_expects_no_response() -> None:
    client = ClientConnection()
    client.send_request(ApiKey.PRODUCE, 8, {"acks": 0, "topic_data": []})
    assert client.pending == 0
    client.send_request(ApiKey.PRODUCE, 8, {"acks": 1, "topic_data": []})
    assert client.pending == 1
