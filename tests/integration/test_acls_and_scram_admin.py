"""ACLs and SCRAM credentials kept in the metadata log, through real clients against a real
2-broker cluster: confluent-kafka's and kafka-python's admin clients create, describe and
delete ACLs (literal, prefixed and MATCH filters, a bad binding refused beside good ones,
duplicates stored once) and upsert, describe and delete credentials with an error per user;
librdkafka's salted password gives the credential rlog's own SCRAM code derives; bad codes on
the wire are refused, not crashed on; and everything survives restarts of the controller
(which replays its log) and of a broker (which fetches it again)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KafkaResourceType
from kafka.admin import UserScramCredentialDeletion as PythonDeletion
from kafka.admin import UserScramCredentialUpsertion as PythonUpsertion

from rlog.core.metadata.log_store import METADATA_TOPIC
from rlog.core.metadata.records import UserScramCredential, records_from_batches
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security import scram
from rlog.daemon.wire import BlockingKafkaClient
from support.cluster import HOST, Cluster, start_cluster
from support.replication import wait_for

pytestmark = pytest.mark.integration

TIMEOUT_S = 15.0
ANY = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
    AclPermissionType.ANY,
)  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("acls-scram") / "data", brokers=2)
    try:
        yield cluster
    finally:
        # Its AdminClient would otherwise live on, reconnecting to the stopped brokers for
        # the rest of the run.
        _ADMINS.pop(cluster.bootstrap, None)
        cluster.stop()


_ADMINS: dict[str, AdminClient] = {}


def admin(cluster: Cluster) -> AdminClient:
    """One AdminClient per cluster, kept: its futures fail when the client is collected."""
    if cluster.bootstrap not in _ADMINS:
        _ADMINS[cluster.bootstrap] = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return _ADMINS[cluster.bootstrap]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def binding(
    name: str,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    principal: str = "User:alice",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    resource_type: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def acl_filter(
    name: str | None,
    pattern: ResourcePatternType = ResourcePatternType.ANY,
    resource_type: ResourceType = ResourceType.TOPIC,
    principal: str | None = None,
) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type, name, pattern, principal, None, AclOperation.ANY, AclPermissionType.ANY
    )


def outcome(future: Any) -> Any:
    """The future's result, or the KafkaError it failed with."""
    try:
        return future.result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0]


def described(cluster: Cluster, wanted: AclBindingFilter) -> set[AclBinding]:
    return set(admin(cluster).describe_acls(wanted, request_timeout=TIMEOUT_S).result(TIMEOUT_S))


def code(result: Any) -> int:
    return result.code() if isinstance(result, KafkaError) else 0


# ---- ACLs ------------------------------------------------------------------------------------


def test_acls_with_literal_prefixed_and_match_filters_through_confluent_kafka(
    cluster: Cluster,
) -> None:
    name = unique("orders")
    literal = binding(name)
    prefix = binding(name[:8], ResourcePatternType.PREFIXED, "User:bob", AclOperation.WRITE,
                     AclPermissionType.DENY)  # fmt: skip
    everything = binding("*", principal=f"User:{name}")
    other = binding(unique("payments"), principal=f"User:{name}")
    bad_cluster = binding("my-cluster", resource_type=ResourceType.BROKER)
    created = admin(cluster).create_acls(
        [literal, bad_cluster, prefix, everything, other], request_timeout=TIMEOUT_S
    )
    results = {acl: outcome(future) for acl, future in created.items()}
    assert code(results[bad_cluster]) == KafkaError.INVALID_REQUEST
    assert "kafka-cluster" in results[bad_cluster].str()
    assert [results[acl] for acl in (literal, prefix, everything, other)] == [None] * 4
    # Stored once, whatever the number of times it is created.
    again = admin(cluster).create_acls([literal], request_timeout=TIMEOUT_S)
    assert outcome(again[literal]) is None

    assert described(cluster, acl_filter(name, ResourcePatternType.LITERAL)) == {literal}
    assert described(cluster, acl_filter(name[:8], ResourcePatternType.PREFIXED)) == {prefix}
    assert described(cluster, acl_filter(name, ResourcePatternType.PREFIXED)) == set()
    # MATCH: what applies to a topic of that name: its literal ACLs, `*`, prefixes of it.
    matching = described(cluster, acl_filter(name, ResourcePatternType.MATCH))
    assert {literal, prefix, everything} <= matching and other not in matching
    assert {literal, prefix, everything, other} <= described(cluster, ANY)
    by_principal = acl_filter(None, principal=f"User:{name}")
    assert described(cluster, by_principal) == {everything, other}

    # DeleteAcls answers, per filter, every ACL it matched; both filters here match `literal`.
    filters = [acl_filter(name, ResourcePatternType.MATCH), acl_filter(name)]
    deleted = admin(cluster).delete_acls(filters, request_timeout=TIMEOUT_S)
    assert set(outcome(deleted[filters[0]])) == {literal, prefix, everything}
    assert set(outcome(deleted[filters[1]])) == {literal}
    left = described(cluster, ANY)
    assert other in left and not {literal, prefix, everything} & left
    gone = admin(cluster).delete_acls([by_principal], request_timeout=TIMEOUT_S)
    assert outcome(gone[by_principal]) == [other]


