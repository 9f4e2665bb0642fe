"""An error answer for any admin or controller request, in the shape its API expects: every
topic, partition or resource the request named gets the error code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlog.core.broker import empty_fetch_partition
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import Request

Body = dict[str, Any]


def _fetch(body: Body, code: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "session_id": 0,
        "responses": [
            {
                "topic": topic["topic"],
                "partitions": [
                    empty_fetch_partition(p["partition"], code) for p in topic["partitions"]
                ],
            }
            for topic in body["topics"]
        ],
    }


def _create_topics(body: Body, code: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": t["name"], "error_code": code} for t in body["topics"]],
    }


def _delete_topics(body: Body, code: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "responses": [{"name": name, "error_code": code} for name in body["topic_names"]],
    }


def _create_partitions(body: Body, code: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "results": [{"name": t["name"], "error_code": code} for t in body["topics"]],
    }


def _elect_leaders(body: Body, code: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "replica_election_results": [
            {
                "topic": topic["topic"],
                "partition_result": [
                    {"partition_id": partition, "error_code": code}
                    for partition in topic["partitions"]
                ],
            }
            for topic in body["topic_partitions"] or []
        ],
    }


def _incremental_alter_configs(body: Body, code: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "responses": [
            {"error_code": code, "resource_type": r["resource_type"],
             "resource_name": r["resource_name"]}
            for r in body["resources"]
        ],
    }  # fmt: skip


def _alter_partition(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "topics": []}


def _error_only(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code}


def _api_versions(body: Body, code: int) -> Body:
    return {"error_code": code, "api_keys": []}


# The APIs an authorization check can refuse whole (core/security/enforcement.py).


def _each_partition(topics: list[Body], code: int) -> list[Body]:
    """{name, partitions: [{partition_index, error_code}]} for each {name, partitions} topic."""
    return [
        {
            "name": topic["name"],
            "partitions": [
                {"partition_index": p["partition_index"], "error_code": code}
                for p in topic["partitions"]
            ],
        }
        for topic in topics
    ]


def _produce(body: Body, code: int) -> Body:
    return {
        "throttle_time_ms": 0,
        "responses": [
            {
                "name": topic["name"],
                "partition_responses": [
                    {"index": p["index"], "error_code": code, "base_offset": -1,
                     "log_append_time_ms": -1, "log_start_offset": -1}
                    for p in topic["partition_data"]
                ],
            }
            for topic in body["topic_data"]
        ],
    }  # fmt: skip


def _offset_commit(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "topics": _each_partition(body["topics"], code)}


def _offset_fetch(body: Body, code: int) -> Body:
    """v1-7 (v8+ answers each group on its own): the top-level error, each partition's too."""
    topics = [
        {"name": t["name"], "partitions": [
            {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1,
             "metadata": None, "error_code": code}
            for index in t["partition_indexes"]]}
        for t in body.get("topics") or ()
    ]  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": code, "topics": topics}


def _find_coordinator(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "node_id": -1,
            "host": "", "port": -1}  # fmt: skip


def _join_group(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1, "protocol_name": "",
            "leader": "", "member_id": "", "members": []}  # fmt: skip


def _sync_group(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "assignment": b""}


def _leave_group(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "members": []}


def _consumer_group_heartbeat(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}  # fmt: skip


def _init_producer_id(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}


def _add_partitions_to_txn(body: Body, code: int) -> Body:
    results = [
        {"name": t["name"], "results_by_partition": [
            {"partition_index": index, "partition_error_code": code} for index in t["partitions"]]}
        for t in body.get("v3_and_below_topics") or ()
    ]  # fmt: skip
    return {"throttle_time_ms": 0, "error_code": code, "results_by_transaction": [],
            "results_by_topic_v3_and_below": results}  # fmt: skip


def _write_txn_markers(body: Body, code: int) -> Body:
    return {
        "markers": [
            {"producer_id": marker["producer_id"], "topics": [
                {"name": t["name"], "partitions": [
                    {"partition_index": index, "error_code": code}
                    for index in t["partition_indexes"]]}
                for t in marker["topics"]]}
            for marker in body["markers"]
        ]
    }  # fmt: skip


def _txn_offset_commit(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "topics": _each_partition(body["topics"], code)}


def _describe_log_dirs(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "results": []}


def _offset_delete(body: Body, code: int) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "topics": []}


ERROR_ANSWERS: dict[ApiKey, Callable[[Body, int], Body]] = {
    ApiKey.API_VERSIONS: _api_versions,
    ApiKey.FETCH: _fetch,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _incremental_alter_configs,
    ApiKey.ALTER_PARTITION: _alter_partition,
    ApiKey.BROKER_REGISTRATION: _error_only,
    ApiKey.BROKER_HEARTBEAT: _error_only,
    ApiKey.ALLOCATE_PRODUCER_IDS: _error_only,
    ApiKey.PRODUCE: _produce,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _join_group,
    ApiKey.SYNC_GROUP: _sync_group,
    ApiKey.HEARTBEAT: _error_only,
    ApiKey.LEAVE_GROUP: _leave_group,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _error_only,
    ApiKey.END_TXN: _error_only,
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_LOG_DIRS: _describe_log_dirs,
    ApiKey.OFFSET_DELETE: _offset_delete,
}


def error_answer(request: Request, code: int) -> Body:
    return ERROR_ANSWERS[ApiKey(request.api_key)](request.body or {}, code)
