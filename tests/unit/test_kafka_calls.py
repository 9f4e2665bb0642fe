"""A client call that never returns is abandoned at its deadline (librdkafka's
send_offsets_to_transaction can ignore its own timeout)."""

from __future__ import annotations

import threading
import time

import pytest

from rlog.kafka_calls import CallTimedOut, call_with_deadline


def test_a_call_that_returns_or_raises_is_passed_through() -> None:
    done: list[int] = []
    call_with_deadline("append", lambda: done.append(1), 5)
    assert done == [1]

    def refused() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        call_with_deadline("refused", refused, 5)


def test_a_call_that_never_returns_is_abandoned_at_its_deadline() -> None:
    stuck = threading.Event()
    started = time.monotonic()
    with pytest.raises(CallTimedOut, match="send_offsets_to_transaction did not return"):
        call_with_deadline("send_offsets_to_transaction", stuck.wait, 0.2)
    assert time.monotonic() - started < 2
    stuck.set()  # let the abandoned thread end
