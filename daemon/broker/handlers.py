"""One handler per Kafka API: decoded request body in, response body out.

Handlers build one response dict for every version; the codec keeps the fields a version has.
They never raise for bad input from a client: every problem becomes the protocol's error code on
the part of the request it concerns, and the rest of the request is still served.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rlog.core import limits
from rlog.core.controller.validation import topic_name_problem
from rlog.core.partition import SOLE_LEADER_EPOCH
from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon.broker.producer_ids import ProducerIdAllocator
from rlog.daemon.broker.replica_manager import ReplicaManager
from rlog.daemon.broker.topics import TopicInfo

log = logging.getLogger(__name__)

# Topic names follow the controller's rules; the single-broker store passes no existing names,
# so the check for names colliding on "." vs "_" arrives with the controller's metadata.
NO_EXISTING_TOPICS: tuple[str, ...] = ()

Body = dict[str, Any]
Handler = Callable[[Request], Awaitable[Body | None]]

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
# Until replication lands, every partition has had one leader, in this epoch.
LEADER_EPOCH = SOLE_LEADER_EPOCH

# DescribeConfigs resource types and config sources (Kafka's ConfigResource / ConfigSource).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_LONG = 5


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Handlers:
    def __init__(
        self,
        broker_id: int,
        host: str,
        port: int,
        cluster_id: str,
        replicas: ReplicaManager,
        producer_ids: ProducerIdAllocator,
    ) -> None:
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.cluster_id = cluster_id
        self.replicas = replicas
        self.settings = replicas.settings
        self.producer_ids = producer_ids
        self.table: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
        }
        missing = set(SUPPORTED) - set(self.table)
        assert not missing, f"advertised APIs without a handler: {missing}"

    async def handle(self, request: Request) -> Body | None:
        return await self.table[ApiKey(request.api_key)](request)

    # -- ApiVersions -----------------------------------------------------------------------
    async def api_versions(self, request: Request) -> Body:
        if request.unsupported_version:
            low, high = SUPPORTED[ApiKey.API_VERSIONS]
            return {
                "error_code": ErrorCode.UNSUPPORTED_VERSION,
                "api_keys": [
                    {"api_key": ApiKey.API_VERSIONS, "min_version": low, "max_version": high}
                ],
            }
        return {
            "error_code": ErrorCode.NONE,
            "api_keys": [
                {"api_key": key, "min_version": low, "max_version": high}
                for key, (low, high) in sorted(SUPPORTED.items())
            ],
            "throttle_time_ms": 0,
        }

    # -- Metadata --------------------------------------------------------------------------
    async def metadata(self, request: Request) -> Body:
        body = request.body
        requested = body.get("topics")
        topics = self.replicas.topics.topics
        names = sorted(topics) if requested is None else [t["name"] for t in requested]
        allow_auto_create = body.get("allow_auto_topic_creation", True)
        results = []
        for name in names:
            if (
                name not in topics
                and allow_auto_create
                and self.settings.auto_create_topics_enable
                and topic_name_problem(name, NO_EXISTING_TOPICS) is None
            ):
                log.info("auto-creating topic %s", name)
                self.replicas.create_topic(TopicInfo(name, self.settings.num_partitions))
            results.append(self._topic_metadata(name))
        return {
            "throttle_time_ms": 0,
            "brokers": [
                {"node_id": self.broker_id, "host": self.host, "port": self.port, "rack": None}
            ],
            "cluster_id": self.cluster_id,
            "controller_id": self.broker_id,
            "topics": results,
            "cluster_authorized_operations": -(2**31),
        }

    def _topic_metadata(self, name: str) -> Body:
        topic = self.replicas.topics.topics.get(name)
        if topic is None:
            problem = topic_name_problem(name, NO_EXISTING_TOPICS)
            code = (
                ErrorCode.INVALID_TOPIC_EXCEPTION
                if problem
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            return {"error_code": code, "name": name, "is_internal": False, "partitions": []}
        partitions = [
            {
                "error_code": ErrorCode.NONE,
                "partition_index": index,
                "leader_id": self.broker_id,
                "leader_epoch": LEADER_EPOCH,
                "replica_nodes": [self.broker_id],
                "isr_nodes": [self.broker_id],
                "offline_replicas": [],
            }
            for index in range(topic.partitions)
        ]
        return {
            "error_code": ErrorCode.NONE,
            "name": name,
            "is_internal": False,
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
        responses = []
        for topic in body["topic_data"]:
            partition_responses = []
            for data in topic["partition_data"]:
                partition_responses.append(
                    self._produce_partition(topic["name"], data, acks, storage_error)
                )
            responses.append({"name": topic["name"], "partition_responses": partition_responses})
        if acks == 0:
            return None  # acks=0: the client expects no answer at all
        return {"responses": responses, "throttle_time_ms": 0}

    def _produce_partition(
        self, topic: str, data: Body, acks: int, storage_error: ErrorCode
    ) -> Body:
        index = data["index"]
        answer: Body = {
            "index": index,
            "base_offset": -1,
            "log_append_time_ms": -1,
            "log_start_offset": -1,
        }
        if acks not in (0, 1, -1):
            return answer | {"error_code": ErrorCode.INVALID_REQUIRED_ACKS}
        partition = self.replicas.partition(topic, index)
        if partition is None:
            return answer | {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        now = now_ms()
        try:
            result = partition.append(data["records"], now)
            if result.error == ErrorCode.NONE and partition.log.flush_due(now):
                partition.log.flush()
        except OSError as error:
            log.error("storage error appending to %s-%d: %s", topic, index, error)
            return answer | {
                "error_code": storage_error,
                "error_message": f"storage error: {error}",
            }
        if result.error != ErrorCode.NONE:
            log.info("produce to %s-%d refused: %s", topic, index, result.error_message)
        else:
            self.replicas.notify((topic, index))
        return {
            "index": index,
            "error_code": result.error,
            "base_offset": result.base_offset,
            "log_append_time_ms": result.log_append_time_ms,
            "log_start_offset": result.log_start_offset,
            "record_errors": [],
            "error_message": result.error_message,
        }

    # -- Fetch -----------------------------------------------------------------------------
    async def fetch(self, request: Request) -> Body:
        body = request.body
        max_wait_ms = max(0, min(body["max_wait_ms"], limits.FETCH_MAX_WAIT_MS_MAX))
        deadline = time.monotonic() + max_wait_ms / 1000
        keys = [(t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]]
        while True:
            responses, total_bytes, has_error = self._fetch_once(body)
            remaining_s = deadline - time.monotonic()
            if total_bytes >= body["min_bytes"] or has_error or remaining_s <= 0 or not keys:
                break
            await self.replicas.wait_for_data(keys, remaining_s)
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "session_id": 0,
            "responses": responses,
        }

    def _fetch_once(self, body: Body) -> tuple[list[Body], int, bool]:
        budget = body.get("max_bytes", 2**31 - 1)
        total_bytes = 0
        has_error = False
        responses = []
        for topic in body["topics"]:
            partitions = []
            for request in topic["partitions"]:
                answer = self._fetch_partition(
                    topic["topic"],
                    request,
                    max(0, min(request["partition_max_bytes"], budget - total_bytes)),
                    min_one_batch=total_bytes == 0,
                )
                records = answer["records"]
                size = len(records) if isinstance(records, bytes) else records.size
                total_bytes += size
                has_error |= answer["error_code"] != ErrorCode.NONE
                partitions.append(answer)
            responses.append({"topic": topic["topic"], "partitions": partitions})
        return responses, total_bytes, has_error

    def _fetch_partition(
        self, topic: str, request: Body, max_bytes: int, *, min_one_batch: bool
    ) -> Body:
        index = request["partition"]
        answer: Body = {
            "partition_index": index,
            "error_code": ErrorCode.NONE,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": [],
            "preferred_read_replica": -1,
            # Empty, not null: librdkafka rejects a null record set as a protocol error.
            "records": b"",
        }
        partition = self.replicas.partition(topic, index)
        if partition is None:
            return answer | {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        result = partition.read(
            request["fetch_offset"],
            max_bytes,
            min_one_batch=min_one_batch,
            current_leader_epoch=request["current_leader_epoch"],
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
        topics = []
        for topic in request.body["topics"]:
            partitions = [self._list_offset(topic["name"], p) for p in topic["partitions"]]
            topics.append({"name": topic["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offset(self, topic: str, request: Body) -> Body:
        index = request["partition_index"]
        answer: Body = {
            "partition_index": index,
            "error_code": ErrorCode.NONE,
            "timestamp": -1,
            "offset": -1,
            "leader_epoch": -1,
        }
        partition = self.replicas.partition(topic, index)
        if partition is None:
            return answer | {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        epoch_error = partition.leader_epoch_error(request["current_leader_epoch"])
        if epoch_error is not None:
            return answer | {"error_code": epoch_error}
        timestamp = request["timestamp"]
        if timestamp == EARLIEST_TIMESTAMP:
            return answer | {"offset": partition.log_start_offset, "leader_epoch": LEADER_EPOCH}
        if timestamp == LATEST_TIMESTAMP:
            return answer | {"offset": partition.high_watermark, "leader_epoch": LEADER_EPOCH}
        if timestamp < 0:
            return answer | {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        found = partition.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= partition.high_watermark:
            return answer
        offset, found_timestamp = found
        return answer | {
            "offset": offset,
            "timestamp": found_timestamp,
            "leader_epoch": LEADER_EPOCH,
        }

    # -- CreateTopics / DeleteTopics --------------------------------------------------------
    async def create_topics(self, request: Request) -> Body:
        body = request.body
        seen: set[str] = set()
        results = []
        for topic in body["topics"]:
            code, message = self._create_topic(topic, body.get("validate_only", False), seen)
            results.append({"name": topic["name"], "error_code": code, "error_message": message})
            seen.add(topic["name"])
        return {"throttle_time_ms": 0, "topics": results}

    def _create_topic(
        self, topic: Body, validate_only: bool, seen: set[str]
    ) -> tuple[ErrorCode, str | None]:
        name = topic["name"]
        problem = topic_name_problem(name, NO_EXISTING_TOPICS)
        if problem:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, problem
        if name in seen:
            return ErrorCode.INVALID_REQUEST, f"topic {name} appears twice in the request"
        if name in self.replicas.topics.topics:
            return ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists."
        partitions = topic["num_partitions"]
        replication_factor = topic["replication_factor"]
        assignments = topic.get("assignments") or []
        if assignments:
            if partitions != -1 or replication_factor != -1:
                return (
                    ErrorCode.INVALID_REQUEST,
                    "give either assignments or partitions and replication factor",
                )
            if any(a["broker_ids"] != [self.broker_id] for a in assignments):
                return (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"this cluster has one broker, id {self.broker_id}",
                )
            partitions, replication_factor = len(assignments), 1
        if partitions == -1:
            partitions = self.settings.num_partitions
        if replication_factor == -1:
            replication_factor = self.settings.default_replication_factor
        if not 1 <= partitions <= limits.TOPIC_PARTITIONS_MAX:
            return (
                ErrorCode.INVALID_PARTITIONS,
                f"number of partitions must be within 1..{limits.TOPIC_PARTITIONS_MAX}",
            )
        if replication_factor < 1:
            return ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be larger than 0"
        if replication_factor > 1:
            return (
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication_factor} larger than available brokers: 1.",
            )
        configs = {c["name"]: c["value"] for c in topic.get("configs") or []}
        info = TopicInfo(name, partitions, configs)
        try:
            self.replicas.topic_log_config(info)
        except ValueError as error:
            return ErrorCode.INVALID_CONFIG, str(error)
        if not validate_only:
            self.replicas.create_topic(info)
            log.info("created topic %s with %d partitions, configs %s", name, partitions, configs)
        return ErrorCode.NONE, None

    async def delete_topics(self, request: Request) -> Body:
        responses = []
        for name in request.body["topic_names"]:
            if name not in self.replicas.topics.topics:
                responses.append({"name": name, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})
                continue
            self.replicas.delete_topic(name)
            log.info("deleted topic %s", name)
            responses.append({"name": name, "error_code": ErrorCode.NONE})
        return {"throttle_time_ms": 0, "responses": responses}

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
        if kind == RESOURCE_TOPIC:
            topic = self.replicas.topics.topics.get(name)
            if topic is None:
                return result | {
                    "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    "error_message": f"topic {name} does not exist",
                }
            values = self.replicas.topic_log_config(topic).to_kafka_properties()
            overridden, default_source = set(topic.configs), SOURCE_DEFAULT_CONFIG
        elif kind == RESOURCE_BROKER:
            if name not in ("", str(self.broker_id)):
                return result | {
                    "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": f"no broker {name} here",
                }
            values = self.settings.to_kafka_properties()
            overridden, default_source = set(), SOURCE_STATIC_BROKER_CONFIG
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
            source = SOURCE_TOPIC_CONFIG if key in overridden else default_source
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
                partition = self.replicas.partition(topic["topic"], index)
                if partition is None:
                    code, epoch, end_offset = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
                else:
                    code, epoch, end_offset = partition.replica.offsets_for_leader_epoch(
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
        if request.body.get("transactional_id") is not None:
            # Transactions come with their coordinator in a later issue; say so instead of
            # handing out an id that a transactional producer would then misuse.
            return {
                "throttle_time_ms": 0,
                "error_code": ErrorCode.INVALID_REQUEST,
                "producer_id": -1,
                "producer_epoch": -1,
            }
        # Synchronous on purpose: the allocator is not thread-safe, and it fsyncs only once
        # per block of ids.
        producer_id = self.producer_ids.allocate()
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "producer_id": producer_id,
            "producer_epoch": 0,
        }
