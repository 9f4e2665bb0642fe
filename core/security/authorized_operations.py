"""KIP-430: the operations a client may do on what an answer describes, when it asks.

Metadata (v8+), DescribeCluster, DescribeGroups (v3+) and ConsumerGroupDescribe carry a flag
asking for them; DescribeTopicPartitions always gives them. The answer then holds a bit field
per topic, group or cluster: `1 << code` for each AclOperation allowed (the operations each
resource type has, acl.SUPPORTED_OPERATIONS). Left unasked, the field stays -2**31.

Kafka's rules, which `fill` follows:
- every topic entry the broker answered gets its bits, errors included (an unknown topic too;
  not a request refused whole with INVALID_REQUEST), but not the entries for topics the client
  may not describe: those are added after (the enforcement's `finish`), and keep -2**31;
- groups get their bits only when described without an error;
- the cluster's bits are 0 unless the client may DESCRIBE the cluster;
- without an authorizer, and for a super user, every supported operation is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

Body = dict[str, Any]
# The bits allowed on one resource, by type and name: what the requester's ACLs say.
OperationsOf = Callable[[ResourceType, str], int]

APIS = frozenset(
    {
        ApiKey.METADATA,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    }
)
_DESCRIBE_BIT = 1 << AclOperation.DESCRIBE
# Topic entries that never carry bits: one the client may not describe (however the answer came
# to hold it), and a request refused whole (Kafka's error answer).
_NO_BITS = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_REQUEST})


def supported_operations(resource_type: ResourceType) -> int:
    """Every operation the type has: what a client may do without an authorizer."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS.get(resource_type, ()):
        bits |= 1 << operation
    return bits


def every_operation(resource_type: ResourceType, _name: str) -> int:
    """The OperationsOf without an authorizer, and of a super user."""
    return supported_operations(resource_type)


def fill(
    api_key: int, api_version: int, request: Body, answer: Body, allowed: OperationsOf
) -> None:
    """Put the bits `request` asks for into `answer` (in place), before the entries that
    authorization refused are added to it."""
    if api_key == ApiKey.METADATA:
        if api_version < 8:
            return
        if request.get("include_topic_authorized_operations"):
            _fill_topics(answer, allowed)
        if api_version <= 10 and request.get("include_cluster_authorized_operations"):
            answer["cluster_authorized_operations"] = _cluster_bits(allowed)
    elif api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
        _fill_topics(answer, allowed)
    elif api_key == ApiKey.DESCRIBE_CLUSTER:
        if request.get("include_cluster_authorized_operations"):
            answer["cluster_authorized_operations"] = _cluster_bits(allowed)
    elif api_key in (ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE):
        if api_key == ApiKey.DESCRIBE_GROUPS and api_version < 3:
            return
        if request.get("include_authorized_operations"):
            for group in answer.get("groups") or ():
                if group.get("error_code", ErrorCode.NONE) == ErrorCode.NONE:
                    group["authorized_operations"] = allowed(ResourceType.GROUP, group["group_id"])


def _fill_topics(answer: Body, allowed: OperationsOf) -> None:
    for topic in answer.get("topics") or ():
        name = topic.get("name")
        if name is None:  # a topic id nobody knows: no name to check
            continue
        if topic.get("error_code") in _NO_BITS:
            continue
        topic["topic_authorized_operations"] = allowed(ResourceType.TOPIC, name)


def _cluster_bits(allowed: OperationsOf) -> int:
    bits = allowed(ResourceType.CLUSTER, CLUSTER_NAME)
    return bits if bits & _DESCRIBE_BIT else 0
