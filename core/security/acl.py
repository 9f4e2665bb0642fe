"""ACLs and the authorizer, as Kafka's StandardAuthorizer decides (KRaft's, ACLs kept in the
metadata log): the enums with their wire codes, a binding, the filters DescribeAcls and
DeleteAcls match with, the checks CreateAcls makes, and `Authorizer.authorize`.

How a request is decided (`Authorizer.decide`), in Kafka's order:
1. A super user (`super.users`, e.g. `User:admin;User:broker`) may do anything.
2. The ACLs that apply are those of the resource's type whose pattern matches the name: a
   LITERAL one with the same name, a LITERAL one named `*` (every resource of the type), and a
   PREFIXED one whose name starts the resource's name.
3. Of those, the ones for the principal or for `User:*`, from the client's host or `*`, and for
   the operation: an ALLOW for READ, WRITE, DELETE or ALTER also allows DESCRIBE, an ALLOW for
   ALTER_CONFIGS also allows DESCRIBE_CONFIGS, and ALL matches every operation, to allow or to
   deny. A DENY implies nothing: DENY READ does not deny DESCRIBE.
4. Any matching DENY denies; else any matching ALLOW allows.
5. If no ACL at all applies to the resource (step 2 found none, whoever they are for), the
   answer is `allow.everyone.if.no.acl.found` (False by default); if some apply but none
   matched, the answer is no.

The index: ACLs by (resource type, name) for LITERAL and for PREFIXED, each bucket by principal,
and for each type the lengths of its PREFIXED names; a decision looks up the name, `*`, and one
prefix per distinct PREFIXED length, instead of scanning every ACL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"  # as a LITERAL resource name: every resource of the type; as a host: every host
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @classmethod
    def from_code(cls, code: int) -> ResourceType:
        """The member with that wire code; UNKNOWN for codes Kafka has not defined."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: the patterns that would apply to a resource of that name
    LITERAL = 3
    PREFIXED = 4

    @classmethod
    def from_code(cls, code: int) -> PatternType:
        """The member with that wire code; UNKNOWN for codes Kafka has not defined."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14

    @classmethod
    def from_code(cls, code: int) -> AclOperation:
        """The member with that wire code; UNKNOWN for codes Kafka has not defined."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3

    @classmethod
    def from_code(cls, code: int) -> AclPermissionType:
        """The member with that wire code; UNKNOWN for codes Kafka has not defined."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


# Operations an ALLOW implies beyond its own (only ALLOWs imply, never DENYs).
_IMPLIES_DESCRIBE = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# The operations each resource type has (the bits of the `*_authorized_operations` answers).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice", or "User:*" for everyone
    host: str  # the client's IP address as the broker sees it, or "*"
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls or DeleteAcls filter. None (names, principal, host) and ANY match all.

    Pattern types: ANY matches every pattern type with the name compared exactly; LITERAL or
    PREFIXED match that type with the name compared exactly; MATCH (with a name) finds the
    patterns that would apply to a resource of that name: the LITERAL one of that name, the
    LITERAL `*`, and the PREFIXED ones the name starts with.
    """

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding) and self.matches_entry(binding)

    def matches_pattern(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        wanted = self.pattern_type
        if wanted not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if wanted in (PatternType.ANY, binding.pattern_type):
            return name == binding.resource_name
        # MATCH: the patterns that apply to a resource called `name`.
        if binding.pattern_type == PatternType.LITERAL:
            return binding.resource_name in (name, WILDCARD)
        return binding.pattern_type == PatternType.PREFIXED and name.startswith(
            binding.resource_name
        )

    def matches_entry(self, binding: AclBinding) -> bool:
        return (
            self.principal in (None, binding.principal)
            and self.host in (None, binding.host)
            and self.operation in (AclOperation.ANY, binding.operation)
            and self.permission in (AclPermissionType.ANY, binding.permission)
        )


ANY_ACL = AclFilter()


class DecisionReason(Enum):
    SUPER_USER = "super-user"
    ALLOW_ACL = "allow-acl"
    DENY_ACL = "deny-acl"
    NO_ACL_FOUND = "no-acl-found"  # no ACL applies to the resource: allow.everyone.if.no.acl.found
    NO_MATCHING_ACL = "no-matching-acl"  # ACLs apply to the resource, none allows this


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorization's outcome and why (what a denial's journal entry says)."""

    allowed: bool
    reason: DecisionReason
    binding: AclBinding | None = None


def valid_principal(principal: str) -> bool:
    """`Type:name`, with a type (Kafka's KafkaPrincipal string form)."""
    kind, colon, _ = principal.partition(":")
    return bool(colon) and bool(kind)


def parse_super_users(value: str) -> frozenset[str]:
    """`super.users`: principals separated by `;` (blanks ignored). ValueError on a bad one."""
    users = frozenset(part.strip() for part in value.split(";") if part.strip())
    bad = sorted(user for user in users if not valid_principal(user))
    if bad:
        raise ValueError(f"super.users: not principals of the form Type:name: {bad}")
    return users


def validate_binding(binding: AclBinding) -> tuple[ErrorCode, str]:
    """The checks CreateAcls makes on each ACL (Kafka's AclApis and the controller's
    AclControlManager.validateNewAcl): (NONE, "") for a valid one, else INVALID_REQUEST.

    rlog also requires a `Type:name` principal: Kafka's KRaft controller stores any string and
    only fails when it authorizes against it.
    """
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return ErrorCode.INVALID_REQUEST, f"Invalid resource type {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return ErrorCode.INVALID_REQUEST, f"Invalid pattern type {binding.pattern_type.name}"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return ErrorCode.INVALID_REQUEST, f"Invalid operation {binding.operation.name}"
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return ErrorCode.INVALID_REQUEST, f"Invalid permission type {binding.permission.name}"
    if not binding.resource_name:
        return ErrorCode.INVALID_REQUEST, "Resource name should not be empty"
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return (
            ErrorCode.INVALID_REQUEST,
            f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}",
        )
    if not valid_principal(binding.principal):
        return ErrorCode.INVALID_REQUEST, f"Invalid principal {binding.principal!r}: not Type:name"
    return ErrorCode.NONE, ""


