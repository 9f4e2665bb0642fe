"""Replication of one partition across brokers: the replica state machine and what it exchanges.

`Replica` (replica.py) is the entry point; the dataclasses it takes and returns are in
messages.py; the arithmetic is in rules.py.
"""

from rlog.core.replication.messages import (
    NO_EPOCH,
    NO_LEADER,
    AlterPartitionResponse,
    AppendOutcome,
    CompleteProduce,
    DeleteOutcome,
    DivergingEpoch,
    Effect,
    EpochEndOffset,
    FetchPlan,
    FollowerFetchResult,
    HighWatermarkChanged,
    PartitionState,
    PendingAck,
    ProduceResult,
    ProposeIsr,
    ReadResult,
    ReplicaConfig,
    Truncated,
    TruncationPlan,
    TxnMarker,
)
from rlog.core.replication.replica import Replica
from rlog.core.replication.rules import FollowerProgress

__all__ = [
    "NO_EPOCH",
    "NO_LEADER",
    "AlterPartitionResponse",
    "AppendOutcome",
    "CompleteProduce",
    "DeleteOutcome",
    "DivergingEpoch",
    "Effect",
    "EpochEndOffset",
    "FetchPlan",
    "FollowerFetchResult",
    "FollowerProgress",
    "HighWatermarkChanged",
    "PartitionState",
    "PendingAck",
    "ProduceResult",
    "ProposeIsr",
    "ReadResult",
    "Replica",
    "ReplicaConfig",
    "Truncated",
    "TruncationPlan",
    "TxnMarker",
]
