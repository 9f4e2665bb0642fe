"""DeleteRecords on the broker core, as Kafka's deleteRecords and DelayedDeleteRecords: the leader
moves the log start at once, every live replica follows, and the answer waits for them."""

from __future__ import annotations

from typing import Any

import pytest
from sim.sim_fs import SimFileSystem
from test_admin_answers import missing_fields
from test_broker_core import TOPIC, Cluster, fetch_body, list_offsets_body, partition_of

from rlog.core.broker import Token
from rlog.core.broker.record_deletion import RecordDeletion
from rlog.core.metadata.records import FenceBroker
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.protocol.schema import load_message
from rlog.core.records import build_batch

Body = dict[str, Any]
DELETE_RECORDS_V = 2


def delete_records(
    cluster: Cluster, broker: int, offset: int, *, topic: str = TOPIC, timeout_ms: int = 5_000
) -> Token:
    body = {
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}],
        "timeout_ms": timeout_ms,
    }
    return cluster.request(broker, ApiKey.DELETE_RECORDS, DELETE_RECORDS_V, body)


def answer_of(cluster: Cluster, token: Token) -> tuple[ErrorCode, int]:
    """(error, low watermark) of a DeleteRecords' one partition."""
    body = cluster.answers[token]
    assert body is not None
    partition = partition_of(body)
    return ErrorCode(partition["error_code"]), partition["low_watermark"]


def three_replicas_with(records: int, **options: Any) -> Cluster:
    cluster = Cluster(brokers=(1, 2, 3), **options)
    keyed = build_batch([(b"k%d" % i, b"v%d" % i) for i in range(records)])
    cluster.produce(1, keyed, acks=-1)
    cluster.run()
    assert cluster.replica(1).high_watermark == records
    return cluster


def test_the_log_start_moves_on_every_replica_before_the_answer() -> None:
    cluster = three_replicas_with(10)
    token = delete_records(cluster, 1, 4)
    cluster.run()
    assert answer_of(cluster, token) == (ErrorCode.NONE, 4)
    assert [cluster.replica(b).log_start_offset for b in (1, 2, 3)] == [4, 4, 4]

    earliest = cluster.request(1, ApiKey.LIST_OFFSETS, 5, list_offsets_body(-2, -1))
    assert partition_of(cluster.answers[earliest])["offset"] == 4
    below = cluster.fetch(1, 3)
    assert cluster.error(below) == ErrorCode.OFFSET_OUT_OF_RANGE
    from_start = cluster.fetch(1, 4)
    assert cluster.error(from_start) == ErrorCode.NONE


def test_minus_one_deletes_up_to_the_high_watermark() -> None:
    cluster = three_replicas_with(6)
    token = delete_records(cluster, 1, -1)
    cluster.run()
    assert answer_of(cluster, token) == (ErrorCode.NONE, 6)


def test_a_log_start_never_moves_back_and_the_answer_says_where_it_is() -> None:
    cluster = three_replicas_with(8)
    cluster.run()
    first = delete_records(cluster, 1, 5)
    cluster.run()
    assert answer_of(cluster, first) == (ErrorCode.NONE, 5)
    again = delete_records(cluster, 1, 2)
    cluster.run()
    assert answer_of(cluster, again) == (ErrorCode.NONE, 5)


def test_offsets_past_the_high_watermark_or_negative_are_out_of_range() -> None:
    cluster = three_replicas_with(3)
    for offset in (4, -2):
        token = delete_records(cluster, 1, offset)
        cluster.run()
        assert answer_of(cluster, token) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert cluster.replica(1).log_start_offset == 0


def test_only_the_leader_deletes_and_unknown_partitions_are_refused() -> None:
    cluster = three_replicas_with(3)
    follower = delete_records(cluster, 2, 1)
    unknown = delete_records(cluster, 1, 1, topic="nope")
    internal = delete_records(cluster, 1, 1, topic="__consumer_offsets")
    cluster.run()
    assert answer_of(cluster, follower) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
    assert answer_of(cluster, unknown) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)
    assert answer_of(cluster, internal) == (ErrorCode.INVALID_TOPIC_EXCEPTION, -1)
    assert [cluster.replica(b).log_start_offset for b in (1, 2, 3)] == [0, 0, 0]


def test_a_compacted_topic_refuses_it_by_policy() -> None:
    cluster = three_replicas_with(3, topic_configs={"cleanup.policy": "compact"})
    token = delete_records(cluster, 1, 2)
    cluster.run()
    assert answer_of(cluster, token) == (ErrorCode.POLICY_VIOLATION, -1)


