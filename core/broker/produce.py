"""A Produce (or a coordinator's Append) in progress: one answer per partition, each known at
once or once its batch is synced (flush policy) and acknowledged by the ISR (acks=all).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from rlog.core.broker.messages import AppendAnswer, Body, Token, TopicPartition
from rlog.core.protocol.errors import ErrorCode

STORAGE_ERROR_VERSION_MIN = 4  # older Produce versions have no KAFKA_STORAGE_ERROR


@dataclass(slots=True)
class _Slot:
    answer: AppendAnswer | None = None
    waits_for_ack: bool = False
    waits_for_sync: bool = False


@dataclass(slots=True)
class ProduceJob:
    token: Token
    acks: int
    api_version: int | None  # None: an Append, answered with its AppendAnswer
    # The group coordinator's own writes: called with the answer instead of answering a token.
    on_done: Callable[[AppendAnswer], None] | None = None
    partitions: list[TopicPartition] = field(default_factory=list)
    _slots: list[_Slot] = field(default_factory=list)
    answered: bool = False
    # Until every partition is added, no answer: a partition's outcome can be known at once
    # (a verdict that needs no question), while partitions after it are not yet in the job.
    adding: bool = True

    def add(self, topic: str, partition: int) -> int:
        self.partitions.append((topic, partition))
        self._slots.append(_Slot())
        return len(self._slots) - 1

    def all_added(self) -> None:
        self.adding = False

    def fill(self, position: int, answer: AppendAnswer) -> None:
        """The partition's final answer (an error, or an append that waits for nothing)."""
        slot = self._slots[position]
        slot.answer, slot.waits_for_ack, slot.waits_for_sync = answer, False, False

    def appended(
        self, position: int, answer: AppendAnswer, *, waits_for_ack: bool, waits_for_sync: bool
    ) -> None:
        self._slots[position] = _Slot(answer, waits_for_ack, waits_for_sync)

    def acked(self, position: int, error: ErrorCode, message: str | None = None) -> None:
        """acks=all ended: the ISR has the batch (NONE), or why not."""
        slot = self._slots[position]
        if slot.answer is None or not slot.waits_for_ack:
            return
        slot.waits_for_ack = False
        if slot.answer.error == ErrorCode.NONE and (error != ErrorCode.NONE or message):
            slot.answer = replace(slot.answer, error=error, message=message)

    def synced(self, position: int) -> None:
        self._slots[position].waits_for_sync = False

    @property
    def done(self) -> bool:
        if self.adding:
            return False
        for slot in self._slots:  # asked after every partition's outcome: a loop, no calls
            if slot.answer is None or slot.waits_for_ack or slot.waits_for_sync:
                return False
        return True

    @property
    def answers(self) -> list[AppendAnswer | None]:
        return [slot.answer for slot in self._slots]


def produce_partition_body(index: int, answer: AppendAnswer, api_version: int) -> Body:
    """One partition's Produce answer in Kafka's shape."""
    body: Body = {
        "index": index,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": answer.log_start_offset,
        "record_errors": [],
        "error_message": None,
    }
    error = answer.error
    if answer.storage_failed and api_version < STORAGE_ERROR_VERSION_MIN:
        error = ErrorCode.NOT_LEADER_OR_FOLLOWER
    if error != ErrorCode.NONE:
        record_errors = [
            {"batch_index": index, "batch_index_error_message": message}
            for index, message in answer.record_errors
        ]
        return body | {
            "error_code": error,
            "error_message": answer.message,
            "record_errors": record_errors,
        }
    return body | {
        "error_code": ErrorCode.NONE,
        "base_offset": answer.base_offset,
        "log_append_time_ms": answer.log_append_time_ms,
    }
