"""The admin APIs Kafka's tools and Admin clients use, against a real 3-broker cluster with real
clients: the legacy AlterConfigs (confluent-kafka's and kafka-python's alter_configs), which
replaces a resource's dynamic configs; DescribeConfigs with synonyms in Kafka's order, sources,
types and documentation; DescribeLogDirs (kafka-python's describe_log_dirs, `rlog cluster
disks`), whose sizes grow as records arrive; and DescribeTopicPartitions, paged as Kafka 4's
kafka-topics pages it; and KIP-430's authorized operations, when a client asks."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from rlog.cli.terminal import ExitCode
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon.wire import BlockingKafkaClient
from support.cli_runner import Result, clean_env, ok, one_line_error
from support.cli_runner import rlog as run_rlog
from support.cluster import Cluster, start_cluster
from support.replication import wait_for

STATIC_RETENTION_MS = "7200000"  # rlog.toml's log.retention.ms: a static broker config
CONFIG = f"""
[broker]
"default.replication.factor" = 3
"log.retention.ms" = {STATIC_RETENTION_MS}
"""
KAFKA_DEFAULT_RETENTION_MS = str(7 * 24 * 3600 * 1000)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module: each test makes its own topics and undoes the cluster-wide
    defaults it sets."""
    root = tmp_path_factory.mktemp("admin-apis")
    config = root / "rlog.toml"
    config.write_text(CONFIG)
    cluster = start_cluster(root / "cluster", 3, config)
    try:
        yield cluster
    finally:
        # Its AdminClient would otherwise live on, reconnecting to the stopped brokers for
        # the rest of the run.
        _ADMINS.pop(cluster.bootstrap, None)
        cluster.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


_ADMINS: dict[str, AdminClient] = {}


def admin(cluster: Cluster) -> AdminClient:
    """One AdminClient per cluster, kept: its futures fail when the client is collected."""
    if cluster.bootstrap not in _ADMINS:
        _ADMINS[cluster.bootstrap] = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return _ADMINS[cluster.bootstrap]


def create(cluster: Cluster, topic: str, partitions: int = 1, **configs: str) -> None:
    new = NewTopic(
        topic, partitions, 3, config={k.replace("_", "."): v for k, v in configs.items()}
    )
    admin(cluster).create_topics([new])[topic].result(timeout=15)


def legacy_alter(
    cluster: Cluster, resource: ConfigResource, *, validate_only: bool = False
) -> KafkaException | None:
    """confluent-kafka's alter_configs (AlterConfigs, the legacy API); the error, if any."""
    with pytest.warns(DeprecationWarning):
        future = admin(cluster).alter_configs([resource], validate_only=validate_only)[resource]
    try:
        future.result(timeout=15)
    except KafkaException as error:
        return error
    return None


def described(cluster: Cluster, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin(cluster).describe_configs([resource])[resource].result(timeout=15)


def set_cluster_default(cluster: Cluster, key: str, value: str | None) -> None:
    """IncrementalAlterConfigs on the broker resource "" (the cluster-wide dynamic default, as
    kafka-configs --entity-default sets it; librdkafka refuses an empty broker name)."""
    operation = 0 if value is not None else 1  # SET, DELETE
    body = {
        "resources": [
            {
                "resource_type": 4,
                "resource_name": "",
                "configs": [{"name": key, "config_operation": operation, "value": value}],
            }
        ],
        "validate_only": False,
    }
    broker = cluster.status()["brokers"][0]
    with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=15) as client:
        answer = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body)
    assert answer["responses"][0]["error_code"] == ErrorCode.NONE, answer


def rlog(cluster: Cluster, *args: str) -> Result:
    """The real `rlog` command, finding the cluster through its data dir."""
    return run_rlog(*args, env=clean_env(Path(cluster.data_dir)))


def error_code(error: KafkaException | None) -> int | None:
    return None if error is None else error.args[0].code()


# ---- AlterConfigs -------------------------------------------------------------------------


