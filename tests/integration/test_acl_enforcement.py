"""ACLs enforced on a real broker (authorizer.class.name set), with real clients on a
SASL_PLAINTEXT (SCRAM) listener: a user without ACLs is refused every main API with Kafka's
error and nothing is written; `rlog acl add` then lets the same client through without a
restart; super users do anything; DENY beats ALLOW; prefixed ACLs; listings leave out what the
user may not describe; denials are journaled (`rlog events`), once per window however often a
client retries. One cluster serves every check here; its users and topics are each test's own.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import GroupAuthorizationFailedError as AioGroupAuthorizationFailedError
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as PythonTopicPartition
from kafka.admin import (
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as PythonResourceType
from kafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
)
from kafka.structs import OffsetAndMetadata

from support.cli_runner import ok, rlog
from support.cluster import (
    HOST,
    all_registered,
    free_base_port,
    spawn_rlogd,
    stop_rlogd,
)

pytestmark = pytest.mark.integration

SASL_OFFSET = 100
STARTUP_TIMEOUT_S = 60.0
TIMEOUT_S = 15.0
PASSWORD = "secret-of-{}"
SUPER_USER = "admin"


@dataclass
class AclCluster:
    base_port: int
    data_dir: Path
    admin: AdminClient  # on the inter-broker listener: rlog's own, trusted

    @property
    def internal(self) -> str:
        return f"{HOST}:{self.base_port}"

    @property
    def sasl(self) -> str:
        return f"{HOST}:{self.base_port + SASL_OFFSET}"

    def client(self, user: str, **extra: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.sasl,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": PASSWORD.format(user),
            **extra,
        }

    def add_user(self, user: str) -> None:
        upsert = UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
            PASSWORD.format(user).encode(),
        )
        for future in self.admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=TIMEOUT_S)

    def create_topic(self, name: str, partitions: int = 1) -> None:
        for future in self.admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=TIMEOUT_S)

    def acl(self, *args: str) -> None:
        ok(rlog("acl", "add", *args, data_dir=self.data_dir))

    def end_offsets(self, topic: str, partitions: int = 1) -> list[int]:
        """The log end offsets, read on the trusted listener."""
        consumer = Consumer({"bootstrap.servers": self.internal, "group.id": "end-offsets"})
        try:
            return [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)[1]
                for p in range(partitions)
            ]
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    root = tmp_path_factory.mktemp("acl-enforcement")
    base = free_base_port(1, (SASL_OFFSET,))
    config = root / "rlog.toml"
    config.write_text(
        f"""[broker]
listeners = "INTERNAL://{HOST}:{base},SASL://{HOST}:{base + SASL_OFFSET}"
"listener.security.protocol.map" = "INTERNAL:PLAINTEXT,SASL:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
"inter.broker.listener.name" = "INTERNAL"
"sasl.enabled.mechanisms" = "SCRAM-SHA-256"
"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
"super.users" = "User:{SUPER_USER}"
"offsets.topic.replication.factor" = 1
"transaction.state.log.replication.factor" = 1
"transaction.state.log.min.isr" = 1
"group.initial.rebalance.delay.ms" = 0
"""
    )
    data_dir = root / "data"
    process = spawn_rlogd(data_dir, 1, base, config)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all_registered(base, 1):
            assert time.monotonic() < deadline, "the broker did not register"
            time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": f"{HOST}:{base}"})
        cluster = AclCluster(base, data_dir, admin)
        cluster.add_user(SUPER_USER)
        yield cluster
    finally:
        stop_rlogd(process)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def error_code(future: Any) -> int:
    """The Kafka error code a failed admin future carries (0 if it succeeded)."""
    try:
        future.result(timeout=TIMEOUT_S)
    except KafkaException as error:
        return error.args[0].code()
    return 0


def produce(config: dict[str, Any], topic: str, count: int = 3) -> list[KafkaError | None]:
    """Each record's delivery outcome (None: acknowledged)."""
    outcomes: list[KafkaError | None] = []
    producer = Producer({**config, "message.timeout.ms": 10_000})
    for index in range(count):
        producer.produce(
            topic, f"value-{index}".encode(), on_delivery=lambda e, _m: outcomes.append(e)
        )
    producer.flush(TIMEOUT_S)
    return outcomes


