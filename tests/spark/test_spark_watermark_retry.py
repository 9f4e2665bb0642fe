"""A leader change during planning (NOT_LEADER_FOR_PARTITION) is retried, not fatal."""

from __future__ import annotations

import pytest

pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException

from rlog.spark.planning import watermarks


class FlakyConsumer:
    def __init__(self) -> None:
        self.calls = 0

    def get_watermark_offsets(self, *_args: object, **_kwargs: object) -> tuple[int, int]:
        self.calls += 1
        if self.calls == 1:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return (0, 7)


def test_watermarks_retry_not_leader() -> None:
    consumer = FlakyConsumer()
    assert watermarks(consumer, [("t", 0)]) == {("t", 0): (0, 7)}  # type: ignore[arg-type]
    assert consumer.calls == 2
