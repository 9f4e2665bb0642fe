"""One handler per Kafka API: decoded request body in, response body out.

Handlers build one response dict for every version; the codec keeps the fields a version has.
They never raise for bad input from a client: every problem becomes the protocol's error code on
the part of the request it concerns, and the rest of the request is still served. Cluster state
(brokers, topics, leaders, ISRs) comes from the metadata image the controller link keeps; admin
requests (create/delete topics, partitions, elections) are forwarded to the controller.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rlog.core import limits
from rlog.core.controller.validation import topic_name_problem
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import SUPPORTED, ApiKey, api_versions_body
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import NO_EPOCH
from rlog.core.storage.files import FileSlice
from rlog.daemon.broker.controller_link import ControllerLink
from rlog.daemon.broker.group_handlers import GroupHandlers
from rlog.daemon.broker.groups import OFFSETS_TOPIC, GroupService
from rlog.daemon.broker.producer_ids import ProducerIdAllocator
from rlog.daemon.broker.replica_manager import ReplicaManager, now_ms
from rlog.daemon.broker.traffic import Traffic
from rlog.daemon.error_answers import empty_fetch_partition, error_answer
from rlog.daemon.wire import WireError

log = logging.getLogger(__name__)

Body = dict[str, Any]
Handler = Callable[[Request], Awaitable[Body | None]]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2  # ListOffsets from tools: any replica answers, latest = its LEO
# How long a CreateTopics answer waits for the new topic to reach this broker's metadata, so
# the client's next Metadata here shows it.
TOPIC_PROPAGATION_WAIT_S = 5.0
AUTO_CREATE_WAIT_S = 1.0

# DescribeConfigs resource types and config sources (Kafka's ConfigResource / ConfigSource).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_LONG = 5


class Handlers:
    def __init__(
        self,
        broker_id: int,
        cluster_id: str,
        replicas: ReplicaManager,
        link: ControllerLink,
        producer_ids: ProducerIdAllocator,
        groups: GroupService,
    ) -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.replicas = replicas
        self.link = link
        self.settings = replicas.settings
        self.producer_ids = producer_ids
        self.traffic = Traffic()
        group_apis = GroupHandlers(groups)
        self.table: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self._forward,
            ApiKey.ELECT_LEADERS: self._forward,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.FIND_COORDINATOR: group_apis.find_coordinator,
            ApiKey.JOIN_GROUP: group_apis.join_group,
            ApiKey.SYNC_GROUP: group_apis.sync_group,
            ApiKey.HEARTBEAT: group_apis.heartbeat,
            ApiKey.LEAVE_GROUP: group_apis.leave_group,
            ApiKey.OFFSET_COMMIT: group_apis.offset_commit,
            ApiKey.OFFSET_FETCH: group_apis.offset_fetch,
            ApiKey.DESCRIBE_GROUPS: group_apis.describe_groups,
            ApiKey.LIST_GROUPS: group_apis.list_groups,
            ApiKey.DELETE_GROUPS: group_apis.delete_groups,
        }
        missing = set(SUPPORTED) - set(self.table)
        assert not missing, f"advertised APIs without a handler: {missing}"

    @property
    def image(self) -> MetadataImage:
        return self.link.image

    async def handle(self, request: Request) -> Body | None:
        return await self.table[ApiKey(request.api_key)](request)

    # -- ApiVersions -----------------------------------------------------------------------
    async def api_versions(self, request: Request) -> Body:
        return api_versions_body(SUPPORTED, unsupported=request.unsupported_version)

    # -- Metadata --------------------------------------------------------------------------
    async def metadata(self, request: Request) -> Body:
        body = request.body
        requested = body.get("topics")
        image = self.image
        names = sorted(image.topics) if requested is None else [t["name"] for t in requested]
        allow_auto_create = body.get("allow_auto_topic_creation", True)
        if requested is not None and allow_auto_create and self.settings.auto_create_topics_enable:
            await self._auto_create([n for n in names if n not in image.topics])
        image = self.image
        live = image.live_brokers()
        live_ids = {b.broker_id for b in live}
        controller_id = self.broker_id if self.broker_id in live_ids else -1
        if controller_id == -1 and live_ids:
            controller_id = min(live_ids)
        return {
            "throttle_time_ms": 0,
            "brokers": [
                {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in sorted(live, key=lambda b: b.broker_id)
            ],
            "cluster_id": self.cluster_id,
            # Admin clients send topic requests here; every broker forwards them.
            "controller_id": controller_id,
            "topics": [self._topic_metadata(image, name, live_ids) for name in names],
            "cluster_authorized_operations": -(2**31),
        }

    async def _auto_create(self, names: list[str]) -> None:
        wanted = [n for n in names if topic_name_problem(n, self.image.topics) is None]
        if not wanted:
            return
        log.info("auto-creating topics %s", wanted)
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [],
                    "configs": [],
                }
                for name in wanted
            ],
            "timeout_ms": 5000,
            "validate_only": False,
        }
        try:
            await self.link.forward(ApiKey.CREATE_TOPICS, 4, body, self._controller_timeout_s())
        except WireError as error:
            log.warning("auto-creating %s: %s", wanted, error)
            return
        # Kafka answers LEADER_NOT_AVAILABLE at once; waiting a moment for the new topic lets
        # most clients go on without a retry round.
        await self.link.wait_for_image(
            lambda image: all(_has_leaders(image, name) for name in wanted), AUTO_CREATE_WAIT_S
        )

    def _topic_metadata(self, image: MetadataImage, name: str, live_ids: set[int]) -> Body:
        topic = image.topics.get(name)
        if topic is None:
            problem = topic_name_problem(name, ())
            code = (
                ErrorCode.INVALID_TOPIC_EXCEPTION
                if problem
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return {"error_code": code, "name": name, "is_internal": False, "partitions": []}
        partitions = [
            {
                "error_code": ErrorCode.NONE
                if info.leader >= 0
                else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": index,
                "leader_id": info.leader,
                "leader_epoch": info.leader_epoch,
                "replica_nodes": list(info.replicas),
                "isr_nodes": list(info.isr),
                "offline_replicas": [r for r in info.replicas if r not in live_ids],
            }
            for index, info in sorted(topic.partitions.items())
        ]
        return {
            "error_code": ErrorCode.NONE,
            "name": name,
            "is_internal": name == OFFSETS_TOPIC,
            "partitions": partitions,
            "topic_authorized_operations": -(2**31),
        }

    # -- Produce ---------------------------------------------------------------------------
    async def produce(self, request: Request) -> Body | None:
        body = request.body
        acks = body["acks"]
        storage_error = (
            ErrorCode.KAFKA_STORAGE_ERROR
            if request.api_version >= 4
            else ErrorCode.NOT_LEADER_OR_FOLLOWER
        )
        waits: list[Awaitable[Body]] = []
        shape: list[tuple[str, int]] = []
        for topic in body["topic_data"]:
            for data in topic["partition_data"]:
                waits.append(
                    self._produce_partition(
                        topic["name"], data, acks, body["timeout_ms"], storage_error
                    )
                )
                shape.append((topic["name"], len(waits) - 1))
        answers = await asyncio.gather(*waits)
        if acks == 0:
            return None  # acks=0: the client expects no answer at all
        responses: list[Body] = []
        for name, position in shape:
            if not responses or responses[-1]["name"] != name:
                responses.append({"name": name, "partition_responses": []})
            responses[-1]["partition_responses"].append(answers[position])
        return {"responses": responses, "throttle_time_ms": 0}

    async def _produce_partition(
        self, topic: str, data: Body, acks: int, timeout_ms: int, storage_error: ErrorCode
    ) -> Body:
        index = data["index"]
        answer: Body = {
            "index": index,
            "base_offset": -1,
            "log_append_time_ms": -1,
            "log_start_offset": -1,
            "record_errors": [],
            "error_message": None,
        }
        if acks not in (0, 1, -1):
            return answer | {"error_code": ErrorCode.INVALID_REQUIRED_ACKS}
        if topic == OFFSETS_TOPIC:  # only its group coordinators write there, as in Kafka
            return answer | {
                "error_code": ErrorCode.INVALID_TOPIC_EXCEPTION,
                "error_message": f"Cannot append to internal topic {OFFSETS_TOPIC}",
            }
        replica = self.replicas.replica(topic, index)
        if replica is None:
            code = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER
                if self.image.partition(topic, index) is not None
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return answer | {"error_code": code}
        appended = await self.replicas.append((topic, index), data["records"], acks, timeout_ms)
        if appended.offsets:  # written, whatever acks=all says next
            self.traffic.produced(appended.offsets, len(data["records"] or b""))
        error = storage_error if appended.storage_failed else appended.error
        if error != ErrorCode.NONE:
            return answer | {
                "error_code": error,
                "log_start_offset": appended.log_start_offset,
                "error_message": appended.message,
            }
        return answer | {
            "error_code": ErrorCode.NONE,
            "base_offset": appended.base_offset,
            "log_append_time_ms": appended.log_append_time_ms,
            "log_start_offset": appended.log_start_offset,
        }

    # -- Fetch -----------------------------------------------------------------------------
    async def fetch(self, request: Request) -> Body:
        body = request.body
        replica_id = body.get("replica_id", CONSUMER_REPLICA_ID)
        max_wait_ms = max(0, min(body["max_wait_ms"], limits.FETCH_MAX_WAIT_MS_MAX))
        deadline = time.monotonic() + max_wait_ms / 1000
        keys = [(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
        while True:
            responses, total_bytes, has_error = self._fetch_once(body, replica_id)
            remaining_s = deadline - time.monotonic()
            if total_bytes >= body["min_bytes"] or has_error or remaining_s <= 0 or not keys:
                break
            await self.replicas.wait_for_data(keys, remaining_s)
        if replica_id == CONSUMER_REPLICA_ID:
            self._count_fetched(body, responses)
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "session_id": 0,
            "responses": responses,
        }

    def _count_fetched(self, body: Body, responses: list[Body]) -> None:
        for topic, answer in zip(body["topics"], responses, strict=True):
            for request, partition in zip(topic["partitions"], answer["partitions"], strict=True):
                records = partition["records"]
                if isinstance(records, FileSlice):
                    self.traffic.fetched(request["fetch_offset"], records.next_offset, records.size)

    def _fetch_once(self, body: Body, replica_id: int) -> tuple[list[Body], int, bool]:
        budget = body.get("max_bytes", 2**31 - 1)
        total_bytes = 0
        has_error = False
        responses = []
        for topic in body["topics"]:
            partitions = []
            for request in topic["partitions"]:
                max_bytes = max(0, min(request["partition_max_bytes"], budget - total_bytes))
                answer = self._fetch_partition(
                    topic["topic"], request, replica_id, max_bytes, min_one_batch=total_bytes == 0
                )
                records = answer["records"]
                size = len(records) if isinstance(records, bytes) else records.size
                total_bytes += size
                has_error |= answer["error_code"] != ErrorCode.NONE
                partitions.append(answer)
            responses.append({"topic": topic["topic"], "partitions": partitions})
        return responses, total_bytes, has_error

    def _fetch_partition(
        self, topic: str, request: Body, replica_id: int, max_bytes: int, *, min_one_batch: bool
    ) -> Body:
        index = request["partition"]
        answer = empty_fetch_partition(index)
        replica = self.replicas.replica(topic, index)
        if replica is None:
            code = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER
                if self.image.partition(topic, index) is not None
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return answer | {"error_code": code}
        if replica_id >= 0:
            found = replica.on_follower_fetch(
                replica_id,
                request["fetch_offset"],
                request.get("last_fetched_epoch", NO_EPOCH),
                request["current_leader_epoch"],
                now_ms(),
                max_bytes=max_bytes,
                min_one_batch=min_one_batch,
            )
            self.replicas.handle_effects(found.effects)
            return answer | {
                "error_code": found.error,
                "high_watermark": found.high_watermark,
                "last_stable_offset": found.high_watermark,
                "log_start_offset": found.log_start_offset,
                "records": found.records if found.records is not None else b"",
            }
        result = replica.on_consumer_fetch(
            request["fetch_offset"],
            max_bytes,
            current_leader_epoch=request["current_leader_epoch"],
            min_one_batch=min_one_batch,
        )
        return answer | {
            "error_code": result.error,
            "high_watermark": result.high_watermark,
            "last_stable_offset": result.last_stable_offset,
            "log_start_offset": result.log_start_offset,
            "records": result.records if result.records is not None else b"",
        }

    # -- ListOffsets -----------------------------------------------------------------------
    async def list_offsets(self, request: Request) -> Body:
        replica_id = request.body.get("replica_id", CONSUMER_REPLICA_ID)
        topics = []
        for topic in request.body["topics"]:
            partitions = [
                self._list_offset(topic["name"], p, replica_id) for p in topic["partitions"]
            ]
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(self, topic: str, request: Body, replica_id: int) -> Body:
        index = request["partition_index"]
        answer: Body = {
            "partition_index": index,
            "error_code": ErrorCode.NONE,
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }
        replica = self.replicas.replica(topic, index)
        if replica is None:
            known = self.image.partition(topic, index) is not None
            code = (
                ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return answer | {"error_code": code}
        # As Kafka: tools (replica id -2) may ask any replica; clients and followers the leader.
        if replica_id != DEBUGGING_REPLICA_ID:
            error = replica.leader_error(request["current_leader_epoch"])
            if error is None and replica_id == CONSUMER_REPLICA_ID and not replica.serves_consumers:
                error = ErrorCode.OFFSET_NOT_AVAILABLE  # KIP-207: a new leader's HW lags
            if error is not None:
                return answer | {"error_code": error}
        epoch = replica.leader_epoch
        timestamp = request["timestamp"]
        if timestamp == EARLIEST_TIMESTAMP:
            return answer | {"offset": replica.log_start_offset, "leader_epoch": epoch}
        if timestamp == LATEST_TIMESTAMP:
            # Consumers see the high watermark; replicas and tools the log end.
            latest = (
                replica.high_watermark
                if replica_id == CONSUMER_REPLICA_ID
                else replica.log_end_offset
            )
            return answer | {"offset": latest, "leader_epoch": epoch}
        if timestamp < 0:
            return answer | {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        found = replica.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= replica.high_watermark:
            return answer
        offset, found_timestamp = found
        return answer | {"offset": offset, "timestamp": found_timestamp, "leader_epoch": epoch}

    # -- admin requests: forwarded to the controller ----------------------------------------
    def _controller_timeout_s(self) -> float:
        return self.settings.replica_socket_timeout_ms / 1000

    async def _forward(self, request: Request) -> Body:
        """The controller's answer, or REQUEST_TIMED_OUT on everything the request named."""
        try:
            return await self.link.forward(
                ApiKey(request.api_key),
                request.api_version,
                request.body,
                self._controller_timeout_s(),
            )
        except WireError as error:
            log.warning("forwarding %s to the controller: %s", ApiKey(request.api_key).name, error)
            return error_answer(request, ErrorCode.REQUEST_TIMED_OUT)

    async def create_topics(self, request: Request) -> Body:
        answer = await self._forward(request)
        if not request.body.get("validate_only", False):
            created = [t["name"] for t in answer["topics"] if t["error_code"] == ErrorCode.NONE]
            wait_s = min(TOPIC_PROPAGATION_WAIT_S, max(0, request.body["timeout_ms"]) / 1000)
            await self.link.wait_for_image(
                lambda image: all(_has_leaders(image, name) for name in created), wait_s
            )
        return answer

    async def delete_topics(self, request: Request) -> Body:
        answer = await self._forward(request)
        deleted = [r["name"] for r in answer["responses"] if r["error_code"] == ErrorCode.NONE]
        await self.link.wait_for_image(
            lambda image: not any(name in image.topics for name in deleted),
            TOPIC_PROPAGATION_WAIT_S,
        )
        return answer

    async def incremental_alter_configs(self, request: Request) -> Body:
        before = self.image.last_offset
        answer = await self._forward(request)
        # Like CreateTopics: the next DescribeConfigs here should show the change, which the
        # controller committed before it answered.
        changed = any(r["error_code"] == ErrorCode.NONE for r in answer["responses"])
        if changed and not request.body.get("validate_only", False):
            await self.link.wait_for_image(
                lambda image: image.last_offset > before, TOPIC_PROPAGATION_WAIT_S
            )
        return answer

    # -- DescribeConfigs -------------------------------------------------------------------
    async def describe_configs(self, request: Request) -> Body:
        results = [self._describe_resource(r) for r in request.body["resources"]]
        return {"throttle_time_ms": 0, "results": results}

    def _describe_resource(self, resource: Body) -> Body:
        kind, name = resource["resource_type"], resource["resource_name"]
        wanted = resource.get("configuration_keys")
        result: Body = {
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "resource_type": kind,
            "resource_name": name,
            "configs": [],
        }
        image = self.image
        if kind == RESOURCE_TOPIC:
            topic = image.topics.get(name)
            if topic is None:
                return result | {
                    "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "error_message": f"topic {name} does not exist",
                }
            values = self.replicas.topic_log_config(image, name).to_kafka_properties()
            replica_config = self.replicas.replica_config(image, name)
            values["min.insync.replicas"] = str(replica_config.min_insync_replicas)
            values["unclean.leader.election.enable"] = str(
                replica_config.unclean_leader_election_enable
            ).lower()
            sources = {key: SOURCE_DEFAULT_CONFIG for key in values}
            sources |= {key: SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG for key in image.cluster_configs}
            sources |= {key: SOURCE_DYNAMIC_TOPIC_CONFIG for key in topic.configs}
        elif kind == RESOURCE_BROKER:
            if name not in ("", str(self.broker_id)):
                return result | {
                    "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": f"no broker {name} here",
                }
            values = self.settings.to_kafka_properties()
            sources = {key: SOURCE_STATIC_BROKER_CONFIG for key in values}
        else:
            return result | {
                "error_code": ErrorCode.INVALID_REQUEST,
                "error_message": f"resource type {kind} is not supported",
            }
        configs = []
        for key in sorted(values):
            if wanted is not None and key not in wanted:
                continue
            value = values[key]
            source = sources.get(key, SOURCE_DEFAULT_CONFIG)
            configs.append(
                {
                    "name": key,
                    "value": value,
                    "read_only": kind == RESOURCE_BROKER,
                    "is_default": source == SOURCE_DEFAULT_CONFIG,
                    "config_source": source,
                    "is_sensitive": False,
                    "synonyms": [],
                    "config_type": CONFIG_TYPE_LONG
                    if value.lstrip("-").isdigit()
                    else CONFIG_TYPE_STRING,
                    "documentation": None,
                }
            )
        return result | {"configs": configs}

    # -- OffsetForLeaderEpoch --------------------------------------------------------------
    async def offset_for_leader_epoch(self, request: Request) -> Body:
        """Where an epoch ends (KIP-101/279): consumers validate their position with it after
        a leader change, and followers find where their log diverges."""
        topics = []
        for topic in request.body["topics"]:
            partitions = []
            for wanted in topic["partitions"]:
                index = wanted["partition"]
                replica = self.replicas.replica(topic["topic"], index)
                if replica is None:
                    known = self.image.partition(topic["topic"], index) is not None
                    code = (
                        ErrorCode.NOT_LEADER_OR_FOLLOWER
                        if known
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    )
                    epoch, end_offset = -1, -1
                else:
                    code, epoch, end_offset = replica.offsets_for_leader_epoch(
                        wanted["leader_epoch"], wanted["current_leader_epoch"]
                    )
                partitions.append(
                    {"error_code": code, "partition": index, "leader_epoch": epoch,
                     "end_offset": end_offset}
                )  # fmt: skip
            topics.append({"topic": topic["topic"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    # -- InitProducerId --------------------------------------------------------------------
    async def init_producer_id(self, request: Request) -> Body:
        answer: Body = {"throttle_time_ms": 0, "producer_id": -1, "producer_epoch": -1}
        if request.body.get("transactional_id") is not None:
            # Transactions come with their coordinator in a later issue; say so instead of
            # handing out an id that a transactional producer would then misuse.
            return answer | {"error_code": ErrorCode.INVALID_REQUEST}
        try:
            producer_id = await self.producer_ids.allocate()
        except (WireError, RuntimeError) as error:
            log.warning("no producer id block from the controller: %s", error)
            return answer | {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        return answer | {
            "error_code": ErrorCode.NONE,
            "producer_id": producer_id,
            "producer_epoch": 0,
        }


def _has_leaders(image: MetadataImage, name: str) -> bool:
    topic = image.topics.get(name)
    return topic is not None and all(p.leader >= 0 for p in topic.partitions.values())
