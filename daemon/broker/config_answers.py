"""DescribeConfigs answers as Kafka's ConfigHelper builds them, and the legacy AlterConfigs
turned into the IncrementalAlterConfigs the controller serves.

A config's value comes from the first level that sets it: the topic's own config, the cluster's
dynamic default (IncrementalAlterConfigs on the broker resource ""), the broker's static config,
rlog's built-in default. With `include_synonyms` an entry lists every level that has the config,
in that order, and below the topic level a topic config goes by its broker name (retention.ms is
log.retention.ms there), as Kafka lists them; the entry's source is the first level listed.
rlog keeps no per-broker dynamic configs, so DYNAMIC_BROKER_CONFIG never appears. A broker runs
with all of its [broker] settings from rlog's config (the file, and rlog's defaults for the keys
it leaves out), so on the broker's own resource every key has a static value; the DEFAULT_CONFIG
synonym beside it says what rlog's default is. A topic inherits a static value only where it
is not rlog's default (Kafka's STATIC_BROKER_CONFIG is what server.properties sets): otherwise
the topic's config is DEFAULT_CONFIG, so kafka-topics --describe lists only what someone set.

Everything here is pure: the handlers (handlers.py) give it the metadata image and settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from rlog.core.broker import BrokerConfig, log_config, replica_config
from rlog.core.controller.validation import (
    BROKER_CONFIG_SYNONYMS,
    CLUSTER_DYNAMIC_CONFIGS,
    topic_name_problem,
)
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.errors import ErrorCode
from rlog.core.storage.config import LogConfig
from rlog.daemon.config import BrokerSettings

Body = dict[str, Any]

# Kafka's ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
# IncrementalAlterConfigs' AlterConfigOp.OpType ids.
OP_SET = 0
OP_DELETE = 1


class ConfigSource(IntEnum):
    """DescribeConfigsResponse.ConfigSource."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(IntEnum):
    """DescribeConfigsResponse.ConfigType (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    type: ConfigType
    doc: str


BOOL, STR, INT, SHORT, LONG, DOUBLE, LIST = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
)

# Every topic config rlog serves, with Kafka's type (TopicConfig / LogConfig).
TOPIC_CONFIGS: dict[str, ConfigSpec] = {
    "segment.bytes": ConfigSpec(INT, "The size at which a new log segment is started."),
    "segment.ms": ConfigSpec(LONG, "The age at which the active segment is rolled, even if small."),
    "segment.index.bytes": ConfigSpec(INT, "The size of a segment's offset and time indexes."),
    "index.interval.bytes": ConfigSpec(INT, "Bytes of records between two offset index entries."),
    "retention.ms": ConfigSpec(LONG, "How long records are kept before deletion; -1: forever."),
    "retention.bytes": ConfigSpec(LONG, "The partition size above which old segments are deleted."),
    "flush.messages": ConfigSpec(LONG, "Records appended between two fsyncs of the log."),
    "flush.ms": ConfigSpec(LONG, "The longest time appended records wait for an fsync."),
    "max.message.bytes": ConfigSpec(INT, "The largest record batch the topic accepts."),
    "message.timestamp.type": ConfigSpec(STR, "CreateTime (the producer's) or LogAppendTime."),
    "cleanup.policy": ConfigSpec(LIST, "delete (by retention), compact (latest per key), or both."),
    "delete.retention.ms": ConfigSpec(LONG, "How long a compacted topic keeps tombstones."),
    "min.compaction.lag.ms": ConfigSpec(
        LONG, "How long a record stays before it may be compacted."
    ),
    "min.cleanable.dirty.ratio": ConfigSpec(
        DOUBLE, "The dirty share of a log that starts a clean."
    ),
    "min.insync.replicas": ConfigSpec(INT, "In-sync replicas an acks=all produce needs."),
    "unclean.leader.election.enable": ConfigSpec(
        BOOL, "Whether a replica outside the ISR may become leader (losing records)."
    ),
}

# Topic config -> the broker config that gives its default (Kafka's ServerTopicConfigSynonyms).
TOPIC_BROKER_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}

# Every broker config rlog's [broker] table takes, with Kafka's type (KafkaConfig).
BROKER_CONFIGS: dict[str, ConfigSpec] = {
    "num.partitions": ConfigSpec(INT, "Partitions of a topic created without a count."),
    "default.replication.factor": ConfigSpec(INT, "Replicas of a topic created without a count."),
    "auto.create.topics.enable": ConfigSpec(
        BOOL, "Whether Metadata for an unknown topic makes it."
    ),
    "message.max.bytes": ConfigSpec(INT, "The largest record batch a topic accepts by default."),
    "socket.request.max.bytes": ConfigSpec(INT, "The largest request the broker reads."),
    "log.segment.bytes": ConfigSpec(INT, "Default of the topic config segment.bytes."),
    "log.roll.ms": ConfigSpec(LONG, "Default of the topic config segment.ms."),
    "log.index.interval.bytes": ConfigSpec(
        INT, "Default of the topic config index.interval.bytes."
    ),
    "log.index.size.max.bytes": ConfigSpec(INT, "Default of the topic config segment.index.bytes."),
    "log.retention.ms": ConfigSpec(LONG, "Default of the topic config retention.ms."),
    "log.retention.bytes": ConfigSpec(LONG, "Default of the topic config retention.bytes."),
    "log.retention.check.interval.ms": ConfigSpec(LONG, "How often retention deletes segments."),
    "log.flush.interval.messages": ConfigSpec(LONG, "Default of the topic config flush.messages."),
    "log.flush.interval.ms": ConfigSpec(LONG, "Default of the topic config flush.ms."),
    "log.flush.scheduler.interval.ms": ConfigSpec(LONG, "How often logs are checked for flush.ms."),
    "log.flush.offset.checkpoint.interval.ms": ConfigSpec(
        INT, "How often the recovery points are checkpointed."
    ),
    "log.message.timestamp.type": ConfigSpec(
        STR, "Default of the topic config message.timestamp.type."
    ),
    "log.cleanup.policy": ConfigSpec(LIST, "Default of the topic config cleanup.policy."),
    "log.cleaner.enable": ConfigSpec(BOOL, "Whether the log cleaner compacts topics."),
    "log.cleaner.backoff.ms": ConfigSpec(
        LONG, "How long the cleaner sleeps with nothing to clean."
    ),
    "min.insync.replicas": ConfigSpec(INT, "In-sync replicas an acks=all produce needs."),
    "unclean.leader.election.enable": ConfigSpec(
        BOOL, "Whether a replica outside the ISR may become leader (losing records)."
    ),
    "replica.lag.time.max.ms": ConfigSpec(
        LONG, "How long a follower may lag before leaving the ISR."
    ),
    "replica.fetch.max.bytes": ConfigSpec(INT, "Bytes a follower fetches per partition."),
    "replica.fetch.wait.max.ms": ConfigSpec(INT, "How long a follower's fetch waits for records."),
    "replica.fetch.backoff.ms": ConfigSpec(INT, "How long a follower waits after a fetch error."),
    "replica.socket.timeout.ms": ConfigSpec(INT, "How long a request to a peer may take."),
    "broker.session.timeout.ms": ConfigSpec(
        INT, "How long the controller waits for a heartbeat before fencing a broker."
    ),
    "broker.heartbeat.interval.ms": ConfigSpec(INT, "How often a broker heartbeats."),
    "auto.leader.rebalance.enable": ConfigSpec(
        BOOL, "Whether leadership moves back to preferred replicas."
    ),
    "leader.imbalance.check.interval.seconds": ConfigSpec(
        LONG, "How often the controller checks leader balance."
    ),
    "offsets.topic.num.partitions": ConfigSpec(INT, "Partitions of __consumer_offsets."),
    "offsets.topic.replication.factor": ConfigSpec(SHORT, "Replicas of __consumer_offsets."),
    "offsets.topic.segment.bytes": ConfigSpec(INT, "Segment size of __consumer_offsets."),
    "offset.metadata.max.bytes": ConfigSpec(INT, "The longest metadata of an offset commit."),
    "group.initial.rebalance.delay.ms": ConfigSpec(
        INT, "How long a new group waits for more members."
    ),
    "group.min.session.timeout.ms": ConfigSpec(INT, "The shortest session a member may ask for."),
    "group.max.session.timeout.ms": ConfigSpec(INT, "The longest session a member may ask for."),
    "group.max.size": ConfigSpec(INT, "The most members a group may have."),
    "group.consumer.session.timeout.ms": ConfigSpec(
        INT, "How long a consumer-protocol member may go without a heartbeat."
    ),
    "group.consumer.heartbeat.interval.ms": ConfigSpec(
        INT, "How often consumer-protocol members heartbeat."
    ),
    "group.consumer.max.size": ConfigSpec(
        INT, "The most members a consumer-protocol group may have."
    ),
    "group.consumer.migration.policy": ConfigSpec(
        STR, "Whether groups with members convert between the protocols: upgrade, downgrade, both."
    ),
    "offsets.retention.minutes": ConfigSpec(INT, "How long an empty group's offsets are kept."),
    "offsets.retention.check.interval.ms": ConfigSpec(
        LONG, "How often expired group offsets are looked for."
    ),
    "transaction.state.log.num.partitions": ConfigSpec(INT, "Partitions of __transaction_state."),
    "transaction.state.log.replication.factor": ConfigSpec(
        SHORT, "Replicas of __transaction_state."
    ),
    "transaction.state.log.min.isr": ConfigSpec(INT, "min.insync.replicas of __transaction_state."),
    "transaction.state.log.segment.bytes": ConfigSpec(INT, "Segment size of __transaction_state."),
    "transaction.max.timeout.ms": ConfigSpec(INT, "The longest transaction timeout allowed."),
    "transactional.id.expiration.ms": ConfigSpec(
        INT, "How long an idle transactional id is remembered."
    ),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": ConfigSpec(
        INT, "How often timed-out transactions are aborted."
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": ConfigSpec(
        INT, "How often expired transactional ids are removed."
    ),
    "producer.id.expiration.ms": ConfigSpec(INT, "How long an idle producer's state is kept."),
    "producer.id.expiration.check.interval.ms": ConfigSpec(
        INT, "How often idle producers are looked for."
    ),
    "listeners": ConfigSpec(STR, "Where the broker binds: NAME://host:port,... (broker 1's)."),
    "advertised.listeners": ConfigSpec(STR, "What clients are told per listener name."),
    "listener.security.protocol.map": ConfigSpec(STR, "Each listener name's security protocol."),
    "inter.broker.listener.name": ConfigSpec(STR, "The listener brokers reach each other on."),
    "controller.listener.names": ConfigSpec(LIST, "The controller's listener names."),
    "ssl.keystore.type": ConfigSpec(STR, "The keystore's file format (PEM)."),
    "ssl.keystore.location": ConfigSpec(STR, "The PEM file of the private key and cert chain."),
    "ssl.key.password": ConfigSpec(ConfigType.PASSWORD, "The private key's password."),
    "ssl.truststore.type": ConfigSpec(STR, "The truststore's file format (PEM)."),
    "ssl.truststore.location": ConfigSpec(STR, "The PEM file of trusted CA certificates."),
    "ssl.client.auth": ConfigSpec(STR, "none, requested or required client certificates."),
    "ssl.endpoint.identification.algorithm": ConfigSpec(
        STR, "https: check the peer's host name against its certificate; empty: do not."
    ),
    "ssl.enabled.protocols": ConfigSpec(LIST, "The TLS versions the listeners accept."),
    "ssl.principal.mapping.rules": ConfigSpec(
        STR, "RULE:pattern/replacement/[LU] or DEFAULT rules naming an SSL client's certificate."
    ),
    "sasl.enabled.mechanisms": ConfigSpec(LIST, "The SASL mechanisms SASL listeners offer."),
    "connections.max.reauth.ms": ConfigSpec(
        LONG, "How long a SASL session lasts before the client must re-authenticate; 0: ever."
    ),
    "sasl.server.max.receive.size": ConfigSpec(
        INT, "The largest request a SASL listener takes before authentication."
    ),
    "authorizer.class.name": ConfigSpec(STR, "The authorizer; empty: no ACL is checked."),
    "super.users": ConfigSpec(LIST, "Principals allowed everything, separated by ';'."),
    "allow.everyone.if.no.acl.found": ConfigSpec(
        BOOL, "Whether a resource no ACL names is open to everyone."
    ),
}

_BROKER_NAME_OF_DYNAMIC = {topic: broker for broker, topic in BROKER_CONFIG_SYNONYMS.items()}
_INTEGER = re.compile(r"[+-]?[0-9]+")  # what Java's Integer.parseInt takes


@dataclass(frozen=True, slots=True)
class ConfigLevels:
    """What each level below a topic's own configs sets, by broker config name."""

    static: Mapping[str, str]  # the broker's static config
    defaults: Mapping[str, str]  # rlog's built-in defaults

    @classmethod
    def of(cls, settings: BrokerSettings) -> ConfigLevels:
        defaults = BrokerSettings().to_kafka_properties()
        # Topic configs no [broker] key sets: LogConfig's default, under Kafka's broker name.
        log_defaults = LogConfig().to_kafka_properties()
        for topic_name, broker_name in TOPIC_BROKER_SYNONYMS.items():
            if topic_name in log_defaults:
                defaults.setdefault(broker_name, log_defaults[topic_name])
        return cls(settings.to_kafka_properties(), defaults)

    @property
    def changed_static(self) -> dict[str, str]:
        """The static values that are not rlog's defaults: what rlog's config file changed."""
        return {k: v for k, v in self.static.items() if self.defaults.get(k) != v}


