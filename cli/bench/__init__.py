"""``rlog bench produce|consume|e2e``: kafka-producer-perf-test, kafka-consumer-perf-test, and
an end-to-end latency run.

Same flags and lines as Kafka's tools, plus open-loop rates (latency from each record's scheduled
send time), percentiles, a progress line on a terminal, ``--csv`` and ``--plot``. The modules:
``produce``, ``consume``, ``e2e`` (the commands), ``stats`` (per-record arrays, percentiles,
window lines), ``progress`` (progress line or window lines), ``output`` (CSV), ``plots`` (PNGs,
matplotlib imported only there), ``common`` (flags, payloads, clients).
"""

from __future__ import annotations

import typer

from rlog.cli.bench.common import MULTI_VALUE_FLAGS, expand_multi_value_flags
from rlog.cli.bench.consume import bench_consume
from rlog.cli.bench.e2e import bench_e2e
from rlog.cli.bench.produce import bench_produce

__all__ = ["MULTI_VALUE_FLAGS", "app", "expand_multi_value_flags"]

app = typer.Typer(
    help="Measure produce, consume and end-to-end throughput and latency.",
    no_args_is_help=True,
)
app.command("produce")(bench_produce)
app.command("consume")(bench_consume)
app.command("e2e")(bench_e2e)