def validate_filter(acl_filter: AclFilter) -> tuple[ErrorCode, str]:
    """DescribeAcls and DeleteAcls refuse filters with UNKNOWN fields (INVALID_REQUEST)."""
    unknown = [
        name
        for name, value in (
            ("resource type", acl_filter.resource_type),
            ("pattern type", acl_filter.pattern_type),
            ("operation", acl_filter.operation),
            ("permission type", acl_filter.permission),
        )
        if value == 0  # every enum's UNKNOWN
    ]
    if unknown:
        return ErrorCode.INVALID_REQUEST, f"Unknown {', '.join(unknown)} in the filter"
    return ErrorCode.NONE, ""


def binding_from_creation(creation: Body) -> AclBinding:
    """A CreateAcls `creations[]` entry (codes the enums do not know become UNKNOWN)."""
    return AclBinding(
        resource_type=ResourceType.from_code(creation["resource_type"]),
        resource_name=creation["resource_name"],
        pattern_type=PatternType.from_code(creation["resource_pattern_type"]),
        principal=creation["principal"],
        host=creation["host"],
        operation=AclOperation.from_code(creation["operation"]),
        permission=AclPermissionType.from_code(creation["permission_type"]),
    )


def filter_from_body(body: Body) -> AclFilter:
    """A DescribeAcls request body, or one DeleteAcls `filters[]` entry (same field names)."""
    return AclFilter(
        resource_type=ResourceType.from_code(body["resource_type_filter"]),
        resource_name=body["resource_name_filter"],
        pattern_type=PatternType.from_code(body["pattern_type_filter"]),
        principal=body["principal_filter"],
        host=body["host_filter"],
        operation=AclOperation.from_code(body["operation"]),
        permission=AclPermissionType.from_code(body["permission_type"]),
    )


