"""ListOffsets v1-10 (KIP-734 max timestamp, KIP-405 earliest local, KIP-1005 latest tiered,
KIP-1075's ignorable TimeoutMs) and DescribeProducers v0, answered by the broker core as
Kafka's ReplicaManager, Partition and UnifiedLog answer them. The cores run in
test_broker_core.py's harness, so every request and answer crosses the codec at its version.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from unit.test_broker_core import T0, TOPIC, Cluster, batch, partition_of

from rlog.cli import txn
from rlog.core.broker import ClientRequest
from rlog.core.broker.messages import Append, AppendAnswer, LogDirFailed
from rlog.core.broker.serving import describe_producers, list_offsets
from rlog.core.metadata.records import ChangePartition, CreatePartition, CreateTopic
from rlog.core.protocol.apis import SUPPORTED, ApiKey, header_versions
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.protocol.schema import Struct, load_message
from rlog.core.records import build_batch

Body = dict[str, Any]
LATEST, EARLIEST, MAX, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
CONSUMER, TOOL = -1, -2  # replica ids: a client, and a tool that may ask any replica
NEWEST = 10  # the newest ListOffsets version


def request_body(
    timestamp: int,
    *,
    replica_id: int = CONSUMER,
    isolation_level: int = 0,
    current_leader_epoch: int = -1,
    partitions: tuple[int, ...] = (0,),
    topic: str = TOPIC,
) -> Body:
    """A ListOffsets request with every field of v10 (the codec leaves out what a version has
    not)."""
    asked = [
        {"partition_index": p, "current_leader_epoch": current_leader_epoch, "timestamp": timestamp}
        for p in partitions
    ]
    return {"replica_id": replica_id, "isolation_level": isolation_level, "timeout_ms": 1_000,
            "topics": [{"name": topic, "partitions": asked}]}  # fmt: skip


def ask(
    cluster: Cluster, timestamp: int, version: int = NEWEST, broker: int = 1, **kw: Any
) -> Body:
    """The one partition's answer to a ListOffsets sent to `broker` at `version`."""
    token = cluster.request(broker, ApiKey.LIST_OFFSETS, version, request_body(timestamp, **kw))
    answer = cluster.answers[token]
    assert answer is not None
    return partition_of(answer)


def found(answer: Body) -> tuple[ErrorCode, int, int, int]:
    """(error, timestamp, offset, leader epoch) of one partition's answer."""
    return (ErrorCode(answer["error_code"]), answer["timestamp"], answer["offset"],
            answer["leader_epoch"])  # fmt: skip


NOTHING = (ErrorCode.NONE, -1, -1, -1)


def produce(cluster: Cluster, timestamps: list[int], broker: int = 1, **kw: Any) -> None:
    """One batch, a record per timestamp, acked by the whole ISR."""
    records = [(None, b"v%d" % i) for i in range(len(timestamps))]
    data = build_batch(records, base_timestamp=min(timestamps), timestamps=timestamps, **kw)
    token = cluster.produce(broker, data, acks=-1)
    cluster.run()
    assert cluster.error(token) == ErrorCode.NONE


class AppendingCluster(Cluster):
    """The harness, also taking the answers to `Append` (the coordinators' writes, which the
    harness's clients never send): tests write transactional batches that way, since the
    harness has no transaction coordinator for KIP-890's check of a client's first one."""

    def _answer(self, src: int, token: Any, answer: Any) -> None:
        if isinstance(answer, AppendAnswer):
            assert answer.error == ErrorCode.NONE, answer
            return
        super()._answer(src, token, answer)


# ---- which timestamps each version may ask for ----


