"""Broker lifecycle: registration, heartbeats and sessions, fencing, controlled shutdown, and
producer-id blocks.

A broker's life in the image: registered (fenced) -> unfenced once its metadata has caught up
with its registration -> fenced again when its session expires, it asks to be, it shuts down,
or its supervisor saw its process end. Before a broker is fenced its leaderships move and it
leaves the ISRs, so a fenced broker never leads.

Sessions are soft state. A session guards a registration against a second process with the same
id; it ends when the broker's session times out, when its controlled shutdown completes, and
when rlogd reports its process gone, so a restarted process registers at once instead of
waiting out broker.session.timeout.ms.
"""

from __future__ import annotations

from enum import Enum, auto

from rlog.core.controller.api import (
    PRODUCER_ID_BLOCK_SIZE,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerProcessExitedRequest,
    BrokerProcessExitedResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
)
from rlog.core.controller.partitions import (
    elect_offline_partitions,
    move_off_broker,
    recover_partitions,
    start_recovery_after_unclean_shutdown,
)
from rlog.core.controller.state import ControllerState
from rlog.core.metadata.records import (
    AllocateProducerIds,
    FenceBroker,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.protocol.errors import ErrorCode

PRODUCER_ID_MAX = 2**63 - 1


def fence_broker(state: ControllerState, broker_id: int, reason: str) -> int:
    """Move the broker's leaderships and ISR places away, then fence it; the fence's offset."""
    broker = state.image.brokers[broker_id]
    assert not broker.fenced
    move_off_broker(state, broker_id, f"broker {broker_id} fenced: {reason}")
    return state.emit(FenceBroker(broker_id, broker.epoch))


def unfence_broker(state: ControllerState, broker_id: int) -> None:
    """Unfence the broker; leaderless partitions it can lead get a leader again."""
    broker = state.image.brokers[broker_id]
    state.emit(UnfenceBroker(broker_id, broker.epoch))
    elect_offline_partitions(state, f"broker {broker_id} unfenced")


def expire_sessions(state: ControllerState, now_ms: int) -> None:
    for broker in state.image.live_brokers():
        if not state.session_alive(broker.broker_id, now_ms):
            fence_broker(state, broker.broker_id, "session expired")


def extend_sessions(state: ControllerState, by_ms: int) -> None:
    """The controller was not running for `by_ms` (a stall, a pause, a starved CPU): no
    heartbeat could be heard meanwhile, so that time does not count against any session."""
    for broker_id, last_contact_ms in state.last_contact_ms.items():
        state.last_contact_ms[broker_id] = last_contact_ms + by_ms


def start_sessions(state: ControllerState, now_ms: int) -> None:
    """Every unfenced broker gets a session from now (a starting controller): it may be alive
    and must keep its registration. A fenced one leads nothing, and after a clean stop of the
    cluster every broker is fenced: their restarted processes register without waiting."""
    for broker in state.image.live_brokers():
        state.last_contact_ms.setdefault(broker.broker_id, now_ms)


def end_session(state: ControllerState, broker_id: int) -> None:
    state.last_contact_ms.pop(broker_id, None)


# ---- RegisterBroker ----


def handle_register(
    state: ControllerState, request: RegisterBrokerRequest, now_ms: int
) -> RegisterBrokerResponse:
    if request.broker_id < 0 or not 1 <= request.port <= 65535:
        return RegisterBrokerResponse(
            ErrorCode.INVALID_REQUEST, message=f"bad broker id or port in {request}"
        )
    names = [endpoint.name for endpoint in request.listeners]
    if len(set(names)) != len(names) or any(
        not 1 <= endpoint.port <= 65535 for endpoint in request.listeners
    ):
        return RegisterBrokerResponse(
            ErrorCode.INVALID_REQUEST, message=f"listeners repeat a name or a bad port: {names}"
        )
    existing = state.image.brokers.get(request.broker_id)
    if existing is not None:
        if existing.incarnation_id != request.incarnation_id and state.session_alive(
            existing.broker_id, now_ms
        ):
            return RegisterBrokerResponse(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                message=f"Another broker is registered with id {request.broker_id}",
            )
        if not existing.fenced:  # the registration fences it; its leaderships move first
            move_off_broker(state, existing.broker_id, f"broker {existing.broker_id} re-registers")
    # A new process (not a retry of this one's registration) that did not shut down cleanly
    # from the epoch we know: Kafka's PreviousBrokerEpoch check.
    unclean_restart = (
        existing is not None
        and existing.incarnation_id != request.incarnation_id
        and request.previous_broker_epoch != existing.epoch
    )
    broker_epoch = state.next_offset
    state.emit(
        RegisterBroker(
            request.broker_id,
            request.incarnation_id,
            broker_epoch,
            request.host,
            request.port,
            request.rack,
            request.listeners,
        )
    )
    state.last_contact_ms[request.broker_id] = now_ms
    state.shutdown_offsets.pop(request.broker_id, None)
    if unclean_restart:
        start_recovery_after_unclean_shutdown(state, request.broker_id)
    return RegisterBrokerResponse(ErrorCode.NONE, broker_epoch)


# ---- BrokerHeartbeat ----


class BrokerAction(Enum):
    STAY = auto()
    FENCE = auto()
    UNFENCE = auto()
    SHUT_DOWN = auto()  # controlled shutdown: move leaderships away, then fence


ANY = None
# (fenced, want_shutdown, want_fence, caught up) -> action; the first matching row wins.
HEARTBEAT_TRANSITIONS: tuple[tuple[tuple[bool | None, ...], BrokerAction], ...] = (
    ((False, True, ANY, ANY), BrokerAction.SHUT_DOWN),
    ((True, True, ANY, ANY), BrokerAction.STAY),
    ((False, False, True, ANY), BrokerAction.FENCE),
    ((False, False, False, ANY), BrokerAction.STAY),
    ((True, False, False, True), BrokerAction.UNFENCE),
    ((True, False, ANY, ANY), BrokerAction.STAY),
)


def heartbeat_action(
    fenced: bool, want_shutdown: bool, want_fence: bool, caught_up: bool
) -> BrokerAction:
    inputs = (fenced, want_shutdown, want_fence, caught_up)
    for pattern, action in HEARTBEAT_TRANSITIONS:
        if all(p is ANY or p == value for p, value in zip(pattern, inputs, strict=True)):
            return action
    raise AssertionError(f"no heartbeat transition for {inputs}")


def _registration_error(
    state: ControllerState, broker_id: int, broker_epoch: int
) -> ErrorCode | None:
    """A request from a broker must come from its current registration."""
    broker = state.image.brokers.get(broker_id)
    if broker is None:
        return ErrorCode.BROKER_ID_NOT_REGISTERED
    if broker.epoch != broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    return None


def handle_heartbeat(
    state: ControllerState, request: BrokerHeartbeatRequest, now_ms: int
) -> BrokerHeartbeatResponse:
    error = _registration_error(state, request.broker_id, request.broker_epoch)
    if error is not None:
        return BrokerHeartbeatResponse(error)
    broker = state.image.brokers[request.broker_id]
    state.last_contact_ms[broker.broker_id] = now_ms
    # Caught up once it has applied its own registration record.
    caught_up = request.current_metadata_offset >= broker.epoch
    action = heartbeat_action(broker.fenced, request.want_shutdown, request.want_fence, caught_up)
    if action is BrokerAction.SHUT_DOWN:
        offset = fence_broker(state, broker.broker_id, "controlled shutdown")
        state.shutdown_offsets[broker.broker_id] = offset
    elif action is BrokerAction.FENCE:
        fence_broker(state, broker.broker_id, "the broker asked to be fenced")
    elif action is BrokerAction.UNFENCE:
        unfence_broker(state, broker.broker_id)
    if request.recovering_replicas:
        for told in request.recovering_replicas:
            reports = state.log_end_reports.setdefault((told.topic, told.partition), {})
            reports[broker.broker_id] = (broker.epoch, told.last_epoch, told.end_offset)
        recover_partitions(state)
    fenced = state.image.brokers[broker.broker_id].fenced
    # It may stop once it has applied the records that moved its leaderships away.
    shutdown_offset = state.shutdown_offsets.get(broker.broker_id, -1)
    should_shutdown = (
        request.want_shutdown and fenced and request.current_metadata_offset >= shutdown_offset
    )
    if should_shutdown:  # it stops now: its next process need not wait for this session
        end_session(state, broker.broker_id)
    return BrokerHeartbeatResponse(ErrorCode.NONE, caught_up, fenced, should_shutdown)


# ---- the supervisor's notice ----


def handle_process_exited(
    state: ControllerState, request: BrokerProcessExitedRequest, now_ms: int
) -> BrokerProcessExitedResponse:
    """rlogd saw the process of `request.incarnation_id` end: fence it now (its leaderships move
    and it leaves the ISRs) rather than when its session expires, and end the session so its
    restarted process registers at once. A notice about an earlier incarnation is ignored."""
    broker = state.image.brokers.get(request.broker_id)
    if broker is None or broker.incarnation_id != request.incarnation_id:
        return BrokerProcessExitedResponse(
            False, f"broker {request.broker_id} is not registered by that process"
        )
    end_session(state, broker.broker_id)
    if broker.fenced:
        return BrokerProcessExitedResponse(False, f"broker {broker.broker_id} was fenced already")
    fence_broker(state, broker.broker_id, "its process exited")
    return BrokerProcessExitedResponse(True, f"broker {broker.broker_id} fenced")


# ---- AllocateProducerIds ----


def handle_allocate_producer_ids(
    state: ControllerState, request: AllocateProducerIdsRequest, now_ms: int
) -> AllocateProducerIdsResponse:
    error = _registration_error(state, request.broker_id, request.broker_epoch)
    if error is not None:
        return AllocateProducerIdsResponse(error)
    start = state.image.next_producer_id
    if start + PRODUCER_ID_BLOCK_SIZE > PRODUCER_ID_MAX:
        return AllocateProducerIdsResponse(ErrorCode.UNKNOWN_SERVER_ERROR)
    state.emit(
        AllocateProducerIds(request.broker_id, request.broker_epoch, start + PRODUCER_ID_BLOCK_SIZE)
    )
    return AllocateProducerIdsResponse(ErrorCode.NONE, start, PRODUCER_ID_BLOCK_SIZE)