def test_a_live_follower_that_does_not_fetch_holds_the_answer_until_its_timeout() -> None:
    cluster = three_replicas_with(5)
    cluster.cut_off.add(3)
    token = delete_records(cluster, 1, 3, timeout_ms=2_000)
    cluster.run()
    assert token not in cluster.answers
    assert cluster.replica(2).log_start_offset == 3
    cluster.tick(1_000)
    assert token not in cluster.answers
    cluster.tick(1_001)
    assert answer_of(cluster, token) == (ErrorCode.REQUEST_TIMED_OUT, -1)
    assert cluster.replica(1).log_start_offset == 3  # what was done stays done


def test_a_partition_named_twice_is_answered_once_with_the_last_offset() -> None:
    """As Kafka reads the request into a map. Two entries for one partition left the first
    never filled in: NONE with low watermark -1, even when the wait timed out."""
    cluster = three_replicas_with(5)
    cluster.cut_off.add(3)
    twice = [{"partition_index": 0, "offset": 2}, {"partition_index": 0, "offset": 3}]
    body = {"topics": [{"name": TOPIC, "partitions": twice}], "timeout_ms": 1_000}
    token = cluster.request(1, ApiKey.DELETE_RECORDS, DELETE_RECORDS_V, body)
    cluster.tick(1_001)
    answer = cluster.answers[token]
    assert answer is not None
    [topic] = answer["topics"]
    assert [
        (p["partition_index"], p["error_code"], p["low_watermark"]) for p in topic["partitions"]
    ] == [(0, ErrorCode.REQUEST_TIMED_OUT, -1)]
    assert cluster.replica(1).log_start_offset == 3


def test_a_dead_broker_does_not_hold_it() -> None:
    cluster = three_replicas_with(5)
    cluster.cut_off.add(3)
    cluster.commit(FenceBroker(3, cluster.image.brokers[3].epoch))
    cluster.run()
    token = delete_records(cluster, 1, 3)
    cluster.run()
    assert answer_of(cluster, token) == (ErrorCode.NONE, 3)


def test_the_new_log_start_survives_a_restart() -> None:
    cluster = three_replicas_with(10)
    token = delete_records(cluster, 1, 7)
    cluster.run()
    assert answer_of(cluster, token) == (ErrorCode.NONE, 7)
    for b in (1, 2, 3):
        cluster.cores[b].close()
        cluster.start(b)
    cluster.run()
    assert [cluster.replica(b).log_start_offset for b in (1, 2, 3)] == [7, 7, 7]
    consumer = cluster.request(1, ApiKey.FETCH, 12, fetch_body(0))
    assert cluster.error(consumer) == ErrorCode.OFFSET_OUT_OF_RANGE


def test_the_new_log_start_survives_a_power_loss_right_after_the_answer() -> None:
    cluster = Cluster(brokers=(1,), topic_configs={"flush.messages": "1"})
    cluster.produce(1, build_batch([(None, b"v%d" % i) for i in range(10)]), acks=1)
    cluster.run()
    token = delete_records(cluster, 1, 6)
    cluster.run()
    assert answer_of(cluster, token) == (ErrorCode.NONE, 6)
    fs = cluster.fs[1]
    assert isinstance(fs, SimFileSystem)
    fs.crash(power_loss=True)
    cluster.start(1)
    cluster.run()
    assert (cluster.replica(1).log_start_offset, cluster.replica(1).log_end_offset) == (6, 10)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_answer_names_every_field_of_its_schema(version: int) -> None:
    """A golden check against Kafka's DeleteRecordsResponse: answered at once and refused
    partitions, each version, before the codec fills any default in."""
    cluster = Cluster(brokers=(1,))
    cluster.produce(1, build_batch([(None, b"v")]), acks=1)
    cluster.run()
    answers: list[Body] = []
    deletion = RecordDeletion(lambda _token, body: answers.append(body))
    body = {
        "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 1}]},
            {"name": "nope", "partitions": [{"partition_index": 3, "offset": 1}]},
        ],
        "timeout_ms": 1_000,
    }
    core = cluster.cores[1]
    deletion.serve(("t",), body, "", core.hosted.get, cluster.image, cluster.now)
    [answer] = answers
    seen: set[str] = set()
    response = load_message("DeleteRecordsResponse").struct
    assert missing_fields(response, version, answer, "DeleteRecordsResponse", seen) == []
    [[ours], [theirs]] = [t["partitions"] for t in answer["topics"]]
    assert (ours["low_watermark"], ours["error_code"]) == (1, ErrorCode.NONE)
    assert theirs["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