@pytest.mark.parametrize(
    ("timestamp", "first_version"),
    [(MAX, 7), (EARLIEST_LOCAL, 8), (LATEST_TIERED, 9)],
)
def test_a_special_timestamp_is_refused_before_the_version_that_brought_it(
    timestamp: int, first_version: int
) -> None:
    cluster = Cluster()
    produce(cluster, [T0])
    for version in range(1, NEWEST + 1):
        error = ErrorCode(ask(cluster, timestamp, version)["error_code"])
        expected = ErrorCode.NONE if version >= first_version else ErrorCode.UNSUPPORTED_VERSION
        assert error == expected, f"v{version}"


@pytest.mark.parametrize("timestamp", [-6, -7, -100])
def test_an_unknown_special_timestamp_is_unsupported_at_every_version(timestamp: int) -> None:
    cluster = Cluster()
    for version in range(1, NEWEST + 1):
        refused = found(ask(cluster, timestamp, version))
        assert refused == (ErrorCode.UNSUPPORTED_VERSION, -1, -1, -1), f"v{version}"


def test_v6_is_flexible_and_answers_as_v5() -> None:
    cluster = Cluster()
    produce(cluster, [T0, T0 + 5])
    assert header_versions(ApiKey.LIST_OFFSETS, 5) == (1, 0)
    assert header_versions(ApiKey.LIST_OFFSETS, 6) == (2, 1)
    for timestamp in (EARLIEST, LATEST, T0 + 1):
        assert found(ask(cluster, timestamp, 6)) == found(ask(cluster, timestamp, 5))
    # The v6 answer in bytes: compact arrays and strings (length + 1 as a varint), tag buffers.
    body = list_offsets(request_body(LATEST), 6, cluster.image, cluster.cores[1].hosted.get,
                        offline=False)  # fmt: skip
    encoded = codec_for("ListOffsetsResponse", 6).encode(body)
    throttle, topics, name_length, name = encoded[:4], encoded[4], encoded[5], encoded[6:7]
    assert (throttle, topics, name_length, name) == (b"\0\0\0\0", 2, 2, TOPIC.encode())
    assert encoded.endswith(b"\0\0\0")  # the partition's, the topic's and the body's tags


def test_v10_accepts_timeout_ms_and_answers_every_spec() -> None:
    cluster = Cluster()
    produce(cluster, [T0 + 3, T0 + 9, T0 + 1])
    answers = {t: found(ask(cluster, t, 10)) for t in (LATEST, EARLIEST, MAX, -4, -5, T0 + 2)}
    assert answers == {
        LATEST: (ErrorCode.NONE, -1, 3, 0),
        EARLIEST: (ErrorCode.NONE, -1, 0, 0),
        MAX: (ErrorCode.NONE, T0 + 9, 1, 0),
        EARLIEST_LOCAL: (ErrorCode.NONE, -1, 0, 0),
        LATEST_TIERED: NOTHING,
        T0 + 2: (ErrorCode.NONE, T0 + 3, 0, 0),
    }


# ---- MAX_TIMESTAMP (v7) ----


def test_max_timestamp_is_the_first_record_holding_it_when_timestamps_go_back_and_forth() -> None:
    cluster = Cluster()
    produce(cluster, [T0 + 10, T0 + 20])  # offsets 0-1
    produce(cluster, [T0 + 30, T0 + 50, T0 + 45, T0 + 50])  # 2-5: the max inside, twice
    produce(cluster, [T0 + 40])  # 6: a later batch with an earlier time
    produce(cluster, [T0 + 49, T0 + 50])  # 7-8: the max again, in a later batch
    # Not the batch's last offset (5, which the time index holds) nor its base: the record.
    assert found(ask(cluster, MAX, 7)) == (ErrorCode.NONE, T0 + 50, 3, 0)


