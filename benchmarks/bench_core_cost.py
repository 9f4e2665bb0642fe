"""What the broker core's Python costs per Produce, in one process: no sockets, no event loop.

    python benchmarks/bench_core_cost.py                  # ~1 minute
    python benchmarks/bench_core_cost.py --runs 7 --produces 8000
    python benchmarks/bench_core_cost.py --window 1     # one Produce per settle

It drives real `BrokerCore` objects, on real files in a temporary directory, through the unit
tests' in-process cluster (tests/unit/test_broker_core.py: the metadata log, a network that
delivers what the cores send, and the daemons' part of each Ready): rounds of WINDOW one-record
Produce requests (100-byte values; 16 by default) stepped into the leader of a 1-partition
topic and settled, then everything delivered until the cluster is quiet, as a pipelining client
and the followers' parked fetches would make it. ``--window 1`` gives each Produce its own
settle and its own follower fetches, as a client with one record in flight does: the core's
cost per pass of the event loop, which the default window spreads over 16 Produces. For 1
broker with acks=1 and for 3 brokers RF=3 with acks=all (the followers' fetches and appends
counted too) it prints, per Produce:

* the bytecode instructions run in rlog.core's own functions (sys.settrace's opcode events; the
  harness, the codec's generated code and the standard library are not counted). The same code
  gives the same count every run, so a change to the core's hot path shows exactly, however busy
  the machine. It leaves out the time spent inside C calls (struct, os.write, object creation);
* this process's CPU time: the minimum and median of fresh runs. On these shared 2-core machines
  it moves by ±20% from run to run even in one process, as the brokers' own CPU does; compare two
  checkouts by running them in turn, several times each, and the minimums.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from unit.test_broker_core import PRODUCE_V, Cluster, produce_body, wire

import rlog.core
from rlog.core.broker.messages import ClientRequest
from rlog.core.protocol.apis import ApiKey
from rlog.core.records import build_batch

WINDOW = 16  # produces stepped before the cluster settles and delivers, by default
WARM_UP_ROUNDS = 50
CORE_DIR = str(Path(rlog.core.__file__).parent)  # as the code objects name their files


class Workload:
    """A fresh cluster on real files under `root`, warmed up; `one_round` steps WINDOW produces
    into the leader, settles it and delivers until the cluster is quiet."""

    def __init__(self, root: Path, brokers: tuple[int, ...], acks: int, window: int) -> None:
        self.window = window
        self.cluster = Cluster(brokers=brokers, real_files=root)
        self.cluster.run()
        self.leader_id = brokers[0]
        batch = build_batch([(None, b"x" * 100)], base_timestamp=self.cluster.now)
        self.body = wire(ApiKey.PRODUCE, PRODUCE_V, "Request", produce_body(batch, acks))
        self.tokens = count()
        for _ in range(WARM_UP_ROUNDS):
            self.one_round()
        self.cluster.answers.clear()

    def one_round(self) -> None:
        cluster, leader = self.cluster, self.cluster.cores[self.leader_id]
        for _ in range(self.window):
            token = ("client", self.leader_id, next(self.tokens), ApiKey.PRODUCE, PRODUCE_V)
            leader.step(
                ClientRequest(token, ApiKey.PRODUCE, PRODUCE_V, self.body),
                cluster.now,
                settle=False,
            )
        leader.settle(cluster.now)
        cluster.run()

    def check_answered(self, produces: int) -> None:
        answered = len(self.cluster.answers)
        if answered != produces:
            raise RuntimeError(f"{answered} of {produces} produces answered")


def measure(
    brokers: tuple[int, ...], acks: int, produces: int, count: bool, window: int = WINDOW
) -> float:
    """CPU µs per Produce over `produces` of them on a fresh cluster or, with `count`, the
    bytecode instructions the core's own functions ran per Produce (the harness's not counted)."""
    root = Path(tempfile.mkdtemp(prefix="rlog-core-cost-"))
    try:
        workload = Workload(root, brokers, acks, window)
        rounds = max(1, produces // window)
        if count:
            instructions = count_instructions(workload, rounds)
        else:
            started = time.process_time()
            for _ in range(rounds):
                workload.one_round()
            elapsed = time.process_time() - started
        workload.check_answered(rounds * window)
        return (instructions if count else elapsed * 1e6) / (rounds * window)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def count_instructions(workload: Workload, rounds: int) -> int:
    """Instructions run in frames of rlog.core's files (sys.settrace, opcode events)."""
    executed = 0

    def trace(frame: FrameType, event: str, _arg: object) -> Callable[..., object] | None:
        nonlocal executed
        if event == "call":
            if not frame.f_code.co_filename.startswith(CORE_DIR):
                return None  # the harness, the codec's generated code, the standard library
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            executed += 1
        return trace

    sys.settrace(trace)
    try:
        for _ in range(rounds):
            workload.one_round()
    finally:
        sys.settrace(None)
    return executed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh clusters per setup")
    parser.add_argument("--produces", type=int, default=6_000, help="measured per run")
    parser.add_argument(
        "--window",
        type=int,
        default=WINDOW,
        help=f"Produces stepped per settle (default {WINDOW}; 1: one per pass of the loop)",
    )
    args = parser.parse_args()
    print(
        f"broker core per one-record Produce, in process ({args.runs} runs of "
        f"{args.produces:,}, {args.window} per settle)"
    )
    for label, brokers, acks in (
        ("1 broker, acks=1", (1,), 1),
        ("3 brokers RF=3, acks=all", (1, 2, 3), -1),
    ):
        instructions = measure(brokers, acks, 800, count=True, window=args.window)
        runs = [
            measure(brokers, acks, args.produces, count=False, window=args.window)
            for _ in range(args.runs)
        ]
        print(
            f"  {label:26} {instructions:7,.0f} core bytecode instructions; CPU min "
            f"{min(runs):6.1f} µs, median {statistics.median(runs):6.1f} µs "
            f"(runs: {', '.join(f'{r:.1f}' for r in runs)})",
            flush=True,
        )


if __name__ == "__main__":
    main()
