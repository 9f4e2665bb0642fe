"""Exact bytes, built by hand from Kafka's wire format, against the generated codecs."""

from __future__ import annotations

import struct

import pytest

from rlog.core.protocol.apis import SUPPORTED, ApiKey, api_versions_entries, header_versions
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.connection import ClientConnection, Request, ServerConnection


def string(text: str) -> bytes:
    """Non-flexible string: int16 length, UTF-8."""
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def compact(text: str) -> bytes:
    """Flexible string: uvarint(length + 1), UTF-8 (all our test strings are < 127 bytes)."""
    data = text.encode()
    return bytes([len(data) + 1]) + data


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header_v1(api_key: int, version: int, correlation_id: int, client_id: str = "rlog") -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)


# (api key, version, body, the exact frame a fresh ClientConnection sends: correlation id 0)
REQUEST_TABLE = [
    pytest.param(ApiKey.API_VERSIONS, 0, {}, frame(header_v1(18, 0, 0)), id="ApiVersions-v0"),
    pytest.param(
        ApiKey.METADATA,
        1,
        {"topics": [{"name": "foo"}], "allow_auto_topic_creation": False},  # v4+: ignored
        frame(header_v1(3, 1, 0) + struct.pack(">i", 1) + string("foo")),
        id="Metadata-v1",
    ),
    pytest.param(
        ApiKey.METADATA,
        1,
        {"topics": None},
        frame(header_v1(3, 1, 0) + struct.pack(">i", -1)),
        id="Metadata-v1-all-topics",
    ),
    pytest.param(
        ApiKey.API_VERSIONS,
        3,
        {"client_software_name": "rlog-test", "client_software_version": "0.1.0"},
        # Header v2: the client id keeps its int16 length, then an empty tag section.
        frame(header_v1(18, 3, 0) + b"\x00" + compact("rlog-test") + compact("0.1.0") + b"\x00"),
        id="ApiVersions-v3-flexible",
    ),
    pytest.param(
        ApiKey.INIT_PRODUCER_ID,
        1,
        {"transactional_id": None, "transaction_timeout_ms": 60000},
        frame(header_v1(22, 1, 0) + struct.pack(">hi", -1, 60000)),
        id="InitProducerId-v1-null-string",
    ),
]


@pytest.mark.parametrize(("api_key", "version", "body", "wire"), REQUEST_TABLE)
def test_request_bytes(api_key: ApiKey, version: int, body: dict, wire: bytes) -> None:
    assert ClientConnection().send_request(api_key, version, body) == wire
    server = ServerConnection()
    server.receive_data(wire)
    request = server.next_event()
    assert isinstance(request, Request)
    assert (request.api_key, request.api_version, request.correlation_id) == (api_key, version, 0)
    assert request.client_id == "rlog"
    assert request.size == len(wire) - 4


def test_produce_v8_request_decodes_records_as_a_view() -> None:
    records = bytes(range(61)) * 3
    body = (
        struct.pack(">hhi", -1, -1, 30000)  # transactional_id null, acks -1, timeout
        + struct.pack(">i", 1)
        + string("t")
        + struct.pack(">ii", 1, 0)  # one partition, index 0
        + struct.pack(">i", len(records))
        + records
    )
    wire = frame(header_v1(0, 8, 5, "c") + body)
    server = ServerConnection()
    server.receive_data(wire)
    request = server.next_event()
    assert isinstance(request, Request) and request.body is not None
    assert request.body["transactional_id"] is None
    assert (request.body["acks"], request.body["timeout_ms"]) == (-1, 30000)
    partition = request.body["topic_data"][0]["partition_data"][0]
    assert partition["index"] == 0
    assert isinstance(partition["records"], memoryview)
    assert partition["records"] == records


def test_flexible_request_skips_unknown_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SUPPORTED, ApiKey.METADATA, (1, 9))
    # Metadata v9: header v2 with an unknown tag 7, body with an unknown tag 9.
    header = header_v1(3, 9, 1) + b"\x01" + b"\x07\x02zz"
    body = b"\x00" + b"\x01\x00\x01" + b"\x01" + b"\x09\x03abc"  # topics null, 3 bools, tags
    server = ServerConnection()
    server.receive_data(frame(header + body))
    request = server.next_event()
    assert isinstance(request, Request) and request.body is not None
    assert request.body["topics"] is None
    assert request.body["allow_auto_topic_creation"] is True
    assert request.body["include_cluster_authorized_operations"] is False
    assert request.body["include_topic_authorized_operations"] is True


def test_null_client_id() -> None:
    server = ServerConnection()
    server.receive_data(frame(struct.pack(">hhih", 18, 0, 9, -1)))
    request = server.next_event()
    assert isinstance(request, Request)
    assert request.client_id is None


def test_api_versions_error_answer_is_a_v0_body() -> None:
    server = ServerConnection()
    server.receive_data(frame(header_v1(18, 9, 42) + b"\x00future body"))
    request = server.next_event()
    assert isinstance(request, Request)
    assert request.unsupported_version and request.body is None
    assert (request.api_version, request.correlation_id) == (9, 42)
    body = {"error_code": 35, "api_keys": api_versions_entries(ApiKey.API_VERSIONS)}
    # Header v0, then ErrorCode, ApiKeys [ (18, 0, 3) ] in v0 encoding: no throttle, no tags.
    assert server.send(request, body) == [frame(struct.pack(">ihihhh", 42, 35, 1, 18, 0, 3))]


def test_api_versions_v3_response_has_a_v0_header() -> None:
    request = Request(ApiKey.API_VERSIONS, 3, 7, "c", {}, 0)
    body = {"api_keys": [{"api_key": 3, "min_version": 1, "max_version": 8}]}
    entries = b"\x02" + struct.pack(">hhh", 3, 1, 8) + b"\x00"  # compact array of 1
    payload = struct.pack(">ih", 7, 0) + entries + struct.pack(">i", 0) + b"\x00"
    assert ServerConnection().send(request, body) == [frame(payload)]


def test_flexible_response_header_has_tags() -> None:
    request = Request(ApiKey.CREATE_TOPICS, 5, 3, "c", {}, 0)  # CreateTopics: flexible from v5
    payload = struct.pack(">i", 3) + b"\x00" + struct.pack(">i", 0) + b"\x01" + b"\x00"
    assert ServerConnection().send(request, {}) == [frame(payload)]


def test_long_compact_lengths_use_multibyte_uvarints() -> None:
    codec = codec_for("ApiVersionsRequest", 3)
    name = "n" * 200  # length + 1 = 201 = 0xC9 -> uvarint C9 01
    assert codec.encode({"client_software_name": name}) == b"\xc9\x01" + name.encode() + b"\x01\x00"
    assert (
        codec.decode(b"\xc9\x01" + name.encode() + b"\x01\x00")[0]["client_software_name"] == name
    )


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [
        (ApiKey.PRODUCE, 8, (1, 0)),
        (ApiKey.PRODUCE, 9, (2, 1)),
        (ApiKey.METADATA, 8, (1, 0)),
        (ApiKey.METADATA, 9, (2, 1)),
        (ApiKey.API_VERSIONS, 2, (1, 0)),
        (ApiKey.API_VERSIONS, 3, (2, 0)),
        (ApiKey.INIT_PRODUCER_ID, 2, (2, 1)),
    ],
)
def test_header_versions(api_key: ApiKey, version: int, expected: tuple[int, int]) -> None:
    assert header_versions(api_key, version) == expected
