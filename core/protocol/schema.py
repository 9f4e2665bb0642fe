"""Kafka message schemas (the JSON files in `schemas/`) as Python objects.

The project carries its own copies of Kafka's `message/*.json` (Apache-2.0, see schemas/NOTICE),
so nothing outside the package is read at run time. This module only models them; `codec` turns
a (message, version) into an encoder and a decoder.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

PRIMITIVE_TYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "uint16",
        "int32",
        "int64",
        "float64",
        "string",
        "bytes",
        "records",
        "uuid",
    }
)

ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; `high` None means open-ended ("3+"), empty means "none"."""

    low: int
    high: int | None

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return NO_VERSIONS
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        low, sep, high = text.partition("-")
        return cls(int(low), int(high) if sep else int(low))

    def __contains__(self, version: object) -> bool:
        if not isinstance(version, int):
            return False
        return self.low <= version and (self.high is None or version <= self.high)

    def intersect(self, other: Versions) -> Versions:
        low = max(self.low, other.low)
        highs = [h for h in (self.high, other.high) if h is not None]
        high = min(highs) if highs else None
        if high is not None and high < low:
            return NO_VERSIONS
        return Versions(low, high)


# "none": contains nothing (low above any high).
NO_VERSIONS = Versions(1, 0)


def snake_case(name: str) -> str:
    """`ThrottleTimeMs` -> `throttle_time_ms`, `V3AndBelowTopics` -> `v3_and_below_topics`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # schema name, e.g. "HighWatermark"
    key: str  # dict key, e.g. "high_watermark"
    type: str  # element type for arrays ("int32", "PartitionData"), else the type
    is_array: bool
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    flexible_versions: Versions | None  # field-level override (the header's ClientId: "none")
    ignorable: bool
    default_null: bool  # the schema's default is null (taken only where the field is nullable)
    default: Any  # for primitive types: the non-null default value
    struct: Struct | None  # for struct and []struct types

    def present(self, version: int) -> bool:
        return version in self.versions

    def nullable(self, version: int) -> bool:
        return version in self.nullable_versions

    def tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions

    def default_value(self, version: int) -> Any:
        """The value a missing key encodes as and an absent field decodes to."""
        if self.default_null and (self.nullable(version) or not self.present(version)):
            return None
        if self.is_array:
            return []
        if self.struct is not None:
            return self.struct.default_dict(version)
        return self.default


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    fields: tuple[Field, ...]

    def default_dict(self, version: int) -> dict[str, Any]:
        return {f.key: f.default_value(version) for f in self.fields}


@dataclass(frozen=True, slots=True)
class Message:
    name: str  # "FetchResponse"
    type: str  # request | response | header | data
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    struct: Struct

    def flexible(self, version: int) -> bool:
        return version in self.flexible_versions


def _strip_comments(text: str) -> str:
    # Kafka's JSON allows `//` line comments; none of them sit inside a string value, but a URL
    # in "about" text could, so only strip `//` that starts a line or follows whitespace.
    return "\n".join(re.sub(r"(^|\s)//.*$", "", line) for line in text.splitlines())


def _parse_default(text: Any, type_name: str) -> Any:
    """The non-null default of a primitive field (`text` is the schema's "default", if any)."""
    if text is None or str(text) == "null":
        return _type_zero(type_name)
    text = str(text)
    if type_name in ("int8", "int16", "uint16", "int32", "int64"):
        return int(text, 0)
    if type_name == "float64":
        return float(text)
    if type_name == "bool":
        return text.lower() == "true"
    if type_name == "uuid":
        return ZERO_UUID if text in ("", "AAAAAAAAAAAAAAAAAAAAAA") else uuid.UUID(text)
    if type_name in ("bytes", "records"):
        return b""
    return text  # string


def _type_zero(type_name: str) -> Any:
    if type_name == "bool":
        return False
    if type_name == "float64":
        return 0.0
    if type_name == "string":
        return ""
    if type_name == "uuid":
        return ZERO_UUID
    if type_name in ("bytes", "records"):
        return b""
    return 0


class _Builder:
    def __init__(self, common: dict[str, dict[str, Any]]) -> None:
        self.common = common
        self.built: dict[str, Struct] = {}

    def struct(self, name: str, specs: list[dict[str, Any]]) -> Struct:
        return Struct(name, tuple(self.field(spec) for spec in specs))

    def common_struct(self, name: str) -> Struct:
        if name not in self.built:
            self.built[name] = self.struct(name, self.common[name].get("fields", []))
        return self.built[name]

    def field(self, spec: dict[str, Any]) -> Field:
        type_text: str = spec["type"].strip()
        is_array = type_text.startswith("[]")
        element = type_text[2:] if is_array else type_text
        struct: Struct | None = None
        if element not in PRIMITIVE_TYPES:
            if "fields" in spec:
                struct = self.struct(element, spec["fields"])
            else:
                struct = self.common_struct(element)
        versions = Versions.parse(spec.get("versions"))
        nullable = Versions.parse(spec.get("nullableVersions")).intersect(versions)
        default_text = spec.get("default")
        # Kafka's generated classes default records to null when the schema gives no default.
        default_null = str(default_text) == "null"
        if element == "records" and default_text is None:
            default_null = True
        default = None if struct is not None or is_array else _parse_default(default_text, element)
        flexible = spec.get("flexibleVersions")
        return Field(
            name=spec["name"],
            key=snake_case(spec["name"]),
            type=element,
            is_array=is_array,
            versions=versions,
            nullable_versions=nullable,
            tagged_versions=Versions.parse(spec.get("taggedVersions")),
            tag=None if spec.get("tag") is None else int(spec["tag"]),  # some schemas say "0"
            flexible_versions=None if flexible is None else Versions.parse(flexible),
            ignorable=bool(spec.get("ignorable", False)),
            default_null=default_null,
            default=default,
            struct=struct,
        )


def parse_message(text: str) -> Message:
    spec = json.loads(_strip_comments(text))
    common = {s["name"]: s for s in spec.get("commonStructs", [])}
    struct = _Builder(common).struct(spec["name"], spec.get("fields", []))
    return Message(
        name=spec["name"],
        type=spec["type"],
        api_key=spec.get("apiKey"),
        valid_versions=Versions.parse(spec["validVersions"]),
        flexible_versions=Versions.parse(spec.get("flexibleVersions")),
        struct=struct,
    )


@cache
def load_message(name: str) -> Message:
    """Load `schemas/<name>.json` from this package (e.g. "FetchResponse")."""
    text = resources.files(__package__).joinpath("schemas", f"{name}.json").read_text("utf-8")
    return parse_message(text)
