"""Idempotent producer sequence rules (Kafka's ProducerAppendInfo), one partition."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlog.core.producer_state import SEQUENCE_MODULUS, ProducerStateError, ProducerStateManager
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import BatchHeader

PID = 1000


def header(sequence: int, count: int = 1, epoch: int = 0, producer_id: int = PID) -> BatchHeader:
    return BatchHeader(
        base_offset=0, batch_length=100, partition_leader_epoch=0, magic=2, crc=0,
        attributes=0, last_offset_delta=count - 1, base_timestamp=0, max_timestamp=0,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
        records_count=count,
    )  # fmt: skip


def append(state: ProducerStateManager, batch: BatchHeader, offset: int) -> None:
    assert state.check(batch) is None
    state.update(batch, offset)


def test_a_new_producer_may_start_at_any_sequence() -> None:
    state = ProducerStateManager()
    assert state.check(header(42)) is None


def test_a_retry_of_a_retained_batch_returns_its_original_offsets() -> None:
    state = ProducerStateManager()
    append(state, header(0, count=3), offset=10)
    append(state, header(3, count=2), offset=13)
    duplicate = state.check(header(0, count=3))
    assert duplicate is not None
    assert (duplicate.first_offset, duplicate.last_offset) == (10, 12)


def test_only_the_last_five_batches_are_remembered() -> None:
    state = ProducerStateManager()
    for i in range(6):
        append(state, header(i), offset=i)
    assert state.check(header(5)) is not None
    with pytest.raises(ProducerStateError) as refused:
        state.check(header(0))  # forgotten, and not the next sequence either
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_gap_in_the_sequence_is_out_of_order() -> None:
    state = ProducerStateManager()
    append(state, header(0), offset=0)
    with pytest.raises(ProducerStateError) as refused:
        state.check(header(2))
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_an_older_epoch_is_fenced_and_a_newer_one_starts_at_zero() -> None:
    state = ProducerStateManager()
    append(state, header(0, epoch=3), offset=0)
    with pytest.raises(ProducerStateError) as fenced:
        state.check(header(1, epoch=2))
    assert fenced.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as out_of_order:
        state.check(header(5, epoch=4))
    assert out_of_order.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(state, header(0, epoch=4), offset=1)
    assert state.entry(PID).epoch == 4


def test_sequences_wrap_after_the_largest_int32() -> None:
    state = ProducerStateManager()
    append(state, header(SEQUENCE_MODULUS - 2, count=2), offset=0)
    append(state, header(0), offset=2)


def test_non_idempotent_batches_are_not_tracked() -> None:
    state = ProducerStateManager()
    append(state, header(-1, producer_id=-1), offset=0)
    assert len(state) == 0


@given(st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=30))
def test_rebuilding_from_the_log_gives_the_same_answers(counts: list[int]) -> None:
    live = ProducerStateManager()
    headers = []
    sequence = offset = 0
    for count in counts:
        batch = header(sequence, count=count)
        append(live, batch, offset)
        headers.append(batch._replace(base_offset=offset))
        sequence += count
        offset += count
    rebuilt = ProducerStateManager()
    rebuilt.rebuild(headers)
    for batch in headers[-5:]:
        assert rebuilt.check(batch) == live.check(batch)
    assert rebuilt.check(header(sequence)) is None
