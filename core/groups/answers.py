"""The bodies the coordinator answers with, in the protocol's shape (every version's fields; the
codec keeps those of the version asked)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlog.core.groups.group import Group
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]
NO_GENERATION = -1


def join_error(error: ErrorCode, member_id: str = "") -> Body:
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "generation_id": NO_GENERATION,
        "protocol_type": None,
        "protocol_name": "",
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def sync_answer(error: ErrorCode, group: Group | None = None, assignment: bytes = b"") -> Body:
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "protocol_type": group.protocol_type if group else None,
        "protocol_name": group.protocol if group else None,
        "assignment": assignment,
    }


def leave_answer(error: ErrorCode, members: list[Body]) -> Body:
    return {"throttle_time_ms": 0, "error_code": error, "members": members}


def commit_answer(topics: list[Body], error_for: Callable[[str, int], ErrorCode]) -> Body:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": part["partition_index"],
                        "error_code": error_for(topic["name"], part["partition_index"]),
                    }
                    for part in topic.get("partitions") or []
                ],
            }
            for topic in topics
        ],
    }


def offset_delete_answer(error: ErrorCode, topics: list[Body]) -> Body:
    """OffsetDelete's answer: a top-level error (and no partitions), or each partition's."""
    return {"throttle_time_ms": 0, "error_code": error, "topics": topics}