def describe_resources(bindings: Iterable[AclBinding]) -> list[Body]:
    """DescribeAcls' `resources`: the bindings grouped by resource pattern, in a stable order."""
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for binding in bindings:
        key = (binding.resource_type, binding.resource_name, binding.pattern_type)
        grouped.setdefault(key, []).append(binding)
    return [
        {
            "resource_type": resource_type,
            "resource_name": name,
            "pattern_type": pattern_type,
            "acls": [
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": b.operation,
                    "permission_type": b.permission,
                }
                for b in sorted(entries, key=_entry_order)
            ],
        }
        for (resource_type, name, pattern_type), entries in sorted(grouped.items())
    ]


def deleted_acl_body(binding: AclBinding) -> Body:
    """One DeleteAcls `matching_acls[]` entry."""
    return {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": binding.resource_type,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation,
        "permission_type": binding.permission,
    }


def _entry_order(binding: AclBinding) -> tuple[str, str, int, int]:
    return binding.principal, binding.host, binding.operation, binding.permission


def _verdict(binding: AclBinding, host: str, operation: AclOperation) -> AclPermissionType | None:
    """What `binding` (whose pattern and principal apply) says about `operation` from `host`:
    ALLOW, DENY, or None when it says nothing."""
    if binding.host != WILDCARD and binding.host != host:
        return None
    granted = binding.operation
    if granted != AclOperation.ALL and granted != operation:
        if binding.permission != AclPermissionType.ALLOW:
            return None
        if operation == AclOperation.DESCRIBE:
            if granted not in _IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if granted not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return binding.permission


# A bucket: the ACLs of one resource pattern, by principal.
_Bucket = dict[str, list[AclBinding]]


