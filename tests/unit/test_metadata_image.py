"""MetadataImage: the fold of metadata records, its queries, its assertions on impossible
records, and the metadata log on disk (append, replay, recovery).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.metadata.image import BrokerInfo, MetadataImage, PartitionInfo
from rlog.core.metadata.log_store import (
    METADATA_PARTITION_DIR,
    append_records,
    metadata_log_config,
    read_records,
    replay,
)
from rlog.core.metadata.records import (
    NO_LEADER,
    AllocateProducerIds,
    ChangeConfig,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataRecord,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log

TOPIC_ID = "11111111111111111111111111111111"

# A history as the controller would write it: offsets are list positions.
HISTORY: list[MetadataRecord] = [
    RegisterBroker(1, "a", 0, "h1", 9091, None),
    RegisterBroker(2, "b", 1, "h2", 9092, "r2"),
    RegisterBroker(3, "c", 2, "h3", 9093, None),
    UnfenceBroker(1, 0),
    UnfenceBroker(2, 1),
    UnfenceBroker(3, 2),
    CreateTopic("orders", TOPIC_ID, {"min.insync.replicas": "2"}),
    CreatePartition("orders", 0, (1, 2, 3), (1, 2, 3), 1, 0, 0),
    CreatePartition("orders", 1, (2, 3, 1), (2, 3, 1), 2, 0, 0),
    ChangePartition("orders", 0, 2, (2, 3), 1, 1, "broker 1 fenced"),  # 9
    ChangePartition("orders", 1, None, (2, 3), 0, 1, "broker 1 fenced"),
    FenceBroker(1, 0),
    ChangeConfig("cluster", "", "unclean.leader.election.enable", "true"),
    ChangeConfig("topic", "orders", "retention.ms", "1000"),
    AllocateProducerIds(2, 1, 1000),
    RegisterBroker(1, "a2", 15, "h1", 9091, None),  # 15: a new incarnation, a new epoch
    UnfenceBroker(1, 15),
    ChangePartition("orders", 0, None, (2, 3, 1), 1, 2, "ISR expands"),
    ChangePartition("orders", 0, 1, None, 2, 3, "preferred leader election"),
    ChangeConfig("cluster", "", "unclean.leader.election.enable", None),
    CreateTopic("gone", "22222222222222222222222222222222", {}),
    CreatePartition("gone", 0, (3,), (3,), 3, 0, 0),
    DeleteTopic("gone"),
]


def fold(records: Sequence[MetadataRecord], start_offset: int = 0) -> MetadataImage:
    image = MetadataImage()
    for index, record in enumerate(records):
        image.apply(start_offset + index, record)
    return image


def test_fold_of_a_history() -> None:
    image = fold(HISTORY)
    assert image.last_offset == len(HISTORY) - 1
    assert image.brokers[1] == BrokerInfo(1, 15, "a2", "h1", 9091, None, fenced=False)
    assert image.brokers[2].rack == "r2"
    assert image.partition("orders", 0) == PartitionInfo((1, 2, 3), (2, 3, 1), 1, 2, 3)
    assert image.partition("orders", 1) == PartitionInfo((2, 3, 1), (2, 3), 2, 0, 1)
    assert image.partition("orders", 2) is None
    assert image.partition("gone", 0) is None
    assert image.topics["orders"].configs == {"min.insync.replicas": "2", "retention.ms": "1000"}
    assert image.topic_names_by_id == {TOPIC_ID: "orders"}
    assert image.next_producer_id == 1000
    assert image.topics_created == 2
    assert image.cluster_configs == {}


def test_queries() -> None:
    image = fold(HISTORY[:12])  # broker 1 just fenced
    assert image.partitions_led_by(2) == [("orders", 0), ("orders", 1)]
    assert image.partitions_led_by(1) == []
    assert [broker.broker_id for broker in image.live_brokers()] == [2, 3]
    assert image.is_live(2) and not image.is_live(1) and not image.is_live(9)
    assert [(t, p) for t, p, _ in image.iter_partitions()] == [("orders", 0), ("orders", 1)]
    image = fold(HISTORY[:13])
    # Topic override, else the cluster's dynamic default, else the caller's default.
    assert image.topic_config("orders", "min.insync.replicas", "1") == "2"
    assert image.topic_config("orders", "unclean.leader.election.enable", "false") == "true"
    assert image.topic_config("orders", "retention.ms", "-1") == "-1"
    assert image.topic_config("nope", "min.insync.replicas", "1") == "1"


@given(st.integers(0, len(HISTORY)))
def test_copy_then_rest_equals_whole_fold(split: int) -> None:
    """Folding incrementally from a copy at any point gives what one fold from scratch gives."""
    prefix = fold(HISTORY[:split])
    copied = prefix.copy()
    assert copied == prefix
    for offset in range(split, len(HISTORY)):
        copied.apply(offset, HISTORY[offset])
    assert copied == fold(HISTORY)
    assert prefix == fold(HISTORY[:split])  # the original is untouched by the copy's changes


def test_images_differ_when_state_differs() -> None:
    assert fold(HISTORY[:5]) != fold(HISTORY[:6])
    assert fold(HISTORY) != "an image"


IMPOSSIBLE: list[tuple[str, int, MetadataRecord, str]] = [
    # (what, records of HISTORY applied first, the impossible record, assertion text)
    ("epoch is not the offset", 3, RegisterBroker(4, "d", 2, "h", 1, None), "epoch"),
    ("fence unknown broker", 3, FenceBroker(9, 0), "not registered"),
    ("fence at a stale epoch", 16, FenceBroker(1, 0), "stale"),
    ("fence twice", 12, FenceBroker(1, 0), "twice"),
    ("unfence twice", 6, UnfenceBroker(1, 0), "twice"),
    ("topic twice", 7, CreateTopic("orders", "x", {}), "exists"),
    ("topic id reused", 7, CreateTopic("other", TOPIC_ID, {}), "reused"),
    ("partition of unknown topic", 6, CreatePartition("x", 0, (1,), (1,), 1, 0, 0), "unknown"),
    ("partition out of order", 7, CreatePartition("orders", 1, (1,), (1,), 1, 0, 0), "order"),
    ("leader not in replicas", 7, CreatePartition("orders", 0, (1, 2), (1, 2), 3, 0, 0), "ISR"),
    ("ISR outside replicas", 7, CreatePartition("orders", 0, (1, 2), (1, 3), 1, 0, 0), "ISR"),
    ("empty ISR", 7, CreatePartition("orders", 0, (1, 2), (), NO_LEADER, 0, 0), "ISR"),
    ("repeated replica", 7, CreatePartition("orders", 0, (1, 1), (1,), 1, 0, 0), "orders-0"),
    ("fenced leader", 12, ChangePartition("orders", 0, 1, (1, 2, 3), 2, 2, "r"), "fenced"),
    ("partition epoch same", 10, ChangePartition("orders", 0, None, (2,), 1, 1, "r"), "epoch"),
    ("partition epoch back", 10, ChangePartition("orders", 0, None, (2,), 1, 0, "r"), "epoch"),
    ("leader epoch back", 10, ChangePartition("orders", 0, None, None, 0, 2, "r"), "epoch"),
    ("new leader same epoch", 10, ChangePartition("orders", 0, 3, None, 1, 2, "r"), "epoch"),
    ("leader outside ISR", 10, ChangePartition("orders", 0, None, (3,), 1, 2, "r"), "ISR"),
    ("unclean, ISR not sole", 10, ChangePartition("orders", 0, 3, None, 2, 2, "r", True), "sole"),
    ("change unknown", 10, ChangePartition("orders", 5, None, None, 0, 1, "r"), "unknown"),
    ("unregistered in ISR", 8, CreatePartition("orders", 1, (1, 7), (1, 7), 1, 0, 0), "ISR"),
    ("delete unknown topic", 6, DeleteTopic("orders"), "unknown"),
    ("config of unknown topic", 6, ChangeConfig("topic", "x", "k", "v"), "unknown"),
    ("unknown resource type", 6, ChangeConfig("group", "x", "k", "v"), "group"),
    ("named cluster", 6, ChangeConfig("cluster", "x", "k", "v"), "empty"),
    ("producer ids back", 15, AllocateProducerIds(2, 1, 500), "back"),
]


@pytest.mark.parametrize(
    ("what", "prefix", "record", "match"), IMPOSSIBLE, ids=[case[0] for case in IMPOSSIBLE]
)
def test_impossible_record_is_a_bug(
    what: str, prefix: int, record: MetadataRecord, match: str
) -> None:
    image = fold(HISTORY[:prefix])
    with pytest.raises(AssertionError, match=match):
        image.apply(prefix, record)


def test_offsets_must_grow() -> None:
    image = fold(HISTORY[:2])
    with pytest.raises(AssertionError, match="offset"):
        image.apply(1, UnfenceBroker(1, 0))


def test_broker_config_is_kept_by_name() -> None:
    image = fold(HISTORY[:1])
    image.apply(1, ChangeConfig("broker", "1", "k", "v"))
    assert image.broker_configs == {"1": {"k": "v"}}
    image.apply(2, ChangeConfig("broker", "1", "k", None))
    assert image.broker_configs == {"1": {}}


# ---- the metadata log on disk ----


def open_metadata_log(data_dir: Path) -> Log:
    return Log(
        str(data_dir / METADATA_PARTITION_DIR),
        metadata_log_config(),
        RealFileSystem(),
        recovery_point=0,
        log_start_offset=0,
        now_ms=0,
    )


def test_metadata_log_config() -> None:
    config = metadata_log_config()
    assert (config.flush_messages, config.retention_ms, config.retention_bytes) == (1, -1, -1)


def test_append_and_replay(tmp_path: Path) -> None:
    log = open_metadata_log(tmp_path)
    assert append_records(log, [], now_ms=0) == []
    assert append_records(log, HISTORY[:9], now_ms=5, base_offset=0) == list(range(9))
    assert log.recovery_point == 9  # fsync'd on return
    assert append_records(log, HISTORY[9:], now_ms=6) == list(range(9, len(HISTORY)))
    assert replay(log) == fold(HISTORY)
    assert read_records(log, 10) == [(o, HISTORY[o]) for o in range(10, len(HISTORY))]
    log.close()
    reopened = open_metadata_log(tmp_path)
    assert replay(reopened) == fold(HISTORY)
    reopened.close()


def test_append_elsewhere_than_expected_is_a_bug(tmp_path: Path) -> None:
    log = open_metadata_log(tmp_path)
    append_records(log, HISTORY[:3], now_ms=0)
    with pytest.raises(AssertionError):
        append_records(log, HISTORY[3:4], now_ms=0, base_offset=2)
    log.close()


def test_replay_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rlog.core.metadata.log_store.REPLAY_READ_BYTES", 1)
    log = open_metadata_log(tmp_path)
    for offset, record in enumerate(HISTORY):  # one batch each
        append_records(log, [record], now_ms=offset)
    assert replay(log) == fold(HISTORY)
    log.close()


def test_torn_batch_is_lost_whole(tmp_path: Path) -> None:
    """One Ready is one batch: a crash mid-write loses all of it, never half a topic."""
    log = open_metadata_log(tmp_path)
    append_records(log, HISTORY[:6], now_ms=0)
    append_records(log, HISTORY[6:9], now_ms=0)  # the topic and its two partitions
    segment = log.active_segment
    path = Path(log.dir_path) / f"{segment.base_offset:020d}.log"
    log.close()
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size - 10)
    recovered = Log(
        str(tmp_path / METADATA_PARTITION_DIR),
        metadata_log_config(),
        RealFileSystem(),
        recovery_point=0,  # as after a crash: recheck everything
        log_start_offset=0,
        now_ms=0,
    )
    assert recovered.log_end_offset == 6
    assert replay(recovered) == fold(HISTORY[:6])
    recovered.close()
