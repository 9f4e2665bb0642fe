"""The broker core's hosted replicas against metadata images built record by record: which logs
it opens, keeps and deletes. No processes; real files."""

from __future__ import annotations

from pathlib import Path

from rlog.core.broker import BrokerConfig, BrokerCore, MetadataChanged
from rlog.core.controller import ReplicaLogEnd
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    NO_LEADER,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    MetadataRecord,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch
from rlog.core.storage.files import RealFileSystem

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


def open_core(path: Path) -> BrokerCore:
    return BrokerCore(BrokerConfig(ME), str(path), RealFileSystem(), 0)


def apply(core: BrokerCore, image: MetadataImage, *, caught_up: bool) -> None:
    core.step(MetadataChanged(image, caught_up), 0)


def write_one(manager: BrokerCore, value: bytes) -> None:
    replica = manager.replica("t", 0)
    assert replica is not None and replica.is_leader
    outcome = replica.append_as_leader(
        build_batch([(None, value)]), 1, 0, required_acks_timeout_ms=0
    )
    assert outcome.result.error == ErrorCode.NONE


def test_a_topic_made_again_while_the_broker_was_away_starts_empty(tmp_path: Path) -> None:
    first = open_core(tmp_path)
    apply(first, image_of(*topic("t", "a" * 32)), caught_up=True)
    write_one(first, b"old")
    first.close()

    # Deleted and created again, same name, new id: the old records must not reappear.
    again = image_of(*topic("t", "a" * 32), DeleteTopic("t"), *topic("t", "b" * 32))
    second = open_core(tmp_path)
    apply(second, again, caught_up=True)
    replica = second.replica("t", 0)
    assert replica is not None and replica.log_end_offset == 0
    second.close()

    # The same topic (same id) keeps its records across restarts.
    third = open_core(tmp_path)
    apply(third, again, caught_up=True)
    write_one(third, b"new")
    third.close()
    fourth = open_core(tmp_path)
    apply(fourth, again, caught_up=True)
    assert fourth.replica("t", 0).log_end_offset == 1  # type: ignore[union-attr]
    fourth.close()


def test_logs_of_deleted_or_unassigned_partitions_go_only_once_caught_up(tmp_path: Path) -> None:
    first = open_core(tmp_path)
    apply(first, image_of(*topic("t", "a" * 32)), caught_up=True)
    write_one(first, b"x")
    first.close()
    second = open_core(tmp_path)
    partial = image_of()  # the broker has not read the metadata log to its end yet
    apply(second, partial, caught_up=False)
    assert second.hosted.logs.topic_partitions() == [("t", 0)], "kept: the image may be incomplete"
    apply(second, partial, caught_up=True)
    assert second.hosted.logs.topic_partitions() == [], "a log no metadata mentions is a stray"
    second.close()


def test_a_log_found_on_disk_at_start_takes_its_topic_configs(tmp_path: Path) -> None:
    """Logs are loaded at start with the broker's defaults; once the metadata names their topic,
    its configs apply (here flush.messages=1: a restarted broker that kept the default would
    acknowledge writes it never fsynced)."""
    records = [
        CreateTopic("t", "a" * 32, {"flush.messages": "1", "segment.bytes": "2048"}),
        CreatePartition("t", 0, (ME,), (ME,), ME, 0, 0),
    ]
    first = open_core(tmp_path)
    apply(first, image_of(*records), caught_up=True)
    write_one(first, b"x")
    first.close()
    second = open_core(tmp_path)
    apply(second, image_of(*records), caught_up=True)
    replica = second.replica("t", 0)
    assert replica is not None
    assert (replica.log.config.flush_messages, replica.log.config.segment_bytes) == (1, 2048)
    write_one(second, b"y")
    assert replica.log.flush_due(0), "flush.messages=1 asks for an fsync after each append"
    second.close()


def test_a_broker_tells_its_log_end_in_recovering_partitions_and_its_clean_shutdown(
    tmp_path: Path,
) -> None:
    first = open_core(tmp_path)
    assert first.previous_broker_epoch == -1
    apply(first, image_of(*topic("t", "a" * 32)), caught_up=True)
    write_one(first, b"x")
    write_one(first, b"y")
    assert first.recovering_log_ends() == [], "nothing is recovering"
    first.close()  # clean: the next start says so with this registration's epoch (0)
    second = open_core(tmp_path)
    assert second.previous_broker_epoch == 0
    recovering = ChangePartition("t", 0, NO_LEADER, None, 1, 1, "crash", recovering=True)
    apply(second, image_of(*topic("t", "a" * 32), recovering), caught_up=True)
    assert second.recovering_log_ends() == [ReplicaLogEnd("t", 0, 0, 2)]
