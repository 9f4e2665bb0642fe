"""``rlog bench produce|consume|e2e`` against one real broker: open-loop rates, end-to-end
latency over several partitions, --json, --csv and --plot, and what shows while it runs (a
progress line on a terminal, Kafka's window lines otherwise)."""

from __future__ import annotations

import csv
import json
import random
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli_runner import Result, clean_env, ok, rlog, run_on_a_pty
from support.cluster import Cluster, start_cluster

pytestmark = pytest.mark.integration

WINDOW_LINE = re.compile(
    r"^\d+ records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency\.$"
)
FINAL_LINE = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, "
    r"[\d.]+ ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$"
)


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height from its IHDR chunk (and that it is a PNG at all)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def bench_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("rlog-bench") / "data", brokers=1)
    try:
        yield cluster
    finally:
        cluster.stop()


def run(cluster: Cluster, *args: str) -> Result:
    return rlog(*args, data_dir=cluster.data_dir)


def new_topic(cluster: Cluster, partitions: int = 3) -> str:
    name = f"bench-{random.randrange(1 << 30):x}"
    ok(run(cluster, "topic", "create", name, "--partitions", str(partitions)))
    return name


def test_e2e_over_three_partitions_with_csv_and_plots(
    bench_cluster: Cluster, tmp_path: Path
) -> None:
    topic = new_topic(bench_cluster)
    out_csv, plots = tmp_path / "e2e.csv", tmp_path / "plots"
    result = ok(
        run(
            bench_cluster, "bench", "e2e", "--topic", topic, "--num-records", "1500",
            "--throughput", "1500", "--acks", "all", "--producer-props", "linger.ms=1",
            "--consumer-props", "fetch.wait.max.ms=100", "--json",
            "--csv", str(out_csv), "--plot", str(plots),
        )
    )  # fmt: skip
    summary = json.loads(result.out)
    assert summary["records_received"] == summary["records_sent"] == 1500
    assert summary["records_missing"] == summary["duplicates"] == summary["errors"] == 0
    assert summary["latency_from"] == "scheduled"
    assert summary["target_records_per_sec"] == 1500
    assert 0 < summary["p50_ms"] <= summary["p99_ms"] <= summary["p999_ms"]
    assert summary["p999_ms"] <= summary["max_latency_ms"]

    with out_csv.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["sent_s", "done_s", "latency_ms", "partition"]
    assert len(rows) == 1500
    assert sorted(float(r["sent_s"]) for r in rows) == pytest.approx(
        [i / 1500 for i in range(1500)], abs=1e-6
    )  # every scheduled time once: each record consumed exactly once
    for row in rows[:50]:
        latency = (float(row["done_s"]) - float(row["sent_s"])) * 1000
        assert float(row["latency_ms"]) == pytest.approx(latency, abs=0.01)
    assert len({r["partition"] for r in rows}) >= 2  # read from several partitions
    with (tmp_path / "e2e.summary.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["records_received"]) == 1500
    assert float(row["p99_ms"]) == pytest.approx(summary["p99_ms"])
    for name in ("throughput.png", "latency_histogram.png", "latency_percentiles.png"):
        assert (plots / name).stat().st_size > 1000
        assert png_size(plots / name) == (800, 450)
    assert f"% Wrote {out_csv}" in result.err


def test_e2e_as_fast_as_possible_prints_its_line(bench_cluster: Cluster) -> None:
    topic = new_topic(bench_cluster, partitions=2)
    result = ok(run(bench_cluster, "bench", "e2e", "--topic", topic, "--num-records", "2000"))
    (line,) = result.out.splitlines()
    assert re.match(
        r"^2000 records received, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg "
        r"end-to-end latency, [\d.]+ ms max end-to-end latency, [\d.]+ ms 50th, [\d.]+ ms 95th, "
        r"[\d.]+ ms 99th, [\d.]+ ms 99\.9th\.$",
        line,
    ), line


def test_open_loop_produce_prints_window_lines_without_a_terminal(
    bench_cluster: Cluster, tmp_path: Path
) -> None:
    topic = new_topic(bench_cluster)
    result = ok(
        run(
            bench_cluster, "bench", "produce", "--topic", topic, "--num-records", "1500",
            "--throughput", "1000", "--reporting-interval", "400", "--csv",
            str(tmp_path / "p.csv"),
        )
    )  # fmt: skip
    *windows, final = result.out.splitlines()
    assert windows, result.out
    assert all(WINDOW_LINE.match(line) for line in windows), windows
    match = FINAL_LINE.match(final)
    assert match and match.group(1) == "1500", final
    assert "\r" not in result.err and "records sent" not in result.err
    with (tmp_path / "p.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1500
    # Open loop: the rate held, so 1,500 records at 1,000/s took about 1.5 s.
    assert max(float(r["sent_s"]) for r in rows) == pytest.approx(1.499, abs=1e-6)


def test_progress_line_on_a_terminal_and_a_clean_stdout(bench_cluster: Cluster) -> None:
    topic = new_topic(bench_cluster)
    code, stdout, tty = run_on_a_pty(
        ["bench", "produce", "--topic", topic, "--num-records", "2000", "--throughput", "2000",
         "--reporting-interval", "300"],
        clean_env(bench_cluster.data_dir),
    )  # fmt: skip
    assert code == 0, tty
    # stdout: only the final line, no window lines (the terminal has the progress instead).
    (final,) = stdout.splitlines()
    assert FINAL_LINE.match(final), final
    updates = re.findall(
        r"\r\x1b\[K(\d+)/2000 records sent, [\d.]+ records/sec, p99 [\d.]+ ms", tty
    )
    assert len(updates) >= 2, repr(tty)
    assert [int(n) for n in updates] == sorted(int(n) for n in updates)
    assert tty.endswith("\r\x1b[K")  # erased before the result
    assert "\n" not in tty  # one line, rewritten in place


def test_consume_bench_writes_batches_and_a_throughput_plot(
    bench_cluster: Cluster, tmp_path: Path
) -> None:
    topic = new_topic(bench_cluster, partitions=2)
    produced = ok(
        run(
            bench_cluster, "bench", "produce", "--topic", topic, "--num-records", "3000",
            "--json", "--csv", str(tmp_path / "p.csv"),
        )
    )  # fmt: skip
    assert json.loads(produced.out)["latency_from"] == "send"
    with (tmp_path / "p.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3000  # as fast as possible: due at the produce() call, done when served
    assert all(0 <= float(r["sent_s"]) <= float(r["done_s"]) for r in rows)
    result = ok(
        run(
            bench_cluster, "bench", "consume", "--topic", topic, "--messages", "3000", "--json",
            "--csv", str(tmp_path / "c.csv"), "--plot", str(tmp_path / "plots"),
        )
    )  # fmt: skip
    assert json.loads(result.out)["records"] == 3000
    with (tmp_path / "c.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["done_s", "records", "bytes"]
    assert sum(int(r["records"]) for r in rows) == 3000
    assert sum(int(r["bytes"]) for r in rows) == 3000 * 100
    assert png_size(tmp_path / "plots" / "throughput.png") == (800, 450)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["throughput.png"]
