"""rlog bench without a broker: open-loop latency accounting on a fake clock and producer,
percentiles, window and progress lines, CSV and PNG output, and its one-line errors."""

from __future__ import annotations

import csv
import io
import struct
import sys
from pathlib import Path

import pytest

from rlog.cli.bench import app, expand_multi_value_flags
from rlog.cli.bench.common import HEADER, payload
from rlog.cli.bench.output import RECORD_COLUMNS, summary_path, write_record_csv
from rlog.cli.bench.produce import produce_paced
from rlog.cli.bench.progress import Reporter
from rlog.cli.bench.stats import (
    ClosedLoopDeliveries,
    LatencyStats,
    OpenLoopDeliveries,
    percentile,
)
from rlog.cli.progress import CLEAR
from support.cli_runner import RLOG, clean_env

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height from its IHDR chunk (and that it is a PNG at all)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 1e-9)  # a real sleep always moves the clock on


class FakeMessage:
    def __init__(self, value: bytes, latency: float) -> None:
        self._value, self._latency = value, latency

    def value(self) -> bytes:
        return self._value

    def latency(self) -> float:
        return self._latency

    def partition(self) -> int:
        return 0


class FakeProducer:
    """Acknowledges each record ``ack_s`` after its produce() call; right after the call for
    record ``stall_at`` the client is descheduled for ``stall_s`` (a GC pause, say)."""

    def __init__(
        self, clock: FakeClock, on_delivery, ack_s: float, stall_at: int, stall_s: float
    ) -> None:
        self.clock, self.on_delivery = clock, on_delivery
        self.ack_s, self.stall_at, self.stall_s = ack_s, stall_at, stall_s
        self.pending: list[tuple[float, float, bytes]] = []  # (ack time, produce time, value)
        self.produced = 0
        self.values: list[bytes] = []
        self.call_to_ack: list[float] = []  # the broker's side of each record's latency

    def produce(self, topic: str, value: bytes) -> None:
        self.pending.append((self.clock.now + self.ack_s, self.clock.now, value))
        self.values.append(value)
        if self.produced == self.stall_at:
            self.clock.now += self.stall_s
        self.produced += 1

    def poll(self, timeout: float) -> int:
        if timeout > 0 and self.pending:
            self.clock.now = min(self.clock.now + timeout, max(self.clock.now, self.pending[0][0]))
        elif timeout > 0:
            self.clock.now += timeout
        served = 0
        while self.pending and self.pending[0][0] <= self.clock.now + 1e-9:  # float sums
            acked_at, produced_at, value = self.pending.pop(0)
            self.call_to_ack.append(acked_at - produced_at)
            self.on_delivery(None, FakeMessage(value, self.clock.now - produced_at))
            served += 1
        return served

    def flush(self) -> None:
        while self.pending:
            self.poll(1.0)


def test_open_loop_counts_a_client_stall_as_latency() -> None:
    """At 1,000 records/s a 100 ms stall delays the ~100 records due during it: each one's
    latency counts from its scheduled time, so the stall shows in p99, though every record
    was acknowledged 1 ms after its produce() call (all a closed-loop bench would see)."""
    clock = FakeClock()
    stats = LatencyStats(100, rate=1000.0)
    stats.start(clock())
    producer = FakeProducer(
        clock, OpenLoopDeliveries(stats, clock), ack_s=0.001, stall_at=499, stall_s=0.1
    )
    produce_paced(
        producer, "t", payload(100), 1000, stats, lambda now: None, clock=clock, sleep=clock.sleep
    )
    producer.flush()

    assert stats.count == 1000
    assert max(producer.call_to_ack) == pytest.approx(0.001)
    assert list(stats.sent_s) == pytest.approx([i / 1000 for i in range(1000)])
    latencies = list(stats.latency_ms)
    assert latencies[:499] == pytest.approx([1.0] * 499)
    # Record 499's report waited out the stall; 500 was due at 0.500, sent at 0.599, and so
    # on down: ~100 records late, by 100 ms down to 1 ms.
    assert latencies[499] == pytest.approx(100.0, abs=0.5)
    assert latencies[500] == pytest.approx(100.0, abs=0.5)
    late = [latency for latency in latencies if latency > 1.5]
    assert 95 <= len(late) <= 102
    summary = stats.summary()
    assert summary["p50_ms"] == pytest.approx(1.0)
    assert summary["p99_ms"] > 85
    assert summary["latency_from"] == "scheduled"
    assert summary["target_records_per_sec"] == 1000.0
    # The loop kept to the schedule after the stall: record i was produced at i / rate.
    assert clock.now - stats.started == pytest.approx(1.0, abs=0.01)


def test_open_loop_headers_carry_the_index_and_scheduled_time() -> None:
    clock = FakeClock()
    stats = LatencyStats(32, rate=10.0)
    stats.start(clock())
    producer = FakeProducer(clock, lambda *_: None, ack_s=0.001, stall_at=-1, stall_s=0)
    produce_paced(
        producer, "t", payload(32), 3, stats, lambda now: None, clock=clock, sleep=clock.sleep
    )
    values = producer.values
    assert [HEADER.unpack_from(v) for v in values] == [
        (i, stats.started_wall_ns + i * 100_000_000) for i in range(3)
    ]
    assert all(len(v) == 32 and v[16:] == payload(32)[16:] for v in values)


