"""rlog's TOML configuration: what rlogd and every broker read at start.

The file has two tables. `[cluster]` holds rlogd's own settings (how many brokers, ports, the
restart policy). `[broker]` holds broker settings under Kafka's own `server.properties` names
(`"log.segment.bytes" = 1073741824`), so a Kafka user can paste what they know. Unknown keys and
bad values are errors that name the key: a typo must not silently fall back to a default.

For a cluster on several hosts, a `[controller]` table and `[broker.N]` tables give one node its
own `listeners` and `advertised.listeners` (ports as written), and each host's rlogd runs its
part of the same file (`rlogd --nodes`; see configs/three-hosts.toml).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rlog.core import limits
from rlog.core.security.acl import parse_super_users
from rlog.core.security.principal_mapping import DEFAULT_RULES, PrincipalMapper
from rlog.core.storage.config import LogConfig
from rlog.daemon.listeners import (
    DEFAULT_PROTOCOL_MAP_TEXT,
    Listener,
    ListenerSettings,
    NodeListenerTables,
    broker_listeners,
    check_cluster_ports,
    controller_protocol,
    node_listener_tables,
)
from rlog.daemon.tls import check_tls_settings


class ConfigError(ValueError):
    """A config file or flag the user wrote is wrong; the message names the key."""


RESTART_POLICIES = ("always", "on-failure", "never")
# group.consumer.migration.policy: GroupConfig in core/groups/coordinator.py reads these names.
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


@dataclass(frozen=True)
class ClusterSettings:
    brokers: int = 1
    base_port: int = 9092
    restart_policy: str = "on-failure"
    restart_backoff_ms: int = 500
    restart_backoff_max_ms: int = 30_000
    shutdown_timeout_ms: int = 30_000
    # The controller's listener; 0 means the port after the last broker's (base_port + brokers).
    controller_port: int = 0

    @property
    def resolved_controller_port(self) -> int:
        return self.controller_port or self.base_port + self.brokers


# Broker keys: Kafka's name -> (attribute, type). The log.* keys are the broker-wide defaults of
# the per-topic configs (log.segment.bytes is the default of a topic's segment.bytes).
_BROKER_KEYS: dict[str, tuple[str, type]] = {
    "num.partitions": ("num_partitions", int),
    "default.replication.factor": ("default_replication_factor", int),
    "auto.create.topics.enable": ("auto_create_topics_enable", bool),
    "message.max.bytes": ("message_max_bytes", int),
    "socket.request.max.bytes": ("socket_request_max_bytes", int),
    "log.segment.bytes": ("log_segment_bytes", int),
    "log.roll.ms": ("log_roll_ms", int),
    "log.index.interval.bytes": ("log_index_interval_bytes", int),
    "log.index.size.max.bytes": ("log_index_size_max_bytes", int),
    "log.retention.ms": ("log_retention_ms", int),
    "log.retention.bytes": ("log_retention_bytes", int),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", int),
    "log.flush.interval.messages": ("log_flush_interval_messages", int),
    "log.flush.interval.ms": ("log_flush_interval_ms", int),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", int),
    "log.flush.offset.checkpoint.interval.ms": ("log_flush_offset_checkpoint_interval_ms", int),
    "log.message.timestamp.type": ("log_message_timestamp_type", str),
    "log.cleanup.policy": ("log_cleanup_policy", str),
    "log.cleaner.enable": ("log_cleaner_enable", bool),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", int),
    # Replication: defaults of the per-topic configs, and the replicas' own settings.
    "min.insync.replicas": ("min_insync_replicas", int),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", bool),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", int),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", int),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", int),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", int),
    "replica.socket.timeout.ms": ("replica_socket_timeout_ms", int),
    # The controller: broker liveness and leader balance.
    "broker.session.timeout.ms": ("broker_session_timeout_ms", int),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", int),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", bool),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds", int),
    # Consumer groups: the coordinator and its internal topic, __consumer_offsets.
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", int),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", int),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", int),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", int),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", int),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", int),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", int),
    "group.max.size": ("group_max_size", int),
    "group.consumer.session.timeout.ms": ("group_consumer_session_timeout_ms", int),
    "group.consumer.heartbeat.interval.ms": ("group_consumer_heartbeat_interval_ms", int),
    "group.consumer.max.size": ("group_consumer_max_size", int),
    "group.consumer.migration.policy": ("group_consumer_migration_policy", str),
    "offsets.retention.minutes": ("offsets_retention_minutes", int),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", int),
    # Idempotent and transactional producers: the transaction coordinator and its internal
    # topic, __transaction_state, and how long producer state outlives an idle producer.
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", int),
    "transaction.state.log.replication.factor": ("transaction_state_log_replication_factor", int),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", int),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes", int),
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", int),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", int),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
        int,
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        int,
    ),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", int),
    "producer.id.expiration.check.interval.ms": ("producer_id_expiration_check_interval_ms", int),
    # Listeners (daemon/listeners.py) and TLS (daemon/tls.py): read at start only.
    "listeners": ("listeners", str),
    "advertised.listeners": ("advertised_listeners", str),
    "listener.security.protocol.map": ("listener_security_protocol_map", str),
    "inter.broker.listener.name": ("inter_broker_listener_name", str),
    "controller.listener.names": ("controller_listener_names", str),
    "ssl.keystore.type": ("ssl_keystore_type", str),
    "ssl.keystore.location": ("ssl_keystore_location", str),
    "ssl.key.password": ("ssl_key_password", str),
    "ssl.truststore.type": ("ssl_truststore_type", str),
    "ssl.truststore.location": ("ssl_truststore_location", str),
    "ssl.client.auth": ("ssl_client_auth", str),
    "ssl.endpoint.identification.algorithm": ("ssl_endpoint_identification_algorithm", str),
    "ssl.enabled.protocols": ("ssl_enabled_protocols", str),
    "ssl.principal.mapping.rules": ("ssl_principal_mapping_rules", str),
    # SASL on SASL_PLAINTEXT and SASL_SSL listeners (users: rlog user, SCRAM credentials).
    "sasl.enabled.mechanisms": ("sasl_enabled_mechanisms", str),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", int),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", int),
    # Authorization: ACLs checked on every request (daemon/broker/authorization.py).
    "authorizer.class.name": ("authorizer_class_name", str),
    "super.users": ("super_users", str),
    "allow.everyone.if.no.acl.found": ("allow_everyone_if_no_acl_found", bool),
}

BROKER_KEYS = _BROKER_KEYS  # Kafka's name -> (attribute, type), for tools that edit the file

_NEVER = 2**63 - 1
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# authorizer.class.name: Kafka's KRaft authorizer, and rlog's short names for it.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER_NAMES = (STANDARD_AUTHORIZER, "standard", "rlog")


@dataclass(frozen=True)
class BrokerSettings:
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    message_max_bytes: int = limits.MESSAGE_MAX_BYTES
    socket_request_max_bytes: int = limits.SOCKET_REQUEST_MAX_BYTES
    log_segment_bytes: int = limits.LOG_SEGMENT_BYTES_DEFAULT
    log_roll_ms: int = 7 * 24 * 3600 * 1000
    log_index_interval_bytes: int = limits.LOG_INDEX_INTERVAL_BYTES_DEFAULT
    log_index_size_max_bytes: int = limits.LOG_INDEX_SIZE_MAX_BYTES
    log_retention_ms: int = 7 * 24 * 3600 * 1000
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300_000
    log_flush_interval_messages: int = _NEVER
    log_flush_interval_ms: int = _NEVER
    log_flush_scheduler_interval_ms: int = 1_000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_message_timestamp_type: str = "CreateTime"
    log_cleanup_policy: str = "delete"
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 1_000
    replica_socket_timeout_ms: int = 30_000
    broker_session_timeout_ms: int = 9_000
    broker_heartbeat_interval_ms: int = 2_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 5  # Kafka: 300; see configs/*.toml
    # Kafka's default is 50 partitions; every broker of an rlog cluster shares one machine, so
    # rlog takes Redpanda's smaller default. The replication factor is capped by the brokers.
    offsets_topic_num_partitions: int = 16
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offset_metadata_max_bytes: int = 4096
    group_initial_rebalance_delay_ms: int = 3_000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    # The consumer protocol's groups (KIP-848): the broker sets their members' timing.
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_max_size: int = 2**31 - 1
    group_consumer_migration_policy: str = "bidirectional"
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    # As for __consumer_offsets, fewer partitions than Kafka's 50 on one machine.
    transaction_state_log_num_partitions: int = 16
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    listeners: str = ""  # not set: one PLAINTEXT listener at rlogd's host and port
    advertised_listeners: str = ""
    listener_security_protocol_map: str = DEFAULT_PROTOCOL_MAP_TEXT
    inter_broker_listener_name: str = ""  # not set: the first listener
    controller_listener_names: str = "CONTROLLER"
    # The [controller] and [broker.N] tables: nodes' own listeners (daemon/listeners.py).
    node_listeners: NodeListenerTables = field(default_factory=NodeListenerTables)
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str = ""
    ssl_key_password: str = ""
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str = ""
    ssl_client_auth: str = "none"
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_enabled_protocols: str = "TLSv1.2,TLSv1.3"
    ssl_principal_mapping_rules: str = DEFAULT_RULES  # an SSL client's name (KIP-371)
    sasl_enabled_mechanisms: str = "SCRAM-SHA-256,SCRAM-SHA-512"
    connections_max_reauth_ms: int = 0  # 0: a session never expires (KIP-368)
    sasl_server_max_receive_size: int = 524_288  # a request before authentication, at most
    authorizer_class_name: str = ""  # empty: no authorization, as Kafka
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False

    @property
    def authorization_enabled(self) -> bool:
        return bool(self.authorizer_class_name.strip())

    @property
    def migration_policy(self) -> str:
        """group.consumer.migration.policy as the coordinator takes it: Kafka accepts any case
        ("Bidirectional")."""
        return self.group_consumer_migration_policy.strip().lower()

    @property
    def sasl_mechanisms(self) -> list[str]:
        return [m.strip() for m in self.sasl_enabled_mechanisms.split(",") if m.strip()]

    @property
    def listener_settings(self) -> ListenerSettings:
        return ListenerSettings(
            self.listeners,
            self.advertised_listeners,
            self.listener_security_protocol_map,
            self.inter_broker_listener_name,
            self.controller_listener_names,
            self.node_listeners,
        )

    def to_kafka_properties(self) -> dict[str, str]:
        """These settings under Kafka's names, as DescribeConfigs shows them."""
        values = {}
        for key, (attribute, _) in _BROKER_KEYS.items():
            value = getattr(self, attribute)
            values[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return values

    def log_config(self) -> LogConfig:
        """The default topic config these broker settings imply (Kafka's log.* → topic keys)."""
        return LogConfig.from_kafka_properties(
            {
                "segment.bytes": str(self.log_segment_bytes),
                "segment.ms": str(self.log_roll_ms),
                "index.interval.bytes": str(self.log_index_interval_bytes),
                "segment.index.bytes": str(self.log_index_size_max_bytes),
                "retention.ms": str(self.log_retention_ms),
                "retention.bytes": str(self.log_retention_bytes),
                "flush.messages": str(self.log_flush_interval_messages),
                "flush.ms": str(self.log_flush_interval_ms),
                "max.message.bytes": str(self.message_max_bytes),
                "message.timestamp.type": self.log_message_timestamp_type,
                "cleanup.policy": self.log_cleanup_policy,
            }
        )


@dataclass(frozen=True)
class RlogConfig:
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    broker: BrokerSettings = field(default_factory=BrokerSettings)


def _typed(key: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if isinstance(value, str):
        return value
    raise ConfigError(f"{key}: expected a string, got {value!r}")


def _cluster_settings(table: dict[str, Any]) -> ClusterSettings:
    known = {f.name: f.type for f in fields(ClusterSettings)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        attribute = key.replace("-", "_").replace(".", "_")
        if attribute not in known:
            raise ConfigError(f"[cluster] {key}: unknown key (known: {', '.join(sorted(known))})")
        kind = str if attribute == "restart_policy" else int
        values[attribute] = _typed(f"[cluster] {key}", value, kind)
    settings = ClusterSettings(**values)
    if settings.restart_policy not in RESTART_POLICIES:
        raise ConfigError(
            f"[cluster] restart_policy: {settings.restart_policy!r} is not one of "
            f"{', '.join(RESTART_POLICIES)}"
        )
    if not 1 <= settings.brokers <= 64:
        raise ConfigError(f"[cluster] brokers: {settings.brokers} is not within 1..64")
    if not 1 <= settings.base_port <= 65535 - settings.brokers:
        raise ConfigError(f"[cluster] base_port: {settings.base_port} is not a usable port")
    broker_ports = range(settings.base_port, settings.base_port + settings.brokers)
    if settings.controller_port and (
        not 1 <= settings.controller_port <= 65535 or settings.controller_port in broker_ports
    ):
        raise ConfigError(
            f"[cluster] controller_port: {settings.controller_port} is not a usable port "
            "(brokers use base_port .. base_port + brokers - 1)"
        )
    return settings


def broker_settings(table: dict[str, Any]) -> BrokerSettings:
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _BROKER_KEYS:
            raise ConfigError(f"[broker] {key}: unknown key")
        attribute, kind = _BROKER_KEYS[key]
        values[attribute] = _typed(f"[broker] {key}", value, kind)
    settings = BrokerSettings(**values)
    try:
        settings.log_config()
    except ValueError as error:
        raise ConfigError(f"[broker] {error}") from None
    for key in (
        "num.partitions",
        "default.replication.factor",
        "min.insync.replicas",
        "replica.fetch.max.bytes",
        "broker.session.timeout.ms",
        "broker.heartbeat.interval.ms",
        "leader.imbalance.check.interval.seconds",
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "group.min.session.timeout.ms",
        "group.max.size",
        "group.consumer.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.max.size",
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
        "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "transaction.max.timeout.ms",
        "transactional.id.expiration.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "producer.id.expiration.ms",
        "producer.id.expiration.check.interval.ms",
    ):
        if getattr(settings, _BROKER_KEYS[key][0]) < 1:
            raise ConfigError(f"[broker] {key}: must be at least 1")
    for key in (
        "replica.lag.time.max.ms",
        "replica.fetch.wait.max.ms",
        "replica.fetch.backoff.ms",
        "replica.socket.timeout.ms",
        "offset.metadata.max.bytes",
        "group.initial.rebalance.delay.ms",
        "connections.max.reauth.ms",
    ):
        if getattr(settings, _BROKER_KEYS[key][0]) < 0:
            raise ConfigError(f"[broker] {key}: must not be negative")
    if settings.broker_heartbeat_interval_ms >= settings.broker_session_timeout_ms:
        raise ConfigError(
            "[broker] broker.heartbeat.interval.ms: must be below broker.session.timeout.ms"
        )
    if settings.group_consumer_heartbeat_interval_ms >= settings.group_consumer_session_timeout_ms:
        raise ConfigError(
            "[broker] group.consumer.heartbeat.interval.ms: must be below "
            "group.consumer.session.timeout.ms"
        )
    if settings.group_max_session_timeout_ms < settings.group_min_session_timeout_ms:
        raise ConfigError(
            "[broker] group.max.session.timeout.ms: must not be below group.min.session.timeout.ms"
        )
    if settings.socket_request_max_bytes <= settings.message_max_bytes:
        raise ConfigError("[broker] socket.request.max.bytes: must exceed message.max.bytes")
    if settings.log_cleaner_backoff_ms < 1:
        raise ConfigError("[broker] log.cleaner.backoff.ms: must be at least 1")
    if settings.migration_policy not in MIGRATION_POLICIES:
        raise ConfigError(
            f"[broker] group.consumer.migration.policy: "
            f"{settings.group_consumer_migration_policy!r}; one of {', '.join(MIGRATION_POLICIES)}"
        )
    unknown = [m for m in settings.sasl_mechanisms if m not in SASL_MECHANISMS]
    if unknown or not settings.sasl_mechanisms:
        raise ConfigError(
            f"[broker] sasl.enabled.mechanisms: {settings.sasl_enabled_mechanisms!r}; rlog "
            f"serves {', '.join(SASL_MECHANISMS)}"
        )
    if settings.authorization_enabled and (
        settings.authorizer_class_name.strip() not in AUTHORIZER_NAMES
    ):
        raise ConfigError(
            f"[broker] authorizer.class.name: {settings.authorizer_class_name!r}; rlog accepts "
            f"{', '.join(repr(name) for name in AUTHORIZER_NAMES)}, or empty for no authorization"
        )
    try:
        parse_super_users(settings.super_users)
        PrincipalMapper(settings.ssl_principal_mapping_rules)
    except ValueError as error:
        raise ConfigError(f"[broker] {error}") from None
    if settings.sasl_server_max_receive_size < 1:
        raise ConfigError("[broker] sasl.server.max.receive.size: must be at least 1")
    try:
        listeners = broker_listeners(settings.listener_settings, 1, "127.0.0.1", 9092)
        controller_protocol(settings.listener_settings)
        check_tls_settings(settings)
    except ValueError as error:
        raise ConfigError(f"[broker] {error}") from None
    if settings.authorization_enabled and _only_trusted(listeners):
        raise ConfigError(
            f"[broker] authorizer.class.name is set, but the only listener, {listeners[0].name}, "
            "is the PLAINTEXT inter-broker one, whose connections are trusted as rlog's own: "
            "nothing would be checked. Serve clients on a listener of their own (SASL_PLAINTEXT, "
            "SASL_SSL, SSL, or a second PLAINTEXT one), or make the inter-broker listener SSL"
        )
    return settings


def _only_trusted(listeners: list[Listener]) -> bool:
    """Whether the brokers would have no listener but the trusted one (the inter-broker one
    when it is PLAINTEXT: daemon/broker/authorization.py)."""
    return len(listeners) == 1 and listeners[0].security_protocol == "PLAINTEXT"


def parse_config(text: str, source: str = "<config>") -> RlogConfig:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: not valid TOML: {error}") from None
    unknown = set(document) - {"cluster", "broker", "controller"}
    if unknown:
        raise ConfigError(f"{source}: unknown table(s) {', '.join(sorted(unknown))}")
    try:
        broker_table, nodes = node_listener_tables(document)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return _checked_ports(
        RlogConfig(
            cluster=_cluster_settings(document.get("cluster", {})),
            broker=replace(broker_settings(broker_table), node_listeners=nodes),
        )
    )


def _checked_ports(config: RlogConfig) -> RlogConfig:
    """The config, if no two of its brokers' listeners (or the controller) share a port."""
    cluster = config.cluster
    try:
        check_cluster_ports(
            config.broker.listener_settings,
            cluster.brokers,
            "127.0.0.1",
            cluster.base_port,
            cluster.resolved_controller_port,
        )
    except ValueError as error:
        raise ConfigError(f"[broker] {error}") from None
    if config.broker.node_listeners.brokers:
        try:  # again with the nodes' own tables: a [broker.N] listener may be the SSL one
            check_tls_settings(config.broker)
        except ValueError as error:
            raise ConfigError(f"[broker] {error}") from None
    return config


def with_cluster_flags(config: RlogConfig, flags: dict[str, int]) -> RlogConfig:
    """The config with rlogd's --brokers and --base-port (``flags``, by [cluster] key) over its
    [cluster] table: ConfigError if the result is not a usable cluster."""
    if not flags:
        return config
    cluster = replace(config.cluster, **flags)
    if not 1 <= cluster.brokers <= 64:
        raise ConfigError(f"--brokers: {cluster.brokers} is not within 1..64")
    if not 1 <= cluster.base_port <= 65535 - cluster.brokers:
        raise ConfigError(f"--base-port: {cluster.base_port} is not a usable port")
    broker_ports = range(cluster.base_port, cluster.base_port + cluster.brokers)
    if cluster.controller_port in broker_ports:
        raise ConfigError(
            f"controller_port {cluster.controller_port} is one of the brokers' ports "
            f"({broker_ports.start}..{broker_ports.stop - 1})"
        )
    return _checked_ports(replace(config, cluster=cluster))


def load_config(path: Path | None) -> RlogConfig:
    if path is None:
        return RlogConfig()
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read config {path}: {error.strerror}") from None
    return parse_config(text, str(path))
