"""What must hold of committed metadata, checked after every `advance`. A failure is a bug in
the controller, so these are assertions.
"""

from __future__ import annotations

from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import NO_LEADER, ChangePartition, CreatePartition, MetadataRecord


def check_image(image: MetadataImage) -> None:
    """Leader in ISR in replicas; ISRs never empty; a fenced broker leads nothing and sits in an
    ISR only as the last member of a leaderless partition (kept so a clean election can bring
    the partition back); the ACLs' indexes agree.
    """
    for topic, partition, state in image.iter_partitions():
        where = f"{topic}-{partition} {state}"
        assert state.isr, where
        assert set(state.isr) <= set(state.replicas), where
        assert not state.recovering or state.leader == NO_LEADER, where
        if state.leader != NO_LEADER:
            assert state.leader in state.isr, where
            assert image.is_live(state.leader), f"{where}: leader is fenced or unknown"
        for member in state.isr:
            assert member in image.brokers, f"{where}: ISR member {member} unknown"
            if image.brokers[member].fenced:
                assert state.isr == (member,) and state.leader == NO_LEADER, where
    # Every ACL once by id, once by binding, and indexed for decisions.
    assert len(image.acls) == len(image.acl_ids) == len(image.authorizer), "ACL index diverged"


class LeaderHistory:
    """Every (partition, leader epoch) -> leader seen since this controller started: one leader
    per epoch, and epochs that never go back. Partitions are keyed by topic id, so a topic
    deleted and created again under its name is a different partition.
    """

    def __init__(self) -> None:
        self._leaders: dict[tuple[str, int, int], int] = {}
        self._epochs: dict[tuple[str, int], tuple[int, int]] = {}

    def observe(self, image: MetadataImage, record: MetadataRecord) -> None:
        """Call after `image` applied `record`."""
        if not isinstance(record, CreatePartition | ChangePartition):
            return
        topic = image.topics[record.topic]
        state = topic.partitions[record.partition]
        key = (topic.topic_id, record.partition)
        epochs = (state.leader_epoch, state.partition_epoch)
        last = self._epochs.get(key)
        assert last is None or (epochs[0] >= last[0] and epochs[1] > last[1]), (key, last, epochs)
        self._epochs[key] = epochs
        if state.leader != NO_LEADER:
            leader = self._leaders.setdefault((*key, state.leader_epoch), state.leader)
            assert leader == state.leader, (
                f"two leaders in epoch {state.leader_epoch} of {record.topic}-{record.partition}: "
                f"{leader} and {state.leader}"
            )