def spec_of(name: str, table: Mapping[str, ConfigSpec], value: str) -> ConfigSpec:
    """The config's type and documentation; for a key the tables miss (a new setting), a type
    read off its value, so the value is still shown: Kafka hides the value of a config of
    unknown type as sensitive."""
    spec = table.get(name)
    if spec is not None:
        return spec
    if value in ("true", "false"):
        return ConfigSpec(BOOL, "")
    if _INTEGER.fullmatch(value):
        return ConfigSpec(LONG, "")
    return ConfigSpec(STR, "")


def _synonym(name: str, value: str, source: ConfigSource) -> Body:
    return {"name": name, "value": value, "source": source}


def _entry(
    name: str,
    value: str,
    synonyms: list[Body],
    *,
    read_only: bool,
    spec: ConfigSpec,
    include_synonyms: bool,
    include_documentation: bool,
) -> Body:
    source = synonyms[0]["source"] if synonyms else ConfigSource.DEFAULT_CONFIG
    sensitive = spec.type == ConfigType.PASSWORD
    if sensitive:  # Kafka never shows a password, not even in its synonyms
        synonyms = [synonym | {"value": None} for synonym in synonyms]
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "is_default": source == ConfigSource.DEFAULT_CONFIG,  # v0 only
        "config_source": source,
        "is_sensitive": sensitive,
        "synonyms": synonyms if include_synonyms else [],
        "config_type": spec.type,
        "documentation": (spec.doc or None) if include_documentation else None,
    }


