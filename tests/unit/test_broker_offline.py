"""BrokerCore with its log dir offline (`LogDirFailed`, Kafka's LogDirFailureChannel): what
waits on the dir fails at once, every later request on its partitions answers
KAFKA_STORAGE_ERROR (by version), followers stop fetching, the coordinators unload, and
nothing is written, synced or checkpointed again, not even by a clean close, so the next start
recovers as after a crash. The cores run in test_broker_core.py's harness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from unit.test_broker_core import (
    FETCH_V,
    LIST_OFFSETS_V,
    PRODUCE_V,
    TOPIC,
    Cluster,
    batch,
    fetch_body,
    list_offsets_body,
    partition_of,
    produce_body,
)

from rlog.core.broker import OFFSETS_TOPIC, BrokerConfig, BrokerCore, ClientRequest, Sync
from rlog.core.broker.messages import LogDirFailed
from rlog.core.metadata.records import ChangePartition, CreatePartition, CreateTopic
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.storage.log_manager import CLEAN_SHUTDOWN_FILE

REASON = "append to t-0/00000000000000000000.log failed: No space left on device"


def take_offline(cluster: Cluster, broker: int) -> None:
    cluster.cores[broker].step(LogDirFailed(REASON), cluster.now)
    cluster.run()


def acked(cluster: Cluster, broker: int, records: bytes) -> bool:
    """An acks=all produce, delivered until the ISR has it; whether it succeeded."""
    token = cluster.produce(broker, records, acks=-1)
    cluster.run()
    return cluster.error(token) == ErrorCode.NONE


def storage_error(cluster: Cluster, broker: int, api_key: ApiKey, version: int, body: dict) -> int:
    answer = cluster.answers[cluster.request(broker, api_key, version, body)]
    assert answer is not None
    return partition_of(answer)["error_code"]


def test_an_offline_leader_refuses_produce_and_reads_with_kafka_storage_error() -> None:
    cluster = Cluster()
    assert acked(cluster, 1, batch(b"a"))
    take_offline(cluster, 1)
    assert cluster.cores[1].offline == REASON
    leader = cluster.replica(1)
    end = leader.log_end_offset
    produce = produce_body(batch(b"b"), acks=1)
    assert storage_error(cluster, 1, ApiKey.PRODUCE, PRODUCE_V, produce) == 56
    # Produce v3 and Fetch v5 predate KAFKA_STORAGE_ERROR (KIP-112): the retriable error
    # every client knows, which also sends it to the metadata for the new leader.
    assert storage_error(cluster, 1, ApiKey.PRODUCE, 3, produce) == 6
    assert storage_error(cluster, 1, ApiKey.FETCH, FETCH_V, fetch_body(0)) == 56
    assert storage_error(cluster, 1, ApiKey.FETCH, 5, fetch_body(0)) == 6
    latest = list_offsets_body(-1, -1)
    assert storage_error(cluster, 1, ApiKey.LIST_OFFSETS, LIST_OFFSETS_V, latest) == 56
    epochs = {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}  # fmt: skip
    answer = cluster.answers[cluster.request(1, ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, epochs)]
    assert answer is not None and partition_of(answer)["error_code"] == 56
    assert leader.log_end_offset == end, "nothing was appended"
    # The follower, still in its own log dir, serves what it has as ever (here: the
    # ListOffsets of a tool, which any replica answers).
    tools = list_offsets_body(-1, -2)
    assert storage_error(cluster, 2, ApiKey.LIST_OFFSETS, LIST_OFFSETS_V, tools) == 0


def test_a_waiting_acks_all_produce_and_a_parked_fetch_are_answered_at_once() -> None:
    cluster = Cluster()
    cluster.cut_off.add(2)  # the follower never fetches: acks=all waits
    produce = cluster.produce(1, batch(b"a"), acks=-1)
    fetch = cluster.fetch(1, 0, max_wait_ms=10_000)  # nothing below the HW: parked
    assert produce not in cluster.answers and fetch not in cluster.answers
    take_offline(cluster, 1)
    assert cluster.error(produce) == ErrorCode.KAFKA_STORAGE_ERROR
    assert cluster.error(fetch) == ErrorCode.KAFKA_STORAGE_ERROR


def test_a_batch_waiting_for_its_sync_is_answered_kafka_storage_error() -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"flush.messages": "1"})
    core = cluster.cores[1]
    token = ("client", "p")
    core.step(ClientRequest(token, ApiKey.PRODUCE, PRODUCE_V, produce_body(batch(b"a"), 1)), 1)
    # The daemon saw the disk fail before it did the Ready: the sync is never asked for.
    core.step(LogDirFailed(REASON), cluster.now)
    ready = core.ready()
    assert ready.syncs == []
    answer = dict(ready.responses)[token]
    assert isinstance(answer, dict) and partition_of(answer)["error_code"] == 56
    with pytest.raises(OSError):
        core.sync(Sync(TOPIC, 0, 1))  # a Ready made before cannot write either


def test_an_offline_follower_stops_fetching_and_ignores_new_roles() -> None:
    cluster = Cluster(brokers=(1, 2, 3))
    assert acked(cluster, 1, batch(b"a"))
    take_offline(cluster, 2)
    sent_before = len([s for s in cluster.sent if s[0] == 2])
    follower = cluster.replica(2)
    end = follower.log_end_offset
    assert cluster.error(cluster.produce(1, batch(b"b"), acks=1)) == ErrorCode.NONE
    for _ in range(5):
        cluster.tick(cluster.cores[2].config.replica_fetch_wait_max_ms)
    assert len([s for s in cluster.sent if s[0] == 2]) == sent_before, "it fetched again"
    assert follower.log_end_offset == end
    # Made leader by metadata (which the controller would not do for a fenced broker): the
    # offline core takes no new role, so it writes no leader epoch either.
    cluster.commit(ChangePartition(TOPIC, 0, 2, (2, 3), 1, 1, "test"))
    cluster.run()
    assert not follower.is_leader and follower.leader_epoch == 0


def test_nothing_is_synced_or_checkpointed_once_offline() -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"flush.ms": "1"})
    core = cluster.cores[1]
    assert cluster.error(cluster.produce(1, batch(b"a"), acks=1)) == ErrorCode.NONE
    take_offline(cluster, 1)
    config = core.config
    later = max(
        config.log_flush_scheduler_interval_ms,
        config.log_flush_offset_checkpoint_interval_ms,
        config.high_watermark_checkpoint_interval_ms,
        config.log_retention_check_interval_ms,
    )
    core.tick(cluster.now + later + 1)
    while core.has_ready():
        ready = core.ready()
        assert ready.syncs == [] and not ready.checkpoints
        core.advance(ready)
    assert not core.has_ready()


def test_the_group_coordinator_unloads_its_partitions() -> None:
    cluster = Cluster(brokers=(1,))
    cluster.commit(CreateTopic(OFFSETS_TOPIC, "b" * 32, {}))
    cluster.commit(CreatePartition(OFFSETS_TOPIC, 0, (1,), (1,), 1, 0, 0))
    cluster.run()
    offset_fetch = {"group_id": "g", "topics": None}

    def offset_fetch_error() -> int:
        answer = cluster.answers[cluster.request(1, ApiKey.OFFSET_FETCH, 5, offset_fetch)]
        assert answer is not None
        return answer["error_code"]

    assert offset_fetch_error() == ErrorCode.NONE
    take_offline(cluster, 1)
    assert offset_fetch_error() == ErrorCode.NOT_COORDINATOR  # the client finds another


def test_close_writes_nothing_and_the_next_start_recovers_as_after_a_crash(
    tmp_path: Path,
) -> None:
    cluster = Cluster(brokers=(1,), real_files=tmp_path)
    core = cluster.cores[1]
    assert cluster.error(cluster.produce(1, batch(b"a", b"b"), acks=1)) == ErrorCode.NONE
    data_dir = tmp_path / "broker-1"
    before = {p.name: p.stat().st_mtime_ns for p in data_dir.iterdir() if p.is_file()}
    take_offline(cluster, 1)
    core.close()
    after = {p.name: p.stat().st_mtime_ns for p in data_dir.iterdir() if p.is_file()}
    assert after == before, "close() wrote to the offline dir"
    assert not (data_dir / CLEAN_SHUTDOWN_FILE).exists()
    again = BrokerCore(BrokerConfig(1), str(data_dir), cluster.fs[1], cluster.now)
    assert again.previous_broker_epoch == -1  # recovered as after a crash
    log = again.hosted.logs.get(TOPIC, 0)
    assert log is not None and log.log_end_offset == 2  # appended before: the OS has it
    assert os.listdir(data_dir)  # (the dir itself is untouched)