def test_max_timestamp_across_segments_is_the_lowest_offset_with_the_largest_time() -> None:
    rng = random.Random(7)
    cluster = Cluster(topic_configs={"segment.bytes": "300"})  # a few batches a segment
    timestamps: list[int] = []
    for _ in range(30):
        batch_times = [T0 + rng.randrange(60) for _ in range(rng.randrange(1, 5))]
        produce(cluster, batch_times)
        timestamps += batch_times
    assert len(cluster.replica(1).log.segments) > 3
    largest = max(timestamps)
    first = (ErrorCode.NONE, largest, timestamps.index(largest), 0)
    assert found(ask(cluster, MAX)) == first
    segments = len(cluster.replica(1).log.segments)
    for _ in range(4):  # the same largest time in later segments: the first record still wins
        produce(cluster, [largest, largest - 1])
    assert len(cluster.replica(1).log.segments) > segments
    assert found(ask(cluster, MAX)) == first


def test_max_timestamp_under_log_append_time_is_the_first_record_of_the_latest_batch() -> None:
    cluster = Cluster(topic_configs={"message.timestamp.type": "LogAppendTime"})
    for ms in range(3):
        cluster.now = T0 + ms * 10
        produce(cluster, [1, 2, 3])  # the producer's times are replaced by the append time
    assert found(ask(cluster, MAX)) == (ErrorCode.NONE, T0 + 20, 6, 0)


def test_max_timestamp_carries_the_epoch_of_its_batch_not_the_leaders() -> None:
    cluster = Cluster()
    produce(cluster, [T0 + 100])  # epoch 0
    cluster.commit(ChangePartition(TOPIC, 0, 2, None, 1, 1, "moved"))
    cluster.run()
    produce(cluster, [T0 + 5], broker=2)  # epoch 1, an older time
    assert found(ask(cluster, MAX, broker=2)) == (ErrorCode.NONE, T0 + 100, 0, 0)
    assert ask(cluster, LATEST, broker=2)["leader_epoch"] == 1
    produce(cluster, [T0 + 200], broker=2)
    assert found(ask(cluster, MAX, broker=2)) == (ErrorCode.NONE, T0 + 200, 2, 1)


def test_max_timestamp_of_an_empty_partition_is_not_found() -> None:
    cluster = Cluster()
    assert found(ask(cluster, MAX, 7)) == NOTHING
    assert found(ask(cluster, MAX, 7, replica_id=TOOL)) == NOTHING


def test_max_timestamp_above_what_the_asker_may_read_is_not_found() -> None:
    """Kafka looks the record up in the whole log, then shows it only below the last offset the
    asker may fetch: the HW for consumers, the LSO for read_committed ones, the LEO else."""
    cluster = Cluster()
    produce(cluster, [T0 + 1])
    cluster.cut_off.add(2)
    cluster.produce(1, batch(b"late", base_timestamp=T0 + 9), acks=1)  # offset 1, above the HW
    assert found(ask(cluster, MAX)) == NOTHING
    assert found(ask(cluster, MAX, replica_id=TOOL)) == (ErrorCode.NONE, T0 + 9, 1, 0)
    assert found(ask(cluster, T0 + 5)) == NOTHING  # the same rule for a timestamp lookup
    assert found(ask(cluster, T0 + 5, replica_id=TOOL)) == (ErrorCode.NONE, T0 + 9, 1, 0)


def test_read_committed_sees_no_max_timestamp_in_an_open_transaction() -> None:
    cluster = AppendingCluster()
    produce(cluster, [T0 + 1])
    append_transactional(cluster, producer_id=9, epoch=0, timestamps=[T0 + 50])
    committed = {"isolation_level": 1}
    assert found(ask(cluster, MAX)) == (ErrorCode.NONE, T0 + 50, 1, 0)
    assert found(ask(cluster, MAX, **committed)) == NOTHING
    assert ask(cluster, LATEST, **committed)["offset"] == 1  # the LSO
    write_marker(cluster, producer_id=9, epoch=0, commit=True, coordinator_epoch=0)
    assert found(ask(cluster, MAX, **committed)) == (ErrorCode.NONE, T0 + 50, 1, 0)


# ---- EARLIEST_LOCAL (v8), LATEST_TIERED (v9), and the epochs of the others ----


