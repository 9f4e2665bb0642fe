"""ACL enforcement's pure decisions (core/security/enforcement.py) against the table of
api_operations.py, one scope at a time; the SSL principal's RFC 2253 form; the denial
journal's throttle."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from rlog.core.security.api_operations import API_AUTHORIZATION
from rlog.core.security.denials import DenialThrottle
from rlog.core.security.enforcement import RULES, BrokerView, Requester, rule
from rlog.core.security.principal import rfc2253_name, ssl_principal

ALICE = "User:alice"
ME = Requester(ALICE, "10.0.0.1")
E = ErrorCode


def allow(
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
    *,
    principal: str = ALICE,
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def view(*bindings: AclBinding, topics: tuple[str, ...] = ("a", "b"), **kw: Any) -> BrokerView:
    authorizer = Authorizer(bindings, **kw)
    return BrokerView(authorizer, dict.fromkeys(topics, object()), {"00" * 16: "a"})


def test_every_api_the_broker_serves_has_a_rule_from_the_table() -> None:
    assert set(SUPPORTED) <= set(RULES)
    assert set(API_AUTHORIZATION) <= set(RULES)


def produce_body(*topics: str, acks: int = -1, transactional_id: str | None = None) -> dict:
    return {
        "transactional_id": transactional_id,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": name, "partition_data": [{"index": 0, "records": b""}]} for name in topics
        ],
    }


# ---- EACH ---------------------------------------------------------------------------------


def test_each_scope_serves_the_allowed_topics_and_answers_the_denied_ones() -> None:
    ruling = rule(ApiKey.PRODUCE, 8, produce_body("a", "b"), ME, view(allow(4, 2, "a")))
    assert ruling.refused is None and ruling.answer is None
    assert [t["name"] for t in ruling.body["topic_data"]] == ["a"]
    served = {"responses": [{"name": "a", "partition_responses": [{"index": 0, "error_code": 0}]}]}
    answer = ruling.finish(served)
    by_topic = {t["name"]: t["partition_responses"][0]["error_code"] for t in answer["responses"]}
    assert by_topic == {"a": 0, "b": E.TOPIC_AUTHORIZATION_FAILED}
    ((denial),) = ruling.denials
    assert (denial.operation, denial.resource_type, denial.resource_name) == (
        AclOperation.WRITE,
        ResourceType.TOPIC,
        "b",
    )


def test_each_scope_with_everything_denied_answers_without_serving() -> None:
    ruling = rule(ApiKey.PRODUCE, 8, produce_body("a", "b"), ME, view())
    assert ruling.body is None and ruling.answer is not None
    codes = [t["partition_responses"][0]["error_code"] for t in ruling.answer["responses"]]
    assert codes == [E.TOPIC_AUTHORIZATION_FAILED] * 2


def test_an_acks_0_produce_with_a_denial_closes_the_connection() -> None:
    assert rule(ApiKey.PRODUCE, 8, produce_body("a", acks=0), ME, view()).close


def test_a_follower_fetch_needs_cluster_action() -> None:
    body = {"replica_id": 2, "topics": [{"topic": "a", "partitions": [{"partition": 0}]}]}
    denied = rule(ApiKey.FETCH, 12, body, ME, view(allow(3, 2, "a")))
    (topic,) = denied.answer["responses"]
    assert topic["partitions"][0]["error_code"] == E.TOPIC_AUTHORIZATION_FAILED
    granted = view(allow(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, "kafka-cluster"))
    assert rule(ApiKey.FETCH, 12, body, ME, granted).allowed


def test_configs_are_checked_per_resource_type() -> None:
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "a", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
        ]
    }
    ruling = rule(ApiKey.DESCRIBE_CONFIGS, 4, body, ME, view(allow(10, 2, "a")))
    assert [r["resource_name"] for r in ruling.body["resources"]] == ["a"]
    (entry,) = ruling.finish({"results": []})["results"]
    assert (entry["resource_name"], entry["error_code"]) == ("1", E.CLUSTER_AUTHORIZATION_FAILED)


def test_metadata_for_named_topics_answers_the_undescribable_and_the_uncreatable() -> None:
    body = {"topics": [{"name": "a"}, {"name": "b"}, {"name": "new"}]}
    acls = view(allow(AclOperation.DESCRIBE, 2, "a"), allow(AclOperation.DESCRIBE, 2, "new"))
    ruling = rule(ApiKey.METADATA, 12, body, ME, acls)
    # "new" may be described but would be auto-created, which needs CREATE.
    assert ruling.body["topics"] == [{"name": "a"}]
    answer = ruling.finish({"topics": [{"name": "a", "error_code": 0}]})
    assert {t["name"]: t["error_code"] for t in answer["topics"]} == {
        "a": 0,
        "b": E.TOPIC_AUTHORIZATION_FAILED,
        "new": E.TOPIC_AUTHORIZATION_FAILED,
    }
    creator = view(
        allow(AclOperation.DESCRIBE, 2, "new"),
        allow(AclOperation.CREATE, ResourceType.CLUSTER, "kafka-cluster"),
    )
    assert rule(ApiKey.METADATA, 12, {"topics": [{"name": "new"}]}, ME, creator).allowed


def test_metadata_by_id_denied_answers_the_id_without_the_name() -> None:
    topic_id = uuid.UUID(int=0)
    body = {"topics": [{"name": None, "topic_id": topic_id}]}  # "a"'s id in the view
    ruling = rule(ApiKey.METADATA, 12, body, ME, view())
    (entry,) = ruling.finish({"topics": []})["topics"]
    assert (entry["name"], entry["topic_id"], entry["error_code"]) == (
        None,
        topic_id,
        E.TOPIC_AUTHORIZATION_FAILED,
    )


# ---- REQUEST ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_key", "body", "error"),
    [
        (ApiKey.JOIN_GROUP, {"group_id": "g"}, E.GROUP_AUTHORIZATION_FAILED),
        (ApiKey.OFFSET_COMMIT, {"group_id": "g", "topics": []}, E.GROUP_AUTHORIZATION_FAILED),
        (ApiKey.INIT_PRODUCER_ID, {"transactional_id": "t"},
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        (ApiKey.INIT_PRODUCER_ID, {"transactional_id": None}, E.CLUSTER_AUTHORIZATION_FAILED),
        (ApiKey.PRODUCE, produce_body("a", transactional_id="t"),
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        (ApiKey.END_TXN, {"transactional_id": "t"}, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        (ApiKey.ELECT_LEADERS, {"topic_partitions": None}, E.CLUSTER_AUTHORIZATION_FAILED),
        (ApiKey.CREATE_ACLS, {"creations": []}, E.CLUSTER_AUTHORIZATION_FAILED),
        (ApiKey.DESCRIBE_ACLS, {}, E.CLUSTER_AUTHORIZATION_FAILED),
        (ApiKey.FIND_COORDINATOR, {"key": "t", "key_type": 1},
         E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ],
)  # fmt: skip
def test_request_scope_refuses_the_whole_request(api_key: int, body: dict, error: int) -> None:
    ruling = rule(api_key, 3, body, ME, view(allow(AclOperation.ALL, ResourceType.GROUP, "h")))
    assert ruling.refused == error and ruling.denials


def test_an_idempotent_producer_may_init_with_write_on_any_topic() -> None:
    body = {"transactional_id": None}
    assert rule(
        ApiKey.INIT_PRODUCER_ID, 4, body, ME, view(allow(AclOperation.WRITE, 2, "a"))
    ).allowed


# ---- FILTERED -----------------------------------------------------------------------------


def test_listings_leave_out_what_may_not_be_described_without_a_denial() -> None:
    acls = view(allow(AclOperation.READ, 2, "a"), allow(AclOperation.DESCRIBE, 3, "g1"))
    ruling = rule(ApiKey.METADATA, 12, {"topics": None}, ME, acls)
    answer = ruling.finish({"topics": [{"name": "a"}, {"name": "b"}]})
    assert [t["name"] for t in answer["topics"]] == ["a"]  # READ implies DESCRIBE
    groups = rule(ApiKey.LIST_GROUPS, 5, {}, ME, acls)
    listed = groups.finish({"groups": [{"group_id": "g1"}, {"group_id": "g2"}]})
    assert [g["group_id"] for g in listed["groups"]] == ["g1"]
    assert ruling.denials == [] and groups.denials == []
    cluster_describe = view(allow(AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"))
    assert rule(ApiKey.LIST_GROUPS, 5, {}, ME, cluster_describe).allowed


# ---- the authorizer's rules through enforcement ----------------------------------------------


def test_deny_beats_allow_prefixes_super_users_and_the_no_acl_default() -> None:
    acls = (
        allow(AclOperation.WRITE, 2, "team.", pattern=PatternType.PREFIXED),
        allow(AclOperation.WRITE, 2, "team.secret", permission=AclPermissionType.DENY),
    )
    ruling = rule(ApiKey.PRODUCE, 8, produce_body("team.a", "team.secret"), ME, view(*acls))
    assert [t["name"] for t in ruling.body["topic_data"]] == ["team.a"]
    assert rule(ApiKey.PRODUCE, 8, produce_body("team.secret"), ME,
                view(*acls, super_users={ALICE})).allowed  # fmt: skip
    # allow.everyone.if.no.acl.found: only a resource no ACL names.
    everyone = view(*acls, allow_if_no_acl=True)
    assert rule(ApiKey.PRODUCE, 8, produce_body("other"), ME, everyone).allowed
    assert rule(ApiKey.PRODUCE, 8, produce_body("team.secret"), ME, everyone).answer is not None


# ---- the SSL principal --------------------------------------------------------------------


def test_a_certificate_subject_is_written_as_java_writes_rfc2253() -> None:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc."),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            x509.NameAttribute(NameOID.COMMON_NAME, " client+1"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
        ]
    )
    assert rfc2253_name(name.public_bytes()) == (
        "1.2.840.113549.1.9.1=#16056140622e63,CN=\\ client\\+1,OU=eng,O=Acme\\, Inc.,C=US"
    )
    assert ssl_principal(name.public_bytes()).startswith("User:1.2.840")
    assert ssl_principal(None) == "User:ANONYMOUS"


# ---- the journal's throttle ---------------------------------------------------------------


def test_denials_are_journaled_once_per_key_per_window_with_a_count_of_the_rest() -> None:
    throttle = DenialThrottle(window_ms=5000, keys_max=3)
    key = (ALICE, AclOperation.WRITE, ResourceType.TOPIC, "a")
    assert throttle.admit(key, 0) == 0
    assert [throttle.admit(key, t) for t in (1, 2, 4999)] == [None, None, None]
    assert throttle.admit(key, 5000) == 3
    other = (ALICE, AclOperation.READ, ResourceType.TOPIC, "a")
    assert throttle.admit(other, 5001) == 0  # another operation is another key
    for index in range(10):  # bounded memory: old keys are forgotten
        throttle.admit((ALICE, AclOperation.READ, ResourceType.TOPIC, str(index)), 6000)
    assert len(throttle._windows) <= 3
