"""``rlog acl add|list|remove``: ACLs, kept in the cluster's metadata log, as kafka-acls.sh and
``rpk security acl`` manage them.

An ACL allows or denies a principal (``User:alice``; a bare name means ``User:`` it) an
operation on a resource from a host. ``add`` makes one ACL for every combination of the
principals, hosts, operations and resources named, in one CreateAcls request, and prints each
with the cluster's verdict (a refused one has an ERROR, the others are stored). ``list`` and
``remove`` take the same flags as filters: what is not named matches anything, and
``--resource-pattern-type`` chooses how resource names match (``any``: the exact name, any
pattern type; ``match``: every ACL that applies to a resource of that name, including
``*`` and matching prefixes; ``literal`` / ``prefixed``: the exact name with that type).
``remove`` prints what it removed and asks nothing; ``--dry-run`` prints what it would
remove. It needs at least one flag, so that nothing is removed by accident (``--operation
any`` matches every ACL).

Everything goes through confluent-kafka's AdminClient (CreateAcls, DescribeAcls, DeleteAcls),
so the cluster resource is ``BROKER`` to librdkafka and ``CLUSTER`` (named ``kafka-cluster``)
on the wire and here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from rlog.cli.admin import Admin, JsonOption, PropertyOption, open_admin
from rlog.cli.discovery import BootstrapOption, DataDirOption, kafka_error, settings_of
from rlog.cli.terminal import CliError, ExitCode, Terminal

app = typer.Typer(
    help="Add, list and remove ACLs (kafka-acls.sh; rpk security acl).", no_args_is_help=True
)

CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name
HEADERS = (
    "PRINCIPAL",
    "HOST",
    "RESOURCE-TYPE",
    "RESOURCE-NAME",
    "RESOURCE-PATTERN-TYPE",
    "OPERATION",
    "PERMISSION",
)
# librdkafka's name for the cluster resource type is BROKER; Kafka's (and the wire's) CLUSTER.
TYPE_NAMES = {
    ResourceType.TOPIC: "TOPIC",
    ResourceType.GROUP: "GROUP",
    ResourceType.BROKER: "CLUSTER",
    ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID",
}
OPERATIONS = {
    operation.name.lower().replace("_", "-"): operation
    for operation in AclOperation
    if operation not in (AclOperation.UNKNOWN, AclOperation.ANY)
}
TRANSPORT_FAILURES = (ExitCode.UNREACHABLE, ExitCode.TIMEOUT)


class AddPatternType(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class FilterPatternType(StrEnum):
    ANY = "any"
    MATCH = "match"
    LITERAL = "literal"
    PREFIXED = "prefixed"


AllowPrincipalOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-principal",
        metavar="PRINCIPAL",
        help="A principal (User:alice, or alice) the ACL allows (repeatable).",
        show_default=False,
    ),
]
DenyPrincipalOption = Annotated[
    list[str] | None,
    typer.Option(
        "--deny-principal",
        metavar="PRINCIPAL",
        help="A principal the ACL denies (repeatable).",
        show_default=False,
    ),
]
HostOption = Annotated[
    list[str] | None,
    typer.Option(
        "--host",
        metavar="HOST",
        help="A client host (IP address) (repeatable).",
        show_default=False,
    ),
]
OperationOption = Annotated[
    list[str] | None,
    typer.Option(
        "--operation",
        "-o",
        metavar="OPERATION",
        help="An operation (repeatable): all, read, write, create, delete, alter, describe, "
        "cluster-action, describe-configs, alter-configs, idempotent-write; to list or remove, "
        "also any.",
        show_default=False,
    ),
]
TopicOption = Annotated[
    list[str] | None,
    typer.Option("--topic", metavar="TOPIC", help="A topic name (repeatable).", show_default=False),
]
GroupOption = Annotated[
    list[str] | None,
    typer.Option(
        "--group", metavar="GROUP", help="A consumer group id (repeatable).", show_default=False
    ),
]
ClusterOption = Annotated[
    bool, typer.Option("--cluster", help=f"The cluster resource ({CLUSTER_NAME}).")
]
TransactionalIdOption = Annotated[
    list[str] | None,
    typer.Option(
        "--transactional-id",
        metavar="ID",
        help="A transactional id (repeatable).",
        show_default=False,
    ),
]


# -- pure parts: flags to bindings and filters, bindings to rows ----------------------------


def principal_of(text: str) -> str:
    """`User:alice` as given; a bare `alice` is `User:alice` (as rpk reads it). The cluster
    judges the rest (a principal is `Type:name`)."""
    text = text.strip()
    if not text:
        raise CliError("an empty principal (expected User:NAME)", ExitCode.USAGE)
    return text if ":" in text else f"User:{text}"


def operation_of(text: str, *, allow_any: bool) -> AclOperation:
    key = text.strip().lower().replace("_", "-")
    if allow_any and key == "any":
        return AclOperation.ANY
    if key not in OPERATIONS:
        known = ", ".join([*OPERATIONS, *(["any"] if allow_any else [])])
        raise CliError(f"--operation: unknown operation {text!r} (one of: {known})", ExitCode.USAGE)
    return OPERATIONS[key]


def resources_of(
    topics: Sequence[str], groups: Sequence[str], cluster: bool, transactional_ids: Sequence[str]
) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, name) for name in topics]
    resources += [(ResourceType.GROUP, name) for name in groups]
    if cluster:
        resources.append((ResourceType.BROKER, CLUSTER_NAME))
    resources += [(ResourceType.TRANSACTIONAL_ID, name) for name in transactional_ids]
    for kind, name in resources:
        if not name:
            raise CliError(f"an empty {TYPE_NAMES[kind].lower()} name", ExitCode.USAGE)
    return resources


@dataclass(frozen=True)
class Selection:
    """What the flags named; empty lists name nothing."""

    allow: list[str]
    deny: list[str]
    hosts: list[str]
    operations: list[AclOperation]
    resources: list[tuple[ResourceType, str]]

    @classmethod
    def of(
        cls,
        allow: Sequence[str] | None,
        deny: Sequence[str] | None,
        hosts: Sequence[str] | None,
        operations: Sequence[str] | None,
        resources: list[tuple[ResourceType, str]],
        *,
        filtering: bool,
    ) -> Selection:
        return cls(
            allow=_unique(principal_of(p) for p in allow or ()),
            deny=_unique(principal_of(p) for p in deny or ()),
            hosts=_unique(h.strip() for h in hosts or ()),
            operations=_unique(operation_of(o, allow_any=filtering) for o in operations or ()),
            resources=_unique(resources),
        )

    @property
    def principals(self) -> list[tuple[str, AclPermissionType]]:
        return [(p, AclPermissionType.ALLOW) for p in self.allow] + [
            (p, AclPermissionType.DENY) for p in self.deny
        ]

    @property
    def names_anything(self) -> bool:
        return bool(self.principals or self.hosts or self.operations or self.resources)


def _unique(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def bindings_to_add(selection: Selection, pattern: AddPatternType) -> list[AclBinding]:
    if not selection.principals:
        raise CliError("name a principal: --allow-principal or --deny-principal", ExitCode.USAGE)
    if not selection.operations:
        raise CliError("name an operation: --operation", ExitCode.USAGE)
    if not selection.resources:
        raise CliError(
            "name a resource: --topic, --group, --cluster or --transactional-id", ExitCode.USAGE
        )
    pattern_type = ResourcePatternType[pattern.name]
    return [
        AclBinding(kind, name, pattern_type, principal, host, operation, permission)
        for kind, name in selection.resources
        for principal, permission in selection.principals
        for host in selection.hosts or ["*"]
        for operation in selection.operations
    ]


def filters_of(selection: Selection, pattern: FilterPatternType) -> list[AclBindingFilter]:
    """One filter per combination of what was named (nothing named: anything)."""
    pattern_type = ResourcePatternType[pattern.name]
    resources: list[tuple[ResourceType, str | None]] = [*selection.resources] or [
        (ResourceType.ANY, None)
    ]
    principals: list[tuple[str | None, AclPermissionType]] = [*selection.principals] or [
        (None, AclPermissionType.ANY)
    ]
    return [
        AclBindingFilter(kind, name, pattern_type, principal, host, operation, permission)
        for kind, name in resources
        for principal, permission in principals
        for host in [*selection.hosts] or [None]
        for operation in [*selection.operations] or [AclOperation.ANY]
    ]


def _key(binding: AclBinding) -> tuple[Any, ...]:
    return (
        TYPE_NAMES.get(binding.restype, binding.restype.name),
        binding.name,
        binding.resource_pattern_type.value,
        binding.principal,
        binding.host,
        binding.operation.value,
        binding.permission_type.value,
    )


def sorted_bindings(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    unique = {_key(binding): binding for binding in bindings}
    return [unique[key] for key in sorted(unique)]


def row(binding: AclBinding) -> list[str]:
    return [
        binding.principal,
        binding.host,
        TYPE_NAMES.get(binding.restype, binding.restype.name),
        binding.name,
        binding.resource_pattern_type.name,
        binding.operation.name,
        binding.permission_type.name,
    ]


def document(binding: AclBinding) -> dict[str, Any]:
    principal, host, resource_type, name, pattern, operation, permission = row(binding)
    return {
        "principal": principal,
        "host": host,
        "resource_type": resource_type,
        "resource_name": name,
        "pattern_type": pattern,
        "operation": operation,
        "permission": permission,
    }


def show(terminal: Terminal, bindings: Sequence[AclBinding], json_out: bool) -> None:
    if json_out:
        terminal.json([document(binding) for binding in bindings])
    else:
        terminal.table(HEADERS, [row(binding) for binding in bindings])


# -- talking to the cluster ------------------------------------------------------------------


def _refusal(admin: Admin, future: Any, action: str) -> str | None:
    """None when the future succeeded; the cluster's refusal as `NAME: message`; a CliError
    raised for a cluster that did not answer."""
    try:
        future.result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        error = kafka_error(exc, bootstrap=admin.bootstrap, action=action)
        if error.code in TRANSPORT_FAILURES:
            raise error from None
        reason = exc.args[0] if exc.args else None
        if isinstance(reason, KafkaError):
            return f"{reason.name()}: {reason.str()}"
        return str(exc)
    except TimeoutError:
        raise admin.timeout_error(action) from None
    return None


def describe(admin: Admin, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
    found: list[AclBinding] = []
    for acl_filter in filters:
        future = admin.client.describe_acls(acl_filter, request_timeout=admin.timeout_s)
        found += admin.result(future, "describe ACLs")
    return sorted_bindings(found)


# -- commands ------------------------------------------------------------------------------


@app.command(no_args_is_help=True)
def add(
    ctx: typer.Context,
    allow_principal: AllowPrincipalOption = None,
    deny_principal: DenyPrincipalOption = None,
    host: HostOption = None,
    operation: OperationOption = None,
    topic: TopicOption = None,
    group: GroupOption = None,
    cluster: ClusterOption = False,
    transactional_id: TransactionalIdOption = None,
    resource_pattern_type: Annotated[
        AddPatternType,
        typer.Option(
            "--resource-pattern-type",
            help="literal: the resource names as given (* is every resource of the type); "
            "prefixed: every resource whose name starts so.",
            case_sensitive=False,
        ),
    ] = AddPatternType.LITERAL,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Add ACLs: one for each principal, host (default *), operation and resource named.
    Adding an ACL that exists changes nothing and succeeds."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    resources = resources_of(topic or [], group or [], cluster, transactional_id or [])
    selection = Selection.of(
        allow_principal, deny_principal, host, operation, resources, filtering=False
    )
    bindings = bindings_to_add(selection, resource_pattern_type)
    admin = open_admin(settings, properties)
    futures = admin.client.create_acls(bindings, request_timeout=settings.timeout_s)
    outcomes = [(binding, _refusal(admin, futures[binding], "add ACLs")) for binding in bindings]
    terminal = settings.terminal
    if json_out:
        terminal.json([document(binding) | {"error": error} for binding, error in outcomes])
    else:
        rows = [[*row(binding), error or ""] for binding, error in outcomes]
        terminal.table((*HEADERS, "ERROR"), rows)
    refused = sum(1 for _, error in outcomes if error)
    if refused:
        raise CliError(f"{refused} of {len(outcomes)} ACLs were refused", ExitCode.FAILURE)


def _filter_pattern_option() -> Any:
    return typer.Option(
        "--resource-pattern-type",
        help="How resource names match: any (the exact name, any pattern type), match "
        "(every ACL that applies to a resource of that name: its literal ACLs, * and "
        "prefixes of it), literal, prefixed.",
        case_sensitive=False,
    )


@app.command("list")
def list_acls(
    ctx: typer.Context,
    allow_principal: AllowPrincipalOption = None,
    deny_principal: DenyPrincipalOption = None,
    host: HostOption = None,
    operation: OperationOption = None,
    topic: TopicOption = None,
    group: GroupOption = None,
    cluster: ClusterOption = False,
    transactional_id: TransactionalIdOption = None,
    resource_pattern_type: Annotated[
        FilterPatternType, _filter_pattern_option()
    ] = FilterPatternType.ANY,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """List ACLs: all of them, or those the flags select (any of the values of a flag)."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    resources = resources_of(topic or [], group or [], cluster, transactional_id or [])
    selection = Selection.of(
        allow_principal, deny_principal, host, operation, resources, filtering=True
    )
    admin = open_admin(settings, properties)
    show(settings.terminal, describe(admin, filters_of(selection, resource_pattern_type)), json_out)


