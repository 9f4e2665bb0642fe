"""Where a group's or a transactional id's coordinator is (FindCoordinator), and the internal
topics made on first use.

The coordinators themselves run in the broker core (core/broker/group_hosting.py,
txn_hosting.py); this module only does what the core cannot: ask the controller to create
`__consumer_offsets` or `__transaction_state` on the first FindCoordinator for one, as Kafka
does (compacted; `offsets.topic.*` or `transaction.state.log.*` partitions, replicas capped by
the brokers that are up, and min.insync.replicas), and say where a key lives until then.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from rlog.core.broker import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from rlog.core.groups import GroupConfig, group_partition
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.transactions import TxnConfig, transaction_partition
from rlog.daemon.broker.controller_link import ControllerLink
from rlog.daemon.config import BrokerSettings
from rlog.daemon.wire import WireError

log = logging.getLogger(__name__)

Body = dict[str, Any]
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
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
        offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
        consumer_session_timeout_ms=settings.group_consumer_session_timeout_ms,
        consumer_heartbeat_interval_ms=settings.group_consumer_heartbeat_interval_ms,
        consumer_max_size=settings.group_consumer_max_size,
        consumer_migration_policy=settings.migration_policy,
    )


def txn_config(settings: BrokerSettings) -> TxnConfig:
    """The transaction coordinator's settings from the [broker] table."""
    return TxnConfig(
        state_partitions=settings.transaction_state_log_num_partitions,
        offsets_partitions=settings.offsets_topic_num_partitions,
        max_timeout_ms=settings.transaction_max_timeout_ms,
        id_expiration_ms=settings.transactional_id_expiration_ms,
        abort_check_interval_ms=(
            settings.transaction_abort_timed_out_transaction_cleanup_interval_ms
        ),
        remove_expired_interval_ms=(
            settings.transaction_remove_expired_transaction_cleanup_interval_ms
        ),
    )


def new_member_id(client_id: str) -> str:
    return f"{client_id}-{uuid.uuid4()}"  # Kafka's form: the client id and a UUID


class GroupService:
    def __init__(self, broker_id: int, settings: BrokerSettings, link: ControllerLink) -> None:
        self.broker_id = broker_id
        self.settings = settings
        self.link = link
        self._creating: dict[str, asyncio.Task[None]] = {}
        self._metadata_read = False  # this broker has read the metadata log to its end once

    def on_metadata(self) -> None:
        # Once caught up it stays "read": later records only trail by a fetch, and refusing
        # FindCoordinator whenever an ISR change is in flight would stall every client.
        self._metadata_read = self._metadata_read or self.link.caught_up

    # ---- FindCoordinator ---------------------------------------------------------------------

    async def find_coordinator(self, key: str, key_type: int) -> tuple[ErrorCode, str | None, Body]:
        """(error, message, {node_id, host, port}) for one coordinator key."""
        nowhere = {"node_id": -1, "host": "", "port": -1}
        if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
            return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", nowhere
        what = "group id" if key_type == GROUP_KEY_TYPE else "transactional id"
        if not key:
            return ErrorCode.INVALID_REQUEST, f"empty {what}", nowhere
        if not self._metadata_read:
            # A restarted broker's image may still name it leader of partitions it lost.
            message = "this broker is still reading the cluster metadata"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        name = OFFSETS_TOPIC if key_type == GROUP_KEY_TYPE else TRANSACTION_STATE_TOPIC
        image = self.link.image
        if name not in image.topics:
            await self._create_internal_topic(name)
            image = self.link.image
        topic = image.topics.get(name)
        if topic is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"creating {name}", nowhere
        if key_type == GROUP_KEY_TYPE:
            partition = group_partition(key, len(topic.partitions))
        else:
            partition = transaction_partition(key, len(topic.partitions))
        info = topic.partitions.get(partition)
        broker = image.brokers.get(info.leader) if info is not None else None
        if broker is None or not image.is_live(broker.broker_id):
            message = f"{name}-{partition} has no leader"
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, nowhere
        return (
            ErrorCode.NONE,
            None,
            {"node_id": broker.broker_id, "host": broker.host, "port": broker.port},
        )

    async def _create_internal_topic(self, name: str) -> None:
        # One creation at a time per topic and broker; concurrent callers wait for the same one.
        creating = self._creating.get(name)
        if creating is None or creating.done():
            creating = asyncio.ensure_future(self._create_internal_topic_once(name))
            self._creating[name] = creating
        await asyncio.shield(creating)

    async def _create_internal_topic_once(self, name: str) -> None:
        settings = self.settings
        live = len(self.link.image.live_brokers())
        configs = [{"name": "cleanup.policy", "value": "compact"}]
        if name == OFFSETS_TOPIC:
            partitions = settings.offsets_topic_num_partitions
            replication = max(1, min(settings.offsets_topic_replication_factor, live))
            segment_bytes = settings.offsets_topic_segment_bytes
        else:
            partitions = settings.transaction_state_log_num_partitions
            replication = max(1, min(settings.transaction_state_log_replication_factor, live))
            segment_bytes = settings.transaction_state_log_segment_bytes
            min_isr = min(settings.transaction_state_log_min_isr, replication)
            configs.append({"name": "min.insync.replicas", "value": str(min_isr)})
        configs.append({"name": "segment.bytes", "value": str(segment_bytes)})
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication,
                    "assignments": [],
                    "configs": configs,
                }
            ],
            "timeout_ms": 5000,
            "validate_only": False,
        }
        log.info("creating %s with replication factor %d", name, replication)
        try:
            timeout_s = settings.replica_socket_timeout_ms / 1000
            await self.link.forward(ApiKey.CREATE_TOPICS, 4, body, timeout_s)
        except WireError as error:
            log.warning("creating %s: %s", name, error)
            return
        await self.link.wait_for_image(lambda image: _led(image, name), CREATE_WAIT_S)


def _led(image: MetadataImage, name: str) -> bool:
    topic = image.topics.get(name)
    return topic is not None and all(p.leader >= 0 for p in topic.partitions.values())
