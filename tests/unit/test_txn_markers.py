"""Marker delivery for a hosted transaction coordinator, and KIP-890 verification on partition
leaders: the retry rules that decide whether a transaction's end reaches every partition."""

from __future__ import annotations

from typing import Any

from rlog.core.broker.markers import MarkerDelivery
from rlog.core.broker.messages import PeerRequest
from rlog.core.broker.verification import TxnVerification
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    CreatePartition,
    CreateTopic,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import TxnMarker

MARKER = TxnMarker(producer_id=7, producer_epoch=1, coordinator_epoch=3, committed=True)


def _image(leaders: dict[tuple[str, int], int]) -> MetadataImage:
    image = MetadataImage()
    offset = 0

    def apply(record: Any) -> None:
        nonlocal offset
        image.apply(offset, record)
        offset += 1

    for broker in (1, 2, 3):
        apply(RegisterBroker(broker, f"b{broker}", offset, "127.0.0.1", 9000 + broker, None))
        apply(UnfenceBroker(broker, offset - 1))
    for topic in sorted({t for t, _ in leaders}):
        apply(CreateTopic(topic, f"{offset:032x}", {}))
    for (topic, partition), leader in leaders.items():
        apply(CreatePartition(topic, partition, (1, 2, 3), (1, 2, 3), leader, 0, 0))
    return image


def _answer(request: PeerRequest, error: ErrorCode) -> dict[str, Any]:
    (marker,) = request.body["markers"]
    return {
        "markers": [
            {
                "producer_id": marker["producer_id"],
                "topics": [
                    {
                        "name": topic["name"],
                        "partitions": [
                            {"partition_index": index, "error_code": error}
                            for index in topic["partition_indexes"]
                        ],
                    }
                    for topic in marker["topics"]
                ],
            }
        ]
    }


class Delivery:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.local: list[tuple[tuple[str, int], Any]] = []
        self.done: list[int] = []
        self.out: list[PeerRequest] = []
        self.markers = MarkerDelivery(1, self._write_local, timeout_ms=1_000)

    def _write_local(self, key: tuple[str, int], marker: TxnMarker, on_done: Any) -> None:
        self.local.append((key, on_done))

    def deliver(self, *keys: tuple[str, int], now: int = 0) -> None:
        self.markers.deliver(MARKER, keys, self.done.append, self.image, now, self.out)

    def answer(self, error: ErrorCode) -> None:
        request = self.out.pop(0)
        self.markers.on_answer(request.token, _answer(request, error), self.image, self.out)


def test_markers_go_to_each_leader_and_the_coordinator_hears_once_all_are_written() -> None:
    delivery = Delivery(_image({("t", 0): 1, ("t", 1): 2, ("t", 2): 2}))
    delivery.deliver(("t", 0), ("t", 1), ("t", 2))
    assert [key for key, _ in delivery.local] == [("t", 0)]
    (request,) = delivery.out
    assert (request.broker_id, request.api_key, request.channel) == (
        2,
        ApiKey.WRITE_TXN_MARKERS,
        "markers",
    )
    assert request.body["markers"][0]["topics"] == [{"name": "t", "partition_indexes": [1, 2]}]
    delivery.local[0][1](ErrorCode.NONE)
    assert delivery.done == []
    delivery.answer(ErrorCode.NONE)
    assert delivery.done == [0]