def group_error(config: dict[str, Any], topic: str, group: str) -> int:
    """The first error a consumer subscribing in `group` gets."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is not None:
                return message.error().code()
        return 0
    finally:
        consumer.close()


def python_client(cluster: AclCluster, user: str) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings for `user` on the SASL listener."""
    return {
        "bootstrap_servers": cluster.sasl,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": user,
        "sasl_plain_password": PASSWORD.format(user),
    }


def python_fetch_error(cluster: AclCluster, user: str, topic: str) -> type[Exception] | None:
    """What kafka-python's consumer (no group: Fetch alone) raises polling the topic."""
    consumer = KafkaConsumer(**python_client(cluster, user), group_id=None)
    try:
        consumer.assign([PythonTopicPartition(topic, 0)])
        consumer.seek(PythonTopicPartition(topic, 0), 0)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                consumer.poll(timeout_ms=500)
            except Exception as error:
                return type(error)
        return None
    finally:
        consumer.close()


def consume_values(config: dict[str, Any], topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT_S
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(message.value())
        consumer.commit(asynchronous=False)
        return values
    finally:
        consumer.close()


def denial_events(cluster: AclCluster) -> list[dict[str, Any]]:
    result = ok(
        rlog("events", "--json", "--kind", "authorization_denied", data_dir=cluster.data_dir)
    )
    return [json.loads(line) for line in result.out.splitlines() if line.strip()]


# ---- a user without ACLs ------------------------------------------------------------------


def test_a_user_without_acls_is_refused_everything_and_nothing_is_written(
    cluster: AclCluster,
) -> None:
    user, topic, group = unique("nobody"), unique("guarded"), unique("guarded-group")
    cluster.add_user(user)
    cluster.create_topic(topic)
    cluster.create_topic(unique("unlisted"))
    # A group with committed offsets, so a listing of groups would show it.
    superuser = cluster.client(SUPER_USER)
    assert produce(superuser, topic, 1) == [None]
    assert consume_values(superuser, topic, group, 1) == [b"value-0"]
    config = cluster.client(user)
    errors = KafkaError

    # Produce and fetch.
    outcomes = produce(config, topic)
    assert [e.code() if e else 0 for e in outcomes] == [errors.TOPIC_AUTHORIZATION_FAILED] * 3
    # Joining a group and committing in it.
    assert group_error(config, topic, group) == errors.GROUP_AUTHORIZATION_FAILED
    committer = KafkaConsumer(**python_client(cluster, user), group_id=group)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            committer.commit({PythonTopicPartition(topic, 0): OffsetAndMetadata(1, None, -1)})
    finally:
        committer.close()
    # Admin: listings show nothing, changes are refused.
    admin = AdminClient(config)
    assert admin.list_topics(timeout=TIMEOUT_S).topics == {}
    listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert group not in {g.group_id for g in listed.valid}
    created = admin.create_topics([NewTopic(unique("new"), 1, 1)])
    assert [error_code(f) for f in created.values()] == [errors.TOPIC_AUTHORIZATION_FAILED]
    deleted = admin.delete_topics([topic], operation_timeout=5)
    assert [error_code(f) for f in deleted.values()] == [errors.TOPIC_AUTHORIZATION_FAILED]
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])
    assert [error_code(f) for f in described.values()] == [errors.TOPIC_AUTHORIZATION_FAILED]
    change = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    altered = admin.incremental_alter_configs([change])
    assert [error_code(f) for f in altered.values()] == [errors.TOPIC_AUTHORIZATION_FAILED]
    any_acl = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    # (confluent-kafka's describe_acls does not report the answer's error: kafka-python's does.)
    python_admin = KafkaAdminClient(**python_client(cluster, user))
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            everything = ResourcePatternFilter(
                PythonResourceType.ANY, None, ACLResourcePatternType.ANY
            )
            python_admin.describe_acls(
                ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, everything)
            )
    finally:
        python_admin.close()
    grant_self = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*",
        AclOperation.ALL, AclPermissionType.ALLOW,
    )  # fmt: skip
    made = admin.create_acls([grant_self])
    assert [error_code(f) for f in made.values()] == [errors.CLUSTER_AUTHORIZATION_FAILED]
    # A transactional producer cannot start.
    txn_id = unique("txn")
    transactional = Producer({**config, "transactional.id": txn_id})
    with pytest.raises(KafkaException) as refused:
        transactional.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].code() == errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    # Allowed to describe the topic (clients then find its leader), not to read or trim it.
    cluster.acl("--allow-principal", f"User:{user}", "-o", "describe", "--topic", topic)
    assert python_fetch_error(cluster, user, topic) is TopicAuthorizationFailedError
    trimmed = admin.delete_records([TopicPartition(topic, 0, 1)])
    assert [error_code(f) for f in trimmed.values()] == [errors.TOPIC_AUTHORIZATION_FAILED]

    # Nothing was written or changed, and the broker still serves the super user.
    assert cluster.end_offsets(topic) == [1]
    topics = cluster.admin.list_topics(timeout=TIMEOUT_S).topics
    assert topic in topics and grant_self not in set(
        cluster.admin.describe_acls(any_acl).result(timeout=TIMEOUT_S)
    )
    assert produce(superuser, topic, 1) == [None]

    # Every refusal is in the journal, with who, what and on which resource: as the clients
    # asked (librdkafka asks Metadata and FindCoordinator first, and goes no further), and one
    # event per (principal, operation, resource) in a window, whichever API asked.
    denied = {
        (e["operation"], e["resource_type"], e["resource_name"], e["api"])
        for e in denial_events(cluster)
        if e["principal"] == f"User:{user}"
    }
    assert {
        ("DESCRIBE", "TOPIC", topic, "METADATA"),
        ("DESCRIBE", "GROUP", group, "FIND_COORDINATOR"),
        ("DESCRIBE", "TRANSACTIONAL_ID", txn_id, "FIND_COORDINATOR"),
        ("READ", "TOPIC", topic, "FETCH"),
        ("CREATE", "TOPIC", next(iter(created)), "CREATE_TOPICS"),
        ("DELETE", "TOPIC", topic, "DELETE_TOPICS"),
        ("DESCRIBE_CONFIGS", "TOPIC", topic, "DESCRIBE_CONFIGS"),
        ("ALTER_CONFIGS", "TOPIC", topic, "INCREMENTAL_ALTER_CONFIGS"),
        ("DESCRIBE", "CLUSTER", "kafka-cluster", "DESCRIBE_ACLS"),
        ("ALTER", "CLUSTER", "kafka-cluster", "CREATE_ACLS"),
    } <= denied