def topic_entries(
    image: MetadataImage,
    config: BrokerConfig,
    levels: ConfigLevels,
    topic: str,
    *,
    include_synonyms: bool,
    include_documentation: bool,
) -> list[Body]:
    """Every config of an existing topic: the value in force and where it comes from."""
    values = log_config(config, image, topic).to_kafka_properties()
    replication = replica_config(config, image, topic)
    values["min.insync.replicas"] = str(replication.min_insync_replicas)
    values["unclean.leader.election.enable"] = str(
        replication.unclean_leader_election_enable
    ).lower()
    own = image.topics[topic].configs
    static = levels.changed_static
    entries = []
    for name in sorted(values):
        synonyms = []
        if name in own:
            synonyms.append(_synonym(name, own[name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        broker_name = TOPIC_BROKER_SYNONYMS.get(name, name)
        # The cluster's dynamic defaults are kept under topic config names (validation.py).
        if name in image.cluster_configs:
            dynamic = image.cluster_configs[name]
            synonyms.append(
                _synonym(broker_name, dynamic, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            )
        if broker_name in static:
            value = static[broker_name]
            synonyms.append(_synonym(broker_name, value, ConfigSource.STATIC_BROKER_CONFIG))
        if broker_name in levels.defaults:
            default = levels.defaults[broker_name]
            synonyms.append(_synonym(broker_name, default, ConfigSource.DEFAULT_CONFIG))
        entries.append(
            _entry(
                name,
                values[name],
                synonyms,
                read_only=False,
                spec=spec_of(name, TOPIC_CONFIGS, values[name]),
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
        )
    return entries


def broker_entries(
    image: MetadataImage,
    levels: ConfigLevels,
    *,
    include_synonyms: bool,
    include_documentation: bool,
) -> list[Body]:
    """Every config of this broker (the resource named by its id)."""
    entries = []
    for name in sorted(levels.static):
        # The cluster-wide dynamic defaults this broker applies: the metadata keeps them under
        # topic config names, Kafka shows them under the broker's.
        dynamic_name = BROKER_CONFIG_SYNONYMS.get(name, name)
        updatable = dynamic_name in CLUSTER_DYNAMIC_CONFIGS
        synonyms = []
        if updatable and dynamic_name in image.cluster_configs:
            dynamic = image.cluster_configs[dynamic_name]
            synonyms.append(_synonym(name, dynamic, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
        synonyms.append(_synonym(name, levels.static[name], ConfigSource.STATIC_BROKER_CONFIG))
        if name in levels.defaults:
            default = levels.defaults[name]
            synonyms.append(_synonym(name, default, ConfigSource.DEFAULT_CONFIG))
        entries.append(
            _entry(
                name,
                synonyms[0]["value"],
                synonyms,
                read_only=not updatable,
                spec=spec_of(name, BROKER_CONFIGS, synonyms[0]["value"]),
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
        )
    return entries


def cluster_default_entries(
    image: MetadataImage, *, include_synonyms: bool, include_documentation: bool
) -> list[Body]:
    """The broker resource "": only the cluster-wide dynamic defaults, as Kafka lists them."""
    entries = []
    for dynamic_name, value in sorted(image.cluster_configs.items()):
        name = _BROKER_NAME_OF_DYNAMIC.get(dynamic_name, dynamic_name)
        synonyms = [_synonym(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
        entries.append(
            _entry(
                name,
                value,
                synonyms,
                read_only=False,
                spec=spec_of(name, BROKER_CONFIGS, value),
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
        )
    return entries


def describe_resource(
    resource: Body,
    *,
    broker_id: int,
    image: MetadataImage,
    config: BrokerConfig,
    levels: ConfigLevels,
    include_synonyms: bool,
    include_documentation: bool,
) -> Body:
    """One DescribeConfigs result: the resource's configs, or its error."""
    kind, name = resource["resource_type"], resource["resource_name"]
    result: Body = {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": kind,
        "resource_name": name,
        "configs": [],
    }
    flags = {"include_synonyms": include_synonyms, "include_documentation": include_documentation}
    if kind == RESOURCE_TOPIC:
        if name not in image.topics:
            problem = topic_name_problem(name, ())
            if problem is not None:
                return result | {
                    "error_code": ErrorCode.INVALID_TOPIC_EXCEPTION,
                    "error_message": problem,
                }
            return result | {
                "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "error_message": f"topic {name} does not exist",
            }
        entries = topic_entries(image, config, levels, name, **flags)
    elif kind == RESOURCE_BROKER:
        if name == "":
            entries = cluster_default_entries(image, **flags)
        elif not _INTEGER.fullmatch(name):
            return result | {
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": f"Broker id must be an integer, but it is: {name}",
            }
        elif int(name) != broker_id:
            return result | {
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": f"Unexpected broker id, expected {broker_id} or empty string, "
                f"but received {name}",
            }
        else:
            entries = broker_entries(image, levels, **flags)
    else:
        return result | {
            "error_code": ErrorCode.INVALID_REQUEST,
            "error_message": f"resource type {kind} is not supported",
        }
    wanted = resource.get("configuration_keys")
    if wanted:  # Kafka: null or empty lists every config
        entries = [entry for entry in entries if entry["name"] in wanted]
    return result | {"configs": entries}


def describe_configs(
    body: Body,
    *,
    broker_id: int,
    image: MetadataImage,
    config: BrokerConfig,
    levels: ConfigLevels,
) -> Body:
    """The DescribeConfigs answer (every version: the codec keeps the fields a version has)."""
    flags = {
        "include_synonyms": bool(body.get("include_synonyms", False)),
        "include_documentation": bool(body.get("include_documentation", False)),
    }
    results = [
        describe_resource(
            resource, broker_id=broker_id, image=image, config=config, levels=levels, **flags
        )
        for resource in body["resources"]
    ]
    return {"throttle_time_ms": 0, "results": results}


# ---- AlterConfigs (the legacy, non-incremental one) ----


def _dynamic_configs_of(image: MetadataImage, kind: int, name: str) -> Mapping[str, str]:
    """The dynamic configs a resource has now, as the metadata keeps them."""
    if kind == RESOURCE_TOPIC:
        topic = image.topics.get(name)
        return topic.configs if topic is not None else {}
    if kind == RESOURCE_BROKER:
        return image.cluster_configs  # rlog's broker resources are the cluster-wide defaults
    return {}


def _stored_name(kind: int, name: str) -> str:
    """The name the metadata keeps a config under (the controller's renaming of broker names)."""
    return BROKER_CONFIG_SYNONYMS.get(name, name) if kind == RESOURCE_BROKER else name


def legacy_alter_as_incremental(body: Body, image: MetadataImage) -> Body:
    """The legacy AlterConfigs request as an IncrementalAlterConfigs one, for the controller to
    validate and apply as it does every config change: each config named is SET (a null value
    is refused there, as Kafka refuses it), and each dynamic config the resource has now that
    the request does not name is DELETEd, since a legacy request replaces the whole set.

    The current set is this broker's image, which may trail the controller's by a moment.
    """
    resources = []
    for resource in body["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]
        given = [
            {"name": c["name"], "config_operation": OP_SET, "value": c["value"]}
            for c in resource["configs"]
        ]
        named = {_stored_name(kind, c["name"]) for c in resource["configs"]}
        removed = [
            {"name": key, "config_operation": OP_DELETE, "value": None}
            for key in sorted(_dynamic_configs_of(image, kind, name))
            if key not in named
        ]
        resources.append({"resource_type": kind, "resource_name": name, "configs": given + removed})
    return {"resources": resources, "validate_only": bool(body["validate_only"])}


def changes_nothing(image: MetadataImage, body: Body) -> bool:
    """Whether an IncrementalAlterConfigs request would leave every resource as it is (every
    SET to the value it has, every DELETE of a key it lacks): the controller writes nothing for
    it, so there is no new metadata to wait for."""
    for resource in body.get("resources") or ():
        kind, name = resource["resource_type"], resource["resource_name"]
        current = _dynamic_configs_of(image, kind, name)
        for config in resource.get("configs") or ():
            key = _stored_name(kind, config["name"])
            operation = config["config_operation"]
            if operation == OP_SET and current.get(key) != config["value"]:
                return False
            if operation == OP_DELETE and key in current:
                return False
            if operation not in (OP_SET, OP_DELETE):  # APPEND / SUBTRACT: assume a change
                return False
    return True


def shows_configs(image: MetadataImage, resource: Body) -> bool:
    """Whether the image holds exactly the configs a legacy AlterConfigs resource asked for."""
    kind, name = resource["resource_type"], resource["resource_name"]
    wanted = {_stored_name(kind, c["name"]): c["value"] for c in resource["configs"]}
    if kind == RESOURCE_TOPIC and name not in image.topics:
        return True  # deleted meanwhile: nothing to wait for
    return dict(_dynamic_configs_of(image, kind, name)) == wanted


def alter_configs_answer(body: Body, incremental_answer: Body) -> Body:
    """The controller's IncrementalAlterConfigs answer as the AlterConfigs one: the same
    per-resource results, in the request's order."""
    responses = [
        {
            "error_code": answer["error_code"],
            "error_message": answer.get("error_message"),
            "resource_type": resource["resource_type"],
            "resource_name": resource["resource_name"],
        }
        for resource, answer in zip(body["resources"], incremental_answer["responses"], strict=True)
    ]
    return {"throttle_time_ms": 0, "responses": responses}


def alter_configs_error(body: Body, code: ErrorCode, message: str) -> Body:
    """The AlterConfigs answer with one error for every resource (the controller is away)."""
    responses = [
        {
            "error_code": code,
            "error_message": message,
            "resource_type": resource["resource_type"],
            "resource_name": resource["resource_name"],
        }
        for resource in body["resources"]
    ]
    return {"throttle_time_ms": 0, "responses": responses}