def test_acls_through_kafka_python(cluster: Cluster) -> None:
    group = unique("group")
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    try:
        allow = ACL(
            "User:carol", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW,
            ResourcePattern(KafkaResourceType.GROUP, group, ACLResourcePatternType.LITERAL),
        )  # fmt: skip
        deny = ACL(
            "User:dave", "10.0.0.9", ACLOperation.READ, ACLPermissionType.DENY,
            ResourcePattern(KafkaResourceType.GROUP, group[:7], ACLResourcePatternType.PREFIXED),
        )  # fmt: skip
        created = client.create_acls([allow, deny])
        assert created["failed"] == [] and len(created["succeeded"]) == 2
        wanted = ACLFilter(
            None, None, ACLOperation.ANY, ACLPermissionType.ANY,
            ResourcePatternFilter(KafkaResourceType.GROUP, group, ACLResourcePatternType.MATCH),
        )  # fmt: skip
        acls, error = client.describe_acls(wanted)
        assert error.errno == 0
        assert {(a.principal, a.host, a.resource_pattern.pattern_type) for a in acls} == {
            ("User:carol", "*", ACLResourcePatternType.LITERAL),
            ("User:dave", "10.0.0.9", ACLResourcePatternType.PREFIXED),
        }
        ((_, removed, error),) = client.delete_acls([wanted])
        assert error.errno == 0 and len(removed) == 2
        acls, _ = client.describe_acls(wanted)
        assert acls == []
    finally:
        client.close()