@app.command(no_args_is_help=True)
def remove(
    ctx: typer.Context,
    allow_principal: AllowPrincipalOption = None,
    deny_principal: DenyPrincipalOption = None,
    host: HostOption = None,
    operation: OperationOption = None,
    topic: TopicOption = None,
    group: GroupOption = None,
    cluster: ClusterOption = False,
    transactional_id: TransactionalIdOption = None,
    resource_pattern_type: Annotated[
        FilterPatternType, _filter_pattern_option()
    ] = FilterPatternType.ANY,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would be removed; remove nothing.")
    ] = False,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Remove the ACLs the flags select, and show them. --operation any selects every ACL."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    resources = resources_of(topic or [], group or [], cluster, transactional_id or [])
    selection = Selection.of(
        allow_principal, deny_principal, host, operation, resources, filtering=True
    )
    if not selection.names_anything:
        raise CliError(
            "name what to remove: a principal, a host, an operation (--operation any selects "
            "every ACL) or a resource",
            ExitCode.USAGE,
        )
    filters = filters_of(selection, resource_pattern_type)
    admin = open_admin(settings, properties)
    terminal = settings.terminal
    if dry_run:
        show(terminal, describe(admin, filters), json_out)
        terminal.note("Dry run: nothing was removed.")
        return
    futures = admin.client.delete_acls(filters, request_timeout=settings.timeout_s)
    removed: list[AclBinding] = []
    for acl_filter in filters:
        removed += admin.result(futures[acl_filter], "remove ACLs")
    removed = sorted_bindings(removed)
    show(terminal, removed, json_out)
    terminal.note(f"Removed {len(removed)} ACL{'' if len(removed) == 1 else 's'}.")
