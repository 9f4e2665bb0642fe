"""The broker's rules as one sans-IO state machine (`BrokerCore`) that the daemon and the
simulator both drive: hosted replicas, Produce and Fetch, ListOffsets, OffsetForLeaderEpoch,
config resolution, the flush policy, follower fetch sessions and ISR proposals.
"""

from rlog.core.broker.broker import BrokerCore
from rlog.core.broker.config import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    BrokerConfig,
    log_config,
    replica_config,
)
from rlog.core.broker.fetch_sessions import fetch_version_for
from rlog.core.broker.messages import (
    Append,
    AppendAnswer,
    Body,
    ClientRequest,
    Event,
    IsrProposal,
    MetadataChanged,
    PeerAnswered,
    PeerRequest,
    ProducerIdsGranted,
    ProposalAnswered,
    Ready,
    Sync,
    Token,
    TopicPartition,
)
from rlog.core.broker.serving import empty_fetch_partition
from rlog.core.broker.traffic import TrafficCounters

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "Append",
    "AppendAnswer",
    "Body",
    "BrokerConfig",
    "BrokerCore",
    "ClientRequest",
    "Event",
    "IsrProposal",
    "MetadataChanged",
    "PeerAnswered",
    "PeerRequest",
    "ProducerIdsGranted",
    "ProposalAnswered",
    "Ready",
    "Sync",
    "Token",
    "TopicPartition",
    "TrafficCounters",
    "empty_fetch_partition",
    "fetch_version_for",
    "log_config",
    "replica_config",
]