def test_bad_codes_on_the_wire_are_refused_and_the_broker_carries_on(cluster: Cluster) -> None:
    with BlockingKafkaClient(HOST, cluster.base_port, timeout_s=TIMEOUT_S) as client:
        creation = {"resource_type": 99, "resource_name": "t", "resource_pattern_type": 3,
                    "principal": "User:x", "host": "*", "operation": 3,
                    "permission_type": 3}  # fmt: skip
        answer = client.request(ApiKey.CREATE_ACLS, 3, {"creations": [creation]})
        assert answer["results"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        describe = {"resource_type_filter": 2, "resource_name_filter": None,
                    "pattern_type_filter": 3, "principal_filter": None, "host_filter": None,
                    "operation": 0, "permission_type": 1}  # fmt: skip
        answer = client.request(ApiKey.DESCRIBE_ACLS, 3, describe)
        assert answer["error_code"] == ErrorCode.INVALID_REQUEST
        answer = client.request(ApiKey.DELETE_ACLS, 3, {"filters": [describe]})
        assert answer["filter_results"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        alter = {"deletions": [{"name": "x", "mechanism": 9}], "upsertions": [
            {"name": "y", "mechanism": 1, "iterations": 4096, "salt": b"",
             "salted_password": b""}]}  # fmt: skip
        answer = client.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, alter)
        assert [(r["user"], r["error_code"]) for r in answer["results"]] == [
            ("x", ErrorCode.UNSUPPORTED_SASL_MECHANISM),
            ("y", ErrorCode.UNACCEPTABLE_CREDENTIAL),
        ]
        software = {"client_software_name": "t", "client_software_version": "1"}
        answer = client.request(ApiKey.API_VERSIONS, 3, software)
        advertised = {entry["api_key"]: entry for entry in answer["api_keys"]}
        assert advertised[ApiKey.CREATE_ACLS]["max_version"] == 3
        assert advertised[ApiKey.SASL_HANDSHAKE]["max_version"] == 1  # for SASL listeners


# ---- SCRAM credentials -----------------------------------------------------------------------


def upsert(user: str, mechanism: ScramMechanism, iterations: int, password: str, salt: bytes):
    info = ScramCredentialInfo(mechanism, iterations)
    return UserScramCredentialUpsertion(user, info, password.encode(), salt)


def alter(cluster: Cluster, *alterations: Any) -> dict[str, Any]:
    futures = admin(cluster).alter_user_scram_credentials(
        list(alterations), request_timeout=TIMEOUT_S
    )
    return {user: outcome(future) for user, future in futures.items()}


def stored_credentials(cluster: Cluster) -> dict[tuple[str, int], UserScramCredential]:
    """The credentials in the controller's metadata log, read as a broker reads it."""
    controller = cluster.status()["controller"]
    found: dict[tuple[str, int], UserScramCredential] = {}
    with BlockingKafkaClient(controller["host"], controller["port"]) as client:
        offset = 0
        while True:
            partition = fetch_metadata(client, offset)
            records = records_from_batches(partition["records"] or b"")
            for record_offset, record in records:
                if isinstance(record, UserScramCredential):
                    found[(record.name, record.mechanism)] = record
                offset = record_offset + 1
            if not records or offset >= partition["high_watermark"]:
                return found


def fetch_metadata(client: BlockingKafkaClient, offset: int) -> dict[str, Any]:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 8 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": METADATA_TOPIC, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": 8 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}  # fmt: skip
    return client.request(ApiKey.FETCH, 11, body)["responses"][0]["partitions"][0]


