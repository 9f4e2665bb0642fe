"""Partition leadership and ISR: the controller's elections and the leaders' ISR proposals."""

from __future__ import annotations

from rlog.core.controller.api import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    ElectionResult,
    ElectLeadersRequest,
    ElectLeadersResponse,
)
from rlog.core.controller.election import (
    PartitionChange,
    clean_leader,
    offline_election,
    preferred_election,
    recovery_election,
    unclean_leader,
    without_broker,
)
from rlog.core.controller.state import ControllerState
from rlog.core.metadata.image import PartitionInfo
from rlog.core.metadata.records import NO_LEADER, ChangePartition
from rlog.core.protocol.errors import ErrorCode


def apply_change(
    state: ControllerState, topic: str, partition: int, change: PartitionChange, reason: str
) -> PartitionInfo:
    """Emit `change` as a ChangePartition: partition epoch + 1, leader epoch + 1 on a new leader."""
    old = state.image.partition(topic, partition)
    assert old is not None
    new_leader = change.leader is not None and change.leader != old.leader
    recovering = change.recovering
    if old.recovering and change.leader not in (None, NO_LEADER):
        recovering = False  # whoever now leads, the recovery is over
    state.emit(
        ChangePartition(
            topic=topic,
            partition=partition,
            leader=change.leader,
            isr=change.isr,
            leader_epoch=old.leader_epoch + 1 if new_leader else old.leader_epoch,
            partition_epoch=old.partition_epoch + 1,
            reason=reason,
            unclean=change.unclean,
            recovering=recovering,
        )
    )
    new = state.image.partition(topic, partition)
    assert new is not None
    return new


def start_recovery_after_unclean_shutdown(state: ControllerState, broker_id: int) -> None:
    """`broker_id` registered again after an unclean shutdown (a crash, a kill -9, a power
    loss): its log may have lost its unsynced tail. Where it is the last ISR member of a
    leaderless partition, that membership no longer proves it holds every acknowledged record,
    so the partition recovers instead (see `recovery_election`). Kafka's KIP-966 does the same
    with its eligible leader replicas."""
    for topic, partition, info in list(state.image.iter_partitions()):
        if info.leader == NO_LEADER and info.isr == (broker_id,) and not info.recovering:
            reason = (
                f"broker {broker_id}, its last ISR member, restarted after an unclean shutdown "
                "and may have lost records: the longest log among the replicas will lead"
            )
            apply_change(state, topic, partition, PartitionChange(recovering=True), reason)


def recover_partitions(state: ControllerState) -> None:
    """Elect the longest log in every recovering partition whose replicas have all told their
    log ends (in their heartbeats) since they last registered."""
    for (topic, partition), reports in list(state.log_end_reports.items()):
        info = state.image.partition(topic, partition)
        if info is None or not info.recovering:  # recovered meanwhile, or gone
            del state.log_end_reports[(topic, partition)]
            continue
        log_ends = {
            broker_id: (last_epoch, end_offset)
            for broker_id, (broker_epoch, last_epoch, end_offset) in reports.items()
            if state.image.brokers.get(broker_id) is not None
            and state.image.brokers[broker_id].epoch == broker_epoch
        }
        change = recovery_election(info, state.image.is_live, log_ends)
        if change is None:
            continue
        assert change.leader is not None
        epoch, end = log_ends[change.leader]
        reason = (
            f"recovered: broker {change.leader} has the longest log of all replicas "
            f"(last epoch {epoch}, end offset {end})"
        )
        apply_change(state, topic, partition, change, reason)
        del state.log_end_reports[(topic, partition)]


def move_off_broker(state: ControllerState, broker_id: int, reason: str) -> None:
    """Before `broker_id` is fenced: elect new leaders where it leads, drop it from ISRs."""
    usable = state.image.is_live
    for topic, partition, info in list(state.image.iter_partitions()):
        change = without_broker(info, broker_id, usable, state.unclean_election_allowed(topic))
        if change is not None:
            apply_change(state, topic, partition, change, reason)


def elect_offline_partitions(state: ControllerState, reason: str) -> None:
    """Give every leaderless partition a leader if one may lead now (after an unfence, or once
    unclean election is allowed).
    """
    for topic, partition, info in list(state.image.iter_partitions()):
        if info.leader != NO_LEADER:
            continue
        allowed = state.unclean_election_allowed(topic)
        change = offline_election(info, state.image.is_live, allowed)
        if change is not None:
            why = f"{reason}: unclean election" if change.unclean else reason
            apply_change(state, topic, partition, change, why)


