"""KIP-430's authorized operations, filled into answers as Kafka does: only when asked (and in the
versions that carry them), from the requester's ACLs with implied operations, the cluster's only
with DESCRIBE on it, groups only when described without an error, and never for the entries
authorization refused."""

from __future__ import annotations

from typing import Any

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from rlog.core.security.authorized_operations import (
    every_operation,
    fill,
    supported_operations,
)

UNASKED = -(2**31)
ALICE = "User:alice"


def bits(*operations: AclOperation) -> int:
    return sum(1 << op for op in operations)


def alice_may(*grants: tuple[ResourceType, str, AclOperation]) -> Any:
    authorizer = Authorizer(
        AclBinding(kind, name, PatternType.LITERAL, ALICE, "*", op, AclPermissionType.ALLOW)
        for kind, name, op in grants
    )
    return lambda kind, name: authorizer.authorized_operations(ALICE, "10.0.0.1", kind, name)


def metadata_answer() -> dict[str, Any]:
    return {
        "topics": [
            {
                "error_code": ErrorCode.NONE,
                "name": "orders",
                "topic_authorized_operations": UNASKED,
            },
            {
                "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "name": "absent",
                "topic_authorized_operations": UNASKED,
            },
            {
                "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "name": "secret",
                "topic_authorized_operations": UNASKED,
            },
            {
                "error_code": ErrorCode.UNKNOWN_TOPIC_ID,
                "name": None,
                "topic_authorized_operations": UNASKED,
            },
        ],
        "cluster_authorized_operations": UNASKED,
    }


def topic_bits(answer: dict[str, Any]) -> list[int]:
    return [t["topic_authorized_operations"] for t in answer["topics"]]


def test_read_on_a_topic_implies_describe_and_a_refused_topic_gets_no_bits() -> None:
    answer = metadata_answer()
    allowed = alice_may((ResourceType.TOPIC, "orders", AclOperation.READ))
    request = {"include_topic_authorized_operations": True}
    fill(ApiKey.METADATA, 12, request, answer, allowed)
    read_describe = bits(AclOperation.READ, AclOperation.DESCRIBE)
    # The unknown topic is checked by name too (Kafka does), the refused and nameless are not.
    assert topic_bits(answer) == [read_describe, 0, UNASKED, UNASKED]
    assert answer["cluster_authorized_operations"] == UNASKED  # not asked, and v11+ has none


def test_nothing_is_filled_unless_asked_or_before_version_8() -> None:
    every = every_operation
    for version, request in (
        (12, {"include_topic_authorized_operations": False}),
        (7, {"include_topic_authorized_operations": True,
             "include_cluster_authorized_operations": True}),
    ):  # fmt: skip
        answer = metadata_answer()
        fill(ApiKey.METADATA, version, request, answer, every)
        assert answer == metadata_answer()


def test_the_cluster_bits_need_describe_on_the_cluster() -> None:
    request = {"include_cluster_authorized_operations": True}
    alter_only = alice_may((ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALTER_CONFIGS))
    answer = metadata_answer()
    fill(ApiKey.METADATA, 10, request, answer, alter_only)
    assert answer["cluster_authorized_operations"] == 0

    describe = alice_may(
        (ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE),
        (ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE),
    )
    answer = {"cluster_authorized_operations": UNASKED}
    fill(ApiKey.DESCRIBE_CLUSTER, 1, request, answer, describe)
    assert answer["cluster_authorized_operations"] == bits(
        AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE
    )


def test_without_an_authorizer_every_supported_operation_is_allowed() -> None:
    answer = {"cluster_authorized_operations": UNASKED}
    request = {"include_cluster_authorized_operations": True}
    fill(ApiKey.DESCRIBE_CLUSTER, 0, request, answer, every_operation)
    assert answer["cluster_authorized_operations"] == supported_operations(ResourceType.CLUSTER)
    topic = supported_operations(ResourceType.TOPIC)
    assert topic == bits(
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
        AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    )  # fmt: skip


def test_groups_get_bits_only_when_described_without_an_error() -> None:
    allowed = alice_may((ResourceType.GROUP, "payments", AclOperation.READ))

    def groups() -> dict[str, Any]:
        return {
            "groups": [
                {"error_code": ErrorCode.NONE, "group_id": "payments",
                 "authorized_operations": UNASKED},
                {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_id": "hr",
                 "authorized_operations": UNASKED},
            ]
        }  # fmt: skip

    for api_key, version in ((ApiKey.DESCRIBE_GROUPS, 5), (ApiKey.CONSUMER_GROUP_DESCRIBE, 0)):
        answer = groups()
        fill(api_key, version, {"include_authorized_operations": True}, answer, allowed)
        read_describe = bits(AclOperation.READ, AclOperation.DESCRIBE)
        assert [g["authorized_operations"] for g in answer["groups"]] == [read_describe, UNASKED]
    answer = groups()  # DescribeGroups before v3 has no such field
    fill(ApiKey.DESCRIBE_GROUPS, 2, {"include_authorized_operations": True}, answer, allowed)
    assert answer == groups()


def test_describe_topic_partitions_always_gives_the_bits_but_not_to_a_refused_request() -> None:
    allowed = alice_may((ResourceType.TOPIC, "orders", AclOperation.WRITE))
    answer = {"topics": [{"error_code": ErrorCode.NONE, "name": "orders"}]}
    fill(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": []}, answer, allowed)
    assert topic_bits(answer) == [bits(AclOperation.WRITE, AclOperation.DESCRIBE)]

    refused = {"topics": [{"error_code": ErrorCode.INVALID_REQUEST, "name": "orders",
                           "topic_authorized_operations": UNASKED}]}  # fmt: skip
    fill(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": []}, refused, allowed)
    assert topic_bits(refused) == [UNASKED]
