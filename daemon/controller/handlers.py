"""The controller's Kafka APIs: decoded request body in, controller requests stepped, body out.

Brokers register, heartbeat, fetch the metadata log (`__cluster_metadata-0`), propose ISR changes
and take producer-id blocks here; admin requests (admin.py) arrive forwarded verbatim from the
brokers. Every answer is built after the records it depends on are durable (the service resolves
a request's future only then). Bad input never raises out of a handler into the process: a
problem becomes the protocol's error code, and an unexpected failure (a bug) is answered with
UNKNOWN_SERVER_ERROR in the shape the API version expects (errors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rlog.core import limits
from rlog.core.controller import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    RegisterBrokerRequest,
    RegisterBrokerResponse,
    ReplicaLogEnd,
    security_admin,
)
from rlog.core.metadata.log_store import METADATA_PARTITION, METADATA_TOPIC
from rlog.core.metadata.records import Endpoint
from rlog.core.protocol.apis import CONTROLLER_SUPPORTED, ApiKey, api_versions_body
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.core.storage.log import OffsetOutOfRangeError
from rlog.daemon.controller import admin
from rlog.daemon.controller.service import ControllerFailed, ControllerService
from rlog.daemon.error_answers import empty_fetch_partition, error_answer
from rlog.daemon.listeners import security_protocol_name

log = logging.getLogger("rlog.controller")

Body = dict[str, Any]
Handler = Callable[[Request], Awaitable[Body]]
# A refused registration is retried every 0.2 s: logged again only after this long.
REFUSAL_LOG_INTERVAL_S = 30.0


class Handlers:
    def __init__(self, cluster_id: str, service: ControllerService) -> None:
        self.cluster_id = cluster_id
        self.service = service
        self.admin = admin.AdminHandlers(service)
        # (broker id, incarnation, error) -> when its refusal was last logged
        self._refusals_logged: dict[tuple[int, str, int], float] = {}
        self.table: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.BROKER_REGISTRATION: self.broker_registration,
            ApiKey.BROKER_HEARTBEAT: self.broker_heartbeat,
            ApiKey.FETCH: self.fetch,
            ApiKey.ALTER_PARTITION: self.alter_partition,
            ApiKey.ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
            ApiKey.CREATE_TOPICS: self.admin.create_topics,
            ApiKey.DELETE_TOPICS: self.admin.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.admin.create_partitions,
            ApiKey.ELECT_LEADERS: self.admin.elect_leaders,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.admin.incremental_alter_configs,
            ApiKey.CREATE_ACLS: self.admin.create_acls,
            ApiKey.DELETE_ACLS: self.admin.delete_acls,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.admin.alter_user_scram_credentials,
        }
        assert set(self.table) == set(CONTROLLER_SUPPORTED), "handlers and advertised APIs differ"

    def serve_now(self, request: Request, client_host: str, reply: Callable[..., None]) -> bool:
        """Every controller request runs `handle` in a task of its own."""
        return False

    async def handle(self, request: Request) -> Body:
        api_key = ApiKey(request.api_key)
        try:
            return await self.table[api_key](request)
        except ControllerFailed:
            raise  # the process is stopping: close the connection, the broker will retry
        except Exception:
            log.exception(
                "%s v%d failed; answering UNKNOWN_SERVER_ERROR", api_key.name, request.api_version
            )
            if api_key in security_admin.ERROR_ANSWERS:
                return security_admin.security_error_answer(
                    api_key, request.body or {}, ErrorCode.UNKNOWN_SERVER_ERROR
                )
            return error_answer(request, ErrorCode.UNKNOWN_SERVER_ERROR)

    # -- ApiVersions -----------------------------------------------------------------------
    async def api_versions(self, request: Request) -> Body:
        return api_versions_body(CONTROLLER_SUPPORTED, unsupported=request.unsupported_version)

    # -- BrokerRegistration ----------------------------------------------------------------
    async def broker_registration(self, request: Request) -> Body:
        body = request.body
        broker_id = body["broker_id"]
        answer: Body = {"throttle_time_ms": 0, "broker_epoch": -1}
        if body["cluster_id"] != self.cluster_id:
            log.warning(
                "broker %d refused: it belongs to cluster %r, this is %r",
                broker_id,
                body["cluster_id"],
                self.cluster_id,
            )
            return answer | {"error_code": ErrorCode.INCONSISTENT_CLUSTER_ID}
        if not body["listeners"]:
            log.warning("broker %d refused: it registered without a listener", broker_id)
            return answer | {"error_code": ErrorCode.INVALID_REQUEST}
        # The first listener is the one its peers use (the broker sends it first).
        listener = body["listeners"][0]
        endpoints = tuple(
            Endpoint(
                str(each["name"]),
                str(each["host"]),
                int(each["port"]),
                security_protocol_name(each["security_protocol"]),
            )
            for each in body["listeners"]
        )
        response = await self.service.submit(
            lambda token: RegisterBrokerRequest(
                token,
                broker_id,
                str(body["incarnation_id"]),
                listener["host"],
                listener["port"],
                body["rack"],
                previous_broker_epoch=body["previous_broker_epoch"],
                listeners=endpoints,
            )
        )
        assert isinstance(response, RegisterBrokerResponse)
        if response.error != ErrorCode.NONE:
            self._log_refusal(broker_id, str(body["incarnation_id"]), response)
        return answer | {"error_code": response.error, "broker_epoch": response.broker_epoch}

    def _log_refusal(
        self, broker_id: int, incarnation_id: str, response: RegisterBrokerResponse
    ) -> None:
        """Once per process and error, then every REFUSAL_LOG_INTERVAL_S while it retries."""
        now = time.monotonic()
        key = (broker_id, incarnation_id, response.error)
        last = self._refusals_logged.get(key)
        if last is not None and now - last < REFUSAL_LOG_INTERVAL_S:
            return
        if len(self._refusals_logged) > 1000:  # processes come and go: forget the old ones
            self._refusals_logged.clear()
        self._refusals_logged[key] = now
        log.warning(
            "broker %d (incarnation %s) registration refused: %s %s",
            broker_id,
            incarnation_id,
            ErrorCode(response.error).name,
            response.message or "",
        )

    # -- BrokerHeartbeat -------------------------------------------------------------------
    async def broker_heartbeat(self, request: Request) -> Body:
        body = request.body
        response = await self.service.submit(
            lambda token: BrokerHeartbeatRequest(
                token,
                body["broker_id"],
                body["broker_epoch"],
                body["current_metadata_offset"],
                want_fence=body["want_fence"],
                want_shutdown=body["want_shut_down"],
                recovering_replicas=tuple(
                    ReplicaLogEnd(
                        told["topic_name"],
                        told["partition_index"],
                        told["last_leader_epoch"],
                        told["log_end_offset"],
                    )
                    for told in body["recovering_replicas"]
                ),
            )
        )
        assert isinstance(response, BrokerHeartbeatResponse)
        return {
            "throttle_time_ms": 0,
            "error_code": response.error,
            "is_caught_up": response.is_caught_up,
            "is_fenced": response.is_fenced,
            "should_shut_down": response.should_shutdown,
        }

    # -- AllocateProducerIds ---------------------------------------------------------------
    async def allocate_producer_ids(self, request: Request) -> Body:
        body = request.body
        response = await self.service.submit(
            lambda token: AllocateProducerIdsRequest(token, body["broker_id"], body["broker_epoch"])
        )
        assert isinstance(response, AllocateProducerIdsResponse)
        return {
            "throttle_time_ms": 0,
            "error_code": response.error,
            "producer_id_start": response.producer_id_start,
            "producer_id_len": response.producer_id_len,
        }

    # -- AlterPartition --------------------------------------------------------------------
    async def alter_partition(self, request: Request) -> Body:
        body = request.body
        broker_id, broker_epoch = body["broker_id"], body["broker_epoch"]
        # As KRaft: a request from a registration the controller does not know is refused as a
        # whole. The pending image is what the request would be stepped against.
        broker = self.service.controller.pending_image.brokers.get(broker_id)
        if broker is None or broker.epoch != broker_epoch:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.STALE_BROKER_EPOCH, "topics": []}
        waits: list[asyncio.Future[Any]] = []
        for topic in body["topics"]:
            for partition in topic["partitions"]:
                waits.append(self._submit_alter_partition(body, topic["topic_name"], partition))
        answers = iter(await asyncio.gather(*waits))
        topics = []
        for topic in body["topics"]:
            partitions = []
            for partition in topic["partitions"]:
                response = next(answers)
                assert isinstance(response, AlterPartitionResponse)
                partitions.append(
                    {
                        "partition_index": partition["partition_index"],
                        "error_code": response.error,
                        "leader_id": response.leader,
                        "leader_epoch": response.leader_epoch,
                        "isr": list(response.isr),
                        "leader_recovery_state": 0,
                        "partition_epoch": response.partition_epoch,
                    }
                )
            topics.append({"topic_name": topic["topic_name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "topics": topics}

    def _submit_alter_partition(
        self, body: Body, topic: str, partition: Body
    ) -> asyncio.Future[Any]:
        return self.service.submit(
            lambda token: AlterPartitionRequest(
                token,
                body["broker_id"],
                body["broker_epoch"],
                topic,
                partition["partition_index"],
                partition["leader_epoch"],
                tuple(partition["new_isr"]),
                partition["partition_epoch"],
            )
        )

    # -- Fetch of the metadata log ---------------------------------------------------------
    async def fetch(self, request: Request) -> Body:
        """Committed records of `__cluster_metadata-0`, long-polling until something commits."""
        body = request.body
        loop = asyncio.get_running_loop()
        max_wait_ms = max(0, min(body["max_wait_ms"], limits.FETCH_MAX_WAIT_MS_MAX))
        deadline = loop.time() + max_wait_ms / 1000
        wanted = any(topic["partitions"] for topic in body["topics"])
        while True:
            committed = self.service.commit_signal()  # taken before looking: no commit is missed
            responses, total_bytes, has_error = self._fetch_once(body)
            remaining_s = deadline - loop.time()
            if total_bytes >= body["min_bytes"] or has_error or remaining_s <= 0 or not wanted:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(committed.wait(), remaining_s)
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "session_id": 0,
            "responses": responses,
        }

    def _fetch_once(self, body: Body) -> tuple[list[Body], int, bool]:
        budget = body["max_bytes"]
        total_bytes = 0
        has_error = False
        responses = []
        for topic in body["topics"]:
            partitions = []
            for wanted in topic["partitions"]:
                max_bytes = max(0, min(wanted["partition_max_bytes"], budget - total_bytes))
                answer = self._fetch_partition(
                    topic["topic"], wanted, max_bytes, min_one_batch=total_bytes == 0
                )
                records = answer["records"]
                total_bytes += len(records) if isinstance(records, bytes) else records.size
                has_error |= answer["error_code"] != ErrorCode.NONE
                partitions.append(answer)
            responses.append({"topic": topic["topic"], "partitions": partitions})
        return responses, total_bytes, has_error

    def _fetch_partition(
        self, topic: str, wanted: Body, max_bytes: int, *, min_one_batch: bool
    ) -> Body:
        index = wanted["partition"]
        answer = empty_fetch_partition(index)
        if topic != METADATA_TOPIC or index != METADATA_PARTITION:
            return answer | {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        metadata_log = self.service.log
        committed_end = self.service.committed_end_offset
        answer |= {
            "high_watermark": committed_end,
            "last_stable_offset": committed_end,
            "log_start_offset": metadata_log.log_start_offset,
        }
        offset = wanted["fetch_offset"]
        if not metadata_log.log_start_offset <= offset <= committed_end:
            return answer | {"error_code": ErrorCode.OFFSET_OUT_OF_RANGE}
        if offset == committed_end:
            return answer
        try:
            found = metadata_log.read(offset, max_bytes, committed_end, min_one_batch=min_one_batch)
        except OffsetOutOfRangeError:
            return answer | {"error_code": ErrorCode.OFFSET_OUT_OF_RANGE}
        if found.records is not None:
            answer["records"] = found.records
        return answer
