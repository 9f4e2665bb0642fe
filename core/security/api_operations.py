"""Which ACL operation on which resource each Kafka API needs, and what a denial answers, as
Kafka's KafkaApis, ControllerApis, AclApis and ConfigHelper check them. A table to implement
the checks from and to test them against; `allows` evaluates one check.

Each API has `checks`, applied in order. A `Check` passes if any of its `Grant`s is allowed
(in order: Kafka asks the CLUSTER-wide grant first and per-resource ones only if it is
denied). Where the resource names come from is the request's field path in the codec's
snake_case (`topics[].name`), `CLUSTER_NAME` for the cluster, or `BY_TYPE` for "any resource of
the type" (`Authorizer.authorize_by_resource_type`). A check's `scope` says how a denial shows:
- REQUEST: the whole request is answered with `error` (Kafka's getErrorResponse);
- EACH: each denied resource is answered with `error`, the others are served;
- FILTERED: denied resources are left out of the answer, silently (listings, and Metadata for
  all topics: a client must not learn that a topic it may not describe exists).
`when` says when a check applies ("" for always).

rlog's brokers forward CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders and
IncrementalAlterConfigs to the controller as plain requests (no Envelope), so the broker,
which knows the client's principal, must check them before forwarding.

Where this table follows Kafka but a brief might expect otherwise: Produce does not check
IDEMPOTENT_WRITE; an idempotent producer needs it (or WRITE on some topic, KIP-679) for
InitProducerId, which is where Kafka checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    Authorizer,
    ResourceType,
)
from rlog.core.security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE

BY_TYPE = "<any resource of the type>"

# The security APIs' keys (core/protocol/apis.py's ApiKey does not list them yet).
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51

# DescribeConfigs/AlterConfigs resource types (Kafka's ConfigResource.Type codes).
CONFIG_TOPIC = 2
CONFIG_BROKER = 4
CONFIG_BROKER_LOGGER = 8
CONFIG_GROUP = 32

_T = ResourceType
_O = AclOperation
_E = ErrorCode


class Scope(Enum):
    REQUEST = "request"
    EACH = "each"
    FILTERED = "filtered"


@dataclass(frozen=True, slots=True)
class Grant:
    operation: AclOperation
    resource_type: ResourceType
    names: str  # a request field path, CLUSTER_NAME or BY_TYPE


@dataclass(frozen=True, slots=True)
class Check:
    any_of: tuple[Grant, ...]
    error: ErrorCode
    scope: Scope
    when: str = ""


@dataclass(frozen=True, slots=True)
class ApiAuthorization:
    checks: tuple[Check, ...]
    note: str = ""


def _on_cluster(operation: AclOperation) -> Grant:
    return Grant(operation, _T.CLUSTER, CLUSTER_NAME)


def _cluster_only(operation: AclOperation, note: str = "") -> ApiAuthorization:
    check = Check((_on_cluster(operation),), _E.CLUSTER_AUTHORIZATION_FAILED, Scope.REQUEST)
    return ApiAuthorization((check,), note)


def _group_request(operation: AclOperation) -> Check:
    return Check(
        (Grant(operation, _T.GROUP, "group_id"),), _E.GROUP_AUTHORIZATION_FAILED, Scope.REQUEST
    )


def _topics(operation: AclOperation, names: str, when: str = "") -> Check:
    return Check(
        (Grant(operation, _T.TOPIC, names),), _E.TOPIC_AUTHORIZATION_FAILED, Scope.EACH, when
    )


def _txn_request(names: str = "transactional_id", when: str = "") -> Check:
    return Check(
        (Grant(_O.WRITE, _T.TRANSACTIONAL_ID, names),),
        _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        Scope.REQUEST,
        when,
    )


def _configs(operation: AclOperation) -> ApiAuthorization:
    """DescribeConfigs and (Incremental)AlterConfigs: one check per config resource type."""
    names = "resources[].resource_name"
    broker = f"resources[].resource_type in ({CONFIG_BROKER}, {CONFIG_BROKER_LOGGER})"
    return ApiAuthorization(
        (
            Check((_on_cluster(operation),), _E.CLUSTER_AUTHORIZATION_FAILED, Scope.EACH, broker),
            Check(
                (Grant(operation, _T.TOPIC, names),),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.EACH,
                f"resources[].resource_type == {CONFIG_TOPIC}",
            ),
            Check(
                (Grant(operation, _T.GROUP, names),),
                _E.GROUP_AUTHORIZATION_FAILED,
                Scope.EACH,
                f"resources[].resource_type == {CONFIG_GROUP}",
            ),
        )
    )


API_AUTHORIZATION: dict[int, ApiAuthorization] = {
    ApiKey.PRODUCE: ApiAuthorization(
        (
            _txn_request(when="the records are transactional (a null transactional_id fails)"),
            _topics(_O.WRITE, "topic_data[].name"),
        )
    ),
    ApiKey.FETCH: ApiAuthorization(
        (
            Check(
                (_on_cluster(_O.CLUSTER_ACTION),),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.EACH,
                "from a follower (replica_id >= 0): a denial fails every partition",
            ),
            _topics(_O.READ, "topics[].topic", "from a consumer (replica_id < 0)"),
        ),
        "The controller's Fetch of __cluster_metadata (brokers only) is CLUSTER_ACTION on "
        "CLUSTER, denied with CLUSTER_AUTHORIZATION_FAILED for the request.",
    ),
    ApiKey.LIST_OFFSETS: ApiAuthorization((_topics(_O.DESCRIBE, "topics[].name"),)),
    ApiKey.METADATA: ApiAuthorization(
        (
            _topics(_O.DESCRIBE, "topics[].name", "topics are named"),
            Check(
                (Grant(_O.DESCRIBE, _T.TOPIC, "topics[].name"),),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.FILTERED,
                "all topics are asked for (topics is null)",
            ),
            Check(
                (_on_cluster(_O.CREATE), Grant(_O.CREATE, _T.TOPIC, "topics[].name")),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.EACH,
                "a described topic does not exist and would be auto-created",
            ),
        ),
        "Topics asked for by id (v12) that may not be described answer "
        "TOPIC_AUTHORIZATION_FAILED with the id and no name. cluster_authorized_operations "
        "(v8-10) is 0 without DESCRIBE on CLUSTER.",
    ),
    ApiKey.OFFSET_COMMIT: ApiAuthorization(
        (_group_request(_O.READ), _topics(_O.READ, "topics[].name"))
    ),
    ApiKey.OFFSET_FETCH: ApiAuthorization(
        (
            Check(
                (Grant(_O.DESCRIBE, _T.GROUP, "group_id / groups[].group_id"),),
                _E.GROUP_AUTHORIZATION_FAILED,
                Scope.EACH,
                "the request for v0-7, each group for v8+",
            ),
            _topics(_O.DESCRIBE, "topics[].name / groups[].topics[].name", "topics are named"),
            Check(
                (Grant(_O.DESCRIBE, _T.TOPIC, "the answer's topics"),),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.FILTERED,
                "all of a group's topics are asked for (topics is null)",
            ),
        )
    ),
    ApiKey.FIND_COORDINATOR: ApiAuthorization(
        (
            Check(
                (Grant(_O.DESCRIBE, _T.GROUP, "key / coordinator_keys[]"),),
                _E.GROUP_AUTHORIZATION_FAILED,
                Scope.EACH,
                "key_type 0 (group); the request for v0-3, each key for v4+",
            ),
            Check(
                (Grant(_O.DESCRIBE, _T.TRANSACTIONAL_ID, "key / coordinator_keys[]"),),
                _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                Scope.EACH,
                "key_type 1 (transaction); the request for v0-3, each key for v4+",
            ),
        )
    ),
    ApiKey.JOIN_GROUP: ApiAuthorization((_group_request(_O.READ),)),
    ApiKey.HEARTBEAT: ApiAuthorization((_group_request(_O.READ),)),
    ApiKey.LEAVE_GROUP: ApiAuthorization((_group_request(_O.READ),)),
    ApiKey.SYNC_GROUP: ApiAuthorization((_group_request(_O.READ),)),
    ApiKey.DESCRIBE_GROUPS: ApiAuthorization(
        (
            Check(
                (Grant(_O.DESCRIBE, _T.GROUP, "groups[]"),),
                _E.GROUP_AUTHORIZATION_FAILED,
                Scope.EACH,
            ),
        )
    ),
    ApiKey.LIST_GROUPS: ApiAuthorization(
        (
            Check(
                (_on_cluster(_O.DESCRIBE), Grant(_O.DESCRIBE, _T.GROUP, "the answer's groups")),
                _E.GROUP_AUTHORIZATION_FAILED,
                Scope.FILTERED,
            ),
        )
    ),
    ApiKey.API_VERSIONS: ApiAuthorization((), "Allowed before authentication."),
    ApiKey.CREATE_TOPICS: ApiAuthorization(
        (
            Check(
                (_on_cluster(_O.CREATE), Grant(_O.CREATE, _T.TOPIC, "topics[].name")),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.EACH,
            ),
            Check(
                (Grant(_O.DESCRIBE_CONFIGS, _T.TOPIC, "topics[].name"),),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.EACH,
                "v5+: a denial only withholds the configs (topic_config_error_code)",
            ),
        )
    ),
    ApiKey.DELETE_TOPICS: ApiAuthorization(
        (
            Check(
                (_on_cluster(_O.DELETE), Grant(_O.DELETE, _T.TOPIC, "topic_names[] / topics[]")),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.EACH,
            ),
        ),
        "A topic named by id whose name may not be described (DESCRIBE on TOPIC) is answered "
        "without its name.",
    ),
    ApiKey.DELETE_RECORDS: ApiAuthorization((_topics(_O.DELETE, "topics[].name"),)),
    ApiKey.INIT_PRODUCER_ID: ApiAuthorization(
        (
            _txn_request(when="transactional_id is set"),
            Check(
                (_on_cluster(_O.IDEMPOTENT_WRITE), Grant(_O.WRITE, _T.TOPIC, BY_TYPE)),
                _E.CLUSTER_AUTHORIZATION_FAILED,
                Scope.REQUEST,
                "transactional_id is null (an idempotent producer)",
            ),
        )
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ApiAuthorization(
        (
            Check(
                (_on_cluster(_O.CLUSTER_ACTION), Grant(_O.DESCRIBE, _T.TOPIC, "topics[].topic")),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.EACH,
            ),
        )
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: ApiAuthorization(
        (
            Check(
                (_on_cluster(_O.CLUSTER_ACTION),),
                _E.CLUSTER_AUTHORIZATION_FAILED,
                Scope.REQUEST,
                "v4+ (brokers' KIP-890 verification)",
            ),
            _txn_request("v3_and_below_transactional_id", "v0-3 (clients)"),
            _topics(_O.WRITE, "v3_and_below_topics[].name", "v0-3 (clients)"),
        ),
        "A denied topic fails with TOPIC_AUTHORIZATION_FAILED and the other partitions with "
        "OPERATION_NOT_ATTEMPTED; nothing is added.",
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: ApiAuthorization((_txn_request(), _group_request(_O.READ))),
    ApiKey.END_TXN: ApiAuthorization((_txn_request(),)),
    ApiKey.WRITE_TXN_MARKERS: ApiAuthorization(
        (
            Check(
                (_on_cluster(_O.ALTER), _on_cluster(_O.CLUSTER_ACTION)),
                _E.CLUSTER_AUTHORIZATION_FAILED,
                Scope.REQUEST,
            ),
        )
    ),
    ApiKey.TXN_OFFSET_COMMIT: ApiAuthorization(
        (_txn_request(), _group_request(_O.READ), _topics(_O.READ, "topics[].name"))
    ),
    ApiKey.DESCRIBE_CONFIGS: _configs(_O.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CONFIGS: _configs(_O.ALTER_CONFIGS),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(_O.ALTER_CONFIGS),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster_only(
        _O.DESCRIBE, "The denial is the top-level error_code (v3+); earlier versions see no dirs."
    ),
    ApiKey.CREATE_PARTITIONS: ApiAuthorization((_topics(_O.ALTER, "topics[].name"),)),
    ApiKey.DELETE_GROUPS: ApiAuthorization(
        (
            Check(
                (Grant(_O.DELETE, _T.GROUP, "groups_names[]"),),
                _E.GROUP_AUTHORIZATION_FAILED,
                Scope.EACH,
            ),
        )
    ),
    ApiKey.ELECT_LEADERS: _cluster_only(_O.ALTER),
    ApiKey.OFFSET_DELETE: ApiAuthorization(
        (_group_request(_O.DELETE), _topics(_O.READ, "topics[].name"))
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster_only(_O.DESCRIBE_CONFIGS),
    ApiKey.ALTER_PARTITION: _cluster_only(_O.CLUSTER_ACTION, "Brokers to the controller."),
    ApiKey.DESCRIBE_CLUSTER: ApiAuthorization(
        (),
        "No check; cluster_authorized_operations, when asked, is 0 without DESCRIBE on CLUSTER.",
    ),
    ApiKey.DESCRIBE_PRODUCERS: ApiAuthorization((_topics(_O.READ, "topics[].name"),)),
    ApiKey.BROKER_REGISTRATION: _cluster_only(_O.CLUSTER_ACTION, "Brokers to the controller."),
    ApiKey.BROKER_HEARTBEAT: _cluster_only(_O.CLUSTER_ACTION, "Brokers to the controller."),
    ApiKey.DESCRIBE_TRANSACTIONS: ApiAuthorization(
        (
            Check(
                (Grant(_O.DESCRIBE, _T.TRANSACTIONAL_ID, "transactional_ids[]"),),
                _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                Scope.EACH,
            ),
            Check(
                (Grant(_O.DESCRIBE, _T.TOPIC, "the answer's transaction_states[].topics[]"),),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.FILTERED,
            ),
        )
    ),
    ApiKey.LIST_TRANSACTIONS: ApiAuthorization(
        (
            Check(
                (Grant(_O.DESCRIBE, _T.TRANSACTIONAL_ID, "the answer's transaction_states[]"),),
                _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                Scope.FILTERED,
            ),
        )
    ),
    ApiKey.ALLOCATE_PRODUCER_IDS: _cluster_only(_O.CLUSTER_ACTION, "Brokers to the controller."),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ApiAuthorization((_group_request(_O.READ),)),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ApiAuthorization(
        (
            Check(
                (Grant(_O.DESCRIBE, _T.GROUP, "group_ids[]"),),
                _E.GROUP_AUTHORIZATION_FAILED,
                Scope.EACH,
            ),
        )
    ),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: ApiAuthorization(
        (
            _topics(_O.DESCRIBE, "topics[].name", "topics are named"),
            Check(
                (Grant(_O.DESCRIBE, _T.TOPIC, "the answer's topics"),),
                _E.TOPIC_AUTHORIZATION_FAILED,
                Scope.FILTERED,
                "all topics are asked for",
            ),
        )
    ),
    SASL_HANDSHAKE: ApiAuthorization((), "Allowed before authentication (sasl.py)."),
    SASL_AUTHENTICATE: ApiAuthorization((), "Allowed before authentication (sasl.py)."),
    DESCRIBE_ACLS: _cluster_only(_O.DESCRIBE),
    CREATE_ACLS: _cluster_only(_O.ALTER),
    DELETE_ACLS: _cluster_only(_O.ALTER),
    DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster_only(_O.DESCRIBE),
    ALTER_USER_SCRAM_CREDENTIALS: _cluster_only(_O.ALTER),
}


def allows(
    authorizer: Authorizer, principal: str, host: str, check: Check, name: str | None = None
) -> bool:
    """Whether `check` passes for the resource `name` (ignored by CLUSTER and BY_TYPE grants)."""
    for grant in check.any_of:
        if grant.names == BY_TYPE:
            if authorizer.authorize_by_resource_type(
                principal, host, grant.operation, grant.resource_type
            ):
                return True
            continue
        resource = CLUSTER_NAME if grant.resource_type == _T.CLUSTER else name
        if resource is None:
            raise ValueError(f"{grant} needs a resource name")
        if authorizer.authorize(principal, host, grant.operation, grant.resource_type, resource):
            return True
    return False
