"""One readable line per committed metadata record, for operators watching the controller log.

metadata 17: partition t-0 leader 2 epoch 3 isr [2, 3] partition_epoch 5 (broker 1 fenced: ...)
metadata 18: broker 1 fenced
"""

from __future__ import annotations

from collections.abc import Sequence

from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    NO_LEADER,
    AccessControlEntry,
    AllocateProducerIds,
    ChangeConfig,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataRecord,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UnfenceBroker,
    UserScramCredential,
)
from rlog.core.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from rlog.core.security.scram import ScramMechanism

# (leader, isr) of partitions changed earlier in the same batch, which the image does not hold yet.
_Seen = dict[tuple[str, int], tuple[int, tuple[int, ...]]]


def describe_records(
    image: MetadataImage, base_offset: int, records: Sequence[MetadataRecord]
) -> list[str]:
    """Lines for `records` at offsets base_offset...; `image` is the state before them."""
    seen: _Seen = {}
    return [
        f"metadata {base_offset + index}: {_describe(image, seen, record)}"
        for index, record in enumerate(records)
    ]


def _leader(leader: int) -> str:
    return "none" if leader == NO_LEADER else str(leader)


def _describe(image: MetadataImage, seen: _Seen, record: MetadataRecord) -> str:
    match record:
        case RegisterBroker():
            rack = f" rack {record.rack}" if record.rack else ""
            return (
                f"broker {record.broker_id} registered at {record.host}:{record.port}{rack} "
                f"(broker epoch {record.broker_epoch}, incarnation {record.incarnation_id})"
            )
        case FenceBroker():
            return f"broker {record.broker_id} fenced"
        case UnfenceBroker():
            return f"broker {record.broker_id} unfenced"
        case CreateTopic():
            configs = f" configs {record.configs}" if record.configs else ""
            return f"topic {record.name} created (id {record.topic_id}){configs}"
        case CreatePartition():
            seen[(record.topic, record.partition)] = (record.leader, record.isr)
            return (
                f"partition {record.topic}-{record.partition} created: replicas "
                f"{list(record.replicas)} leader {_leader(record.leader)} epoch "
                f"{record.leader_epoch} isr {list(record.isr)}"
            )
        case ChangePartition():
            return _describe_change(image, seen, record)
        case DeleteTopic():
            return f"topic {record.name} deleted"
        case ChangeConfig():
            where = {"topic": f"topic {record.name}", "broker": f"broker {record.name}"}.get(
                record.resource_type, "cluster default"
            )
            if record.value is None:
                return f"config {where}: {record.key} removed"
            return f"config {where}: {record.key} = {record.value}"
        case AllocateProducerIds():
            return (
                f"producer ids below {record.next_producer_id} allocated to broker "
                f"{record.broker_id}"
            )
        case AccessControlEntry():
            return f"ACL {record.acl_id} created: {_acl(record)}"
        case RemoveAccessControlEntry():
            binding = image.acls.get(record.acl_id)
            what = f": {_binding_text(binding)}" if binding is not None else ""
            return f"ACL {record.acl_id} removed{what}"
        case UserScramCredential():  # never the salt or the keys
            return (
                f"SCRAM credential of user {record.name!r} set: "
                f"{_mechanism(record.mechanism)}, {record.iterations} iterations"
            )
        case RemoveUserScramCredential():
            return (
                f"SCRAM credential of user {record.name!r} removed: {_mechanism(record.mechanism)}"
            )
    return repr(record)


def _acl(record: AccessControlEntry) -> str:
    return _binding_text(
        AclBinding(
            ResourceType.from_code(record.resource_type),
            record.resource_name,
            PatternType.from_code(record.pattern_type),
            record.principal,
            record.host,
            AclOperation.from_code(record.operation),
            AclPermissionType.from_code(record.permission),
        )
    )


def _binding_text(binding: AclBinding) -> str:
    return (
        f"{binding.permission.name} {binding.principal!r} {binding.operation.name} from host "
        f"{binding.host!r} on {binding.resource_type.name} {binding.pattern_type.name} "
        f"{binding.resource_name!r}"
    )


def _mechanism(code: int) -> str:
    mechanism = ScramMechanism.from_code(code)
    return mechanism.mechanism_name if mechanism is not None else f"mechanism {code}"


def _describe_change(image: MetadataImage, seen: _Seen, record: ChangePartition) -> str:
    key = (record.topic, record.partition)
    before = seen.get(key)
    if before is None:
        info = image.partition(record.topic, record.partition)
        before = (info.leader, info.isr) if info is not None else (NO_LEADER, ())
    leader = before[0] if record.leader is None else record.leader
    isr = before[1] if record.isr is None else record.isr
    seen[key] = (leader, isr)
    unclean = " UNCLEAN" if record.unclean else ""
    return (
        f"partition {record.topic}-{record.partition} leader {_leader(leader)} epoch "
        f"{record.leader_epoch} isr {list(isr)} partition_epoch {record.partition_epoch}"
        f"{unclean} ({record.reason})"
    )
