"""The controller's rules for ACLs and SCRAM credentials (Kafka's AclControlManager and
ScramControlManager), the records they write and the image those fold into, and the Describe
answers brokers build from their image: per-item errors beside successes, duplicates, filters
of every pattern type, and a restart that replays it all from the metadata log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from unit.test_controller import Driver

from rlog.core.controller import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    Controller,
    ControllerConfig,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    ScramDeletion,
    ScramUpsertion,
)
from rlog.core.controller.acls import MAX_RECORDS_PER_USER_OP, acl_id_for
from rlog.core.controller.scram import SALT_MAX_BYTES
from rlog.core.controller.security_admin import (
    describe_acls_answer,
    describe_user_scram_credentials_answer,
    shows_scram_changes,
)
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.log_store import (
    METADATA_PARTITION_DIR,
    append_records,
    metadata_log_config,
    replay,
)
from rlog.core.metadata.records import (
    AccessControlEntry,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UserScramCredential,
)
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from rlog.core.security.scram import ScramMechanism, new_credential, salted_password
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SALT = b"a-salt-of-26-ascii-bytes.."


def acl(
    name: str = "orders",
    resource_type: ResourceType = T,
    pattern: PatternType = LIT,
    principal: str = "User:alice",
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def create(driver: Driver, *bindings: AclBinding) -> list[tuple[int, str | None]]:
    response = driver.call(CreateAclsRequest, bindings=list(bindings))
    assert isinstance(response, CreateAclsResponse)
    return [(result.error, result.message) for result in response.results]


def delete(driver: Driver, *filters: AclFilter) -> DeleteAclsResponse:
    response = driver.call(DeleteAclsRequest, filters=list(filters))
    assert isinstance(response, DeleteAclsResponse)
    return response


def stored(driver: Driver) -> set[AclBinding]:
    return set(driver.controller.image.acls.values())


def upsertion(
    name: str,
    mechanism: ScramMechanism = SHA256,
    password: str = "secret",
    iterations: int = 4096,
    salt: bytes = SALT,
) -> ScramUpsertion:
    salted = salted_password(mechanism, password, salt, iterations)
    return ScramUpsertion(name, mechanism.code, iterations, salt, salted)


def alter(
    driver: Driver,
    deletions: list[ScramDeletion] | None = None,
    upsertions: list[ScramUpsertion] | None = None,
) -> list[tuple[str, int]]:
    response = driver.call(
        AlterUserScramCredentialsRequest, deletions=deletions or [], upsertions=upsertions or []
    )
    assert isinstance(response, AlterUserScramCredentialsResponse)
    return [(result.user, result.error) for result in response.results]


def describe_users(image: MetadataImage, *names: str | None) -> list[dict[str, Any]]:
    users = None if names == (None,) else [{"name": name} for name in names]
    answer = describe_users_body(image, users)
    assert answer["error_code"] == ErrorCode.NONE
    return answer["results"]


def describe_users_body(image: MetadataImage, users: list[dict[str, Any]] | None) -> Any:
    return describe_user_scram_credentials_answer(image, {"users": users})


# ---- CreateAcls ----------------------------------------------------------------------------


def test_each_bad_binding_gets_its_error_and_the_good_ones_beside_it_are_stored() -> None:
    driver = Driver()
    good = [acl(), acl("logs-", pattern=PRE, operation=Op.WRITE, permission=DENY),
            acl("kafka-cluster", C, operation=Op.ALTER), acl("*", G)]  # fmt: skip
    bad = [
        acl(resource_type=ResourceType.ANY),
        acl(resource_type=ResourceType.UNKNOWN),
        acl(pattern=PatternType.MATCH),
        acl(pattern=PatternType.ANY),
        acl(operation=Op.ANY),
        acl(operation=Op.UNKNOWN),
        acl(permission=AclPermissionType.ANY),
        acl(""),
        acl("my-cluster", C),
        acl(principal="alice"),
    ]
    results = create(driver, good[0], *bad[:5], good[1], *bad[5:], good[2], good[3])
    errors = [error for error, _ in results]
    assert errors == [0] + [ErrorCode.INVALID_REQUEST] * 5 + [0] + [
        ErrorCode.INVALID_REQUEST
    ] * 5 + [0, 0]
    assert all(message for error, message in results if error)
    assert stored(driver) == set(good)
    assert len(driver.durable) == 4


def test_a_duplicate_is_stored_once_and_succeeds_every_time() -> None:
    driver = Driver()
    assert create(driver, acl(), acl(), acl(host="10.0.0.1")) == [(0, None)] * 3
    assert len(driver.durable) == 2
    assert create(driver, acl()) == [(0, None)]
    assert len(driver.durable) == 2, "already stored: no record"
    assert stored(driver) == {acl(), acl(host="10.0.0.1")}


def test_acl_ids_come_from_the_offsets_of_their_records() -> None:
    driver = Driver()
    create(driver, acl("a"), acl("b"))
    records = driver.durable
    assert [r.acl_id for r in records if isinstance(r, AccessControlEntry)] == [
        acl_id_for(0),
        acl_id_for(1),
    ]
    assert driver.controller.image.acls == {acl_id_for(0): acl("a"), acl_id_for(1): acl("b")}


def test_too_many_acls_in_one_request_are_all_refused() -> None:
    driver = Driver()
    bindings = [acl(f"t{i}") for i in range(MAX_RECORDS_PER_USER_OP + 1)]
    results = create(driver, *bindings)
    assert {error for error, _ in results} == {ErrorCode.INVALID_REQUEST}
    assert driver.durable == []


# ---- DeleteAcls ----------------------------------------------------------------------------

ORDERS = acl("orders")
ORDERS_WRITE = acl("orders", operation=Op.WRITE, principal="User:bob")
ORD_PREFIX = acl("ord", pattern=PRE, permission=DENY)
ALL_TOPICS = acl("*")
PAYMENTS = acl("payments")
GROUP = acl("orders", G)


def seeded() -> Driver:
    driver = Driver()
    create(driver, ORDERS, ORDERS_WRITE, ORD_PREFIX, ALL_TOPICS, PAYMENTS, GROUP)
    return driver


@pytest.mark.parametrize(
    ("acl_filter", "expected"),
    [
        (AclFilter(T, "orders", LIT), {ORDERS, ORDERS_WRITE}),
        (AclFilter(T, "ord", PRE), {ORD_PREFIX}),
        (AclFilter(T, "orders", PRE), set()),
        (AclFilter(T, "orders", PatternType.MATCH), {ORDERS, ORDERS_WRITE, ORD_PREFIX, ALL_TOPICS}),
        (AclFilter(ResourceType.ANY, "orders", PatternType.ANY), {ORDERS, ORDERS_WRITE, GROUP}),
        (AclFilter(T, None, PatternType.ANY, principal="User:bob"), {ORDERS_WRITE}),
        (AclFilter(permission=DENY), {ORD_PREFIX}),
        (AclFilter(operation=Op.WRITE), {ORDERS_WRITE}),
        (AclFilter(host="10.0.0.1"), set()),
    ],
)
def test_a_filter_deletes_exactly_what_it_matches(
    acl_filter: AclFilter, expected: set[AclBinding]
) -> None:
    driver = seeded()
    before = stored(driver)
    response = delete(driver, acl_filter)
    (result,) = response.results
    assert result.error == ErrorCode.NONE and set(result.deleted) == expected
    assert len(result.deleted) == len(expected)
    assert stored(driver) == before - expected
    # Describing with the same filter, on an image before the deletion, finds the same.
    image = MetadataImage()
    for offset, record in enumerate(seeded().durable):
        image.apply(offset, record)
    body = describe_body(acl_filter)
    assert described(describe_acls_answer(image, body)) == expected


def described(answer: dict[str, Any]) -> set[AclBinding]:
    return {
        AclBinding(
            ResourceType(r["resource_type"]),
            r["resource_name"],
            PatternType(r["pattern_type"]),
            a["principal"],
            a["host"],
            AclOperation(a["operation"]),
            AclPermissionType(a["permission_type"]),
        )
        for r in answer["resources"]
        for a in r["acls"]
    }


def describe_body(acl_filter: AclFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": acl_filter.resource_type,
        "resource_name_filter": acl_filter.resource_name,
        "pattern_type_filter": acl_filter.pattern_type,
        "principal_filter": acl_filter.principal,
        "host_filter": acl_filter.host,
        "operation": acl_filter.operation,
        "permission_type": acl_filter.permission,
    }


def test_every_filter_answers_all_it_matched_and_each_acl_is_removed_once() -> None:
    driver = seeded()
    start = len(driver.durable)
    response = delete(
        driver,
        AclFilter(T, "orders", LIT),
        AclFilter(resource_type=ResourceType.UNKNOWN),  # refused; the others still served
        AclFilter(T, principal="User:alice", operation=Op.READ, permission=ALLOW),
    )
    first, refused, third = response.results
    assert set(first.deleted) == {ORDERS, ORDERS_WRITE}
    assert refused.error == ErrorCode.INVALID_REQUEST and refused.deleted == ()
    assert set(third.deleted) == {ORDERS, ALL_TOPICS, PAYMENTS}
    removals = driver.durable[start:]
    assert all(isinstance(r, RemoveAccessControlEntry) for r in removals)
    assert len(removals) == 4 == len({r.acl_id for r in removals})
    assert stored(driver) == {ORD_PREFIX, GROUP}


def test_a_filter_with_unknown_parts_is_refused_by_describe_too() -> None:
    answer = describe_acls_answer(seeded().controller.image, describe_body(AclFilter(operation=0)))
    assert answer["error_code"] == ErrorCode.INVALID_REQUEST and answer["resources"] == []
    assert answer["error_message"]


# ---- AlterUserScramCredentials -------------------------------------------------------------


def test_upserted_credentials_hold_the_keys_derived_from_the_salted_password() -> None:
    driver = Driver()
    assert alter(driver, upsertions=[upsertion("alice"), upsertion("bob", SHA512, "pw", 8192)]) == [
        ("alice", 0),
        ("bob", 0),
    ]
    credentials = driver.controller.image.scram_credentials
    assert credentials[("alice", SHA256)] == new_credential(SHA256, "secret", SALT, 4096)
    assert credentials[("bob", SHA512)] == new_credential(SHA512, "pw", SALT, 8192)
    # A second mechanism for alice in a later request, then a new password for the first one.
    assert alter(driver, upsertions=[upsertion("alice", SHA512)]) == [("alice", 0)]
    assert alter(driver, upsertions=[upsertion("alice", password="new")]) == [("alice", 0)]
    assert credentials[("alice", SHA256)] == new_credential(SHA256, "new", SALT, 4096)
    assert len(credentials) == 3
    assert alter(driver, deletions=[ScramDeletion("alice", 1)]) == [("alice", 0)]
    assert set(credentials) == {("alice", SHA512), ("bob", SHA512)}
    kinds = [type(r) for r in driver.durable]
    assert kinds == [UserScramCredential] * 4 + [RemoveUserScramCredential]


def test_a_user_named_twice_is_a_duplicate_whatever_the_mechanisms_and_nothing_changes() -> None:
    driver = Driver()
    alter(driver, upsertions=[upsertion("carol"), upsertion("dave")])
    start = len(driver.durable)
    results = alter(
        driver,
        deletions=[ScramDeletion("carol", 1), ScramDeletion("dave", 1), ScramDeletion("dave", 1)],
        upsertions=[
            upsertion("carol", SHA512),  # deleted above: twice
            upsertion("erin"),
            upsertion("erin", SHA512),  # twice, other mechanism
            upsertion("frank"),
        ],
    )
    assert results == [
        ("carol", ErrorCode.DUPLICATE_RESOURCE),
        ("dave", ErrorCode.DUPLICATE_RESOURCE),
        ("erin", ErrorCode.DUPLICATE_RESOURCE),
        ("frank", 0),
    ]
    assert [type(r) for r in driver.durable[start:]] == [UserScramCredential]
    users = {user for user, _ in driver.controller.image.scram_credentials}
    assert users == {"carol", "dave", "frank"}


def test_a_user_whose_first_change_was_refused_keeps_that_refusal() -> None:
    driver = Driver()
    # As Kafka: the deletion's RESOURCE_NOT_FOUND stands; the upsertion is not looked at.
    results = alter(driver, deletions=[ScramDeletion("gina", 1)], upsertions=[upsertion("gina")])
    assert results == [("gina", ErrorCode.RESOURCE_NOT_FOUND)]
    assert driver.durable == []


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (upsertion(""), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("u", iterations=4095), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("u", iterations=16385), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("u", salt=b""), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (upsertion("u", salt=b"s" * (SALT_MAX_BYTES + 1)), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (ScramUpsertion("u", 1, 4096, SALT, b"short"), ErrorCode.UNACCEPTABLE_CREDENTIAL),
        (ScramUpsertion("u", 0, 4096, SALT, bytes(32)), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (ScramUpsertion("u", 3, 4096, SALT, bytes(32)), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (ScramDeletion("u", 1), ErrorCode.RESOURCE_NOT_FOUND),
        (ScramDeletion("u", 9), ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        (ScramDeletion("", 1), ErrorCode.UNACCEPTABLE_CREDENTIAL),
    ],
)
def test_a_refused_change_gets_its_error_and_the_other_users_are_served(
    change: ScramUpsertion | ScramDeletion, error: ErrorCode
) -> None:
    driver = Driver()
    alter(driver, upsertions=[upsertion("u", SHA512)])  # u exists, but not with SHA-256
    start = len(driver.durable)
    if isinstance(change, ScramDeletion):
        results = alter(driver, deletions=[change], upsertions=[upsertion("zoe")])
    else:
        results = alter(driver, upsertions=[change, upsertion("zoe")])
    assert results == [(change.name, error), ("zoe", 0)]
    assert [type(r) for r in driver.durable[start:]] == [UserScramCredential]
    assert driver.controller.image.scram_credentials[("u", SHA512)] is not None


def test_the_keys_stay_out_of_the_records_repr() -> None:
    record = UserScramCredential.of("alice", new_credential(SHA256, "secret", SALT, 4096))
    assert record.stored_key not in repr(record) and record.salt not in repr(record)
    assert record.credential() == new_credential(SHA256, "secret", SALT, 4096)


# ---- DescribeUserScramCredentials (from a broker's image) ----------------------------------


def test_describe_users_all_named_unknown_and_duplicated() -> None:
    driver = Driver()
    alter(driver, upsertions=[upsertion("bob", SHA512, iterations=8192), upsertion("alice")])
    alter(driver, upsertions=[upsertion("bob", SHA256)])
    image = driver.controller.image
    everyone = describe_users(image, None)
    assert everyone == describe_users_body(image, [])["results"]  # empty list: all users too
    assert [(r["user"], r["error_code"], r["credential_infos"]) for r in everyone] == [
        ("alice", 0, [{"mechanism": 1, "iterations": 4096}]),
        ("bob", 0, [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 8192}]),
    ]
    results = describe_users(image, "nobody", "alice", "bob", "alice")
    assert [(r["user"], r["error_code"]) for r in results] == [
        ("nobody", ErrorCode.RESOURCE_NOT_FOUND),
        ("alice", ErrorCode.DUPLICATE_RESOURCE),
        ("bob", 0),
    ]
    assert results[0]["error_message"].endswith("nobody") and results[0]["credential_infos"] == []
    assert results[1]["credential_infos"] == []


def test_a_broker_sees_an_alteration_only_once_its_image_holds_it() -> None:
    driver = Driver()
    body = {"deletions": [], "upsertions": [
        {"name": "alice", "mechanism": 1, "iterations": 4096, "salt": SALT,
         "salted_password": upsertion("alice").salted_password}]}  # fmt: skip
    answer = {"results": [{"user": "alice", "error_code": 0, "error_message": None}]}
    before = driver.controller.image.copy()
    alter(driver, upsertions=[upsertion("alice")])
    assert not shows_scram_changes(before, body, answer)
    assert shows_scram_changes(driver.controller.image, body, answer)
    refused = {"results": [{"user": "alice", "error_code": 93, "error_message": "no"}]}
    assert shows_scram_changes(before, body, refused), "nothing to wait for"


# ---- the metadata log ----------------------------------------------------------------------


def test_acls_and_credentials_survive_a_controller_restart(tmp_path: Path) -> None:
    directory = str(tmp_path / METADATA_PARTITION_DIR)
    start: dict[str, int] = {"recovery_point": 0, "log_start_offset": 0, "now_ms": 0}
    log = Log(directory, metadata_log_config(), RealFileSystem(), **start)
    controller = Controller(ControllerConfig(), replay(log), log.log_end_offset)
    controller.step(CreateAclsRequest("c", [ORDERS, ORD_PREFIX, GROUP]), 0)
    controller.step(DeleteAclsRequest("d", [AclFilter(resource_type=G)]), 0)
    controller.step(
        AlterUserScramCredentialsRequest("a", [], [upsertion("alice"), upsertion("bob")]), 0
    )
    controller.step(AlterUserScramCredentialsRequest("b", [ScramDeletion("bob", 1)], []), 0)
    ready = controller.ready()
    append_records(log, ready.records, 0, base_offset=ready.base_offset)
    controller.advance(ready)
    log.close()

    reopened = Log(directory, metadata_log_config(), RealFileSystem(), **start)
    restarted = Controller(ControllerConfig(), replay(reopened), reopened.log_end_offset)
    assert restarted.image == controller.image
    assert set(restarted.image.acls.values()) == {ORDERS, ORD_PREFIX}
    decision = restarted.image.authorizer.decide("User:alice", "h", Op.READ, T, "orders")
    assert not decision.allowed and decision.binding == ORD_PREFIX  # indexed again: deny wins
    assert set(restarted.image.scram_credentials) == {("alice", SHA256)}
    # The restarted controller knows what exists: a duplicate is not written again, a
    # deletion finds its credential, and ids go on from the log end.
    restarted.step(CreateAclsRequest("c2", [ORDERS, PAYMENTS]), 1)
    restarted.step(AlterUserScramCredentialsRequest("a2", [ScramDeletion("alice", 1)], []), 1)
    ready = restarted.ready()
    assert [type(r) for r in ready.records] == [AccessControlEntry, RemoveUserScramCredential]
    entry = ready.records[0]
    assert isinstance(entry, AccessControlEntry) and entry.acl_id == acl_id_for(ready.base_offset)
    responses = dict(ready.responses)
    alice = responses["a2"]
    assert isinstance(alice, AlterUserScramCredentialsResponse)
    assert alice.results[0].error == ErrorCode.NONE
    append_records(reopened, ready.records, 1, base_offset=ready.base_offset)
    restarted.advance(ready)
    assert replay(reopened) == restarted.image
    reopened.close()


def test_an_image_copy_keeps_the_acls_indexed_and_the_credentials() -> None:
    driver = seeded()
    alter(driver, upsertions=[upsertion("alice")])
    image = driver.controller.image
    image.authorizer.super_users = frozenset({"User:admin"})
    copy = image.copy()
    assert copy == image and copy.acl_ids == image.acl_ids
    assert set(copy.authorizer) == set(image.authorizer)
    assert copy.authorizer.super_users == {"User:admin"}
    assert copy.authorizer.decide("User:bob", "h", Op.READ, T, "orders-1").allowed is False
    assert copy.authorizer.authorize("User:alice", "h", Op.READ, T, "payments")
    copy.apply(image.last_offset + 1, RemoveAccessControlEntry(image.acl_ids[PAYMENTS]))
    assert PAYMENTS in image.authorizer and PAYMENTS not in copy.authorizer