def test_closed_loop_times_reports_by_the_poll_that_served_them() -> None:
    """At -1 only latency and partition are kept per record; completion times come from the
    marks the loop leaves after each poll(), and send times from those less the latency."""
    stats = LatencyStats(100)
    stats.start(10.0)
    deliveries = ClosedLoopDeliveries(stats)
    for latency in (0.002, 0.003):
        deliveries(None, FakeMessage(b"", latency))
    stats.mark(10.5)
    stats.mark(10.6)  # nothing new served: no mark
    deliveries(None, FakeMessage(b"", 0.004))
    stats.ended = 11.0
    stats.mark(stats.ended)
    assert list(stats.completion_times()) == [0.5, 0.5, 1.0]
    assert list(stats.send_times()) == pytest.approx([0.498, 0.497, 0.996])
    assert list(stats.latency_ms) == pytest.approx([2.0, 3.0, 4.0])
    assert stats.summary()["latency_from"] == "send"


def test_percentiles_follow_kafka_and_summary_has_them() -> None:
    stats = LatencyStats(10)
    for i in range(1, 1001):
        stats.add(sent_s=0.0, done_s=i / 1000, partition=0)
    stats.ended = stats.started + 2.0
    s = stats.summary()
    assert (s["p50_ms"], s["p95_ms"], s["p99_ms"], s["p999_ms"]) == pytest.approx(
        (501, 951, 991, 1000)
    )
    assert s["records_sent"] == 1000 and s["records_per_sec"] == pytest.approx(500)
    assert s["latency_from"] == "send"
    assert percentile([], 0.99) == 0.0


def test_window_line_is_kafkas() -> None:
    stats = LatencyStats(100)
    stats.start(10.0)
    for latency in (1.0, 2.0, 6.0):
        stats.add(0.0, latency / 1000, 0)
    assert stats.window_line(12.0) == (
        "3 records sent, 1.5 records/sec (0.00 MB/sec), 3.0 ms avg latency, 6.0 ms max latency."
    )
    assert stats.window_line(13.0) is None  # nothing new: the window goes on


def _reporter(stats: LatencyStats, stream: io.StringIO, tty: bool, emitted: list[str]):
    return Reporter(
        stream,
        started=stats.started,
        total=10,
        verb="sent",
        count=lambda: stats.count,
        p99=stats.p99_so_far,
        window=stats.window_line,
        window_s=5.0,
        emit=emitted.append,
        tty=tty,
    )


def test_progress_line_on_a_terminal_window_lines_otherwise() -> None:
    stats = LatencyStats(100)
    stats.start(0.0)
    for i in range(4):
        stats.add(0.0, (i + 1) / 1000, 0)
    tty_stream, emitted = io.StringIO(), []
    tty = _reporter(stats, tty_stream, True, emitted)
    tty.tick(0.1)  # too soon
    tty.tick(2.0)
    tty.finish()
    assert tty_stream.getvalue() == (
        f"{CLEAR}4/10 records sent, 2.0 records/sec, p99 4.00 ms{CLEAR}"
    )
    assert emitted == []

    stream, emitted = io.StringIO(), []
    plain = _reporter(stats, stream, False, emitted)
    plain.tick(2.0)
    plain.tick(5.0)
    plain.finish()
    assert stream.getvalue() == ""
    assert emitted == [
        "4 records sent, 0.8 records/sec (0.00 MB/sec), 2.5 ms avg latency, 4.0 ms max latency."
    ]


def test_csv_and_plots_of_a_run(tmp_path: Path) -> None:
    from rlog.cli.bench import plots

    stats = LatencyStats(100, rate=500.0)
    stats.start(0.0)
    for i in range(500):
        stats.add(i / 500, i / 500 + 0.001 + (i % 100) / 10_000, i % 3)
    stats.ended = 1.0
    summary = stats.summary()
    write_record_csv(tmp_path / "run.csv", stats, summary)
    with (tmp_path / "run.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == RECORD_COLUMNS == ("sent_s", "done_s", "latency_ms", "partition")
    assert len(rows) == 500
    assert rows[1] == {
        "sent_s": "0.002000",
        "done_s": "0.003100",
        "latency_ms": "1.100",
        "partition": "1",
    }
    with summary_path(tmp_path / "run.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert summary_path(tmp_path / "run.csv").name == "run.summary.csv"
    assert float(row["p99_ms"]) == pytest.approx(summary["p99_ms"])
    assert row["latency_from"] == "scheduled"

    written = plots.latency_plots(tmp_path / "plots", "produce", stats)
    assert [p.name for p in written] == [
        "throughput.png",
        "latency_histogram.png",
        "latency_percentiles.png",
    ]
    for path in written:
        assert path.stat().st_size > 1000
        assert png_size(path) == (800, 450)


def test_bench_package_keeps_what_app_py_imports() -> None:
    assert {c.name for c in app.registered_commands} == {"produce", "consume", "e2e"}
    assert expand_multi_value_flags(["--producer-props", "a=1", "b=2", "--x"]) == [
        "--producer-props", "a=1", "--producer-props", "b=2", "--x",
    ]  # fmt: skip


def _run(args: list[str], tmp_path: Path, env_extra: dict[str, str] | None = None):
    import subprocess

    env = clean_env(tmp_path / "no-cluster")
    env.update(env_extra or {})
    return subprocess.run(
        [*RLOG, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def test_plot_without_matplotlib_is_one_line(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    done = _run(
        ["bench", "e2e", "--topic", "t", "--num-records", "1", "--plot", str(tmp_path / "p")],
        tmp_path,
        {"PYTHONPATH": f"{tmp_path / 'shadow'}:{':'.join(sys.path)}"},
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "rlog: error: --plot needs matplotlib, which is not installed: pip install matplotlib"
    ]


def test_open_loop_needs_room_for_the_header(tmp_path: Path) -> None:
    done = _run(
        ["bench", "produce", "--topic", "t", "--num-records", "1", "--record-size", "8",
         "--throughput", "100"],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "--record-size must be at least 16" in lines[0], done.stderr
