"""``--csv FILE`` and ``--plot DIR``: a run's records and its summary, written after the run.

CSV (one row per completed record, in completion order; times in seconds since the run started):

    sent_s      when the record was due: its scheduled send time (open loop) or, at
                --throughput -1, its produce() call
    done_s      its delivery report (produce) or when the consumer got it (e2e)
    latency_ms  done_s - sent_s, in ms
    partition   the partition it went to

The consume bench writes one row per batch instead (``done_s,records,bytes``), having no
per-record latency. The summary (the --json keys, a header row and a value row) goes to FILE's
sibling with ``.summary.csv`` in place of its suffix.
"""

from __future__ import annotations

import csv
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlog.cli.bench.stats import LatencyStats
from rlog.cli.terminal import CliError, ExitCode, Terminal

RECORD_COLUMNS = ("sent_s", "done_s", "latency_ms", "partition")
BATCH_COLUMNS = ("done_s", "records", "bytes")


def summary_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.summary.csv")


def _write(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    try:
        with path.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(header)
            writer.writerows(rows)
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}", ExitCode.FAILURE) from None


def _micros(values: array[float]) -> Iterable[str]:
    return map("{:.6f}".format, values)


def write_record_csv(path: Path, stats: LatencyStats, summary: dict[str, Any]) -> None:
    rows = zip(
        _micros(stats.send_times()),
        _micros(stats.completion_times()),
        map("{:.3f}".format, stats.latency_ms),
        stats.partitions,
        strict=True,
    )
    _write(path, RECORD_COLUMNS, rows)
    _write(summary_path(path), list(summary), [list(summary.values())])


def write_batch_csv(
    path: Path,
    done_s: array[float],
    records: array[int],
    sizes: array[int],
    summary: dict[str, Any],
) -> None:
    _write(path, BATCH_COLUMNS, zip(_micros(done_s), records, sizes, strict=True))
    _write(summary_path(path), list(summary), [list(summary.values())])


def write_outputs(
    terminal: Terminal,
    kind: str,
    stats: LatencyStats,
    summary: dict[str, Any],
    csv_path: Path | None,
    plot_dir: Path | None,
) -> None:
    """The CSV and plots of a produce or e2e run, each named on stderr once written."""
    if csv_path is not None:
        write_record_csv(csv_path, stats, summary)
        terminal.note(f"% Wrote {csv_path} and {summary_path(csv_path)}")
    if plot_dir is not None:
        from rlog.cli.bench import plots  # matplotlib loads only here

        written = plots.latency_plots(plot_dir, kind, stats)
        terminal.note(f"% Wrote {', '.join(str(p) for p in written)}")
