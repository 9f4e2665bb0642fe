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
}


def error_answer(request: Request, code: int) -> Body:
    return ERROR_ANSWERS[ApiKey(request.api_key)](request.body or {}, code)