def rebalance_preferred_leaders(state: ControllerState) -> None:
    for topic, partition, info in list(state.image.iter_partitions()):
        change = preferred_election(info, state.image.is_live)
        if change is not None:
            apply_change(state, topic, partition, change, "automatic preferred leader election")


# ---- AlterPartition ----


def handle_alter_partition(
    state: ControllerState, request: AlterPartitionRequest, now_ms: int
) -> AlterPartitionResponse:
    info = state.image.partition(request.topic, request.partition)
    error = _alter_partition_error(state, request, info)
    if error != ErrorCode.NONE:
        return _partition_response(error, info)
    assert info is not None
    new_isr = tuple(request.new_isr)
    if new_isr != info.isr:
        reason = f"AlterPartition from leader {request.broker_id}"
        info = apply_change(
            state, request.topic, request.partition, PartitionChange(isr=new_isr), reason
        )
    return _partition_response(ErrorCode.NONE, info)


def _alter_partition_error(
    state: ControllerState, request: AlterPartitionRequest, info: PartitionInfo | None
) -> int:
    """Kafka's checks, in order; the first that fails is the answer."""
    broker = state.image.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if request.leader_epoch != info.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    if request.broker_id != info.leader:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if request.partition_epoch != info.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    new_isr = list(request.new_isr)
    if len(set(new_isr)) != len(new_isr) or info.leader not in new_isr:
        return ErrorCode.INVALID_REQUEST
    for member in new_isr:
        if member not in info.replicas or not state.image.is_live(member):
            return ErrorCode.INELIGIBLE_REPLICA
    return ErrorCode.NONE


def _partition_response(error: int, info: PartitionInfo | None) -> AlterPartitionResponse:
    if info is None:
        return AlterPartitionResponse(error)
    return AlterPartitionResponse(
        error, info.leader, info.leader_epoch, info.isr, info.partition_epoch
    )


# ---- ElectLeaders ----


def handle_elect_leaders(
    state: ControllerState, request: ElectLeadersRequest, now_ms: int
) -> ElectLeadersResponse:
    if request.partitions is None:
        targets = [(topic, partition) for topic, partition, _ in state.image.iter_partitions()]
    else:
        targets = list(dict.fromkeys(request.partitions))  # once each, in request order
    results: list[ElectionResult] = []
    for topic, partition in targets:
        error, message = _elect(state, request.kind, topic, partition)
        if request.partitions is None and error == ErrorCode.ELECTION_NOT_NEEDED:
            continue
        results.append(ElectionResult(topic, partition, error, message))
    return ElectLeadersResponse(results)


def _elect(state: ControllerState, kind: str, topic: str, partition: int) -> tuple[int, str | None]:
    info = state.image.partition(topic, partition)
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist"
    if kind == "preferred":
        return _elect_preferred(state, topic, partition, info)
    if kind == "unclean":
        return _elect_unclean(state, topic, partition, info)
    return ErrorCode.INVALID_REQUEST, f"unknown election type {kind!r}"


def _elect_preferred(
    state: ControllerState, topic: str, partition: int, info: PartitionInfo
) -> tuple[int, str | None]:
    if info.leader == info.preferred_leader:
        return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition"
    change = preferred_election(info, state.image.is_live)
    if change is None:
        return (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
            f"Failed to elect leader for partition {topic}-{partition} under strategy "
            "PreferredElectionStrategy",
        )
    apply_change(state, topic, partition, change, "preferred leader election requested")
    return ErrorCode.NONE, None


def _elect_unclean(
    state: ControllerState, topic: str, partition: int, info: PartitionInfo
) -> tuple[int, str | None]:
    """A leader for a leaderless partition: from the ISR if possible, else any live replica,
    whatever the topic's unclean.leader.election.enable says (an operator asked for it).
    """
    if info.leader != NO_LEADER:
        return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition"
    usable = state.image.is_live
    leader = clean_leader(info, usable)
    if leader is not None and info.recovering:  # its ISR is not trusted: unclean
        change = PartitionChange(leader=leader, isr=(leader,), unclean=True)
    elif leader is not None:
        change = PartitionChange(leader=leader)
    else:
        leader = unclean_leader(info, usable)
        if leader is None:
            return (
                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
                f"Failed to elect leader for partition {topic}-{partition} under strategy "
                "UncleanElectionStrategy",
            )
        change = PartitionChange(leader=leader, isr=(leader,), unclean=True)
    apply_change(state, topic, partition, change, "unclean leader election requested")
    return ErrorCode.NONE, None
