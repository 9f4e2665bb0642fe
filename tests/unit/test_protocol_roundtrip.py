"""encode -> decode round trips of every shipped message, with values drawn from its schema."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlog.core.protocol.apis import CONTROLLER_SUPPORTED, SUPPORTED, ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.schema import Field, Message, Struct, load_message, snake_case

SCHEMAS = Path(__file__).resolve().parents[2] / "core" / "protocol" / "schemas"
MESSAGES = sorted(p.stem for p in SCHEMAS.glob("*.json"))

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


def scalar_strategy(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in _INTS:
        low, high = _INTS[type_name]
        return st.integers(low, high)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return st.text(max_size=12)
    if type_name in ("bytes", "records"):
        return st.binary(max_size=24)
    if type_name == "uuid":
        return st.uuids(allow_nil=True)
    raise AssertionError(type_name)


def field_strategy(field: Field, version: int) -> st.SearchStrategy[Any]:
    if field.struct is not None:
        element = struct_strategy(field.struct, version)
    else:
        element = scalar_strategy(field.type)
    value = st.lists(element, max_size=3) if field.is_array else element
    if field.nullable(version):
        return st.none() | value
    return value


def struct_strategy(struct: Struct, version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Values for the fields of this version only: the encoder must not need the others."""
    return st.fixed_dictionaries(
        {f.key: field_strategy(f, version) for f in struct.fields if f.present(version)}
    )


def expected(struct: Struct, version: int, value: dict[str, Any]) -> dict[str, Any]:
    """What decoding returns: every field, the ones outside this version at their default."""
    result = {}
    for field in struct.fields:
        if not field.present(version):
            result[field.key] = field.default_value(version)
            continue
        item = value[field.key]
        if field.struct is not None and item is not None:
            if field.is_array:
                item = [expected(field.struct, version, x) for x in item]
            else:
                item = expected(field.struct, version, item)
        result[field.key] = item
    return result


def plain(value: Any) -> Any:
    """Decoded records are memoryviews into the frame; compare them as bytes."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def check_round_trip(message: Message, version: int, value: dict[str, Any]) -> None:
    codec = codec_for(message.name, version)
    encoded = codec.encode(value)
    decoded, end = codec.decode(encoded)
    assert end == len(encoded)
    assert plain(decoded) == expected(message.struct, version, value)
    assert codec.encode(decoded) == encoded  # the decoded dict is a valid body, same bytes


# The broker's APIs and the controller's (brokers are its clients).
SERVED = [*SUPPORTED.items(), *CONTROLLER_SUPPORTED.items()]

SUPPORTED_CASES = sorted(
    {
        (api.request_schema if kind == "request" else api.response_schema, version)
        for api, (low, high) in SERVED
        for version in range(low, high + 1)
        for kind in ("request", "response")
    }
)


@pytest.mark.parametrize(("name", "version"), SUPPORTED_CASES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_supported_versions_round_trip(name: str, version: int, data: st.DataObject) -> None:
    message = load_message(name)
    value = data.draw(struct_strategy(message.struct, version))
    check_round_trip(message, version, value)


@pytest.mark.parametrize("name", MESSAGES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_schema_version_round_trips(name: str, data: st.DataObject) -> None:
    message = load_message(name)
    high = message.valid_versions.high
    assert high is not None
    version = data.draw(st.integers(message.valid_versions.low, high))
    value = data.draw(struct_strategy(message.struct, version))
    check_round_trip(message, version, value)


@pytest.mark.parametrize("name", MESSAGES)
def test_every_version_compiles_and_encodes_defaults(name: str) -> None:
    message = load_message(name)
    assert message.valid_versions.high is not None
    for version in range(message.valid_versions.low, message.valid_versions.high + 1):
        codec = codec_for(name, version)
        decoded, _ = codec.decode(codec.encode({}))
        assert decoded == message.struct.default_dict(version)


def test_missing_keys_take_schema_defaults() -> None:
    codec = codec_for("FetchResponse", 11)
    body = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0}]}]}
    decoded, _ = codec.decode(codec.encode(body))
    partition = decoded["responses"][0]["partitions"][0]
    assert partition["last_stable_offset"] == -1  # "default": "-1"
    assert partition["preferred_read_replica"] == -1
    assert partition["records"] is None  # records default to null
    assert partition["aborted_transactions"] == []  # nullable, but no "default": "null"
    assert decoded["session_id"] == 0


def test_keys_outside_the_version_are_ignored() -> None:
    codec = codec_for("MetadataResponse", 1)
    body = {"controller_id": 2, "cluster_id": "c", "throttle_time_ms": 5, "not_a_field": 1}
    decoded, _ = codec.decode(codec.encode(body))
    assert decoded["throttle_time_ms"] == 0  # ThrottleTimeMs is v3+
    assert decoded["cluster_id"] is None  # ClusterId is v2+, "default": "null"
    assert decoded["controller_id"] == 2
    assert "not_a_field" not in decoded


def test_tagged_field_at_default_is_left_out() -> None:
    codec = codec_for("ApiVersionsResponse", 3)
    plain_bytes = codec.encode({"finalized_features_epoch": -1})
    tagged_bytes = codec.encode({"finalized_features_epoch": 7})
    assert plain_bytes.endswith(b"\x00")
    # Tag section: one field, tag 1, size 8, then the int64.
    assert tagged_bytes.endswith(b"\x01\x01\x08" + (7).to_bytes(8, "big"))
    assert codec.decode(tagged_bytes)[0]["finalized_features_epoch"] == 7


def test_uuid_values_round_trip() -> None:
    codec = codec_for("MetadataResponse", 12)
    topic_id = uuid.uuid4()
    body = {"topics": [{"name": "t", "topic_id": topic_id, "partitions": []}]}
    assert codec.decode(codec.encode(body))[0]["topics"][0]["topic_id"] == topic_id


def test_api_table_matches_the_schemas() -> None:
    for api in ApiKey:
        for name in (api.request_schema, api.response_schema):
            assert load_message(name).api_key == api, name
    for api, (low, high) in SERVED:
        for name in (api.request_schema, api.response_schema):
            versions = load_message(name).valid_versions
            assert low in versions and high in versions, name


@pytest.mark.parametrize("name", MESSAGES)
def test_snake_case_keys_are_unique_per_struct(name: str) -> None:
    def walk(struct: Struct) -> None:
        keys = [f.key for f in struct.fields]
        assert len(keys) == len(set(keys)), (name, struct.name)
        for field in struct.fields:
            if field.struct is not None:
                walk(field.struct)

    walk(load_message(name).struct)


@pytest.mark.parametrize(
    ("schema_name", "key"),
    [
        ("ThrottleTimeMs", "throttle_time_ms"),
        ("HighWatermark", "high_watermark"),
        ("TopicData", "topic_data"),
        ("V3AndBelowTransactionalId", "v3_and_below_transactional_id"),
        ("ZkMigrationReady", "zk_migration_ready"),
    ],
)
def test_snake_case(schema_name: str, key: str) -> None:
    assert snake_case(schema_name) == key
