"""Metadata records: one per change to cluster metadata, JSON-encoded as record values.

The controller appends them to the metadata log (`__cluster_metadata-0`, key null, one batch per
`Ready`); brokers fetch that log and fold the same records into a `MetadataImage`. Encoding is
strict both ways: sorted keys, no unknown or missing fields, each value of its declared type, so
a record another version wrote is refused rather than misread. A field added later has a default,
and a record written before it (without the field) takes that default.
"""

from __future__ import annotations

import base64
import binascii
import json
import types
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, ClassVar, Union, cast, get_args, get_origin, get_type_hints

from rlog.core.records import build_batch, decode_batch, iter_batches
from rlog.core.security.scram import ScramCredential, ScramMechanism

NO_LEADER = -1


class MetadataDecodeError(ValueError):
    """Bytes from the metadata log are not a metadata record this version knows."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener of a broker as clients reach it: its name (`listeners`), the advertised
    host and port, and its security protocol (`listener.security.protocol.map`)."""

    name: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker (re-)registers; its epoch is this record's offset, so every registration of one
    id has a larger epoch than the last (KRaft's rule). A registered broker starts fenced.
    `host` and `port` are the listener its peers reach it on (inter.broker.listener.name);
    `listeners` are all of them, that one first. A record without `listeners` (written before
    brokers had several) means one PLAINTEXT listener at `host`:`port`.
    """

    TYPE: ClassVar[str] = "register_broker"
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    listeners: tuple[Endpoint, ...] = ()


@dataclass(frozen=True, slots=True)
class FenceBroker:
    TYPE: ClassVar[str] = "fence_broker"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBroker:
    TYPE: ClassVar[str] = "unfence_broker"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class CreateTopic:
    TYPE: ClassVar[str] = "create_topic"
    name: str
    topic_id: str  # 32 hex digits, derived from the record's offset and the name
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class CreatePartition:
    TYPE: ClassVar[str] = "create_partition"
    topic: str
    partition: int
    replicas: tuple[int, ...]  # assignment order; the first is the preferred leader
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class ChangePartition:
    """A partition's new state. Every change bumps `partition_epoch`; a leader change bumps
    `leader_epoch`. `leader` None keeps the leader, NO_LEADER (-1) takes it away; `isr` None
    keeps the ISR. `unclean`: the leader came from outside the ISR and data may be lost.
    `recovering` (None keeps it): the partition's last ISR member restarted after an unclean
    shutdown, so its log may lack acknowledged records; no clean election, the longest log of
    all replicas leads (KIP-966's unclean recovery). A new leader ends it.
    """

    TYPE: ClassVar[str] = "change_partition"
    topic: str
    partition: int
    leader: int | None
    isr: tuple[int, ...] | None
    leader_epoch: int
    partition_epoch: int
    reason: str
    unclean: bool = False
    recovering: bool | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    TYPE: ClassVar[str] = "delete_topic"
    name: str


@dataclass(frozen=True, slots=True)
class ChangeConfig:
    """Set (or with `value` None, remove) one dynamic config. `resource_type` is "topic"
    (name = the topic), "broker" (name = the broker id) or "cluster" (name = "").
    """

    TYPE: ClassVar[str] = "change_config"
    resource_type: str
    name: str
    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class AllocateProducerIds:
    """`broker_id` received the block [previous next_producer_id, `next_producer_id`)."""

    TYPE: ClassVar[str] = "allocate_producer_ids"
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """An ACL is created (Kafka's AccessControlEntryRecord). The enums are Kafka's wire codes
    (core/security/acl.py); `acl_id` (32 hex digits, from the record's offset) is what
    RemoveAccessControlEntry names."""

    TYPE: ClassVar[str] = "access_control_entry"
    acl_id: str
    resource_type: int
    resource_name: str
    pattern_type: int  # LITERAL (3) or PREFIXED (4)
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntry:
    TYPE: ClassVar[str] = "remove_access_control_entry"
    acl_id: str


@dataclass(frozen=True, slots=True)
class UserScramCredential:
    """A user's SCRAM credential for one mechanism is set (Kafka's UserScramCredentialRecord):
    never the password, only what the server checks a proof with. `mechanism` is Kafka's code
    (1 SCRAM-SHA-256, 2 SCRAM-SHA-512); the bytes are base64 (standard alphabet, padded)."""

    TYPE: ClassVar[str] = "user_scram_credential"
    name: str
    mechanism: int
    salt: str
    stored_key: str
    server_key: str
    iterations: int

    @classmethod
    def of(cls, name: str, credential: ScramCredential) -> UserScramCredential:
        return cls(
            name,
            credential.mechanism.code,
            _base64(credential.salt),
            _base64(credential.stored_key),
            _base64(credential.server_key),
            credential.iterations,
        )

    def credential(self) -> ScramCredential:
        """The credential; ValueError if the mechanism or a base64 field is not valid."""
        mechanism = ScramMechanism.from_code(self.mechanism)
        if mechanism is None:
            raise ValueError(f"unknown SCRAM mechanism {self.mechanism}")
        try:
            salt, stored_key, server_key = (
                base64.b64decode(text, validate=True)
                for text in (self.salt, self.stored_key, self.server_key)
            )
        except binascii.Error as error:
            raise ValueError(f"SCRAM credential of {self.name!r}: {error}") from None
        return ScramCredential(mechanism, salt, stored_key, server_key, self.iterations)

    def __repr__(self) -> str:  # the keys stay out of logs, as ScramCredential's repr does
        return (
            f"UserScramCredential(name={self.name!r}, mechanism={self.mechanism}, "
            f"iterations={self.iterations})"
        )


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredential:
    TYPE: ClassVar[str] = "remove_user_scram_credential"
    name: str
    mechanism: int


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


MetadataRecord = (
    RegisterBroker
    | FenceBroker
    | UnfenceBroker
    | CreateTopic
    | CreatePartition
    | ChangePartition
    | DeleteTopic
    | ChangeConfig
    | AllocateProducerIds
    | AccessControlEntry
    | RemoveAccessControlEntry
    | UserScramCredential
    | RemoveUserScramCredential
)

RECORD_TYPES: dict[str, type[MetadataRecord]] = {
    cls.TYPE: cls
    for cls in (
        RegisterBroker,
        FenceBroker,
        UnfenceBroker,
        CreateTopic,
        CreatePartition,
        ChangePartition,
        DeleteTopic,
        ChangeConfig,
        AllocateProducerIds,
        AccessControlEntry,
        RemoveAccessControlEntry,
        UserScramCredential,
        RemoveUserScramCredential,
    )
}
# Field name -> declared type, per record type, resolved once.
_FIELD_TYPES: dict[str, dict[str, Any]] = {
    name: {f.name: get_type_hints(cls)[f.name] for f in fields(cls)}
    for name, cls in RECORD_TYPES.items()
}
# Fields with a default (added after the first release): a record may lack them.
_OPTIONAL_FIELDS: dict[str, set[str]] = {
    name: {f.name for f in fields(cls) if f.default is not MISSING}
    for name, cls in RECORD_TYPES.items()
}
assert all("type" not in hints for hints in _FIELD_TYPES.values())


def encode_record(record: MetadataRecord) -> bytes:
    document: dict[str, Any] = {"type": record.TYPE}
    for f in fields(record):
        document[f.name] = _to_json(getattr(record, f.name))
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _to_json(value: Any) -> Any:
    """Nested records (an Endpoint) become objects; JSON takes the rest as it is."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple | list):
        return [_to_json(item) for item in value]
    return value


def decode_record(data: bytes | bytearray | memoryview) -> MetadataRecord:
    """The record in `data`; MetadataDecodeError if it is not exactly one record we know."""
    try:
        document = json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError) as error:
        raise MetadataDecodeError(f"metadata record is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise MetadataDecodeError("metadata record is not a JSON object")
    tag = document.pop("type", None)
    if not isinstance(tag, str) or tag not in RECORD_TYPES:
        raise MetadataDecodeError(f"unknown metadata record type {tag!r}")
    field_types = _FIELD_TYPES[tag]
    unknown = set(document) - set(field_types)
    if unknown:
        raise MetadataDecodeError(f"{tag}: unknown fields {sorted(unknown)}")
    values: dict[str, Any] = {}
    for name, hint in field_types.items():
        if name not in document:
            if name in _OPTIONAL_FIELDS[tag]:
                continue
            raise MetadataDecodeError(f"{tag}: missing field {name!r}")
        values[name] = _from_json(document[name], hint, f"{tag}.{name}")
    return RECORD_TYPES[tag](**values)


def _from_json(value: Any, hint: Any, where: str) -> Any:
    """`value` as the declared type `hint` (JSON arrays become tuples), or MetadataDecodeError."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in get_args(hint):
            return None
        (inner,) = [arg for arg in get_args(hint) if arg is not type(None)]
        return _from_json(value, inner, where)
    if hint in (int, str, bool):
        if type(value) is not hint:  # `type`, not isinstance: True is no int here
            raise MetadataDecodeError(f"{where}: {value!r} is not a {hint.__name__}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise MetadataDecodeError(f"{where}: {value!r} is not a list")
        return tuple(_from_json(item, get_args(hint)[0], where) for item in value)
    if origin is dict:
        if not isinstance(value, dict):
            raise MetadataDecodeError(f"{where}: {value!r} is not an object")
        return {key: _from_json(item, str, f"{where}[{key!r}]") for key, item in value.items()}
    if is_dataclass(hint):
        if not isinstance(value, dict):
            raise MetadataDecodeError(f"{where}: {value!r} is not an object")
        hints = get_type_hints(hint)
        names = [f.name for f in fields(hint)]
        if set(value) != set(names):
            raise MetadataDecodeError(f"{where}: fields {sorted(value)}, expected {sorted(names)}")
        make = cast(Callable[..., Any], hint)  # a dataclass type: a record's value class
        return make(
            **{name: _from_json(value[name], hints[name], f"{where}.{name}") for name in names}
        )
    raise AssertionError(f"{where}: no JSON rule for {hint}")


def records_to_batch(
    records: Sequence[MetadataRecord], *, base_offset: int, timestamp_ms: int
) -> bytes:
    """One record batch holding `records` (key null) at offsets base_offset, base_offset + 1..."""
    return build_batch(
        [(None, encode_record(record)) for record in records],
        base_offset=base_offset,
        base_timestamp=timestamp_ms,
    )


def records_from_batches(buf: bytes | bytearray | memoryview) -> list[tuple[int, MetadataRecord]]:
    """(offset, record) of every record in a buffer of whole batches. Raises CorruptRecordError
    for a bad batch and MetadataDecodeError for a bad record.
    """
    decoded: list[tuple[int, MetadataRecord]] = []
    for position, header in iter_batches(buf):
        if header.is_control:
            continue
        for record in decode_batch(buf, position):
            if record.value is None:
                raise MetadataDecodeError(f"metadata record at offset {record.offset} is null")
            decoded.append((record.offset, decode_record(record.value)))
    return decoded