def test_legacy_alter_configs_replaces_a_topics_whole_set_of_dynamic_configs(cluster: Cluster):
    topic = unique("legacy")
    create(cluster, topic, retention_ms="1000", cleanup_policy="compact")
    wanted = {"segment.ms": "60000", "max.message.bytes": "2000"}
    assert (
        legacy_alter(cluster, ConfigResource(ResourceType.TOPIC, topic, set_config=wanted)) is None
    )
    configs = described(cluster, topic)
    for key, value in wanted.items():
        assert configs[key].value == value
        assert configs[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # Not named, so no longer the topic's own: back to what the brokers give every topic.
    assert configs["retention.ms"].value == STATIC_RETENTION_MS
    assert configs["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].is_default

    # validate_only checks and changes nothing, good or bad.
    check = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "1234"})
    assert legacy_alter(cluster, check, validate_only=True) is None
    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "soon"})
    refused = legacy_alter(cluster, bad)
    assert error_code(refused) == ErrorCode.INVALID_CONFIG and "segment.ms" in str(refused)
    assert error_code(legacy_alter(cluster, bad, validate_only=True)) == ErrorCode.INVALID_CONFIG
    configs = described(cluster, topic)
    assert {key: configs[key].value for key in wanted} == wanted

    unknown = ConfigResource(ResourceType.TOPIC, unique("absent"), set_config={"segment.ms": "1"})
    assert error_code(legacy_alter(cluster, unknown)) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    group = ConfigResource(ResourceType.GROUP, "g", set_config={"consumer.session.timeout.ms": "1"})
    assert error_code(legacy_alter(cluster, group)) == ErrorCode.INVALID_REQUEST

    # An empty set removes every override.
    assert legacy_alter(cluster, ConfigResource(ResourceType.TOPIC, topic, set_config={})) is None
    sources = {e.source for e in described(cluster, topic).values()}
    assert ConfigSource.DYNAMIC_TOPIC_CONFIG.value not in sources


