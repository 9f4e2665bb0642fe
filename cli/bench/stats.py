"""Per-record latency bookkeeping, kept in flat arrays so the hot loops stay cheap.

Every completed record (acknowledged for ``produce``, consumed for ``e2e``) appends four
numbers: when it was due to be sent and when it completed (seconds since the run started, on
the monotonic clock), the latency between the two in ms, and its partition. The closed produce
loop, where every cycle counts, keeps only the last two (see ``ClosedLoopDeliveries``).
Open-loop runs count latency from the *scheduled* send time ``i / rate``, so a stalled client or
broker shows up as latency instead of a silently lower rate (coordinated omission); at
``--throughput -1`` a record is due when the loop gets to it.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import KafkaError

from rlog.cli.bench.common import HEADER, MB

PERCENTILES = (0.5, 0.95, 0.99, 0.999)
PROGRESS_SAMPLE = 20_000  # latencies sorted for the progress line's p99, at most

Clock = Callable[[], float]


class DeliveredMessage(Protocol):
    """The parts of confluent_kafka.Message a delivery report needs (fakes in the tests)."""

    def value(self) -> bytes | None: ...
    def latency(self) -> float | None: ...
    def partition(self) -> int | None: ...


def percentile(ordered: Sequence[float], p: float) -> float:
    """kafka-producer-perf-test's rule: the value at index ``int(p * count)``."""
    count = len(ordered)
    return ordered[min(int(p * count), count - 1)] if count else 0.0


