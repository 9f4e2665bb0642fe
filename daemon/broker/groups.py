"""Where a group's coordinator is (FindCoordinator), and `__consumer_offsets` made on first use.

The coordinator itself runs in the broker core (core/broker/group_hosting.py); this module only
needs what the core cannot do: ask the controller to create `__consumer_offsets` on the first
FindCoordinator, as Kafka does (compacted, `offsets.topic.num.partitions` partitions,
`offsets.topic.replication.factor` replicas capped by the brokers that are up), and say where
a group lives until then.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from rlog.core.broker import OFFSETS_TOPIC
from rlog.core.groups import GroupConfig, group_partition
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon.broker.controller_link import ControllerLink
from rlog.daemon.config import BrokerSettings
from rlog.daemon.wire import WireError

log = logging.getLogger(__name__)

Body = dict[str, Any]
GROUP_KEY_TYPE = 0
CREATE_WAIT_S = 2.0


def group_config(settings: BrokerSettings) -> GroupConfig:
    """The group coordinator's settings from the [broker] table."""
    return GroupConfig(
        offsets_partitions=settings.offsets_topic_num_partitions,
        min_session_timeout_ms=settings.group_min_session_timeout_ms,
        max_session_timeout_ms=settings.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        max_group_size=settings.group_max_size,
        offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
    )


def new_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"  # Kafka's form: the client id and a UUID


class GroupService:
    def __init__(self, broker_id: int, settings: BrokerSettings, link: ControllerLink) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.link = link
        self._creating: asyncio.Task[None] | None = None
        self._metadata_read = False  # this broker has read the metadata log to its end once

    def on_metadata(self) -> None:
        # Once caught up it stays "read": later records only trail by a fetch, and refusing
        # FindCoordinator whenever an ISR change is in flight would stall every client.
        self._metadata_read = self._metadata_read or self.link.caught_up

    # ---- FindCoordinator ---------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: int) -> tuple[ErrorCode, str | None, Body]:
        """(error, message, {node_id, host, port}) for one coordinator key."""
        nowhere = {"node_id": -1, "host": "", "port": -1}
        if key_type != GROUP_KEY_TYPE:
            message = "transaction coordinators are not supported by this broker yet"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        if not key:
            return ErrorCode.INVALID_REQUEST, "empty group id", nowhere
        if not self._metadata_read:
            # A restarted broker's image may still name it leader of partitions it lost.
            message = "this broker is still reading the cluster metadata"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        image = self.link.image
        if OFFSETS_TOPIC not in image.topics:
            await self._create_offsets_topic()
            image = self.link.image
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {OFFSETS_TOPIC}", nowhere
        partition = group_partition(key, len(topic.partitions))
        info = topic.partitions.get(partition)
        broker = image.brokers.get(info.leader) if info is not None else None
        if broker is None or not image.is_live(broker.broker_id):
            message = f"{OFFSETS_TOPIC}-{partition} has no leader"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        return (
            ErrorCode.NONE,
            None,
            {"node_id": broker.broker_id, "host": broker.host, "port": broker.port},
        )

    async def _create_offsets_topic(self) -> None:
        # One creation at a time per broker; concurrent callers wait for the same attempt.
        if self._creating is None or self._creating.done():
            self._creating = asyncio.ensure_future(self._create_offsets_topic_once())
        await asyncio.shield(self._creating)

    async def _create_offsets_topic_once(self) -> None:
        settings = self.settings
        live = len(self.link.image.live_brokers())
        replication = max(1, min(settings.offsets_topic_replication_factor, live))
        segment_bytes = settings.offsets_topic_segment_bytes
        body = {
            "topics": [
                {
                    "name": OFFSETS_TOPIC,
                    "num_partitions": settings.offsets_topic_num_partitions,
                    "replication_factor": replication,
                    "assignments": [],
                    "configs": [
                        {"name": "cleanup.policy", "value": "compact"},
                        {"name": "segment.bytes", "value": str(segment_bytes)},
                    ],
                }
            ],
            "timeout_ms": 5000,
            "validate_only": False,
        }
        log.info("creating %s with replication factor %d", OFFSETS_TOPIC, replication)
        try:
            timeout_s = settings.replica_socket_timeout_ms / 1000
            await self.link.forward(ApiKey.CREATE_TOPICS, 4, body, timeout_s)
        except WireError as error:
            log.warning("creating %s: %s", OFFSETS_TOPIC, error)
            return
        await self.link.wait_for_image(_offsets_topic_led, CREATE_WAIT_S)


def _offsets_topic_led(image: MetadataImage) -> bool:
    topic = image.topics.get(OFFSETS_TOPIC)
    return topic is not None and all(p.leader >= 0 for p in topic.partitions.values())