def test_earliest_local_is_the_log_start_with_its_epoch_as_earliest_is() -> None:
    cluster = Cluster(
        topic_configs={"segment.bytes": "100", "retention.bytes": "1"},
        config={"log_retention_check_interval_ms": 1_000},
    )
    produce(cluster, [T0])
    produce(cluster, [T0])
    cluster.commit(ChangePartition(TOPIC, 0, 2, None, 1, 1, "moved"))  # epoch 1 from offset 2
    cluster.run()
    for _ in range(3):
        produce(cluster, [T0], broker=2)
    assert found(ask(cluster, EARLIEST_LOCAL, 8, broker=2)) == (ErrorCode.NONE, -1, 0, 0)
    assert found(ask(cluster, EARLIEST, 8, broker=2)) == (ErrorCode.NONE, -1, 0, 0)
    cluster.tick(1_000)  # retention: the log now starts in epoch 1
    start = cluster.replica(2).log_start_offset
    assert start > 2
    assert found(ask(cluster, EARLIEST_LOCAL, 8, broker=2)) == (ErrorCode.NONE, -1, start, 1)
    assert found(ask(cluster, EARLIEST, 8, broker=2)) == (ErrorCode.NONE, -1, start, 1)


def test_latest_tiered_without_tiered_storage_is_minus_one_everywhere() -> None:
    cluster = Cluster()
    produce(cluster, [T0, T0 + 1])
    for version in (9, 10):
        assert found(ask(cluster, LATEST_TIERED, version)) == NOTHING
        assert found(ask(cluster, LATEST_TIERED, version, replica_id=TOOL, broker=2)) == NOTHING


def test_a_timestamp_lookup_carries_its_batchs_epoch_and_latest_the_leaders() -> None:
    cluster = Cluster()
    produce(cluster, [T0 + 1, T0 + 2])
    cluster.commit(ChangePartition(TOPIC, 0, 2, None, 3, 1, "moved"))
    cluster.run()
    produce(cluster, [T0 + 10], broker=2)
    assert found(ask(cluster, T0 + 2, broker=2)) == (ErrorCode.NONE, T0 + 2, 1, 0)
    assert found(ask(cluster, T0 + 3, broker=2)) == (ErrorCode.NONE, T0 + 10, 2, 3)
    assert found(ask(cluster, T0 + 11, broker=2)) == NOTHING
    assert found(ask(cluster, LATEST, broker=2)) == (ErrorCode.NONE, -1, 3, 3)
    assert found(ask(cluster, EARLIEST, broker=2)) == (ErrorCode.NONE, -1, 0, 0)


# ---- who answers, and the errors ----


def lagging_new_leader() -> Cluster:
    """Broker 2 leads epoch 1 from offset 1, but its HW is still 0 (broker 1, which could move
    it, is cut off): KIP-207's window, where consumers must not see offsets at or past it."""
    cluster = Cluster()
    cluster.produce(1, batch(b"a", base_timestamp=T0 + 7), acks=1)
    cluster.run()  # broker 2 has offset 0, and learns the HW only with its next fetch
    assert cluster.replica(2).high_watermark == 0
    cluster.cut_off.add(1)
    cluster.commit(ChangePartition(TOPIC, 0, 2, None, 1, 1, "moved"))
    cluster.run()
    assert not cluster.replica(2).serves_consumers
    return cluster