@dataclass
class LatencyStats:
    record_size: int
    rate: float = -1.0  # records/s the run aims at; <= 0: as fast as possible
    started: float = 0.0  # monotonic time the run started
    started_wall_ns: int = 0
    ended: float | None = None
    sent_s: array[float] = field(default_factory=lambda: array("d"))
    done_s: array[float] = field(default_factory=lambda: array("d"))
    latency_ms: array[float] = field(default_factory=lambda: array("d"))
    partitions: array[int] = field(default_factory=lambda: array("i"))
    errors: int = 0
    first_error: KafkaError | None = None
    window_start: float = 0.0
    window_from: int = 0  # index of the window's first record in the arrays
    # Closed loop only: (time, records so far) after each poll that served reports, standing
    # in for per-record completion times (reports are served, and timed, only in poll()).
    mark_s: array[float] = field(default_factory=lambda: array("d"))
    mark_count: array[int] = field(default_factory=lambda: array("q"))

    @property
    def open_loop(self) -> bool:
        return self.rate > 0

    def start(self, now: float) -> None:
        self.started = self.window_start = now
        self.started_wall_ns = time.time_ns()

    def due_s(self, index: int) -> float:
        """When record ``index`` was scheduled, in seconds since the start (open loop)."""
        return index / self.rate

    def add(self, sent_s: float, done_s: float, partition: int) -> None:
        """One completed record (the hot paths inline this)."""
        self.sent_s.append(sent_s)
        self.done_s.append(done_s)
        self.latency_ms.append((done_s - sent_s) * 1000.0)
        self.partitions.append(partition)

    def fail(self, error: KafkaError) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = error

    @property
    def count(self) -> int:
        return len(self.latency_ms)

    def mark(self, now: float) -> None:
        """After a poll() of the closed loop: the reports it served completed by ``now``."""
        count = len(self.latency_ms)
        if count and (not self.mark_count or self.mark_count[-1] != count):
            self.mark_s.append(now - self.started)
            self.mark_count.append(count)

    def completion_times(self) -> array[float]:
        """Each record's completion time (s since the start), in the order of the arrays."""
        if len(self.done_s) == len(self.latency_ms):
            return self.done_s
        done, served = array("d"), 0
        for at, count in zip(self.mark_s, self.mark_count, strict=True):
            done.extend([at] * (count - served))
            served = count
        end = (self.ended or self.started) - self.started
        done.extend([end] * (len(self.latency_ms) - served))
        return done

    def send_times(self) -> array[float]:
        """Each record's due time: kept by open-loop runs, else completion minus latency."""
        if len(self.sent_s) == len(self.latency_ms):
            return self.sent_s
        return array(
            "d",
            (
                d - ms / 1000.0
                for d, ms in zip(self.completion_times(), self.latency_ms, strict=True)
            ),
        )

    def window_line(self, now: float, verb: str = "sent", what: str = "latency") -> str | None:
        """kafka-producer-perf-test's window line, once a window is over (and starts the next)."""
        elapsed = now - self.window_start
        end = len(self.latency_ms)
        count = end - self.window_from
        if elapsed <= 0 or count == 0:
            return None
        window = self.latency_ms[self.window_from : end]
        rate = count / elapsed
        line = (
            f"{count} records {verb}, {rate:.1f} records/sec "
            f"({rate * self.record_size / MB:.2f} MB/sec), "
            f"{sum(window) / count:.1f} ms avg {what}, "
            f"{max(window):.1f} ms max {what}."
        )
        self.window_start, self.window_from = now, end
        return line

    def p99_so_far(self) -> float | None:
        """p99 of the latencies so far, from an even sample so it stays cheap on long runs."""
        latencies = self.latency_ms
        count = len(latencies)
        if not count:
            return None
        step = max(1, count // PROGRESS_SAMPLE)
        return percentile(sorted(latencies[::step]), 0.99)

    def summary(self, count_key: str = "records_sent") -> dict[str, Any]:
        ended = self.ended if self.ended is not None else time.monotonic()
        count = len(self.latency_ms)
        elapsed = max(ended - self.started, 1e-9)
        ordered = sorted(self.latency_ms)
        return {
            count_key: count,
            "records_per_sec": count / elapsed,
            "mb_per_sec": count * self.record_size / MB / elapsed,
            "avg_latency_ms": (sum(ordered) / count) if count else 0.0,
            "max_latency_ms": ordered[-1] if count else 0.0,
            "p50_ms": percentile(ordered, 0.5),
            "p95_ms": percentile(ordered, 0.95),
            "p99_ms": percentile(ordered, 0.99),
            "p999_ms": percentile(ordered, 0.999),
            "errors": self.errors,
            "elapsed_s": elapsed,
            "record_size": self.record_size,
            "target_records_per_sec": self.rate if self.open_loop else -1,
            "latency_from": "scheduled" if self.open_loop else "send",
        }


class ClosedLoopDeliveries:
    """Delivery reports at ``--throughput -1``: latency from the produce() call to the report
    being served (``Message.latency()``), as kafka-producer-perf-test measures it.

    Only the latency and partition are kept per record, to cost no more than Kafka's own
    bookkeeping: the loop marks the time after each poll() instead (``LatencyStats.mark``).
    """

    def __init__(self, stats: LatencyStats) -> None:
        self.stats = stats
        self.latency = stats.latency_ms.append
        self.partition = stats.partitions.append

    def __call__(self, error: KafkaError | None, message: DeliveredMessage) -> None:
        if error is not None:
            self.stats.fail(error)
            return
        self.latency((message.latency() or 0.0) * 1000.0)
        self.partition(message.partition() or 0)


class OpenLoopDeliveries:
    """Delivery reports of an open-loop run: latency from record i's scheduled time i / rate
    to when its report reaches this process (the record's index is in its value's header).

    confluent-kafka's ``Message.latency()`` is also taken when the report is served, not when
    the broker answered, so the produce loop serves reports after every record it sends.
    """

    def __init__(self, stats: LatencyStats, clock: Clock = time.monotonic) -> None:
        self.stats = stats
        self.clock = clock
        self.unpack = HEADER.unpack_from

    def __call__(self, error: KafkaError | None, message: DeliveredMessage) -> None:
        stats = self.stats
        if error is not None:
            stats.fail(error)
            return
        due = self.unpack(message.value() or b"\0" * HEADER.size)[0] / stats.rate
        done = self.clock() - stats.started
        stats.sent_s.append(due)
        stats.done_s.append(done)
        stats.latency_ms.append((done - due) * 1000.0)
        stats.partitions.append(message.partition() or 0)