def test_a_broker_that_does_not_know_the_partition_yet_is_asked_again() -> None:
    """A restarted broker answers UNKNOWN_TOPIC_OR_PARTITION until it has read the metadata:
    the marker is not written, so the transaction is not complete."""
    delivery = Delivery(_image({("t", 0): 2}))
    delivery.deliver(("t", 0), now=0)
    delivery.answer(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert delivery.done == [] and delivery.out == []
    delivery.markers.tick(delivery.image, 50, delivery.out)
    assert delivery.out == []  # backing off
    delivery.markers.tick(delivery.image, 200, delivery.out)
    delivery.answer(ErrorCode.NONE)
    assert delivery.done == [200]


def test_a_deleted_partition_needs_no_marker() -> None:
    delivery = Delivery(_image({("t", 0): 2}))
    delivery.deliver(("t", 0), ("gone", 0))
    delivery.answer(ErrorCode.NONE)
    assert delivery.done == [0]


def test_a_lost_answer_is_retried_after_the_request_timeout_and_a_late_one_ignored() -> None:
    delivery = Delivery(_image({("t", 0): 2}))
    delivery.deliver(("t", 0), now=0)
    first = delivery.out.pop(0)
    delivery.markers.tick(delivery.image, 999, delivery.out)
    assert delivery.out == []
    delivery.markers.tick(delivery.image, 1_000, delivery.out)  # timed out: backing off
    delivery.markers.tick(delivery.image, 1_200, delivery.out)
    assert len(delivery.out) == 1
    delivery.markers.on_answer(first.token, _answer(first, ErrorCode.NONE), delivery.image, [])
    assert delivery.done == []  # the late answer to the first request does not count
    delivery.answer(ErrorCode.NONE)
    assert delivery.done == [1_200]


def test_a_stale_coordinator_stops_delivering_without_completing() -> None:
    delivery = Delivery(_image({("t", 0): 2}))
    delivery.deliver(("t", 0))
    delivery.answer(ErrorCode.TRANSACTION_COORDINATOR_FENCED)
    delivery.markers.tick(delivery.image, 10_000, delivery.out)
    assert delivery.done == [] and delivery.out == [] and delivery.markers.pending == 0


# ---- KIP-890 verification ----


class Verification:
    def __init__(self) -> None:
        self.image = _image({("t", 0): 1, ("__transaction_state", 0): 2})
        self.verification = TxnVerification(1, timeout_ms=1_000)
        self.out: list[PeerRequest] = []
        self.verdicts: list[ErrorCode] = []

    def ask(self, transactional_id: str | None = "tx", now: int = 0) -> None:
        self.verification.ask(
            ("t", 0), transactional_id, 7, 1, self.verdicts.append, self.image, now, self.out,
            lambda token, body: None,
        )  # fmt: skip

    def answer(self, error: ErrorCode) -> None:
        request = self.out.pop(0)
        body = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "results_by_transaction": [
                {
                    "transactional_id": "tx",
                    "topic_results": [
                        {
                            "name": "t",
                            "results_by_partition": [
                                {"partition_index": 0, "partition_error_code": error}
                            ],
                        }
                    ],
                }
            ],
        }
        self.verification.on_answer(request.token, body)


def test_a_batch_opening_a_transaction_is_appended_once_the_coordinator_confirms() -> None:
    verification = Verification()
    verification.ask()
    (request,) = verification.out
    assert request.broker_id == 2 and request.api_key == ApiKey.ADD_PARTITIONS_TO_TXN
    assert request.api_version == 4
    assert request.body["transactions"][0]["verify_only"] is True
    verification.answer(ErrorCode.NONE)
    assert verification.verdicts == [ErrorCode.NONE]


def test_a_partition_not_in_the_transaction_is_refused() -> None:
    verification = Verification()
    verification.ask()
    verification.answer(ErrorCode.INVALID_TXN_STATE)
    assert verification.verdicts == [ErrorCode.INVALID_TXN_STATE]


def test_a_marker_between_question_and_answer_makes_the_answer_stale() -> None:
    """The transaction ended (its marker was appended here) while the question was out: the
    batch would open a transaction no coordinator knows of."""
    verification = Verification()
    verification.ask()
    verification.verification.marker_written(("t", 0), 7)
    verification.answer(ErrorCode.NONE)
    assert verification.verdicts == [ErrorCode.INVALID_TXN_STATE]


def test_an_unreachable_coordinator_is_a_retriable_error_for_the_producer() -> None:
    verification = Verification()
    verification.ask(now=0)
    verification.verification.tick(1_000)
    verification.ask(now=1_000)
    verification.answer(ErrorCode.NONE)  # the first question's late answer is ignored
    verification.answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert verification.verdicts == [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS]


def test_a_transactional_batch_without_its_transactional_id_is_refused() -> None:
    verification = Verification()
    verification.ask(transactional_id=None)
    assert verification.verdicts == [ErrorCode.INVALID_TXN_STATE] and verification.out == []
