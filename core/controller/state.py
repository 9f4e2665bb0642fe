"""The controller's working state: the pending image and the records and responses not yet out.

Handlers change metadata only through `emit`, which applies a record to the pending image at
once (so the next request, even in the same `Ready`, sees it) and queues it for the log.
"""

from __future__ import annotations

from rlog.core.controller.api import ControllerConfig, ControllerResponse, Token
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import MetadataRecord

UNCLEAN_LEADER_ELECTION_KEY = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS_KEY = "min.insync.replicas"


class ControllerState:
    def __init__(self, config: ControllerConfig, image: MetadataImage, next_offset: int) -> None:
        assert next_offset > image.last_offset, f"next offset {next_offset} <= {image.last_offset}"
        self.config = config
        self.image = image  # pending: the committed image plus every record emitted since
        self.next_offset = next_offset  # the offset the next emitted record gets
        self.records: list[MetadataRecord] = []  # emitted, not yet handed out by ready()
        self.responses: list[tuple[Token, ControllerResponse]] = []
        # Soft state, not in the log: when each broker was last heard from. A controller that
        # starts gives every known broker a fresh session from its first `now_ms` (KRaft does too).
        self.last_contact_ms: dict[int, int] = {}
        # Offset of the FenceBroker record of a broker in controlled shutdown: it may stop once
        # its metadata has reached it.
        self.shutdown_offsets: dict[int, int] = {}
        # Soft state: the log end each replica of a recovering partition told in its heartbeats,
        # (topic, partition) -> broker -> (its broker epoch then, last epoch, log end offset).
        # Brokers tell it in every heartbeat, so a restarted controller learns it again.
        self.log_end_reports: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}

    def emit(self, record: MetadataRecord) -> int:
        """Apply `record` to the pending image and queue it; return its offset."""
        offset = self.next_offset
        self.image.apply(offset, record)
        self.records.append(record)
        self.next_offset += 1
        return offset

    def session_alive(self, broker_id: int, now_ms: int) -> bool:
        last_contact_ms = self.last_contact_ms.get(broker_id)
        if last_contact_ms is None:
            return False
        return now_ms - last_contact_ms <= self.config.broker_session_timeout_ms

    def unclean_election_allowed(self, topic: str) -> bool:
        default = "true" if self.config.unclean_leader_election_default else "false"
        value = self.image.topic_config(topic, UNCLEAN_LEADER_ELECTION_KEY, default)
        return value.strip().lower() == "true"
