"""A Produce is answered once, for every partition it names, whatever the order in which the
partitions' outcomes are known. A transactional batch that opens its producer's transaction
waits for the coordinator's word (KIP-890), and that word can come at once (no coordinator to
ask): the answer must still wait for the partitions after it."""

from __future__ import annotations

from unit.test_broker_core import PRODUCE_V, TOPIC, Cluster

from rlog.core.metadata.records import CreatePartition
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch


def transactional_batch(value: bytes) -> bytes:
    return build_batch(
        [(None, value)], producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True
    )


def test_a_verdict_known_at_once_does_not_answer_before_the_other_partitions() -> None:
    cluster = Cluster(brokers=(1,))
    cluster.commit(CreatePartition(TOPIC, 1, (1,), (1,), 1, 0, 0))
    cluster.run()
    # No __transaction_state partition has a leader: the first partition's verification fails
    # at once, before the second partition is looked at.
    partitions = [
        {"index": 0, "records": transactional_batch(b"a")},
        {"index": 1, "records": transactional_batch(b"b")},
    ]
    body = {"transactional_id": "tx", "acks": -1, "timeout_ms": 5_000,
            "topic_data": [{"name": TOPIC, "partition_data": partitions}]}  # fmt: skip
    token = cluster.request(1, ApiKey.PRODUCE, PRODUCE_V, body)
    cluster.run()
    answer = cluster.answers[token]
    assert answer is not None
    [topic] = answer["responses"]
    errors = {p["index"]: ErrorCode(p["error_code"]) for p in topic["partition_responses"]}
    assert errors == {0: ErrorCode.NOT_ENOUGH_REPLICAS, 1: ErrorCode.NOT_ENOUGH_REPLICAS}
