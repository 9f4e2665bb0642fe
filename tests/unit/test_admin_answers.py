"""The broker's admin answers that are pure functions of the metadata image, the settings and
the core's logs: DescribeConfigs (sources, synonyms, types), the legacy AlterConfigs as the
incremental request the controller serves, DescribeLogDirs and DescribeTopicPartitions
(pagination as Kafka's handler pages). And, for every version the broker advertises of these
APIs, the answer it builds names every field the response schema has at that version."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from unit.test_broker_core import TOPIC, Cluster, batch

from rlog.core.broker import BrokerConfig
from rlog.core.broker.messages import LogDirFailed
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    ChangeConfig,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    MetadataRecord,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.protocol.schema import Struct, load_message
from rlog.core.storage.config import LOG_CONFIG_NAMES, LogConfig
from rlog.daemon.broker.config_answers import (
    BROKER_CONFIGS,
    OP_DELETE,
    OP_SET,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    TOPIC_BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    ConfigLevels,
    ConfigSource,
    ConfigType,
    alter_configs_answer,
    alter_configs_error,
    changes_nothing,
    describe_configs,
    legacy_alter_as_incremental,
    shows_configs,
)
from rlog.daemon.broker.log_dirs import DiskSpace, describe_log_dirs
from rlog.daemon.broker.topic_partitions import describe_topic_partitions
from rlog.daemon.config import BrokerSettings, broker_settings

Body = dict[str, Any]
BROKER_LOGGER = 8
DAY_MS = 86_400_000
SPACE = DiskSpace(100 * 2**30, 40 * 2**30)


def fold(*records: MetadataRecord) -> MetadataImage:
    image = MetadataImage()
    for offset, record in enumerate(records):
        image.apply(offset, record)
    return image


def brokers(*ids: int, fenced: tuple[int, ...] = ()) -> list[MetadataRecord]:
    """Registrations that come first in the log: a broker's epoch is its record's offset."""
    records: list[MetadataRecord] = []
    for broker_id in ids:
        epoch = len(records)
        records.append(RegisterBroker(broker_id, "x", epoch, "h", 9090 + broker_id, None))
        if broker_id not in fenced:
            records.append(UnfenceBroker(broker_id, epoch))
    return records


def topic(name: str, count: int, configs: dict[str, str] | None = None) -> list[MetadataRecord]:
    topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name).hex
    records: list[MetadataRecord] = [CreateTopic(name, topic_id, configs or {})]
    for index in range(count):
        records.append(CreatePartition(name, index, (1, 2, 3), (1, 2, 3), 1 + index % 2, 0, 0))
    return records


# A static config: the [broker] table sets log.retention.ms; the cluster-wide dynamic defaults
# set retention.ms (log.retention.ms) and min.insync.replicas; the topic sets retention.ms.
SETTINGS = broker_settings({"log.retention.ms": 7_200_000, "num.partitions": 3})
LEVELS = ConfigLevels.of(SETTINGS)
IMAGE = fold(
    *brokers(1, 2, 3),
    *topic("orders", 2, {"retention.ms": "1000", "cleanup.policy": "compact"}),
    ChangeConfig("cluster", "", "retention.ms", "5000"),
    ChangeConfig("cluster", "", "min.insync.replicas", "2"),
)
CONFIG = BrokerConfig(1, log_config=SETTINGS.log_config())


def describe(
    *resources: tuple[int, str],
    keys: list[str] | None = None,
    synonyms: bool = True,
    documentation: bool = False,
    image: MetadataImage = IMAGE,
) -> list[Body]:
    body = {
        "resources": [
            {"resource_type": kind, "resource_name": name, "configuration_keys": keys}
            for kind, name in resources
        ],
        "include_synonyms": synonyms,
        "include_documentation": documentation,
    }
    answer = describe_configs(body, broker_id=1, image=image, config=CONFIG, levels=LEVELS)
    return answer["results"]


def entries(result: Body) -> dict[str, Body]:
    assert result["error_code"] == ErrorCode.NONE, result
    return {entry["name"]: entry for entry in result["configs"]}


def synonyms_of(entry: Body) -> list[tuple[str, str, ConfigSource]]:
    return [(s["name"], s["value"], ConfigSource(s["source"])) for s in entry["synonyms"]]


# ---- DescribeConfigs ----------------------------------------------------------------------


def test_a_topic_config_lists_every_level_that_sets_it_topic_first_then_the_broker_names():
    (result,) = describe((RESOURCE_TOPIC, "orders"))
    retention = entries(result)["retention.ms"]
    assert retention["value"] == "1000"
    assert retention["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert synonyms_of(retention) == [
        ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "7200000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", str(7 * DAY_MS), ConfigSource.DEFAULT_CONFIG),
    ]
    assert retention["config_type"] == ConfigType.LONG
    assert not retention["read_only"] and not retention["is_sensitive"]
    assert retention["documentation"] is None, "only when asked for"


def test_without_a_topic_override_the_first_level_below_gives_value_and_source():
    (result,) = describe((RESOURCE_TOPIC, "orders"))
    configs = entries(result)
    min_isr = configs["min.insync.replicas"]
    assert (min_isr["value"], min_isr["config_source"]) == (
        "2",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert synonyms_of(min_isr) == [
        ("min.insync.replicas", "2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("min.insync.replicas", "1", ConfigSource.DEFAULT_CONFIG),
    ]
    # rlog's config leaves log.segment.bytes at its default: the topic's is a default, as
    # Kafka's is when server.properties does not set it (kafka-topics lists only the others).
    segment = configs["segment.bytes"]
    assert synonyms_of(segment) == [
        ("log.segment.bytes", segment["value"], ConfigSource.DEFAULT_CONFIG)
    ]
    assert segment["config_source"] == ConfigSource.DEFAULT_CONFIG and segment["is_default"]
    # A topic config no [broker] key sets: only rlog's default, under Kafka's broker name.
    tombstones = configs["delete.retention.ms"]
    assert synonyms_of(tombstones) == [
        ("log.cleaner.delete.retention.ms", str(DAY_MS), ConfigSource.DEFAULT_CONFIG)
    ]
    assert tombstones["config_source"] == ConfigSource.DEFAULT_CONFIG and tombstones["is_default"]
    assert configs["cleanup.policy"]["config_type"] == ConfigType.LIST
    assert configs["unclean.leader.election.enable"]["config_type"] == ConfigType.BOOLEAN
    assert configs["min.cleanable.dirty.ratio"]["config_type"] == ConfigType.DOUBLE


def test_synonyms_and_documentation_only_when_asked_for_and_the_source_either_way():
    (bare,) = describe((RESOURCE_TOPIC, "orders"), synonyms=False)
    (full,) = describe((RESOURCE_TOPIC, "orders"), documentation=True)
    for name, entry in entries(bare).items():
        assert entry["synonyms"] == [] and entry["documentation"] is None
        assert entry["config_source"] == entries(full)[name]["config_source"]
        assert entries(full)[name]["documentation"], f"{name} has no documentation"


def test_the_brokers_own_resource_shows_dynamic_defaults_under_broker_names():
    (result,) = describe((RESOURCE_BROKER, "1"))
    configs = entries(result)
    retention = configs["log.retention.ms"]
    assert retention["value"] == "5000" and not retention["read_only"]
    assert synonyms_of(retention) == [
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "7200000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", str(7 * DAY_MS), ConfigSource.DEFAULT_CONFIG),
    ]
    partitions = configs["num.partitions"]
    assert partitions["value"] == "3" and partitions["read_only"]
    assert partitions["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    assert synonyms_of(partitions)[1] == ("num.partitions", "1", ConfigSource.DEFAULT_CONFIG)
    assert configs["offsets.topic.replication.factor"]["config_type"] == ConfigType.SHORT


def test_the_cluster_default_resource_lists_only_the_dynamic_defaults():
    (result,) = describe((RESOURCE_BROKER, ""))
    configs = entries(result)
    assert sorted(configs) == ["log.retention.ms", "min.insync.replicas"]
    assert all(
        e["config_source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG for e in configs.values()
    )
    assert synonyms_of(configs["log.retention.ms"]) == [
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]


def test_errors_per_resource_and_the_rest_still_answered():
    results = describe(
        (RESOURCE_TOPIC, "nope"),
        (RESOURCE_TOPIC, "no/slash"),
        (RESOURCE_BROKER, "2"),
        (RESOURCE_BROKER, "one"),
        (BROKER_LOGGER, "1"),
        (RESOURCE_TOPIC, "orders"),
    )
    assert [r["error_code"] for r in results] == [
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.NONE,
    ]
    assert all(r["configs"] == [] for r in results[:-1])
    assert "integer" in results[3]["error_message"]


def test_configuration_keys_filter_and_an_empty_list_means_every_key():
    (some,) = describe((RESOURCE_TOPIC, "orders"), keys=["retention.ms", "no.such"])
    assert list(entries(some)) == ["retention.ms"]
    (every,) = describe((RESOURCE_TOPIC, "orders"), keys=[])
    assert set(entries(every)) == set(TOPIC_CONFIGS)


def test_every_config_rlog_serves_has_kafkas_type_and_a_broker_synonym():
    """A new [broker] key or topic config needs its entry here, or clients see a guessed type
    and no documentation."""
    assert set(BrokerSettings().to_kafka_properties()) <= set(BROKER_CONFIGS)
    topic_names = LOG_CONFIG_NAMES | {"min.insync.replicas", "unclean.leader.election.enable"}
    assert set(TOPIC_CONFIGS) == topic_names == set(TOPIC_BROKER_SYNONYMS)
    assert all(spec.type != ConfigType.UNKNOWN and spec.doc for spec in BROKER_CONFIGS.values())


# ---- AlterConfigs (legacy) ----------------------------------------------------------------


def alter(*resources: tuple[int, str, dict[str, str | None]], validate_only: bool = False) -> Body:
    return {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
            for kind, name, configs in resources
        ],
        "validate_only": validate_only,
    }


def operations(resource: Body) -> dict[str, tuple[int, str | None]]:
    return {c["name"]: (c["config_operation"], c["value"]) for c in resource["configs"]}


def test_a_legacy_alter_sets_what_it_names_and_deletes_every_other_dynamic_config():
    body = alter((RESOURCE_TOPIC, "orders", {"segment.ms": "60000", "retention.ms": "2000"}))
    incremental = legacy_alter_as_incremental(body, IMAGE)
    (resource,) = incremental["resources"]
    assert operations(resource) == {
        "segment.ms": (OP_SET, "60000"),
        "retention.ms": (OP_SET, "2000"),
        "cleanup.policy": (OP_DELETE, None),
    }
    assert incremental["validate_only"] is False
    empty = legacy_alter_as_incremental(alter((RESOURCE_TOPIC, "orders", {})), IMAGE)
    assert operations(empty["resources"][0]) == {
        "cleanup.policy": (OP_DELETE, None),
        "retention.ms": (OP_DELETE, None),
    }


def test_a_legacy_alter_of_a_broker_replaces_the_cluster_defaults_by_either_name():
    body = alter((RESOURCE_BROKER, "", {"log.retention.ms": "9000"}), validate_only=True)
    incremental = legacy_alter_as_incremental(body, IMAGE)
    assert operations(incremental["resources"][0]) == {
        "log.retention.ms": (OP_SET, "9000"),  # the controller stores it as retention.ms
        "min.insync.replicas": (OP_DELETE, None),
    }
    assert incremental["validate_only"] is True


def test_what_the_controller_judges_passes_through_unchanged():
    # Unknown topics, null values, unsupported types: the controller's own checks answer them.
    body = alter(
        (RESOURCE_TOPIC, "nope", {"retention.ms": None}),
        (BROKER_LOGGER, "1", {"kafka": "DEBUG"}),
    )
    incremental = legacy_alter_as_incremental(body, IMAGE)
    assert [operations(r) for r in incremental["resources"]] == [
        {"retention.ms": (OP_SET, None)},
        {"kafka": (OP_SET, "DEBUG")},
    ]
    answer = {
        "responses": [
            {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "error_message": "gone"},
            {"error_code": ErrorCode.INVALID_REQUEST, "error_message": "type 8"},
        ]
    }
    legacy = alter_configs_answer(body, answer)["responses"]
    assert [(r["resource_type"], r["resource_name"], r["error_code"]) for r in legacy] == [
        (RESOURCE_TOPIC, "nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        (BROKER_LOGGER, "1", ErrorCode.INVALID_REQUEST),
    ]  # fmt: skip
    timed_out = alter_configs_error(body, ErrorCode.REQUEST_TIMED_OUT, "no controller")
    assert {r["error_code"] for r in timed_out["responses"]} == {ErrorCode.REQUEST_TIMED_OUT}


def test_the_wait_for_an_applied_legacy_alter_ends_when_the_image_shows_exactly_it():
    wanted = alter(
        (RESOURCE_TOPIC, "orders", {"retention.ms": "1000", "cleanup.policy": "compact"})
    )
    assert shows_configs(IMAGE, wanted["resources"][0])
    assert not shows_configs(IMAGE, alter((RESOURCE_TOPIC, "orders", {}))["resources"][0])
    broker = alter((RESOURCE_BROKER, "1", {"log.retention.ms": "5000", "min.insync.replicas": "2"}))
    assert shows_configs(IMAGE, broker["resources"][0])


# ---- DescribeTopicPartitions --------------------------------------------------------------

PAGED = fold(
    *brokers(1, 2, 3, fenced=(3,)),
    *topic("a", 3),
    *topic("b", 2),
    *topic("c", 1),
    *topic("__transaction_state", 1),
    ChangePartition("b", 1, -1, (2,), 1, 1, "all gone"),
)


def dtp(
    image: MetadataImage,
    names: list[str] | None = None,
    limit: int = 2000,
    cursor: tuple[str, int] | None = None,
) -> Body:
    body = {
        "topics": None if names is None else [{"name": n} for n in names],
        "response_partition_limit": limit,
        "cursor": None
        if cursor is None
        else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }
    return describe_topic_partitions(image, body)


def pages(image: MetadataImage, names: list[str] | None, limit: int) -> Iterator[Body]:
    cursor = None
    for _ in range(100):
        answer = dtp(image, names, limit, cursor)
        yield answer
        if answer["next_cursor"] is None:
            return
        cursor = (answer["next_cursor"]["topic_name"], answer["next_cursor"]["partition_index"])
    raise AssertionError("the pages never end")


def partitions_in(answer: Body) -> list[tuple[str, int]]:
    return [(t["name"], p["partition_index"]) for t in answer["topics"] for p in t["partitions"]]


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 6, 7, 2000])
def test_paging_through_every_topic_returns_each_partition_once_in_order(limit: int):
    everything = [("__transaction_state", 0), ("a", 0), ("a", 1), ("a", 2)]
    everything += [("b", 0), ("b", 1), ("c", 0)]
    answers = list(pages(PAGED, None, limit))
    assert [key for answer in answers for key in partitions_in(answer)] == everything
    assert all(len(partitions_in(answer)) <= limit for answer in answers)
    # Every page but the last is full: a page ends only when the limit is reached.
    assert len(answers) == -(-len(everything) // limit)


def test_the_cursor_is_the_first_partition_left_out_or_the_next_topic_when_a_page_is_full():
    first = dtp(PAGED, ["a", "b", "c"], limit=2)
    assert partitions_in(first) == [("a", 0), ("a", 1)]
    assert first["next_cursor"] == {"topic_name": "a", "partition_index": 2}
    exact = dtp(PAGED, ["a", "b", "c"], limit=3)
    assert partitions_in(exact) == [("a", 0), ("a", 1), ("a", 2)]
    assert exact["next_cursor"] == {"topic_name": "b", "partition_index": 0}
    last = dtp(PAGED, ["a", "b", "c"], limit=5, cursor=("b", 0))
    assert partitions_in(last) == [("b", 0), ("b", 1), ("c", 0)]
    assert last["next_cursor"] is None
    assert dtp(PAGED, ["a"], limit=0)["next_cursor"] == {"topic_name": "a", "partition_index": 1}


def test_topics_and_partitions_say_what_metadata_says():
    answer = dtp(PAGED, ["b", "__transaction_state"])
    internal, b = answer["topics"]
    assert internal["name"] == "__transaction_state" and internal["is_internal"]
    assert not b["is_internal"]
    assert b["topic_id"] == uuid.UUID(PAGED.topics["b"].topic_id)
    assert b["topic_authorized_operations"] == -(2**31)
    healthy, leaderless = b["partitions"]
    assert healthy["leader_id"] == 1 and healthy["replica_nodes"] == [1, 2, 3]
    assert healthy["offline_replicas"] == [3], "broker 3 is fenced"
    assert healthy["eligible_leader_replicas"] == [] and healthy["last_known_elr"] == []
    # Kafka gives no partition error here, not even without a leader.
    assert (leaderless["leader_id"], leaderless["error_code"]) == (-1, ErrorCode.NONE)
    assert (leaderless["isr_nodes"], leaderless["leader_epoch"]) == ([2], 1)


def test_unknown_topics_asked_for_by_name_get_an_error_and_are_left_out_of_every_topic():
    answer = dtp(PAGED, ["zzz", "a", "bad/name", "__consumer_offsets"])
    codes = {
        t["name"]: (t["error_code"], t["is_internal"], t["topic_id"]) for t in answer["topics"]
    }
    zero = uuid.UUID(int=0)
    assert codes == {
        "__consumer_offsets": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True, zero),
        "a": (ErrorCode.NONE, False, uuid.UUID(PAGED.topics["a"].topic_id)),
        "bad/name": (ErrorCode.INVALID_TOPIC_EXCEPTION, False, zero),
        "zzz": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, False, zero),
    }
    assert [t["name"] for t in answer["topics"]] == sorted(codes)
    assert {t["name"] for t in dtp(PAGED, [])["topics"]} == set(PAGED.topics)


def test_a_cursor_outside_the_topics_asked_for_or_below_zero_is_an_invalid_request():
    refused = dtp(PAGED, ["b", "c"], cursor=("a", 0))
    assert [(t["name"], t["error_code"]) for t in refused["topics"]] == [
        ("b", ErrorCode.INVALID_REQUEST),
        ("c", ErrorCode.INVALID_REQUEST),
    ]
    assert dtp(PAGED, ["a"], cursor=("a", -1))["topics"][0]["error_code"] == 42
    # Asking for every topic, a cursor on a topic that is gone just starts after its name.
    assert partitions_in(dtp(PAGED, None, cursor=("bb", 0))) == [("c", 0)]


def test_the_partition_limit_is_capped_at_kafkas_2000():
    image = fold(*brokers(1, 2, 3), *topic("big", 2001))
    answer = dtp(image, None, limit=5000)
    assert len(partitions_in(answer)) == 2000
    assert answer["next_cursor"] == {"topic_name": "big", "partition_index": 2000}


# ---- DescribeLogDirs ----------------------------------------------------------------------


def log_dir(cluster: Cluster, broker: int, topics: list[Body] | None = None) -> Body:
    answer = describe_log_dirs(cluster.cores[broker], topics, lambda _path: SPACE)
    assert answer["error_code"] == ErrorCode.NONE
    (result,) = answer["results"]
    return result


def sizes(result: Body) -> dict[tuple[str, int], tuple[int, int]]:
    return {
        (t["name"], p["partition_index"]): (p["partition_size"], p["offset_lag"])
        for t in result["topics"]
        for p in t["partitions"]
    }


def test_log_dirs_show_each_replicas_size_on_disk_as_it_grows():
    cluster = Cluster()
    empty = log_dir(cluster, 1)
    assert empty["log_dir"] == "/broker-1" and empty["error_code"] == ErrorCode.NONE
    assert (empty["total_bytes"], empty["usable_bytes"]) == SPACE
    assert sizes(empty) == {(TOPIC, 0): (0, 0)}
    cluster.produce(1, batch(b"x" * 500), acks=-1)
    cluster.run()
    grown = sizes(log_dir(cluster, 1))[(TOPIC, 0)]
    log_ = cluster.replica(1).log
    assert grown == (log_.size_bytes, 0) and grown[0] > 500
    # The follower has the same bytes, and its log end is not below its own HW: lag 0.
    assert sizes(log_dir(cluster, 2)) == {(TOPIC, 0): grown}
    assert all(
        p["is_future_key"] is False for t in log_dir(cluster, 2)["topics"] for p in t["partitions"]
    )


def test_log_dirs_answer_only_the_partitions_asked_for_and_strays_lag_minus_one():
    cluster = Cluster()
    core = cluster.cores[1]
    core.hosted.logs.create("stray", 0, LogConfig())  # a log the broker keeps but does not serve
    assert sizes(log_dir(cluster, 1)) == {(TOPIC, 0): (0, 0), ("stray", 0): (0, -1)}
    asked = [{"topic": TOPIC, "partitions": [0, 7]}, {"topic": "absent", "partitions": [0]}]
    assert sizes(log_dir(cluster, 1, asked)) == {(TOPIC, 0): (0, 0)}
    assert log_dir(cluster, 1, [])["topics"] == []


def test_an_offline_log_dir_answers_kafka_storage_error():
    cluster = Cluster()
    cluster.cores[1].step(LogDirFailed("EIO"), cluster.now)
    cluster.run()
    (result,) = describe_log_dirs(cluster.cores[1], None, lambda _path: SPACE)["results"]
    assert result["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
    assert result["topics"] == [] and result["log_dir"] == "/broker-1"
    assert log_dir(cluster, 2)["error_code"] == ErrorCode.NONE

    def broken(_path: str) -> DiskSpace:
        raise OSError("statvfs failed")

    (result,) = describe_log_dirs(cluster.cores[2], None, broken)["results"]
    assert result["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR


# ---- every advertised version names every field of its response schema --------------------


def missing_fields(
    struct: Struct, version: int, value: Body, path: str, seen: set[str]
) -> list[str]:
    """Fields of `struct` at `version` that `value` does not name, through nested structs; the
    struct types the walk met go to `seen`."""
    seen.add(struct.name)
    missing = []
    for field in struct.fields:
        if not field.present(version):
            continue
        where = f"{path}.{field.key}"
        if field.key not in value:
            missing.append(where)
            continue
        if field.struct is None or value[field.key] is None:
            continue
        items = value[field.key] if field.is_array else [value[field.key]]
        for item in items:
            missing += missing_fields(field.struct, version, item, where, seen)
    return missing


def at_version(struct: Struct, version: int, value: Body) -> Body:
    """`value` with only the fields `struct` has at `version`, through nested structs."""
    kept: Body = {}
    for field in struct.fields:
        if not field.present(version):
            continue
        item = value[field.key]
        if field.struct is not None and item is not None:
            if field.is_array:
                item = [at_version(field.struct, version, element) for element in item]
            else:
                item = at_version(field.struct, version, item)
        kept[field.key] = item
    return kept


def structs_at(struct: Struct, version: int) -> set[str]:
    names = {struct.name}
    for field in struct.fields:
        if field.present(version) and field.struct is not None:
            names |= structs_at(field.struct, version)
    return names


def sample_answers(api: ApiKey) -> list[Body]:
    """Answers the broker builds, filled so that every nested struct appears."""
    if api == ApiKey.DESCRIBE_CONFIGS:
        body = {
            "resources": [
                {"resource_type": RESOURCE_TOPIC, "resource_name": "orders",
                 "configuration_keys": None},
                {"resource_type": RESOURCE_TOPIC, "resource_name": "nope",
                 "configuration_keys": None},
            ],
            "include_synonyms": True,
            "include_documentation": True,
        }  # fmt: skip
        return [describe_configs(body, broker_id=1, image=IMAGE, config=CONFIG, levels=LEVELS)]
    if api == ApiKey.ALTER_CONFIGS:
        body = alter((RESOURCE_TOPIC, "orders", {"retention.ms": "1"}))
        ok = {"responses": [{"error_code": 0, "error_message": None}]}
        return [
            alter_configs_answer(body, ok),
            alter_configs_error(body, ErrorCode.REQUEST_TIMED_OUT, "x"),
        ]
    if api == ApiKey.DESCRIBE_LOG_DIRS:
        cluster = Cluster()
        online = describe_log_dirs(cluster.cores[1], None, lambda _path: SPACE)
        cluster.cores[2].step(LogDirFailed("EIO"), cluster.now)
        return [online, describe_log_dirs(cluster.cores[2], None, lambda _path: SPACE)]
    if api == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
        return [dtp(PAGED, ["a", "nope"], limit=2), dtp(PAGED, None)]
    raise AssertionError(api)


SERVED = [
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.DESCRIBE_LOG_DIRS,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS,
]


@pytest.mark.parametrize(
    ("api", "version"),
    [(api, v) for api in SERVED for v in range(SUPPORTED[api][0], SUPPORTED[api][1] + 1)],
    ids=lambda x: x.name if isinstance(x, ApiKey) else f"v{x}",
)
def test_each_answer_names_every_field_of_its_schema_and_encodes(api: ApiKey, version: int):
    message = load_message(api.response_schema)
    assert version in message.valid_versions
    seen: set[str] = set()
    codec = codec_for(api.response_schema, version)
    for answer in sample_answers(api):
        assert missing_fields(message.struct, version, answer, api.name, seen) == []
        decoded, _ = codec.decode(codec.encode(answer))
        assert at_version(message.struct, version, decoded) == at_version(
            message.struct, version, answer
        )
    assert seen == structs_at(message.struct, version), "the samples leave a struct empty"


def incremental(*ops: tuple[str, int, str | None], topic: str = "orders") -> Body:
    configs = [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]
    return {"resources": [{"resource_type": RESOURCE_TOPIC, "resource_name": topic,
                           "configs": configs}]}  # fmt: skip


def test_an_incremental_alter_that_changes_nothing_is_known_before_it_is_sent():
    """The controller writes no record for it, so the broker must not wait for one."""
    assert changes_nothing(IMAGE, incremental(("retention.ms", OP_SET, "1000")))
    assert changes_nothing(IMAGE, incremental(("segment.bytes", OP_DELETE, None)))
    assert not changes_nothing(IMAGE, incremental(("retention.ms", OP_SET, "2000")))
    assert not changes_nothing(IMAGE, incremental(("cleanup.policy", OP_DELETE, None)))
    assert not changes_nothing(IMAGE, incremental(("cleanup.policy", 2, "delete")))  # APPEND