@pytest.mark.parametrize(("version", "error"), [
    (4, ErrorCode.LEADER_NOT_AVAILABLE), (5, ErrorCode.OFFSET_NOT_AVAILABLE),
    (10, ErrorCode.OFFSET_NOT_AVAILABLE),
])  # fmt: skip
def test_a_new_leader_with_a_lagging_hw_hides_from_consumers_what_lies_past_it(
    version: int, error: ErrorCode
) -> None:
    cluster = lagging_new_leader()
    assert ask(cluster, LATEST, version, broker=2)["error_code"] == error
    assert ask(cluster, T0, version, broker=2)["error_code"] == error  # found at 0, not below 0
    assert found(ask(cluster, EARLIEST, version, broker=2)) == (ErrorCode.NONE, -1, 0, 0)
    if version >= 7:
        assert ask(cluster, MAX, version, broker=2)["error_code"] == error
        assert found(ask(cluster, LATEST_TIERED, version, broker=2)) == NOTHING
    # Tools are not consumers: they see the log end and what lies below it.
    assert found(ask(cluster, LATEST, version, broker=2, replica_id=TOOL))[2] == 1
    assert found(ask(cluster, T0, version, broker=2, replica_id=TOOL)) == (
        ErrorCode.NONE, T0 + 7, 0, 0)  # fmt: skip


