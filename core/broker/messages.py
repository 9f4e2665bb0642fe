"""What goes into a broker core and what comes out of it.

Inputs (`step(event, now_ms)`): the committed metadata, client requests the core serves (Produce,
Fetch, ListOffsets, OffsetForLeaderEpoch, as the Kafka codecs decode them), appends for the
group coordinator, the answers to what the core asked of others (peers' answers to its
follower fetches, the controller's answers to its ISR proposals), and a failed log dir.

Outputs (`ready()`): a `Ready`, done by the caller in this order, as raft's: make `syncs` durable,
then send `peer_requests` and `proposals`, then send `responses`; then `advance(ready)`.
Every request carries a `token`, opaque to the core, that routes its answer back.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from rlog.core.groups import GroupEvent
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import AlterPartitionResponse, ProposeIsr, Truncated
from rlog.core.transactions import TxnEvent
from rlog.core.values import value

Token = Hashable
Body = dict[str, Any]
TopicPartition = tuple[str, int]


# ---- inputs ----


@dataclass(frozen=True, slots=True)
class MetadataChanged:
    """The broker's metadata image moved. `caught_up`: it holds the whole metadata log, so logs
    it does not assign here are strays to delete. `registered`: this process's own registration
    is in it; until then the image answers lookups (is there such a partition?) but its
    partition states are not acted on, as they may be meant for an earlier incarnation."""

    image: MetadataImage
    caught_up: bool
    registered: bool = True


@value
class ClientRequest:
    """A request the core serves, decoded: answered with a response body (None for acks=0).
    Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, and the group coordinator's APIs."""

    token: Token
    api_key: int
    api_version: int
    body: Body
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class Append:
    """Append one batch as the partition's leader (the group coordinator's writes): answered
    with an `AppendAnswer` once `acks` are satisfied."""

    token: Token
    topic: str
    partition: int
    records: bytes
    acks: int
    timeout_ms: int


@value
class PeerAnswered:
    """The answer to a `PeerRequest`, or None: the request failed (connection, timeout)."""

    token: Token
    body: Body | None


@dataclass(frozen=True, slots=True)
class ProposalAnswered:
    """The controller's answer to an `IsrProposal` (an error if it was lost)."""

    token: Token
    response: AlterPartitionResponse


@dataclass(frozen=True, slots=True)
class ProducerIdsGranted:
    """The controller's answer to a Ready's `wants_producer_ids`: ids [first, first + count),
    or count 0 if the request failed."""

    first: int
    count: int


@dataclass(frozen=True, slots=True)
class LogDirFailed:
    """The broker's log dir failed: an append, fsync, checkpoint or roll raised an I/O error,
    or took longer than the daemon allows. The core stops using its logs for good (Kafka's
    offline log dir): their partitions answer KAFKA_STORAGE_ERROR, followers stop fetching,
    nothing more is written. Only a new process brings the dir back."""

    reason: str


Event = (
    MetadataChanged
    | ClientRequest
    | Append
    | PeerAnswered
    | ProposalAnswered
    | ProducerIdsGranted
    | LogDirFailed
)


# ---- outputs ----


@value
class Sync:
    """fsync the partition's log below `offset` (its recovery point moves there)."""

    topic: str
    partition: int
    offset: int


@value
class PeerRequest:
    """Send this request to broker `broker_id` as a replica; step its answer as PeerAnswered."""

    token: Token
    broker_id: int
    api_key: int
    api_version: int
    body: Body
    timeout_ms: int
    # Requests on different channels use different connections: a transaction marker must not
    # wait behind a follower's long-polling Fetch (answers come in request order).
    channel: str = "replica"


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """Send AlterPartition to the controller; step its answer as ProposalAnswered."""

    token: Token
    proposal: ProposeIsr


@value
class AppendAnswer:
    """How an `Append` ended: Produce's per-partition answer before version mapping."""

    error: ErrorCode
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    message: str | None = None
    storage_failed: bool = False  # the disk refused it (KAFKA_STORAGE_ERROR, by version)
    offsets: int = 0  # how many offsets the append took
    record_errors: tuple[tuple[int, str], ...] = ()  # (index in the batch, why) of bad records


@dataclass
class Ready:
    """What the caller must do, in order: `syncs`, then `peer_requests` and `proposals`, then
    `responses`; `checkpoints` (the HW and recovery-point files) whenever convenient before the
    next Ready. `wants_producer_ids` asks for a block of producer ids. `truncations`,
    `group_events`, `txn_events` and `log_messages` are for people (the broker's log, the
    event journal)."""

    syncs: list[Sync] = field(default_factory=list)
    peer_requests: list[PeerRequest] = field(default_factory=list)
    proposals: list[IsrProposal] = field(default_factory=list)
    responses: list[tuple[Token, Body | AppendAnswer | None]] = field(default_factory=list)
    checkpoints: bool = False
    # Ask the controller for a block of producer ids; step ProducerIdsGranted with its answer.
    wants_producer_ids: bool = False
    truncations: list[Truncated] = field(default_factory=list)
    group_events: list[GroupEvent] = field(default_factory=list)
    txn_events: list[TxnEvent] = field(default_factory=list)
    log_messages: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.syncs
            or self.peer_requests
            or self.proposals
            or self.responses
            or self.checkpoints
            or self.wants_producer_ids
            or self.truncations
            or self.group_events
            or self.txn_events
            or self.log_messages
        )
