"""The Spark source's watermark query (rlog/spark/planning.py) asks again after the errors a
leader change or a killed broker gives, and fails at once on any other."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from rlog.spark import planning


class AnsweringAfter:
    """A consumer whose watermark query fails with `errors` first (one per call), then answers."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return (0, 42)


def test_a_killed_brokers_handle_and_a_moved_leader_are_asked_again() -> None:
    consumer = AnsweringAfter(KafkaError._DESTROY_BROKER, KafkaError.NOT_LEADER_FOR_PARTITION)
    assert planning.watermarks(consumer, [("events", 0)]) == {("events", 0): (0, 42)}  # type: ignore[arg-type]
    assert consumer.calls == 3


def test_other_errors_fail_the_query_at_once() -> None:
    consumer = AnsweringAfter(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        planning.watermarks(consumer, [("events", 0)])  # type: ignore[arg-type]
    assert consumer.calls == 1