def test_only_the_leader_answers_clients_but_a_tool_may_ask_a_follower_in_its_epoch() -> None:
    cluster = Cluster()
    produce(cluster, [T0 + 1])
    for timestamp in (LATEST, EARLIEST, MAX, T0):
        refused = ask(cluster, timestamp, broker=2)["error_code"]
        assert refused == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert found(ask(cluster, MAX, broker=2, replica_id=TOOL)) == (ErrorCode.NONE, T0 + 1, 0, 0)
    cluster.commit(ChangePartition(TOPIC, 0, 1, None, 2, 1, "new epoch"))
    cluster.run()
    stale = ask(cluster, MAX, broker=2, replica_id=TOOL, current_leader_epoch=0)
    assert stale["error_code"] == ErrorCode.FENCED_LEADER_EPOCH
    future = ask(cluster, MAX, broker=1, current_leader_epoch=3)
    assert future["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_unknown_partitions_duplicates_and_an_offline_log_dir() -> None:
    cluster = Cluster()
    produce(cluster, [T0])
    assert ask(cluster, MAX, topic="nope")["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    token = cluster.request(1, ApiKey.LIST_OFFSETS, NEWEST, request_body(MAX, partitions=(0, 0, 1)))
    answer = cluster.answers[token]
    assert answer is not None
    (topic,) = answer["topics"]
    # As Kafka: a partition asked twice is answered once, with INVALID_REQUEST.
    assert [(p["partition_index"], p["error_code"]) for p in topic["partitions"]] == [
        (0, ErrorCode.INVALID_REQUEST),
        (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    cluster.cores[1].step(LogDirFailed("disk gone"), cluster.now)
    cluster.run()
    for timestamp in (MAX, EARLIEST_LOCAL, LATEST_TIERED):
        assert ask(cluster, timestamp)["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR


# ---- DescribeProducers ----


def append_transactional(
    cluster: Cluster, producer_id: int, epoch: int, timestamps: list[int], broker: int = 1
) -> None:
    """A transactional batch, written as the coordinators' writes are (see AppendingCluster)."""
    records = [(None, b"t%d" % i) for i in range(len(timestamps))]
    data = build_batch(records, base_timestamp=min(timestamps), timestamps=timestamps,
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=0,
                       is_transactional=True)  # fmt: skip
    token = ("append", object())
    cluster.cores[broker].step(Append(token, TOPIC, 0, data, -1, 30_000), cluster.now)
    cluster.run()


def write_marker(
    cluster: Cluster, producer_id: int, epoch: int, *, commit: bool, coordinator_epoch: int
) -> None:
    marker = {"producer_id": producer_id, "producer_epoch": epoch, "transaction_result": commit,
              "topics": [{"name": TOPIC, "partition_indexes": [0]}],
              "coordinator_epoch": coordinator_epoch}  # fmt: skip
    token = cluster.request(1, ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [marker]})
    cluster.run()
    answer = cluster.answers[token]
    assert answer is not None
    [partition] = answer["markers"][0]["topics"][0]["partitions"]
    assert partition["error_code"] == ErrorCode.NONE


def describe(cluster: Cluster, broker: int, topics: dict[str, list[int]]) -> list[Body]:
    """Every partition answer of a DescribeProducers v0 sent to `broker`."""
    body = {"topics": [{"name": name, "partition_indexes": ids} for name, ids in topics.items()]}
    token = cluster.request(broker, ApiKey.DESCRIBE_PRODUCERS, 0, body)
    answer = cluster.answers[token]
    assert answer is not None and answer["throttle_time_ms"] == 0
    return [p for topic in answer["topics"] for p in topic["partitions"]]


def producers_of(cluster: Cluster, broker: int) -> list[Body]:
    (partition,) = describe(cluster, broker, {TOPIC: [0]})
    assert partition["error_code"] == ErrorCode.NONE, partition
    return partition["active_producers"]


def state(pid: int, epoch: int, seq: int, ts: int, coordinator: int, txn_start: int) -> Body:
    return {"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq,
            "last_timestamp": ts, "coordinator_epoch": coordinator,
            "current_txn_start_offset": txn_start}  # fmt: skip


def test_describe_producers_shows_an_idempotent_producer_on_the_leader_and_the_follower() -> None:
    cluster = Cluster()
    assert producers_of(cluster, 1) == []
    idempotent = {"producer_id": 7, "producer_epoch": 2}
    produce(cluster, [T0 + 1, T0 + 2, T0 + 3], base_sequence=0, **idempotent)
    produce(cluster, [T0 + 4, T0 + 5], base_sequence=3, **idempotent)
    produce(cluster, [T0 + 9])  # not idempotent: no producer state
    expected = [state(7, 2, 4, T0 + 5, -1, -1)]
    assert producers_of(cluster, 1) == expected
    # Kafka answers from any replica's producer state, not only the leader's
    # (kafka-transactions describe-producers --broker-id asks a follower).
    assert producers_of(cluster, 2) == expected


def test_describe_producers_shows_an_open_transaction_until_its_marker() -> None:
    cluster = AppendingCluster()
    produce(cluster, [T0], producer_id=3, producer_epoch=0, base_sequence=0)
    append_transactional(cluster, producer_id=9, epoch=4, timestamps=[T0 + 10, T0 + 11])
    assert producers_of(cluster, 1) == [
        state(3, 0, 0, T0, -1, -1),
        state(9, 4, 1, T0 + 11, -1, 1),  # its transaction opened at offset 1
    ]
    cluster.now += 500  # the marker's time
    write_marker(cluster, producer_id=9, epoch=4, commit=False, coordinator_epoch=6)
    cluster.tick(1)  # the follower fetches the marker too
    for broker in (1, 2):
        assert producers_of(cluster, broker)[1] == state(9, 4, 1, cluster.now - 1, 6, -1)


def test_describe_producers_errors_per_partition() -> None:
    cluster = Cluster(brokers=(1, 2, 3))
    cluster.commit(
        CreateTopic("solo", "b" * 32, {}), CreatePartition("solo", 0, (1,), (1,), 1, 0, 0)
    )
    cluster.run()
    answers = describe(cluster, 2, {"solo": [0, 1], "nope": [0], "bad/name": [0], TOPIC: [0]})
    assert [(a["partition_index"], a["error_code"]) for a in answers] == [
        (0, ErrorCode.NOT_LEADER_OR_FOLLOWER),  # it exists, on another broker
        (1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),  # no such partition
        (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),  # no such topic
        (0, ErrorCode.INVALID_TOPIC_EXCEPTION),
        (0, ErrorCode.NONE),  # broker 2 follows t-0
    ]
    assert "illegal" in answers[3]["error_message"]
    assert [a["error_message"] for a in answers if a is not answers[3]] == [None] * 4
    cluster.cores[2].step(LogDirFailed("disk gone"), cluster.now)
    cluster.run()
    (offline,) = describe(cluster, 2, {TOPIC: [0]})
    assert offline["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR


def test_rlog_txn_producers_rows_are_kafka_transactions_columns() -> None:
    """`rlog txn producers` prints a core's answer as kafka-transactions.sh
    describe-producers does, after the partition: "None" where no transaction is open."""
    cluster = AppendingCluster()
    produce(cluster, [T0 + 1, T0 + 2], producer_id=8, producer_epoch=1, base_sequence=0)
    append_transactional(cluster, producer_id=3, epoch=0, timestamps=[T0 + 5])
    (answer,) = describe(cluster, 1, {TOPIC: [0]})
    states = txn.producer_states_of(answer)
    assert [state.cells() for state in states] == [
        (0, 3, 0, -1, 0, T0 + 5, 2),
        (0, 8, 1, -1, 1, T0 + 2, "None"),
    ]
    assert states[1].as_json(TOPIC)["current_transaction_start_offset"] is None
    assert list(txn.PRODUCERS_HEADERS[1:]) == [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]


# ---- golden: the bodies name every field of every advertised version ----


def missing_fields(struct: Struct, body: Body, version: int, path: str = "") -> Iterator[str]:
    for field in struct.fields:
        if not field.present(version):
            continue
        where = f"{path}{field.key}"
        if field.key not in body:
            yield where
        elif field.struct is not None:
            values = body[field.key] if field.is_array else [body[field.key]]
            for value in values:  # the callers check bodies with non-empty arrays too
                yield from missing_fields(field.struct, value, version, where + ".")


def golden_cluster() -> Cluster:
    cluster = Cluster()
    produce(cluster, [T0, T0 + 3], producer_id=5, producer_epoch=0, base_sequence=0)
    return cluster


@pytest.mark.parametrize("version", range(SUPPORTED[ApiKey.LIST_OFFSETS][0],
                                          SUPPORTED[ApiKey.LIST_OFFSETS][1] + 1))  # fmt: skip
def test_list_offsets_bodies_name_every_response_field(version: int) -> None:
    cluster = golden_cluster()
    core = cluster.cores[1]
    schema = load_message("ListOffsetsResponse").struct
    for timestamp in (LATEST, EARLIEST, MAX, EARLIEST_LOCAL, LATEST_TIERED, T0 + 1, -9):
        for offline in (False, True):
            asked = request_body(timestamp, partitions=(0, 0, 1) if offline else (0, 1))
            body = list_offsets(asked, version, core.image, core.hosted.get, offline=offline)
            assert list(missing_fields(schema, body, version)) == [], (timestamp, offline)


def test_describe_producers_bodies_name_every_response_field() -> None:
    cluster = golden_cluster()
    core = cluster.cores[1]
    schema = load_message("DescribeProducersResponse").struct
    low, high = SUPPORTED[ApiKey.DESCRIBE_PRODUCERS]
    asked = {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    refused = {"topics": [{"name": n, "partition_indexes": [0]} for n in (TOPIC, "x", "..")]}
    for version in range(low, high + 1):
        for request, offline in ((asked, False), (refused, True)):
            body = describe_producers(request, core.image, core.hosted.get, offline=offline)
            assert list(missing_fields(schema, body, version)) == []
            [first] = body["topics"][0]["partitions"]
            assert bool(first["active_producers"]) != offline  # both shapes were checked


def test_the_core_serves_describe_producers_as_a_client_request() -> None:
    """A request stepped straight into the core, as the daemon's `_served_by_core` does."""
    cluster = golden_cluster()
    token = ("client", object())
    body = {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    cluster.cores[1].step(ClientRequest(token, ApiKey.DESCRIBE_PRODUCERS, 0, body), cluster.now)
    ready = cluster.cores[1].ready()
    assert [t for t, _ in ready.responses] == [token]
    cluster.cores[1].advance(ready)
