"""One handler per Kafka API: decoded request body in, response body out.

Handlers build one response dict for every version; the codec keeps the fields a version has.
They never raise for bad input from a client: every problem becomes the protocol's error code on
the part of the request it concerns, and the rest of the request is still served. Cluster state
(brokers, topics, leaders, ISRs) comes from the metadata image the controller link keeps; admin
requests (create/delete topics, partitions, elections, config changes) are forwarded to the
controller, and sent again while it does not answer (restarting, say) for up to a minute, as
Kafka's brokers do, before the client is answered REQUEST_TIMED_OUT. Produce, Fetch,
ListOffsets and OffsetForLeaderEpoch are the broker core's: it answers them. The answers that
are pure functions of the image, the settings and the core's logs are built in
config_answers.py (DescribeConfigs, AlterConfigs), log_dirs.py (DescribeLogDirs) and
topic_partitions.py (Metadata's entries, DescribeTopicPartitions).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from rlog.core.controller import security_admin
from rlog.core.controller.validation import topic_name_problem
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import SUPPORTED, ApiKey, api_versions_body
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.sasl import authenticate_body, handshake_body
from rlog.daemon.broker.config_answers import (
    ConfigLevels,
    alter_configs_answer,
    alter_configs_error,
    changes_nothing,
    describe_configs,
    legacy_alter_as_incremental,
    shows_configs,
)
from rlog.daemon.broker.controller_link import FORWARD_RETRY_S, ControllerLink
from rlog.daemon.broker.core_driver import BrokerDriver
from rlog.daemon.broker.groups import GroupService
from rlog.daemon.broker.log_dirs import describe_log_dirs
from rlog.daemon.broker.server import CLIENT_HOST, LISTENER
from rlog.daemon.broker.topic_partitions import (
    ZERO_TOPIC_ID,
    describe_topic_partitions,
    is_internal,
    partition_metadata,
    topic_name_error,
)
from rlog.daemon.config import BrokerSettings
from rlog.daemon.error_answers import error_answer
from rlog.daemon.wire import WireError

log = logging.getLogger(__name__)

Body = dict[str, Any]
Handler = Callable[[Request], Awaitable[Body | None]]

# How long a CreateTopics answer waits for the new topic to reach this broker's metadata, so
# the client's next Metadata here shows it.
TOPIC_PROPAGATION_WAIT_S = 5.0
AUTO_CREATE_WAIT_S = 1.0
# The IncrementalAlterConfigs version a legacy AlterConfigs goes to the controller as.
INCREMENTAL_ALTER_CONFIGS_VERSION = 0


class Handlers:
    def __init__(
        self,
        broker_id: int,
        cluster_id: str,
        settings: BrokerSettings,
        driver: BrokerDriver,
        link: ControllerLink,
        groups: GroupService,
    ) -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.driver = driver
        self.link = link
        self.settings = settings
        self.groups = groups
        self.config_levels = ConfigLevels.of(settings)
        self.table: dict[ApiKey, Handler] = {
            ApiKey.API_VERSIONS: self.api_versions,
            # A SASL listener's connections answer these themselves (server.py): here they
            # came to a listener without SASL.
            ApiKey.SASL_HANDSHAKE: self.sasl_without_sasl,
            ApiKey.SASL_AUTHENTICATE: self.sasl_without_sasl,
            ApiKey.METADATA: self.metadata,
            # The broker core's own APIs: it answers them (core/broker).
            ApiKey.PRODUCE: self._served_by_core,
            ApiKey.FETCH: self._served_by_core,
            ApiKey.LIST_OFFSETS: self._served_by_core,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._served_by_core,
            ApiKey.DELETE_RECORDS: self._served_by_core,
            ApiKey.DESCRIBE_PRODUCERS: self._served_by_core,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self._forward,
            ApiKey.ELECT_LEADERS: self._forward,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            ApiKey.ALTER_CONFIGS: self.alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.DESCRIBE_LOG_DIRS: self.describe_log_dirs,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self.describe_topic_partitions,
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            # Producer ids, the transaction coordinator and transaction markers: the core's.
            ApiKey.INIT_PRODUCER_ID: self._served_by_core,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._served_by_core,
            ApiKey.ADD_OFFSETS_TO_TXN: self._served_by_core,
            ApiKey.END_TXN: self._served_by_core,
            ApiKey.WRITE_TXN_MARKERS: self._served_by_core,
            ApiKey.TXN_OFFSET_COMMIT: self._served_by_core,
            ApiKey.DESCRIBE_TRANSACTIONS: self._served_by_core,
            ApiKey.LIST_TRANSACTIONS: self._served_by_core,
            # The group coordinator runs in the broker core too.
            ApiKey.JOIN_GROUP: self._served_by_core,
            ApiKey.SYNC_GROUP: self._served_by_core,
            ApiKey.HEARTBEAT: self._served_by_core,
            ApiKey.LEAVE_GROUP: self._served_by_core,
            ApiKey.OFFSET_COMMIT: self._served_by_core,
            ApiKey.OFFSET_FETCH: self._served_by_core,
            ApiKey.DESCRIBE_GROUPS: self._served_by_core,
            ApiKey.LIST_GROUPS: self._served_by_core,
            ApiKey.DELETE_GROUPS: self._served_by_core,
            ApiKey.OFFSET_DELETE: self._served_by_core,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._served_by_core,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._served_by_core,
            # ACLs and SCRAM credentials: changes go to the controller, descriptions come from
            # this broker's image (Kafka's brokers answer from their authorizer and cache).
            ApiKey.CREATE_ACLS: self.create_acls,
            ApiKey.DELETE_ACLS: self.delete_acls,
            ApiKey.DESCRIBE_ACLS: self.describe_acls,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
        }
        missing = set(SUPPORTED) - set(self.table)
        assert not missing, f"advertised APIs without a handler: {missing}"
        self._core_served = frozenset(
            key for key, handler in self.table.items() if handler == self._served_by_core
        )

    @property
    def image(self) -> MetadataImage:
        return self.link.image

    def serve_now(
        self, request: Request, client_host: str, reply: Callable[[Body | None], None]
    ) -> bool:
        """Requests the broker core serves go straight to it, answered through `reply`; the
        rest (False) run `handle` in a task of their own."""
        if request.api_key not in self._core_served:
            return False
        body = request.body or {}
        self.driver.submit(
            request.api_key, request.api_version, body, request.client_id, client_host, reply
        )
        return True

    async def handle(self, request: Request) -> Body | None:
        return await self.table[ApiKey(request.api_key)](request)

    # -- ApiVersions -----------------------------------------------------------------------
    async def api_versions(self, request: Request) -> Body:
        return api_versions_body(SUPPORTED, unsupported=request.unsupported_version)

    async def sasl_without_sasl(self, request: Request) -> Body:
        """SaslHandshake or SaslAuthenticate on a listener that does not authenticate, as
        Kafka answers it: ILLEGAL_SASL_STATE, no mechanisms."""
        message = f"listener {LISTENER.get()} does not use SASL"
        if request.api_key == ApiKey.SASL_HANDSHAKE:
            return handshake_body(ErrorCode.ILLEGAL_SASL_STATE)
        return authenticate_body(ErrorCode.ILLEGAL_SASL_STATE, message)

    # -- Metadata --------------------------------------------------------------------------
    async def metadata(self, request: Request) -> Body:
        body = request.body
        requested = body.get("topics")
        image = self.image
        # v12 may name a topic by its id alone (KIP-516); an id nobody has is UNKNOWN_TOPIC_ID.
        by_id = [t["topic_id"] for t in requested or () if t.get("name") is None]
        names = (
            sorted(image.topics)
            if requested is None
            else [t["name"] for t in requested if t.get("name") is not None]
        )
        allow_auto_create = body.get("allow_auto_topic_creation", True)
        if requested is not None and allow_auto_create and self.settings.auto_create_topics_enable:
            await self._auto_create([n for n in names if n not in image.topics])
        image = self.image
        live = image.live_brokers()
        live_ids = {b.broker_id for b in live}
        topics = [self._topic_metadata(image, name, live_ids) for name in names]
        topics += [self._topic_metadata_by_id(image, topic_id, live_ids) for topic_id in by_id]
        controller_id = self.broker_id if self.broker_id in live_ids else -1
        if controller_id == -1 and live_ids:
            controller_id = min(live_ids)
        # Each broker as this connection's listener reaches it; one without that listener is
        # left out, as Kafka does.
        listener = LISTENER.get()
        endpoints = [(b, b.endpoint(listener)) for b in sorted(live, key=lambda b: b.broker_id)]
        return {
            "throttle_time_ms": 0,
            "brokers": [
                {"node_id": b.broker_id, "host": e.host, "port": e.port, "rack": b.rack}
                for b, e in endpoints
                if e is not None
            ],
            "cluster_id": self.cluster_id,
            # Admin clients send topic requests here; every broker forwards them.
            "controller_id": controller_id,
            "topics": topics,
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
            code = topic_name_error(name)
            return {"error_code": code, "name": name, "topic_id": ZERO_TOPIC_ID,
                    "is_internal": False, "partitions": []}  # fmt: skip
        partitions = [
            partition_metadata(index, info, live_ids)
            for index, info in sorted(topic.partitions.items())
        ]
        return {
            "error_code": ErrorCode.NONE,
            "name": name,
            "topic_id": uuid.UUID(topic.topic_id),  # v10+
            "is_internal": is_internal(name),
            "partitions": partitions,
            "topic_authorized_operations": -(2**31),
        }

    def _topic_metadata_by_id(
        self, image: MetadataImage, topic_id: uuid.UUID, live_ids: set[int]
    ) -> Body:
        for topic in image.topics.values():
            if uuid.UUID(topic.topic_id) == topic_id:
                return self._topic_metadata(image, topic.name, live_ids)
        return {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id,
                "is_internal": False, "partitions": []}  # fmt: skip

    # -- DescribeTopicPartitions -----------------------------------------------------------
    async def describe_topic_partitions(self, request: Request) -> Body:
        return describe_topic_partitions(self.image, request.body)

    # -- Produce, Fetch, ListOffsets, OffsetForLeaderEpoch -------------------------------
    async def _served_by_core(self, request: Request) -> Body | None:
        return await self.driver.request(
            ApiKey(request.api_key),
            request.api_version,
            request.body or {},
            request.client_id,
            CLIENT_HOST.get(),
        )

    # -- FindCoordinator -------------------------------------------------------------------
    async def find_coordinator(self, request: Request) -> Body:
        body = request.body or {}
        error, message, where = await self.groups.find_coordinator(
            body.get("key") or "", body.get("key_type", 0)
        )
        broker = self.image.brokers.get(where["node_id"])
        endpoint = broker.endpoint(LISTENER.get()) if broker is not None else None
        if endpoint is not None:  # the coordinator as this connection's listener reaches it
            where = where | {"host": endpoint.host, "port": endpoint.port}
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message, **where}

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
                retry_for_s=FORWARD_RETRY_S,
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
        no_op = changes_nothing(self.image, request.body)
        answer = await self._forward(request)
        # Like CreateTopics: the next DescribeConfigs here should show the change, which the
        # controller committed before it answered (a request that changed nothing wrote none).
        changed = any(r["error_code"] == ErrorCode.NONE for r in answer["responses"])
        if changed and not no_op and not request.body.get("validate_only", False):
            await self.link.wait_for_image(
                lambda image: image.last_offset > before, TOPIC_PROPAGATION_WAIT_S
            )
        return answer

    # -- ACLs and SCRAM credentials --------------------------------------------------------
    async def _forward_security(self, request: Request) -> Body:
        """The controller's answer, or REQUEST_TIMED_OUT on everything the request named."""
        api_key = ApiKey(request.api_key)
        try:
            return await self.link.forward(
                api_key,
                request.api_version,
                request.body,
                self._controller_timeout_s(),
                retry_for_s=FORWARD_RETRY_S,
            )
        except WireError as error:
            log.warning("forwarding %s to the controller: %s", api_key.name, error)
            return security_admin.security_error_answer(
                api_key, request.body, ErrorCode.REQUEST_TIMED_OUT, "the controller did not answer"
            )

    async def create_acls(self, request: Request) -> Body:
        answer = await self._forward_security(request)
        # As CreateTopics: a DescribeAcls here right after shows what was created.
        created = security_admin.created_acls(request.body, answer)
        await self.link.wait_for_image(
            lambda image: all(binding in image.authorizer for binding in created),
            TOPIC_PROPAGATION_WAIT_S,
        )
        return answer

    async def delete_acls(self, request: Request) -> Body:
        answer = await self._forward_security(request)
        deleted = security_admin.deleted_acls(answer)
        await self.link.wait_for_image(
            lambda image: not any(binding in image.authorizer for binding in deleted),
            TOPIC_PROPAGATION_WAIT_S,
        )
        return answer

    async def describe_acls(self, request: Request) -> Body:
        return security_admin.describe_acls_answer(self.image, request.body)

    async def alter_user_scram_credentials(self, request: Request) -> Body:
        answer = await self._forward_security(request)
        await self.link.wait_for_image(
            lambda image: security_admin.shows_scram_changes(image, request.body, answer),
            TOPIC_PROPAGATION_WAIT_S,
        )
        return answer

    async def describe_user_scram_credentials(self, request: Request) -> Body:
        return security_admin.describe_user_scram_credentials_answer(self.image, request.body)

    # -- AlterConfigs (legacy: replaces a resource's whole set of dynamic configs) ----------
    async def alter_configs(self, request: Request) -> Body:
        """Forwarded as the IncrementalAlterConfigs that makes the resource's dynamic configs
        exactly the ones named, so the controller validates and applies it as every change."""
        body = request.body
        incremental = legacy_alter_as_incremental(body, self.image)
        try:
            answer = await self.link.forward(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                INCREMENTAL_ALTER_CONFIGS_VERSION,
                incremental,
                self._controller_timeout_s(),
                retry_for_s=FORWARD_RETRY_S,
            )
        except WireError as error:
            log.warning("forwarding AlterConfigs to the controller: %s", error)
            return alter_configs_error(
                body, ErrorCode.REQUEST_TIMED_OUT, "the controller did not answer"
            )
        altered = [
            resource
            for resource, result in zip(body["resources"], answer["responses"], strict=True)
            if result["error_code"] == ErrorCode.NONE
        ]
        if altered and not body["validate_only"]:
            # As after IncrementalAlterConfigs: the next DescribeConfigs here shows the change.
            await self.link.wait_for_image(
                lambda image: all(shows_configs(image, resource) for resource in altered),
                TOPIC_PROPAGATION_WAIT_S,
            )
        return alter_configs_answer(body, answer)

    # -- DescribeConfigs -------------------------------------------------------------------
    async def describe_configs(self, request: Request) -> Body:
        return describe_configs(
            request.body,
            broker_id=self.broker_id,
            image=self.image,
            config=self.driver.core.config,
            levels=self.config_levels,
        )

    # -- DescribeLogDirs -------------------------------------------------------------------
    async def describe_log_dirs(self, request: Request) -> Body:
        # Read between two steps of the core (this task runs on the core's event loop).
        return describe_log_dirs(self.driver.core, request.body.get("topics"))

    # -- InitProducerId --------------------------------------------------------------------


def _has_leaders(image: MetadataImage, name: str) -> bool:
    topic = image.topics.get(name)
    return topic is not None and all(p.leader >= 0 for p in topic.partitions.values())