# ---- ACLs granted, denied, prefixed --------------------------------------------------------


def test_acls_added_with_rlog_take_effect_at_once_for_every_client(cluster: AclCluster) -> None:
    user, topic, group = unique("writer"), unique("granted"), unique("granted-group")
    cluster.add_user(user)
    cluster.create_topic(topic)
    config = cluster.client(user)
    assert [e.code() for e in produce(config, topic, 1) if e] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    principal = f"User:{user}"
    cluster.acl("--allow-principal", principal, "-o", "write", "--topic", topic)
    assert produce(config, topic, 2) == [None, None]  # confluent-kafka
    producer = KafkaProducer(**python_client(cluster, user))  # kafka-python
    try:
        producer.send(topic, b"value-2").get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    assert cluster.end_offsets(topic) == [3]

    cluster.acl("--allow-principal", principal, "-o", "read", "--topic", topic, "--group", group)
    assert consume_values(config, topic, group, 3) == [b"value-0", b"value-1", b"value-2"]

    async def read_with_aiokafka() -> list[bytes]:
        consumer = AIOKafkaConsumer(
            topic,
            **python_client(cluster, user),
            group_id=group + "-aio",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=int(TIMEOUT_S * 1000), max_records=3)
            return [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()

    with pytest.raises(AioGroupAuthorizationFailedError):  # READ on the group is for `group`
        asyncio.run(read_with_aiokafka())
    cluster.acl("--allow-principal", principal, "-o", "read", "--group", group + "-aio")
    assert asyncio.run(read_with_aiokafka()) == [b"value-0", b"value-1", b"value-2"]
    # READ implies DESCRIBE: the topic now shows in the listing, the others still do not.
    assert set(AdminClient(config).list_topics(timeout=TIMEOUT_S).topics) == {topic}


def test_deny_beats_allow_and_prefixed_acls_cover_names(cluster: AclCluster) -> None:
    user, prefix = unique("prefixed"), unique("team")
    cluster.add_user(user)
    mine, blocked = f"{prefix}.orders", f"{prefix}.secret"
    for name in (mine, blocked):
        cluster.create_topic(name)
    principal = f"User:{user}"
    cluster.acl(
        "--allow-principal", principal, "-o", "write", "--topic", prefix,
        "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    cluster.acl("--deny-principal", principal, "-o", "write", "--topic", blocked)
    config = cluster.client(user)
    assert produce(config, mine, 1) == [None]
    assert [e.code() for e in produce(config, blocked, 1) if e] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    # A super user is not bound by any of it.
    assert produce(cluster.client(SUPER_USER), blocked, 1) == [None]
    assert cluster.end_offsets(mine) == [1] and cluster.end_offsets(blocked) == [1]


def test_a_client_that_asks_is_told_the_operations_its_acls_allow(cluster: AclCluster) -> None:
    """KIP-430 under an authorizer: the bits follow the user's ACLs (implied operations
    included), the cluster's are none without DESCRIBE on it, a topic the user may not describe
    is refused as before, and a super user is allowed everything."""
    user, topic, hidden, group = unique("ops"), unique("ops"), unique("ops-hidden"), unique("g")
    cluster.add_user(user)
    for name in (topic, hidden):
        cluster.create_topic(name)
    principal = f"User:{user}"
    cluster.acl("--allow-principal", principal, "-o", "read", "--topic", topic, "--group", group)
    cluster.acl("--allow-principal", principal, "-o", "alter-configs", "--topic", topic)
    consumer = Consumer({**cluster.client(user), "group.id": group})
    try:  # the group exists: committed offsets, no members (Empty)
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    client = AdminClient(cluster.client(user))

    def names(operations: list[AclOperation] | None) -> set[str]:
        return {op.name for op in operations or ()}

    described = client.describe_topics(
        TopicCollection([topic, hidden]), include_authorized_operations=True
    )
    assert names(described[topic].result(timeout=TIMEOUT_S).authorized_operations) == {
        "READ", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"
    }  # fmt: skip
    assert error_code(described[hidden]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    groups = client.describe_consumer_groups([group], include_authorized_operations=True)
    assert names(groups[group].result(timeout=TIMEOUT_S).authorized_operations) == {
        "READ", "DESCRIBE"
    }  # fmt: skip
    cluster_ops = client.describe_cluster(include_authorized_operations=True)
    assert names(cluster_ops.result(timeout=TIMEOUT_S).authorized_operations) == set()

    cluster.acl("--allow-principal", principal, "-o", "describe", "--cluster")
    cluster_ops = client.describe_cluster(include_authorized_operations=True)
    assert names(cluster_ops.result(timeout=TIMEOUT_S).authorized_operations) == {"DESCRIBE"}

    admin = AdminClient(cluster.client(SUPER_USER))
    described = admin.describe_topics(TopicCollection([hidden]), include_authorized_operations=True)
    assert len(described[hidden].result(timeout=TIMEOUT_S).authorized_operations or ()) == 8


def test_a_client_retrying_a_denied_request_is_journaled_once_per_window(
    cluster: AclCluster,
) -> None:
    user = unique("hammer")
    cluster.add_user(user)
    python_admin = KafkaAdminClient(**python_client(cluster, user))
    everything = ResourcePatternFilter(PythonResourceType.ANY, None, ACLResourcePatternType.ANY)
    try:
        for _ in range(20):
            with pytest.raises(ClusterAuthorizationFailedError):
                python_admin.describe_acls(
                    ACLFilter(None, "*", ACLOperation.ANY, ACLPermissionType.ANY, everything)
                )
    finally:
        python_admin.close()
    mine = [e for e in denial_events(cluster) if e["principal"] == f"User:{user}"]
    assert [(e["operation"], e["api"]) for e in mine] == [("DESCRIBE", "DESCRIBE_ACLS")]
    assert mine[0]["host"] == HOST
