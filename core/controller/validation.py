"""Checks of what clients ask for: topic names, topic configs, manual replica assignments.

Each returns a message for the client (the world's mistake), or None when the input is fine.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence

from rlog.core.controller.state import MIN_INSYNC_REPLICAS_KEY, UNCLEAN_LEADER_ELECTION_KEY
from rlog.core.metadata.log_store import METADATA_TOPIC
from rlog.core.storage.config import LOG_CONFIG_NAMES, LogConfig

TOPIC_NAME_LENGTH_MAX = 249  # Kafka's bound, so `<topic>-<partition>` fits a file name
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_INTEGER = re.compile(r"[+-]?[0-9]+")
INT_MAX = 2**31 - 1


def topic_name_problem(name: str, existing: Collection[str]) -> str | None:
    """Why `name` cannot be a new topic's name under Kafka's rules, or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return f'Topic name cannot be "{name}"'
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        return f"Topic name is illegal, it can't be longer than {TOPIC_NAME_LENGTH_MAX} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    if name == METADATA_TOPIC:
        return f'Topic name "{name}" is reserved for cluster metadata'
    # '.' and '_' collide in metric names, so Kafka refuses a name differing only in them.
    normalized = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == normalized:
            return f"Topic '{name}' collides with existing topic: {other}"
    return None


def _min_insync_replicas_problem(text: str) -> str | None:
    if not _INTEGER.fullmatch(text.strip()) or not 1 <= int(text.strip()) <= INT_MAX:
        return f"Invalid value {text} for configuration {MIN_INSYNC_REPLICAS_KEY}: must be >= 1"
    return None


def _boolean_problem(text: str) -> str | None:
    if text.strip().lower() not in ("true", "false"):
        return (
            f"Invalid value {text} for configuration {UNCLEAN_LEADER_ELECTION_KEY}: "
            "Expected value to be either true or false"
        )
    return None


# Topic configs the controller and the replicas own, not the log storage.
REPLICATION_CONFIG_CHECKS = {
    MIN_INSYNC_REPLICAS_KEY: _min_insync_replicas_problem,
    UNCLEAN_LEADER_ELECTION_KEY: _boolean_problem,
}
REPLICA_LAG_TIME_MAX_KEY = "replica.lag.time.max.ms"


def _replica_lag_problem(text: str) -> str | None:
    if not _INTEGER.fullmatch(text.strip()) or int(text.strip()) < 0:
        return f"Invalid value {text} for configuration {REPLICA_LAG_TIME_MAX_KEY}: must be >= 0"
    return None


def _log_config_problem(key: str) -> Callable[[str], str | None]:
    def problem(text: str) -> str | None:
        try:
            LogConfig.from_kafka_properties({key: text})
        except ValueError as error:
            return str(error)
        return None

    return problem


# The cluster-wide dynamic defaults AlterConfigs may set (resource "broker", name ""): topic
# configs' defaults, under the topic configs' names, and the replicas' lag time. A topic's own
# config beats them, and they beat the static [broker] table.
CLUSTER_DYNAMIC_CHECKS: dict[str, Callable[[str], str | None]] = {
    **REPLICATION_CONFIG_CHECKS,
    REPLICA_LAG_TIME_MAX_KEY: _replica_lag_problem,
    **{
        key: _log_config_problem(key)
        for key in ("retention.ms", "retention.bytes", "flush.messages", "flush.ms")
    },
}
CLUSTER_DYNAMIC_CONFIGS = frozenset(CLUSTER_DYNAMIC_CHECKS)
# Kafka's broker-level names of the same defaults, as kafka-configs --entity-default sends them.
BROKER_CONFIG_SYNONYMS = {
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
}


TOPIC_CONFIG_NAMES = LOG_CONFIG_NAMES | REPLICATION_CONFIG_CHECKS.keys()


def unknown_topic_config_problem(keys: Collection[str]) -> str | None:
    for key in sorted(keys):
        if key not in TOPIC_CONFIG_NAMES:
            return f"Unknown topic config name: {key}"
    return None


def topic_configs_problem(configs: Mapping[str, object]) -> str | None:
    """Why these topic configs are invalid, or None."""
    unknown = unknown_topic_config_problem(configs)
    if unknown is not None:
        return unknown
    storage: dict[str, str] = {}
    for key, value in configs.items():
        if not isinstance(value, str):
            return f"Null value not supported for topic configs: {key}"
        check = REPLICATION_CONFIG_CHECKS.get(key)
        if check is not None:
            problem = check(value)
            if problem is not None:
                return problem
        else:
            storage[key] = value
    try:
        LogConfig.from_kafka_properties(storage)
    except ValueError as error:
        return str(error)
    return None


def cluster_configs_problem(configs: Mapping[str, str | None]) -> str | None:
    for key, value in configs.items():
        if key not in CLUSTER_DYNAMIC_CONFIGS:
            return f"Cannot update config {key} dynamically; rlog supports only " + ", ".join(
                sorted(CLUSTER_DYNAMIC_CONFIGS)
            )
        if value is not None:
            problem = CLUSTER_DYNAMIC_CHECKS[key](value)
            if problem is not None:
                return problem
    return None


def manual_assignment_problem(
    assignments: Mapping[int, Sequence[int]], registered: Collection[int]
) -> str | None:
    """Why a CreateTopics manual assignment is invalid, or None."""
    if not assignments:
        return "The manual partition assignment is empty"
    if sorted(assignments) != list(range(len(assignments))):
        return "Partitions in the manual assignment must be consecutive, starting from 0"
    sizes = {len(replicas) for replicas in assignments.values()}
    if len(sizes) != 1 or 0 in sizes:
        return "All partitions in the manual assignment must have the same, non-zero, replica count"
    for partition in sorted(assignments):
        replicas = list(assignments[partition])
        if len(set(replicas)) != len(replicas):
            return f"The manual assignment of partition {partition} repeats a broker: {replicas}"
        for broker_id in replicas:
            if broker_id not in registered:
                return (
                    f"The manual partition assignment includes broker {broker_id}, "
                    "but no such broker is registered"
                )
    return None
