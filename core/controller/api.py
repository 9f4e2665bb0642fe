"""What goes into the controller (config, requests) and what comes out (responses, `Ready`).

Every request carries a `token`, opaque to the controller, that the caller uses to route the
response. Error codes are Kafka's numbers.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rlog.core.metadata.records import Endpoint, MetadataRecord
from rlog.core.security.acl import AclBinding, AclFilter

PRODUCER_ID_BLOCK_SIZE = 1000  # ids per AllocateProducerIds (KIP-730's block)

Token = Hashable


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    default_replication_factor: int = 1  # default.replication.factor
    num_partitions: int = 1  # num.partitions
    # min.insync.replicas: not used by the controller's decisions; brokers read the topic config
    # with this as the default.
    min_insync_replicas_default: int = 1
    unclean_leader_election_default: bool = False  # unclean.leader.election.enable
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds

    def __post_init__(self) -> None:
        for name in (
            "broker_session_timeout_ms",
            "default_replication_factor",
            "num_partitions",
            "min_insync_replicas_default",
            "leader_imbalance_check_interval_ms",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")


# ---- requests ----


@dataclass(frozen=True, slots=True)
class RegisterBrokerRequest:
    token: Token
    broker_id: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    # The broker epoch it shut down cleanly with (its clean-shutdown file), or -1 after a
    # crash: Kafka's PreviousBrokerEpoch (BrokerRegistration v3+).
    previous_broker_epoch: int = -1
    # Every listener, the one at host:port (its peers') first; empty: that one, PLAINTEXT.
    listeners: tuple[Endpoint, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicaLogEnd:
    """A replica's log end in a recovering partition, as its broker tells it."""

    topic: str
    partition: int
    last_epoch: int  # the epoch of its last batch, -1 if its log is empty
    end_offset: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    token: Token
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int  # the offset of the last metadata record the broker applied
    want_fence: bool = False
    want_shutdown: bool = False
    recovering_replicas: tuple[ReplicaLogEnd, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerProcessExitedRequest:
    """The supervisor saw this broker's process end (rlogd is the parent of every broker): no
    Kafka API, an rlog notice. `incarnation_id` names the process that ended, so a notice that
    arrives after its successor registered changes nothing."""

    token: Token
    broker_id: int
    incarnation_id: str


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the cluster default (num.partitions)
    replication_factor: int = -1  # -1: the cluster default (default.replication.factor)
    # Manual placement: partition -> replicas (first = preferred leader). With it, both counts
    # above must be -1.
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    token: Token
    topics: Sequence[NewTopic]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    token: Token
    names: Sequence[str]


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    token: Token
    topic: str
    new_total: int
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterConfigsRequest:
    """Incremental: each key is set, or with value None removed. `resource_type` "topic"
    (name = the topic) or "broker" with name "" (the cluster-wide default).
    """

    token: Token
    resource_type: str
    resource_name: str
    changes: Mapping[str, str | None]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    """A leader proposes a new ISR for one of its partitions."""

    token: Token
    broker_id: int
    broker_epoch: int
    topic: str
    partition: int
    leader_epoch: int
    new_isr: Sequence[int]
    partition_epoch: int


ElectionKind = Literal["preferred", "unclean"]


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    token: Token
    kind: ElectionKind
    partitions: Sequence[tuple[str, int]] | None = None  # None: every partition


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest:
    token: Token
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class CreateAclsRequest:
    token: Token
    bindings: Sequence[AclBinding]  # as the client sent them, unchecked


@dataclass(frozen=True, slots=True)
class DeleteAclsRequest:
    token: Token
    filters: Sequence[AclFilter]


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int  # Kafka's code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512, others unknown


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)  # Hi(password, salt, iterations), from the client


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentialsRequest:
    token: Token
    deletions: Sequence[ScramDeletion]
    upsertions: Sequence[ScramUpsertion]


ControllerRequest = (
    RegisterBrokerRequest
    | BrokerHeartbeatRequest
    | BrokerProcessExitedRequest
    | CreateTopicsRequest
    | DeleteTopicsRequest
    | CreatePartitionsRequest
    | AlterConfigsRequest
    | AlterPartitionRequest
    | ElectLeadersRequest
    | AllocateProducerIdsRequest
    | CreateAclsRequest
    | DeleteAclsRequest
    | AlterUserScramCredentialsRequest
)

# ---- responses ----


@dataclass(frozen=True, slots=True)
class RegisterBrokerResponse:
    error: int
    broker_epoch: int = -1
    message: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    error: int
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shutdown: bool = False


@dataclass(frozen=True, slots=True)
class BrokerProcessExitedResponse:
    fenced: bool  # this notice fenced the broker (it was unfenced and this incarnation)
    message: str


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error: int
    message: str | None = None
    topic_id: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    topics: list[CreateTopicResult]


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str
    error: int
    topic_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    topics: list[DeleteTopicResult]


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """CreatePartitions and AlterConfigs answer with an error code and message only."""

    error: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    """The partition's state after the request (or as it stands, on an error)."""

    error: int
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ElectionResult:
    topic: str
    partition: int
    error: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    # With `partitions` None, partitions that needed no election are left out (as Kafka does).
    results: list[ElectionResult]


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    error: int
    producer_id_start: int = -1
    producer_id_len: int = 0


@dataclass(frozen=True, slots=True)
class CreateAclsResponse:
    results: list[ErrorResponse]  # one per binding, in the request's order


@dataclass(frozen=True, slots=True)
class DeleteAclsFilterResult:
    error: int
    message: str | None = None
    deleted: tuple[AclBinding, ...] = ()  # every ACL the filter matched, each now removed


@dataclass(frozen=True, slots=True)
class DeleteAclsResponse:
    results: list[DeleteAclsFilterResult]  # one per filter, in the request's order


@dataclass(frozen=True, slots=True)
class ScramUserResult:
    user: str
    error: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterUserScramCredentialsResponse:
    results: list[ScramUserResult]  # one per user named, in the order first named


ControllerResponse = (
    RegisterBrokerResponse
    | BrokerHeartbeatResponse
    | BrokerProcessExitedResponse
    | CreateTopicsResponse
    | DeleteTopicsResponse
    | ErrorResponse
    | AlterPartitionResponse
    | ElectLeadersResponse
    | AllocateProducerIdsResponse
    | CreateAclsResponse
    | DeleteAclsResponse
    | AlterUserScramCredentialsResponse
)


@dataclass(frozen=True, slots=True)
class Ready:
    """Work for the caller, in this order: append `records` (their offsets are base_offset,
    base_offset + 1, ...) as one batch and fsync it; then send `responses`; then `advance`.
    """

    base_offset: int
    records: list[MetadataRecord]
    responses: list[tuple[Token, ControllerResponse]]

    @property
    def is_empty(self) -> bool:
        return not self.records and not self.responses