class Authorizer:
    """The ACLs in force and the decisions made from them.

    The metadata layer calls `add` and `remove` as it replays ACL records (both are idempotent,
    as Kafka's controller ignores an ACL created twice); the request path calls `authorize` or
    `decide`; DescribeAcls and DeleteAcls call `matching`.
    """

    def __init__(
        self,
        bindings: Iterable[AclBinding] = (),
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._bindings: set[AclBinding] = set()
        self._literal: dict[tuple[ResourceType, str], _Bucket] = {}
        self._prefixed: dict[tuple[ResourceType, str], _Bucket] = {}
        self._prefix_length_counts: dict[ResourceType, Counter[int]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        for binding in bindings:
            self.add(binding)

    def __len__(self) -> int:
        return len(self._bindings)

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._bindings)

    def __contains__(self, binding: object) -> bool:
        return binding in self._bindings

    def add(self, binding: AclBinding) -> bool:
        """Add an ACL (checked by `validate_binding` first); False if it was there already."""
        if binding in self._bindings:
            return False
        if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"an ACL's pattern type is LITERAL or PREFIXED: {binding}")
        self._bindings.add(binding)
        key = (binding.resource_type, binding.resource_name)
        if binding.pattern_type == PatternType.LITERAL:
            bucket = self._literal.setdefault(key, {})
        else:
            bucket = self._prefixed.setdefault(key, {})
            self._count_prefix(binding.resource_type, len(binding.resource_name), +1)
        bucket.setdefault(binding.principal, []).append(binding)
        return True

    def remove(self, binding: AclBinding) -> bool:
        """Remove an ACL; False if it was not there."""
        if binding not in self._bindings:
            return False
        self._bindings.remove(binding)
        key = (binding.resource_type, binding.resource_name)
        index = self._literal if binding.pattern_type == PatternType.LITERAL else self._prefixed
        bucket = index[key]
        entries = bucket[binding.principal]
        entries.remove(binding)
        if not entries:
            del bucket[binding.principal]
        if not bucket:
            del index[key]
        if binding.pattern_type == PatternType.PREFIXED:
            self._count_prefix(binding.resource_type, len(binding.resource_name), -1)
        return True

    def _count_prefix(self, resource_type: ResourceType, length: int, delta: int) -> None:
        counts = self._prefix_length_counts.setdefault(resource_type, Counter())
        counts[length] += delta
        if counts[length] <= 0:
            del counts[length]
        self._prefix_lengths[resource_type] = tuple(sorted(counts))

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The ACLs a DescribeAcls or DeleteAcls filter selects (`validate_filter` it first)."""
        return [binding for binding in self._bindings if acl_filter.matches(binding)]

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        """May `principal`, connected from `host`, do `operation` on the resource?"""
        return self.decide(principal, host, operation, resource_type, resource_name).allowed

    def decide(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> Decision:
        """`authorize`, saying why: the deciding ACL, the super-user rule or the default."""
        if principal in self.super_users:
            return Decision(True, DecisionReason.SUPER_USER)
        principals = (
            (principal,) if principal == WILDCARD_PRINCIPAL else (principal, WILDCARD_PRINCIPAL)
        )
        found_any = False
        allowed_by: AclBinding | None = None
        for bucket in self._buckets(resource_type, resource_name):
            found_any = True
            for who in principals:
                for binding in bucket.get(who, ()):
                    verdict = _verdict(binding, host, operation)
                    if verdict == AclPermissionType.DENY:
                        return Decision(False, DecisionReason.DENY_ACL, binding)
                    if verdict == AclPermissionType.ALLOW and allowed_by is None:
                        allowed_by = binding
        if allowed_by is not None:
            return Decision(True, DecisionReason.ALLOW_ACL, allowed_by)
        if not found_any:
            return Decision(self.allow_if_no_acl, DecisionReason.NO_ACL_FOUND)
        return Decision(False, DecisionReason.NO_MATCHING_ACL)

    def _buckets(self, resource_type: ResourceType, name: str) -> Iterator[_Bucket]:
        """The non-empty buckets whose pattern applies to the resource."""
        bucket = self._literal.get((resource_type, name))
        if bucket:
            yield bucket
        if name != WILDCARD:
            bucket = self._literal.get((resource_type, WILDCARD))
            if bucket:
                yield bucket
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            bucket = self._prefixed.get((resource_type, name[:length]))
            if bucket:
                yield bucket

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, resource_name: str
    ) -> int:
        """The bit field of the operations allowed on a resource (`1 << code` for each), as
        Metadata, DescribeGroups and DescribeCluster answer when asked."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, operation, resource_type, resource_name):
                bits |= 1 << operation
        return bits

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """May the principal do `operation` on at least one resource of the type? (Kafka's
        Authorizer.authorizeByResourceType: InitProducerId without a transactional id is allowed
        by WRITE on any topic.)

        As Kafka: first an ordinary decision on a resource named "hardcode" (so super users and
        `allow.everyone.if.no.acl.found` count), then a look at the type's ACLs for the
        principal or `User:*`, from the host or `*`, for the operation or ALL (no implied
        operations): a DENY on LITERAL `*` denies; otherwise any ALLOW that no DENY dominates
        allows (a LITERAL ALLOW is dominated by a DENY on the same LITERAL name or on a
        PREFIXED prefix of it, a PREFIXED ALLOW by a DENY on a PREFIXED prefix of it).
        """
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        allow: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        deny: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        allow_everything = False
        for binding in self._bindings:
            if binding.resource_type != resource_type:
                continue
            if binding.host not in (host, WILDCARD):
                continue
            if binding.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if binding.operation not in (operation, AclOperation.ALL):
                continue
            everything = (
                binding.pattern_type == PatternType.LITERAL and binding.resource_name == WILDCARD
            )
            if binding.permission == AclPermissionType.DENY:
                if everything:
                    return False
                deny[binding.pattern_type].add(binding.resource_name)
            elif everything:
                allow_everything = True
            else:
                allow[binding.pattern_type].add(binding.resource_name)
        if allow_everything:
            return True

        def dominated(name: str) -> bool:
            return any(name[:n] in deny[PatternType.PREFIXED] for n in range(1, len(name) + 1))

        for name in allow[PatternType.LITERAL]:
            if name not in deny[PatternType.LITERAL] and not dominated(name):
                return True
        return any(not dominated(name) for name in allow[PatternType.PREFIXED])