def test_credentials_upsert_describe_and_delete_with_an_error_per_user(cluster: Cluster) -> None:
    alice, bob, carol = unique("alice"), unique("bob"), unique("carol")
    salt = b"salt-from-the-test-0123456789"
    results = alter(
        cluster,
        upsert(alice, ScramMechanism.SCRAM_SHA_256, 4096, "alice-pw", salt),
        upsert(bob, ScramMechanism.SCRAM_SHA_512, 8192, "bob-pw", salt),
        upsert(carol, ScramMechanism.SCRAM_SHA_256, 100, "carol-pw", salt),  # too few
        UserScramCredentialDeletion(unique("nobody"), ScramMechanism.SCRAM_SHA_256),
    )
    assert results[alice] is None and results[bob] is None
    assert code(results[carol]) == KafkaError.UNACCEPTABLE_CREDENTIAL
    (missing,) = [user for user in results if user.startswith("nobody")]
    assert code(results[missing]) == KafkaError.RESOURCE_NOT_FOUND

    # librdkafka salted the password with our salt: the stored keys are what rlog derives.
    stored = stored_credentials(cluster)
    expected = scram.new_credential(scram.ScramMechanism.SCRAM_SHA_256, "alice-pw", salt, 4096)
    assert stored[(alice, 1)].credential() == expected
    assert stored[(bob, 2)].credential().iterations == 8192

    # A user named twice in one request (two mechanisms): refused, nothing changes.
    twice = alter(
        cluster,
        upsert(alice, ScramMechanism.SCRAM_SHA_512, 4096, "x", salt),
        UserScramCredentialDeletion(alice, ScramMechanism.SCRAM_SHA_256),
    )
    assert code(twice[alice]) == KafkaError.DUPLICATE_RESOURCE

    everyone = admin(cluster).describe_user_scram_credentials(request_timeout=TIMEOUT_S)
    users = everyone.result(TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in users[alice].scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 4096)
    ]
    assert carol not in users
    asked = admin(cluster).describe_user_scram_credentials([bob, carol], request_timeout=TIMEOUT_S)
    assert [i.iterations for i in outcome(asked[bob]).scram_credential_infos] == [8192]
    assert code(outcome(asked[carol])) == KafkaError.RESOURCE_NOT_FOUND

    # kafka-python's admin client on the same APIs.
    erin = unique("erin")
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    try:
        upsertion = PythonUpsertion(erin, "SCRAM-SHA-512", "erin-pw", iterations=4096, salt=salt)
        assert client.alter_user_scram_credentials([upsertion]) == {erin: None}
        found = client.describe_user_scram_credentials([erin, carol])
        assert found[erin]["error"] is None
        assert [i["iterations"] for i in found[erin]["credential_infos"]] == [4096]
        assert found[carol]["error"]  # no such user
        deletion = PythonDeletion(erin, "SCRAM-SHA-512")
        assert client.alter_user_scram_credentials([deletion]) == {erin: None}
    finally:
        client.close()

    deleted = alter(
        cluster,
        UserScramCredentialDeletion(bob, ScramMechanism.SCRAM_SHA_512),
        UserScramCredentialDeletion(alice, ScramMechanism.SCRAM_SHA_512),  # not there
    )
    assert deleted[bob] is None and code(deleted[alice]) == KafkaError.RESOURCE_NOT_FOUND
    left = admin(cluster).describe_user_scram_credentials(request_timeout=TIMEOUT_S)
    assert bob not in left.result(TIMEOUT_S)


# ---- restarts ----------------------------------------------------------------------------------


def describe_at(cluster: Cluster, broker_id: int, name: str) -> list[dict[str, Any]]:
    """DescribeAcls for one literal topic name, at one broker (its own image)."""
    body = {"resource_type_filter": 2, "resource_name_filter": name, "pattern_type_filter": 3,
            "principal_filter": None, "host_filter": None, "operation": 1,
            "permission_type": 1}  # fmt: skip
    with BlockingKafkaClient(HOST, cluster.base_port + broker_id - 1, timeout_s=5) as client:
        return client.request(ApiKey.DESCRIBE_ACLS, 3, body)["resources"]


def test_acls_and_credentials_survive_restarts(cluster: Cluster, tmp_path: Path) -> None:
    name, user = unique("kept"), unique("kept-user")
    kept = binding(name, principal=f"User:{user}")
    assert outcome(admin(cluster).create_acls([kept], request_timeout=TIMEOUT_S)[kept]) is None
    salt = b"kept-salt"
    assert alter(cluster, upsert(user, ScramMechanism.SCRAM_SHA_512, 4096, "pw", salt)) == {
        user: None
    }

    old = cluster.controller_pid()
    cluster.chaos("restart", "controller")
    cluster.wait_until_running(not_pid=old)
    # The replayed controller knows them: deleting finds what was stored. Retried while the
    # brokers reconnect to it (their forwarding times out until then).
    by_name = acl_filter(name, ResourcePatternType.LITERAL)

    def delete_kept() -> Any:
        found = outcome(admin(cluster).delete_acls([by_name], request_timeout=5)[by_name])
        return found if isinstance(found, list) else None

    old_broker = cluster.broker_pid(2)
    cluster.chaos("restart", "broker-2")
    cluster.wait_until_running(not_pid=old_broker)
    # The restarted broker fetched the metadata log again: its own image has the ACL.
    shown = wait_for("broker 2 to show the ACL", lambda: describe_at(cluster, 2, name), 20)
    assert isinstance(shown, list) and shown[0]["acls"][0]["principal"] == f"User:{user}"

    assert wait_for("the controller to delete the kept ACL", delete_kept, 20) == [kept]
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    assert alter(cluster, deletion) == {user: None}
