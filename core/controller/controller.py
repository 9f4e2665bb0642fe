"""The controller, sans-IO and shaped like etcd's raft node.

    controller.step(request, now_ms)   # queue work; its records apply to the pending view at once
    controller.tick(now_ms)            # the only clock: session expiry, preferred rebalancing
    ready = controller.ready()         # records to append, responses to send
    caller: append ready.records as one batch at ready.base_offset and fsync, THEN send responses
    controller.advance(ready)          # the records are durable: fold them into the committed image

Requests are handled one at a time, in order; each sees every earlier request's effects, even
those not yet durable, because their records are already in the pending image. No response
leaves before the records it depends on: a response is queued together with, or after, them, and
the caller must persist a Ready's records before sending its responses (and must `advance` one
Ready before asking for the next).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlog.core.controller import acls, brokers, partitions, scram, topics
from rlog.core.controller.api import (
    AllocateProducerIdsRequest,
    AlterConfigsRequest,
    AlterPartitionRequest,
    AlterUserScramCredentialsRequest,
    BrokerHeartbeatRequest,
    BrokerProcessExitedRequest,
    ControllerConfig,
    ControllerRequest,
    ControllerResponse,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    Ready,
    RegisterBrokerRequest,
)
from rlog.core.controller.invariants import LeaderHistory, check_image
from rlog.core.controller.state import ControllerState
from rlog.core.metadata.image import MetadataImage

# The daemon shows the controller the time every 100 ms (ticks) and at every request: a gap this
# long between two moments means the controller did not run in between.
STALL_MS = 1000

Handler = Callable[[ControllerState, Any, int], ControllerResponse]

HANDLERS: dict[type, Handler] = {
    RegisterBrokerRequest: brokers.handle_register,
    BrokerHeartbeatRequest: brokers.handle_heartbeat,
    BrokerProcessExitedRequest: brokers.handle_process_exited,
    AllocateProducerIdsRequest: brokers.handle_allocate_producer_ids,
    CreateTopicsRequest: topics.handle_create_topics,
    DeleteTopicsRequest: topics.handle_delete_topics,
    CreatePartitionsRequest: topics.handle_create_partitions,
    AlterConfigsRequest: topics.handle_alter_configs,
    AlterPartitionRequest: partitions.handle_alter_partition,
    ElectLeadersRequest: partitions.handle_elect_leaders,
    CreateAclsRequest: acls.handle_create_acls,
    DeleteAclsRequest: acls.handle_delete_acls,
    AlterUserScramCredentialsRequest: scram.handle_alter_user_scram_credentials,
}


class Controller:
    def __init__(self, config: ControllerConfig, image: MetadataImage, next_offset: int) -> None:
        """`image`: the metadata log replayed (the controller owns it from now on);
        `next_offset`: the log end offset, where the next record goes.
        """
        check_image(image)
        self._config = config
        self._image = image  # committed: what the durable metadata log folds to
        self._state = ControllerState(config, image.copy(), next_offset)
        self._committed_next_offset = next_offset
        self._in_flight: Ready | None = None
        self._history = LeaderHistory()
        self._now_ms: int | None = None
        self._next_rebalance_ms = 0

    @property
    def image(self) -> MetadataImage:
        """The committed image: only durable records. Do not change it."""
        return self._image

    @property
    def pending_image(self) -> MetadataImage:
        """The committed image plus the records not yet durable. Do not change it."""
        return self._state.image

    @property
    def next_offset(self) -> int:
        return self._state.next_offset

    # ---- input ----

    def step(self, request: ControllerRequest, now_ms: int) -> None:
        self._observe_clock(now_ms)
        handler = HANDLERS.get(type(request))
        assert handler is not None, f"not a controller request: {request!r}"
        response = handler(self._state, request, now_ms)
        self._state.responses.append((request.token, response))

    def tick(self, now_ms: int) -> None:
        self._observe_clock(now_ms)
        brokers.expire_sessions(self._state, now_ms)
        if self._config.auto_leader_rebalance_enable and now_ms >= self._next_rebalance_ms:
            partitions.rebalance_preferred_leaders(self._state)
            self._next_rebalance_ms = now_ms + self._config.leader_imbalance_check_interval_ms

    def _observe_clock(self, now_ms: int) -> None:
        if self._now_ms is None:  # the first moment this controller runs
            brokers.start_sessions(self._state, now_ms)
            self._next_rebalance_ms = now_ms + self._config.leader_imbalance_check_interval_ms
        assert self._now_ms is None or now_ms >= self._now_ms, "the clock went back"
        if self._now_ms is not None and now_ms - self._now_ms > STALL_MS:
            # Heartbeats sent meanwhile wait unread in the sockets: judging sessions now would
            # fence every broker for the controller's own absence (a CPU starved by a loaded
            # machine fenced all three brokers of a cluster at once).
            brokers.extend_sessions(self._state, now_ms - self._now_ms)
        self._now_ms = now_ms

    # ---- output ----

    def has_ready(self) -> bool:
        return self._in_flight is None and bool(self._state.records or self._state.responses)

    def ready(self) -> Ready:
        """Everything queued since the last Ready; `advance` it before asking for another."""
        assert self._in_flight is None, "ready() again before advance()"
        state = self._state
        ready = Ready(state.next_offset - len(state.records), state.records, state.responses)
        state.records, state.responses = [], []
        self._in_flight = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """`ready.records` are durable (and its responses sent): commit them, check invariants."""
        assert ready is self._in_flight, "advance() of a Ready not handed out, or twice"
        assert ready.base_offset == self._committed_next_offset
        for index, record in enumerate(ready.records):
            self._image.apply(ready.base_offset + index, record)
            self._history.observe(self._image, record)
        self._committed_next_offset += len(ready.records)
        check_image(self._image)
        if not self._state.records:
            assert self._image == self._state.image, "committed and pending images diverged"
        self._in_flight = None
