"""WriteTxnMarkers on a partition leader: the answer comes once every marker of the request has
its outcome, whatever the order in which they end. The coordinator takes NONE for a marker the
ISR holds; a marker told NONE that the ISR never got is truncated by the next leader, and the
transaction it ended stays open there (the simulator found an aborted transaction read as
committed when the producer's next transaction committed over it)."""

from __future__ import annotations

from typing import Any

from unit.test_broker_core import TOPIC, Cluster

from rlog.core.metadata.records import CreatePartition
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

Body = dict[str, Any]


def abort_marker(*partitions: int) -> Body:
    marker = {"producer_id": 5, "producer_epoch": 0, "transaction_result": False,
              "topics": [{"name": TOPIC, "partition_indexes": list(partitions)}],
              "coordinator_epoch": 0}  # fmt: skip
    return {"markers": [marker]}


def errors_of(answer: Body) -> dict[int, ErrorCode]:
    [topic] = answer["markers"][0]["topics"]
    return {p["partition_index"]: ErrorCode(p["error_code"]) for p in topic["partitions"]}


def test_the_answer_waits_for_a_replicated_marker_after_one_refused_at_once() -> None:
    # t-0 has its ISR (1, 2); t-1 only (1,), below min.insync.replicas: its marker is refused
    # at once, before t-0's is even appended.
    cluster = Cluster(brokers=(1, 2), topic_configs={"min.insync.replicas": "2"})
    cluster.commit(CreatePartition(TOPIC, 1, (1, 2), (1,), 1, 0, 0))
    cluster.run()
    token = cluster.request(1, ApiKey.WRITE_TXN_MARKERS, 1, abort_marker(1, 0))
    # Broker 1 has stepped the request; nothing it sent has been delivered yet, so broker 2
    # has not fetched t-0's marker.
    assert cluster.replica(1).log_end_offset == 1 > cluster.replica(1).high_watermark
    assert token not in cluster.answers, cluster.answers.get(token)

    cluster.run()
    answer = cluster.answers[token]
    assert answer is not None
    assert errors_of(answer) == {1: ErrorCode.NOT_ENOUGH_REPLICAS, 0: ErrorCode.NONE}
    assert cluster.replica(2).log_end_offset == 1
