"""The consumer-group APIs of a broker: FindCoordinator, the classic group protocol, offsets and
group admin. Each turns a request into a call on the broker's `GroupService`; checks that need
the cluster's metadata (does this topic exist?) happen here, the group rules in core.
"""

from __future__ import annotations

from typing import Any

from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon.broker.groups import GroupService
from rlog.daemon.broker.server import CLIENT_HOST

Body = dict[str, Any]


class GroupHandlers:
    def __init__(self, service: GroupService) -> None:
        self.service = service

    @property
    def image(self) -> MetadataImage:
        return self.service.link.image

    async def _call(self, method: str, request: Request, *, timed: bool = True) -> Body:
        return await self.service.call(
            method,
            request.body or {},
            request.api_version,
            request.client_id,
            CLIENT_HOST.get(),
            timed=timed,
        )

    async def find_coordinator(self, request: Request) -> Body:
        body = request.body or {}
        error, message, where = await self.service.find_coordinator(
            body.get("key") or "", body.get("key_type", 0)
        )
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message, **where}

    async def join_group(self, request: Request) -> Body:
        return await self._call("join_group", request)

    async def sync_group(self, request: Request) -> Body:
        return await self._call("sync_group", request)

    async def heartbeat(self, request: Request) -> Body:
        return await self._call("heartbeat", request)

    async def leave_group(self, request: Request) -> Body:
        return await self._call("leave_group", request)

    async def offset_commit(self, request: Request) -> Body:
        """Partitions of topics that do not exist are refused here (Kafka 2.x+ answers
        UNKNOWN_TOPIC_OR_PARTITION); the rest go to the coordinator."""
        body = request.body or {}
        image = self.image
        known: list[Body] = []
        unknown: list[Body] = []
        for topic in body.get("topics") or []:
            info = image.topics.get(topic["name"])
            good = [
                p for p in topic["partitions"] if info and p["partition_index"] in info.partitions
            ]
            bad = [
                p
                for p in topic["partitions"]
                if not (info and p["partition_index"] in info.partitions)
            ]
            if good:
                known.append({**topic, "partitions": good})
            if bad:
                unknown.append(
                    {
                        "name": topic["name"],
                        "partitions": [
                            {
                                "partition_index": p["partition_index"],
                                "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            }
                            for p in bad
                        ],
                    }
                )
        if not known and unknown:
            return {"throttle_time_ms": 0, "topics": unknown}
        answer = await self.service.call(
            "commit_offsets",
            {**body, "topics": known},
            request.api_version,
            request.client_id,
            CLIENT_HOST.get(),
        )
        answer["topics"] = answer["topics"] + unknown
        return answer

    async def offset_fetch(self, request: Request) -> Body:
        return await self._call("fetch_offsets", request, timed=False)

    async def describe_groups(self, request: Request) -> Body:
        return await self._call("describe_groups", request, timed=False)

    async def list_groups(self, request: Request) -> Body:
        return await self._call("list_groups", request, timed=False)

    async def delete_groups(self, request: Request) -> Body:
        return await self._call("delete_groups", request)
