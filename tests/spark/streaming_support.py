"""Run a streaming query over everything its rlog source holds, on any PySpark 4.x.

PySpark 4.2+ gives Python stream readers Trigger.AvailableNow (with maxOffsetsPerTrigger's
batches). PySpark 4.0/4.1 do not: Spark runs Trigger.AvailableNow as a single micro-batch for
such sources, which the rlog reader caps at maxOffsetsPerTrigger like any other. There the query
runs on a short processing-time trigger until `processAllAvailable()` returns, which is the same
sequence of batches as long as nobody writes to the source meanwhile."""

from __future__ import annotations

import threading
from typing import Any

from rlog.spark.stream_reader import ADMISSION_CONTROL

__all__ = ["ADMISSION_CONTROL", "finish", "run_to_end", "start"]


def start(writer: Any) -> Any:
    """Start `writer` (a DataStreamWriter without a trigger) to read what its source holds."""
    if ADMISSION_CONTROL:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="100 milliseconds").start()


def finish(query: Any, timeout_s: float | None) -> Any:
    """Wait until a query from `start()` has processed what its source held when it started, or
    failed (see query.exception()); AssertionError after `timeout_s` (None: no limit)."""
    if ADMISSION_CONTROL:
        if timeout_s is None:
            query.awaitTermination()
        else:
            assert query.awaitTermination(timeout_s), f"the query did not finish in {timeout_s} s"
        return query
    timed_out = threading.Event()

    def give_up() -> None:
        timed_out.set()
        query.stop()

    timer = threading.Timer(timeout_s, give_up) if timeout_s is not None else None
    if timer is not None:
        timer.start()
    try:
        query.processAllAvailable()
    except Exception:
        if query.exception() is None:
            raise
        # The query failed: query.exception() tells.
    finally:
        if timer is not None:
            timer.cancel()
        query.stop()
    assert not timed_out.is_set(), f"the query did not finish in {timeout_s} s"
    return query


def run_to_end(writer: Any, timeout_s: float | None) -> Any:
    """`start()` then `finish()`: the query, ended."""
    return finish(start(writer), timeout_s)
