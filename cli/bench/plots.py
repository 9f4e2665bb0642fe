"""``--plot DIR``: PNG plots of a run, drawn with matplotlib's Agg backend.

matplotlib (and numpy, which it brings) is imported only by the functions here that draw, so
``rlog`` starts as fast without it; ``require_matplotlib`` checks for it before a run starts.

    throughput.png           records completed per second over the run (the target rate dashed)
    latency_histogram.png    how many records had each latency (log-spaced bins, p50/p99/p99.9)
    latency_percentiles.png  latency by percentile, the tail spread out on a log scale as
                             HdrHistogram's plots do (90%, 99%, 99.9%, ...)
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlog.cli.bench.stats import LatencyStats, percentile
from rlog.cli.terminal import CliError, ExitCode

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.5, 100  # 800 x 450 pixels
MAX_BINS = 50  # throughput bins over the run: 1 s each, or shorter for short runs
PERCENTILE_POINTS = 2_000  # points along the percentile curve, however many records


def require_matplotlib() -> None:
    """Fail before the run, in one line, if --plot cannot be honoured."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise CliError(
            "--plot needs matplotlib, which is not installed: pip install matplotlib",
            ExitCode.FAILURE,
        ) from None


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    return figure, figure.subplots()


def _save(figure: Any, path: Path) -> Path:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path, format="png")
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}", ExitCode.FAILURE) from None
    return path


def throughput_plot(
    path: Path,
    title: str,
    done_s: Sequence[float],
    elapsed_s: float,
    target: float | None,
    weights: Sequence[int] | None = None,
) -> Path:
    """Completions per second in up to MAX_BINS bins: 1 s bins, shorter for short runs.
    ``weights``: records per entry of ``done_s`` (the consume bench's batches)."""
    import numpy as np

    width = 1.0 if elapsed_s >= MAX_BINS else max(elapsed_s / MAX_BINS, 0.01)
    edges = np.arange(0.0, max(elapsed_s, width) + width, width)
    counts, _ = np.histogram(
        np.asarray(done_s, dtype=float),
        bins=edges,
        weights=None if weights is None else np.asarray(weights, dtype=float),
    )
    figure, axes = _figure()
    axes.step(edges[:-1], counts / width, where="post", label="completed")
    if target:
        axes.axhline(target, linestyle="--", color="grey", label=f"target {target:g}/s")
    axes.set(title=title, xlabel="seconds since start", ylabel="records/s")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right")
    return _save(figure, path)


def histogram_plot(path: Path, title: str, ordered: Sequence[float]) -> Path:
    import numpy as np

    values = np.asarray(ordered, dtype=float)
    low = max(float(values[values > 0].min()) if (values > 0).any() else 1e-3, 1e-3)
    high = max(float(values.max()), low * 10)
    bins = np.logspace(math.log10(low), math.log10(high), 80)
    figure, axes = _figure()
    axes.hist(np.clip(values, low, high), bins=bins)
    for p, style in ((0.5, ":"), (0.99, "--"), (0.999, "-.")):
        value = percentile(ordered, p)
        axes.axvline(
            max(value, low), color="black", linestyle=style, label=f"p{p * 100:g} {value:.2f} ms"
        )
    axes.set(title=title, xlabel="latency (ms, log scale)", ylabel="records", xscale="log")
    axes.set_yscale("log")
    axes.grid(True, alpha=0.3)
    axes.legend()
    return _save(figure, path)


def percentile_plot(path: Path, title: str, ordered: Sequence[float]) -> Path:
    """x is 1 / (1 - p) on a log scale, so each extra nine gets as much room as the last."""
    import numpy as np

    count = len(ordered)
    spread = np.logspace(0, math.log10(max(count, 2)), PERCENTILE_POINTS)
    fractions = 1.0 - 1.0 / spread
    indexes = np.minimum((fractions * count).astype(int), count - 1)
    latencies = np.asarray(ordered, dtype=float)[indexes]
    figure, axes = _figure()
    axes.plot(spread, latencies)
    axes.set_xscale("log")
    nines = [10**k for k in range(int(math.log10(max(count, 2))) + 1)]
    axes.set_xticks(nines, [_percent_label(n) for n in nines])
    axes.set(title=title, xlabel="percentile", ylabel="latency (ms)")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    return _save(figure, path)


def _percent_label(spread: int) -> str:
    return f"{100 - 100 / spread:g}%"


def latency_plots(directory: Path, kind: str, stats: LatencyStats) -> list[Path]:
    """The three plots of a produce or e2e run (only throughput if nothing completed)."""
    elapsed = (stats.ended or 0.0) - stats.started
    what = "end-to-end latency" if kind == "e2e" else "latency"
    mode = f"open loop at {stats.rate:g}/s" if stats.open_loop else "as fast as possible"
    written = [
        throughput_plot(
            directory / "throughput.png",
            f"rlog bench {kind}: throughput ({mode})",
            stats.completion_times(),
            elapsed,
            stats.rate if stats.open_loop else None,
        )
    ]
    if stats.count:
        ordered = sorted(stats.latency_ms)
        written.append(
            histogram_plot(
                directory / "latency_histogram.png", f"rlog bench {kind}: {what}", ordered
            )
        )
        written.append(
            percentile_plot(
                directory / "latency_percentiles.png",
                f"rlog bench {kind}: {what} by percentile",
                ordered,
            )
        )
    return written
