"""A broker's static settings, and how a topic's effective config is resolved from them.

Resolution order, as Kafka's: the topic's own config, else the cluster's dynamic default
(IncrementalAlterConfigs on the broker resource ""), else the broker's static setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlog.core.groups import GroupConfig
from rlog.core.metadata.image import MetadataImage
from rlog.core.replication import ReplicaConfig
from rlog.core.storage.config import LOG_CONFIG_NAMES, LogConfig
from rlog.core.transactions import TxnConfig

MIN_INSYNC_REPLICAS = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"
REPLICA_LAG_TIME_MAX = "replica.lag.time.max.ms"
OFFSETS_TOPIC = "__consumer_offsets"  # only its group coordinators append there
TRANSACTION_STATE_TOPIC = "__transaction_state"  # only its transaction coordinators append there
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    log_config: LogConfig = field(default_factory=LogConfig)  # topics' static defaults
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 1024 * 1024  # per partition
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 1_000
    # A request to a peer or the controller gives up after this (its answer is then lost).
    replica_socket_timeout_ms: int = 30_000
    log_flush_scheduler_interval_ms: int = 1_000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    # Kafka's replica.high.watermark.checkpoint.interval.ms
    high_watermark_checkpoint_interval_ms: int = 5_000
    log_retention_check_interval_ms: int = 300_000
    # The group coordinator's settings; offsets_partitions is offsets.topic.num.partitions,
    # used until __consumer_offsets exists (then its partition count rules).
    groups: GroupConfig = field(default_factory=lambda: GroupConfig(offsets_partitions=16))
    # The transaction coordinator's settings; state_partitions is
    # transaction.state.log.num.partitions, used until __transaction_state exists.
    transactions: TxnConfig = field(
        default_factory=lambda: TxnConfig(state_partitions=16, offsets_partitions=16)
    )
    # Idempotent producers with no transaction are forgotten after this long idle.
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000

    def __post_init__(self) -> None:
        for name in (
            "replica_fetch_max_bytes",
            "replica_fetch_backoff_ms",
            "replica_socket_timeout_ms",
            "log_flush_scheduler_interval_ms",
            "log_flush_offset_checkpoint_interval_ms",
            "high_watermark_checkpoint_interval_ms",
            "log_retention_check_interval_ms",
            "producer_id_expiration_check_interval_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")


def replica_config(config: BrokerConfig, image: MetadataImage, topic: str) -> ReplicaConfig:
    """The replication rules for `topic` (min.insync.replicas, lag time, unclean election)."""
    min_insync = image.topic_config(topic, MIN_INSYNC_REPLICAS, "")
    unclean = image.topic_config(topic, UNCLEAN_LEADER_ELECTION, "")
    lag_ms = image.cluster_configs.get(REPLICA_LAG_TIME_MAX, "")
    return ReplicaConfig(
        min_insync_replicas=int(min_insync) if min_insync else config.min_insync_replicas,
        replica_lag_time_max_ms=int(lag_ms) if lag_ms else config.replica_lag_time_max_ms,
        unclean_leader_election_enable=(
            unclean == "true" if unclean else config.unclean_leader_election_enable
        ),
    )


def log_config(config: BrokerConfig, image: MetadataImage, topic: str) -> LogConfig:
    """The log settings for `topic` (segment size, retention, flush policy, cleanup policy)."""
    overrides = dict(image.cluster_configs)
    info = image.topics.get(topic)
    if info is not None:
        overrides.update(info.configs)
    wanted = {k: v for k, v in overrides.items() if k in LOG_CONFIG_NAMES}
    return LogConfig.from_kafka_properties(wanted, base=config.log_config)
