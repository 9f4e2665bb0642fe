"""Topics: CreateTopics (with placement), DeleteTopics, CreatePartitions, AlterConfigs."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace

from rlog.core import limits
from rlog.core.controller.api import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ErrorResponse,
    NewTopic,
)
from rlog.core.controller.partitions import elect_offline_partitions
from rlog.core.controller.placement import assign_replicas, placement_seed
from rlog.core.controller.state import UNCLEAN_LEADER_ELECTION_KEY, ControllerState
from rlog.core.controller.validation import (
    BROKER_CONFIG_SYNONYMS,
    cluster_configs_problem,
    manual_assignment_problem,
    topic_configs_problem,
    topic_name_problem,
    unknown_topic_config_problem,
)
from rlog.core.metadata.records import (
    ChangeConfig,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
)
from rlog.core.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class TopicPlan:
    replicas: list[tuple[int, ...]]  # per partition, in order
    configs: dict[str, str]


def topic_id_for(offset: int, name: str) -> str:
    """A topic id (32 hex digits) from its CreateTopic record's offset and name: unique in the
    log, and the same on every replay.
    """
    return hashlib.sha256(f"{offset}:{name}".encode()).hexdigest()[:32]


# ---- CreateTopics ----


def handle_create_topics(
    state: ControllerState, request: CreateTopicsRequest, now_ms: int
) -> CreateTopicsResponse:
    counts = Counter(topic.name for topic in request.topics)
    results: list[CreateTopicResult] = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            message = f"Create topics request from client contains duplicate topic {topic.name}"
            results.append(CreateTopicResult(topic.name, ErrorCode.INVALID_REQUEST, message))
        else:
            results.append(_create_topic(state, topic, request.validate_only))
    return CreateTopicsResponse(results)


def _create_topic(
    state: ControllerState, topic: NewTopic, validate_only: bool
) -> CreateTopicResult:
    plan = _plan_topic(state, topic)
    if isinstance(plan, CreateTopicResult):
        return plan
    topic_id = None
    if not validate_only:
        topic_id = topic_id_for(state.next_offset, topic.name)
        state.emit(CreateTopic(topic.name, topic_id, plan.configs))
        _emit_partitions(state, topic.name, plan.replicas, first_partition=0)
    return CreateTopicResult(
        topic.name,
        ErrorCode.NONE,
        topic_id=topic_id,
        num_partitions=len(plan.replicas),
        replication_factor=len(plan.replicas[0]),
    )


def _emit_partitions(
    state: ControllerState, topic: str, replicas: list[tuple[int, ...]], first_partition: int
) -> None:
    """New partitions: ISR = their live replicas, led by the first of them (the preferred
    leader, when placement chose only live brokers).
    """
    for index, assigned in enumerate(replicas):
        isr = tuple(broker for broker in assigned if state.image.is_live(broker))
        assert isr, "placement and validation admit only partitions with a live replica"
        state.emit(CreatePartition(topic, first_partition + index, assigned, isr, isr[0], 0, 0))


def _plan_topic(state: ControllerState, topic: NewTopic) -> TopicPlan | CreateTopicResult:
    """Where the topic's replicas go, or the error to answer."""
    name = topic.name

    def refuse(error: int, message: str) -> CreateTopicResult:
        return CreateTopicResult(name, error, message)

    problem = topic_name_problem(name, state.image.topics)
    if problem is not None:
        return refuse(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if name in state.image.topics:
        return refuse(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    if topic.assignments is not None:
        replicas = _manual_replicas(state, topic)
    else:
        replicas = _placed_replicas(state, topic)
    if isinstance(replicas, tuple):
        return refuse(*replicas)
    problem = topic_configs_problem(topic.configs)
    if problem is not None:
        return refuse(ErrorCode.INVALID_CONFIG, problem)
    return TopicPlan(replicas, dict(sorted(topic.configs.items())))


Refusal = tuple[int, str]


def _placed_replicas(state: ControllerState, topic: NewTopic) -> list[tuple[int, ...]] | Refusal:
    partitions = state.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    replication_factor = topic.replication_factor
    if replication_factor == -1:
        replication_factor = state.config.default_replication_factor
    if not 1 <= partitions <= limits.TOPIC_PARTITIONS_MAX:
        return (
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions must be within 1..{limits.TOPIC_PARTITIONS_MAX}.",
        )
    if replication_factor < 1:
        return ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
    live = [broker.broker_id for broker in state.image.live_brokers()]
    if replication_factor > len(live):
        return (
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(live)}.",
        )
    start_index, replica_shift = placement_seed(state.image.topics_created, len(live))
    return assign_replicas(
        live, partitions, replication_factor, start_index=start_index, replica_shift=replica_shift
    )


def _manual_replicas(state: ControllerState, topic: NewTopic) -> list[tuple[int, ...]] | Refusal:
    assignments = topic.assignments
    assert assignments is not None
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        return (
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    if len(assignments) > limits.TOPIC_PARTITIONS_MAX:
        return ErrorCode.INVALID_PARTITIONS, f"More than {limits.TOPIC_PARTITIONS_MAX} partitions."
    problem = manual_assignment_problem(assignments, state.image.brokers)
    if problem is not None:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem
    replicas = [tuple(assignments[partition]) for partition in range(len(assignments))]
    for partition, assigned in enumerate(replicas):
        if not any(state.image.is_live(broker) for broker in assigned):
            return (
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"All brokers specified in the manual partition assignment for partition "
                f"{partition} are fenced",
            )
    return replicas


# ---- DeleteTopics ----


def handle_delete_topics(
    state: ControllerState, request: DeleteTopicsRequest, now_ms: int
) -> DeleteTopicsResponse:
    results: list[DeleteTopicResult] = []
    for name in request.names:
        topic = state.image.topics.get(name)
        if topic is None:
            results.append(DeleteTopicResult(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        state.emit(DeleteTopic(name))
        results.append(DeleteTopicResult(name, ErrorCode.NONE, topic.topic_id))
    return DeleteTopicsResponse(results)


# ---- CreatePartitions ----


def handle_create_partitions(
    state: ControllerState, request: CreatePartitionsRequest, now_ms: int
) -> ErrorResponse:
    topic = state.image.topics.get(request.topic)
    if topic is None:
        return ErrorResponse(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{request.topic}' does not exist."
        )
    current = len(topic.partitions)
    if request.new_total <= current:
        return ErrorResponse(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current} partitions, which is higher than or equal to the "
            f"requested {request.new_total}.",
        )
    if request.new_total > limits.TOPIC_PARTITIONS_MAX:
        return ErrorResponse(
            ErrorCode.INVALID_PARTITIONS, f"More than {limits.TOPIC_PARTITIONS_MAX} partitions."
        )
    first = topic.partitions[0]
    live = [broker.broker_id for broker in state.image.live_brokers()]
    if len(first.replicas) > len(live):
        return ErrorResponse(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {len(first.replicas)} larger than available brokers: "
            f"{len(live)}.",
        )
    # Continue the rotation where partition 0 started it.
    start_index = live.index(first.preferred_leader) if first.preferred_leader in live else 0
    replicas = assign_replicas(
        live,
        request.new_total - current,
        len(first.replicas),
        start_index=start_index,
        replica_shift=0,
        first_partition=current,
    )
    if not request.validate_only:
        _emit_partitions(state, request.topic, replicas, first_partition=current)
    return ErrorResponse(ErrorCode.NONE)


# ---- AlterConfigs ----


def handle_alter_configs(
    state: ControllerState, request: AlterConfigsRequest, now_ms: int
) -> ErrorResponse:
    if request.resource_type == "topic":
        topic = state.image.topics.get(request.resource_name)
        if topic is None:
            return ErrorResponse(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"The topic '{request.resource_name}' does not exist.",
            )
        current, record_type, name = topic.configs, "topic", request.resource_name
        problem = unknown_topic_config_problem(request.changes) or topic_configs_problem(
            _merged(current, request.changes)
        )
    elif request.resource_type == "broker":
        if request.resource_name != "":
            return ErrorResponse(
                ErrorCode.INVALID_REQUEST,
                "rlog keeps dynamic configs cluster-wide only: use the broker resource with an "
                "empty name",
            )
        current, record_type, name = state.image.cluster_configs, "cluster", ""
        changes = {BROKER_CONFIG_SYNONYMS.get(k, k): v for k, v in request.changes.items()}
        request = replace(request, changes=changes)
        problem = cluster_configs_problem(request.changes)
    else:
        return ErrorResponse(
            ErrorCode.INVALID_REQUEST, f"resource type {request.resource_type!r} is not supported"
        )
    if problem is not None:
        return ErrorResponse(ErrorCode.INVALID_CONFIG, problem)
    if not request.validate_only:
        _emit_config_changes(state, record_type, name, current, request.changes)
    return ErrorResponse(ErrorCode.NONE)


def _merged(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _emit_config_changes(
    state: ControllerState,
    record_type: str,
    name: str,
    current: Mapping[str, str],
    changes: Mapping[str, str | None],
) -> None:
    changed = False
    for key, value in sorted(changes.items()):
        if current.get(key) != value:
            state.emit(ChangeConfig(record_type, name, key, value))
            changed = changed or key == UNCLEAN_LEADER_ELECTION_KEY
    if changed:  # unclean election may now be allowed for offline partitions
        elect_offline_partitions(state, "unclean.leader.election.enable changed")
