"""The broker's ReplicaManager against metadata images built record by record: which logs it
opens, keeps and deletes. No processes; real files."""

from __future__ import annotations

from pathlib import Path

from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    MetadataRecord,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch
from rlog.daemon.broker.replica_manager import ReplicaManager
from rlog.daemon.config import BrokerSettings

ME = 1


def image_of(*records: MetadataRecord) -> MetadataImage:
    image = MetadataImage()
    base = [
        RegisterBroker(ME, "incarnation", 0, "127.0.0.1", 9092, None),
        UnfenceBroker(ME, 0),
    ]
    for offset, record in enumerate([*base, *records]):
        image.apply(offset, record)
    return image


def topic(name: str, topic_id: str) -> list[MetadataRecord]:
    return [
        CreateTopic(name, topic_id, {}),
        CreatePartition(name, 0, (ME,), (ME,), ME, 0, 0),
    ]


def write_one(manager: ReplicaManager, value: bytes) -> None:
    replica = manager.replica("t", 0)
    assert replica is not None and replica.is_leader
    outcome = replica.append_as_leader(
        build_batch([(None, value)]), 1, 0, required_acks_timeout_ms=0
    )
    assert outcome.result.error == ErrorCode.NONE


def test_a_topic_made_again_while_the_broker_was_away_starts_empty(tmp_path: Path) -> None:
    first = ReplicaManager(ME, tmp_path, BrokerSettings(), 0)
    first.apply_metadata(image_of(*topic("t", "a" * 32)), 0, caught_up=True)
    write_one(first, b"old")
    first.close()

    # Deleted and created again, same name, new id: the old records must not reappear.
    again = image_of(*topic("t", "a" * 32), DeleteTopic("t"), *topic("t", "b" * 32))
    second = ReplicaManager(ME, tmp_path, BrokerSettings(), 0)
    second.apply_metadata(again, 0, caught_up=True)
    replica = second.replica("t", 0)
    assert replica is not None and replica.log_end_offset == 0
    second.close()

    # The same topic (same id) keeps its records across restarts.
    third = ReplicaManager(ME, tmp_path, BrokerSettings(), 0)
    third.apply_metadata(again, 0, caught_up=True)
    write_one(third, b"new")
    third.close()
    fourth = ReplicaManager(ME, tmp_path, BrokerSettings(), 0)
    fourth.apply_metadata(again, 0, caught_up=True)
    assert fourth.replica("t", 0).log_end_offset == 1  # type: ignore[union-attr]
    fourth.close()


def test_logs_of_deleted_or_unassigned_partitions_go_only_once_caught_up(tmp_path: Path) -> None:
    first = ReplicaManager(ME, tmp_path, BrokerSettings(), 0)
    first.apply_metadata(image_of(*topic("t", "a" * 32)), 0, caught_up=True)
    write_one(first, b"x")
    first.close()
    second = ReplicaManager(ME, tmp_path, BrokerSettings(), 0)
    partial = image_of()  # the broker has not read the metadata log to its end yet
    second.apply_metadata(partial, 0, caught_up=False)
    assert second.logs.topic_partitions() == [("t", 0)], "kept: the image may be incomplete"
    second.apply_metadata(partial, 0, caught_up=True)
    assert second.logs.topic_partitions() == [], "a log no metadata mentions is a stray"
    second.close()