def test_legacy_alter_configs_of_the_broker_resource_replaces_the_cluster_defaults(
    cluster: Cluster,
):
    topic = unique("defaults")
    create(cluster, topic)
    set_cluster_default(cluster, "min.insync.replicas", "2")
    try:
        # rlog keeps broker configs cluster-wide: broker 1's resource is the cluster default.
        resource = ConfigResource(
            ResourceType.BROKER, "1", set_config={"log.retention.ms": "3600000"}
        )
        assert legacy_alter(cluster, resource) is None
        configs = described(cluster, topic)
        assert configs["retention.ms"].value == "3600000"
        assert configs["retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        # min.insync.replicas was not named: the legacy request removed that default.
        assert configs["min.insync.replicas"].value == "1"
        assert configs["min.insync.replicas"].is_default
    finally:
        empty = ConfigResource(ResourceType.BROKER, "1", set_config={})
        assert legacy_alter(cluster, empty) is None
    assert described(cluster, topic)["retention.ms"].value == STATIC_RETENTION_MS


def test_kafka_python_legacy_alter_configs_keeps_what_it_reads_back(cluster: Cluster):
    """kafka-python's AlterConfigs path first reads the topic's modified configs and sends them
    along, as the legacy API needs: its change lands, the others stay."""
    topic = unique("kpy-alter")
    create(cluster, topic, cleanup_policy="compact")
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    try:
        resource = KafkaConfigResource(
            ConfigResourceType.TOPIC, topic, configs={"retention.ms": "5000"}
        )
        answer = client.alter_configs([resource], incremental=False)
    finally:
        client.close()
    assert answer == {"topic": {topic: "OK"}}
    configs = described(cluster, topic)
    assert configs["retention.ms"].value == "5000"
    assert configs["cleanup.policy"].value == "compact"


# ---- DescribeConfigs ----------------------------------------------------------------------


def kafka_python_describe(cluster: Cluster, kind: ConfigResourceType, name: str) -> dict:
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    try:
        answer = client.describe_configs(
            [KafkaConfigResource(kind, name)], include_synonyms=True, config_filter="all"
        )
    finally:
        client.close()
    (resource,) = answer[kind.name.lower()].values()
    return resource


def synonyms(entry: dict) -> list[tuple[str, str, str]]:
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


def test_describe_configs_lists_synonyms_in_kafkas_order_with_sources_and_types(
    cluster: Cluster,
):
    topic = unique("synonyms")
    create(cluster, topic, retention_ms="1000")
    set_cluster_default(cluster, "log.retention.ms", "5000")
    try:
        retention = kafka_python_describe(cluster, ConfigResourceType.TOPIC, topic)["retention.ms"]
        assert retention["value"] == "1000"
        assert retention["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert synonyms(retention) == [
            ("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG"),
            ("log.retention.ms", "5000", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
            ("log.retention.ms", STATIC_RETENTION_MS, "STATIC_BROKER_CONFIG"),
            ("log.retention.ms", KAFKA_DEFAULT_RETENTION_MS, "DEFAULT_CONFIG"),
        ]
        assert retention["config_type"] == "LONG"
        assert not retention["read_only"] and not retention["is_sensitive"]
        assert retention["documentation"] is None, "not asked for"

        broker = kafka_python_describe(cluster, ConfigResourceType.BROKER, "1")
        assert broker["log.retention.ms"]["value"] == "5000"
        assert broker["log.retention.ms"]["config_source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
        assert not broker["log.retention.ms"]["read_only"]
        assert broker["num.partitions"]["read_only"]
        assert broker["auto.create.topics.enable"]["config_type"] == "BOOLEAN"
        # The cluster default resource (kafka-configs --entity-default; kafka-python and
        # librdkafka refuse the empty name) lists only the dynamic defaults.
        defaults = raw_describe(cluster, 4, "", synonyms=True)
        assert list(defaults) == ["log.retention.ms"]
        assert defaults["log.retention.ms"]["synonyms"] == [
            {"name": "log.retention.ms", "value": "5000", "source": 3}
        ]

        # confluent-kafka (librdkafka always asks for synonyms) reads the same.
        configs = described(cluster, topic)
        assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert set(configs["retention.ms"].synonyms) == {"retention.ms", "log.retention.ms"}
        assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        assert configs["segment.ms"].is_default and not configs["segment.ms"].is_read_only
    finally:
        set_cluster_default(cluster, "log.retention.ms", None)


def raw_describe(
    cluster: Cluster, kind: int, name: str, *, synonyms: bool = False, documentation: bool = False
) -> dict[str, dict]:
    """DescribeConfigs v4 through rlog's own wire client: {config name: entry}."""
    body = {
        "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": synonyms,
        "include_documentation": documentation,
    }
    broker = cluster.status()["brokers"][0]
    with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=10) as client:
        answer = client.request(ApiKey.DESCRIBE_CONFIGS, 4, body)
    (result,) = answer["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return {entry["name"]: entry for entry in result["configs"]}


def test_describe_configs_gives_documentation_only_when_asked_for(cluster: Cluster):
    topic = unique("docs")
    create(cluster, topic)
    plain = raw_describe(cluster, 2, topic)
    assert all(entry["documentation"] is None for entry in plain.values())
    documented = raw_describe(cluster, 2, topic, documentation=True)
    assert "records are kept" in documented["retention.ms"]["documentation"]
    assert all(entry["documentation"] for entry in documented.values())


# ---- DescribeLogDirs ----------------------------------------------------------------------


def log_dirs(cluster: Cluster, topic: str) -> dict[int, dict]:
    """kafka-python's describe_log_dirs of `topic`: {broker: its one log dir}."""
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    try:
        answers = client.describe_log_dirs(topic_partitions=[topic])
    finally:
        client.close()
    found = {}
    for answer in answers:
        (log_dir,) = answer["log_dirs"]
        found[answer["broker"]] = log_dir
    return found


def partition_sizes(log_dir: dict) -> dict[int, tuple[int, int]]:
    assert log_dir["error_code"] == ErrorCode.NONE
    return {
        p["partition_index"]: (p["partition_size"], p["offset_lag"])
        for t in log_dir["topics"]
        for p in t["partitions"]
    }


def test_describe_log_dirs_reports_each_replicas_size_as_records_arrive(cluster: Cluster):
    topic = unique("sizes")
    create(cluster, topic, partitions=2)
    before = log_dirs(cluster, topic)
    assert sorted(before) == [1, 2, 3]
    for broker_id, log_dir in before.items():
        assert log_dir["log_dir"] == str(cluster.data_dir / f"broker-{broker_id}")
        assert partition_sizes(log_dir) == {0: (0, 0), 1: (0, 0)}
        assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce(topic, value=b"v" * 100, key=str(i).encode(), partition=0)
    assert producer.flush(20) == 0

    def replicated() -> bool:
        sizes = [partition_sizes(d) for d in log_dirs(cluster, topic).values()]
        return all(s[0][0] > 300 * 100 and s == sizes[0] for s in sizes)

    wait_for("every replica of partition 0 to hold the records", replicated)
    after = log_dirs(cluster, topic)
    assert all(partition_sizes(d)[1] == (0, 0) for d in after.values()), "nothing went to 1"
    assert all(partition_sizes(d)[0][1] == 0 for d in after.values()), "Kafka's lag: 0"

    # rlog cluster disks says the same, per broker.
    shown = json.loads(ok(rlog(cluster, "cluster", "disks", "--topic", topic, "--json")).out)
    for broker in shown["brokers"]:
        (log_dir,) = broker["log_dirs"]
        sizes = {r["partition"]: r["size_bytes"] for r in log_dir["replicas"]}
        assert sizes == {p: size for p, (size, _) in partition_sizes(after[broker["id"]]).items()}
        assert log_dir["status"] == "online" and log_dir["usable_bytes"] > 0


def test_rlog_cluster_disks_shows_a_table_and_refuses_unknown_topics_and_brokers(
    cluster: Cluster,
):
    topic = unique("disks")
    create(cluster, topic)
    table = ok(rlog(cluster, "cluster", "disks", "--broker", "2", "--topic", topic)).out
    lines = table.splitlines()
    assert lines[0].split() == [
        "BROKER", "ADDRESS", "LOG-DIR", "STATUS", "TOTAL", "USABLE", "LOGS", "REPLICAS"
    ]  # fmt: skip
    assert lines[1].split()[0] == "2" and "online" in lines[1]
    assert any(line.split()[:3] == ["2", topic, "0"] for line in lines)
    one_line_error(rlog(cluster, "cluster", "disks", "--topic", unique("nope")), 5, "unknown topic")
    one_line_error(rlog(cluster, "cluster", "disks", "--broker", "9"), 5, "no broker 9")
    assert rlog(cluster, "cluster", "disks", "--broker", "two").code == ExitCode.USAGE


# ---- DescribeTopicPartitions --------------------------------------------------------------


def describe_topic_partitions(
    cluster: Cluster, names: list[str], limit: int, cursor: dict | None = None
) -> dict:
    broker = cluster.status()["brokers"][0]
    body = {
        "topics": [{"name": name} for name in names],
        "response_partition_limit": limit,
        "cursor": cursor,
    }
    with BlockingKafkaClient(broker["host"], broker["port"], timeout_s=10) as client:
        return client.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)


def test_describe_topic_partitions_pages_through_the_partitions_as_metadata_shows_them(
    cluster: Cluster,
):
    first, second = sorted([unique("pages"), unique("pages")])
    create(cluster, first, partitions=3)
    create(cluster, second, partitions=2)
    seen: list[tuple[str, int, int, list[int], list[int]]] = []
    cursor, pages = None, 0
    while True:
        answer = describe_topic_partitions(cluster, [second, first], limit=2, cursor=cursor)
        pages += 1
        for topic in answer["topics"]:
            assert topic["error_code"] == ErrorCode.NONE and topic["topic_id"].int != 0
            for p in topic["partitions"]:
                entry = (topic["name"], p["partition_index"], p["leader_id"])
                seen.append((*entry, p["replica_nodes"], p["isr_nodes"]))
        cursor = answer["next_cursor"]
        if cursor is None:
            break
    assert pages == 3, "five partitions, two per page"
    assert [(t, p) for t, p, *_ in seen] == [
        (first, 0), (first, 1), (first, 2), (second, 0), (second, 1)
    ]  # fmt: skip

    # confluent-kafka's describe_topics (Metadata) agrees on leaders, replicas and ISRs.
    futures = admin(cluster).describe_topics(TopicCollection([first, second]))
    expected = []
    for name in (first, second):
        description = futures[name].result(timeout=15)
        for p in sorted(description.partitions, key=lambda p: p.id):
            expected.append(
                (name, p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
            )
    assert seen == expected

    unknown = unique("absent")
    answer = describe_topic_partitions(cluster, [unknown, first], limit=2000)
    codes = {t["name"]: t["error_code"] for t in answer["topics"]}
    assert codes == {first: ErrorCode.NONE, unknown: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def metadata_v12(cluster: Cluster, topics: list[dict] | None) -> dict:
    with BlockingKafkaClient("127.0.0.1", cluster.base_port, timeout_s=10) as client:
        return client.request(
            ApiKey.METADATA,
            12,
            {"topics": topics, "allow_auto_topic_creation": False,
             "include_topic_authorized_operations": False},
        )  # fmt: skip


def test_metadata_v12_gives_topic_ids_and_finds_a_topic_by_its_id(cluster: Cluster):
    topic = unique("metadata-ids")
    create(cluster, topic, partitions=2)
    by_name = metadata_v12(cluster, [{"name": topic, "topic_id": uuid.UUID(int=0)}])
    [found] = by_name["topics"]
    assert found["error_code"] == 0 and found["topic_id"] != uuid.UUID(int=0)
    assert len(found["partitions"]) == 2
    confluent = admin(cluster).describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    mask = (1 << 64) - 1
    as_seen_by_librdkafka = uuid.UUID(
        int=(confluent.topic_id.get_most_significant_bits() & mask) << 64
        | (confluent.topic_id.get_least_significant_bits() & mask)
    )
    assert as_seen_by_librdkafka == found["topic_id"]

    [again] = metadata_v12(cluster, [{"name": None, "topic_id": found["topic_id"]}])["topics"]
    assert (again["name"], again["topic_id"], len(again["partitions"])) == (
        topic, found["topic_id"], 2,
    )  # fmt: skip
    stranger = uuid.uuid4()
    [unknown] = metadata_v12(cluster, [{"name": None, "topic_id": stranger}])["topics"]
    assert (unknown["error_code"], unknown["name"], unknown["topic_id"]) == (
        ErrorCode.UNKNOWN_TOPIC_ID, None, stranger,
    )  # fmt: skip
    everything = metadata_v12(cluster, None)["topics"]
    assert {t["name"]: t["topic_id"] for t in everything}[topic] == found["topic_id"]


def test_clients_that_ask_are_told_every_operation_when_no_authorizer_runs(cluster: Cluster):
    """KIP-430 without an authorizer (Kafka's rule): everything the resource type has is allowed,
    as confluent-kafka's describe calls show when they ask (`include_authorized_operations`)."""
    topic, group = unique("ops"), unique("ops-group")
    create(cluster, topic)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:  # a group that exists: committed offsets, no members (Empty)
        consumer.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    client = admin(cluster)

    def names(operations: list[AclOperation] | None) -> set[str]:
        return {op.name for op in operations or ()}

    described = client.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    assert names(described[topic].result(timeout=15).authorized_operations) == {
        "READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    }  # fmt: skip
    cluster_ops = client.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert names(cluster_ops.authorized_operations) == {
        "CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE",
        "ALTER", "DESCRIBE",
    }  # fmt: skip
    groups = client.describe_consumer_groups([group], include_authorized_operations=True)
    assert names(groups[group].result(timeout=15).authorized_operations) == {
        "READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"
    }  # fmt: skip

    # Not asked: librdkafka reports none.
    plain = client.describe_topics(TopicCollection([topic]))[topic].result(timeout=15)
    assert plain.authorized_operations is None
