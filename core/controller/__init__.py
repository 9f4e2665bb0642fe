"""The controller: cluster metadata as a log of records, placement, elections, broker sessions.

`Controller` (controller.py) is the sans-IO core; api.py holds its requests, responses and
`Ready`; the handlers live by subject in brokers.py, topics.py and partitions.py, with the pure
rules in election.py and placement.py.
"""

from rlog.core.controller.api import (
    PRODUCER_ID_BLOCK_SIZE,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterConfigsRequest,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    ControllerConfig,
    ControllerRequest,
    ControllerResponse,
    CreatePartitionsRequest,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectionResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ErrorResponse,
    NewTopic,
    Ready,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    ReplicaLogEnd,
)
from rlog.core.controller.controller import Controller

__all__ = [
    "PRODUCER_ID_BLOCK_SIZE",
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "AlterConfigsRequest",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResponse",
    "Controller",
    "ControllerConfig",
    "ControllerRequest",
    "ControllerResponse",
    "CreatePartitionsRequest",
    "CreateTopicResult",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopicResult",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "ElectLeadersRequest",
    "ElectLeadersResponse",
    "ElectionResult",
    "ErrorResponse",
    "NewTopic",
    "Ready",
    "RegisterBrokerRequest",
    "RegisterBrokerResponse",
    "ReplicaLogEnd",
]
